//! A put as the state machine sees it: the shape checks the master's edge
//! and apply share (`validate_put`), the limits themselves accepted, and
//! versions that only grow. Placement is the leader's (master
//! `reservations.rs`); what `PutCommit` accepts is in `t22_arenas.rs`.

mod common;

use common::*;

use mooncake_raft_store::state::{
    PutSpec, REPLICA_NUM_MAX, SEGMENT_SIZE_MAX_BYTES, STORED_KEY_MAX_BYTES, validate_put,
};
use mooncake_raft_store::{MetaState, Pin};
use mooncake_segment::{ALLOC_ALIGN_BYTES, SegmentId};

fn spec(key: &str, size_bytes: u64, replica_num: u32) -> PutSpec {
    PutSpec { client: W1, key: key.to_string(), size_bytes, replica_num, preferred: Vec::new(), pin: Pin::None }
}

#[test]
fn malformed_puts_are_invalid_params_naming_what_is_wrong() {
    let too_many_preferred =
        PutSpec { preferred: (0..=REPLICA_NUM_MAX as u64).map(SegmentId).collect(), ..spec("k", 100, 1) };
    let cases: Vec<(&str, PutSpec, &str)> = vec![
        ("size 0", spec("k", 0, 1), "size 0"),
        ("replica_num 0", spec("k", 100, 0), "replica_num 0"),
        ("replica_num 17", spec("k", 100, REPLICA_NUM_MAX + 1), "replica_num 17"),
        ("empty key", spec("", 100, 1), "key is empty"),
        ("key of 4163 bytes", spec(&"x".repeat(STORED_KEY_MAX_BYTES + 1), 100, 1), "4163 bytes"),
        ("larger than any segment", spec("k", SEGMENT_SIZE_MAX_BYTES + 1, 1), "larger than any segment"),
        ("17 preferred segments", too_many_preferred, "preferred segments"),
        ("a soft pin of 0 ms", PutSpec { pin: Pin::SoftFor { ttl_ms: 0 }, ..spec("k", 100, 1) }, "soft-pin TTL"),
    ];
    for (what, put, says) in cases {
        let e = validate_put(&put).expect_err(what);
        assert!(is_invalid(&e), "{what}: {e:?}");
        assert!(e.to_string().contains(says), "{what}: {e}");
    }
}

#[test]
fn the_limits_themselves_are_accepted() {
    let key = "k".repeat(STORED_KEY_MAX_BYTES);
    validate_put(&spec(&key, SEGMENT_SIZE_MAX_BYTES, REPLICA_NUM_MAX)).expect("the limits");
    let mut s = MetaState::default();
    for id in 1..=REPLICA_NUM_MAX as u64 {
        mount(&mut s, NODE_A, segment(id, 1 << 16, &format!("host-{id}")));
    }
    put_complete(&mut s, W1, &key, 1, REPLICA_NUM_MAX);
    let o = s.object(&key).expect("committed");
    assert_eq!(o.replicas.len(), REPLICA_NUM_MAX as usize);
    assert!(o.replicas.iter().all(|r| r.range.len == ALLOC_ALIGN_BYTES), "a 1-byte object takes one aligned unit");
    mount(&mut s, NODE_B, segment(99, 1 << 16, "host-99"));
    put_complete(&mut s, W1, "whole-segment", 1 << 16, 1);
    let whole = s.object("whole-segment").map(|o| (o.replicas[0].segment, o.replicas[0].range.len));
    assert_eq!(whole, Some((SegmentId(99), 1 << 16)), "an object may fill its segment");
}

#[test]
fn versions_increase_with_every_new_object() {
    let mut s = three_node_cluster(1 << 20);
    let mut last = None;
    for i in 0..20 {
        let v = put_complete(&mut s, W1, &format!("k{i}"), 100, 1);
        assert!(last.is_none_or(|l| v > l), "{v:?} after {last:?}");
        last = Some(v);
    }
}
