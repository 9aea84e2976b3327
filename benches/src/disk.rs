//! `mooncake bench disk`: the SSD tier against what the disk gives, all in
//! one run, on files in one working directory (a temporary directory, or
//! under `MOONCAKE_BENCH_KEEP_DIR`; the disk-tier cluster's own temporary
//! directory is on the same file system unless `TMPDIR` differs, and a note
//! says whether it is):
//!
//! 1. **raw**: a preallocated `O_DIRECT` file read and written sequentially
//!    through io_uring with registered buffers ([`crate::baseline::raw_disk`]), in
//!    requests of 4 MiB and 64 KiB with 1 and 4 in flight; writes end with
//!    one fdatasync, counted;
//! 2. **engine**: [`DiskSegment`] reads and writes of the same chunk sizes
//!    and depths on both backends (io_uring, pread/pwrite). Its writes are
//!    durable each (data, checksum table page, fdatasync) and its reads
//!    verify a crc32c per 4 KiB block;
//! 3. **tier**: a 1-master, 1-store cluster with offload on
//!    ([`disk_tier`]): offload throughput while a writer puts, and gets of
//!    objects that are on disk only.
//!
//! A file system without `O_DIRECT` (tmpfs) skips the scenario with a note;
//! a host without io_uring measures the pread rows only. Both exit 0, as a
//! missing external baseline does.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_segment::{BackendChoice, ClientId, DISK_BUFFERS_MAX, DISK_IO_CHUNK_BYTES, DiskSegment, SegmentId};

use crate::baseline::raw_disk::{self, Dir, DirectFile};
use crate::cluster::KEEP_DIR_ENV;
use crate::data::{pattern, size_name};
use crate::disk_tier::{self, HEARTBEAT_SHORT_MS, OFFLOAD_WRITERS, RawReads, TierPlan, TierRun};
use crate::report::{Cell, Section, Table, cols};
use crate::stats::{Budget, Samples, ratio};
use crate::{Ctx, bound_row, target_row, targets_table};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// Request sizes: an object of 4 MiB, the 1 MiB a TCP lane reads of it
/// (the client splits a 4 MiB get over 4 lanes), a 64 KiB object.
const SIZES: [usize; 3] = [4 * MIB, MIB, 64 * KIB];
/// Requests in flight: one (a sequential reader) and a few (the store
/// node's 4 TCP lanes, or its 4 copies at once).
const DEPTHS: [usize; 2] = [1, 4];
/// The pass that fills a file may take this long (then the hard limit, twice).
const FILL_TIME: Duration = Duration::from_secs(60);
/// Operations of one cell at least.
const CELL_OPS_MIN: u64 = 4;

/// Sizes and budgets of one run.
struct Plan {
    /// The raw file and each engine segment.
    file_bytes: u64,
    /// One cell moves at most this much (passes over the file wrap), for
    /// at most this long.
    cell_bytes_max: u64,
    cell_time: Duration,
    tier: TierPlan,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            return Plan {
                file_bytes: 256 << 20,
                cell_bytes_max: 1 << 30,
                cell_time: Duration::from_millis(400),
                tier: TierPlan::new(true),
            };
        }
        Plan {
            file_bytes: 1 << 30,
            cell_bytes_max: 4 << 30,
            cell_time: Duration::from_secs(2),
            tier: TierPlan::new(false),
        }
    }

    fn budget(&self, size: usize) -> Budget {
        let ops_max = (self.cell_bytes_max / size as u64).max(CELL_OPS_MIN);
        Budget { ops_min: CELL_OPS_MIN, ops_max, time: self.cell_time }
    }

    /// One pass over the whole file in 4 MiB requests, whatever it takes.
    fn fill(&self) -> Budget {
        let ops = self.file_bytes / (4 * MIB) as u64;
        Budget { ops_min: ops, ops_max: ops, time: FILL_TIME }
    }
}

/// The layer of the raw reads measured right before the disk gets.
const BEFORE_GETS: &str = "raw before gets";

