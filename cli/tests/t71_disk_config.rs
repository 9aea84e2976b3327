//! Bad disk-segment configurations of `mooncake store` are refused at start
//! with a message that says what to do, and change nothing on disk: a path
//! that is a directory, a file of another store node, a size that differs
//! from the file's, a size that is not whole blocks, a disk without a
//! --client-id. (The disk is opened before the masters are contacted, so no
//! cluster is needed.)
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");

/// `mooncake store` with `args`, masters nowhere.
fn store(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(["store", "--masters", "127.0.0.1:1", "--segment-size", "4MiB", "--anonymous"])
        .args(args)
        .output()
        .expect("run mooncake store")
}

fn refused(out: &Output, says: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted: {stderr}");
    for s in says {
        assert!(stderr.contains(s), "the message does not say {s:?}: {stderr}");
    }
}

fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read the disk file")
}

#[test]
fn bad_disk_segments_are_refused_with_what_to_do() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path().display().to_string();

    // A directory is not a disk segment file.
    refused(&store(&["--client-id=11", &format!("--disk-segment={d}"), "--disk-size=1MiB"]), &["regular file"]);

    // Sizes: whole 4 KiB blocks; a disk needs a stable client id.
    let file = dir.path().join("disk.seg");
    let f = file.display().to_string();
    refused(&store(&["--client-id=11", &format!("--disk-segment={f}"), "--disk-size=10000"]), &["4096"]);
    refused(&store(&[&format!("--disk-segment={f}"), "--disk-size=1MiB"]), &["--client-id"]);
    assert!(!file.exists(), "a refused configuration left a file behind");

    // A store node that cannot reach its masters fails to start, but its
    // disk file is made (it is opened before the masters are asked).
    let first = store(&["--client-id=11", &format!("--disk-segment={f}"), "--disk-size=1MiB"]);
    assert!(!first.status.success(), "started without masters");
    assert!(file.exists(), "the disk file was not created");
    let before = file_bytes(&file);

    // Another store node's file, or another size: refused, file untouched.
    refused(
        &store(&["--client-id=12", &format!("--disk-segment={f}"), "--disk-size=1MiB"]),
        &["belongs to", "client id"],
    );
    refused(&store(&["--client-id=11", &format!("--disk-segment={f}"), "--disk-size=2MiB"]), &["not resized"]);
    assert!(file_bytes(&file) == before, "a refused start changed the disk file");
}
