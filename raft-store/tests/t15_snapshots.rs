//! Snapshots are the state machine's durability: a built snapshot survives a
//! restart with the same state, an installed snapshot replaces the whole
//! state, and a snapshot that cannot be decoded (or has an unknown schema
//! version) is refused and leaves the old state in place.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Cursor;

use mooncake_raft_store::testing::{SegmentSpecExt, mount_cmd, remount_cmd, segment};
use mooncake_raft_store::*;
use mooncake_segment::{ClientId, Range, SegmentId};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{CommittedLeaderId, EntryPayload, RaftSnapshotBuilder, SnapshotMeta};

fn entry(index: u64, cmd: Command) -> Entry {
    Entry {
        log_id: openraft::LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request { ts_ms: 1_000 + index, cmd }),
    }
}

/// A store node's segment, an arena on it, 20 objects committed into the
/// arena (one unit each) and the arena returned: the put path of the
/// master. On an empty state the arena is `arena-0`, at offset 0.
fn workload() -> Vec<Entry> {
    const UNIT: u64 = 1024;
    let seg = segment(1, 1 << 20, "h").endpoint("127.0.0.1:1").zone("z");
    let mut cmds = vec![
        mount_cmd(ClientId(7), seg),
        Command::ArenaGrant { segment: SegmentId(1), len_bytes: 20 * UNIT, unit_bytes: UNIT, term: 1 },
    ];
    for i in 0..20 {
        cmds.push(Command::PutCommit(NewObject {
            client: ClientId(7),
            key: format!("key-{i}"),
            size_bytes: 1000 + i,
            checksum: i as u32,
            pin: Pin::None,
            replicas: vec![PlacedReplica {
                segment: SegmentId(1),
                arena: ArenaId(0),
                range: Range::new(i * UNIT, UNIT),
            }],
            upsert: false,
        }));
    }
    cmds.push(Command::ArenaReturn { arenas: vec![ArenaId(0)] });
    cmds.into_iter().enumerate().map(|(i, c)| entry(i as u64 + 1, c)).collect()
}

fn open(dir: &std::path::Path) -> (LogStore, StateMachineStore) {
    open_store(&StoreOptions::new(dir)).expect("open store")
}

fn hash(sm: &StateMachineStore) -> (u64, usize) {
    sm.reader().read(|s| (s.state_hash(), s.object_count()))
}

#[tokio::test]
async fn a_snapshot_survives_restart_with_identical_state() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let (_log, mut sm) = open(dir.path());
        let answers = sm.apply(workload()).await.unwrap();
        assert!(answers.iter().all(|a| a.err().is_none()), "the workload applies: {answers:?}");
        sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        hash(&sm)
    };
    let (_log, mut sm) = open(dir.path());
    assert_eq!(hash(&sm), before);
    assert_eq!(before.1, 20);
    let (applied, _) = sm.applied_state().await.unwrap();
    assert_eq!(applied.map(|l| l.index), Some(workload().len() as u64));
    let snap = sm.get_current_snapshot().await.unwrap().expect("snapshot kept");
    assert_eq!(snap.meta.last_log_id, applied);
}

/// A disk that fills up while sled writes its own snapshot leaves an empty
/// `snap.<lsn>.generating` file. sled would refuse the whole data dir as
/// corrupt at every start; the store removes the unfinished file and
/// recovers as after any crash, with the same state.
#[tokio::test]
async fn an_unfinished_sled_snapshot_left_by_a_full_disk_does_not_stop_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let (mut log, mut sm) = open(dir.path());
        let entries = workload();
        log.blocking_append(entries.clone()).await.unwrap();
        sm.apply(entries).await.unwrap();
        sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        hash(&sm)
    };
    let unfinished = dir.path().join("snap.00000000000FFFFF.generating");
    std::fs::write(&unfinished, b"").unwrap();
    let (log, sm) = open(dir.path());
    assert_eq!(hash(&sm), before, "the same state after the restart");
    assert!(!unfinished.exists(), "the unfinished snapshot is gone");
    drop((log, sm));
    drop(open(dir.path()));
}

/// Once the log is purged into a snapshot, that snapshot is the only copy
/// of the entries before the purge point: a data dir whose snapshot file
/// is gone is refused at start with the file and the fix named, never
/// started as an empty state under a log that begins in the middle.
#[tokio::test]
async fn a_data_dir_whose_snapshot_file_is_gone_after_a_purge_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, mut sm) = open(dir.path());
        let entries = workload();
        let last = entries.last().unwrap().log_id;
        log.blocking_append(entries.clone()).await.unwrap();
        sm.apply(entries).await.unwrap();
        sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
        log.purge(last).await.unwrap();
    }
    // Still whole: it opens.
    drop(open(dir.path()));
    std::fs::remove_file(dir.path().join("raft-snapshot")).unwrap();
    let e = match open_store(&StoreOptions::new(dir.path())) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a data dir without the snapshot its log was purged into was opened"),
    };
    assert!(e.contains("lost its snapshot") && e.contains("raft-snapshot") && e.contains("member add"), "{e}");
}

#[tokio::test]
async fn installing_a_snapshot_replaces_the_whole_state() {
    let src_dir = tempfile::tempdir().unwrap();
    let (_l, mut src) = open(src_dir.path());
    src.apply(workload()).await.unwrap();
    let snap = src.get_snapshot_builder().await.build_snapshot().await.unwrap();

    let dst_dir = tempfile::tempdir().unwrap();
    let (_l2, mut dst) = open(dst_dir.path());
    // Stale state on the receiver must not survive the install.
    dst.apply(vec![entry(1, remount_cmd(ClientId(99), vec![]))]).await.unwrap();
    assert!(dst.reader().read(|s| s.client(ClientId(99)).is_some()), "the stale client is registered");
    dst.install_snapshot(&snap.meta, snap.snapshot).await.unwrap();
    assert_eq!(hash(&dst), hash(&src));
    assert!(dst.reader().read(|s| s.client(ClientId(99)).is_none()), "stale client survived install");
}

#[tokio::test]
async fn a_bad_snapshot_is_refused_and_the_old_state_stays() {
    let dir = tempfile::tempdir().unwrap();
    let (_l, mut sm) = open(dir.path());
    sm.apply(workload()).await.unwrap();
    let good = sm.get_snapshot_builder().await.build_snapshot().await.unwrap();
    let before = hash(&sm);
    let meta: SnapshotMeta<u64, openraft::BasicNode> = good.meta.clone();
    let mut data = good.snapshot.into_inner();

    let mut newer = data.clone();
    newer[..4].copy_from_slice(&(SNAPSHOT_SCHEMA_VERSION + 1).to_le_bytes());
    let err = sm.install_snapshot(&meta, Box::new(Cursor::new(newer))).await.unwrap_err();
    assert!(err.to_string().contains("schema version"), "{err}");

    data.truncate(data.len() / 2);
    assert!(sm.install_snapshot(&meta, Box::new(Cursor::new(data))).await.is_err());
    assert_eq!(hash(&sm), before, "a refused install changed the state");

    drop(sm);
    drop(_l);
    let (_l, sm) = open(dir.path());
    assert_eq!(hash(&sm), before, "a refused install changed the stored snapshot");
}