/// One measured cell: who moved the bytes, which way, request size, depth.
struct Measured {
    /// `raw`, [`BEFORE_GETS`], `io_uring` or `pread`.
    layer: &'static str,
    dir: Dir,
    size: usize,
    depth: usize,
    samples: Samples,
}

fn find<'a>(cells: &'a [Measured], layer: &str, dir: Dir, size: usize, depth: usize) -> Option<&'a Samples> {
    cells.iter().find(|c| c.layer == layer && c.dir == dir && c.size == size && c.depth == depth).map(|c| &c.samples)
}

pub async fn run(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let plan = Plan::new(ctx.quick);
    let mut section = Section::new("disk");
    let work = match std::env::var_os(KEEP_DIR_ENV) {
        Some(d) => {
            std::fs::create_dir_all(&d)?;
            tempfile::Builder::new().prefix("disk-bench-").tempdir_in(d)
        }
        None => tempfile::Builder::new().prefix("mooncake-disk-bench-").tempdir(),
    }
    .context("making the bench's working directory")?;
    let (fs, dev) = raw_disk::filesystem(work.path());
    if let Err(why) = raw_disk::probe_direct_io(work.path()) {
        let msg = format!(
            "skipped: {} ({fs}) does not take O_DIRECT I/O ({why}); set TMPDIR to a directory on ext4 or xfs",
            work.path().display()
        );
        ctx.progress.say(&format!("disk: {msg}"));
        section.note(msg);
        return Ok(section);
    }
    section.note(format!("working directory {} on {fs}", work.path().display()));
    let (mut cells, raw_file) = raw_cells(ctx, &plan, work.path(), &mut section).await?;
    for choice in [BackendChoice::IoUring, BackendChoice::Pread] {
        cells.extend(engine_cells(ctx, &plan, work.path(), choice, &mut section).await?);
    }
    let raw_reads = raw_file.map(|file| RawReads {
        file,
        cells: [4 * MIB, 64 * KIB]
            .into_iter()
            .flat_map(|size| DEPTHS.map(|depth| (size, depth, plan.budget(size))))
            .collect(),
    });
    let tier = disk_tier::run(ctx, &plan.tier, dev, raw_reads.as_ref()).await?;
    drop(raw_reads);
    for (size, depth, samples) in &tier.raw_reads {
        cells.push(Measured {
            layer: BEFORE_GETS,
            dir: Dir::Read,
            size: *size,
            depth: *depth,
            samples: samples.clone(),
        });
    }
    section.failed_ops += tier.failed + cells.iter().map(|c| c.samples.errors).sum::<u64>();
    section.tables.push(targets(&cells, &tier));
    section.tables.push(gets_table(&cells, &tier));
    section.tables.push(offload_table(&cells, &tier));
    section.tables.push(engine_table(&cells));
    section.tables.push(raw_table(&cells));
    notes(&mut section, &plan, tier);
    Ok(section)
}

/// The order of the cells of a layer: the pass that fills the file, then
/// the reads (right after one write pass, the same for every layer), then
/// the other writes (overwriting the file from its start).
fn cell_order(plan: &Plan) -> Vec<(Dir, usize, usize, Budget)> {
    let mut order = vec![(Dir::Write, 4 * MIB, 1, plan.fill())];
    for dir in [Dir::Read, Dir::Write] {
        for size in SIZES {
            for depth in DEPTHS {
                if (dir, size, depth) != (Dir::Write, 4 * MIB, 1) {
                    order.push((dir, size, depth, plan.budget(size)));
                }
            }
        }
    }
    order
}

