//! `mooncake bench trace`: the store judged as a cache, on a real request
//! trace (`../shared/traces/` format). N clients (inference instances) each
//! replay every N-th request of the trace against a 3-master cluster with
//! one store node of the given segment size: look up the longest stored
//! prefix of the request's blocks, load it (every byte checked against the
//! block's id), store the rest ([`replay`]). The same requests go through
//! upstream Mooncake 0.3.13 in the same run ([`crate::baseline::upstream`]:
//! its master, a store process with a segment of the same size, one Python
//! client process per client), and through an exact LRU of the same
//! capacity and a cache of unbounded size ([`bounds`]), the hit rates a
//! cache of that memory can reach.
//!
//! Each mode (batch calls, as the frameworks' connectors use, and one call
//! per block) starts from an empty cache: a cluster of its own for ours,
//! upstream's `remove_all` between its runs. Any failed operation or
//! corrupt read of ours fails the run.

pub mod blocks;
pub mod bounds;
pub mod file;
pub mod outcome;
pub mod replay;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_transfer::Protocol;

use self::bounds::Hits;
use self::file::Request;
use self::outcome::Outcome;
use self::replay::Shape;
use crate::baseline::upstream::{self, Upstream};
use crate::cluster::{Cluster, Spec};
use crate::report::{Cell, Section, Table, cols};
use crate::stats::ratio;
use crate::{Ctx, bound_row, target_row, targets_table};

/// The trace `--trace` defaults to: the repository's sibling `shared/`
/// folder, where CI and the developers' machines have it.
pub const DEFAULT_TRACE: &str = "../shared/traces/conversation_trace.jsonl";

/// Clients at most (upstream runs one Python process each).
pub const CLIENTS_MAX: usize = upstream::CLIENTS_MAX;
/// Bytes of one block at most (a request's blocks are buffered whole).
pub const BLOCK_BYTES_MAX: u64 = 64 << 20;
/// One client's replay may take this long at most, ours or upstream's.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(1800);

/// How a replay loads and stores a request's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One batch call for the loads and one for the stores.
    Batch,
    /// One call per block.
    Single,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Batch => "batch",
            Mode::Single => "single",
        }
    }
}

/// What one run replays, and on what.
#[derive(Clone, Debug)]
pub struct Plan {
    pub trace: PathBuf,
    pub requests: usize,
    pub clients: usize,
    pub block_bytes: u64,
    pub segment_bytes: u64,
    /// Trace time compression (0: as fast as the cluster answers).
    pub speedup: f64,
    pub modes: Vec<Mode>,
}

impl Plan {
    /// The plan of `--quick` (a few hundred requests on a 64 MiB segment,
    /// which they overfill several times) or of a full run, with what the
    /// command line set instead.
    pub fn new(quick: bool) -> Plan {
        let (requests, clients, segment_bytes) = if quick { (400, 2, 64 << 20) } else { (3_000, 4, 256 << 20) };
        Plan {
            trace: PathBuf::from(DEFAULT_TRACE),
            requests,
            clients,
            block_bytes: 32 << 10,
            segment_bytes,
            speedup: 0.0,
            modes: vec![Mode::Batch, Mode::Single],
        }
    }

    /// Refuses impossible plans, saying which value to change.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.requests > 0, "--requests must be at least 1");
        anyhow::ensure!((1..=CLIENTS_MAX).contains(&self.clients), "--clients must be 1 to {CLIENTS_MAX}");
        anyhow::ensure!(
            (16..=BLOCK_BYTES_MAX).contains(&self.block_bytes),
            "--block-bytes must be 16 bytes to {} MiB",
            BLOCK_BYTES_MAX >> 20
        );
        anyhow::ensure!(
            self.segment_bytes >= 16 * self.block_bytes,
            "--segment-size {} holds fewer than 16 blocks of {} bytes: give it more memory",
            self.segment_bytes,
            self.block_bytes
        );
        anyhow::ensure!(self.speedup.is_finite() && self.speedup >= 0.0, "--speedup must be 0 or more");
        Ok(())
    }

    /// Blocks the segment holds: the capacity of the LRU bound.
    fn capacity_blocks(&self) -> usize {
        (self.segment_bytes / self.block_bytes) as usize
    }

    fn shape(&self, mode: Mode) -> Shape {
        Shape { block_bytes: self.block_bytes as usize, speedup: self.speedup, mode }
    }
}

/// How full the segment is while a replay runs: the `mooncake_used_bytes`
/// of a master over its `mooncake_capacity_bytes`, every
/// [`Occupancy::EVERY`], on a thread of its own. A cache serves hits from
/// what it holds, so a replay below its LRU bound shows here whether
/// eviction kept room idle.
struct Occupancy {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<f64>>,
}

