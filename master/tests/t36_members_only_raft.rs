//! Members-only Raft: the probes of issue 14, replayed. Anyone who reached a
//! master's port could forge an AppendEntries carrying a command (it was
//! committed on every master) or keep the cluster in elections with forged
//! votes: the cluster id that messages carry is a hash of public data. Now
//! every Raft request carries a MAC under the cluster secret, which only the
//! cluster's masters hold; these forgeries are refused and change nothing.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use mooncake_auth::ClusterSecret;
use mooncake_proto::raft::raft_service_client::RaftServiceClient;
use mooncake_proto::raft::{HeardFromRequest, RaftMessage};
use mooncake_raft_store::{Command, CredentialHash, Request, SegmentSpec, Tier, TypeConfig, codec};
use mooncake_segment::{ClientId, SegmentId};
use mooncake_testkit::Cluster;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const T: Duration = Duration::from_secs(15);

async fn raft_client(addr: &str) -> RaftServiceClient<tonic::transport::Channel> {
    RaftServiceClient::connect(format!("http://{addr}")).await.expect("connect to a master's raft service")
}

/// A message as an attacker who knows the public cluster id sends it,
/// with `mac` (empty, or made with some other secret).
fn forged(cluster_id: &str, data: Vec<u8>, mac: Vec<u8>) -> RaftMessage {
    RaftMessage { data, error: String::new(), cluster_id: cluster_id.to_string(), mac }
}

#[tokio::test]
async fn forged_raft_messages_are_refused_and_change_nothing() {
    let cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    let (leader, term) = cluster.wait_for_leader(T).await;
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    let members: BTreeMap<u64, String> = cluster.ids().into_iter().zip(cluster.addrs()).collect();
    // Public: the default cluster name and the founding members.
    let cluster_id = mooncake_master::founding_id("mooncake", &members);
    let before = cluster.info(follower).await.expect("follower info");
    let mut c = raft_client(&members[&follower]).await;

    // 1. An AppendEntries in the leader's name, right after the follower's
    //    last entry, committing a command (a segment the attacker controls).
    let last = LogId::new(CommittedLeaderId::new(before.term, leader), before.last_log_index);
    let next = LogId::new(CommittedLeaderId::new(before.term, leader), before.last_log_index + 1);
    let spec = SegmentSpec {
        id: SegmentId(0xbad),
        size_bytes: 1 << 30,
        endpoint: "203.0.113.9:1".into(),
        host_id: "attacker".into(),
        zone: String::new(),
        tier: Tier::Dram,
        shm_path: String::new(),
    };
    let entry = Entry::<TypeConfig> {
        log_id: next,
        payload: EntryPayload::Normal(Request {
            ts_ms: 0,
            cmd: Command::MountSegment {
                client: ClientId(0xbad),
                credential: CredentialHash([0xba; 32]),
                segment: spec,
            },
        }),
    };
    let append = openraft::raft::AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(before.term, leader),
        prev_log_id: Some(last),
        entries: vec![entry],
        leader_commit: Some(next),
    };
    let data = codec::encode("forged append", &append).expect("encode");
    let other_secret = {
        let dir = tempfile::tempdir().expect("tmp");
        ClusterSecret::load(dir.path(), None, true).expect("a secret of another cluster").0
    };
    let wrong_mac = mooncake_master::raft_mac(&other_secret.key("raft"), "append_entries", &cluster_id, &data);
    for mac in [Vec::new(), vec![0; 32], wrong_mac] {
        let refused = c.append_entries(forged(&cluster_id, data.clone(), mac)).await.expect_err("a forged append");
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    }
    // The same forgeries over the stream leaders send AppendEntries on: the
    // stream ends with the refusal.
    for mac in [Vec::new(), vec![0; 32]] {
        let messages = futures::stream::iter([forged(&cluster_id, data.clone(), mac)]);
        let mut answers = c.append_entries_stream(messages).await.expect("a stream opens").into_inner();
        let refused = answers.message().await.expect_err("a forged append on the stream");
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    }

    // 2. A loop of forged votes for ever higher terms.
    for t in term + 1..term + 21 {
        let vote = openraft::raft::VoteRequest::<u64> {
            vote: Vote::new(t, follower),
            last_log_id: Some(LogId::new(CommittedLeaderId::new(t, follower), before.last_log_index + 1000)),
        };
        let data = codec::encode("forged vote", &vote).expect("encode");
        let refused = c.vote(forged(&cluster_id, data, Vec::new())).await.expect_err("a forged vote");
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    }

    // 3. HeardFrom without the secret.
    let refused = c.heard_from(HeardFromRequest { node_id: 7, mac: Vec::new() }).await.expect_err("forged");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    // Nothing changed: same leader, same term, no foreign segment; the
    // replicas agree. (Waits for the follower to apply what the leader had
    // committed when we began.)
    let after = mooncake_testkit::wait_until("the follower to catch up", T, || async {
        let f = cluster.info(follower).await?;
        let l = cluster.info(leader).await?;
        (f.applied_index == l.applied_index && f.applied_index >= before.applied_index).then_some((f, l))
    })
    .await;
    let (f, l) = after;
    assert_eq!((l.leader_id, l.term), (leader, term), "the forged votes moved nobody");
    assert_eq!(f.term, term);
    assert_eq!(f.segment_count, 0, "no forged segment was mounted");
    assert_eq!(f.state_hash, l.state_hash);

    // The control: a request made with the cluster's own secret is served.
    let file = cluster.inner.dir().join("cluster.secret");
    let dir = tempfile::tempdir().expect("tmp");
    let ours = ClusterSecret::load(dir.path(), Some(&file), false).expect("the cluster's secret").0;
    let mac = ours.key("raft").sign(&[b"heard_from", &7u64.to_le_bytes()]);
    let answer = c.heard_from(HeardFromRequest { node_id: 7, mac }).await.expect("a member's request");
    assert_eq!(answer.into_inner().cluster_id, cluster_id);
}

