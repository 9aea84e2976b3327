//! A size budget for the shipped crates' source files: the production lines
//! of a file (those before its first `#[cfg(test)]`, where every file here
//! keeps its unit tests) are at most [`BUDGET`], so a reader can hold a
//! module in their head (STYLE.md; issue 41).
//!
//! A file allowed over it for a while is listed in [`OVER`] with its size:
//! it may shrink, never grow, and once it fits it must leave the list. The
//! test tools (`testkit`, `jepsen`, `benches`) are not shipped and not
//! counted.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use mooncake_testkit::sources::rust_files;

/// Production lines a file may have.
const BUDGET: usize = 600;

/// The shipped crates, by their folder in the workspace.
const SHIPPED: &[&str] = &[
    "admission",
    "tls",
    "proto",
    "segment",
    "auth",
    "raft-store",
    "master",
    "transfer",
    "client",
    "local-cluster",
    "cli",
    "python",
    "zmq-events",
];

/// Files allowed over the budget, with the production lines they may not
/// pass: none. The five over it when the budget came (2026-12-06:
/// `python/src/py/store.rs` 1,106, `master/src/objects/copies.rs` 872,
/// `transfer/src/ucx/worker.rs` 814, `master/src/leader/reservations/mod.rs`
/// 701, `master/src/rpc/client_service/mod.rs` 643) were split the same day.
/// A file that must grow past it for a while goes here with its size, and
/// leaves once split.
const OVER: &[(&str, usize)] = &[];

/// Lines before the first `#[cfg(test)]`.
fn production_lines(source: &str) -> usize {
    source.lines().take_while(|l| l.trim() != "#[cfg(test)]").count()
}

#[test]
fn no_shipped_source_file_grows_past_the_budget() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace");
    let mut problems = Vec::new();
    let mut seen_over = Vec::new();
    for krate in SHIPPED {
        let files = rust_files(&root.join(krate).join("src"));
        for file in files {
            let rel = file.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
            let lines = production_lines(&std::fs::read_to_string(&file).unwrap());
            match OVER.iter().find(|(name, _)| *name == rel) {
                Some((_, ceiling)) => {
                    seen_over.push(rel.clone());
                    if lines > *ceiling {
                        problems.push(format!("{rel}: {lines} production lines, more than its {ceiling}: split it"));
                    } else if lines <= BUDGET {
                        problems.push(format!("{rel}: {lines} lines fit the budget now: take it off OVER"));
                    }
                }
                None if lines > BUDGET => {
                    problems.push(format!("{rel}: {lines} production lines, over the budget of {BUDGET}: split it"))
                }
                None => {}
            }
        }
    }
    for (name, _) in OVER {
        if !seen_over.iter().any(|s| s == name) {
            problems.push(format!("{name} is on OVER but no longer exists: take it off"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn production_lines_stop_at_the_first_test_module() {
    assert_eq!(production_lines("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(production_lines("a\nb\n"), 2);
    assert_eq!(production_lines("    #[cfg(test)]\n"), 0);
}
