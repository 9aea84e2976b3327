//! The harness catches tenants crossing: masters started with the
//! development-only `--dev-unsafe-ignore-tenants` (every call acts in the
//! default tenant, whatever it names) must fail the `tenant_isolation`
//! checker, whose probe then reads and removes the other tenant's objects;
//! the same seed on the real build must pass it, its probe having judged
//! answers (not vacuous). Needs root and the `mooncake` binary; otherwise
//! it says so and skips.

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

    // The real build, same seed: its tenants stay apart, and the probe
    // judged answers, so the pass is not vacuous.
    let good_results = tempfile::tempdir().expect("results dir");
    let Some(opts) = common::chaos_run_options(
        Scenario::Baseline,
        SEED,
        Duration::from_secs(8),
        Vec::new(),
        good_results.path(),
        "mctg",
    ) else {
        return;
    };
    let good = common::run_reported(opts);
    let isolation = common::verdict(&good, "tenant_isolation");
    assert!(isolation.valid, "the real build crossed tenants: {:?}", isolation.problems);
    assert!(isolation.checked > 0, "the probe judged nothing\n{}", good.summary());
    assert!(good.valid, "{}", good.summary());
}
