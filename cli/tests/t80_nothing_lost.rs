//! Faults and callers that used to lose objects nobody asked to lose
//! (issue 23): a put asking for more replicas than there are segments, a
//! pause of the master past the client TTL, and forced removals by clients
//! that are not admins. Each test would fail on the build before the fix
//! (the pause test also runs the planted bug and sees it lose objects).
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_client::{Client, ClientConfig, ClientError, PutOptions, PutOutcome};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::BatchRemoveRequest;
use mooncake_testkit::{Cluster, Role, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");

/// Object bytes that tell every object (and its writer's put) apart.
fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

fn code(e: &ClientError) -> Option<ErrorCode> {
    match e {
        ClientError::Master(m) => m.code(),
        ClientError::PutRevoked(inner) => code(inner),
        _ => None,
    }
}

/// Puts `n` objects `obj/<i>` of `len` bytes, one replica each.
async fn fill(client: &Client, n: usize, len: usize) -> Vec<(String, Vec<u8>)> {
    let values: Vec<(String, Vec<u8>)> = (0..n).map(|i| (format!("obj/{i}"), value(i, len))).collect();
    for (k, v) in &values {
        let stored = client.put(k, v, &PutOptions { replicas: 1, ..Default::default() }).await;
        assert!(matches!(stored, Ok(PutOutcome::Stored)), "{k}: {stored:?}");
    }
    values
}

/// Every one of `values` reads back with its bytes.
async fn all_readable(client: &Client, values: &[(String, Vec<u8>)]) -> usize {
    let keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
    let got = client.get_batch(&keys).await;
    got.iter().zip(values).filter(|(g, (_, v))| g.as_ref().is_ok_and(|g| g == v)).count()
}

/// One put with `replica_num` 3 on 2 store nodes used to run the put's
/// eviction rounds first (no third segment ever had room) and empty the
/// cache before it stored the object with 2 replicas. Now it places the 2
/// replicas there is room for and evicts nothing; one that insists on 3
/// (`min_replicas`) is refused at once, also evicting nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_asking_for_more_replicas_than_segments_evicts_nothing() {
    // A short KV lease: a new leader counts every object as leased (not
    // evictable) for one lease TTL, and this test runs within seconds of
    // the election.
    let cluster = Cluster::builder()
        .masters(1)
        .stores(2)
        .segment_size("32MiB")
        .binary(BIN)
        .arg("--default_kv_lease_ttl=100")
        .start();
    cluster.wait_for_segments(2, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let values = fill(&client, 60, 256 << 10).await;

    let three = value(1_000, 256 << 10);
    let stored = client.put("three", &three, &PutOptions { replicas: 3, ..Default::default() }).await;
    assert!(matches!(stored, Ok(PutOutcome::Stored)), "{stored:?}");
    let replicas = client.master().get_replica_list(client.client_id(), "three").await.expect("replica list");
    assert_eq!(replicas.replicas.len(), 2, "one replica on each of the two segments");
    assert_eq!(client.get("three").await.expect("get three"), three);
    assert_eq!(all_readable(&client, &values).await, 60, "every object stays");

    let strict = PutOptions { replicas: 3, min_replicas: 3, ..Default::default() };
    let refused = client.put("strict", &three, &strict).await.expect_err("3 replicas on 2 segments");
    assert_eq!(code(&refused), Some(ErrorCode::NoAvailableHandle), "{refused}");
    assert!(refused.to_string().contains("only 2 memory segments"), "{refused}");

    assert_eq!(all_readable(&client, &values).await, 60, "every object stays after the refusal too");
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(5)).await;
    assert_eq!(cluster.metric(leader, "mooncake_evicted_objects_total"), 0.0);
    client.close().await;
}

/// A full cache makes room for a put on the segments it places the put on,
/// about the put's size on each: a few objects go, not the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_into_a_full_cache_evicts_about_its_own_size() {
    // A short KV lease: a new leader counts every object as leased for one
    // lease TTL, and this cache is filled within seconds of the election.
    let cluster = Cluster::builder()
        .masters(1)
        .stores(2)
        .segment_size("16MiB")
        .binary(BIN)
        .arg("--default_kv_lease_ttl=100")
        .start();
    cluster.wait_for_segments(2, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    // 2 x 16 MiB, filled to the last MiB with 1 MiB objects.
    let values = fill(&client, 30, 1 << 20).await;
    let big = value(2_000, 2 << 20);
    let stored = client.put("big", &big, &PutOptions { replicas: 2, ..Default::default() }).await;
    assert!(matches!(stored, Ok(PutOutcome::Stored)), "{stored:?}");
    assert_eq!(client.get("big").await.expect("get big"), big);
    let left = all_readable(&client, &values).await;
    eprintln!("{left} of 30 objects left after the put");
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let evicted = cluster.metric(leader, "mooncake_evicted_objects_total");
    assert_eq!(left as f64 + evicted, 30.0, "an object is evicted or readable");
    // 2 MiB on each of 2 segments: 4 objects would do; the bound is the
    // put's rounds (1x, 2x, 4x, 8x its size on each), far below the cache.
    assert!(left >= 20, "only {left} of 30 objects left: the put evicted {evicted}");
    client.close().await;
}

