//! The harness catches a new leader that reuses a deposed leader's space:
//! masters started with the development-only `--dev-unsafe-arena-reuse`
//! (a new leader returns older terms' arenas at once, so their space is
//! granted again while a stalled writer may still write into it) must, in
//! the `stalled-writers` scenario, leave committed objects whose bytes no
//! longer match their checksums, which the committed-bytes checker reports;
//! the same seed on the real build must pass, with stalled puts recorded by
//! new leaders and read back. Needs root and the `mooncake` binary;
//! otherwise it says so and skips.

mod common;

use std::time::Duration;

use common::verdict;
use mooncake_jepsen::report::{CheckerVerdict, RunReport};
use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 13;
/// About five kills under stall.
const RUN_TIME: Duration = Duration::from_secs(20);

fn chaos_run(master_flags: Vec<String>, results: &std::path::Path) -> Option<RunReport> {
    let opts = common::chaos_run_options(Scenario::StalledWriters, SEED, RUN_TIME, master_flags, results, "mcja")?;
    Some(common::run_reported(opts))
}

#[test]
fn arena_reuse_under_stalled_writers_is_caught_and_the_real_build_passes_the_same_run() {
    // Phase 1, why: a new leader that hands out a stalled writer's space
    // again must show up as committed objects whose bytes changed, or the
    // harness could not tell this broken build from a good one.
    let broken_results = tempfile::tempdir().expect("results dir");
    let Some(broken) = chaos_run(vec!["--dev-unsafe-arena-reuse".into()], broken_results.path()) else {
        return;
    };
    let committed = verdict(&broken, "committed_bytes");
    assert!(!committed.valid, "reused arenas went unnoticed: the harness would miss this bug");
    assert!(broken.committed_bytes.corrupt > 0, "{:?}", broken.committed_bytes);
    assert!(committed.problems.iter().any(|p| p.contains("the bytes of a committed object changed")));
    assert!(!broken.valid);
    let stalls = broken.stall_writers.expect("stall writer counts");
    assert!(stalls.stalls >= 4, "too few stalls: {stalls:?}");
    assert!(broken_results.path().join(format!("stalled-writers-{SEED}/stall-history.jsonl")).exists());

    // Phase 2, why: the same schedule on the real build passes every
    // checker, and was not vacuous: the writers stalled across leader
    // kills and their puts ended (a new leader keeps the deposed one's
    // arenas out of the store nodes' fences at once, so a second half
    // written after that is refused and the put fails; one written before
    // is recorded by the new leader), and every replica was read.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(good) = chaos_run(Vec::new(), good_results.path()) else { return };
    let failed: Vec<&CheckerVerdict> = good.checkers.iter().filter(|c| !c.valid).collect();
    assert!(good.valid, "the real build failed: {failed:?}");
    let stalls = good.stall_writers.expect("stall writer counts");
    assert!(stalls.stalls >= 4, "too few stalls: {stalls:?}");
    assert!(stalls.ok + stalls.error > 10, "too few stalled puts ended: {stalls:?}");
    assert_eq!(stalls.expired, 0, "the real build let stalled puts expire: {stalls:?}");
    assert!(good.committed_bytes.replicas > 100, "too few replicas read: {:?}", good.committed_bytes);
    if stalls.ok > 0 {
        assert!(verdict(&good, "stall_puts").checked > 0, "no acknowledged stall put was read back");
    }
}
