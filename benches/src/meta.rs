//! `mooncake bench meta`: the control path alone. Metadata-only operations
//! on tiny objects (no bytes are transferred) against 3 masters with fsync
//! on, at 1, 16, 256 and 1000 concurrent clients (`--quick`: 1 and 16),
//! next to a real 3-member etcd loaded the same way:
//!
//! | op | Mooncake | etcd |
//! |---|---|---|
//! | put | PutStart + PutEnd (two commits) | Put (one commit) |
//! | get | GetReplicaList (linearizable) | Range (linearizable) |
//! | exist | ExistKey (linearizable) | Range `count_only` (linearizable) |
//! | remove | Remove (forced: reads leave leases) | DeleteRange |
//!
//! Concurrency is in-flight requests: that many tasks, each doing one
//! request at a time, over `min(concurrency, 16)` connections (HTTP/2
//! channels) per system. Mooncake clients find the leader themselves; the
//! etcd connections all go to etcd's leader (its best case: no forwarding).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, MasterClient, MasterClientConfig};
use mooncake_proto::master::PutStartRequest;
use tokio::task::JoinHandle;

use crate::baseline::etcd::{self, EtcdCluster, EtcdKv};
use crate::cluster::{Cluster, Spec};
use crate::report::{Cell, Section, Table, cols};
use crate::stats::{Budget, Samples, ratio};
use crate::{Ctx, target_row, targets_table};

const LEVELS_FULL: [usize; 4] = [1, 16, 256, 1000];
const LEVELS_QUICK: [usize; 2] = [1, 16];
const PHASE_TIME: Duration = Duration::from_secs(3);
const QUICK_PHASE_TIME: Duration = Duration::from_millis(1_500);
/// Operations of one task in one phase, at most (time ends phases first).
const TASK_OPS_MAX: u64 = 100_000;
/// Connections per system.
pub const CONNECTIONS_MAX: usize = 16;
/// Size declared for every object (metadata only: nothing is written).
const OBJECT_BYTES: u64 = 64;
/// Value stored in etcd per key: the size of a small metadata record.
const ETCD_VALUE_BYTES: usize = 64;
/// Longest single etcd call (bounds a stuck request).
const ETCD_CALL_TIMEOUT: Duration = Duration::from_secs(10);
const KEY_PREFIX: &str = "bench/meta/";

/// The four operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Put,
    Get,
    Exist,
    Remove,
}

const OPS: [Op; 4] = [Op::Put, Op::Get, Op::Exist, Op::Remove];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Exist => "exist",
            Op::Remove => "remove",
        }
    }
}

/// A system under load: its connections.
enum System {
    Mooncake { conns: Vec<MasterClient>, client_id: u64 },
    Etcd { conns: Vec<EtcdKv> },
}

impl System {
    fn conns(&self) -> usize {
        match self {
            System::Mooncake { conns, .. } => conns.len(),
            System::Etcd { conns } => conns.len(),
        }
    }

    /// One operation on `key` over connection `conn`.
    async fn op(&self, conn: usize, op: Op, key: &str) -> anyhow::Result<()> {
        match self {
            System::Mooncake { conns, client_id } => mooncake_op(&conns[conn % conns.len()], *client_id, op, key).await,
            System::Etcd { conns } => etcd_op(&conns[conn % conns.len()], op, key).await,
        }
    }

    /// Removes every benchmark key.
    async fn clear(&self) -> anyhow::Result<()> {
        match self {
            System::Mooncake { conns, .. } => conns[0].remove_all(true).await.map(drop).map_err(Into::into),
            System::Etcd { conns } => conns[0].delete_prefix(KEY_PREFIX).await.map(drop),
        }
    }
}

async fn mooncake_op(mc: &MasterClient, client_id: u64, op: Op, key: &str) -> anyhow::Result<()> {
    match op {
        Op::Put => {
            let req = PutStartRequest {
                client_id,
                key: key.to_string(),
                size: OBJECT_BYTES,
                replica_num: 1,
                ..Default::default()
            };
            mc.put_start(req).await?;
            mc.put_end(client_id, key, 0).await?;
        }
        Op::Get => {
            let r = mc.get_replica_list(client_id, key).await?;
            anyhow::ensure!(!r.replicas.is_empty(), "{key} has no replica");
        }
        Op::Exist => anyhow::ensure!(mc.exist_key(key).await?, "{key} does not exist"),
        Op::Remove => mc.remove(key, true).await?,
    }
    Ok(())
}

async fn etcd_op(kv: &EtcdKv, op: Op, key: &str) -> anyhow::Result<()> {
    match op {
        Op::Put => kv.put(key, &[0x6d; ETCD_VALUE_BYTES]).await?,
        Op::Get => anyhow::ensure!(kv.get(key).await? == ETCD_VALUE_BYTES, "{key} has no value"),
        Op::Exist => anyhow::ensure!(kv.exists(key).await?, "{key} does not exist"),
        Op::Remove => kv.delete(key).await?,
    }
    Ok(())
}

