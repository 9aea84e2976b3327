//! The cluster half of `bench disk`: the SSD tier end to end. One master
//! (`--enable_offload`, KV leases of 500 ms) and one store node with a
//! pre-faulted memory segment and a disk segment (`disk.seg` in its data
//! dir), a short store heartbeat; then, with one workload client over TCP:
//!
//! 1. **offload**: [`OFFLOAD_WRITERS`] writers put a set of 4 MiB objects
//!    (then one of 64 KiB) as fast as they can, while the bench lists the
//!    set (ListObjects, no KV lease) every few ms; offload time = from the
//!    first put until every object of the set has a disk replica. The sets fit in
//!    memory below its high watermark, so nothing is evicted meanwhile;
//! 2. **eviction**: 4 MiB filler objects are put in rounds (each round
//!    waits until it is on disk, so eviction always has copies to drop)
//!    until memory eviction has dropped the memory copy of the sets'
//!    objects (oldest first among those kept on disk);
//! 3. **gets**: right after the raw reads of [`RawReads`] (the gets'
//!    baseline, in the same state of the host), the objects listed as on
//!    disk only are read with `get_into`, 1 client in sequence, then
//!    [`CLIENTS_N`] clients in parallel; after that they are listed again
//!    to show they were still disk-only. As a reference, the same gets of
//!    fresh objects that are in memory.
//!
//! Then the same offload of 4 MiB objects on a second cluster whose store
//! node pings at the default interval (1 s): the masters hand copies to a
//! store node only in Ping answers (at most 64 per Ping; the node pings
//! again at once when a copy slot falls free), so the first copies of a
//! burst wait up to one interval.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, ClientConfig, MasterClient, PutOptions, PutOutcome};
use mooncake_local_cluster::{LocalCluster, Role};
use mooncake_proto::master::Tier;
use mooncake_transfer::Protocol;

use crate::Ctx;
use crate::baseline::raw_disk::{self, Dir, DirectFile};
use crate::baseline::raw_tcp::prefaulted;
use crate::cluster::KEEP_DIR_ENV;
use crate::data::{CLIENTS_N, pattern, size_name};
use crate::stats::{Budget, Samples};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
/// The filler's object size (fast to offload: 4 MiB per copy).
const FILL_BYTES: usize = 4 * MIB;
/// Store heartbeat of the main cluster, and the default one.
pub const HEARTBEAT_SHORT_MS: u64 = 100;
pub const HEARTBEAT_DEFAULT_MS: u64 = 1_000;
/// Writers of an offload set, each putting its share of the objects one
/// after another (a prefill fleet writes in parallel; one writer would
/// bound the offload by its own put rate).
pub const OFFLOAD_WRITERS: u64 = 4;
/// How often the watcher lists a set during an offload.
const WATCH_EVERY: Duration = Duration::from_millis(5);
/// Longest wait for one offload, one filler round, a cluster start.
const WAIT_MAX: Duration = Duration::from_secs(60);
/// Distinct payloads the objects cycle through (every one non-zero, so no
/// layer can treat a block as empty).
const PAYLOADS: u64 = 4;
/// Share of each set that must be disk-only before the gets run (the rest
/// are measured too if they are on disk only; none else is).
const DISK_ONLY_SHARE_MIN: f64 = 0.75;

/// Sizes of one run.
#[derive(Clone, Copy, Debug)]
pub struct TierPlan {
    pub memory: &'static str,
    pub disk: &'static str,
    /// Objects of the 4 MiB and of the 64 KiB set.
    pub large_objects: u64,
    pub small_objects: u64,
    /// Objects of the offload at the default heartbeat (4 MiB).
    pub default_heartbeat_objects: u64,
    /// 4 MiB objects of the memory-tier reference gets.
    pub memory_large_objects: u64,
    /// Filler objects per round, and in all at most.
    pub fill_round: u64,
    pub fill_max: u64,
    /// Gets of one client: 4 MiB and 64 KiB.
    pub large_gets: Budget,
    pub small_gets: Budget,
}

