//! `mooncake bench scale [--objects N]`: does the master quorum keep its
//! promises at size? Three masters (fsync on), segments registered by the
//! bench (no bytes move: this measures the metadata quorum), then:
//!
//! 1. **load** N objects through the batch RPCs (1,000 keys per BatchPutStart
//!    and BatchPutEnd, a few loaders): load rate, leader RSS per object, and
//!    leadership changes while nothing is faulted;
//! 2. **snapshot**: a snapshot built on the leader (TriggerSnapshot) while a
//!    put loop measures how long commits stall;
//! 3. **restart**: a follower killed and restarted: time until it has
//!    caught up with the leader;
//! 4. **install**: a fresh master added as a learner: time until it has the
//!    leader's state (snapshot install);
//! 5. **failover**: the leader SIGKILLed 5 times (`--quick`: 2) under a
//!    continued put/get load: the gap of each kill and the leadership
//!    changes beyond one per kill.
//!
//! Fake segment owners are kept alive by the bench's own heartbeats.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::MasterClient;
use mooncake_local_cluster::Role;
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Segment};

use crate::cluster::{Cluster, Spec};
use crate::report::{Cell, Section, Table, cols};
use crate::{Ctx, target_row, targets_table};

/// Objects of a full run and of `--quick` (the goals are at 10 M).
pub const OBJECTS_FULL: u64 = 10_000_000;
pub const OBJECTS_QUICK: u64 = 1_000_000;
/// Keys per batch RPC (the master's limit is 1,024).
const BATCH_KEYS: u64 = 1_000;
/// Concurrent loaders.
const LOADERS: u64 = 2;
/// Fake segments, each owned by its own fake store node, 1 TiB each.
const SEGMENTS: u64 = 8;
const SEGMENT_BYTES: u64 = 1 << 40;
/// Object size: KV-cache blocks.
const OBJECT_BYTES: u64 = 64 << 10;
/// Client ids of the bench: the writer, then the segment owners.
const WRITER: u64 = 9_000;
const OWNER_BASE: u64 = 9_100;
/// How often the fake owners ping (the masters' client_ttl is 10 s).
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Longest wait for any one thing (a leader, a catch-up, a snapshot).
const WAIT_MAX: Duration = Duration::from_secs(300);
const KILLS_FULL: usize = 5;
const KILLS_QUICK: usize = 2;
/// Load between kills.
const STEADY: Duration = Duration::from_secs(2);

pub async fn run(ctx: &mut Ctx, objects: Option<u64>) -> anyhow::Result<Section> {
    let n = objects.unwrap_or(if ctx.quick { OBJECTS_QUICK } else { OBJECTS_FULL });
    let mut section = Section::new("scale");
    ctx.progress.step(&format!("scale: starting 3 masters (fsync on) for {n} objects"));
    let mut cluster = Cluster::start(
        &ctx.exe,
        Spec { masters: 3, stores: 0, segment_size: "64MiB", prefault: false },
        &ctx.master_args,
    )
    .await?;
    let client = Arc::new(mooncake_local_cluster::LocalCluster::client(&cluster).map_err(anyhow::Error::msg)?);
    let stop = Arc::new(AtomicBool::new(false));
    register(&client).await?;
    let beats = tokio::spawn(heartbeats(client.clone(), stop.clone()));
    let result = phases(ctx, &mut cluster, &client, n).await;
    stop.store(true, Ordering::SeqCst);
    let _ = beats.await;
    let m = result.map_err(|e| anyhow::anyhow!("{e:#}\n{}", cluster.log_tails(15)))?;
    section.tables.push(targets(&m));
    section.tables.push(results_table(&m));
    section.note(format!(
        "{n} objects of {OBJECT_BYTES} B (metadata only, {SEGMENTS} fake 1 TiB segments), {BATCH_KEYS} keys per batch RPC, {LOADERS} loaders"
    ));
    section.note(
        "leader RSS per object = growth of the leader's resident memory over the load / objects (keys are ~20 B)",
    );
    Ok(section)
}

