//! A retried remove must not take effect twice: `Command::Once` applies its
//! command at most once per request id (within the dedup window), returns
//! the first answer to retries, and survives snapshots like all other state.

use mooncake_raft_store::state::REQUEST_DEDUP_WINDOW_MS;
use mooncake_raft_store::*;
use mooncake_segment::{ClientId, SegmentId};

fn apply(s: &mut MetaState, ts_ms: u64, cmd: Command) -> Response {
    s.apply(&Request { ts_ms, cmd })
}

fn setup() -> MetaState {
    let mut s = MetaState::default();
    let seg = SegmentSpec {
        id: SegmentId(1),
        size_bytes: 1 << 20,
        endpoint: "e:1".into(),
        host_id: "h".into(),
        zone: String::new(),
        tier: Tier::Dram,
        shm_path: String::new(),
    };
    assert_eq!(apply(&mut s, 1, Command::MountSegment { client: ClientId(1), segment: seg }), Response::Ok);
    s
}

fn put(s: &mut MetaState, ts: u64, key: &str) {
    let p = PutStart {
        client: ClientId(1),
        key: key.into(),
        size_bytes: 100,
        replica_num: 1,
        preferred: vec![],
        pin: Pin::None,
    };
    assert!(matches!(apply(s, ts, Command::PutStart(p)), Response::Placed { .. }));
    assert_eq!(apply(s, ts, Command::PutEnd { client: ClientId(1), key: key.into(), checksum: 1 }), Response::Ok);
}

fn remove_once(id: u64, key: &str) -> Command {
    Command::Once { request_id: id, cmd: Box::new(Command::Remove { key: key.into() }) }
}

#[test]
fn a_retried_remove_does_not_remove_an_object_put_in_between() {
    let mut s = setup();
    put(&mut s, 10, "k");
    assert_eq!(apply(&mut s, 20, remove_once(77, "k")), Response::Ok);
    put(&mut s, 30, "k");
    // The retry (same id) answers like the first attempt and changes nothing.
    let before = s.state_hash();
    assert_eq!(apply(&mut s, 40, remove_once(77, "k")), Response::Ok);
    assert!(s.object("k").is_some(), "the retry removed the newer object");
    assert_eq!(s.state_hash(), before);
    // Another request id is another remove.
    assert_eq!(apply(&mut s, 50, remove_once(78, "k")), Response::Ok);
    assert!(s.object("k").is_none());
}

#[test]
fn a_refusal_is_remembered_too_and_ids_expire_after_the_window() {
    let mut s = setup();
    let first = apply(&mut s, 10, remove_once(5, "ghost"));
    assert!(matches!(first, Response::Err(MetaError::ObjectNotFound(_))));
    put(&mut s, 20, "ghost");
    assert_eq!(apply(&mut s, 30, remove_once(5, "ghost")), first, "the first answer is returned");
    assert!(s.object("ghost").is_some());
    // Long after the window the id is forgotten (pruned when another id is recorded).
    let later = 30 + REQUEST_DEDUP_WINDOW_MS + 1;
    apply(&mut s, later, remove_once(6, "nothing"));
    assert_eq!(apply(&mut s, later, remove_once(5, "ghost")), Response::Ok);
    assert!(s.object("ghost").is_none());
}

#[test]
fn remembered_requests_survive_a_snapshot_image() {
    let mut s = setup();
    put(&mut s, 10, "k");
    apply(&mut s, 20, remove_once(9, "k"));
    let mut restored = MetaState::from_image(s.to_image()).expect("image");
    assert_eq!(restored.state_hash(), s.state_hash());
    put(&mut restored, 30, "k");
    assert_eq!(apply(&mut restored, 40, remove_once(9, "k")), Response::Ok);
    assert!(restored.object("k").is_some(), "dedup state lost in the snapshot");
}

#[test]
fn once_wraps_single_commands_only() {
    let mut s = setup();
    let nested = Command::Once { request_id: 1, cmd: Box::new(Command::Batch(vec![])) };
    assert!(matches!(apply(&mut s, 10, nested), Response::Err(MetaError::InvalidParams(_))));
}
