//! A store node's crash-only duties, with real processes (one master and one
//! store node from the `mooncake` binary): a node restarted after SIGKILL
//! removes the /dev/shm file its dead predecessor leaked, and a second node
//! with the same --client-id is refused; a node whose segment the master
//! forgot (an operator's unmount, or expiry during a pause) notices and
//! remounts it under a new id, serving again, without a restart; a node is
//! its --client-id only with its --credential-file (restarted without it,
//! it waits for the old registration to go).
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, MasterClient, MasterClientConfig, PutOptions};
use mooncake_local_cluster::Role;
use mooncake_proto::master::Segment;
use mooncake_testkit::{Cluster, KillOnDrop, free_port, http_get, parse_prometheus, sample_value, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
/// Bound on one waited-for event.
const WAIT: Duration = Duration::from_secs(30);

/// The segments the leader lists for `client_id`.
async fn segments_of(cluster: &Cluster, client_id: u64) -> Option<Vec<Segment>> {
    let (leader, _) = cluster.wait_for_leader(WAIT).await;
    let info = cluster.info(leader).await?;
    Some(info.segments.into_iter().filter(|u| u.owner_client_id == client_id).filter_map(|u| u.segment).collect())
}

/// Waits until the leader lists exactly one segment for `client_id`, other
/// than `not` when given.
async fn wait_for_segment(cluster: &Cluster, client_id: u64, not: Option<u64>, what: &str) -> Segment {
    cluster
        .wait_until(what, WAIT, || async {
            let owned = segments_of(cluster, client_id).await?;
            match owned.as_slice() {
                [one] if Some(one.id) != not => Some(one.clone()),
                _ => None,
            }
        })
        .await
}

/// Segment files of `client_id` in /dev/shm.
fn shm_files_of(client_id: u64) -> Vec<PathBuf> {
    let prefix = format!("mooncake-{client_id:016x}-");
    let mut files: Vec<PathBuf> = std::fs::read_dir("/dev/shm")
        .expect("list /dev/shm")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter(|e| !e.file_name().to_string_lossy().ends_with("-lock"))
        .map(|e| e.path())
        .collect();
    files.sort();
    files
}

fn store_metric(http: &str, name: &str) -> f64 {
    let (code, body) = http_get(http, "/metrics").expect("store metrics");
    assert_eq!(code, 200, "{body}");
    let samples = parse_prometheus(&body).unwrap_or_else(|e| panic!("malformed store metrics: {e}\n{body}"));
    sample_value(&samples, name, &[]).unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

async fn client_of(cluster: &Cluster) -> Client {
    Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client")
}

/// Why: a SIGKILLed store node cannot remove its /dev/shm file; without a
/// sweep at restart every crash leaks a segment's worth of host memory, and
/// enough of them make the restart itself fail for want of /dev/shm space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_store_node_removes_the_segment_file_its_killed_predecessor_leaked() {
    let mut cluster = Cluster::builder().masters(1).stores(1).segment_size("64MiB").binary(BIN).start();
    let node = cluster.inner.store_client_id(1);
    let old = wait_for_segment(&cluster, node, None, "the store node's segment").await;
    assert_eq!(shm_files_of(node), vec![PathBuf::from(&old.shm_path)]);

    // Phase 1: a second node with the same identity on this host is refused
    // at start, with a message that says what to do.
    let masters = cluster.addrs().join(",");
    let listen = format!("127.0.0.1:{}", free_port().unwrap());
    let mut twin = Command::new(BIN)
        .args(["store", "--masters", &masters, "--segment-size", "64MiB", "--listen", &listen])
        .arg(format!("--client-id={node}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the twin");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = twin.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > WAIT {
            let _ = twin.kill();
            panic!("a second store node with client id {node} kept running");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut twin.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "the twin must fail: {stderr}");
    assert!(stderr.contains("same identity") && stderr.contains("--client-id"), "{stderr}");
    assert!(Path::new(&old.shm_path).exists(), "the twin touched the live node's file");

    // Phase 2: SIGKILL leaves the file, which the restart serves again
    // (a_store_node_restarted_with_its_identity_keeps_its_objects); any
    // other file of the identity (here one of another size, as a node
    // restarted with another --segment-size finds) is removed.
    cluster.kill_store(1);
    assert!(Path::new(&old.shm_path).exists(), "a killed node cannot remove its file");
    let leaked = PathBuf::from(format!("/dev/shm/mooncake-{node:016x}-00000000000000ab"));
    std::fs::File::create(&leaked).unwrap().set_len(4096).unwrap();
    cluster.inner.restart(Role::Store, 1).unwrap_or_else(|e| panic!("restart: {e}"));
    wait_until("the restarted node to remove the leaked file", WAIT, || async { (!leaked.exists()).then_some(()) })
        .await;
    let new = wait_for_segment(&cluster, node, None, "the restarted node's segment").await;
    assert_eq!(new.id, old.id, "the restart re-attached the segment");
    assert_eq!(shm_files_of(node), vec![PathBuf::from(&new.shm_path)], "exactly one file for the node");
}

/// Why: operators restart store nodes (upgrades, crashes) and should not
/// lose the cache each time (issue 39): a node restarted with the same
/// --client-id and --credential-file serves the memory its predecessor
/// left, and the masters keep its objects, after a SIGKILL and after a
/// graceful stop alike. Once the masters forgot the segment (the node came
/// back too late, or was evicted), its bytes are nobody's: the node starts
/// empty under a new segment id, and no object is served from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_node_restarted_with_its_identity_keeps_its_objects() {
    let mut cluster =
        Cluster::builder().masters(1).stores(1).segment_size("64MiB").arg("--client_ttl=60").binary(BIN).start();
    let node = cluster.inner.store_client_id(1);
    let first = wait_for_segment(&cluster, node, None, "the store node's segment").await;
    let client = client_of(&cluster).await;
    let value = |i: u8| vec![i; 300 << 10];
    for i in 0..3u8 {
        client.put(&format!("t55/kept/{i}"), &value(i), &PutOptions::default()).await.expect("put");
    }
    let all_read = || async {
        for i in 0..3u8 {
            if client.get(&format!("t55/kept/{i}")).await.ok()? != value(i) {
                return None;
            }
        }
        Some(())
    };
    for (how, stop) in [("SIGKILL", true), ("SIGTERM", false)] {
        match stop {
            true => cluster.kill_store(1),
            false => cluster.inner.stop_node(Role::Store, 1),
        }
        assert!(Path::new(&first.shm_path).exists(), "after {how} the memory is still in /dev/shm");
        cluster.inner.restart(Role::Store, 1).unwrap_or_else(|e| panic!("restart: {e}"));
        wait_until(&format!("every object readable after a {how} restart"), WAIT, all_read).await;
        let again = segments_of(&cluster, node).await.expect("segments");
        assert_eq!(again.iter().map(|s| s.id).collect::<Vec<_>>(), vec![first.id], "after {how}");
    }
    // The masters forget the node (an admin evicts it while it is down):
    // the restart finds its segment gone and starts empty, under a new id.
    cluster.kill_store(1);
    cluster.client().evict_client(node).await.expect("evict");
    cluster.inner.restart(Role::Store, 1).unwrap_or_else(|e| panic!("restart: {e}"));
    let renewed = wait_for_segment(&cluster, node, Some(first.id), "the node under a new segment").await;
    assert!(client.get("t55/kept/0").await.is_err(), "an object of the forgotten segment was served");
    assert_eq!(shm_files_of(node), vec![PathBuf::from(&renewed.shm_path)], "one file, renamed to the new id");
    client.close().await;
}

/// Why: a store node whose segment the master unmounted pinged OK for ever
/// with its capacity gone; it must notice and mount its memory again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_node_remounts_a_segment_the_operator_unmounted() {
    let store_http = format!("127.0.0.1:{}", free_port().unwrap());
    let mut cluster = Cluster::builder()
        .masters(1)
        .stores(1)
        .segment_size("64MiB")
        .store_arg("--heartbeat-interval-ms=100")
        .store_arg(format!("--http={store_http}"))
        .binary(BIN)
        .start();
    let node = cluster.inner.store_client_id(1);
    let old = wait_for_segment(&cluster, node, None, "the store node's segment").await;
    let client = client_of(&cluster).await;
    client.put("t55/before", &[1u8; 10_000], &PutOptions::default()).await.expect("put");

    // Phase 1: the segment is unmounted (by whoever holds the node's
    // credential: an operator on its host); the client registration survives.
    let file = cluster.inner.dir().join("store-1").join(mooncake_auth::credential::CREDENTIAL_FILE);
    let credential = Some(mooncake_auth::Credential::load_or_create(&file).expect("the node's credential"));
    let as_node = MasterClient::new(MasterClientConfig { credential, ..MasterClientConfig::new(cluster.addrs()) });
    as_node.expect("client").unmount_segment(node, old.id).await.expect("unmount");

    // Phase 2: the node remounts its memory under a new id, renames its file
    // to match, and says so in its metrics and health.
    let new = wait_for_segment(&cluster, node, Some(old.id), "the segment to be remounted").await;
    assert_eq!((new.size, &new.endpoint), (old.size, &old.endpoint), "the same memory and address");
    assert!(!Path::new(&old.shm_path).exists() && Path::new(&new.shm_path).exists());
    wait_until("the node to count the remount", WAIT, || async {
        (store_metric(&store_http, "mooncake_store_segment_remounts_total") == 1.0).then_some(())
    })
    .await;
    assert_eq!(store_metric(&store_http, "mooncake_store_segment_mounted"), 1.0);
    assert_eq!(http_get(&store_http, "/health").expect("health").0, 200);

    // Phase 3: the object on the unmounted segment is gone with it; the
    // remounted segment serves puts and gets at full capacity.
    assert!(client.get("t55/before").await.is_err(), "the unmount dropped the object");
    let data: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();
    client.put("t55/after", &data, &PutOptions::default()).await.expect("put after the remount");
    assert_eq!(client.get("t55/after").await.expect("get after the remount"), data);
    client.close().await;

    // Phase 4: a clean stop removes the renamed file and the lock file too.
    cluster.inner.stop();
    assert_eq!(shm_files_of(node), Vec::<PathBuf>::new(), "files left after a clean stop");
    assert!(!Path::new(&format!("/dev/shm/mooncake-{node:016x}-lock")).exists(), "lock file left");
}