/// A full cache (30 objects of 1 MiB on 2 x 16 MiB, one replica each) whose
/// leader was killed after the fill, with the new leader elected.
struct FullAfterFailover {
    cluster: Cluster,
    client: Client,
    values: Vec<(String, Vec<u8>)>,
    leader: u64,
}

async fn full_cache_after_a_failover() -> FullAfterFailover {
    // The default capability TTL (60 s): by their age alone, the objects'
    // bytes could leave the old leader's arenas only 71 s after their
    // commit (arena_cuts.rs), far beyond these tests; they leave once the
    // new leader took those arenas back from the store nodes. The fill
    // (30 of 32 MiB) stays under the high watermark: the old leader's
    // eviction duty must not evict objects whose count dies with it.
    let mut cluster = Cluster::builder()
        .masters(3)
        .stores(2)
        .segment_size("16MiB")
        .binary(BIN)
        .arg("--default_kv_lease_ttl=100")
        .arg("--eviction_high_watermark_ratio=0.99")
        .start();
    cluster.wait_for_segments(2, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let values = fill(&client, 30, 1 << 20).await;
    let (old, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    cluster.kill(old);
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    assert_ne!(leader, old);
    FullAfterFailover { cluster, client, values, leader }
}

/// The same right after a failover: every object of the full cache lives
/// in arenas the dead leader granted, which the new leader may not reuse
/// whole until the release timeout (10 minutes: a put of the old leader may
/// still be writing there). What eviction freed there used to stay
/// unusable, so the put evicted up to 15x its size on each segment, found no
/// room still, and failed: one put emptied the cache. Now the new leader
/// takes the old arenas back from their store nodes at once (no WRITE
/// under them lands any more), evicts there once they are, and cuts the
/// evicted bytes out of the old arena: the put is stored within seconds,
/// not after the objects' 71 s by age (the default capability TTL and
/// clock skews), and evicts about its own size. Without the take-back
/// the put is refused past the 20 s this waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_into_a_full_cache_after_a_failover_evicts_about_its_own_size() {
    let FullAfterFailover { cluster, client, values, leader } = full_cache_after_a_failover().await;
    let big = value(2_000, 2 << 20);
    let refused = std::cell::Cell::new(0);
    wait_until("the put after the failover", Duration::from_secs(20), || async {
        match client.put("big", &big, &PutOptions { replicas: 2, ..Default::default() }).await {
            Ok(PutOutcome::Stored) => Some(()),
            _ => {
                refused.set(refused.get() + 1);
                None
            }
        }
    })
    .await;
    assert_eq!(client.get("big").await.expect("get big"), big);
    let left = all_readable(&client, &values).await;
    let evicted = cluster.metric(leader, "mooncake_evicted_objects_total");
    let cut = cluster.metric(leader, "mooncake_arena_cut_bytes_total");
    eprintln!(
        "{left} of 30 objects left after the put on the new leader ({} refused first, {cut} bytes cut)",
        refused.get()
    );
    assert_eq!(left as f64 + evicted, 30.0, "an object is evicted or readable");
    // Evicted objects whose arena the old leader had returned need no cut.
    assert!(cut > 0.0, "no evicted bytes were cut out of the old arenas");
    assert!(left >= 20, "only {left} of 30 objects left: one put after a failover emptied the cache");
    client.close().await;
}

/// After a failover, what a remove frees lies in the old leader's arenas
/// too: before, a cache emptied by `remove_all` (vLLM's connector reset)
/// took no put for the release timeout (10 minutes), with nothing left to
/// evict. Once the new leader took the old arenas back from their store
/// nodes (within a second of its election), the bytes of removed objects
/// are cut out of those arenas as they are removed, so the next put fits
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_the_bytes_a_remove_all_frees_take_new_puts() {
    let FullAfterFailover { cluster, client, values, leader } = full_cache_after_a_failover().await;
    // The new leader counts every object as leased for one KV lease TTL
    // after its election (and its eviction duty may take some first):
    // remove until none is left, looking with the lease-free probe (a get
    // would lease what is left, and the next remove_all would skip it).
    let keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
    wait_until("every object removed", Duration::from_secs(10), || async {
        client.remove_all(false).await.expect("remove_all");
        let left = client.batch_probe(&keys).await.into_iter().filter(|r| matches!(r, Ok(true))).count();
        (left == 0).then_some(())
    })
    .await;
    assert_eq!(all_readable(&client, &values).await, 0);
    // Removed before the store nodes let go of the old arenas, bytes wait
    // for it (a heartbeat), then are cut.
    let big = value(2_000, 2 << 20);
    wait_until("a put into the emptied cache", Duration::from_secs(5), || async {
        let stored = client.put("big", &big, &PutOptions { replicas: 2, ..Default::default() }).await;
        matches!(stored, Ok(PutOutcome::Stored)).then_some(())
    })
    .await;
    assert_eq!(client.get("big").await.expect("get big"), big);
    assert!(cluster.metric(leader, "mooncake_arena_cut_bytes_total") > 0.0, "nothing was cut");
    client.close().await;
}

/// A new leader takes its predecessor's arenas back from the store nodes
/// at once (so the bytes evictions and removes free there can take new
/// puts): a writer the deposed leader had granted a range is then refused
/// UNAUTHORIZED on its next write, and its put goes through the new
/// leader instead. Without the take-back its writes would go on landing
/// (they did for the 10-minute release timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_writer_is_refused_once_the_new_leader_took_its_arena_back() {
    use mooncake_client::remote;
    use mooncake_proto::master::PutStartRequest;
    use mooncake_transfer::frame::Status;
    use mooncake_transfer::{TcpConfig, TcpTransport, TransferError, Transport};

    // One store node, its /metrics on a port of the test's: the refusal
    // must be seen to come from the node's arena fence, not from the grant.
    let http = format!("127.0.0.1:{}", mooncake_testkit::free_port().expect("a free port"));
    let mut cluster = Cluster::builder()
        .masters(3)
        .stores(1)
        .segment_size("16MiB")
        .store_arg(format!("--http={http}"))
        .binary(BIN)
        .start();
    cluster.wait_for_segments(1, Duration::from_secs(20)).await;
    let fenced_writes = || {
        let (_, body) = mooncake_testkit::http_get(&http, "/metrics").expect("the store node's /metrics");
        let samples = mooncake_testkit::parse_prometheus(&body).expect("Prometheus text");
        mooncake_testkit::sample_value(&samples, "mooncake_store_fenced_writes_total", &[]).expect("the counter")
    };
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let key = "in-flight";
    let data = value(3_000, 64 << 10);
    let start = PutStartRequest {
        client_id: client.client_id(),
        key: key.into(),
        size: data.len() as u64,
        replica_num: 1,
        ..Default::default()
    };
    let granted = client.master().put_start(start).await.expect("PutStart on the old leader").remove(0);
    let target = remote(&granted);
    let tcp = TcpTransport::new(TcpConfig::default()).expect("transport");
    let half = data.len() / 2;
    tcp.write(&target, granted.offset, &data[..half]).await.expect("the first half under the old leader");
    let (old, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    cluster.kill(old);
    let (new, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    assert_ne!(new, old);
    let refused = wait_until("the old grant to be refused", Duration::from_secs(10), || async {
        tcp.write(&target, granted.offset + half as u64, &data[half..]).await.err()
    })
    .await;
    assert!(matches!(refused, TransferError::Remote { status: Status::Unauthorized, .. }), "{refused:?}");
    assert!(fenced_writes() >= 1.0, "the refusal came from the arena fence, not from an expired or forged grant");
    // The writer (here, the library) puts again through the new leader.
    let stored = client.put(key, &data, &PutOptions { replicas: 1, ..Default::default() }).await;
    assert!(matches!(stored, Ok(PutOutcome::Stored)), "{stored:?}");
    assert_eq!(client.get(key).await.expect("get"), data);
    client.close().await;
}

/// Forced removals ignore KV leases and pins: like a forced RemoveAll, they
/// are for admins. A client without the admin token is refused and the
/// object stays; the admin's forced removal goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_removals_are_admin_operations() {
    let cluster = Cluster::builder().masters(1).stores(1).segment_size("16MiB").binary(BIN).start();
    cluster.wait_for_segments(1, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let values = fill(&client, 3, 4096).await;
    // Leased: the get grants a KV lease, so only force could remove it.
    assert_eq!(client.get("obj/0").await.expect("get"), values[0].1);

    let e = client.remove("obj/0", true).await.expect_err("forced remove by a client");
    assert_eq!(code(&e), Some(ErrorCode::PermissionDenied), "{e}");
    let req = BatchRemoveRequest { keys: vec!["obj/1".into()], force: true, ..Default::default() };
    let answer = client
        .master()
        .call(|mut c| {
            let req = req.clone();
            async move { c.batch_remove(req).await }
        })
        .await
        .expect("batch remove answered");
    let status = answer.reply.status.expect("a batch status");
    assert_eq!(status.error_code(), ErrorCode::PermissionDenied, "{}", status.message);
    let e = client.remove("obj/0", false).await.expect_err("a leased object");
    assert_eq!(code(&e), Some(ErrorCode::ObjectHasLease), "{e}");
    assert!(!e.to_string().contains("use force"), "clients are not told to force: {e}");
    assert_eq!(all_readable(&client, &values).await, 3, "nothing was removed");

    let admin = cluster.client();
    admin.remove("obj/0", true).await.expect("the admin forces a removal");
    assert!(!client.exists("obj/0").await.expect("exists"));
    client.close().await;
}

/// The masters' `--client_ttl` in the pause tests.
const PAUSE_TTL_SEC: u64 = 3;

/// Pauses the only master for twice the client TTL with 20 objects stored,
/// resumes it, and waits until its duties have run again (the stall is
/// counted). Returns how many objects are readable then, and how many
/// clients the master expired.
async fn pause_the_master_past_the_ttl(master_flag: Option<&str>) -> (usize, f64) {
    let mut builder = Cluster::builder()
        .masters(1)
        .stores(2)
        .segment_size("16MiB")
        .binary(BIN)
        .arg(format!("--client_ttl={PAUSE_TTL_SEC}"));
    if let Some(flag) = master_flag {
        builder = builder.arg(flag);
    }
    let cluster = builder.start();
    cluster.wait_for_segments(2, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let values = fill(&client, 20, 64 << 10).await;
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(5)).await;

    // The fault: SIGSTOP for two TTLs (a VM pause, a live migration).
    cluster.pause(leader);
    tokio::time::sleep(Duration::from_secs(2 * PAUSE_TTL_SEC)).await;
    cluster.resume(leader);
    wait_until("the master noticed its stall", Duration::from_secs(20), || async {
        (cluster.metric(leader, "mooncake_leader_stalls_total") >= 1.0).then_some(())
    })
    .await;
    // The duty round that saw the stall has ended, and one more after it:
    // its client expiries (there should be none) are committed and counted.
    let rounds = cluster.metric(leader, "mooncake_leader_duty_rounds_total");
    wait_until("two more leader duty rounds", Duration::from_secs(20), || async {
        (cluster.metric(leader, "mooncake_leader_duty_rounds_total") >= rounds + 2.0).then_some(())
    })
    .await;
    let expired_at_resume = cluster.metric(leader, "mooncake_expired_clients_total");
    let readable = all_readable(&client, &values).await;
    client.close().await;
    (readable, expired_at_resume)
}

/// A pause of the master longer than the client TTL expired every store
/// node the instant it resumed (it had heard nothing, because it could not
/// hear): every object lost. A stalled leader now restarts every client's
/// TTL, as a new leader does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_paused_past_the_client_ttl_expires_nobody() {
    let (readable, expired) = pause_the_master_past_the_ttl(None).await;
    assert_eq!(expired, 0.0, "no client expired after the pause");
    assert_eq!(readable, 20, "every object readable after the pause");
}

/// The same pause against the planted bug (`--dev-unsafe-expire-after-stall`):
/// the test above can tell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planted_expiry_after_a_stall_loses_objects() {
    let (readable, expired) = pause_the_master_past_the_ttl(Some("--dev-unsafe-expire-after-stall")).await;
    assert!(expired >= 1.0, "the planted bug expired no store node");
    assert!(readable < 20, "the planted bug lost no object");
}