impl Occupancy {
    const EVERY: Duration = Duration::from_millis(100);
    /// Samples count once the segment was this full (the cache's steady state).
    const FULL_FROM: f64 = 0.9;

    fn sample(http: String) -> Occupancy {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(text) = crate::metrics::scrape(&http) {
                    let used = crate::metrics::value(&text, "mooncake_used_bytes");
                    let capacity = crate::metrics::value(&text, "mooncake_capacity_bytes");
                    if let (Some(u), Some(c)) = (used, capacity.filter(|c| *c > 0.0)) {
                        samples.push(u / c);
                    }
                }
                std::thread::sleep(Self::EVERY);
            }
            samples
        });
        Occupancy { stop, thread }
    }

    /// The mean share of the segment in use, in %, from the first sample at
    /// [`Occupancy::FULL_FROM`] on; `None` if it never got that full.
    fn finish(self) -> Option<f64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let samples = self.thread.join().unwrap_or_default();
        let full: Vec<f64> = samples.into_iter().skip_while(|s| *s < Self::FULL_FROM).collect();
        (!full.is_empty()).then(|| full.iter().sum::<f64>() / full.len() as f64 * 100.0)
    }
}

/// The leader's calls a replay makes, whose mean handling time the trace
/// table shows (where a request's time goes on the master).
const LEADER_CALLS: [&str; 8] = [
    "BatchProbeKey",
    "BatchGetReplicaList",
    "GetReplicaList",
    "ReserveChunk",
    "BatchPutStart",
    "PutStart",
    "BatchPutEnd",
    "PutEnd",
];

/// The leader's mean handling time (ms) and count of each of
/// [`LEADER_CALLS`], and of its commits (`commit`), from its `/metrics`;
/// the leader is the master with `mooncake_raft_is_leader 1`.
fn leader_rpcs(cluster: &Cluster) -> Vec<(String, f64, f64)> {
    let leader = cluster.master_ids().into_iter().find_map(|id| {
        let node = cluster.node(mooncake_local_cluster::Role::Master, id)?;
        let text = crate::metrics::scrape(&node.http).ok()?;
        (crate::metrics::value(&text, "mooncake_raft_is_leader") == Some(1.0)).then_some(text)
    });
    let Some(text) = leader else { return Vec::new() };
    let mut out: Vec<(String, f64, f64)> = LEADER_CALLS
        .iter()
        .filter_map(|m| {
            let (ms, n) = crate::metrics::histogram_mean_ms(&text, "mooncake_rpc_duration_seconds", Some(m))?;
            Some((m.to_string(), ms, n))
        })
        .collect();
    if let Some((ms, n)) = crate::metrics::histogram_mean_ms(&text, "mooncake_commit_seconds", None) {
        out.push(("commit".into(), ms, n));
    }
    out
}

/// Client `w`'s share of `requests` of `clients`: every `clients`-th, from `w`.
fn shares(requests: &[Request], clients: usize) -> Vec<Vec<&Request>> {
    (0..clients).map(|w| requests.iter().skip(w).step_by(clients).collect()).collect()
}

/// One measured replay.
struct Run {
    system: String,
    mode: Mode,
    outcome: Outcome,
}

pub async fn run(ctx: &mut Ctx, plan: &Plan) -> anyhow::Result<Section> {
    plan.validate()?;
    let requests = file::load(&plan.trace, plan.requests)?;
    let mut section = Section::new("trace");
    ctx.progress.step(&format!("trace: {} requests of {}; the LRU bound", requests.len(), plan.trace.display()));
    let lru = bounds::replay(&requests, Some(plan.capacity_blocks()));
    let unbounded = bounds::replay(&requests, None);
    // Upstream's first touch of its segment is paid once, before anything
    // is measured (ours are pre-faulted).
    let warm = plan.segment_bytes / 4 * 3 / (4 << 20) * (4 << 20);
    let mut up = upstream::start_for(ctx, &mut section, plan.segment_bytes, warm).await;
    let version = upstream::Venv::get(ctx).await.map(|v| v.version).unwrap_or_default();
    let mut runs = Vec::new();
    for &mode in &plan.modes {
        let outcome = ours(ctx, plan, &requests, mode).await?;
        section.failed_ops += outcome.failed + outcome.corrupt;
        note_failures(ctx, &mut section, "mooncake-rs", mode, &outcome);
        runs.push(Run { system: "mooncake-rs".into(), mode, outcome });
        if let Some(outcome) = upstream_replay(ctx, &mut section, &mut up, plan, &requests, mode).await {
            runs.push(Run { system: format!("upstream {version}"), mode, outcome });
        }
    }
    section.tables.push(goals(&runs, lru));
    section.tables.push(results(&runs, lru, unbounded));
    section.tables.push(leader_table(&runs));
    section.note(format!(
        "{} requests ({} block references) of {}; {} clients; blocks of {} bytes; one segment of {} MiB ({} blocks); {}",
        requests.len(),
        lru.refs,
        plan.trace.display(),
        plan.clients,
        plan.block_bytes,
        plan.segment_bytes >> 20,
        plan.capacity_blocks(),
        match plan.speedup {
            0.0 => "closed loop (each client's next request when its last ended)".to_string(),
            x => format!("trace time compressed {x}x"),
        }
    ));
    section.note(
        "hit % = blocks loaded with the right bytes as the stored prefix of their request, over all block \
         references; lookups: ours a lease-free batch probe, upstream's batch_is_exist; lost = found by the lookup, \
         gone at the load (a miss); full % = the mean share of the segment holding objects once it first was 90 % \
         full (ours: a master's metrics every 100 ms)",
    );
    Ok(section)
}

