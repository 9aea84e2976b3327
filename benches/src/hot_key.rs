//! The hot-key phase of `mooncake bench ramp` (issue 39, "hot keys"): one
//! object, put with one replica on a cluster of 3 store nodes, read by 8
//! clients as fast as they can, with the masters' hot-key replication off
//! and on (`--dynamic_replication_mode enforce`, up to 3 memory replicas).
//! Each cell reports the reads per second, MiB/s, read p99, the replicas
//! the object had, and the smallest share of the reads a serving node
//! took, over its fair share (reads / replicas).
//!
//! What bounds it here: the 3 store nodes, the 8 clients and the master
//! share the machine's cores, so more replicas spread the serving (no node
//! is the bottleneck) but add no CPU; on separate hosts each replica adds
//! its node's network.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mooncake_client::{Client, MasterClient, MasterClientConfig, PutOptions};
use mooncake_transfer::Protocol;

use crate::Ctx;
use crate::cluster::{Cluster, Spec};
use crate::report::{Cell, Table, cols};

const READERS: usize = 8;
const OBJECT_BYTES: usize = 1 << 20;
const KEY: &str = "hot/block0";
/// Bound on the fan-out reaching its cap.
const FAN_OUT_TIMEOUT: Duration = Duration::from_secs(30);

/// One cell: replication off or on.
pub struct HotCell {
    pub fan_out: bool,
    pub replicas: usize,
    pub reads_per_s: f64,
    pub mib_per_s: f64,
    pub p99_ms: Option<f64>,
    /// The smallest share of the reads a replica served over its fair share.
    pub min_fair_share: Option<f64>,
    pub failed: u64,
}

/// The masters' flags of hot-key replication in the `on` cell.
fn fan_out_args() -> Vec<String> {
    [
        "--dynamic_replication_mode=enforce",
        "--dynamic_replication_heat_window_seconds=2",
        "--dynamic_replication_admission_qps_threshold=10",
        "--dynamic_replication_max_memory_replicas=3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Runs both cells, each on a cluster of its own.
pub async fn run(ctx: &mut Ctx) -> anyhow::Result<Vec<HotCell>> {
    let mut cells = Vec::new();
    for fan_out in [false, true] {
        cells.push(cell(ctx, fan_out).await?);
    }
    Ok(cells)
}

async fn cell(ctx: &mut Ctx, fan_out: bool) -> anyhow::Result<HotCell> {
    let read_for = if ctx.quick { Duration::from_secs(3) } else { Duration::from_secs(8) };
    let mut args = ctx.master_args.clone();
    if fan_out {
        args.extend(fan_out_args());
    }
    ctx.progress.step(&format!(
        "hot key: 8 readers of one {OBJECT_BYTES}-byte object, replication {}",
        if fan_out { "on" } else { "off" }
    ));
    let spec = Spec { masters: 1, stores: 3, segment_size: "128MiB", prefault: false };
    let cluster = Cluster::start(&ctx.exe, spec, &args).await?;
    let master = MasterClient::new(MasterClientConfig::new(cluster.master_addrs()))?;
    let writer = cluster.client(Protocol::Tcp, &ctx.tcp).await?;
    let value = vec![3u8; OBJECT_BYTES];
    writer.put(KEY, &value, &PutOptions { replicas: 1, ..Default::default() }).await?;
    writer.close().await;
    let mut readers = Vec::new();
    for _ in 0..READERS {
        readers.push(cluster.client(Protocol::Tcp, &ctx.tcp).await?);
    }
    let replicas = || async {
        let listed = master.list_objects(KEY, 4).await.ok()?;
        listed.iter().find(|o| o.key == KEY).map(|o| o.replicas.len())
    };
    // Warm up: with replication on, until the fan-out reached its cap.
    let warm = Instant::now();
    loop {
        read_round(&readers).await;
        let done = !fan_out || replicas().await == Some(3);
        if done || warm.elapsed() > FAN_OUT_TIMEOUT {
            break;
        }
    }
    let before: Vec<BTreeMap<String, u64>> = readers.iter().map(per_peer).collect();
    let started = Instant::now();
    let tasks: Vec<_> = readers
        .into_iter()
        .map(|r| {
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut failed = 0u64;
                while started.elapsed() < read_for {
                    let t = Instant::now();
                    match r.get(KEY).await {
                        Ok(v) if v.len() == OBJECT_BYTES => lat.push(t.elapsed()),
                        _ => failed += 1,
                    }
                }
                (r, lat, failed)
            })
        })
        .collect();
    let mut lat = Vec::new();
    let mut failed = 0;
    let mut per_node: BTreeMap<String, u64> = BTreeMap::new();
    for (task, before) in tasks.into_iter().zip(before) {
        let (r, l, f) = task.await?;
        for (peer, bytes) in per_peer(&r) {
            *per_node.entry(peer.clone()).or_default() += bytes - before.get(&peer).copied().unwrap_or(0);
        }
        lat.extend(l);
        failed += f;
        r.close().await;
    }
    let secs = started.elapsed().as_secs_f64();
    let reads = lat.len() as f64;
    lat.sort();
    let p99_ms =
        lat.get(((lat.len() as f64 * 0.99) as usize).min(lat.len().saturating_sub(1))).map(|d| d.as_secs_f64() * 1e3);
    let replicas = replicas().await.unwrap_or(0);
    let total: u64 = per_node.values().sum();
    let serving = replicas.max(1) as f64;
    let min_fair_share = (total > 0 && per_node.len() >= replicas)
        .then(|| per_node.values().map(|b| *b as f64 / (total as f64 / serving)).fold(f64::INFINITY, f64::min));
    Ok(HotCell {
        fan_out,
        replicas,
        reads_per_s: reads / secs,
        mib_per_s: reads * OBJECT_BYTES as f64 / secs / (1 << 20) as f64,
        p99_ms,
        min_fair_share,
        failed,
    })
}

/// One read by each reader, together.
async fn read_round(readers: &[Client]) {
    let reads = readers.iter().map(|r| r.get(KEY));
    futures::future::join_all(reads).await;
}

/// Bytes `client` read from each peer so far.
fn per_peer(client: &Client) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (_, peer, s) in client.engine().stats().snapshot() {
        *out.entry(peer).or_default() += s.read_bytes;
    }
    out
}

/// The cells as a table.
pub fn table(cells: &[HotCell]) -> Table {
    let mut t = Table::new(
        "a hot key: 8 readers of one 1 MiB object on 3 store nodes, hot-key replication off and on",
        cols(&[
            ("replication", "replication"),
            ("replicas", "replicas"),
            ("reads_per_s", "reads/s"),
            ("mib_per_s", "MiB/s"),
            ("p99_ms", "p99 ms"),
            ("min_fair_share", "least share / fair"),
        ]),
    );
    for c in cells {
        t.row(vec![
            Cell::text(if c.fan_out { "on" } else { "off" }),
            Cell::text(c.replicas.to_string()),
            Cell::opt(Some(c.reads_per_s), 0),
            Cell::opt(Some(c.mib_per_s), 0),
            Cell::opt(c.p99_ms, 2),
            Cell::opt(c.min_fair_share, 2),
        ]);
    }
    t
}