/// What the phases measured.
#[derive(Default)]
struct Measured {
    objects: u64,
    load_s: f64,
    rss_per_object: Option<f64>,
    terms_during_load: u64,
    snapshot_build_s: Option<f64>,
    commit_stall_ms: Option<f64>,
    /// The slowest put of as long a window just before, with no snapshot:
    /// the same run's baseline for `commit_stall_ms`.
    commit_worst_baseline_ms: Option<f64>,
    follower_restart_s: Option<f64>,
    install_s: Option<f64>,
    gaps_ms: Vec<f64>,
    extra_elections: u64,
}

async fn phases(ctx: &mut Ctx, cluster: &mut Cluster, client: &Arc<MasterClient>, n: u64) -> anyhow::Result<Measured> {
    let mut m = Measured { objects: n, ..Default::default() };
    let (leader, term0) = cluster.wait_for_leader(WAIT_MAX).await.map_err(anyhow::Error::msg)?;
    let rss0 = rss_bytes(cluster, leader);
    let started = Instant::now();
    load(ctx, client, n).await?;
    m.load_s = started.elapsed().as_secs_f64();
    let (leader_after, term1) = cluster.wait_for_leader(WAIT_MAX).await.map_err(anyhow::Error::msg)?;
    m.terms_during_load = term1 - term0;
    // Every acknowledged object must be there (an answer is not proof).
    let held = cluster.info(leader_after).await.map(|i| i.object_count).unwrap_or(0);
    anyhow::ensure!(held >= n, "the leader holds {held} objects after {n} were acknowledged");
    if leader_after == leader
        && let (Some(a), Some(b)) = (rss0, rss_bytes(cluster, leader))
    {
        m.rss_per_object = Some(b.saturating_sub(a) as f64 / n as f64);
    }
    ctx.progress.say(&format!(
        "scale: loaded {n} objects in {:.1} s ({:.0}/s); terms +{}; leader RSS/object {:?}",
        m.load_s,
        n as f64 / m.load_s,
        m.terms_during_load,
        m.rss_per_object.map(|b| b.round())
    ));
    snapshot(ctx, cluster, client, &mut m).await?;
    restart_follower(ctx, cluster, &mut m).await?;
    install(ctx, cluster, client, &mut m).await?;
    failover(ctx, cluster, client, &mut m).await?;
    Ok(m)
}

/// Mounts the fake segments and registers the writer.
async fn register(client: &MasterClient) -> anyhow::Result<()> {
    for s in 0..SEGMENTS {
        let seg = Segment {
            id: 1 + s,
            size: SEGMENT_BYTES,
            endpoint: format!("127.0.0.1:{}", 20_000 + s),
            host_id: format!("scale-host-{s}"),
            ..Default::default()
        };
        client.remount_segments(OWNER_BASE + s, vec![seg]).await.context("mounting a fake segment")?;
    }
    client.remount_segments(WRITER, vec![]).await.context("registering the writer")?;
    Ok(())
}

async fn heartbeats(client: Arc<MasterClient>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        for id in (0..SEGMENTS).map(|s| OWNER_BASE + s).chain([WRITER]) {
            let _ = client.ping(id).await;
        }
        tokio::time::sleep(HEARTBEAT).await;
    }
}

/// Puts keys `prefix/i` for i in `range` with batch RPCs; returns how many were stored.
async fn put_batch(client: &MasterClient, prefix: &str, range: std::ops::Range<u64>) -> anyhow::Result<u64> {
    let starts: Vec<PutStartRequest> = range
        .clone()
        .map(|i| PutStartRequest {
            client_id: WRITER,
            key: format!("{prefix}/{i:010}"),
            size: OBJECT_BYTES,
            replica_num: 1,
            ..Default::default()
        })
        .collect();
    let started = client.batch_put_start(starts).await?;
    say_first_refusal("PutStart", prefix, started.reply.iter().map(|r| r.status.as_ref()));
    let ends: Vec<PutEndRequest> = range
        .zip(&started.reply)
        .filter(|(_, r)| r.status.as_ref().is_none_or(|s| s.code == 0))
        .map(|(i, r)| PutEndRequest {
            client_id: WRITER,
            key: format!("{prefix}/{i:010}"),
            checksum: i as u32,
            size: OBJECT_BYTES,
            replicas: r.replicas.clone(),
            request_id: request_id(),
            ..Default::default()
        })
        .collect();
    let ended = client.batch_put_end(ends).await?;
    say_first_refusal("PutEnd", prefix, ended.reply.iter().map(|r| r.status.as_ref()));
    Ok(ended.reply.iter().filter(|r| r.status.as_ref().is_none_or(|s| s.code == 0)).count() as u64)
}

