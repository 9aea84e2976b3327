//! `mooncake bench small`: many small objects, the shape of Mooncake's own
//! published store benchmark: 4 KiB values in batches of 32 keys through
//! `put_batch` / `get_batch` over tcp, at 1, 4 and 16 concurrent clients
//! (`--quick`: 1), against 3 masters and 2 store nodes. Baselines: a Redis
//! started by the bench (persistence off) with MSET/MGET of the same
//! batches at the same concurrency, one connection per client; and upstream
//! Mooncake ([`baseline::upstream`], one store process, one client process
//! per client, TCP) with `batch_put_from` / `batch_get_into` of the same
//! batches from registered buffers. Reported in keys per second (KV/s) and
//! per-batch latency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, PutOptions};
use mooncake_transfer::Protocol;
use tokio::task::JoinHandle;

use crate::baseline::redis::{self, RedisServer, Resp};
use crate::baseline::upstream::{self, Load, Upstream};
use crate::cluster::{Cluster, Spec};
use crate::data::pattern;
use crate::report::{Cell, Section, Table, cols};
use crate::stats::{Budget, Samples, ratio};
use crate::{Ctx, target_row, targets_table};

const LEVELS_FULL: [usize; 3] = [1, 4, 16];
const LEVELS_QUICK: [usize; 1] = [1];
/// Keys per batch.
pub const BATCH_KEYS: usize = 32;
/// Bytes per value.
pub const VALUE_BYTES: usize = 4096;
/// Value bytes kept stored at once over all clients (bounds segment use).
const WORKING_SET_MAX_BYTES: usize = 512 << 20;
/// Batches of one client in one phase, at most (time ends phases first).
const CLIENT_BATCHES_MAX: u64 = 100_000;
const PHASE_TIME: Duration = Duration::from_secs(3);
const QUICK_PHASE_TIME: Duration = Duration::from_millis(1_500);

/// Put and get samples of one system at one concurrency.
struct PutGet {
    put: Samples,
    get: Samples,
}

pub async fn run(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let levels: &[usize] = if ctx.quick { &LEVELS_QUICK } else { &LEVELS_FULL };
    let time = if ctx.quick { QUICK_PHASE_TIME } else { PHASE_TIME };
    let mut section = Section::new("small");
    ctx.progress.step("small: starting 3 masters and 2 store nodes");
    let (segment_size, segment_bytes) = if ctx.quick { ("768MiB", 768 << 20) } else { ("1GiB", 1 << 30) };
    let cluster =
        Cluster::start(&ctx.exe, Spec { masters: 3, stores: 2, segment_size, prefault: true }, &ctx.master_args)
            .await?;
    let redis = start_redis(ctx, &mut section).await;
    let mut up = upstream::start_for(ctx, &mut section, segment_bytes, upstream::WARM_BYTES).await;
    let mut table = results_table();
    for &conc in levels {
        let slots = (WORKING_SET_MAX_BYTES / (conc * BATCH_KEYS * VALUE_BYTES)) as u64;
        let budget = Budget { ops_min: 1, ops_max: CLIENT_BATCHES_MAX.min(slots.max(1)), time };
        ctx.progress.step(&format!("small: mooncake put_batch/get_batch x{conc}"));
        let mc = mooncake(&cluster, &ctx.tcp, conc, budget).await?;
        for (op, s) in [("put_batch", &mc.put), ("get_batch", &mc.get)] {
            if let Some(e) = s.error_texts.first() {
                ctx.progress.say(&format!("small: {op} x{conc}: {} keys failed, first: {e}", s.errors));
            }
            section.failed_ops += s.errors;
        }
        let rd = match &redis {
            Some(r) => {
                ctx.progress.step(&format!("small: redis MSET/MGET x{conc}"));
                redis_load(r, conc, budget).await.map_err(|e| section.note(format!("redis x{conc}: {e:#}"))).ok()
            }
            None => None,
        };
        let load = Load { prefix: format!("bench/small/{conc}"), size: VALUE_BYTES, batch: BATCH_KEYS, budget };
        let what = format!("batch_put_from/batch_get_into x{conc}");
        let upm = upstream::measure(ctx, &mut section, &mut up, &what, async |u: &mut Upstream| {
            u.put_get((upstream::Op::BatchPut, upstream::Op::BatchGet), conc, &load, budget.ops_max).await
        })
        .await
        .map(|[put, get]| PutGet { put, get });
        add_rows(&mut table, conc, &mc, rd.as_ref(), upm.as_ref());
    }
    section.tables.push(targets(&table));
    section.tables.push(table);
    section.note(format!(
        "one batch = {BATCH_KEYS} keys of {VALUE_BYTES} bytes; KV/s = keys per second over the phase; latency per batch"
    ));
    section.note("up = upstream Mooncake: batch_put_from / batch_get_into; /up = our KV/s over its");
    Ok(section)
}

