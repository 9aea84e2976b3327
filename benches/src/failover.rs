//! `mooncake bench failover`: how long the service is unavailable when the
//! leader dies. A steady load (4 workers, each: put a 4 KiB object, get it,
//! remove it) runs while the bench SIGKILLs the leader, waits for a new
//! one, restarts the killed member on its data directory and waits until it
//! rejoins, 5 times (`--quick`: 2), with a second of steady load between
//! kills. The gap of one kill is the longest time between two consecutive
//! successful operations (of any worker) from the last success before the
//! kill until load flows again; it includes detection (election timeout),
//! election, and the clients finding the new leader.
//!
//! The same is measured on a 3-member etcd with its default timing
//! (heartbeat 100 ms, election timeout 1000 ms): workers send Put, Range,
//! DeleteRange with `hasleader` metadata, each attempt bounded by 300 ms,
//! and on failure try the next member after 10 ms (what a clientv3 user
//! gets with a request timeout and several endpoints). That attempt timeout
//! bounds how precisely etcd's gap is seen.
//!
//! Mooncake clients use the library as shipped: no retry loop of ours. A
//! Remove answered OBJECT_NOT_FOUND counts as done: only the worker removes
//! its keys, so that answer means an earlier attempt of the same call
//! succeeded across the leader change (documented MasterClient behaviour).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, PutOptions, PutOutcome};
use mooncake_local_cluster::Role;
use mooncake_proto::ErrorCode;
use mooncake_transfer::Protocol;
use tokio::task::JoinHandle;

use crate::baseline::etcd::{self, EtcdCluster, EtcdKv};
use crate::cluster::{Cluster, Spec};
use crate::data::pattern;
use crate::report::{Cell, Section, Table, cols};
use crate::{Ctx, target_row, targets_table};

const KILLS_FULL: usize = 5;
const KILLS_QUICK: usize = 2;
const WORKERS: usize = 4;
const VALUE_BYTES: usize = 4096;
/// Steady load before each kill and after the last one.
const STEADY: Duration = Duration::from_secs(1);
/// Longest wait for a leader after a kill or a restart.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// A kill's gap must end within this much of the kill to count as recovered.
const GAP_WINDOW: Duration = Duration::from_secs(15);
/// Hard stop of the load, whatever happens to the kill loop.
const LOAD_TIME_MAX: Duration = Duration::from_secs(180);
/// Operations of one worker, at most.
const WORKER_OPS_MAX: u64 = 1_000_000;
/// etcd: one attempt, and the pause before trying the next member.
const ETCD_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);
const ETCD_RETRY_PAUSE: Duration = Duration::from_millis(10);
/// etcd: longest time one operation may keep retrying before it counts as failed.
const ETCD_OP_DEADLINE: Duration = Duration::from_secs(15);

/// What one system's run produced.
struct Outcome {
    /// Gap per kill (`None`: no success within [`GAP_WINDOW`]).
    gaps: Vec<Option<Duration>>,
    ok: u64,
    failed: u64,
    first_error: Option<String>,
}

/// What one load worker saw.
#[derive(Default)]
struct Seen {
    successes: Vec<Instant>,
    failed: u64,
    first_error: Option<String>,
}

