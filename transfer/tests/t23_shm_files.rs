//! Segment files in /dev/shm over a store node's life, seen from a same-host
//! reader: a removed file is unmapped (its memory goes back to the host) and
//! a renamed one is reached under its new name only; a store node's claim on
//! its identity removes a dead predecessor's files and nobody else's.

mod common;

use std::path::Path;

use common::Node;
use mooncake_segment::{SHM_DIR, SegmentId, SegmentMemory};
use mooncake_transfer::testing::pattern;
use mooncake_transfer::{ShmOwner, ShmTransport, TransferError, Transport};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_segment_file_is_unmapped_by_same_host_readers() {
    let node = Node::shm("removed", 1 << 20).await;
    let shm = ShmTransport::new();
    shm.write(&node.target, 0, b"mapped").await.unwrap();
    assert_eq!(shm.mapped_count(), 1);

    // Why: a mapping kept after the file is gone pins the dead segment's
    // tmpfs memory in every reader on the host.
    std::fs::remove_file(&node.target.shm_path).unwrap();
    let err = shm.write(&node.target, 0, b"lost").await.unwrap_err();
    assert!(matches!(err, TransferError::ShmUnavailable { .. }), "{err}");
    assert_eq!(shm.mapped_count(), 0, "the mapping of a removed file is dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_segment_file_is_reached_under_its_new_name_only() {
    let node = Node::shm("renamed", 1 << 20).await;
    let shm = ShmTransport::new();
    let data = pattern(1, 4096);
    shm.write(&node.target, 0, &data).await.unwrap();

    let mut renamed = node.target.clone();
    renamed.id = SegmentId(node.target.id.0 + 1);
    renamed.shm_path = format!("{}-renewed", node.target.shm_path);
    std::fs::rename(&node.target.shm_path, &renamed.shm_path).unwrap();

    // Why: a writer still holding the old name (a stale reservation) must
    // fail, not write into memory that now serves other objects.
    assert!(shm.write(&node.target, 0, b"stale").await.is_err());
    let mut back = vec![0u8; data.len()];
    shm.read(&renamed, 0, &mut back).await.unwrap();
    assert_eq!(back, data, "same memory under the new name");
    std::fs::remove_file(&renamed.shm_path).unwrap();
}

#[test]
fn claiming_an_identity_in_dev_shm_removes_only_a_dead_predecessors_files() {
    let identity = format!("mooncake-transfer-test-owner-{}", std::process::id());
    let dir = Path::new(SHM_DIR);

    // A predecessor of this identity died and left its segment file; a live
    // node of another identity has one too.
    let dead_name = format!("{identity}-00000000000000d1");
    let dead = SegmentMemory::create_shm(&dead_name, 1 << 20, false).unwrap();
    dead.keep();
    drop(dead);
    let other_identity = format!("{identity}x");
    let other = ShmOwner::acquire(dir, &other_identity).unwrap();
    let live = SegmentMemory::create_shm(&other.segment_file_name(SegmentId(0xd2)), 1 << 20, false).unwrap();

    let owner = ShmOwner::acquire(dir, &identity).unwrap();
    let removed = owner.remove_stale(None).unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!((removed[0].path.clone(), removed[0].size_bytes), (dir.join(&dead_name), 1 << 20));
    assert!(!dir.join(&dead_name).exists());
    assert!(live.shm_path().is_some_and(Path::exists), "another identity's file is never touched");

    // While we hold the identity, a second claim (a second store node with
    // the same client id) is refused with a message that says what to do.
    let err = ShmOwner::acquire(dir, &identity).unwrap_err();
    assert!(err.to_string().contains("--client-id"), "{err}");
    drop(owner);
    drop(live);
    drop(other);
    assert!(!dir.join(format!("{identity}-lock")).exists(), "a clean exit leaves no lock file");
}
