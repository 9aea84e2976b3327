//! The workspace's Rust sources, for the tests that read them as text (the
//! module graph, the file budget).
//!
//! Test support: an unreadable folder fails the test with a panic.
// The panics are the test failing (the workspace denies them in libraries).
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, depth first.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect(dir, &mut out);
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