impl Seen {
    fn result(&mut self, r: anyhow::Result<()>) {
        match r {
            Ok(()) => self.successes.push(Instant::now()),
            Err(e) => {
                self.failed += 1;
                self.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
    }
}

pub async fn run(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let kills = if ctx.quick { KILLS_QUICK } else { KILLS_FULL };
    let mut section = Section::new("failover");
    let mc = mooncake_side(ctx, kills).await?;
    if let Some(e) = &mc.first_error {
        ctx.progress.say(&format!("failover: {} Mooncake ops failed, first: {e}", mc.failed));
    }
    section.failed_ops += mc.failed;
    let et = match etcd::find() {
        None => {
            ctx.progress.say(&format!("failover: {}", etcd::INSTALL_HINT));
            section.note(etcd::INSTALL_HINT);
            None
        }
        Some(bin) => match etcd_side(ctx, &bin, kills).await {
            Ok(o) => Some(o),
            Err(e) => {
                ctx.progress.say(&format!("failover: etcd side failed: {e:#}"));
                section.note(format!("etcd baseline skipped: {e:#}"));
                None
            }
        },
    };
    section.tables.push(targets(&mc));
    section.tables.push(summary_table(&mc, et.as_ref()));
    section.tables.push(kills_table(&mc, et.as_ref()));
    section.note(format!(
        "{WORKERS} workers: put {VALUE_BYTES} B + get + remove in a loop; gap = longest time without a successful op around each kill"
    ));
    let flags = match ctx.master_args.is_empty() {
        true => "defaults: heartbeat 40 ms, election timeout 120-240 ms".to_string(),
        false => format!("flags: {}", ctx.master_args.join(" ")),
    };
    section.note(format!("Mooncake masters ({flags}); etcd: defaults 100/1000 ms"));
    Ok(section)
}

async fn mooncake_side(ctx: &mut Ctx, kills: usize) -> anyhow::Result<Outcome> {
    ctx.progress.step("failover: starting 3 masters and 2 store nodes");
    let mut cluster = Cluster::start(
        &ctx.exe,
        Spec { masters: 3, stores: 2, segment_size: "256MiB", prefault: false },
        &ctx.master_args,
    )
    .await?;
    let mut clients = Vec::new();
    for _ in 0..WORKERS {
        clients.push(Arc::new(cluster.client(Protocol::Tcp, &ctx.tcp).await?));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<JoinHandle<Seen>> =
        clients.iter().enumerate().map(|(w, c)| tokio::spawn(mooncake_worker(c.clone(), w, stop.clone()))).collect();
    let killed = mooncake_kills(ctx, &mut cluster, kills).await;
    tokio::time::sleep(STEADY).await;
    stop.store(true, Ordering::SeqCst);
    let seen = collect(handles).await?;
    for c in clients {
        if let Ok(c) = Arc::try_unwrap(c) {
            c.close().await;
        }
    }
    let killed = killed.map_err(|e| anyhow::anyhow!("{e:#}\n{}", cluster.log_tails(10)))?;
    Ok(outcome(seen, &killed))
}

/// The kill loop; returns when each kill happened.
async fn mooncake_kills(ctx: &mut Ctx, cluster: &mut Cluster, kills: usize) -> anyhow::Result<Vec<Instant>> {
    let mut at = Vec::new();
    for k in 1..=kills {
        tokio::time::sleep(STEADY).await;
        let (leader, term) = cluster.wait_for_leader(RECOVERY_TIMEOUT).await.map_err(anyhow::Error::msg)?;
        ctx.progress.step(&format!("failover: mooncake kill {k}/{kills}: SIGKILL master {leader} (term {term})"));
        at.push(Instant::now());
        cluster.kill(Role::Master, leader);
        cluster.wait_for_leader(RECOVERY_TIMEOUT).await.map_err(anyhow::Error::msg).context("electing a new leader")?;
        cluster.restart(Role::Master, leader).map_err(anyhow::Error::msg)?;
        cluster.wait_for_leader(RECOVERY_TIMEOUT).await.map_err(anyhow::Error::msg).context("rejoining")?;
    }
    Ok(at)
}

async fn mooncake_worker(client: Arc<Client>, w: usize, stop: Arc<AtomicBool>) -> Seen {
    let value = pattern(VALUE_BYTES, w as u64);
    let mut buf = vec![0u8; VALUE_BYTES];
    let opts = PutOptions { replicas: 1, ..Default::default() };
    let mut seen = Seen::default();
    let start = Instant::now();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) && i < WORKER_OPS_MAX && start.elapsed() < LOAD_TIME_MAX {
        let key = format!("bench/failover/{w}/{i}");
        let put = client.put(&key, &value, &opts).await.map_err(anyhow::Error::from);
        seen.result(put.and_then(|o| {
            anyhow::ensure!(o == PutOutcome::Stored, "put {key}: the key already existed");
            Ok(())
        }));
        let got = client.get_into(&key, &mut buf).await;
        seen.result(got.map_err(Into::into).and_then(|n| {
            anyhow::ensure!(n == VALUE_BYTES, "get {key}: {n} bytes");
            Ok(())
        }));
        let removed = match client.remove(&key, true).await {
            Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => Ok(()),
            other => other,
        };
        seen.result(removed.map_err(Into::into));
        i += 1;
    }
    seen
}

async fn etcd_side(ctx: &mut Ctx, bin: &std::path::Path, kills: usize) -> anyhow::Result<Outcome> {
    ctx.progress.step("failover: starting a 3-member etcd cluster");
    let mut cluster = EtcdCluster::start(bin).await?;
    let urls = cluster.client_urls();
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles: Vec<JoinHandle<Seen>> = Vec::new();
    for w in 0..WORKERS {
        let kvs = urls.iter().map(|u| EtcdKv::new(u, ETCD_ATTEMPT_TIMEOUT)).collect::<anyhow::Result<Vec<_>>>()?;
        handles.push(tokio::spawn(etcd_worker(kvs, w, stop.clone())));
    }
    let killed = etcd_kills(ctx, &mut cluster, kills).await;
    tokio::time::sleep(STEADY).await;
    stop.store(true, Ordering::SeqCst);
    let seen = collect(handles).await?;
    Ok(outcome(seen, &killed?))
}

async fn etcd_kills(ctx: &mut Ctx, cluster: &mut EtcdCluster, kills: usize) -> anyhow::Result<Vec<Instant>> {
    let mut at = Vec::new();
    for k in 1..=kills {
        tokio::time::sleep(STEADY).await;
        let leader = cluster.leader(RECOVERY_TIMEOUT).await?;
        let name = cluster.members[leader].name.clone();
        ctx.progress.step(&format!("failover: etcd kill {k}/{kills}: SIGKILL member {name}"));
        at.push(Instant::now());
        cluster.kill(leader);
        cluster.wait_ready(RECOVERY_TIMEOUT).await.context("etcd electing a new leader")?;
        cluster.restart(leader).await?;
        cluster.wait_ready(RECOVERY_TIMEOUT).await.context("etcd member rejoining")?;
    }
    Ok(at)
}

async fn etcd_worker(kvs: Vec<EtcdKv>, w: usize, stop: Arc<AtomicBool>) -> Seen {
    let value = pattern(VALUE_BYTES, w as u64);
    let mut seen = Seen::default();
    let mut cur = w % kvs.len().max(1);
    let start = Instant::now();
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) && i < WORKER_OPS_MAX && start.elapsed() < LOAD_TIME_MAX {
        let key = format!("bench/failover/{w}/{i}");
        for step in 0..3 {
            let r = etcd_retrying(&kvs, &mut cur, &stop, |kv| {
                let (key, value) = (key.clone(), &value);
                async move {
                    match step {
                        0 => kv.put(&key, value).await,
                        1 => kv.get(&key).await.and_then(|n| {
                            anyhow::ensure!(n == VALUE_BYTES, "get {key}: {n} bytes");
                            Ok(())
                        }),
                        _ => kv.delete(&key).await,
                    }
                }
            })
            .await;
            seen.result(r);
        }
        i += 1;
    }
    seen
}

/// One etcd operation, retried on the next member until it succeeds, the
/// load stops, or [`ETCD_OP_DEADLINE`] passes.
async fn etcd_retrying<F, Fut>(kvs: &[EtcdKv], cur: &mut usize, stop: &AtomicBool, f: F) -> anyhow::Result<()>
where
    F: Fn(EtcdKv) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let start = Instant::now();
    loop {
        let kv = kvs.get(*cur).context("no etcd member")?.clone();
        match f(kv).await {
            Ok(()) => return Ok(()),
            Err(e) if start.elapsed() > ETCD_OP_DEADLINE || stop.load(Ordering::SeqCst) => return Err(e),
            Err(_) => {
                *cur = (*cur + 1) % kvs.len();
                tokio::time::sleep(ETCD_RETRY_PAUSE).await;
            }
        }
    }
}

