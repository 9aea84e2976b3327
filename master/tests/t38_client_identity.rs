//! Client identity: the probes of issue 14 against a store node's client id.
//! Client ids are public (ListClients, GetClusterInfo); a caller naming one
//! used to be able to unmount the node's segment, keep a dead node alive with
//! pings, and, worst, remount the node's segment under its id and be handed
//! the segment's capability key. Now every such call carries the caller's
//! credential, and the masters keep the hash of the one that registered the
//! id: another credential is refused with PERMISSION_DENIED and changes
//! nothing (no key, no heartbeat), the owner's own calls work, and once the
//! registration is evicted (or expires) a new credential may take the id.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_auth::Credential;
use mooncake_client::{MasterClient, MasterClientConfig, MasterError};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{MountSegmentRequest, RemountSegmentRequest, Segment};
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const T: Duration = Duration::from_secs(15);
/// The store node's client id.
const NODE: u64 = 0x5701;

fn segment(id: u64) -> Segment {
    Segment { id, size: 1 << 20, endpoint: "127.0.0.1:1".into(), host_id: "h1".into(), ..Default::default() }
}

/// A client process of its own: its own credential.
fn process(cluster: &Cluster) -> MasterClient {
    let credential = Some(Credential::random().expect("randomness"));
    MasterClient::new(MasterClientConfig { credential, ..MasterClientConfig::new(cluster.addrs()) }).expect("client")
}

fn denied<T: std::fmt::Debug>(what: &str, r: Result<T, MasterError>) {
    let e = r.expect_err(what);
    assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{what}: {e}");
    assert!(e.to_string().contains("another process"), "{what}: the message says why: {e}");
}

/// The leader's state hash (replicated state: segments, clients, credentials).
async fn state_hash(cluster: &Cluster) -> u64 {
    let (leader, _) = cluster.wait_for_leader(T).await;
    let addr = cluster.addrs()[(leader - 1) as usize].clone();
    cluster.client().cluster_info_with_hash_of(&addr).await.expect("info").state_hash
}

/// Milliseconds since the leader last heard from `client`, and its segments.
async fn seen(cluster: &Cluster, client: u64) -> Option<(u64, Vec<u64>)> {
    let clients = cluster.client().list_clients().await.expect("list clients");
    clients.into_iter().find(|c| c.id == client).map(|c| (c.last_heartbeat_ms_ago, c.segments))
}