impl TierPlan {
    pub fn new(quick: bool) -> TierPlan {
        // The sets take about half of memory (below the 0.9 high
        // watermark); the filler at most 2.5x memory; disk keeps all of it
        // under its 0.95 eviction watermark.
        if quick {
            return TierPlan {
                memory: "256MiB",
                disk: "1GiB",
                large_objects: 32,
                small_objects: 160,
                default_heartbeat_objects: 32,
                memory_large_objects: 16,
                fill_round: 8,
                fill_max: 160,
                large_gets: Budget { ops_min: 8, ops_max: 256, time: Duration::from_secs(2) },
                small_gets: Budget { ops_min: 8, ops_max: 1_000, time: Duration::from_secs(2) },
            };
        }
        TierPlan {
            memory: "512MiB",
            disk: "2GiB",
            large_objects: 64,
            small_objects: 640,
            default_heartbeat_objects: 48,
            memory_large_objects: 32,
            fill_round: 16,
            fill_max: 320,
            large_gets: Budget { ops_min: 8, ops_max: 512, time: Duration::from_secs(5) },
            small_gets: Budget { ops_min: 8, ops_max: 4_000, time: Duration::from_secs(5) },
        }
    }
}

/// One offload measurement.
#[derive(Clone, Debug)]
pub struct Offload {
    pub size: usize,
    pub heartbeat_ms: u64,
    pub objects: u64,
    /// From the first put to the last put's answer.
    pub put_s: f64,
    /// From the first put until every object had a disk replica (None: not
    /// within the 60 s wait).
    pub offload_s: Option<f64>,
    /// Mean time of one copy from issued to recorded (master metric).
    pub copy_mean_ms: Option<f64>,
}

impl Offload {
    pub fn bytes(&self) -> u64 {
        self.objects * self.size as u64
    }

    pub fn gb_per_s(&self) -> Option<f64> {
        self.offload_s.filter(|s| *s > 0.0).map(|s| self.bytes() as f64 / s / 1e9)
    }
}

/// Gets of one size and client count, of objects on disk only or (the
/// reference) in memory.
#[derive(Clone, Debug)]
pub struct Gets {
    /// `disk` or `memory`: where the objects read were.
    pub tier: &'static str,
    pub size: usize,
    pub clients: usize,
    /// Objects read (on the tier), of the set.
    pub objects: u64,
    pub set: u64,
    pub samples: Samples,
}

/// Raw reads to measure right before the disk gets, on the raw baseline's
/// file: the gets' denominators, taken in the same state of the file system
/// and the host as the gets (right after the filler's writes, which a
/// virtual disk may still be flushing).
pub struct RawReads {
    pub file: Arc<DirectFile>,
    /// Request size, requests in flight, budget of each.
    pub cells: Vec<(usize, usize, Budget)>,
}

/// What the cluster half measured.
#[derive(Debug, Default)]
pub struct TierRun {
    pub offloads: Vec<Offload>,
    pub gets: Vec<Gets>,
    /// Raw reads right before the disk gets: (request size, depth, samples).
    pub raw_reads: Vec<(usize, usize, Samples)>,
    pub notes: Vec<String>,
    /// Failed Mooncake operations.
    pub failed: u64,
}

/// A 1-master, 1-store cluster with a disk segment, stopped on drop.
struct TierCluster {
    inner: LocalCluster,
    master: MasterClient,
}

impl Drop for TierCluster {
    fn drop(&mut self) {
        self.inner.stop();
    }
}

impl TierCluster {
    async fn start(ctx: &Ctx, plan: &TierPlan, heartbeat_ms: u64) -> anyhow::Result<TierCluster> {
        let mut b = LocalCluster::builder()
            .master_command(&ctx.exe, &["master"])
            .store_command(&ctx.exe, &["store"])
            .masters(1)
            .stores(1)
            .segment_size(plan.memory)
            .disk_size(plan.disk)
            .store_arg("--prefault")
            .store_arg(format!("--heartbeat-interval-ms={heartbeat_ms}"))
            .master_arg("--enable_offload")
            // A fresh leader counts every object as leased for one lease
            // TTL; short leases let eviction start within a second.
            .master_arg("--default_kv_lease_ttl=500");
        if let Some(dir) = std::env::var_os(KEEP_DIR_ENV) {
            let dir = std::path::PathBuf::from(dir).join(format!("disk-{}-{heartbeat_ms}", std::process::id()));
            eprintln!("{KEEP_DIR_ENV}: keeping this cluster's data and logs in {}", dir.display());
            b = b.dir(dir);
        }
        for a in &ctx.master_args {
            b = b.master_arg(a);
        }
        let inner = b.start().map_err(anyhow::Error::msg).context("starting a local cluster with a disk tier")?;
        let master = inner.client().map_err(anyhow::Error::msg)?;
        let cluster = TierCluster { inner, master };
        let ready = async {
            cluster.inner.wait_for_leader(WAIT_MAX).await?;
            // The store node mounts its memory and its disk in one call.
            cluster.inner.wait_for_segments(2, WAIT_MAX).await
        };
        if let Err(e) = ready.await {
            anyhow::bail!("the disk-tier cluster did not come up: {e}\n{}", cluster.inner.log_tails(15));
        }
        Ok(cluster)
    }