pub async fn run(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let levels: &[usize] = if ctx.quick { &LEVELS_QUICK } else { &LEVELS_FULL };
    let time = if ctx.quick { QUICK_PHASE_TIME } else { PHASE_TIME };
    let mut section = Section::new("meta");
    ctx.progress.step("meta: starting 3 masters (fsync on) and 1 store node");
    let cluster = Cluster::start(
        &ctx.exe,
        Spec { masters: 3, stores: 1, segment_size: "256MiB", prefault: false },
        &ctx.master_args,
    )
    .await?;
    // A registered client: PutStart needs a known writer (its heartbeats keep it alive).
    let registered = cluster.client(mooncake_transfer::Protocol::Tcp, &ctx.tcp).await?;
    let etcd = start_etcd(ctx, &mut section).await;
    let mut table = results_table();
    for &conc in levels {
        let mooncake = mooncake_system(&cluster, &registered, conc)?;
        let mc = measure_system(ctx, &mooncake, "mooncake", conc, time).await?;
        for s in mc.values() {
            section.failed_ops += s.errors;
        }
        let et = match &etcd {
            Some(e) => measure_etcd(ctx, e, conc, time, &mut section).await,
            None => None,
        };
        add_rows(&mut table, conc, &mc, et.as_ref());
    }
    registered.close().await;
    section.tables.push(targets(&table));
    section.tables.push(table);
    section.note("put = PutStart+PutEnd (2 commits) for Mooncake, Put (1 commit) for etcd; both fsync every commit");
    section.note(format!(
        "concurrency = tasks with one request in flight each, over min(concurrency, {CONNECTIONS_MAX}) connections"
    ));
    Ok(section)
}

/// Starts the etcd baseline, or notes why not (the scenario goes on without it).
async fn start_etcd(ctx: &mut Ctx, section: &mut Section) -> Option<EtcdCluster> {
    let Some(bin) = etcd::find() else {
        ctx.progress.say(&format!("meta: {}", etcd::INSTALL_HINT));
        section.note(etcd::INSTALL_HINT);
        return None;
    };
    ctx.progress.step("meta: starting a 3-member etcd cluster");
    match EtcdCluster::start(&bin).await {
        Ok(c) => Some(c),
        Err(e) => {
            let msg = format!("etcd baseline skipped: {e:#}");
            ctx.progress.say(&format!("meta: {msg}"));
            section.note(msg);
            None
        }
    }
}

fn mooncake_system(cluster: &Cluster, registered: &Client, conc: usize) -> anyhow::Result<Arc<System>> {
    let conns = (0..conc.min(CONNECTIONS_MAX))
        .map(|_| MasterClient::new(MasterClientConfig::new(cluster.master_addrs())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(System::Mooncake { conns, client_id: registered.client_id() }))
}

async fn etcd_system(cluster: &EtcdCluster, conc: usize) -> anyhow::Result<Arc<System>> {
    let urls = cluster.client_urls();
    let mut leader = None;
    for url in &urls {
        if let Some(s) = etcd::status(url).await {
            leader = cluster.members.iter().position(|m| m.id == s.leader);
            break;
        }
    }
    let url = urls.get(leader.unwrap_or(0)).context("etcd cluster has no members")?;
    let conns = (0..conc.min(CONNECTIONS_MAX))
        .map(|_| EtcdKv::new(url, ETCD_CALL_TIMEOUT))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Arc::new(System::Etcd { conns }))
}

/// The etcd side at one concurrency; a failure is noted, not fatal.
async fn measure_etcd(
    ctx: &mut Ctx,
    cluster: &EtcdCluster,
    conc: usize,
    time: Duration,
    section: &mut Section,
) -> Option<BySystemOp> {
    let result = match etcd_system(cluster, conc).await {
        Ok(sys) => measure_system(ctx, &sys, "etcd", conc, time).await,
        Err(e) => Err(e),
    };
    result
        .map_err(|e| {
            ctx.progress.say(&format!("meta: etcd x{conc} failed: {e:#}"));
            section.note(format!("etcd at {conc} clients not measured: {e:#}"));
        })
        .ok()
}

type BySystemOp = BTreeMap<&'static str, Samples>;

/// The four phases at one concurrency (put, then reads of what was put, then
/// removal of it), then clears what is left; samples by op name.
async fn measure_system(
    ctx: &mut Ctx,
    sys: &Arc<System>,
    name: &str,
    conc: usize,
    time: Duration,
) -> anyhow::Result<BySystemOp> {
    for c in 0..sys.conns() {
        // Connect (and find the leader) before the clock starts.
        let _ = sys.op(c, Op::Exist, &format!("{KEY_PREFIX}warmup")).await;
    }
    let budget = Budget { ops_min: 1, ops_max: TASK_OPS_MAX, time };
    let mut out = BTreeMap::new();
    let mut stored: Vec<Vec<u64>> = vec![Vec::new(); conc];
    for op in OPS {
        ctx.progress.step(&format!("meta: {name} {} x{conc}", op.name()));
        let (s, keys) = phase(sys, op, conc, &stored, budget).await?;
        if let Some(e) = s.error_texts.first() {
            ctx.progress.say(&format!("meta: {name} {} x{conc}: {} failed, first: {e}", op.name(), s.errors));
        }
        if op == Op::Put {
            stored = keys;
        }
        out.insert(op.name(), s);
    }
    if let Err(e) = sys.clear().await {
        ctx.progress.say(&format!("meta: clearing {name}: {e:#}"));
    }
    Ok(out)
}

