//! A master whose data dir was damaged on disk (bytes flipped in its files
//! while it was down) must never come back with acknowledged state silently
//! gone: it either refuses to start, loudly, or serves everything it had
//! acknowledged. (sled checks its records and, finding a damaged one, used
//! to recover quietly to an earlier state; the durable watermark catches
//! that: `raft-store/src/data_dir/watermark.rs`.)
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Duration;

use mooncake_proto::master::{PutStartRequest, Segment};
use mooncake_testkit::{Cluster, Role};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const OBJECTS: u64 = 300;

/// Inverts `len` bytes in the middle of `path`; false if it is too small.
fn flip_middle(path: &Path, len: u64) -> bool {
    let Ok(mut f) = std::fs::OpenOptions::new().read(true).write(true).open(path) else { return false };
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    if size < 4 * len {
        return false;
    }
    let at = size / 2;
    let mut buf = vec![0u8; len as usize];
    f.seek(SeekFrom::Start(at)).and_then(|_| f.read_exact(&mut buf)).expect("read the middle");
    buf.iter_mut().for_each(|b| *b = !*b);
    f.seek(SeekFrom::Start(at)).and_then(|_| f.write_all(&buf)).expect("write it back flipped");
    f.sync_all().expect("sync");
    true
}

/// The committed index the data dir's durable watermark holds (0 if none).
fn watermark_index(dir: &Path) -> u64 {
    let text = std::fs::read_to_string(dir.join("durable-watermark")).unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["committed_index"].as_u64()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_on_a_damaged_data_dir_refuses_or_keeps_everything_it_acknowledged() {
    let mut cluster = Cluster::builder().masters(1).master_bin(BIN).arg("--snapshot-logs=100").start();
    let (id, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    let seg =
        Segment { id: 61, size: 1 << 30, endpoint: "127.0.0.1:9061".into(), host_id: "h".into(), ..Default::default() };
    client.mount_segment(600, seg).await.expect("mount");
    let put = |i: u64| {
        let client = &client;
        async move {
            let key = format!("k{i}");
            let req =
                PutStartRequest { client_id: 600, key: key.clone(), size: 4096, replica_num: 1, ..Default::default() };
            client.put_start(req).await.expect("put start");
            client.put_end(600, &key, 1).await.expect("put end");
        }
    };
    for i in 0..OBJECTS {
        put(i).await;
    }
    // sled writes its own snapshot file now and then; make sure there is
    // state in every kind of file, and that the watermark saw the load: it
    // records at most once a second (at a commit), so put until it does.
    client.trigger_snapshot().await.expect("snapshot");
    let dir = cluster.inner.node(Role::Master, id).expect("node").data_dir.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let loaded = cluster.info(id).await.expect("info").applied_index;
    let mut next = OBJECTS;
    while watermark_index(&dir) < loaded {
        assert!(std::time::Instant::now() < deadline, "the durable watermark never reached index {loaded}");
        put(next).await;
        next += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = cluster.info(id).await.expect("info");
    cluster.kill(id);

    let mut damaged = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("data dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if (name.starts_with("snap.") || name == "db" || name == "raft-snapshot") && flip_middle(&path, 64) {
            damaged.push(name);
        }
    }
    assert!(!damaged.is_empty(), "no sled file to damage in {}", dir.display());

    cluster.restart(id);
    enum Outcome {
        Refused(std::process::ExitStatus),
        Serving(Box<mooncake_proto::master::GetClusterInfoResponse>),
    }
    // Either event ends the wait: the process exits, or it serves again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let outcome = loop {
        if let Some(status) = cluster.master_exit_status(id) {
            break Outcome::Refused(status);
        }
        // Serving: it leads and is ready (has applied what it committed).
        if let Some(info) = cluster.info(id).await
            && info.leader_id == id
            && info.not_ready.is_empty()
        {
            break Outcome::Serving(Box::new(info));
        }
        assert!(std::time::Instant::now() < deadline, "the damaged master neither refused nor served within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    match outcome {
        Outcome::Refused(status) => {
            eprintln!("damaged {damaged:?}: refused ({status})");
            assert!(!status.success(), "a refusal exits non-zero: {status:?}");
            let log = std::fs::read_to_string(&cluster.inner.node(Role::Master, id).unwrap().log).unwrap_or_default();
            let why = log.lines().rev().find(|l| l.contains("data dir")).unwrap_or_default();
            eprintln!("refusal: {why}");
            assert!(!why.is_empty(), "the refusal names the data dir (damaged {damaged:?}): {log}");
        }
        Outcome::Serving(after) => {
            eprintln!("damaged {damaged:?}: serving, applied {} objects {}", after.applied_index, after.object_count);
            assert!(
                after.applied_index >= before.applied_index && after.object_count >= before.object_count,
                "the master came back with less than it acknowledged (damaged {damaged:?}): applied {} of {}, \
                 objects {} of {}",
                after.applied_index,
                before.applied_index,
                after.object_count,
                before.object_count
            );
        }
    }
}
