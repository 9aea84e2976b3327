//! What connection admission costs a transfer request: every request a
//! store node serves marks its connection idle while it waits for the
//! header and busy once bytes arrive (`transfer/src/tcp/server/admission.rs`),
//! each a lock of the server's admission table.
//!
//! - `idle_busy/1024_open`: one idle + busy cycle, under the table's mutex,
//!   with 1,024 connections open (the default limit), 64 of them waiting.
//! - `admit_close/1024_open`: a connection admitted and closed at once.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Mutex;

use criterion::{Criterion, criterion_group, criterion_main};
use mooncake_admission::{Admit, ConnId, Limits, Table};

fn table() -> (Mutex<Table>, ConnId) {
    let mut t = Table::new(Limits { total_max: 2_048, peer_max: 2_048 });
    let mut last = None;
    for i in 0..1_024u32 {
        let peer = IpAddr::from((i % 64 + 1).to_be_bytes());
        let Admit::Admitted(id) = t.admit(peer) else { panic!("admitted") };
        if i % 16 != 0 {
            assert!(t.busy(id));
        }
        last = Some(id);
    }
    (Mutex::new(t), last.expect("a connection"))
}

fn bench(c: &mut Criterion) {
    let (t, id) = table();
    c.bench_function("idle_busy/1024_open", |b| {
        b.iter(|| {
            assert!(t.lock().unwrap().idle(black_box(id)));
            assert!(t.lock().unwrap().busy(black_box(id)));
        })
    });
    let (t, _) = table();
    c.bench_function("admit_close/1024_open", |b| {
        b.iter(|| {
            let mut t = t.lock().unwrap();
            let Admit::Admitted(id) = t.admit(black_box(IpAddr::from([10, 0, 0, 9]))) else { panic!("admitted") };
            t.close(id);
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