async fn start_redis(ctx: &mut Ctx, section: &mut Section) -> Option<RedisServer> {
    let Some(bin) = redis::find() else {
        ctx.progress.say(&format!("small: {}", redis::INSTALL_HINT));
        section.note(redis::INSTALL_HINT);
        return None;
    };
    ctx.progress.step("small: starting redis-server");
    match RedisServer::start(&bin).await {
        Ok(r) => Some(r),
        Err(e) => {
            let msg = format!("redis baseline skipped: {e:#}");
            ctx.progress.say(&format!("small: {msg}"));
            section.note(msg);
            None
        }
    }
}

fn batch_keys(conc: usize, worker: usize, batch: u64) -> Vec<String> {
    (0..BATCH_KEYS).map(|k| format!("bench/small/{conc}/{worker}/{batch}/{k}")).collect()
}

/// Mooncake: `conc` clients put batches, then get what they put, then remove all.
async fn mooncake(
    cluster: &Cluster,
    tcp: &mooncake_transfer::TcpConfig,
    conc: usize,
    budget: Budget,
) -> anyhow::Result<PutGet> {
    let mut clients = Vec::new();
    for _ in 0..conc {
        clients.push(Arc::new(cluster.client(Protocol::Tcp, tcp).await?));
    }
    let start = Instant::now();
    let handles: Vec<JoinHandle<(Samples, u64)>> =
        clients.iter().enumerate().map(|(w, c)| tokio::spawn(put_worker(c.clone(), conc, w, budget))).collect();
    let (mut put, mut stored) = (Samples::default(), Vec::new());
    for h in handles {
        let (s, n) = h.await.context("put_batch worker")?;
        put.merge(s);
        stored.push(n);
    }
    put.wall = start.elapsed();
    let start = Instant::now();
    let handles: Vec<JoinHandle<Samples>> = clients
        .iter()
        .zip(stored)
        .enumerate()
        .map(|(w, (c, n))| tokio::spawn(get_worker(c.clone(), conc, w, n, budget)))
        .collect();
    let mut get = Samples::default();
    for h in handles {
        get.merge(h.await.context("get_batch worker")?);
    }
    get.wall = start.elapsed();
    clients[0].remove_all(true).await.context("removing the small objects")?;
    for c in clients {
        if let Ok(c) = Arc::try_unwrap(c) {
            c.close().await;
        }
    }
    Ok(PutGet { put, get })
}

/// Puts batches; returns the samples and how many batches were started.
async fn put_worker(client: Arc<Client>, conc: usize, w: usize, budget: Budget) -> (Samples, u64) {
    let value = pattern(VALUE_BYTES, w as u64);
    let opts = PutOptions { replicas: 1, ..Default::default() };
    let mut s = Samples::default();
    let bound = budget.start();
    let mut b = 0;
    while bound.go_on(b) {
        let keys = batch_keys(conc, w, b);
        let items: Vec<(&str, &[u8])> = keys.iter().map(|k| (k.as_str(), value.as_slice())).collect();
        let t = Instant::now();
        let results = client.put_batch(&items, &opts).await;
        let latency = t.elapsed();
        record_batch(&mut s, latency, results.into_iter().map(|r| r.map(|_| VALUE_BYTES)));
        b += 1;
    }
    (s, b)
}

