//! `mooncake bench watch`: object events (docs/EVENTS.md) on a 3-master,
//! 1-store cluster, with 0, 1 and 16 watchers of the put keys:
//!
//! 1. **latency**: one client puts 4 KiB objects one after another; each
//!    put's latency (the commit a writer waits for) and, per watcher, how
//!    long after the put's acknowledgement the watcher had its event
//!    (negative: before it — the leader applies, and so emits, before its
//!    answer reaches the writer);
//! 2. **burst**: 4 writers put batches of 64 objects of 1 KiB as fast as
//!    they can; each watcher's delivery rate is the events it got over the
//!    time from the burst's start to its last event.
//!
//! The same run without watchers is the baseline: the ratio of the put
//! latency with 16 watchers to it is what watching costs the writers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_client::{Client, MasterClient, MasterClientConfig, PutOptions, WatchItem, Watcher};
use mooncake_transfer::Protocol;

use crate::cluster::{Cluster, Spec};
use crate::report::{Cell, Section, Table, cols};
use crate::stats::Samples;
use crate::{Ctx, bound_row, targets_table};

/// Watchers per round: none (the baseline), one, many.
const WATCHERS: [usize; 3] = [0, 1, 16];
const LATENCY_OBJECT_BYTES: usize = 4 << 10;
const BURST_OBJECT_BYTES: usize = 1 << 10;
const BURST_WRITERS: usize = 4;
const BURST_BATCH: usize = 64;
/// How long a watcher may take to get every event of a round.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// What one watcher saw: when each key's stored event arrived.
type Arrivals = HashMap<String, Instant>;

/// Starts `n` watchers of `prefix` that return once they saw `expect` events.
async fn watchers(
    cluster: &Cluster,
    n: usize,
    prefix: &str,
    expect: usize,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<Arrivals>>> {
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let master = Arc::new(MasterClient::new(MasterClientConfig::new(cluster.master_addrs()))?);
        let mut w = Watcher::new(master, prefix, 0);
        w.pin_start().await?;
        tasks.push(tokio::spawn(async move {
            let mut seen = Arrivals::with_capacity(expect);
            let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
            while seen.len() < expect {
                match tokio::time::timeout_at(deadline, w.next()).await {
                    Ok(Ok(WatchItem::Revision { events, .. })) => {
                        let at = Instant::now();
                        seen.extend(events.into_iter().map(|e| (e.key, at)));
                    }
                    Ok(Ok(WatchItem::Progress { .. })) => {}
                    Ok(Err(_)) | Err(_) => break,
                }
            }
            seen
        }));
    }
    Ok(tasks)
}

fn quantile(sorted: &[f64], p: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

/// One round's numbers.
struct Round {
    watchers: usize,
    puts: Samples,
    /// Event arrival minus the put's acknowledgement, ms, over every watcher.
    delivery_ms: Vec<f64>,
    /// Events a watcher did not get.
    missed: u64,
    /// Burst: events per second per watcher (mean) and in total.
    burst_per_watcher: Option<f64>,
    burst_total: Option<f64>,
}

async fn latency_phase(
    client: &Client,
    cluster: &Cluster,
    n_watchers: usize,
    puts: usize,
    prefix: &str,
) -> anyhow::Result<Round> {
    let tasks = watchers(cluster, n_watchers, prefix, puts).await?;
    let opts = PutOptions { replicas: 1, ..Default::default() };
    let value = vec![7u8; LATENCY_OBJECT_BYTES];
    let mut samples = Samples::default();
    let mut acked: HashMap<String, Instant> = HashMap::with_capacity(puts);
    let start = Instant::now();
    for i in 0..puts {
        let key = format!("{prefix}{i}");
        let t = Instant::now();
        match client.put(&key, &value, &opts).await {
            Ok(_) => {
                samples.ok(t.elapsed(), LATENCY_OBJECT_BYTES as u64, 1);
                acked.insert(key, Instant::now());
            }
            Err(e) => samples.failed(e),
        }
    }
    samples.wall = start.elapsed();
    let mut delivery_ms = Vec::new();
    let mut missed = 0;
    for t in tasks {
        let seen = t.await?;
        for (key, at) in &acked {
            match seen.get(key) {
                Some(got) => delivery_ms.push(signed_ms(*got, *at)),
                None => missed += 1,
            }
        }
    }
    delivery_ms.sort_by(f64::total_cmp);
    Ok(Round { watchers: n_watchers, puts: samples, delivery_ms, missed, burst_per_watcher: None, burst_total: None })
}

/// `a - b` in milliseconds, negative when `a` came first.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    match a.checked_duration_since(b) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(b.duration_since(a).as_secs_f64() * 1e3),
    }
}