    async fn client(&self, ctx: &Ctx) -> anyhow::Result<Client> {
        let mut cfg = ClientConfig::new(self.inner.master_addrs());
        cfg.admin_token = Some(self.inner.admin_token().clone());
        cfg.protocol = Protocol::Tcp;
        cfg.tcp = ctx.tcp.clone();
        Client::connect(cfg).await.context("connecting a workload client")
    }

    /// The store node's disk segment file.
    fn disk_file(&self) -> std::path::PathBuf {
        self.inner.dir().join("store-1").join(mooncake_local_cluster::STORE_DISK_FILE)
    }

    /// Objects under `prefix`: (key, in memory, on disk).
    async fn tiers(&self, prefix: &str, limit: u64) -> anyhow::Result<Vec<(String, bool, bool)>> {
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        let objects = self.master.list_objects(prefix, limit).await.context("ListObjects")?;
        Ok(objects
            .into_iter()
            .map(|o| {
                let on = |t: Tier| o.replicas.iter().any(|r| r.tier == t as i32);
                (o.key, on(Tier::Dram), on(Tier::Ssd))
            })
            .collect())
    }

    /// The keys under `prefix` with replicas on disk only.
    async fn disk_only(&self, prefix: &str, limit: u64) -> anyhow::Result<Vec<String>> {
        Ok(self.tiers(prefix, limit).await?.into_iter().filter(|(_, mem, disk)| *disk && !mem).map(|t| t.0).collect())
    }

    /// A labelled sample of the master's metrics, e.g.
    /// `mooncake_copy_seconds_sum` with `purpose="offload"`.
    fn metric(&self, name: &str, label: &str) -> Option<f64> {
        let http = self.inner.node(Role::Master, 1)?.http.clone();
        let body = crate::baseline::http_get(&http, "/metrics").ok()?;
        body.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(label))?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()
    }

    /// (sum, count) of the offload copy latency histogram.
    fn copy_seconds(&self) -> (f64, f64) {
        let get = |n| self.metric(n, "purpose=\"offload\"").unwrap_or(0.0);
        (get("mooncake_copy_seconds_sum"), get("mooncake_copy_seconds_count"))
    }
}

pub async fn run(
    ctx: &mut Ctx,
    plan: &TierPlan,
    work_dev: Option<u64>,
    raw: Option<&RawReads>,
) -> anyhow::Result<TierRun> {
    let mut out = TierRun::default();
    ctx.progress.step(&format!(
        "disk: starting 1 master (--enable_offload) and 1 store node ({} memory, {} disk, heartbeat {HEARTBEAT_SHORT_MS} ms)",
        plan.memory, plan.disk
    ));
    let cluster = TierCluster::start(ctx, plan, HEARTBEAT_SHORT_MS).await?;
    let (fs, dev) = raw_disk::filesystem(&cluster.disk_file());
    out.notes.push(format!(
        "the store node's disk segment: {} ({fs}; {} file system as the raw and engine files)",
        cluster.disk_file().display(),
        if dev.is_some() && dev == work_dev { "the same" } else { "NOT the same" }
    ));
    let result = main_phases(ctx, plan, &cluster, raw, &mut out).await;
    let result = result.map_err(|e| anyhow::anyhow!("{e:#}\n{}", cluster.inner.log_tails(15)));
    drop(cluster);
    result?;

    ctx.progress.step(&format!("disk: a second cluster, store heartbeat {HEARTBEAT_DEFAULT_MS} ms (the default)"));
    let cluster = TierCluster::start(ctx, plan, HEARTBEAT_DEFAULT_MS).await?;
    let client = cluster.client(ctx).await?;
    let offload =
        offload(ctx, &cluster, &client, (4 * MIB, HEARTBEAT_DEFAULT_MS), plan.default_heartbeat_objects).await;
    client.close().await;
    let offload = offload.map_err(|e| anyhow::anyhow!("{e:#}\n{}", cluster.inner.log_tails(15)))?;
    out.failed += offload.1;
    out.offloads.push(offload.0);
    Ok(out)
}