async fn get_worker(client: Arc<Client>, conc: usize, w: usize, batches: u64, budget: Budget) -> Samples {
    let mut s = Samples::default();
    if batches == 0 {
        return s;
    }
    let bound = budget.start();
    let mut i = 0;
    while bound.go_on(i) {
        let keys = batch_keys(conc, w, i % batches);
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let t = Instant::now();
        let results = client.get_batch(&refs).await;
        let latency = t.elapsed();
        record_batch(&mut s, latency, results.into_iter().map(|r| r.map(|v| v.len())));
        i += 1;
    }
    s
}

/// One batch: a latency sample for the keys that worked, an error per key that did not.
fn record_batch<E: std::fmt::Display>(
    s: &mut Samples,
    latency: Duration,
    results: impl Iterator<Item = Result<usize, E>>,
) {
    let (mut bytes, mut items) = (0u64, 0u64);
    for r in results {
        match r {
            Ok(n) if n == VALUE_BYTES => {
                bytes += n as u64;
                items += 1;
            }
            Ok(n) => s.failed(format!("{n} bytes, expected {VALUE_BYTES}")),
            Err(e) => s.failed(e),
        }
    }
    if items > 0 {
        s.ok(latency, bytes, items);
    }
}

/// Redis: `conc` connections MSET batches, then MGET them, then FLUSHALL.
async fn redis_load(server: &RedisServer, conc: usize, budget: Budget) -> anyhow::Result<PutGet> {
    let addr = server.addr.clone();
    tokio::task::spawn_blocking(move || {
        let put = redis_phase(&addr, conc, budget, None)?;
        let batches: Vec<u64> = vec![put.1; conc];
        let get = redis_phase(&addr, conc, budget, Some(&batches))?;
        Resp::connect(&addr)?.command(&[b"FLUSHALL"])?;
        Ok(PutGet { put: put.0, get: get.0 })
    })
    .await
    .context("redis load thread")?
}

/// One phase on `conc` threads: MSET when `stored` is `None`, else MGET of
/// the first `stored[w]` batches. Returns samples and the fewest batches a thread did.
fn redis_phase(addr: &str, conc: usize, budget: Budget, stored: Option<&[u64]>) -> anyhow::Result<(Samples, u64)> {
    let start = Instant::now();
    let results: Vec<anyhow::Result<(Samples, u64)>> = std::thread::scope(|sc| {
        let handles: Vec<_> =
            (0..conc).map(|w| sc.spawn(move || redis_worker(addr, conc, w, budget, stored.map(|s| s[w])))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("redis thread panicked"))))
            .collect()
    });
    let mut total = Samples::default();
    let mut fewest = u64::MAX;
    for r in results {
        let (s, n) = r?;
        total.merge(s);
        fewest = fewest.min(n);
    }
    total.wall = start.elapsed();
    Ok((total, if fewest == u64::MAX { 0 } else { fewest }))
}

fn redis_worker(
    addr: &str,
    conc: usize,
    w: usize,
    budget: Budget,
    stored: Option<u64>,
) -> anyhow::Result<(Samples, u64)> {
    let mut c = Resp::connect(addr)?;
    let value = pattern(VALUE_BYTES, w as u64);
    let mut s = Samples::default();
    if stored == Some(0) {
        return Ok((s, 0));
    }
    let bound = budget.start();
    let mut b = 0;
    while bound.go_on(b) {
        let keys = batch_keys(conc, w, stored.map_or(b, |n| b % n));
        let t = Instant::now();
        match stored {
            None => c.mset(&keys, &value).map(|()| (BATCH_KEYS, (BATCH_KEYS * VALUE_BYTES) as u64)),
            Some(_) => c.mget(&keys),
        }
        .map(|(items, bytes)| s.ok(t.elapsed(), bytes, items as u64))
        .unwrap_or_else(|e| s.failed(e));
        b += 1;
    }
    Ok((s, b))
}