/// With mutual TLS, a Raft request must also come from a certificate that
/// names a master of the cluster: a client's certificate (same CA) is
/// refused even with a valid MAC; a master's is served.
#[tokio::test]
async fn with_tls_only_master_certificates_may_speak_raft() {
    let cluster = Cluster::builder().masters(3).master_bin(BIN).tls().start();
    cluster.wait_for_leader(T).await;
    let addr = cluster.addrs()[0].clone();
    let file = cluster.inner.dir().join("cluster.secret");
    let dir = tempfile::tempdir().expect("tmp");
    let secret = ClusterSecret::load(dir.path(), Some(&file), false).expect("the cluster's secret").0;
    let mac = secret.key("raft").sign(&[b"heard_from", &7u64.to_le_bytes()]);
    let ask = |role| {
        let tls = cluster.inner.tls_config(role).expect("tls files").expect("a TLS cluster");
        let (addr, mac) = (addr.clone(), mac.clone());
        async move {
            let ch = mooncake_tls::grpc::endpoint(&addr, Some(&tls)).expect("endpoint").connect().await.expect("tls");
            RaftServiceClient::new(ch).heard_from(HeardFromRequest { node_id: 7, mac }).await
        }
    };
    let refused = ask(mooncake_tls::Role::Client).await.expect_err("a client certificate");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("only from masters"), "{refused:?}");
    // Nor may a client's certificate open the AppendEntries stream.
    let tls = cluster.inner.tls_config(mooncake_tls::Role::Client).expect("tls files").expect("a TLS cluster");
    let ch = mooncake_tls::grpc::endpoint(&addr, Some(&tls)).expect("endpoint").connect().await.expect("tls");
    let refused = RaftServiceClient::new(ch)
        .append_entries_stream(futures::stream::empty::<RaftMessage>())
        .await
        .expect_err("a client certificate opening the stream");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    ask(mooncake_tls::Role::Master { id: 2 }).await.expect("a member's certificate");
    // Master 4 (a spare) has a certificate of the same CA, but is no member.
    let refused = ask(mooncake_tls::Role::Master { id: 4 }).await.expect_err("not a member");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("not a member"), "{refused:?}");
}