/// Offload of both sets, the filler, the gets.
async fn main_phases(
    ctx: &mut Ctx,
    plan: &TierPlan,
    cluster: &TierCluster,
    raw: Option<&RawReads>,
    out: &mut TierRun,
) -> anyhow::Result<()> {
    let client = Arc::new(cluster.client(ctx).await?);
    let sets = [(4 * MIB, plan.large_objects), (64 * KIB, plan.small_objects)];
    for &(size, n) in &sets {
        let (o, failed) = offload(ctx, cluster, &client, (size, HEARTBEAT_SHORT_MS), n).await?;
        out.failed += failed;
        out.offloads.push(o);
    }
    out.failed += evict_sets(ctx, cluster, &client, plan, &sets).await?;
    let mut clients = vec![client];
    for _ in 1..CLIENTS_N {
        clients.push(Arc::new(cluster.client(ctx).await?));
    }
    if let Some(raw) = raw {
        raw_reads(ctx, raw, out).await;
    }
    for &(size, n) in &sets {
        let prefix = set_prefix(size, HEARTBEAT_SHORT_MS);
        let keys = cluster.disk_only(&prefix, n).await?;
        if keys.is_empty() {
            out.notes.push(format!("no {} object was on disk only: gets not measured", size_name(size)));
            continue;
        }
        let budget = if size >= MIB { plan.large_gets } else { plan.small_gets };
        for c in [1, CLIENTS_N] {
            ctx.progress.step(&format!(
                "disk: gets of {} disk-only {} objects, {c} client(s)",
                keys.len(),
                size_name(size)
            ));
            let samples = gets(&clients[..c], &keys, size, budget).await?;
            if let Some(e) = samples.error_texts.first() {
                ctx.progress.say(&format!("disk: {} gets: {} failed, first: {e}", size_name(size), samples.errors));
            }
            out.failed += samples.errors;
            out.gets.push(Gets { tier: "disk", size, clients: c, objects: keys.len() as u64, set: n, samples });
        }
        let still = cluster.disk_only(&prefix, n).await?;
        let moved = keys.iter().filter(|k| !still.contains(k)).count();
        if moved > 0 {
            out.notes.push(format!(
                "{moved} of the {} disk-only {} objects read had a memory replica when listed after the gets",
                keys.len(),
                size_name(size)
            ));
        }
    }
    out.failed += memory_gets(ctx, cluster, &clients, plan, out).await?;
    for c in clients {
        if let Ok(c) = Arc::try_unwrap(c) {
            c.close().await;
        }
    }
    Ok(())
}

/// The raw reads of `raw`, into `out.raw_reads` (a failure is a note).
async fn raw_reads(ctx: &mut Ctx, raw: &RawReads, out: &mut TierRun) {
    for &(size, depth, budget) in &raw.cells {
        ctx.progress.step(&format!("disk: raw io_uring read {} x{depth} in flight, before the gets", size_name(size)));
        let file = raw.file.clone();
        let measured = tokio::task::spawn_blocking(move || raw_disk::measure(&file, Dir::Read, size, depth, budget));
        match measured.await.map_err(anyhow::Error::from).and_then(|r| r) {
            Ok(samples) => out.raw_reads.push((size, depth, samples)),
            Err(e) => {
                out.notes.push(format!("raw read {} x{depth} before the gets not measured: {e:#}", size_name(size)));
                return;
            }
        }
    }
}