fn results_table() -> Table {
    Table::new(
        "small objects: 4 KiB x 32-key batches, Mooncake vs Redis",
        cols(&[
            ("clients", "clients"),
            ("op", "op"),
            ("batches", "batches"),
            ("errors", "err"),
            ("kv_per_s", "KV/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
            ("redis_op", "redis"),
            ("redis_kv_per_s", "redis KV/s"),
            ("redis_p50_ms", "redis p50"),
            ("redis_p99_ms", "redis p99"),
            ("ratio", "ratio"),
        ])
        .into_iter()
        .chain(upstream::columns(("upstream_kv_per_s", "up KV/s")))
        .collect(),
    )
}

fn add_rows(t: &mut Table, conc: usize, mc: &PutGet, rd: Option<&PutGet>, up: Option<&PutGet>) {
    let rows = [
        ("put_batch", "MSET", &mc.put, rd.map(|r| &r.put), up.map(|u| &u.put)),
        ("get_batch", "MGET", &mc.get, rd.map(|r| &r.get), up.map(|u| &u.get)),
    ];
    for (op, rop, m, r, u) in rows {
        let mut row = vec![
            Cell::Int(conc as u64),
            Cell::text(op),
            Cell::Int(m.ops()),
            Cell::Int(m.errors),
            Cell::Num(m.items_per_s(), 0),
            Cell::Num(m.p50_ms(), 2),
            Cell::Num(m.p99_ms(), 2),
            Cell::text(rop),
            Cell::opt(r.map(Samples::items_per_s), 0),
            Cell::opt(r.map(Samples::p50_ms), 2),
            Cell::opt(r.map(Samples::p99_ms), 2),
            Cell::opt(ratio(m.items_per_s(), r.map(Samples::items_per_s)), 2),
        ];
        row.extend(upstream::cells(m.items_per_s(), u, Samples::items_per_s, (0, 2)));
        t.row(row);
    }
}

fn targets(t: &Table) -> Table {
    let mut out = targets_table();
    for conc in ["1", "16"] {
        let measured = t.value(&[("clients", conc), ("op", "get_batch")], "ratio");
        target_row(&mut out, &format!("get_batch KV/s / Redis MGET, {conc} client(s)"), measured, 0.5, true, 2);
    }
    for conc in ["1", "16"] {
        let measured = t.value(&[("clients", conc), ("op", "get_batch")], "upstream_ratio");
        let name = format!("get_batch KV/s / upstream batch_get_into, {conc} client(s)");
        target_row(&mut out, &name, measured, 1.0, true, 2);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_count_keys_and_failures() {
        let mut s = Samples::default();
        let results = vec![Ok(VALUE_BYTES), Err("gone"), Ok(VALUE_BYTES)];
        record_batch(&mut s, Duration::from_millis(1), results.into_iter());
        assert_eq!((s.ops(), s.items, s.errors, s.bytes), (1, 2, 1, 2 * VALUE_BYTES as u64));
        assert_eq!(batch_keys(1, 2, 3).len(), BATCH_KEYS);
    }

    #[test]
    fn upstream_sits_next_to_ours() {
        let mut s = Samples::default();
        s.ok(Duration::from_millis(2), (BATCH_KEYS * VALUE_BYTES) as u64, BATCH_KEYS as u64);
        s.wall = Duration::from_secs(1);
        let both = || PutGet { put: s.clone(), get: s.clone() };
        let mut t = results_table();
        add_rows(&mut t, 1, &both(), None, Some(&both()));
        add_rows(&mut t, 16, &both(), None, None);
        assert_eq!(t.value(&[("clients", "1"), ("op", "get_batch")], "upstream_ratio"), Some(1.0));
        assert_eq!(t.value(&[("clients", "1"), ("op", "get_batch")], "upstream_kv_per_s"), Some(32.0));
        let goals = targets(&t).json();
        assert_eq!((&goals["rows"][2]["met"], &goals["rows"][3]["met"]), (&"yes".into(), &"-".into()));
    }
}