/// `conc` tasks doing `op`; returns the merged samples and, per task, the
/// key numbers that succeeded.
async fn phase(
    sys: &Arc<System>,
    op: Op,
    conc: usize,
    stored: &[Vec<u64>],
    budget: Budget,
) -> anyhow::Result<(Samples, Vec<Vec<u64>>)> {
    let start = Instant::now();
    let handles: Vec<JoinHandle<(Samples, Vec<u64>)>> = (0..conc)
        .map(|w| {
            let keys = stored.get(w).cloned().unwrap_or_default();
            tokio::spawn(task(sys.clone(), Work { task: w, conc, op, keys }, budget))
        })
        .collect();
    let mut total = Samples::default();
    let mut done = Vec::with_capacity(conc);
    for h in handles {
        let (s, keys) = h.await.context("meta task")?;
        total.merge(s);
        done.push(keys);
    }
    total.wall = start.elapsed();
    Ok((total, done))
}

/// What one task does in one phase.
struct Work {
    task: usize,
    conc: usize,
    op: Op,
    /// Key numbers this task put (for reads and removes).
    keys: Vec<u64>,
}

async fn task(sys: Arc<System>, w: Work, budget: Budget) -> (Samples, Vec<u64>) {
    let mut s = Samples::default();
    let mut ok_keys = Vec::new();
    if w.op != Op::Put && w.keys.is_empty() {
        return (s, ok_keys);
    }
    let bound = match w.op {
        Op::Remove => Budget { ops_max: w.keys.len() as u64, ..budget },
        _ => budget,
    }
    .start();
    let mut i = 0u64;
    while bound.go_on(i) {
        let n = if w.op == Op::Put { i } else { w.keys[i as usize % w.keys.len()] };
        let key = format!("{KEY_PREFIX}{}/{}/{n}", w.conc, w.task);
        let t = Instant::now();
        match sys.op(w.task, w.op, &key).await {
            Ok(()) => {
                s.ok(t.elapsed(), 0, 1);
                if w.op == Op::Put {
                    ok_keys.push(n);
                }
            }
            Err(e) => s.failed(format!("{} {key}: {e:#}", w.op.name())),
        }
        i += 1;
    }
    (s, ok_keys)
}

fn results_table() -> Table {
    Table::new(
        "control path: metadata ops/s, Mooncake (3 masters) vs etcd (3 members), fsync on",
        cols(&[
            ("clients", "clients"),
            ("op", "op"),
            ("ops", "ops"),
            ("errors", "err"),
            ("ops_per_s", "ops/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
            ("etcd_ops_per_s", "etcd ops/s"),
            ("etcd_p50_ms", "etcd p50"),
            ("etcd_p99_ms", "etcd p99"),
            ("etcd_errors", "etcd err"),
            ("ratio", "ratio"),
        ]),
    )
}

fn add_rows(t: &mut Table, conc: usize, mc: &BySystemOp, et: Option<&BySystemOp>) {
    for op in OPS {
        let Some(m) = mc.get(op.name()) else { continue };
        let e = et.and_then(|et| et.get(op.name()));
        t.row(vec![
            Cell::Int(conc as u64),
            Cell::text(op.name()),
            Cell::Int(m.ops()),
            Cell::Int(m.errors),
            Cell::Num(m.ops_per_s(), 0),
            Cell::Num(m.p50_ms(), 2),
            Cell::Num(m.p99_ms(), 2),
            Cell::opt(e.map(Samples::ops_per_s), 0),
            Cell::opt(e.map(Samples::p50_ms), 2),
            Cell::opt(e.map(Samples::p99_ms), 2),
            e.map_or(Cell::Missing, |e| Cell::Int(e.errors)),
            Cell::opt(ratio(m.ops_per_s(), e.map(Samples::ops_per_s)), 2),
        ]);
    }
}

fn targets(t: &Table) -> Table {
    let mut out = targets_table();
    target_row(
        &mut out,
        "put ops/s at 1000 clients / etcd",
        t.value(&[("clients", "1000"), ("op", "put")], "ratio"),
        3.0,
        true,
        2,
    );
    target_row(
        &mut out,
        "put p50 ms at 1 client",
        t.value(&[("clients", "1"), ("op", "put")], "p50_ms"),
        1.0,
        false,
        2,
    );
    out
}