/// The raw baseline on one file (see [`cell_order`]); the file is kept for
/// the raw reads right before the disk gets.
async fn raw_cells(
    ctx: &mut Ctx,
    plan: &Plan,
    dir: &Path,
    section: &mut Section,
) -> anyhow::Result<(Vec<Measured>, Option<Arc<DirectFile>>)> {
    let path = dir.join("raw.dat");
    let bytes = plan.file_bytes;
    let file = Arc::new(blocking(move || DirectFile::create(&path, bytes)).await?);
    let mut cells = Vec::new();
    for (dir, size, depth, budget) in cell_order(plan) {
        ctx.progress.step(&format!("disk: raw io_uring {} {} x{depth} in flight", dir.name(), size_name(size)));
        let f = file.clone();
        match blocking(move || raw_disk::measure(&f, dir, size, depth, budget)).await {
            Ok(samples) => cells.push(Measured { layer: "raw", dir, size, depth, samples }),
            Err(e) => {
                ctx.progress.say(&format!("disk: raw io_uring baseline skipped: {e:#}"));
                section.note(format!("raw io_uring baseline not measured: {e:#}"));
                return Ok((cells, None));
            }
        }
    }
    Ok((cells, Some(file)))
}

/// The engine on one backend: a fresh segment as large as the raw file,
/// the cells in the raw baseline's order ([`cell_order`]).
async fn engine_cells(
    ctx: &mut Ctx,
    plan: &Plan,
    dir: &Path,
    choice: BackendChoice,
    section: &mut Section,
) -> anyhow::Result<Vec<Measured>> {
    let layer = match choice {
        BackendChoice::Pread => "pread",
        _ => "io_uring",
    };
    let path = dir.join(format!("engine-{layer}.seg"));
    let bytes = plan.file_bytes;
    let created = blocking(move || {
        DiskSegment::create(&path, SegmentId(1), ClientId(1), bytes, choice).map_err(anyhow::Error::from)
    })
    .await;
    let seg = match created {
        Ok(seg) => Arc::new(seg),
        Err(e) => {
            ctx.progress.say(&format!("disk: engine {layer} skipped: {e:#}"));
            section.note(format!("DiskSegment on {layer} not measured: {e:#}"));
            return Ok(Vec::new());
        }
    };
    fill_pool(&seg).await?;
    let mut cells = Vec::new();
    // The first cell fills the segment: the others read and write what it wrote.
    let mut region = bytes;
    for (dir, size, depth, budget) in cell_order(plan) {
        ctx.progress.step(&format!("disk: DiskSegment ({layer}) {} {} x{depth}", dir.name(), size_name(size)));
        let samples = engine_cell(&seg, (dir, size, depth), budget, region).await;
        if cells.is_empty() {
            region = samples.ops() * (4 * MIB) as u64;
            anyhow::ensure!(region > 0, "no write to the {layer} segment succeeded");
        }
        cells.push(Measured { layer, dir, size, depth, samples });
    }
    for c in cells.iter().filter(|c| c.samples.errors > 0) {
        let first = c.samples.error_texts.first().cloned().unwrap_or_default();
        ctx.progress.say(&format!(
            "disk: DiskSegment ({layer}) {}: {} failed, first: {first}",
            c.dir.name(),
            c.samples.errors
        ));
    }
    let path = seg.path().to_path_buf();
    // Dropping the segment joins its I/O threads.
    blocking(move || {
        drop(seg);
        std::fs::remove_file(&path).context("removing the engine's segment file")
    })
    .await?;
    Ok(cells)
}

/// Writes the pattern into every buffer of the segment's pool once, so no
/// write below stores zeros (a virtual disk may shortcut zero blocks) and
/// none pays for filling a whole buffer.
async fn fill_pool(seg: &DiskSegment) -> anyhow::Result<()> {
    let source = pattern(DISK_IO_CHUNK_BYTES, 7);
    let mut held = Vec::with_capacity(DISK_BUFFERS_MAX);
    for _ in 0..DISK_BUFFERS_MAX {
        let mut buf = seg.buffer(DISK_IO_CHUNK_BYTES).await?;
        buf.as_mut_slice().copy_from_slice(&source);
        held.push(buf);
    }
    Ok(())
}