async fn collect(handles: Vec<JoinHandle<Seen>>) -> anyhow::Result<Seen> {
    let mut all = Seen::default();
    for h in handles {
        let s = h.await.context("load worker")?;
        all.successes.extend(s.successes);
        all.failed += s.failed;
        if all.first_error.is_none() {
            all.first_error = s.first_error;
        }
    }
    all.successes.sort_unstable();
    Ok(all)
}

fn outcome(seen: Seen, kills: &[Instant]) -> Outcome {
    Outcome {
        gaps: kills
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let until = kills.get(i + 1).copied().unwrap_or(k + GAP_WINDOW).min(k + GAP_WINDOW);
                gap(&seen.successes, k, until)
            })
            .collect(),
        ok: seen.successes.len() as u64,
        failed: seen.failed,
        first_error: seen.first_error,
    }
}

/// The longest time between consecutive successes (sorted) from the last
/// one before `kill` up to `until` (the next kill, or [`GAP_WINDOW`] after
/// this one); `None` if nothing succeeded in between (no recovery).
fn gap(successes: &[Instant], kill: Instant, until: Instant) -> Option<Duration> {
    let after = successes.partition_point(|t| *t < kill);
    let mut prev = if after == 0 { kill } else { successes[after - 1] };
    let mut longest: Option<Duration> = None;
    for &t in successes[after..].iter().take_while(|t| **t <= until) {
        longest = Some(longest.unwrap_or_default().max(t - prev));
        prev = t;
    }
    longest
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e3)
}

