//! The harness catches a disk tier that acknowledges what it did not store:
//! store nodes started with the development-only
//! `--dev-unsafe-unwritten-copies` (each copy the masters ask for, offload
//! to disk or promotion to memory, is reported made without a byte
//! written) must, in the `disk-stores` scenario, leave disk replicas whose
//! bytes are not their object's, which the `committed_bytes` checker (every
//! replica read raw) reports, and the `disk_objects` checker too whenever a
//! register value was seen on a disk and kept (0-7 of them in a 20 s debug
//! run: too few to require one); the same seed on the real build must pass,
//! with values seen on disks and objects read back from them. Needs root and the `mooncake` binary; otherwise it says so and
//! skips.

mod common;

use std::time::Duration;

use common::verdict;
use mooncake_jepsen::report::{CheckerVerdict, RunReport};
use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 5;
/// A few store kills, and objects dropped from memory after their offload.
const RUN_TIME: Duration = Duration::from_secs(20);

fn chaos_run(store_flags: Vec<String>, results: &std::path::Path) -> Option<RunReport> {
    let mut opts = common::chaos_run_options(Scenario::DiskStores, SEED, RUN_TIME, Vec::new(), results, "mcju")?;
    if !store_flags.is_empty() && !common::knows_planted_bugs(&opts.bin, "store") {
        return None;
    }
    opts.store_flags = store_flags;
    Some(common::run_reported(opts))
}

#[test]
fn unwritten_copies_are_caught_and_the_real_build_passes_the_same_run() {
    // Phase 1, why: a store node that reports copies it never wrote must
    // show up as disk replicas without their objects' bytes, or the harness
    // could not tell this broken disk tier from a good one.
    let broken_results = tempfile::tempdir().expect("results dir");
    let Some(broken) = chaos_run(vec!["--dev-unsafe-unwritten-copies".into()], broken_results.path()) else {
        return;
    };
    let committed = verdict(&broken, "committed_bytes");
    assert!(!committed.valid, "unwritten copies went unnoticed: the harness would miss this bug");
    assert!(committed.problems.iter().any(|p| p.contains("the bytes of a committed object changed")));
    let disk = verdict(&broken, "disk_objects");
    assert!(disk.checked == 0 || !disk.valid, "the disk checker passed disk replicas without their bytes");
    assert!(!broken.valid);

    // Phase 2, why: the same schedule on the real build passes every
    // checker, and was not vacuous: values were seen on disk and read back
    // from it.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(good) = chaos_run(Vec::new(), good_results.path()) else { return };
    let failed: Vec<&CheckerVerdict> = good.checkers.iter().filter(|c| !c.valid).collect();
    assert!(good.valid, "the real build failed: {failed:?}");
    let stores = good.disk_stores.as_ref().expect("disk-stores counts");
    assert!(stores.listed_disk > 0, "no register read listed a disk replica: {stores:?}");
    let from_disk = stores.served_from_disk + stores.lease_served_from_disk;
    assert!(from_disk > 0, "no read was served by a disk replica: {stores:?}");
}
