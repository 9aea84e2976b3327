//! The harness catches a gap in the event feed: masters started with the
//! development-only `--dev-unsafe-skip-events` (each `Watch` stream leaves
//! out the first event of every 7th revision) must fail the `events`
//! checker; the same run on the real build must pass it, having seen
//! enough stores and removals to mean something. Needs root and the
//! `mooncake` binary; otherwise it says so and skips.

mod common;

use std::time::Duration;

use mooncake_jepsen::report::RunReport;
use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 11;

fn chaos_run(master_flags: Vec<String>, results: &std::path::Path) -> Option<RunReport> {
    let duration = Duration::from_secs(15);
    let opts = common::chaos_run_options(Scenario::Baseline, SEED, duration, master_flags, results, "mcev")?;
    Some(common::run_reported(opts))
}

#[test]
fn skipped_events_are_caught_and_the_real_build_passes_the_same_run() {
    // Phase 1, why: a feed with gaps must fail the checker, or it could not
    // tell a broken feed from a good one.
    let broken_results = tempfile::tempdir().expect("results dir");
    let Some(broken) = chaos_run(vec!["--dev-unsafe-skip-events".into()], broken_results.path()) else {
        return;
    };
    let events = common::verdict(&broken, "events");
    assert!(!events.valid, "a feed with gaps went unnoticed: the harness would miss this bug");
    assert!(!events.problems.is_empty());
    assert!(!broken.valid);
    assert!(broken_results.path().join(format!("baseline-{SEED}/event-feed.json")).exists());

    // Phase 2, why: the same schedule on the real build passes, over a feed
    // that carried many stores and removals to the end of the run.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(good) = chaos_run(Vec::new(), good_results.path()) else { return };
    let events = common::verdict(&good, "events");
    assert!(events.valid, "the real build's feed broke: {:?}", events.problems);
    let f = good.event_feed;
    assert!(f.stored > 200 && f.removed > 200, "too few events to mean anything: {f:?}");
    assert!(f.through >= f.final_revision && f.final_revision > 0, "{f:?}");
}