/// Why: the NEED_REMOUNT path (the client expired while its node was
/// paused) must also come back under a new id, so a writer that still holds a
/// range of the expired segment cannot overwrite what is placed after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_node_paused_past_its_ttl_comes_back_under_a_new_segment() {
    let cluster = Cluster::builder()
        .masters(1)
        .stores(1)
        .segment_size("64MiB")
        .arg("--client_ttl=2")
        .store_arg("--heartbeat-interval-ms=200")
        .binary(BIN)
        .start();
    let node = cluster.inner.store_client_id(1);
    let old = wait_for_segment(&cluster, node, None, "the store node's segment").await;
    // Paused once it serves (its start-up line), not between the masters
    // recording its mount and the node reading their answer: once, in a
    // loaded full run, a node paused there did not come back within WAIT
    // (not reproduced alone since), a case this test does not claim.
    let log = cluster.inner.node(Role::Store, 1).expect("store 1").log.clone();
    cluster
        .wait_until("the store node to serve", WAIT, || async {
            std::fs::read_to_string(&log).unwrap_or_default().contains(" served at ").then_some(())
        })
        .await;

    cluster.inner.pause(Role::Store, 1).expect("pause");
    wait_until("the paused node's client to expire", WAIT, || async {
        segments_of(&cluster, node).await?.is_empty().then_some(())
    })
    .await;
    cluster.inner.resume(Role::Store, 1).expect("resume");

    let new = wait_for_segment(&cluster, node, Some(old.id), "the segment to be remounted").await;
    assert!(Path::new(&new.shm_path).exists() && !Path::new(&old.shm_path).exists());
    let client = client_of(&cluster).await;
    client.put("t55/after-pause", &[7u8; 4096], &PutOptions::default()).await.expect("put");
    assert_eq!(client.get("t55/after-pause").await.expect("get"), vec![7u8; 4096]);
    client.close().await;
}

