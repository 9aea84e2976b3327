//! The harness catches tenants crossing: masters started with the
//! development-only `--dev-unsafe-ignore-tenants` (every call acts in the
//! default tenant, whatever it names) must fail the `tenant_isolation`
//! checker, whose probe then reads and removes the other tenant's objects.
//! The real build passes that checker in every other run of the suite.
//! Needs root and the `mooncake` binary; otherwise it says so and skips.

mod common;

use std::time::Duration;

use mooncake_jepsen::scenario::Scenario;

const SEED: u64 = 23;

#[test]
fn tenants_crossing_is_caught() {
    let results = tempfile::tempdir().expect("results dir");
    let flags = vec!["--dev-unsafe-ignore-tenants".to_string()];
    let Some(opts) =
        common::chaos_run_options(Scenario::Baseline, SEED, Duration::from_secs(8), flags, results.path(), "mctn")
    else {
        return;
    };
    let broken = common::run_reported(opts);
    let isolation = common::verdict(&broken, "tenant_isolation");
    assert!(!isolation.valid, "tenants crossing went unnoticed: the harness would miss this bug");
    assert!(isolation.problems.iter().any(|p| p.contains("jepsen-a")), "{:?}", isolation.problems);
    assert!(!broken.valid);
}
