//! Where the replicated state's memory goes, per object: loads N objects
//! into a `MetaState` exactly as a leader's batch puts do (an arena per
//! 1,000 objects, each object a `PutCommit` wrapped in `Once` with its own
//! request id) and counts the bytes the allocator holds after each step.
//!
//!     cargo run --release -p mooncake-raft-store --example state_memory -- [N]
//!
//! Reported per object: the whole state after the load; after the arenas
//! are returned (the steady state); after the request-dedup window has
//! passed (what stays for as long as the objects do); and `size_of` of the
//! records involved. Keys are 20 bytes, like `mooncake bench scale`'s.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use mooncake_raft_store::state::{ObjectMeta, REQUEST_CLOCK_STEP_MAX_MS, REQUEST_DEDUP_WINDOW_MS};
use mooncake_raft_store::testing::{SegmentSpecExt, mount_cmd, segment};
use mooncake_raft_store::{
    ArenaId, Command, MetaState, NewObject, Pin, PlacedReplica, ReplicaPlacement, Request, Response,
};
use mooncake_segment::{ClientId, Range, SegmentId};

/// Counts the bytes live in the heap.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's layout contract passes through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const BATCH: u64 = 1_000;
const SEGMENTS: u64 = 8;
const OBJECT_BYTES: u64 = 64 << 10;
const WRITER: ClientId = ClientId(9_000);

fn apply(s: &mut MetaState, ts_ms: u64, cmd: Command) -> Response {
    s.apply(&Request { ts_ms, cmd })
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let mut s = MetaState::default();
    let mut ts = 1_000u64;
    for g in 0..SEGMENTS {
        let spec = segment(g + 1, 1 << 40, &format!("host-{g}")).endpoint(format!("10.0.0.{g}:7000")).zone("");
        ts += 1;
        assert_eq!(apply(&mut s, ts, mount_cmd(ClientId(9_100 + g), spec)), Response::Ok);
    }
    let base = LIVE.load(Ordering::Relaxed);
    let mut arenas: Vec<ArenaId> = Vec::new();
    let mut request_id = 1u64;
    for b in 0..n.div_ceil(BATCH) {
        let segment = SegmentId(b % SEGMENTS + 1);
        let in_batch = BATCH.min(n - b * BATCH);
        ts += 1;
        let grant =
            Command::ArenaGrant { segment, len_bytes: in_batch * OBJECT_BYTES, unit_bytes: OBJECT_BYTES, term: 1 };
        let Response::ArenaGranted(arena) = apply(&mut s, ts, grant) else { panic!("no arena") };
        arenas.push(arena.id);
        let start = arena.extents[0].offset;
        let cmds = (0..in_batch)
            .map(|i| {
                let new = NewObject {
                    client: WRITER,
                    key: format!("scale/{b:07}/{i:04}/xyz"),
                    size_bytes: OBJECT_BYTES,
                    checksum: 7,
                    pin: Pin::None,
                    replicas: vec![PlacedReplica {
                        segment,
                        arena: arena.id,
                        range: Range::new(start + i * OBJECT_BYTES, OBJECT_BYTES),
                    }],
                    upsert: false,
                };
                request_id += 1;
                Command::Once { request_id, cmd: Box::new(Command::PutCommit(new)) }
            })
            .collect();
        ts += 1;
        let Response::Batch(answers) = apply(&mut s, ts, Command::Batch(cmds)) else { panic!("no batch answer") };
        assert!(answers.iter().all(|a| matches!(a, Response::Committed { .. })), "{:?}", answers.first());
    }
    assert_eq!(s.object_count() as u64, n);
    let per = |bytes: usize| (bytes.saturating_sub(base)) as f64 / n as f64;
    let loaded = LIVE.load(Ordering::Relaxed);
    ts += 1;
    apply(&mut s, ts, Command::ArenaReturn { arenas });
    let returned = LIVE.load(Ordering::Relaxed);
    // Steady entries for longer than the window (the request clock moves at
    // most one step per entry), then one more request: every remembered
    // answer expires.
    let window_end = s.request_clock().now_ms + REQUEST_DEDUP_WINDOW_MS + 1;
    while s.request_clock().now_ms < window_end {
        ts += REQUEST_CLOCK_STEP_MAX_MS;
        apply(&mut s, ts, Command::Noop);
    }
    apply(&mut s, ts, Command::Once { request_id: 0, cmd: Box::new(Command::Noop) });
    let steady = LIVE.load(Ordering::Relaxed);
    println!("objects: {n} (keys of 20 B)");
    println!("heap per object after the load:                    {:7.1} B", per(loaded));
    println!("  ... after the arenas are returned:               {:7.1} B", per(returned));
    println!("  ... after the request-dedup window (steady):     {:7.1} B", per(steady));
    println!("  => request dedup (id + answer, for 120 s):       {:7.1} B", per(returned) - per(steady));
    println!(
        "size_of: ObjectMeta {} B, ReplicaPlacement {} B, Response {} B, String {} B",
        std::mem::size_of::<ObjectMeta>(),
        std::mem::size_of::<ReplicaPlacement>(),
        std::mem::size_of::<Response>(),
        std::mem::size_of::<String>(),
    );
}