/// Says (on the progress line and in the section's notes) what of `who`'s
/// replay of `mode` failed or read corrupt bytes, if anything did.
fn note_failures(ctx: &mut Ctx, section: &mut Section, who: &str, mode: Mode, o: &Outcome) {
    if o.failed + o.corrupt == 0 {
        return;
    }
    let msg = format!(
        "{who} {}: {} failed, {} corrupt; first: {}",
        mode.name(),
        o.failed,
        o.corrupt,
        o.error_texts.join("; ")
    );
    ctx.progress.say(&format!("trace: {msg}"));
    section.note(msg);
}

/// Our replay of `mode` on a cluster of its own (an empty cache).
async fn ours(ctx: &mut Ctx, plan: &Plan, requests: &[Request], mode: Mode) -> anyhow::Result<Outcome> {
    ctx.progress.step(&format!(
        "trace: mooncake-rs, {} calls: 3 masters, 1 store node of {} MiB, {} clients",
        mode.name(),
        plan.segment_bytes >> 20,
        plan.clients
    ));
    let segment_size = plan.segment_bytes.to_string();
    let spec = Spec { masters: 3, stores: 1, segment_size: &segment_size, prefault: true };
    let cluster = Cluster::start(&ctx.exe, spec, &ctx.master_args).await?;
    let mut clients = Vec::with_capacity(plan.clients);
    for _ in 0..plan.clients {
        clients.push(cluster.client(Protocol::Tcp, &ctx.tcp).await?);
    }
    let shares = shares(requests, plan.clients);
    let shape = plan.shape(mode);
    let http = cluster.node(mooncake_local_cluster::Role::Master, 1).map(|n| n.http.clone()).unwrap_or_default();
    let sampler = Occupancy::sample(http);
    let start = Instant::now();
    let replays = clients.iter().zip(&shares).map(|(c, share)| replay::replay(c, share, shape, start));
    let all = tokio::time::timeout(REPLAY_TIMEOUT, futures::future::join_all(replays))
        .await
        .with_context(|| format!("the replay took over {REPLAY_TIMEOUT:?}"))?;
    let mut total = Outcome::default();
    for o in all {
        total.merge(o);
    }
    total.full_pct = sampler.finish();
    total.leader_ms = leader_rpcs(&cluster);
    for c in clients {
        c.close().await;
    }
    Ok(total)
}

/// Upstream's replay of `mode` from an empty cache, if it runs; a failure
/// to run it is noted and ends the baseline.
async fn upstream_replay(
    ctx: &mut Ctx,
    section: &mut Section,
    up: &mut Option<Upstream>,
    plan: &Plan,
    requests: &[Request],
    mode: Mode,
) -> Option<Outcome> {
    let u = up.as_mut()?;
    ctx.progress.step(&format!("trace: upstream, {} calls, {} client processes", mode.name(), plan.clients));
    let shares = shares(requests, plan.clients);
    let replayed = async {
        u.clear().await?;
        u.trace(&shares, plan.shape(mode), REPLAY_TIMEOUT).await
    };
    match replayed.await {
        Ok(all) => {
            let mut total = Outcome::default();
            for o in all {
                total.merge(o);
            }
            note_failures(ctx, section, "upstream", mode, &total);
            Some(total)
        }
        Err(e) => {
            let msg = format!("upstream baseline stopped at its {} replay: {e:#}", mode.name());
            ctx.progress.say(&format!("trace: {msg}"));
            section.note(msg);
            *up = None;
            None
        }
    }
}

fn find(runs: &[Run], ours: bool, mode: Mode) -> Option<&Outcome> {
    runs.iter().find(|r| (r.system == "mooncake-rs") == ours && r.mode == mode).map(|r| &r.outcome)
}