/// Prints the first refused item of a batch reply: a load that comes up
/// short says why.
fn say_first_refusal<'a>(rpc: &str, prefix: &str, statuses: impl Iterator<Item = Option<&'a mooncake_proto::Status>>) {
    if let Some(s) = statuses.flatten().find(|s| s.code != 0) {
        eprintln!("scale: a {rpc} of {prefix} was refused: code {} {}", s.code, s.message);
    }
}

/// A request id unique to this bench process (for retried PutEnds): the
/// start time in the high bits, a counter from 1 below. (An id that two
/// PutEnds share is applied once: the master answers the second with the
/// first's answer.)
fn request_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) << 20
    });
    base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed) + 1)
}

async fn load(ctx: &mut Ctx, client: &Arc<MasterClient>, n: u64) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let stored = Arc::new(AtomicU64::new(0));
    let mut loaders = Vec::new();
    for _ in 0..LOADERS {
        let (client, next, stored) = (client.clone(), next.clone(), stored.clone());
        loaders.push(tokio::spawn(async move {
            loop {
                let from = next.fetch_add(BATCH_KEYS, Ordering::SeqCst);
                if from >= n {
                    return anyhow::Ok(());
                }
                let done = put_batch(&client, "scale", from..(from + BATCH_KEYS).min(n)).await?;
                stored.fetch_add(done, Ordering::SeqCst);
            }
        }));
    }
    let started = Instant::now();
    while loaders.iter().any(|l| !l.is_finished()) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = stored.load(Ordering::SeqCst);
        ctx.progress.step(&format!(
            "scale: loading {s}/{n} objects ({:.0}/s)",
            s as f64 / started.elapsed().as_secs_f64().max(0.001)
        ));
    }
    for l in loaders {
        l.await.context("loader task")??;
    }
    let s = stored.load(Ordering::SeqCst);
    anyhow::ensure!(s == n, "stored {s} of {n} objects");
    Ok(())
}

/// Builds a snapshot on the leader while a put loop measures the longest commit.
async fn snapshot(
    ctx: &mut Ctx,
    cluster: &Cluster,
    client: &Arc<MasterClient>,
    m: &mut Measured,
) -> anyhow::Result<()> {
    ctx.progress.step("scale: building a snapshot on the leader");
    let (leader, _) = cluster.wait_for_leader(WAIT_MAX).await.map_err(anyhow::Error::msg)?;
    let builds = |c: &Cluster| metric(c, leader, "mooncake_snapshot_build_seconds_count");
    let before = builds(cluster).unwrap_or(0.0);
    let build_sum_before = metric(cluster, leader, "mooncake_snapshot_build_seconds_sum").unwrap_or(0.0);
    let (worst, built) = slowest_commit_while(client, "scale-snap", async {
        client.trigger_snapshot().await.context("TriggerSnapshot")?;
        let start = Instant::now();
        while builds(cluster).unwrap_or(0.0) <= before && start.elapsed() < WAIT_MAX {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok(start.elapsed())
    })
    .await?;
    // The baseline: the same probe for as long, with no snapshot being built.
    let (baseline, ()) = slowest_commit_while(client, "scale-base", tokio::time::sleep(built?)).await?;
    m.commit_worst_baseline_ms = Some(baseline.as_secs_f64() * 1e3);
    let sum = metric(cluster, leader, "mooncake_snapshot_build_seconds_sum").unwrap_or(0.0);
    m.snapshot_build_s = (builds(cluster).unwrap_or(0.0) > before).then_some(sum - build_sum_before);
    m.commit_stall_ms = Some(worst.as_secs_f64() * 1e3);
    Ok(())
}

/// Runs [`put_loop`] while `during` runs: the slowest put, and what
/// `during` gave.
async fn slowest_commit_while<T>(
    client: &Arc<MasterClient>,
    prefix: &'static str,
    during: impl std::future::Future<Output = T>,
) -> anyhow::Result<(Duration, T)> {
    let stop = Arc::new(AtomicBool::new(false));
    let probe = tokio::spawn(put_loop(client.clone(), prefix, stop.clone()));
    let out = during.await;
    stop.store(true, Ordering::SeqCst);
    Ok((probe.await.context("put loop")?, out))
}

/// Puts one small object after another until stopped; returns the slowest.
async fn put_loop(client: Arc<MasterClient>, prefix: &'static str, stop: Arc<AtomicBool>) -> Duration {
    let mut worst = Duration::ZERO;
    let mut i = 0;
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        if put_batch(&client, prefix, i..i + 1).await.is_ok_and(|n| n == 1) {
            worst = worst.max(t.elapsed());
        }
        i += 1;
    }
    worst
}

