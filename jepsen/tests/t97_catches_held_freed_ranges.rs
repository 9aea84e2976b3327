//! The harness catches a cache that refuses puts it could serve: masters
//! started with the development-only `--dev-unsafe-hold-freed-ranges` (the
//! ranges of a revoked put and of a returned writer chunk hold their arena
//! for 30 s, the quarantine of releases before stop 43) fill their segments
//! with arenas nobody can return while the lease workload churns, and
//! refuse puts with `NO_AVAILABLE_HANDLE` although hardly any byte is
//! pinned or leased. In the `baseline` scenario the availability checker
//! must report such refusals; the same seed on the real build must pass
//! it, with the cache full enough that eviction ran. Not `mixed`: the
//! checker excuses every refusal within a lease TTL of a leader change,
//! and one CI run's refusals all fell in those windows (stop 43), so the
//! bug went unseen by chance; the real build under faults is judged by
//! the CI suite's `mixed` run. Needs root and the `mooncake` binary;
//! otherwise it says so and skips.

mod common;

use std::time::Duration;

use common::verdict;
use mooncake_jepsen::report::RunReport;
use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 5150;
const RUN_TIME: Duration = Duration::from_secs(20);

fn chaos_run(master_flags: Vec<String>, results: &std::path::Path) -> Option<RunReport> {
    let opts = common::chaos_run_options(Scenario::Baseline, SEED, RUN_TIME, master_flags, results, "mcjh")?;
    Some(common::run_reported(opts))
}

#[test]
fn freed_ranges_held_for_a_quarantine_are_caught_and_the_real_build_passes_the_same_run() {
    // Phase 1, why: a cache whose freed space sits in arenas nobody can
    // return refuses puts while its segments hold bytes eviction could
    // free; the availability checker must say so, or it could not tell
    // this broken build from a good one.
    let broken_results = tempfile::tempdir().expect("results dir");
    let Some(broken) = chaos_run(vec!["--dev-unsafe-hold-freed-ranges".into()], broken_results.path()) else {
        return;
    };
    let caught = verdict(&broken, "availability");
    assert!(
        !caught.valid,
        "puts refused with room to spare went unnoticed: the harness would miss this bug ({:?})",
        broken.availability
    );
    assert!(!broken.valid);

    // Phase 2, why: the same schedule on the real build refuses no put it
    // had room for, and was not vacuous: puts were acknowledged and the
    // lease workload filled the segments past the eviction watermark.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(good) = chaos_run(Vec::new(), good_results.path()) else { return };
    let availability = verdict(&good, "availability");
    assert!(availability.valid, "the real build refused puts it had room for: {:?}", availability.problems);
    let acked = verdict(&good, "puts_acknowledged").checked;
    assert!(acked > 500, "too few puts acknowledged: {acked}\n{}", good.summary());
    assert!(good.kv_leases.evicted_objects > 0, "eviction never ran: nothing was full\n{}", good.summary());
}
