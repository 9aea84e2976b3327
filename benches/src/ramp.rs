//! `mooncake bench ramp`: a store node joins a full cluster under load
//! (issue 39, "placement that ramps"; upstream Mooncake's issue #3688,
//! where a restarted, empty node took every write and its network
//! saturated).
//!
//! Three store nodes are filled past the eviction watermark by writers that
//! keep putting 256 KiB objects (one replica each, new keys: every put
//! evicts), as fast as they can; then they pace themselves to a steady
//! rate (an inference fleet writes at the rate it prefills, not at the
//! store's limit: unpaced, 4 writers here turn a node's memory over several
//! times a second, and no node could ramp). After a steady window, a
//! fourth, empty node joins. Every 100 ms
//! the bench reads how many bytes the new node holds (it evicts nothing
//! while it fills, so what it gains is what was placed on it) and how many
//! bytes the writers put, and reports, per second after the node mounted,
//! the new node's share of the writes next to its share by free bytes (its
//! free bytes over the cluster's when it mounted), and put p99 before and
//! during the join.
//!
//! The baseline is the same run's steady window before the join.
//!
//! Then, on a cluster of its own (3 store nodes with room), a store node
//! leaves for good: objects put with 2 replicas, store node 1 SIGKILLed,
//! and the time until every object has 2 replicas again, none on the dead
//! node (repair, docs/OPERATIONS.md "Lost replicas"), next to the masters'
//! client TTL (the expiry repair waits for).
//!
//! Last, a hot key (`hot_key.rs`): one object read by 8 clients, with the
//! masters' hot-key replication off and on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mooncake_client::{MasterClient, MasterClientConfig, PutOptions};
use mooncake_proto::master::GetClusterInfoResponse;
use mooncake_transfer::Protocol;
use tokio::sync::Mutex;

use crate::cluster::{Cluster, Spec};
use crate::report::{Cell, Section, Table, cols};
use crate::{Ctx, bound_row, targets_table};
use mooncake_local_cluster::Role;

const OBJECT_BYTES: usize = 256 << 10;
const WRITERS: usize = 4;
/// How often the new node's bytes are read.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// The cluster counts as full from this share of its capacity used.
const FULL_SHARE: f64 = 0.9;
/// Bound on filling the cluster, and on the new node mounting.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

/// One put: when it ended, how long it took, whether it stored.
type PutRecord = (Instant, Duration, bool);

/// Writers putting new keys until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    /// Bytes per second each writer keeps to (0: as fast as it can).
    pace: Arc<AtomicU64>,
    put_bytes: Arc<AtomicU64>,
    records: Arc<Mutex<Vec<PutRecord>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    async fn start(cluster: &Cluster, ctx: &Ctx) -> anyhow::Result<Load> {
        let stop = Arc::new(AtomicBool::new(false));
        let pace = Arc::new(AtomicU64::new(0));
        let put_bytes = Arc::new(AtomicU64::new(0));
        let records = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let client = cluster.client(Protocol::Tcp, &ctx.tcp).await?;
            let (stop, pace, put_bytes, records) = (stop.clone(), pace.clone(), put_bytes.clone(), records.clone());
            tasks.push(tokio::spawn(async move {
                let value = vec![w as u8; OBJECT_BYTES];
                let opts = PutOptions { replicas: 1, ..Default::default() };
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    let stored = client.put(&format!("ramp/{w}/{i}"), &value, &opts).await.is_ok();
                    let ended = Instant::now();
                    if stored {
                        put_bytes.fetch_add(OBJECT_BYTES as u64, Ordering::Relaxed);
                    }
                    records.lock().await.push((ended, ended - began, stored));
                    i += 1;
                    let rate = pace.load(Ordering::Relaxed);
                    if rate > 0 {
                        let slot = Duration::from_secs_f64(OBJECT_BYTES as f64 / rate as f64);
                        tokio::time::sleep(slot.saturating_sub(ended - began)).await;
                    }
                }
                client.close().await;
            }));
        }
        Ok(Load { stop, pace, put_bytes, records, tasks })
    }

    async fn stop(self) -> anyhow::Result<Vec<PutRecord>> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await?;
        }
        Ok(std::mem::take(&mut *self.records.lock().await))
    }
}

