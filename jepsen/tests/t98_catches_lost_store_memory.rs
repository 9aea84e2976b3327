//! The harness catches a rolling restart that loses the store nodes'
//! memory: store nodes on anonymous memory (`--anonymous`, as every store
//! node restarted before issue 39: a restart came back empty, under a new
//! segment) must, in the `rolling-restart` scenario, fail
//! `store_restarts_reattach` and lose acknowledged objects
//! (`no_lost_acked_puts`: each register object has a replica on each node,
//! and both nodes restart in turn); the same seed on the real build must
//! pass, with every restart re-attached. Needs root and the `mooncake`
//! binary; otherwise it says so and skips.

mod common;

use std::time::Duration;

use common::verdict;
use mooncake_jepsen::report::{CheckerVerdict, RunReport};
use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 1;
/// Several rounds of restarts of both store nodes.
const RUN_TIME: Duration = Duration::from_secs(20);

fn chaos_run(store_flags: Vec<String>, results: &std::path::Path) -> Option<RunReport> {
    let mut opts = common::chaos_run_options(Scenario::RollingRestart, SEED, RUN_TIME, Vec::new(), results, "mcjr")?;
    opts.store_flags = store_flags;
    Some(common::run_reported(opts))
}

#[test]
fn a_restart_that_loses_the_memory_is_caught_and_the_real_build_passes_the_same_run() {
    // Phase 1, why: store nodes that come back empty must show up as lost
    // objects and restarts not re-attached, or the harness could not tell
    // an upgrade that drops the cache from one that keeps it.
    let broken_results = tempfile::tempdir().expect("results dir");
    let Some(broken) = chaos_run(vec!["--anonymous".into()], broken_results.path()) else {
        return;
    };
    let restarts = verdict(&broken, "store_restarts_reattach");
    assert!(!restarts.valid && restarts.checked > 0, "restarts without their memory went unnoticed");
    assert!(!verdict(&broken, "no_lost_acked_puts").valid, "the objects of both nodes' memory were lost unnoticed");
    assert!(!broken.valid);

    // Phase 2, why: the same schedule on the real build passes every
    // checker, with both store nodes restarted, each re-attached.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(good) = chaos_run(Vec::new(), good_results.path()) else { return };
    let failed: Vec<&CheckerVerdict> = good.checkers.iter().filter(|c| !c.valid).collect();
    assert!(good.valid, "the real build failed: {failed:?}");
    assert!(good.store_restarts.len() >= 4, "too few restarts: {:?}", good.store_restarts);
    assert!(good.store_restarts.iter().all(|r| r.reattached()), "{:?}", good.store_restarts);
}
