//! The harness catches a writer chunk reclaimed too early: masters started
//! with the development-only `--dev-unsafe-chunk-reuse` (a chunk's space is
//! handed out again the moment the chunk is granted, while its writer still
//! places small puts in it) must, in the `baseline` scenario, leave
//! committed objects whose bytes no longer match their checksums, or reads
//! of bytes no put wrote; the same seed on the real build must pass every
//! checker (its small puts placed in writer chunks as well). Needs root and the
//! `mooncake` binary; otherwise it says so and skips.

mod common;

use std::time::Duration;

use common::verdict;
use mooncake_jepsen::report::{CheckerVerdict, RunReport};
use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 17;
const RUN_TIME: Duration = Duration::from_secs(12);

fn chaos_run(master_flags: Vec<String>, results: &std::path::Path) -> Option<RunReport> {
    let opts = common::chaos_run_options(Scenario::Baseline, SEED, RUN_TIME, master_flags, results, "mcjc")?;
    Some(common::run_reported(opts))
}

#[test]
fn chunk_space_reclaimed_at_once_is_caught_and_the_real_build_passes_the_same_run() {
    // Phase 1, why: space of a chunk its writer still fills, handed to
    // other puts, must show up as changed bytes of committed objects, or
    // the harness could not tell this broken build from a good one.
    let broken_results = tempfile::tempdir().expect("results dir");
    let Some(broken) = chaos_run(vec!["--dev-unsafe-chunk-reuse".into()], broken_results.path()) else {
        return;
    };
    // Three checkers read bytes back: committed objects replica by replica
    // at the end, the register's gets, and the lease workload's copies.
    let caught: Vec<&str> =
        ["committed_bytes", "bytes-verified", "kv_leases"].into_iter().filter(|c| !verdict(&broken, c).valid).collect();
    assert!(
        !caught.is_empty(),
        "reused chunk space went unnoticed: the harness would miss this bug ({:?})",
        broken.committed_bytes
    );
    assert!(!broken.valid);

    // Phase 2, why: the same schedule on the real build passes, and was
    // not vacuous: its reads were verified byte for byte.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(good) = chaos_run(Vec::new(), good_results.path()) else { return };
    let failed: Vec<&CheckerVerdict> = good.checkers.iter().filter(|c| !c.valid).collect();
    assert!(good.valid, "the real build failed: {failed:?}");
    let verified = verdict(&good, "bytes-verified").checked;
    assert!(verified > 100, "too few reads verified: {verified}\n{}", good.summary());
}