/// Why: a store node proves its --client-id with the credential in its
/// --credential-file. Restarted with the file it is the same client and
/// re-registers at once; restarted without it, it is another process: the
/// masters refuse it (another process could otherwise take the node's
/// segment key), so it says why once and waits, serving nothing, until the
/// old registration expires or an admin evicts it, and then registers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_node_is_its_client_id_only_with_its_credential_file() {
    // A TTL far longer than the waits below: only the credential explains
    // a registration within them.
    let mut cluster =
        Cluster::builder().masters(1).stores(1).segment_size("64MiB").arg("--client_ttl=60").binary(BIN).start();
    let node = cluster.inner.store_client_id(1);
    let first = wait_for_segment(&cluster, node, None, "the store node's segment").await;

    // Phase 1: restarted with its credential file, at once (re-attaching
    // its segment: the same id).
    cluster.kill_store(1);
    cluster.inner.restart(Role::Store, 1).unwrap_or_else(|e| panic!("restart: {e}"));
    let second = wait_for_segment(&cluster, node, None, "the restarted node's segment").await;
    assert_eq!(second.id, first.id, "re-attached");

    // Phase 2: restarted without it: refused, said once, not serving.
    cluster.kill_store(1);
    let log = cluster.inner.dir().join("store-1-without-credential.log");
    let http = format!("127.0.0.1:{}", free_port().unwrap());
    let listen = format!("127.0.0.1:{}", free_port().unwrap());
    let masters = cluster.addrs().join(",");
    let stranger = Command::new(BIN)
        .args(["store", "--masters", &masters, "--segment-size", "64MiB", "--listen", &listen, "--http", &http])
        .args([format!("--client-id={node}"), "--heartbeat-interval-ms=200".to_string()])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start the node without its credential file");
    let _stranger = KillOnDrop(stranger);
    let said = wait_until("the node to say its id is held", WAIT, || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("is registered by another process").then_some(text)
    })
    .await;
    assert!(said.contains("client_ttl") && said.contains("evict"), "the line says what it waits for: {said}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let owned = segments_of(&cluster, node).await.expect("segments");
    assert_eq!(owned.iter().map(|s| s.id).collect::<Vec<_>>(), vec![second.id], "the old registration stands");
    assert_ne!(http_get(&http, "/health").expect("health").0, 200, "a node whose id is held serves nothing");
    let lines = std::fs::read_to_string(&log).unwrap_or_default().matches("is registered by another process").count();
    assert_eq!(lines, 1, "said once, not at every heartbeat");

    // Phase 3: the operator evicts the old registration: the node registers
    // at its next heartbeat and serves.
    cluster.client().evict_client(node).await.expect("evict");
    let third = wait_for_segment(&cluster, node, Some(second.id), "the node to register once the id is free").await;
    assert_eq!(third.endpoint, listen, "the new process's segment");
    wait_until("the node to report itself healthy", WAIT, || async {
        (http_get(&http, "/health").ok()?.0 == 200).then_some(())
    })
    .await;
    let client = client_of(&cluster).await;
    client.put("t55/stranger", &[5u8; 4096], &PutOptions::default()).await.expect("put");
    assert_eq!(client.get("t55/stranger").await.expect("get"), vec![5u8; 4096]);
    client.close().await;
}