/// Thousands of idle sockets to the leader's gRPC port used to exhaust its
/// file descriptors: it kept leading, could not hear the store nodes, and
/// expired them (every object lost). Now the port holds at most its limit,
/// silent sockets give their places to clients that speak, and a refusal
/// restarts every client's TTL: nothing is lost, and clients keep working
/// during the flood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_to_the_leader_loses_nothing() {
    const TTL_SEC: u64 = 2;
    let cluster = Cluster::builder()
        .masters(1)
        .stores(2)
        .segment_size("16MiB")
        .binary(BIN)
        .arg(format!("--client_ttl={TTL_SEC}"))
        .arg("--grpc-connections-max=64")
        .arg("--grpc-peer-connections-max=64")
        .start();
    cluster.wait_for_segments(2, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let values = fill(&client, 20, 64 << 10).await;
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let addr = cluster.addrs()[0].clone();
    // A master with 1,024 descriptors, which the flood alone would exhaust.
    let pid = cluster.inner.node(Role::Master, leader).and_then(|n| n.pid()).expect("the master's pid");
    let limited = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--nofile=1024:1024"])
        .status()
        .expect("prlimit (util-linux)");
    assert!(limited.success(), "prlimit failed");

    // The fault: sockets that never speak, 300 new ones every 100 ms (up to
    // 1,500 held), for three client TTLs; meanwhile the client keeps putting.
    let flood = tokio::spawn({
        let addr = addr.clone();
        async move {
            let end = tokio::time::Instant::now() + Duration::from_secs(3 * TTL_SEC);
            let mut held = std::collections::VecDeque::new();
            while tokio::time::Instant::now() < end {
                for _ in 0..300 {
                    if let Ok(s) = tokio::net::TcpStream::connect(&addr).await {
                        held.push_back(s);
                    }
                }
                while held.len() > 1_500 {
                    held.pop_front();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let mut during = 0;
    while !flood.is_finished() {
        let v = value(3_000 + during, 4096);
        let key = format!("during/{during}");
        client.put(&key, &v, &PutOptions::default()).await.expect("a put during the flood");
        assert_eq!(client.get(&key).await.expect("a get during the flood"), v);
        during += 1;
    }
    flood.await.expect("flood task");
    assert!(during > 0);

    assert_eq!(cluster.metric(leader, "mooncake_expired_clients_total"), 0.0, "no store node expired");
    assert_eq!(all_readable(&client, &values).await, 20, "every object readable after the flood");
    // A new client connects and works once the flood is over.
    let late = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("a new client");
    late.put("late", b"after the flood", &PutOptions::default()).await.expect("put after the flood");
    late.close().await;
    client.close().await;
}

/// A leader cut off from its quorum stayed leader (openraft 0.9 has no
/// CheckQuorum) and kept answering the store nodes' Pings, while the
/// majority's new leader heard nothing from them and expired them after the
/// client TTL. Now a leader that no quorum acknowledged within the election
/// timeout answers UNAVAILABLE, so callers go to the other masters, and
/// answers again once its quorum is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_a_quorum_sends_callers_elsewhere() {
    use mooncake_proto::master::PingRequest;
    use mooncake_proto::master::master_service_client::MasterServiceClient;

    let cluster = Cluster::builder().masters(3).stores(1).segment_size("16MiB").binary(BIN).start();
    cluster.wait_for_segments(1, Duration::from_secs(20)).await;
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let addr = cluster.inner.node(Role::Master, leader).expect("the leader").addr.clone();
    let mut raw = MasterServiceClient::connect(format!("http://{addr}")).await.expect("connect to the leader");
    // An unknown client's Ping: a leader with its quorum answers NEED_REMOUNT.
    let ping = PingRequest { client_id: 0x7777, credential: vec![7; 32], fence_acks: vec![] };
    let code = |r: mooncake_proto::master::PingResponse| r.status.map(|s| s.error_code());
    let answer = raw.ping(ping.clone()).await.expect("ping").into_inner();
    assert_eq!(code(answer), Some(ErrorCode::NeedRemount), "a leader with its quorum answers for itself");

    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for f in &followers {
        cluster.pause(*f);
    }
    let message = wait_until("the cut-off leader to send callers elsewhere", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        let ping = ping.clone();
        async move {
            let status = raw.ping(ping).await.ok()?.into_inner().status?;
            (status.error_code() == ErrorCode::Unavailable).then_some(status.message)
        }
    })
    .await;
    assert!(message.contains("without a quorum"), "{message}");
    assert!(cluster.metric(leader, "mooncake_leader_without_quorum_refusals_total") >= 1.0);

    for f in &followers {
        cluster.resume(*f);
    }
    // Back with its quorum (or deposed by a newer term), it answers again.
    wait_until("the leader to answer again once its quorum is back", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        let ping = ping.clone();
        async move {
            let status = raw.ping(ping).await.ok()?.into_inner().status?;
            (status.error_code() != ErrorCode::Unavailable).then_some(())
        }
    })
    .await;
}
