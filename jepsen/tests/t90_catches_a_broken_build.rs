//! The harness catches real bugs: masters started with the development-only
//! `--dev-unsafe-stale-reads` (reads served from local state without
//! confirming leadership) must produce a history the linearizability checker
//! rejects when the leader is cut off from the other masters; the seed that
//! caught it, run on the real build, must pass the same checker. Needs root
//! and the `mooncake` binary; otherwise it says so and skips.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use mooncake_jepsen::runner::run;
use mooncake_jepsen::scenario::Scenario;

/// Runs tried before the test gives up: a stale read needs a client still
/// talking to the cut-off leader after the new one acknowledged a write to
/// the same key, which one 15 s run does not always produce.
const ATTEMPTS: u64 = 3;

#[test]
fn stale_reads_from_a_deliberately_broken_master_are_caught() {
    for seed in 7..7 + ATTEMPTS {
        let results = tempfile::tempdir().expect("results dir");
        let flags = vec!["--dev-unsafe-stale-reads".into()];
        let Some(opts) = common::chaos_run_options(
            Scenario::IsolateLeader,
            seed,
            Duration::from_secs(15),
            flags,
            results.path(),
            "mcjt",
        ) else {
            return;
        };
        let report = run(opts).expect("the run itself completes");
        eprint!("{}", report.summary());
        assert!(results.path().join(format!("isolate-leader-{seed}/history.jsonl")).exists());
        assert!(results.path().join(format!("isolate-leader-{seed}/timeline.html")).exists());
        let lin = report.checkers.iter().find(|c| c.checker == "linearizable").expect("linearizability verdict");
        if !lin.valid {
            assert!(!report.valid, "a linearizability violation must fail the verdict");
            real_build_passes(seed);
            return;
        }
        eprintln!("seed {seed}: no stale read observed; trying another run");
    }
    panic!("stale reads went unnoticed in {ATTEMPTS} runs: the harness would miss this bug");
}

/// The real build on the seed that caught the broken one: linearizable,
/// with the cut-off leader's partition run (not vacuous: reads were judged).
fn real_build_passes(seed: u64) {
    let results = tempfile::tempdir().expect("results dir");
    let Some(opts) = common::chaos_run_options(
        Scenario::IsolateLeader,
        seed,
        Duration::from_secs(15),
        Vec::new(),
        results.path(),
        "mcjg",
    ) else {
        return;
    };
    let report = run(opts).expect("the run itself completes");
    eprint!("{}", report.summary());
    let lin = report.checkers.iter().find(|c| c.checker == "linearizable").expect("linearizability verdict");
    assert!(lin.valid, "the real build, seed {seed}: {:?}", lin.problems);
    assert!(lin.checked > 0, "nothing was judged");
    assert!(report.valid, "the real build, seed {seed}:\n{}", report.summary());
}