/// `depth` tasks read or write chunks of `size` at consecutive offsets of
/// the first `region` bytes (wrapping) until `budget` ends.
async fn engine_cell(
    seg: &Arc<DiskSegment>,
    (dir, size, depth): (Dir, usize, usize),
    budget: Budget,
    region: u64,
) -> Samples {
    let chunks = (region / size as u64).max(1);
    let next = Arc::new(AtomicU64::new(0));
    let bound = budget.start();
    let start = Instant::now();
    let workers: Vec<_> = (0..depth)
        .map(|_| {
            let (seg, next) = (seg.clone(), next.clone());
            tokio::spawn(async move {
                let mut s = Samples::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if !bound.go_on(i) {
                        return s;
                    }
                    let offset = (i % chunks) * size as u64;
                    let t = Instant::now();
                    let done = match dir {
                        Dir::Read => seg.read(offset, size).await.map(drop),
                        Dir::Write => write_chunk(&seg, offset, size, i).await,
                    };
                    match done {
                        Ok(()) => s.ok(t.elapsed(), size as u64, 1),
                        Err(e) => s.failed(format!("{} of {size} bytes at {offset}: {e}", dir.name())),
                    }
                }
            })
        })
        .collect();
    let mut all = Samples::default();
    for w in workers {
        match w.await {
            Ok(s) => all.merge(s),
            Err(e) => all.failed(format!("engine worker: {e}")),
        }
    }
    all.wall = start.elapsed();
    all
}

/// One durable write of `size` bytes at `offset`; each block stamped with
/// the op number so no two writes store the same block.
async fn write_chunk(seg: &DiskSegment, offset: u64, size: usize, op: u64) -> Result<(), mooncake_segment::DiskError> {
    let mut buf = seg.buffer(size).await?;
    for (n, block) in buf.as_mut_slice().chunks_mut(4096).enumerate() {
        block[..8].copy_from_slice(&op.to_le_bytes());
        block[8..16].copy_from_slice(&(n as u64).to_le_bytes());
    }
    seg.write(offset, buf).await
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> anyhow::Result<T> + Send + 'static) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f).await.context("blocking disk task")?
}

fn gb(s: Option<&Samples>) -> Option<f64> {
    s.map(Samples::gb_per_s)
}

/// A row without a goal, for information.
fn info_row(t: &mut Table, name: &str, measured: Option<f64>, decimals: usize) {
    t.row(vec![Cell::text(name), Cell::opt(measured, decimals), Cell::text("info"), Cell::text("-")]);
}

fn targets(cells: &[Measured], tier: &TierRun) -> Table {
    let mut t = targets_table();
    let raw = |dir, depth| gb(find(cells, "raw", dir, 4 * MIB, depth));
    let get = find_gets(tier, "disk", 4 * MIB, 1).map(|g| g.samples.gb_per_s());
    target_row(
        &mut t,
        "disk get 4MiB / raw io_uring read",
        get.and_then(|g| ratio(g, gb(find(cells, BEFORE_GETS, Dir::Read, 4 * MIB, 1)))),
        0.8,
        true,
        2,
    );
    let offload = main_offload(tier).and_then(disk_tier::Offload::gb_per_s);
    target_row(
        &mut t,
        "offload / raw O_DIRECT write",
        offload.and_then(|o| ratio(o, raw(Dir::Write, 4))),
        0.7,
        true,
        2,
    );
    let engine = |layer, dir, depth| gb(find(cells, layer, dir, 4 * MIB, depth));
    let uring_over_pread = engine("io_uring", Dir::Read, 1).and_then(|u| ratio(u, engine("pread", Dir::Read, 1)));
    info_row(&mut t, "io_uring / pread 4MiB read", uring_over_pread, 2);
    let read = engine("io_uring", Dir::Read, 1).and_then(|e| ratio(e, raw(Dir::Read, 1)));
    bound_row(&mut t, "engine read 4MiB / raw read (io_uring)", read, 2);
    let write = engine("io_uring", Dir::Write, 4).and_then(|e| ratio(e, raw(Dir::Write, 4)));
    bound_row(&mut t, "engine write 4MiB x4 / raw write x4", write, 2);
    t
}

