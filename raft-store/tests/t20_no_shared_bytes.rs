//! No two objects ever share a byte of a segment, and the accounting stays
//! exact: thousands of random commands (seeded, replayable) and a proptest
//! over command sequences, checked after every step.

mod common;

use common::*;

use mooncake_raft_store::{MetaError, MetaState, Response};
use mooncake_segment::ClientId;
use proptest::prelude::*;

// ================================================================ no shared bytes

/// Applies `ops` (each one seeds a random command) and checks the invariant
/// after every step.
fn run_random_ops(ops: &[u64]) -> MetaState {
    let mut s = MetaState::default();
    for (i, id) in (1..=4).enumerate() {
        mount(&mut s, ClientId(1 + i as u64), segment(id, 16384, &format!("host-{}", id % 3)));
    }
    for op in ops {
        let cmd = random_command(&mut Rng(*op), &s);
        apply(&mut s, cmd);
        assert_no_shared_bytes(&s);
    }
    s
}

#[test]
fn thousands_of_random_commands_never_let_two_objects_share_a_byte() {
    for seed in 0..8u64 {
        let mut rng = Rng(seed);
        let ops: Vec<u64> = (0..1500).map(|_| rng.next()).collect();
        run_random_ops(&ops);
    }
}

#[test]
fn random_runs_exercise_puts_removes_and_discards() {
    // Guards the generator: the invariant test above is only as good as the
    // states it reaches.
    let mut rng = Rng(42);
    let mut s = MetaState::default();
    for id in 1..=4 {
        mount(&mut s, ClientId(id), segment(id, 16384, &format!("host-{}", id % 3)));
    }
    let (mut placed_n, mut removed_n, mut full_n, mut max_used) = (0, 0, 0, 0);
    for _ in 0..3000 {
        let cmd = random_command(&mut rng, &s);
        match apply(&mut s, cmd) {
            Response::Placed { .. } => placed_n += 1,
            Response::Removed { count } => removed_n += count,
            Response::Err(MetaError::NoAvailableHandle(_)) => full_n += 1,
            _ => {}
        }
        max_used = max_used.max(s.used_bytes());
    }
    assert!(placed_n > 300, "placed {placed_n}");
    assert!(removed_n > 10, "bulk-removed {removed_n}");
    assert!(full_n > 0, "never ran out of space");
    assert!(max_used > 16384, "max used {max_used}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_sequence_of_commands_lets_two_objects_share_a_byte(ops in proptest::collection::vec(any::<u64>(), 1..250)) {
        run_random_ops(&ops);
    }
}