/// The goals, each measured in this run.
fn goals(runs: &[Run], lru: Hits) -> Table {
    let mut t = targets_table();
    bound_row(&mut t, "exact LRU hit %", Some(lru.rate() * 100.0), 2);
    for mode in [Mode::Batch, Mode::Single] {
        let (Some(o), up) = (find(runs, true, mode), find(runs, false, mode)) else { continue };
        let m = mode.name();
        target_row(&mut t, &format!("{m}: failed + corrupt"), Some((o.failed + o.corrupt) as f64), 0.0, false, 0);
        target_row(
            &mut t,
            &format!("{m}: hit rate / exact LRU"),
            ratio(o.hits().rate(), Some(lru.rate())),
            0.95,
            true,
            2,
        );
        target_row(
            &mut t,
            &format!("{m}: hit rate / upstream"),
            ratio(o.hits().rate(), up.map(|u| u.hits().rate())),
            1.0,
            true,
            2,
        );
        let goal = if mode == Mode::Batch { 1.0 } else { 0.4 };
        target_row(
            &mut t,
            &format!("{m}: requests/s / upstream"),
            ratio(o.requests_per_s(), up.map(Outcome::requests_per_s)),
            goal,
            true,
            2,
        );
    }
    t
}

/// Every replay next to the bounds.
fn results(runs: &[Run], lru: Hits, unbounded: Hits) -> Table {
    let mut t = Table::new(
        "trace replay",
        cols(&[
            ("system", "system"),
            ("mode", "mode"),
            ("requests", "requests"),
            ("hit_pct", "hit %"),
            ("of_lru", "/LRU"),
            ("stored", "stored"),
            ("failed", "failed"),
            ("corrupt", "corrupt"),
            ("lost", "lost"),
            ("full_pct", "full %"),
            ("requests_per_s", "req/s"),
            ("load_p50_ms", "load p50"),
            ("load_p99_ms", "load p99"),
            ("store_p50_ms", "store p50"),
            ("store_p99_ms", "store p99"),
        ]),
    );
    for r in runs {
        let o = &r.outcome;
        let (load, store) = o.samples();
        let ms = |s: &crate::stats::Samples, p50: bool| match s.ops() {
            0 => Cell::Missing,
            _ => Cell::Num(if p50 { s.p50_ms() } else { s.p99_ms() }, 2),
        };
        t.row(vec![
            Cell::text(&r.system),
            Cell::text(r.mode.name()),
            Cell::Int(o.requests),
            Cell::Num(o.hits().rate() * 100.0, 2),
            Cell::opt(ratio(o.hits().rate(), Some(lru.rate())), 2),
            Cell::Int(o.stored),
            Cell::Int(o.failed),
            Cell::Int(o.corrupt),
            Cell::Int(o.lost_after_lookup),
            Cell::opt(o.full_pct, 1),
            Cell::Num(o.requests_per_s(), 1),
            ms(&load, true),
            ms(&load, false),
            ms(&store, true),
            ms(&store, false),
        ]);
    }
    for (name, h) in [("exact LRU, same capacity", lru), ("unbounded cache", unbounded)] {
        let mut row = vec![Cell::text(name), Cell::text("-"), Cell::Missing, Cell::Num(h.rate() * 100.0, 2)];
        row.push(Cell::opt(ratio(h.rate(), Some(lru.rate())), 2));
        row.extend(std::iter::repeat_n(Cell::Missing, 10));
        t.row(row);
    }
    t
}

/// Where our requests' time went on the leader: per call, its mean
/// handling time and how many were made, per mode.
fn leader_table(runs: &[Run]) -> Table {
    let mut t = Table::new(
        "mooncake-rs: the leader's calls during each replay (mean ms as handled, count)",
        cols(&[("mode", "mode"), ("call", "call"), ("mean_ms", "mean ms"), ("count", "count")]),
    );
    for r in runs.iter().filter(|r| r.system == "mooncake-rs") {
        for (call, ms, n) in &r.outcome.leader_ms {
            t.row(vec![Cell::text(r.mode.name()), Cell::text(call), Cell::Num(*ms, 3), Cell::Int(*n as u64)]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_gets_every_nth_request_in_order() {
        let reqs: Vec<Request> = (0..5).map(|i| Request { timestamp_ms: i, blocks: vec![i] }).collect();
        let s = shares(&reqs, 2);
        let ts = |w: usize| s[w].iter().map(|r| r.timestamp_ms).collect::<Vec<_>>();
        assert_eq!((ts(0), ts(1)), (vec![0, 2, 4], vec![1, 3]));
    }

    #[test]
    fn impossible_plans_name_the_flag() {
        let mut p = Plan::new(true);
        p.validate().unwrap();
        p.segment_bytes = p.block_bytes;
        assert!(p.validate().unwrap_err().to_string().contains("--segment-size"));
        let mut p = Plan::new(false);
        p.clients = 0;
        assert!(p.validate().unwrap_err().to_string().contains("--clients"));
    }
}