fn find_gets<'a>(tier: &'a TierRun, on: &str, size: usize, clients: usize) -> Option<&'a disk_tier::Gets> {
    tier.gets.iter().find(|g| g.tier == on && g.size == size && g.clients == clients)
}

/// The 4 MiB offload at the short heartbeat: the one the target reads.
fn main_offload(tier: &TierRun) -> Option<&disk_tier::Offload> {
    tier.offloads.iter().find(|o| o.size == 4 * MIB && o.heartbeat_ms == HEARTBEAT_SHORT_MS)
}

fn gets_table(cells: &[Measured], tier: &TierRun) -> Table {
    let mut t = Table::new(
        "disk-tier gets of disk-only objects (1 master, 1 store node, tcp) vs raw io_uring read and memory-tier gets",
        cols(&[
            ("tier", "tier"),
            ("size", "size"),
            ("clients", "clients"),
            ("objects", "objects"),
            ("ops", "ops"),
            ("errors", "err"),
            ("gb_per_s", "GB/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
            ("baseline", "baseline"),
            ("baseline_gb_per_s", "base GB/s"),
            ("ratio", "ratio"),
            ("memory_ratio", "/memory"),
        ]),
    );
    for g in &tier.gets {
        // The same bytes in flight: one get of 4 MiB is 4 MiB in flight
        // (4 lanes of 1 MiB); N clients are N requests.
        let depth = g.clients.min(*DEPTHS.last().unwrap_or(&1));
        let base = gb(find(cells, BEFORE_GETS, Dir::Read, g.size, depth));
        let s = &g.samples;
        let memory = find_gets(tier, "memory", g.size, g.clients).filter(|_| g.tier == "disk");
        t.row(vec![
            Cell::text(g.tier),
            Cell::text(size_name(g.size)),
            Cell::Int(g.clients as u64),
            Cell::text(format!("{}/{}", g.objects, g.set)),
            Cell::Int(s.ops()),
            Cell::Int(s.errors),
            Cell::Num(s.gb_per_s(), 2),
            Cell::Num(s.p50_ms(), 3),
            Cell::Num(s.p99_ms(), 3),
            Cell::text(format!("raw read x{depth} before")),
            Cell::opt(base, 2),
            Cell::opt(base.and_then(|b| ratio(s.gb_per_s(), Some(b))), 2),
            Cell::opt(memory.and_then(|m| ratio(s.gb_per_s(), Some(m.samples.gb_per_s()))), 2),
        ]);
    }
    t
}

fn offload_table(cells: &[Measured], tier: &TierRun) -> Table {
    let mut t = Table::new(
        "offload: from the first put until every object has a disk replica, vs raw O_DIRECT write of the size x4",
        cols(&[
            ("size", "size"),
            ("heartbeat_ms", "heartbeat ms"),
            ("objects", "objects"),
            ("mib", "MiB"),
            ("put_s", "put s"),
            ("offload_s", "offload s"),
            ("gb_per_s", "GB/s"),
            ("copy_mean_ms", "copy mean ms"),
            ("baseline_gb_per_s", "raw write GB/s"),
            ("ratio", "ratio"),
        ]),
    );
    for o in &tier.offloads {
        // As many bytes in flight as the store node's 4 copies at once.
        let raw = gb(find(cells, "raw", Dir::Write, o.size, 4));
        t.row(vec![
            Cell::text(size_name(o.size)),
            Cell::Int(o.heartbeat_ms),
            Cell::Int(o.objects),
            Cell::Num(o.bytes() as f64 / MIB as f64, 0),
            Cell::Num(o.put_s, 2),
            Cell::opt(o.offload_s, 2),
            Cell::opt(o.gb_per_s(), 3),
            Cell::opt(o.copy_mean_ms, 1),
            Cell::opt(raw, 2),
            Cell::opt(o.gb_per_s().and_then(|g| ratio(g, raw)), 3),
        ]);
    }
    t
}

fn engine_table(cells: &[Measured]) -> Table {
    let mut t = Table::new(
        "DiskSegment (durable writes, verified reads) vs raw io_uring of the same request size and depth",
        cols(&[
            ("backend", "backend"),
            ("op", "op"),
            ("size", "size"),
            ("depth", "depth"),
            ("ops", "ops"),
            ("errors", "err"),
            ("gb_per_s", "GB/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
            ("baseline_gb_per_s", "raw GB/s"),
            ("ratio", "/raw"),
        ]),
    );
    for c in cells.iter().filter(|c| !c.layer.starts_with("raw")) {
        let base = gb(find(cells, "raw", c.dir, c.size, c.depth));
        let s = &c.samples;
        t.row(vec![
            Cell::text(c.layer),
            Cell::text(c.dir.name()),
            Cell::text(size_name(c.size)),
            Cell::Int(c.depth as u64),
            Cell::Int(s.ops()),
            Cell::Int(s.errors),
            Cell::Num(s.gb_per_s(), 2),
            Cell::Num(s.p50_ms(), 3),
            Cell::Num(s.p99_ms(), 3),
            Cell::opt(base, 2),
            Cell::opt(base.and_then(|b| ratio(s.gb_per_s(), Some(b))), 2),
        ]);
    }
    t
}

fn raw_table(cells: &[Measured]) -> Table {
    let mut t = Table::new(
        "raw O_DIRECT baselines (io_uring, registered buffers, sequential)",
        cols(&[
            ("when", "when"),
            ("op", "op"),
            ("size", "size"),
            ("depth", "depth"),
            ("ops", "ops"),
            ("gb_per_s", "GB/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
        ]),
    );
    for c in cells.iter().filter(|c| c.layer.starts_with("raw")) {
        let s = &c.samples;
        t.row(vec![
            Cell::text(if c.layer == BEFORE_GETS { "before the gets" } else { "alone" }),
            Cell::text(c.dir.name()),
            Cell::text(size_name(c.size)),
            Cell::Int(c.depth as u64),
            Cell::Int(s.ops()),
            Cell::Num(s.gb_per_s(), 2),
            Cell::Num(s.p50_ms(), 3),
            Cell::Num(s.p99_ms(), 3),
        ]);
    }
    t
}

fn notes(section: &mut Section, plan: &Plan, tier: TierRun) {
    section.note(format!(
        "raw: one preallocated {} file, O_DIRECT, sequential from offset 0; depth = requests in flight; \
         the first write pass (write 4MiB x1) fills the file, then the reads, then the other writes \
         (overwriting it); a write pass ends with one fdatasync, counted in its time; the reads are \
         measured again on the same file right before the disk gets (after the filler's writes), and the \
         gets are compared with those",
        size_name(plan.file_bytes as usize)
    ));
    section.note(
        "engine: a DiskSegment per backend, as large as the raw file; each write is durable on return \
         (data, checksum table page, fdatasync: 3 I/Os per chunk); each read verifies a crc32c per 4 KiB \
         block; pread = 4 threads of pread/pwrite",
    );
    section.note(format!(
        "gets: 1 master (--enable_offload, --default_kv_lease_ttl=500), 1 store node ({} memory pre-faulted, \
         {} disk, heartbeat {HEARTBEAT_SHORT_MS} ms), objects listed as on disk only (ListObjects) before \
         the gets; a get = GetReplicaList + the read over tcp (4 MiB: 4 lanes of 1 MiB, each a verified disk \
         read on the store node) + the client's crc32c; ratio vs raw read of the same size with as many \
         requests in flight as clients (1 client: one 4 MiB request)",
        plan.tier.memory, plan.tier.disk
    ));
    section.note(format!(
        "offload: {OFFLOAD_WRITERS} writers put the objects in parallel; the leader plans a copy of each object \
         as its PutEnd commits; a copy = the store node reads its memory replica and writes its disk segment \
         by the local route (no socket), checks its crc32c, writes durably, reports it (a commit); 4 copies at \
         once; copies reach a store node in Ping answers (at most 64 each), and a node with a free copy slot \
         pings at once, so the first copies of a burst wait for the next Ping (up to one heartbeat); ratio vs \
         raw write of the same size x4 (as many bytes in flight as 4 copies)"
    ));
    section.note(
        "a virtual disk: the host may cache what the guest writes, for the raw files as for the segments; \
         compare rows of the same run",
    );
    for n in tier.notes {
        section.note(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_null() -> serde_json::Value {
        serde_json::Value::Null
    }

    #[test]
    fn budgets_bound_every_cell_and_the_fill_covers_the_file() {
        for quick in [true, false] {
            let p = Plan::new(quick);
            assert_eq!(p.fill().ops_max * (4 * MIB) as u64, p.file_bytes);
            assert!(p.budget(64 * KIB).ops_max * (64 * KIB) as u64 <= p.cell_bytes_max);
            assert!(p.budget(4 * MIB).time <= Duration::from_secs(2));
        }
    }

    #[test]
    fn targets_divide_by_the_baseline_with_the_same_bytes_in_flight() {
        let rate = |gb: f64| {
            let mut s = Samples::default();
            s.ok(Duration::from_millis(1), (gb * 1e9) as u64, 1);
            s.wall = Duration::from_secs(1);
            s
        };
        let cell = |layer, dir, depth, gb| Measured { layer, dir, size: 4 * MIB, depth, samples: rate(gb) };
        let cells = vec![
            cell("raw", Dir::Read, 1, 9.0),
            cell(BEFORE_GETS, Dir::Read, 1, 2.0),
            cell(BEFORE_GETS, Dir::Read, 4, 4.0),
            cell("raw", Dir::Write, 4, 1.0),
            cell("io_uring", Dir::Read, 1, 1.5),
            cell("pread", Dir::Read, 1, 1.0),
            cell("io_uring", Dir::Write, 4, 0.5),
        ];
        let tier = TierRun {
            offloads: vec![disk_tier::Offload {
                size: 4 * MIB,
                heartbeat_ms: HEARTBEAT_SHORT_MS,
                objects: 1000,
                put_s: 1.0,
                offload_s: Some(4.194304),
                copy_mean_ms: None,
            }],
            gets: vec![
                disk_tier::Gets { tier: "memory", size: 4 * MIB, clients: 1, objects: 8, set: 8, samples: rate(3.4) },
                disk_tier::Gets { tier: "disk", size: 4 * MIB, clients: 1, objects: 8, set: 8, samples: rate(1.7) },
            ],
            ..Default::default()
        };
        let j = targets(&cells, &tier).json();
        let row = |i: usize| (j["rows"][i]["measured"].as_f64().unwrap(), j["rows"][i]["met"].clone());
        assert!((row(0).0 - 0.85).abs() < 1e-9 && row(0).1 == "yes", "get / raw read x1");
        assert!((row(1).0 - 1.0).abs() < 1e-9 && row(1).1 == "yes", "offload / raw write x4");
        assert_eq!(j["rows"][2]["goal"], "info");
        assert!((row(2).0 - 1.5).abs() < 1e-9);
        assert_eq!(j["rows"][4]["goal"], "bound");
        let gets = gets_table(&cells, &tier).json();
        assert_eq!(gets["rows"][1]["baseline"], "raw read x1 before");
        assert_eq!((&gets["rows"][1]["memory_ratio"], &gets["rows"][0]["memory_ratio"]), (&0.5.into(), &json_null()));
        let offload = offload_table(&cells, &tier).json();
        assert!((offload["rows"][0]["gb_per_s"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    }
}