#[tokio::test]
async fn another_process_cannot_act_as_a_store_nodes_client_id() {
    let cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    cluster.wait_for_leader(T).await;
    let node = process(&cluster);
    let intruder = process(&cluster);
    let keys = node.remount_segments(NODE, vec![segment(1)]).await.expect("the node registers");
    assert_eq!(keys.len(), 1, "the owner gets its segment's key");
    let before = state_hash(&cluster).await;

    // Phase 1: the probes, each refused and changing nothing.
    denied("Unmount of the node's segment", intruder.unmount_segment(NODE, 1).await);
    denied("Ping as the node", intruder.ping(NODE).await);
    denied("Remount as the node", intruder.remount_segments(NODE, vec![segment(1)]).await);
    denied("Mount as the node", intruder.mount_segment(NODE, segment(2)).await);
    // The refused answers carry no key (read raw: the typed calls drop them).
    let credential = intruder.credential().as_bytes().to_vec();
    let remount = RemountSegmentRequest {
        client_id: NODE,
        segments: vec![segment(1)],
        credential: credential.clone(),
        ..Default::default()
    };
    let r = intruder
        .call(|mut c| {
            let req = remount.clone();
            async move { c.remount_segment(req).await }
        })
        .await
        .expect("answer")
        .reply;
    assert_eq!(r.status.as_ref().map(|s| s.error_code()), Some(ErrorCode::PermissionDenied));
    assert!(r.segment_keys.is_empty(), "a refused remount leaked the segment's key");
    let mount = MountSegmentRequest { client_id: NODE, segment: Some(segment(1)), credential, ..Default::default() };
    let r = intruder
        .call(|mut c| {
            let req = mount.clone();
            async move { c.mount_segment(req).await }
        })
        .await
        .expect("answer")
        .reply;
    assert_eq!(r.status.as_ref().map(|s| s.error_code()), Some(ErrorCode::PermissionDenied));
    assert!(r.segment_keys.is_empty(), "a refused mount leaked the segment's key");
    assert_eq!(state_hash(&cluster).await, before, "a refused call changed the state");
    assert_eq!(seen(&cluster, NODE).await.map(|(_, s)| s), Some(vec![1]), "the node keeps its segment");

    // Phase 2: another process's pings do not keep the node alive.
    node.ping(NODE).await.expect("the node pings");
    for _ in 0..10 {
        denied("Ping as the node", intruder.ping(NODE).await);
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let (silent_ms, _) = seen(&cluster, NODE).await.expect("registered");
    assert!(silent_ms >= 500, "the intruder's pings refreshed the node's heartbeat ({silent_ms} ms ago)");

    // Phase 3: the owner's own calls work, and its remount gets the key again.
    assert!(node.ping(NODE).await.expect("the node pings"), "the node is known");
    let again = node.remount_segments(NODE, vec![segment(1), segment(3)]).await.expect("the node remounts");
    assert_eq!(again.iter().map(|k| k.segment_id).collect::<Vec<_>>(), vec![1, 3]);
    assert_eq!(again[0].key, keys[0].key, "the same segment, the same key");
    node.unmount_segment(NODE, 3).await.expect("the node unmounts its own segment");
    assert_eq!(seen(&cluster, NODE).await.map(|(_, s)| s), Some(vec![1]));

    // Phase 4: once an admin evicts the registration, a new credential may
    // take the id (a store node restarted without its credential file), and
    // then the old one is the stranger.
    cluster.client().evict_client(NODE).await.expect("the admin evicts the node");
    let keys = intruder.remount_segments(NODE, vec![segment(4)]).await.expect("the id is free");
    assert_eq!(keys.len(), 1);
    denied("Remount by the evicted process", node.remount_segments(NODE, vec![segment(1)]).await);
    assert_eq!(seen(&cluster, NODE).await.map(|(_, s)| s), Some(vec![4]));
}

#[tokio::test]
async fn an_expired_registration_frees_the_id_for_a_new_credential() {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).arg("--client_ttl=2").start();
    cluster.wait_for_leader(T).await;
    let (old, new) = (process(&cluster), process(&cluster));
    old.remount_segments(NODE, vec![segment(1)]).await.expect("the first process registers");
    denied("Remount by a second process", new.remount_segments(NODE, vec![segment(2)]).await);

    // The first process stops pinging; the second keeps trying at its
    // heartbeat pace, which refreshes nothing, so the old registration
    // expires after client_ttl and the second takes the id.
    let keys = wait_until("the old registration to expire and the id to be taken", T, || async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        match new.remount_segments(NODE, vec![segment(2)]).await {
            Ok(keys) => Some(keys),
            Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => None,
            Err(e) => panic!("remount: {e}"),
        }
    })
    .await;
    assert_eq!(keys.len(), 1);
    assert!(new.ping(NODE).await.expect("ping"), "the new process is the client now");
    denied("Ping by the expired process", old.ping(NODE).await);
}

/// PutStart, PutEnd and PutRevoke act as their writer: another process
/// naming a registered writer's id can neither revoke its put in flight nor
/// end it (with a checksum of its own), nor start one as it.
#[tokio::test]
async fn another_process_cannot_revoke_or_end_a_writers_put() {
    use mooncake_proto::master::{PutEndRequest, PutStartRequest};
    const WRITER: u64 = 0x5702;
    let cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    cluster.wait_for_leader(T).await;
    let node = process(&cluster);
    node.remount_segments(NODE, vec![segment(1)]).await.expect("a segment to put on");
    let writer = process(&cluster);
    writer.remount_segments(WRITER, vec![]).await.expect("the writer registers");
    let intruder = process(&cluster);
    let start =
        PutStartRequest { client_id: WRITER, key: "k".into(), size: 4096, replica_num: 1, ..Default::default() };
    let replicas = writer.put_start(start.clone()).await.expect("the writer's own PutStart");
    let write_denied = |what: &str, e: MasterError| {
        assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{what}: {e}");
        assert!(e.to_string().contains("write only as itself"), "{what}: {e}");
    };
    write_denied("PutRevoke as the writer", intruder.put_revoke(WRITER, "k").await.expect_err("refused"));
    let forged = PutEndRequest {
        client_id: WRITER,
        key: "k".into(),
        size: 4096,
        checksum: 0xbad,
        replicas: replicas.clone(),
        ..Default::default()
    };
    write_denied("PutEnd as the writer", intruder.put_end_with(forged).await.expect_err("refused"));
    let other = PutStartRequest { key: "k2".into(), ..start };
    write_denied("PutStart as the writer", intruder.put_start(other).await.expect_err("refused"));
    // The writer's put was untouched: it ends with its own checksum.
    let end =
        PutEndRequest { client_id: WRITER, key: "k".into(), size: 4096, checksum: 7, replicas, ..Default::default() };
    writer.put_end_with(end).await.expect("the writer ends its own put");
}
