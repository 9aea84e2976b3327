//! The harness catches broken KV leases: masters started with the
//! development-only `--dev-unsafe-unfenced-removals` (removals check leases
//! before they propose but fence no reader, so a read answered while a
//! removal commits is leased an object that is then freed) must produce a
//! lease history the KV lease checker rejects; the same run on the real
//! build must pass it, having done enough to mean something. Needs root and
//! the `mooncake` binary; otherwise it says so and skips.

mod common;

use std::time::Duration;

use mooncake_jepsen::report::RunReport;
use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 11;

fn chaos_run(master_flags: Vec<String>, results: &std::path::Path) -> Option<RunReport> {
    let duration = Duration::from_secs(15);
    let opts = common::chaos_run_options(Scenario::Baseline, SEED, duration, master_flags, results, "mcjl")?;
    Some(common::run_reported(opts))
}

fn lease_verdict(report: &RunReport) -> &mooncake_jepsen::report::CheckerVerdict {
    common::verdict(report, "kv_leases")
}

#[test]
fn unfenced_removals_are_caught_and_the_fenced_build_passes_the_same_run() {
    // Phase 1, why: the planted race must show up as a broken lease, or the
    // lease checker could not tell a broken build from a good one.
    let broken_results = tempfile::tempdir().expect("results dir");
    let Some(broken) = chaos_run(vec!["--dev-unsafe-unfenced-removals".into()], broken_results.path()) else {
        return;
    };
    let leases = lease_verdict(&broken);
    assert!(!leases.valid, "unfenced removals went unnoticed: the harness would miss this bug");
    assert!(!leases.problems.is_empty());
    assert!(!broken.valid);
    assert!(broken_results.path().join(format!("baseline-{SEED}/lease-history.jsonl")).exists());

    // Phase 2, why: the same schedule on the real build passes, and the
    // workload was not vacuous — leases granted, removes both won and were
    // refused for a lease, late copies verified.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(good) = chaos_run(Vec::new(), good_results.path()) else { return };
    let leases = lease_verdict(&good);
    assert!(leases.valid, "the real build broke a KV lease: {:?}", leases.problems);
    let counts = good.kv_leases.counts;
    assert!(counts.reads_found > 100, "too few leases granted: {counts:?}");
    assert!(counts.removes_ok > 10, "too few removes won their race: {counts:?}");
    assert!(counts.removes_refused > 10, "too few removes met a lease: {counts:?}");
    assert!(counts.copies_verified > 10, "too few late copies verified: {counts:?}");
}