/// What one sample saw: when, the bytes put so far, the new node's bytes.
struct Sample {
    at: Instant,
    put_bytes: u64,
    new_node_bytes: u64,
}

/// Bytes used and capacity of the segments `owner` mounts.
fn owned(info: &GetClusterInfoResponse, owner: u64) -> (u64, u64) {
    let mine = info.segments.iter().filter(|s| s.owner_client_id == owner);
    mine.fold((0, 0), |(used, cap), s| (used + s.used_bytes, cap + s.segment.as_ref().map_or(0, |g| g.size)))
}

/// Polls the cluster info until `done` says so, bounded by [`PHASE_TIMEOUT`].
async fn wait_for(
    master: &MasterClient,
    what: &str,
    done: impl Fn(&GetClusterInfoResponse) -> bool,
) -> anyhow::Result<GetClusterInfoResponse> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        if let Ok(info) = master.cluster_info().await
            && done(&info)
        {
            return Ok(info);
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: not within {PHASE_TIMEOUT:?}");
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
}

/// p99 in ms of the puts that ended in `[from, to)`.
fn p99_ms(records: &[PutRecord], from: Instant, to: Instant) -> Option<f64> {
    let mut ms: Vec<f64> =
        records.iter().filter(|(at, _, _)| *at >= from && *at < to).map(|(_, d, _)| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let i = ((ms.len() as f64 * 0.99).ceil() as usize).checked_sub(1)?;
    ms.get(i.min(ms.len().checked_sub(1)?)).copied()
}

pub async fn run(ctx: &mut Ctx) -> anyhow::Result<Section> {
    // Paced so that the new node, taking its share, fills over seconds.
    let (segment, rate_mib, steady, after) = if ctx.quick {
        ("128MiB", 64, Duration::from_secs(2), Duration::from_secs(4))
    } else {
        ("512MiB", 128, Duration::from_secs(5), Duration::from_secs(8))
    };
    ctx.progress.step(&format!("ramp: starting 1 master and 3 store nodes of {segment}"));
    let spec = Spec { masters: 1, stores: 3, segment_size: segment, prefault: false };
    let mut cluster = Cluster::start(&ctx.exe, spec, &ctx.master_args).await?;
    let master = MasterClient::new(MasterClientConfig::new(cluster.master_addrs()))?;
    ctx.progress.step(&format!("ramp: {WRITERS} writers fill the cluster past {:.0} %", FULL_SHARE * 100.0));
    let load = Load::start(&cluster, ctx).await?;
    let full = |i: &GetClusterInfoResponse| i.used_bytes as f64 >= FULL_SHARE * i.capacity_bytes.max(1) as f64;
    wait_for(&master, "filling the cluster", full).await?;
    load.pace.store((rate_mib << 20) / WRITERS as u64, Ordering::Relaxed);
    ctx.progress.step(&format!("ramp: {steady:?} of puts into the full cluster at {rate_mib} MiB/s (the baseline)"));
    let steady_from = Instant::now();
    tokio::time::sleep(steady).await;
    let joined = Instant::now();
    let id = cluster.add_store().map_err(anyhow::Error::msg)?;
    let owner = cluster.store_client_id(id);
    ctx.progress.step(&format!("ramp: store node {id} joins; {after:?} of puts"));
    let at_mount = wait_for(&master, "the new node to mount", |i| owned(i, owner).1 > 0).await?;
    let mounted = Instant::now();
    let free = |i: &GetClusterInfoResponse| i.capacity_bytes.saturating_sub(i.used_bytes);
    let (new_used, new_cap) = owned(&at_mount, owner);
    let fair_share = (new_cap - new_used) as f64 / free(&at_mount).max(1) as f64;
    let mut samples = Vec::new();
    while mounted.elapsed() < after {
        if let Ok(info) = master.cluster_info().await {
            let put_bytes = load.put_bytes.load(Ordering::Relaxed);
            samples.push(Sample { at: Instant::now(), put_bytes, new_node_bytes: owned(&info, owner).0 });
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    let records = load.stop().await?;
    drop(cluster);
    let failed = records.iter().filter(|(_, _, stored)| !stored).count() as u64;
    let before_p99 = p99_ms(&records, steady_from, joined);
    let during_p99 = p99_ms(&records, mounted, mounted + after);
    let objects = if ctx.quick { 200 } else { 1_000 };
    ctx.progress.step(&format!("ramp: repair: {objects} objects with 2 replicas, then store node 1 killed for good"));
    let repair = repair_phase(ctx, objects).await?;
    let mut s = section(&samples, mounted, fair_share, before_p99, during_p99, failed + repair.failed);
    let past_ttl = repair.whole_after_s.map(|w| w - repair.client_ttl_s as f64);
    if let Some(targets) = s.tables.get_mut(1) {
        bound_row(targets, "repair: seconds past the client TTL until every object is whole (<= 10)", past_ttl, 1);
    }
    s.tables.push(repair.table());
    let hot = crate::hot_key::run(ctx).await?;
    let off = hot.iter().find(|c| !c.fan_out);
    let on = hot.iter().find(|c| c.fan_out);
    if let Some(targets) = s.tables.get_mut(1) {
        let speedup = on.zip(off).map(|(on, off)| on.reads_per_s / off.reads_per_s.max(1e-9));
        bound_row(targets, "hot key: reads/s with replication on / off (all replicas share 2 cores)", speedup, 2);
        crate::target_row(
            targets,
            "hot key: least share of the reads a replica served / its fair share",
            on.and_then(|c| c.min_fair_share),
            0.33,
            true,
            2,
        );
    }
    s.failed_ops += hot.iter().map(|c| c.failed).sum::<u64>();
    s.tables.push(crate::hot_key::table(&hot));
    Ok(s)
}

/// What the repair phase measured.
struct RepairRun {
    objects: usize,
    /// Objects that had a replica on the killed node.
    hit: usize,
    /// Seconds from the kill until every object had 2 replicas again.
    whole_after_s: Option<f64>,
    failed: u64,
    /// The masters' client TTL (what repair waits for first).
    client_ttl_s: u64,
}

/// The masters' default `--client_ttl` (seconds).
const MASTER_CLIENT_TTL_S: u64 = 10;

/// The client TTL the masters run with: `--client_ttl` among `master_args`,
/// else their default.
fn client_ttl_s(master_args: &[String]) -> u64 {
    let given = master_args.iter().find_map(|a| a.strip_prefix("--client_ttl=")?.parse().ok());
    given.unwrap_or(MASTER_CLIENT_TTL_S)
}

impl RepairRun {
    fn table(&self) -> Table {
        let mut t = Table::new(
            "a store node leaves for good: seconds until every object put with 2 replicas has 2 again",
            cols(&[
                ("objects", "objects"),
                ("lost_a_replica", "lost a replica"),
                ("whole_after_s", "whole again after s"),
                ("client_ttl_s", "client TTL s"),
            ]),
        );
        t.row(vec![
            Cell::text(self.objects.to_string()),
            Cell::text(self.hit.to_string()),
            Cell::opt(self.whole_after_s, 1),
            Cell::text(self.client_ttl_s.to_string()),
        ]);
        t
    }
}

/// Puts `objects` with 2 replicas on 3 store nodes, kills store node 1 for
/// good, and times the repair.
async fn repair_phase(ctx: &Ctx, objects: usize) -> anyhow::Result<RepairRun> {
    let spec = Spec { masters: 1, stores: 3, segment_size: "256MiB", prefault: false };
    let mut cluster = Cluster::start(&ctx.exe, spec, &ctx.master_args).await?;
    let master = MasterClient::new(MasterClientConfig::new(cluster.master_addrs()))?;
    let client = cluster.client(Protocol::Tcp, &ctx.tcp).await?;
    let two = PutOptions { replicas: 2, min_replicas: 2, ..Default::default() };
    let value = vec![7u8; OBJECT_BYTES];
    let mut failed = 0;
    for i in 0..objects {
        failed += u64::from(client.put(&format!("repair/{i}"), &value, &two).await.is_err());
    }
    client.close().await;
    let dead = cluster.store_client_id(1);
    let info = master.cluster_info().await?;
    let lost: Vec<u64> = info
        .segments
        .iter()
        .filter(|u| u.owner_client_id == dead)
        .filter_map(|u| u.segment.as_ref())
        .map(|g| g.id)
        .collect();
    let listed = master.list_objects("repair/", objects as u32 + 10).await?;
    let hit = listed.iter().filter(|o| o.replicas.iter().any(|r| lost.contains(&r.segment_id))).count();
    cluster.kill(Role::Store, 1);
    let killed = Instant::now();
    let mut whole_after_s = None;
    while killed.elapsed() < PHASE_TIMEOUT {
        if let Ok(listed) = master.list_objects("repair/", objects as u32 + 10).await {
            let whole = listed
                .iter()
                .all(|o| o.replicas.len() == 2 && o.replicas.iter().all(|r| !lost.contains(&r.segment_id)));
            if whole && listed.len() + failed as usize == objects {
                whole_after_s = Some(killed.elapsed().as_secs_f64());
                break;
            }
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    Ok(RepairRun { objects, hit, whole_after_s, failed, client_ttl_s: client_ttl_s(&ctx.master_args) })
}

fn section(
    samples: &[Sample],
    mounted: Instant,
    fair_share: f64,
    before_p99: Option<f64>,
    during_p99: Option<f64>,
    failed: u64,
) -> Section {
    let mut t = Table::new(
        "a store node joins a full cluster under load: its share of the writes, per second after it mounted",
        cols(&[
            ("second", "second"),
            ("put_mib", "MiB put"),
            ("new_node_share", "new node's share"),
            ("share_by_free_bytes", "its share by free bytes"),
        ]),
    );
    let mut first_second = None;
    let mut second = 1u64;
    let mut from = samples.first();
    while let Some(start) = from {
        let end_at = mounted + Duration::from_secs(second);
        let Some(end) = samples.iter().rev().find(|s| s.at <= end_at).filter(|e| e.at > start.at) else { break };
        let put = end.put_bytes.saturating_sub(start.put_bytes);
        let gained = end.new_node_bytes.saturating_sub(start.new_node_bytes);
        let share = (put > 0).then(|| gained as f64 / put as f64);
        if second == 1 {
            first_second = share;
        }
        t.row(vec![
            Cell::text(second.to_string()),
            Cell::opt(Some(put as f64 / (1 << 20) as f64), 1),
            Cell::opt(share, 2),
            Cell::opt(Some(fair_share), 2),
        ]);
        from = Some(end);
        second += 1;
    }
    let mut targets = targets_table();
    let over_fair = first_second.map(|s| s / fair_share.max(1e-9));
    bound_row(&mut targets, "new node's share of the first second / its share by free bytes (<= 1)", over_fair, 2);
    let slower = during_p99.zip(before_p99).map(|(d, b)| d / b.max(1e-9));
    bound_row(&mut targets, "put p99 during the join / before (<= 2)", slower, 2);
    let mut s = Section::new("ramp");
    s.tables = vec![t, targets];
    s.failed_ops = failed;
    s.note(format!(
        "put p99 before the join {} ms, during {} ms; {OBJECT_BYTES}-byte objects, {WRITERS} writers at a steady \
         rate, every put into the full nodes evicts",
        before_p99.map_or("-".into(), |v| format!("{v:.2}")),
        during_p99.map_or("-".into(), |v| format!("{v:.2}"))
    ));
    s
}