/// The reference: the same gets of fresh objects that are in memory (a
/// get reads memory replicas first). Returns the failed puts.
async fn memory_gets(
    ctx: &mut Ctx,
    cluster: &TierCluster,
    clients: &[Arc<Client>],
    plan: &TierPlan,
    out: &mut TierRun,
) -> anyhow::Result<u64> {
    let mut failed = 0;
    for (size, n) in [(4 * MIB, plan.memory_large_objects), (64 * KIB, plan.small_objects)] {
        ctx.progress.step(&format!("disk: {n} {} objects put for the memory-tier reference", size_name(size)));
        let prefix = format!("bench/disk/memory-{}/", size_name(size));
        let data = pattern(size, 5);
        for i in 0..n {
            match clients[0].put(&format!("{prefix}{i}"), &data, &PutOptions::default()).await {
                Ok(PutOutcome::Stored) => {}
                Ok(PutOutcome::KeptExisting) | Err(_) => failed += 1,
            }
        }
        // Measured once their copies are made, as the disk gets were: no
        // copy reads memory meanwhile.
        let started = Instant::now();
        while !cluster.tiers(&prefix, n).await?.iter().all(|t| t.2) && started.elapsed() < WAIT_MAX {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let keys: Vec<String> = cluster.tiers(&prefix, n).await?.into_iter().filter(|t| t.1).map(|t| t.0).collect();
        if keys.is_empty() {
            out.notes.push(format!("no {} object stayed in memory: memory gets not measured", size_name(size)));
            continue;
        }
        let budget = if size >= MIB { plan.large_gets } else { plan.small_gets };
        for c in [1, CLIENTS_N] {
            ctx.progress.step(&format!(
                "disk: gets of {} {} objects in memory, {c} client(s)",
                keys.len(),
                size_name(size)
            ));
            let samples = gets(&clients[..c], &keys, size, budget).await?;
            out.failed += samples.errors;
            out.gets.push(Gets { tier: "memory", size, clients: c, objects: keys.len() as u64, set: n, samples });
        }
    }
    Ok(failed)
}

fn set_prefix(size: usize, heartbeat_ms: u64) -> String {
    format!("bench/disk/{}-{heartbeat_ms}/", size_name(size))
}

/// Puts `n` objects of `size` ([`OFFLOAD_WRITERS`] writers) while watching
/// when all of them have a disk replica. Returns the measurement and the failed puts.
async fn offload(
    ctx: &mut Ctx,
    cluster: &TierCluster,
    client: &Client,
    (size, heartbeat_ms): (usize, u64),
    n: u64,
) -> anyhow::Result<(Offload, u64)> {
    ctx.progress.step(&format!("disk: offload of {n} objects of {} (heartbeat {heartbeat_ms} ms)", size_name(size)));
    let prefix = set_prefix(size, heartbeat_ms);
    let payloads: Vec<Vec<u8>> = (0..PAYLOADS).map(|s| pattern(size, s + size as u64)).collect();
    let (sum0, count0) = cluster.copy_seconds();
    let start = Instant::now();
    let writer = async {
        let writers = (0..OFFLOAD_WRITERS).map(|w| {
            let (prefix, payloads) = (&prefix, &payloads);
            async move {
                let mut failed = Samples::default();
                for i in (w..n).step_by(OFFLOAD_WRITERS as usize) {
                    let key = format!("{prefix}{i}");
                    match client.put(&key, &payloads[(i % PAYLOADS) as usize], &PutOptions::default()).await {
                        Ok(PutOutcome::Stored) => {}
                        Ok(PutOutcome::KeptExisting) => failed.failed(format!("put {key}: the key already existed")),
                        Err(e) => failed.failed(format!("put {key}: {e}")),
                    }
                }
                failed
            }
        });
        let mut failed = Samples::default();
        for f in futures::future::join_all(writers).await {
            failed.merge(f);
        }
        (start.elapsed(), failed)
    };
    let watcher = async {
        let stored = |t: &(String, bool, bool)| t.2;
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            let on_disk = cluster.tiers(&prefix, n).await.map(|v| v.iter().filter(|t| stored(t)).count() as u64);
            if on_disk.as_ref().is_ok_and(|c| *c >= n) {
                return Some(start.elapsed());
            }
            if start.elapsed() > WAIT_MAX {
                return None;
            }
        }
    };
    let ((put, failed), offloaded) = tokio::join!(writer, watcher);
    if let Some(e) = failed.error_texts.first() {
        ctx.progress.say(&format!("disk: offload puts: {} failed, first: {e}", failed.errors));
    }
    let (sum1, count1) = cluster.copy_seconds();
    let copies = count1 - count0;
    let o = Offload {
        size,
        heartbeat_ms,
        objects: n,
        put_s: put.as_secs_f64(),
        offload_s: offloaded.map(|d| d.as_secs_f64()),
        copy_mean_ms: (copies > 0.0).then(|| (sum1 - sum0) / copies * 1e3),
    };
    ctx.progress.say(&format!(
        "disk: offload {} x{n} (heartbeat {heartbeat_ms} ms): puts {:.2} s, all on disk after {:?} s ({:?} GB/s)",
        size_name(size),
        o.put_s,
        o.offload_s.map(|s| (s * 100.0).round() / 100.0),
        o.gb_per_s().map(|g| (g * 100.0).round() / 100.0),
    ));
    anyhow::ensure!(
        o.offload_s.is_some() || failed.errors > 0,
        "the {} objects were not all on disk within {WAIT_MAX:?}",
        size_name(size)
    );
    Ok((o, failed.errors))
}

