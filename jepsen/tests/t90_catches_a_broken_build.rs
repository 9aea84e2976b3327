//! The harness catches real bugs: masters started with the development-only
//! `--dev-unsafe-stale-reads` (reads served from local state without
//! confirming leadership) must produce a history the linearizability checker
//! rejects when the leader is cut off from the other masters. Needs root and
//! the `mooncake` binary; otherwise it says so and skips.

mod common;

use std::time::Duration;

use mooncake_jepsen::runner::{RunOptions, run};
use mooncake_jepsen::scenario::Scenario;

#[test]
fn stale_reads_from_a_deliberately_broken_master_are_caught() {
    if let Err(e) = mooncake_jepsen::safety::require_root().and_then(|()| mooncake_jepsen::safety::check_tools()) {
        common::skip_or_fail("chaos host", e);
        return;
    }
    let bin = match mooncake_client::local_cluster::find_binary("mooncake") {
        Ok(b) => b,
        Err(e) => {
            common::skip_or_fail("mooncake binary", e);
            return;
        }
    };
    let results = tempfile::tempdir().expect("results dir");
    let opts = RunOptions {
        scenario: Scenario::IsolateLeader,
        seed: 7,
        duration: Duration::from_secs(15),
        rate: 200,
        clients: 6,
        bin,
        results_root: results.path().to_path_buf(),
        master_flags: vec!["--dev-unsafe-stale-reads".into()],
        prefix: format!("mcjt{}", std::process::id() % 10_000),
    };
    let report = run(opts).expect("the run itself completes");
    eprint!("{}", report.summary());
    let lin = report.checkers.iter().find(|c| c.checker == "linearizable").expect("linearizability verdict");
    assert!(!lin.valid, "stale reads went unnoticed: the harness would miss this bug");
    assert!(!report.valid);
    assert!(results.path().join("isolate-leader-7/history.jsonl").exists());
    assert!(results.path().join("isolate-leader-7/timeline.html").exists());
}
