//! The operator's kit against real processes: metrics parse and move with
//! the operations; a snapshot saved from one cluster restores into a new one
//! with an identical state hash (and reaches masters added later); a master
//! whose disk died is replaced by the membership procedure while a workload
//! runs, losing nothing; `member remove` drops a learner and refuses an id
//! that is no member; `client evict` frees a dead client's segment at once;
//! two `mooncake up` clusters run side by side on one host.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, MasterClient, MasterClientConfig, PutOptions};
use mooncake_local_cluster::Role;
use mooncake_testkit::{Cluster, KillOnDrop, free_port, http_get, parse_prometheus, sample_value, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const T: Duration = Duration::from_secs(20);

fn mooncake(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().expect("run mooncake");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "mooncake {args:?} failed: {text}");
    text
}

/// The flag that makes a CLI command act as `cluster`'s admin.
fn admin_of(cluster: &Cluster) -> String {
    format!("--admin-token-file={}", cluster.inner.dir().join("admin.token").display())
}

async fn client_of(cluster: &Cluster) -> Client {
    Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client")
}

async fn leader_hash(cluster: &Cluster) -> (u64, u64) {
    let (leader, _) = cluster.wait_for_leader(T).await;
    let info = cluster.info(leader).await.expect("leader info");
    (info.state_hash, info.applied_index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text_and_move_with_operations() {
    let store_http = format!("127.0.0.1:{}", free_port().unwrap());
    let cluster = Cluster::builder()
        .masters(1)
        .stores(1)
        .segment_size("64MiB")
        .store_arg(format!("--http={store_http}"))
        .binary(BIN)
        .start();
    cluster.wait_for_segments(1, T).await;
    let http = cluster.inner.node(Role::Master, 1).expect("master").http.clone();
    let scrape = || {
        let (code, body) = http_get(&http, "/metrics").expect("scrape");
        assert_eq!(code, 200);
        parse_prometheus(&body).unwrap_or_else(|e| panic!("malformed metrics: {e}\n{body}"))
    };
    let ok_calls = |s: &[mooncake_testkit::Sample], method: &str| {
        sample_value(s, "mooncake_rpc_requests_total", &[("method", method), ("code", "OK")]).unwrap_or(0.0)
    };
    let before = scrape();
    let fsyncs_before = sample_value(&before, "mooncake_fsync_duration_seconds_count", &[]).expect("fsync count");

    let client = client_of(&cluster).await;
    for i in 0..5 {
        client.put(&format!("m{i}"), &[i as u8; 1000], &PutOptions::default()).await.expect("put");
    }
    let _ = client.get("m0").await.expect("get");
    let missing = client.get("nope").await;
    assert!(missing.is_err());

    let after = scrape();
    // Small puts are placed in one writer chunk: a PutEnd each, no PutStart.
    let calls = |method: &str| ok_calls(&after, method) - ok_calls(&before, method);
    assert_eq!(calls("PutEnd"), 5.0, "PutEnd OK counter");
    assert_eq!((calls("PutStart"), calls("ReserveChunk")), (0.0, 1.0), "small puts started without a PutStart");
    let not_found = sample_value(
        &after,
        "mooncake_rpc_requests_total",
        &[("method", "GetReplicaList"), ("code", "OBJECT_NOT_FOUND")],
    );
    assert_eq!(not_found, Some(1.0), "a miss is counted with its code");
    assert_eq!(sample_value(&after, "mooncake_objects", &[]), Some(5.0));
    assert_eq!(sample_value(&after, "mooncake_segments", &[]), Some(1.0));
    assert_eq!(sample_value(&after, "mooncake_raft_is_leader", &[]), Some(1.0));
    assert!(sample_value(&after, "mooncake_fsync_duration_seconds_count", &[]).unwrap() > fsyncs_before);
    assert!(sample_value(&after, "mooncake_used_bytes", &[]).unwrap() >= 5000.0);
    // The store node counts the bytes written into its segment.
    let (code, body) = http_get(&store_http, "/metrics").expect("store metrics");
    assert_eq!(code, 200);
    let store = parse_prometheus(&body).unwrap_or_else(|e| panic!("malformed store metrics: {e}\n{body}"));
    assert!(sample_value(&store, "mooncake_store_written_bytes_total", &[]).unwrap() >= 5000.0, "{body}");
    assert!(sample_value(&store, "mooncake_store_read_bytes_total", &[]).unwrap() >= 1000.0, "{body}");
    let (code, _) = http_get(&http, "/health").expect("health");
    assert_eq!(code, 200);
    let (code, body) = http_get(&http, "/ready").expect("ready");
    assert_eq!(code, 200, "{body}");
    // Upstream's /get_all_segments (SGLang's Mooncake backend checks it at
    // start): one line per mounted segment, its transfer endpoint.
    let (code, body) = http_get(&http, "/get_all_segments").expect("get_all_segments");
    assert_eq!(code, 200, "{body}");
    let (leader, _) = cluster.wait_for_leader(T).await;
    let info = cluster.info(leader).await.expect("leader info");
    let endpoints: Vec<String> =
        info.segments.iter().filter_map(|u| u.segment.as_ref()).map(|s| s.endpoint.clone()).collect();
    assert_eq!(body.lines().map(str::to_string).collect::<Vec<_>>(), endpoints, "{body}");
    // Upstream's /query_segment: the named segment's used and total bytes.
    let name = endpoints[0].replace(':', "%3A");
    let (code, body) = http_get(&http, &format!("/query_segment?segment={name}")).expect("query_segment");
    assert_eq!(code, 200, "{body}");
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines[0], endpoints[0], "{body}");
    let used: u64 = lines[1].strip_prefix("Used(bytes): ").and_then(|v| v.parse().ok()).expect("used bytes");
    assert!(used >= 5000, "five 1,000-byte objects are on it: {body}");
    assert_eq!(lines[2], format!("Capacity(bytes): {}", 64 << 20), "{body}");
    let (code, _) = http_get(&http, "/query_segment?segment=nowhere%3A1").expect("query_segment");
    assert_eq!(code, 404, "an unknown segment");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_snapshot_restores_into_a_new_cluster_with_the_same_hash() {
    // Phase 1: a source cluster with objects and a segment.
    let source = Cluster::builder().masters(1).stores(1).segment_size("64MiB").binary(BIN).start();
    source.wait_for_segments(1, T).await;
    let client = client_of(&source).await;
    for i in 0..20 {
        client.put(&format!("snap/{i}"), &vec![i as u8; 4096], &PutOptions::default()).await.expect("put");
    }
    // Forced (the new leader counts every object as leased for a while):
    // an admin's removal.
    source.client().remove("snap/3", true).await.expect("remove");
    client.close().await;
    let (hash, _) = leader_hash(&source).await;

    // Phase 2: save it with the CLI.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("meta.snap");
    let masters = source.addrs().join(",");
    let out = mooncake(&["snapshot", "save", file.to_str().unwrap(), "--masters", &masters, &admin_of(&source)]);
    assert!(out.contains(&format!("{hash:016x}")), "{out}");

    // Phase 3: a new one-master cluster restored from the file. Its client
    // TTL outlasts the test: the source's store node never heartbeats to it,
    // and expiring that node's segment after the default 10 s would change
    // the state the masters are compared against (on a slow machine, before
    // the joiner of phase 4 has caught up).
    let addr = format!("127.0.0.1:{}", free_port().unwrap());
    let data = dir.path().join("restored");
    let restored_log = dir.path().join("restored.log");
    let _restored = KillOnDrop(
        Command::new(BIN)
            .args(["master", "--id=1", &format!("--listen={addr}"), &format!("--initial-cluster=1={addr}")])
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--restore={}", file.display()))
            .arg(RESTORED_CLIENT_TTL)
            .stderr(std::fs::File::create(&restored_log).unwrap())
            .spawn()
            .expect("start restored master"),
    );
    let mc = MasterClient::new(MasterClientConfig::new(vec![addr.clone()])).unwrap();
    let restored_hash = wait_or_show_logs("the restored master to serve", &[&restored_log], || async {
        let info = mc.cluster_info_with_hash_of(&addr).await.ok()?;
        (info.leader_id == 1).then_some(info.state_hash)
    })
    .await;
    assert_eq!(restored_hash, hash, "restored state differs from the source");
    let listed = mc.list_objects("snap/", 100).await.expect("list");
    assert_eq!(listed.len(), 19);

    // Phase 4: a master added later receives the restored state.
    let addr2 = format!("127.0.0.1:{}", free_port().unwrap());
    let joiner_log = dir.path().join("joiner.log");
    let _joiner = KillOnDrop(
        Command::new(BIN)
            .args(["master", "--id=2", &format!("--listen={addr2}"), "--join"])
            .arg(format!("--data-dir={}", dir.path().join("joiner").display()))
            // The secret a restored one-master cluster made for itself, copied as an operator would.
            .arg(format!("--cluster-secret-file={}", data.join("cluster-secret").display()))
            .arg(RESTORED_CLIENT_TTL)
            .stderr(std::fs::File::create(&joiner_log).unwrap())
            .spawn()
            .expect("start joiner"),
    );
    // The restored master wrote its cluster's admin token in its data dir.
    let restored_admin = format!("--admin-token-file={}", data.join("admin.token").display());
    mooncake(&["member", "add", "2", &addr2, "--masters", &addr, &restored_admin]);
    wait_or_show_logs("the new master to hold the restored state", &[&restored_log, &joiner_log], || async {
        let info = mc.cluster_info_with_hash_of(&addr2).await.ok()?;
        (info.state_hash == hash).then_some(())
    })
    .await;
}

/// The restored cluster's `--client_ttl` in the snapshot test: longer than
/// the test runs.
const RESTORED_CLIENT_TTL: &str = "--client_ttl=3600";

/// [`wait_until`] for masters a test started by hand: on a timeout, panics
/// with the tails of their logs.
async fn wait_or_show_logs<V, F, Fut>(what: &str, logs: &[&std::path::Path], cond: F) -> V
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<V>>,
{
    match mooncake_local_cluster::wait_for(what, T, cond).await {
        Ok(v) => v,
        Err(e) => {
            let tails: String = logs
                .iter()
                .map(|log| format!("--- {}:\n{}", log.display(), mooncake_local_cluster::log_tail(log, 40)))
                .collect();
            panic!("{e}\n{tails}")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_whose_disk_died_is_replaced_while_a_workload_runs() {
    let mut cluster = Cluster::builder().masters(3).stores(1).segment_size("64MiB").binary(BIN).start();
    cluster.wait_for_segments(1, T).await;
    let client = Arc::new(client_of(&cluster).await);
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    let writer = {
        let (client, stop, progress) = (client.clone(), stop.clone(), progress.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w/{i}");
                if client.put(&key, &[7u8; 512], &PutOptions::default()).await.is_ok() {
                    acked.push(key);
                    progress.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
            acked
        })
    };

    // The disk of a follower dies: kill it and wipe its data dir.
    let (leader, _) = cluster.wait_for_leader(T).await;
    let victim = cluster.ids().into_iter().find(|id| *id != leader).unwrap();
    cluster.kill(victim);
    let dead_dir = cluster.inner.node(Role::Master, victim).unwrap().data_dir.clone();
    std::fs::remove_dir_all(&dead_dir).expect("wipe data dir");

    // The documented procedure: start a fresh master with --join, add it, remove the dead one.
    let addr4 = cluster.start_joiner(4);
    let masters = cluster.addrs().join(",");
    mooncake(&["member", "add", "4", &addr4, "--masters", &masters, &admin_of(&cluster)]);
    mooncake(&["member", "remove", &victim.to_string(), "--masters", &masters, &admin_of(&cluster)]);
    // The workload keeps going on the new membership.
    let after_change = progress.load(Ordering::Relaxed);
    wait_until("puts to succeed after the membership change", T, || async {
        (progress.load(Ordering::Relaxed) >= after_change + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let acked = writer.await.unwrap();
    assert!(acked.len() > 10, "the workload made progress ({} puts)", acked.len());

    // Nothing lost, and the new master holds the same state.
    let listed = client.master().list_objects("w/", 100_000).await.expect("list");
    let present: std::collections::BTreeSet<_> = listed.iter().map(|o| o.key.clone()).collect();
    for k in &acked {
        assert!(present.contains(k), "acknowledged put {k} lost");
    }
    let (hash, applied) = leader_hash(&cluster).await;
    wait_until("master 4 to converge", T, || async {
        let info = cluster.info(4).await?;
        (info.state_hash == hash && info.applied_index >= applied).then_some(())
    })
    .await;
    let info = cluster.info(4).await.unwrap();
    let voters: Vec<u64> = info.members.iter().filter(|m| m.voter).map(|m| m.id).collect();
    assert!(!voters.contains(&victim) && voters.contains(&4), "voters {voters:?}");
    Arc::try_unwrap(client).ok().expect("sole owner").close().await;
}

/// `mooncake status` says whether each master can serve, and why not: all
/// ready in a healthy cluster; the last master standing of three is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_which_masters_cannot_serve() {
    let mut cluster = Cluster::builder().masters(3).binary(BIN).start();
    let (leader, _) = cluster.wait_for_leader(T).await;
    let masters = cluster.addrs().join(",");
    let out = mooncake(&["status", "--masters", &masters]);
    assert!(out.contains("READY"), "{out}");
    assert_eq!(out.matches(" yes ").count(), 3, "three ready masters: {out}");
    assert!(!out.contains("not ready"), "{out}");
    for id in cluster.ids().into_iter().filter(|id| *id != leader) {
        cluster.kill(id);
    }
    let leader_addr = cluster.inner.node(Role::Master, leader).unwrap().addr.clone();
    let why = wait_until("the lone master to say it cannot serve", T, || {
        let leader_addr = leader_addr.clone();
        async move {
            let out = Command::new(BIN).args(["status", "--masters", &leader_addr]).output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.lines().find(|l| l.contains(&format!("master {leader} not ready"))).map(str::to_string)
        }
    })
    .await;
    assert!(why.contains("quorum") || why.contains("no leader"), "{why}");
}

/// A master built with the planted bugs says so in `mooncake status`, with
/// the ones it runs with: every test build has them (testkit turns the
/// feature on), so an operator who finds such a binary in production can
/// tell. A default build knows no `--dev-unsafe-*` flag (CI checks the
/// release binary's `--help`; `node/planted.rs` has the unit test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_marks_a_master_built_with_planted_bugs() {
    let cluster = Cluster::builder().masters(1).binary(BIN).arg("--dev-unsafe-skip-events").start();
    let (leader, _) = cluster.wait_for_leader(T).await;
    let masters = cluster.addrs().join(",");
    let out = mooncake(&["status", "--masters", &masters]);
    let mark = format!("master {leader} is a DEVELOPMENT BUILD with planted bugs (ON: skip-events)");
    assert!(out.contains(&mark), "{out}");
    let out = Command::new(BIN).args(["status", "--json", "--masters", &masters]).output().expect("status --json");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status --json prints JSON");
    let master = &json["masters"][0];
    assert_eq!(master["planted_bugs"], serde_json::json!(true), "{json}");
    assert_eq!(master["planted_bugs_on"], serde_json::json!(["skip-events"]), "{json}");
}

/// Every background duty of the leader shows its tick, its rounds and when
/// it last succeeded, in `mooncake status` and on `/metrics`: a duty that
/// stopped succeeding is visible without reading logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_metrics_show_when_each_duty_of_the_leader_last_succeeded() {
    let cluster = Cluster::builder().masters(3).binary(BIN).start();
    let (leader, _) = cluster.wait_for_leader(T).await;
    let masters = cluster.addrs().join(",");
    let duties = ["client_expiry", "eviction", "reclaim", "copies"];
    // The reclaim duty runs every second: once it has, every duty has.
    let out = wait_until("every duty of the leader to have succeeded", T, || {
        let masters = masters.clone();
        async move {
            let out = Command::new(BIN).args(["status", "--masters", &masters]).output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let line =
                |duty: &str| text.lines().find(|l| l.trim_start().starts_with(&format!("{duty} "))).map(str::to_string);
            duties.iter().all(|d| line(d).is_some_and(|l| !l.contains("never"))).then_some(text)
        }
    })
    .await;
    assert!(out.contains("duties (leader's):"), "{out}");
    assert!(out.contains("every   100 ms") && out.contains("every  1000 ms"), "the ticks: {out}");
    let samples = cluster.metrics(leader);
    for duty in duties {
        let runs = sample_value(&samples, "mooncake_duty_runs", &[("duty", duty)]).unwrap_or(0.0);
        let ok_at = sample_value(&samples, "mooncake_duty_last_success_timestamp_seconds", &[("duty", duty)]);
        assert!(runs >= 1.0, "{duty}: {runs} rounds");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        assert!(ok_at.is_some_and(|t| (now - t).abs() < 60.0), "{duty}: last success at {ok_at:?}, now {now}");
    }
}

/// `member remove` of a learner drops it (it used to print success and leave
/// it, the leader retrying it forever); an id that is no member is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_remove_drops_a_learner_and_refuses_a_stranger() {
    let mut cluster = Cluster::builder().masters(3).binary(BIN).start();
    cluster.wait_for_leader(T).await;
    let addr4 = cluster.start_joiner(4);
    let masters = cluster.addrs().join(",");
    cluster.client().add_learner(4, &addr4).await.expect("add learner");
    let members = |info: &mooncake_proto::master::GetClusterInfoResponse| -> Vec<(u64, bool)> {
        info.members.iter().map(|m| (m.id, m.voter)).collect()
    };
    let (leader, _) = cluster.wait_for_leader(T).await;
    assert!(members(&cluster.info(leader).await.unwrap()).contains(&(4, false)), "4 joined as a learner");
    // Adding it again changes nothing: no second membership entry (each
    // one restarted the learner's snapshot transfer, so a retried add of a
    // master catching up from a large snapshot never let it finish).
    let before = cluster.info(leader).await.unwrap().last_log_index;
    let again = cluster.client().add_learner(4, &addr4).await.expect("add the same learner again");
    assert!(again.contains("already a member"), "{again}");
    assert_eq!(cluster.info(leader).await.unwrap().last_log_index, before, "adding it again appended an entry");
    let elsewhere = cluster.client().add_learner(4, "127.0.0.1:1").await.expect_err("another address");
    assert!(elsewhere.to_string().contains("remove it first"), "{elsewhere}");
    let out = mooncake(&["member", "remove", "4", "--masters", &masters, &admin_of(&cluster)]);
    assert!(out.contains("learner 4 removed"), "{out}");
    let (leader, _) = cluster.wait_for_leader(T).await;
    let after = members(&cluster.info(leader).await.unwrap());
    assert!(after.iter().all(|(id, _)| *id != 4), "learner 4 still a member: {after:?}");
    assert_eq!(after.iter().filter(|(_, voter)| *voter).count(), 3, "the voters stay: {after:?}");

    let out =
        Command::new(BIN).args(["member", "remove", "9", "--masters", &masters, &admin_of(&cluster)]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "removing a stranger must fail");
    assert!(text.contains("master 9 is not a member"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_evict_frees_a_dead_clients_segment_at_once() {
    // The default client_ttl (10 s) would keep the dead segment for a while.
    let mut cluster = Cluster::builder().masters(1).stores(1).segment_size("64MiB").binary(BIN).start();
    cluster.wait_for_segments(1, T).await;
    let masters = cluster.addrs().join(",");
    let id = format!("{:#x}", cluster.inner.store_client_id(1));
    let listed = mooncake(&["client", "list", "--masters", &masters]);
    assert!(listed.contains(&format!("0x{:016x}", cluster.inner.store_client_id(1))), "{listed}");
    cluster.kill_store(1);

    // Not the admin: refused, and nothing changes.
    let out = Command::new(BIN).args(["client", "evict", &id, "--masters", &masters]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("PermissionDenied"), "{out:?}");
    assert_eq!(cluster.info(1).await.expect("info").segment_count, 1, "a refused evict changed nothing");

    let evicted_at = Instant::now();
    mooncake(&["client", "evict", &id, "--masters", &masters, &admin_of(&cluster)]);
    let info = cluster.info(1).await.expect("info");
    assert_eq!(info.segment_count, 0, "segment still mounted after evict");
    assert_eq!(info.client_count, 0);
    assert!(evicted_at.elapsed() < Duration::from_secs(5), "evict was not immediate");
    // Evicting again is a clear error, not a crash.
    let out =
        Command::new(BIN).args(["client", "evict", &id, "--masters", &masters, &admin_of(&cluster)]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ILLEGAL_CLIENT")
            || String::from_utf8_lossy(&out.stderr).contains("not registered")
    );
}

/// A `mooncake up` child, stopped with Ctrl-C (SIGINT) when dropped, so its
/// masters and store nodes stop with it.
struct Up(std::process::Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-INT", &self.0.id().to_string()]).status();
        let deadline = Instant::now() + T;
        while Instant::now() < deadline && matches!(self.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `mooncake up` with 1 master and 1 store node in `dir`; answers
/// it once it says the cluster is up, or the lines it printed instead.
fn up(dir: &std::path::Path) -> Result<Up, String> {
    use std::io::BufRead;
    let child = Command::new(BIN)
        .args(["up", "--masters", "1", "--stores", "1", "--segment-size", "16MiB", "--dir"])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn mooncake up");
    let mut up = Up(child);
    let stderr = up.0.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    while let Ok(line) = rx.recv_timeout(T) {
        if line.contains("cluster up:") {
            return Ok(up);
        }
        seen.push(line);
    }
    Err(seen.join("\n"))
}

/// Why: an operator (or two CI jobs) running two local clusters on one host
/// used to see the second fail: both gave their first store node the same
/// client id, hence the same /dev/shm lock.
#[test]
fn two_local_clusters_run_side_by_side_on_one_host() {
    let (a, b) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let first = up(a.path()).unwrap_or_else(|e| panic!("the first cluster did not come up:\n{e}"));
    let second = up(b.path()).unwrap_or_else(|e| panic!("the second cluster did not come up beside the first:\n{e}"));
    drop(second);
    drop(first);
}