/// Kills a follower, restarts it, and times its catch-up.
async fn restart_follower(ctx: &mut Ctx, cluster: &mut Cluster, m: &mut Measured) -> anyhow::Result<()> {
    let (leader, _) = cluster.wait_for_leader(WAIT_MAX).await.map_err(anyhow::Error::msg)?;
    let follower = cluster.master_ids().into_iter().find(|id| *id != leader).context("a follower")?;
    ctx.progress.step(&format!("scale: restarting follower {follower}"));
    cluster.kill(Role::Master, follower);
    let start = Instant::now();
    cluster.restart(Role::Master, follower).map_err(anyhow::Error::msg)?;
    m.follower_restart_s = caught_up(cluster, follower, start).await;
    Ok(())
}

/// Adds a fresh master as a learner: it gets the state by snapshot install.
async fn install(ctx: &mut Ctx, cluster: &mut Cluster, client: &MasterClient, m: &mut Measured) -> anyhow::Result<()> {
    ctx.progress.step("scale: a fresh master joins (snapshot install)");
    let start = Instant::now();
    let addr = cluster.start_joiner(4).map_err(anyhow::Error::msg)?;
    client.add_learner(4, &addr).await.context("adding a learner")?;
    m.install_s = caught_up(cluster, 4, start).await;
    Ok(())
}

