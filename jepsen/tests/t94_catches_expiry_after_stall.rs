//! The harness catches a leader that expires the store nodes it could not
//! hear while every master was paused: masters started with the
//! development-only `--dev-unsafe-expire-after-stall` (a leader's stall does
//! not restart the clients' TTLs) must, in the `quorum-pause` scenario, lose
//! acknowledged puts and expire the store nodes, which `no_lost_acked_puts`
//! and `store_nodes_kept` report; the same seed on the real build must pass.
//! Needs root and the `mooncake` binary; otherwise it says so and skips.

mod common;

use std::time::Duration;

use common::verdict;
use mooncake_jepsen::report::{CheckerVerdict, RunReport};
use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 7;
/// Two whole-quorum pauses (a 3 s gap, then 8 s stopped, each).
const RUN_TIME: Duration = Duration::from_secs(25);

fn chaos_run(master_flags: Vec<String>, results: &std::path::Path) -> Option<RunReport> {
    let opts = common::chaos_run_options(Scenario::QuorumPause, SEED, RUN_TIME, master_flags, results, "mcjq")?;
    Some(common::run_reported(opts))
}

#[test]
fn expiry_after_a_stall_is_caught_and_the_real_build_passes_the_same_run() {
    // Phase 1, why: a leader that expires everyone when it resumes loses
    // every object; the harness must tell that build from a good one.
    let broken_results = tempfile::tempdir().expect("results dir");
    let Some(broken) = chaos_run(vec!["--dev-unsafe-expire-after-stall".into()], broken_results.path()) else {
        return;
    };
    let kept = verdict(&broken, "store_nodes_kept");
    assert!(!kept.valid, "expired store nodes went unnoticed: the harness would miss this bug");
    assert!(kept.problems.iter().any(|p| p.contains("store node")), "{:?}", kept.problems);
    assert!(!broken.valid);

    // Phase 2, why: the same schedule on the real build passes every
    // checker, and was not vacuous: the quorum was paused and the store
    // nodes were checked.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(good) = chaos_run(Vec::new(), good_results.path()) else { return };
    let failed: Vec<&CheckerVerdict> = good.checkers.iter().filter(|c| !c.valid).collect();
    assert!(good.valid, "the real build failed: {failed:?}");
    assert_eq!(verdict(&good, "store_nodes_kept").checked, 2, "both store nodes checked");
}
