//! What one Raft log sync costs on this disk, and how the write is made
//! matters: a log entry written into sled as a plain insert or as a
//! one-entry `sled::Batch` (sled 0.34 seals and writes its IO buffer before
//! and after every batch, `pin_log`), each then made durable as the log
//! store does (`Db::flush`, whose `sync_file_range` waits for the device,
//! then `fdatasync`), beside a raw append + `fdatasync` of the same bytes
//! and an overwrite inside an already written file (what a preallocated
//! WAL, etcd's, pays).
//! `strace -f -c -e trace=sync_file_range` on it counts sled's device writes
//! (one per sync for inserts, three for batches).
//!
//!     cargo run --release -p mooncake-raft-store --example log_sync_probe [-- N]
//!
//! The files live in `$PROBE_DIR` (default `/var/tmp`, a real disk; `/tmp`
//! may be a tmpfs elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// An entry's size in the log at low load (one command, about 300 bytes).
const ENTRY_BYTES: usize = 300;

fn pct(v: &mut [Duration]) -> String {
    v.sort();
    let at = |q: usize| v[(v.len() * q / 100).min(v.len() - 1)].as_secs_f64() * 1e6;
    format!("p50 {:>7.1} us  p99 {:>7.1} us", at(50), at(99))
}

/// `n` appends into a fresh sled database at `dir`, each made durable as
/// the log store does; the time of the write and of the sync, per append.
fn sled_rows(dir: &Path, n: usize, batch: bool) -> (Vec<Duration>, Vec<Duration>) {
    let db = sled::Config::new().path(dir).mode(sled::Mode::HighThroughput).open().unwrap();
    let log = db.open_tree("raft_log").unwrap();
    let meta = db.open_tree("raft_meta").unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(dir.join("db")).unwrap();
    let value = vec![7u8; ENTRY_BYTES];
    let (mut write, mut sync) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n as u64 {
        // As a follower does per append: the commit-index hint, then the entry.
        meta.insert("committed", &i.to_be_bytes()).unwrap();
        let t0 = Instant::now();
        if batch {
            let mut b = sled::Batch::default();
            b.insert(&i.to_be_bytes(), value.as_slice());
            log.apply_batch(b).unwrap();
        } else {
            log.insert(i.to_be_bytes(), value.as_slice()).unwrap();
        }
        let t1 = Instant::now();
        db.flush().unwrap();
        file.sync_data().unwrap();
        write.push(t1 - t0);
        sync.push(t1.elapsed());
    }
    (write, sync)
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let dir = tempfile::tempdir_in(std::env::var("PROBE_DIR").unwrap_or_else(|_| "/var/tmp".into())).unwrap();
    let value = vec![7u8; ENTRY_BYTES];
    println!("log sync probe: {n} syncs of one {ENTRY_BYTES}-byte entry each, in {}", dir.path().display());

    for (name, batch) in [("insert", false), ("batch of one", true)] {
        let (mut write, mut sync) = sled_rows(&dir.path().join(name.replace(' ', "_")), n, batch);
        println!("  sled {name:<13} write {}", pct(&mut write));
        println!("  sled {name:<13} sync  {}", pct(&mut sync));
    }

    let mut f = std::fs::File::create(dir.path().join("raw")).unwrap();
    let mut raw = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&value).unwrap();
        f.sync_data().unwrap();
        raw.push(t.elapsed());
    }
    println!("  raw append + fdatasync    {}", pct(&mut raw));

    let f = std::fs::File::create(dir.path().join("pre")).unwrap();
    f.write_all_at(&vec![0u8; n * ENTRY_BYTES + 4096], 0).unwrap();
    f.sync_all().unwrap();
    let mut pre = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f.write_all_at(&value, (i * ENTRY_BYTES) as u64).unwrap();
        f.sync_data().unwrap();
        pre.push(t.elapsed());
    }
    println!("  overwrite + fdatasync     {}", pct(&mut pre));
}