/// Median and max of the gaps; a kill without recovery makes both `None`.
fn median_max(gaps: &[Option<Duration>]) -> (Option<f64>, Option<f64>) {
    let Some(mut v) = gaps.iter().copied().collect::<Option<Vec<Duration>>>() else { return (None, None) };
    if v.is_empty() {
        return (None, None);
    }
    v.sort_unstable();
    (ms(Some(v[(v.len() - 1) / 2])), ms(v.last().copied()))
}

fn summary_table(mc: &Outcome, et: Option<&Outcome>) -> Table {
    let mut t = Table::new(
        "failover: unavailability gap after SIGKILL of the leader",
        cols(&[
            ("system", "system"),
            ("kills", "kills"),
            ("gap_p50_ms", "gap p50 ms"),
            ("gap_max_ms", "gap max ms"),
            ("ops_ok", "ops ok"),
            ("ops_failed", "ops failed"),
        ]),
    );
    for (name, o) in [("mooncake", Some(mc)), ("etcd", et)] {
        let Some(o) = o else {
            t.row(vec![Cell::text(name), Cell::Missing, Cell::Missing, Cell::Missing, Cell::Missing, Cell::Missing]);
            continue;
        };
        let (p50, max) = median_max(&o.gaps);
        t.row(vec![
            Cell::text(name),
            Cell::Int(o.gaps.len() as u64),
            Cell::opt(p50, 0),
            Cell::opt(max, 0),
            Cell::Int(o.ok),
            Cell::Int(o.failed),
        ]);
    }
    t
}

fn kills_table(mc: &Outcome, et: Option<&Outcome>) -> Table {
    let mut t = Table::new(
        "failover: gap per kill",
        cols(&[("kill", "kill"), ("mooncake_gap_ms", "mooncake gap ms"), ("etcd_gap_ms", "etcd gap ms")]),
    );
    for (i, g) in mc.gaps.iter().enumerate() {
        let e = et.and_then(|o| o.gaps.get(i).copied().flatten());
        t.row(vec![Cell::Int(i as u64 + 1), Cell::opt(ms(*g), 0), Cell::opt(ms(e), 0)]);
    }
    t
}

fn targets(mc: &Outcome) -> Table {
    let (p50, max) = median_max(&mc.gaps);
    let mut t = targets_table();
    target_row(&mut t, "failover gap max ms", max, 1000.0, false, 0);
    target_row(&mut t, "failover gap median ms", p50, 600.0, false, 0);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_spans_the_outage_around_the_kill() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let successes = vec![at(0), at(10), at(20), at(700), at(710), at(720)];
        assert_eq!(gap(&successes, at(15), at(5_000)), Some(Duration::from_millis(680)));
        // Nothing after the kill: no recovery.
        assert_eq!(gap(&successes[..3], at(30), at(5_000)), None);
        // Recovery after the window (or the next kill) does not count.
        assert_eq!(gap(&successes, at(30), at(600)), None);
        let gaps =
            [Some(Duration::from_millis(300)), Some(Duration::from_millis(100)), Some(Duration::from_millis(900))];
        assert_eq!(median_max(&gaps), (Some(300.0), Some(900.0)));
        assert_eq!(median_max(&[None, Some(Duration::ZERO)]), (None, None));
    }
}