async fn burst_phase(
    cluster: &Cluster,
    ctx: &Ctx,
    round: &mut Round,
    rounds: usize,
    prefix: &str,
) -> anyhow::Result<u64> {
    let expect = BURST_WRITERS * BURST_BATCH * rounds;
    let tasks = watchers(cluster, round.watchers, prefix, expect).await?;
    let start = Instant::now();
    let mut writers = Vec::new();
    for w in 0..BURST_WRITERS {
        let client = cluster.client(Protocol::Tcp, &ctx.tcp).await?;
        let prefix = prefix.to_string();
        writers.push(tokio::spawn(async move {
            let value = vec![3u8; BURST_OBJECT_BYTES];
            let opts = PutOptions { replicas: 1, ..Default::default() };
            let mut failed = 0u64;
            for r in 0..rounds {
                let keys: Vec<String> = (0..BURST_BATCH).map(|i| format!("{prefix}{w}-{r}-{i}")).collect();
                let items: Vec<(&str, &[u8])> = keys.iter().map(|k| (k.as_str(), value.as_slice())).collect();
                failed += client.put_batch(&items, &opts).await.iter().filter(|r| r.is_err()).count() as u64;
            }
            client.close().await;
            failed
        }));
    }
    let mut failed = 0;
    for w in writers {
        failed += w.await?;
    }
    let mut rates = Vec::new();
    for t in tasks {
        let seen = t.await?;
        if let Some(last) = seen.values().max() {
            rates.push(seen.len() as f64 / last.duration_since(start).as_secs_f64().max(1e-6));
        }
        round.missed += (expect - seen.len().min(expect)) as u64;
    }
    if !rates.is_empty() {
        round.burst_per_watcher = Some(rates.iter().sum::<f64>() / rates.len() as f64);
        round.burst_total = Some(rates.iter().sum());
    }
    Ok(failed)
}

pub async fn run(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let (puts, burst_rounds) = if ctx.quick { (200, 4) } else { (1_000, 20) };
    ctx.progress.step("watch: starting 3 masters and 1 store node");
    let spec = Spec { masters: 3, stores: 1, segment_size: "512MiB", prefault: false };
    let cluster = Cluster::start(&ctx.exe, spec, &ctx.master_args).await?;
    let client = cluster.client(Protocol::Tcp, &ctx.tcp).await?;
    let mut rounds = Vec::new();
    let mut failed_ops = 0;
    for n in WATCHERS {
        ctx.progress.step(&format!("watch: {puts} puts one by one, {n} watchers"));
        let mut round = latency_phase(&client, &cluster, n, puts, &format!("w{n}/lat/")).await?;
        failed_ops += round.puts.errors;
        if n > 0 {
            ctx.progress.step(&format!("watch: burst of {BURST_WRITERS} writers, {n} watchers"));
            failed_ops += burst_phase(&cluster, ctx, &mut round, burst_rounds, &format!("w{n}/burst/")).await?;
        }
        rounds.push(round);
    }
    client.close().await;
    Ok(section(&rounds, failed_ops))
}

fn section(rounds: &[Round], failed_ops: u64) -> Section {
    let mut t = Table::new(
        "object events: commit latency with and without watchers, delivery latency and rate",
        cols(&[
            ("watchers", "watchers"),
            ("put_p50_ms", "put p50 ms"),
            ("put_p99_ms", "put p99 ms"),
            ("delivery_p50_ms", "ack→event p50 ms"),
            ("delivery_p99_ms", "ack→event p99 ms"),
            ("missed", "missed"),
            ("events_per_s_per_watcher", "events/s/watcher"),
            ("events_per_s_total", "events/s total"),
        ]),
    );
    for r in rounds {
        t.row(vec![
            Cell::text(r.watchers.to_string()),
            Cell::opt(Some(r.puts.p50_ms()), 3),
            Cell::opt(Some(r.puts.p99_ms()), 3),
            Cell::opt(quantile(&r.delivery_ms, 0.5), 3),
            Cell::opt(quantile(&r.delivery_ms, 0.99), 3),
            Cell::text(r.missed.to_string()),
            Cell::opt(r.burst_per_watcher, 0),
            Cell::opt(r.burst_total, 0),
        ]);
    }
    let base = rounds.first().map(|r| r.puts.p50_ms());
    let many = rounds.last().map(|r| r.puts.p50_ms());
    let mut targets = targets_table();
    bound_row(&mut targets, "put p50 with 16 watchers / without", many.zip(base).map(|(m, b)| m / b.max(1e-9)), 2);
    let mut s = Section::new("watch");
    s.tables = vec![t, targets];
    s.failed_ops = failed_ops + rounds.iter().map(|r| r.missed).sum::<u64>();
    s.note("ack→event is signed: negative when the watcher had the event before the writer had its answer");
    s
}