/// Puts filler in rounds until most of each set is on disk only (memory
/// eviction drops the memory copies of objects kept on disk, oldest
/// first). Returns the failed puts.
async fn evict_sets(
    ctx: &mut Ctx,
    cluster: &TierCluster,
    client: &Client,
    plan: &TierPlan,
    sets: &[(usize, u64)],
) -> anyhow::Result<u64> {
    let fill = pattern(FILL_BYTES, 99);
    let mut put = 0;
    let mut failed = 0;
    loop {
        let mut short = Vec::new();
        for &(size, n) in sets {
            let have = cluster.disk_only(&set_prefix(size, HEARTBEAT_SHORT_MS), n).await?.len() as u64;
            if (have as f64) < n as f64 * DISK_ONLY_SHARE_MIN {
                short.push(format!("{have}/{n} of {}", size_name(size)));
            }
        }
        if short.is_empty() {
            return Ok(failed);
        }
        anyhow::ensure!(
            put < plan.fill_max,
            "after {put} filler objects only {} were on disk only (memory eviction did not drop them)",
            short.join(", ")
        );
        ctx.progress.step(&format!("disk: filler {put}/{} objects; disk only: {}", plan.fill_max, short.join(", ")));
        for _ in 0..plan.fill_round {
            let key = format!("bench/disk/fill/{put}");
            match client.put(&key, &fill, &PutOptions::default()).await {
                Ok(PutOutcome::Stored) => {}
                Ok(PutOutcome::KeptExisting) | Err(_) => failed += 1,
            }
            put += 1;
        }
        // Wait for the round's copies, so eviction has disk copies to drop.
        let started = Instant::now();
        loop {
            let tiers = cluster.tiers("bench/disk/fill/", put).await?;
            if tiers.iter().all(|t| t.2) || started.elapsed() > WAIT_MAX {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `clients` read `keys` in parallel, each from its own place in the list,
/// each until `budget` ends.
async fn gets(clients: &[Arc<Client>], keys: &[String], size: usize, budget: Budget) -> anyhow::Result<Samples> {
    let keys = Arc::new(keys.to_vec());
    let start = Instant::now();
    let workers: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(w, c)| {
            let (c, keys) = (c.clone(), keys.clone());
            tokio::spawn(async move {
                let mut s = Samples::default();
                let mut buf = prefaulted(size);
                let first = w * keys.len() / CLIENTS_N;
                let bound = budget.start();
                let mut i = 0;
                while bound.go_on(i) {
                    let key = &keys[(first + i as usize) % keys.len()];
                    let t = Instant::now();
                    match c.get_into(key, &mut buf).await {
                        Ok(n) if n == size => s.ok(t.elapsed(), n as u64, 1),
                        Ok(n) => s.failed(format!("get {key}: {n} bytes, expected {size}")),
                        Err(e) => s.failed(format!("get {key}: {e}")),
                    }
                    i += 1;
                }
                s
            })
        })
        .collect();
    let mut all = Samples::default();
    for w in workers {
        all.merge(w.await.context("get worker")?);
    }
    all.wall = start.elapsed();
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_fit_memory_and_everything_fits_disk() {
        for quick in [true, false] {
            let p = TierPlan::new(quick);
            let memory = mooncake_client::parse_size(p.memory).unwrap();
            let disk = mooncake_client::parse_size(p.disk).unwrap();
            let sets = p.large_objects * 4 * MIB as u64 + p.small_objects * 64 * KIB as u64;
            assert!(sets as f64 <= memory as f64 * 0.6, "the sets stay below the high watermark");
            let reference = p.memory_large_objects * 4 * MIB as u64 + p.small_objects * 64 * KIB as u64;
            let all = sets + p.fill_max * FILL_BYTES as u64 + reference;
            assert!(all as f64 <= disk as f64 * 0.9, "disk eviction never runs");
            assert!(p.default_heartbeat_objects * 4 * MIB as u64 <= memory / 2);
        }
        let o = Offload {
            size: MIB,
            heartbeat_ms: 100,
            objects: 1000,
            put_s: 0.5,
            offload_s: Some(1.048576),
            copy_mean_ms: None,
        };
        assert!((o.gb_per_s().unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(set_prefix(4 * MIB, 100), "bench/disk/4MiB-100/");
    }
}