/// Seconds from `start` until master `id` has applied what the leader has.
async fn caught_up(cluster: &Cluster, id: u64, start: Instant) -> Option<f64> {
    while start.elapsed() < WAIT_MAX {
        if let Ok((leader, _)) = cluster.wait_for_leader(Duration::from_secs(5)).await
            && let (Some(l), Some(f)) = (cluster.info(leader).await, cluster.info(id).await)
            && f.applied_index >= l.commit_index.saturating_sub(5)
            && f.object_count >= l.object_count
        {
            return Some(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

/// Kills the leader under load; gaps and elections beyond one per kill.
async fn failover(
    ctx: &mut Ctx,
    cluster: &mut Cluster,
    client: &Arc<MasterClient>,
    m: &mut Measured,
) -> anyhow::Result<()> {
    let kills = if ctx.quick { KILLS_QUICK } else { KILLS_FULL };
    let successes = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (client, stop, successes) = (client.clone(), stop.clone(), successes.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                if put_batch(&client, "scale-failover", i..i + 1).await.is_ok_and(|n| n == 1) {
                    successes.lock().unwrap_or_else(|p| p.into_inner()).push(Instant::now());
                }
                i += 1;
            }
        })
    };
    let (_, term0) = cluster.wait_for_leader(WAIT_MAX).await.map_err(anyhow::Error::msg)?;
    let mut killed_at = Vec::new();
    for k in 1..=kills {
        tokio::time::sleep(STEADY).await;
        let (leader, term) = cluster.wait_for_leader(WAIT_MAX).await.map_err(anyhow::Error::msg)?;
        ctx.progress.step(&format!("scale: kill {k}/{kills}: SIGKILL master {leader} (term {term})"));
        killed_at.push(Instant::now());
        cluster.kill(Role::Master, leader);
        cluster.wait_for_leader(WAIT_MAX).await.map_err(anyhow::Error::msg)?;
        cluster.restart(Role::Master, leader).map_err(anyhow::Error::msg)?;
        caught_up(cluster, leader, Instant::now()).await;
    }
    tokio::time::sleep(STEADY).await;
    stop.store(true, Ordering::SeqCst);
    load.await.context("failover load")?;
    let (_, term1) = cluster.wait_for_leader(WAIT_MAX).await.map_err(anyhow::Error::msg)?;
    m.extra_elections = (term1 - term0).saturating_sub(kills as u64);
    let ok = successes.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for at in killed_at {
        let before = ok.iter().rev().find(|t| **t <= at).copied().unwrap_or(at);
        let after = ok.iter().find(|t| **t > at).copied();
        m.gaps_ms.push(after.map(|a| (a - before).as_secs_f64() * 1e3).unwrap_or(f64::NAN));
    }
    Ok(())
}

/// Resident memory of master `id`, from /proc.
fn rss_bytes(cluster: &Cluster, id: u64) -> Option<u64> {
    let pid = cluster.node(Role::Master, id)?.pid()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One unlabelled sample of master `id`'s metrics.
fn metric(cluster: &Cluster, id: u64, name: &str) -> Option<f64> {
    let http = cluster.node(Role::Master, id)?.http.clone();
    let body = crate::baseline::http_get(&http, "/metrics").ok()?;
    body.lines().find(|l| l.split_whitespace().next() == Some(name))?.split_whitespace().nth(1)?.parse().ok()
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn targets(m: &Measured) -> Table {
    let mut t = targets_table();
    let max_gap = m.gaps_ms.iter().copied().fold(None, |a: Option<f64>, g| Some(a.map_or(g, |a| a.max(g))));
    target_row(&mut t, "failover gap max ms", max_gap, 1000.0, false, 0);
    target_row(&mut t, "failover gap median ms", median(&m.gaps_ms), 600.0, false, 0);
    target_row(&mut t, "leadership changes without a fault (load)", Some(m.terms_during_load as f64), 0.0, false, 0);
    target_row(&mut t, "elections beyond one per kill", Some(m.extra_elections as f64), 0.0, false, 0);
    target_row(&mut t, "leader bytes per object (+ key)", m.rss_per_object, 256.0, false, 0);
    target_row(&mut t, "snapshot build s", m.snapshot_build_s, 30.0, false, 1);
    target_row(&mut t, "snapshot install s", m.install_s, 30.0, false, 1);
    target_row(&mut t, "follower restart s", m.follower_restart_s, 30.0, false, 1);
    target_row(&mut t, "load objects/s", Some(m.objects as f64 / m.load_s), 100_000.0, true, 0);
    t
}

fn results_table(m: &Measured) -> Table {
    let mut t = Table::new("scale", cols(&[("what", "what"), ("value", "value")]));
    let row = |t: &mut Table, what: &str, v: Option<f64>, d: usize| t.row(vec![Cell::text(what), Cell::opt(v, d)]);
    row(&mut t, "objects", Some(m.objects as f64), 0);
    row(&mut t, "load s", Some(m.load_s), 1);
    row(&mut t, "commit stall during snapshot build ms", m.commit_stall_ms, 0);
    row(&mut t, "slowest commit, as long without a snapshot ms", m.commit_worst_baseline_ms, 0);
    for (i, g) in m.gaps_ms.iter().enumerate() {
        row(&mut t, &format!("failover gap {} ms", i + 1), Some(*g), 0);
    }
    t
}
