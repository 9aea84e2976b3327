//! The harness catches real bugs: masters started with the development-only
//! `--dev-unsafe-stale-reads` (reads served from local state without
//! confirming leadership) must produce a history the linearizability checker
//! rejects when the leader is cut off from the other masters. Needs root and
//! the `mooncake` binary; otherwise it says so and skips.

mod common;

use std::time::Duration;

use mooncake_jepsen::runner::run;
use mooncake_jepsen::scenario::Scenario;

#[test]
fn stale_reads_from_a_deliberately_broken_master_are_caught() {
    let results = tempfile::tempdir().expect("results dir");
    let flags = vec!["--dev-unsafe-stale-reads".into()];
    let Some(opts) =
        common::chaos_run_options(Scenario::IsolateLeader, 7, Duration::from_secs(15), flags, results.path(), "mcjt")
    else {
        return;
    };
    let report = run(opts).expect("the run itself completes");
    eprint!("{}", report.summary());
    let lin = report.checkers.iter().find(|c| c.checker == "linearizable").expect("linearizability verdict");
    assert!(!lin.valid, "stale reads went unnoticed: the harness would miss this bug");
    assert!(!report.valid);
    assert!(results.path().join("isolate-leader-7/history.jsonl").exists());
    assert!(results.path().join("isolate-leader-7/timeline.html").exists());
}
