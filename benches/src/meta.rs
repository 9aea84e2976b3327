//! `mooncake bench meta`: the control path alone. Metadata-only operations
//! on tiny objects (no bytes are transferred) against 3 masters with fsync
//! on, at 1, 16, 256 and 1000 concurrent clients (`--quick`: 1 and 16),
//! next to a real 3-member etcd loaded the same way, and to upstream
//! Mooncake ([`baseline::upstream`]: one master, nothing replicated or
//! fsynced) at up to 16 clients:
//!
//! | op | Mooncake | etcd | upstream Mooncake |
//! |---|---|---|---|
//! | put | PutEnd into a writer chunk (one commit; a ReserveChunk per 4 MiB of objects) | Put (one commit) | put session start + end |
//! | put_2rt (1 client) | PutStart + PutEnd (one commit), the path without writer chunks | Put | put session start + end |
//! | get | GetReplicaList (linearizable) | Range (linearizable) | get_replica_desc |
//! | exist | ExistKey (linearizable) | Range `count_only` (linearizable) | is_exist |
//! | remove | Remove (forced: reads leave leases) | DeleteRange | remove (forced) |
//! | put_4KiB (1 client) | a whole put of 4 KiB | Put of a 4 KiB value | put_from of 4 KiB |
//! | put_4KiB_2rt (1 client) | the same by a client without writer chunks | Put of a 4 KiB value | put_from of 4 KiB |
//!
//! Concurrency is in-flight requests: that many tasks, each doing one
//! request at a time, over `min(concurrency, 16)` connections (HTTP/2
//! channels) per system (upstream: one client process per client).
//! Mooncake clients find the leader themselves; the etcd connections all go
//! to etcd's leader (its best case: no forwarding).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, MasterClient, PutOptions, PutOutcome};
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Replica};
use tokio::task::JoinHandle;

use crate::baseline::etcd::{self, EtcdCluster, EtcdKv};
use crate::baseline::upstream::{self, Load, Upstream};
use crate::cluster::{Cluster, Spec};
use crate::report::{Cell, Section, Table, cols};
use crate::stats::{Budget, Samples, ratio};
use crate::{Ctx, target_row, targets_table};

const LEVELS_FULL: [usize; 4] = [1, 16, 256, 1000];
const LEVELS_QUICK: [usize; 2] = [1, 16];
const PHASE_TIME: Duration = Duration::from_secs(3);
const QUICK_PHASE_TIME: Duration = Duration::from_millis(1_500);
/// `--quick`: upstream's phases (it runs thousands of ops in this, enough for
/// a p99, and keeps CI's quick run short).
const UPSTREAM_QUICK_PHASE_TIME: Duration = Duration::from_millis(500);
/// Operations of one task in one phase, at most (time ends phases first).
const TASK_OPS_MAX: u64 = 100_000;
/// Connections per system.
pub const CONNECTIONS_MAX: usize = 16;
/// Size declared for every object (metadata only: nothing is written).
const OBJECT_BYTES: u64 = 64;
/// Object (and etcd value) size of the `put_4KiB` phase, which moves bytes.
const PUT_VALUE_BYTES: usize = 4096;
/// Upstream's segment: room for every object of a phase many times over.
const UPSTREAM_SEGMENT_BYTES: u64 = 256 << 20;
/// Value stored in etcd per key: the size of a small metadata record.
const ETCD_VALUE_BYTES: usize = 64;
/// Longest single etcd call (bounds a stuck request).
const ETCD_CALL_TIMEOUT: Duration = Duration::from_secs(10);
const KEY_PREFIX: &str = "bench/meta/";

/// The operations: four metadata-only ones, and a whole put of 4 KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Put,
    Get,
    Exist,
    Remove,
    Put4k,
    /// A metadata put without writer chunks: PutStart + PutEnd.
    PutTwoTrips,
    /// A whole 4 KiB put by a client without writer chunks.
    Put4kTwoTrips,
}

/// The metadata-only phases, in order (each reads what the first put).
const OPS: [Op; 4] = [Op::Put, Op::Get, Op::Exist, Op::Remove];
/// The phases every system runs at 1 client only.
const ONE_CLIENT: [Op; 1] = [Op::Put4k];
/// Ours only, at 1 client: the put paths without writer chunks.
const OURS_ONE_CLIENT: [Op; 2] = [Op::PutTwoTrips, Op::Put4kTwoTrips];
/// Every row of the table, in order.
const ROWS: [Op; 7] = [Op::Put, Op::PutTwoTrips, Op::Get, Op::Exist, Op::Remove, Op::Put4k, Op::Put4kTwoTrips];
/// Bytes per writer chunk of the metadata puts (the client library's default).
const META_CHUNK_BYTES: u64 = mooncake_client::DEFAULT_PUT_CHUNK_BYTES;

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Exist => "exist",
            Op::Remove => "remove",
            Op::Put4k => "put_4KiB",
            Op::PutTwoTrips => "put_2rt",
            Op::Put4kTwoTrips => "put_4KiB_2rt",
        }
    }

    /// The op whose baselines (etcd, upstream) this row is compared with.
    fn baseline(self) -> Op {
        match self {
            Op::PutTwoTrips => Op::Put,
            Op::Put4kTwoTrips => Op::Put4k,
            other => other,
        }
    }

    /// A put: its keys are new, numbered by the task.
    fn is_put(self) -> bool {
        matches!(self, Op::Put | Op::Put4k | Op::PutTwoTrips | Op::Put4kTwoTrips)
    }

    /// Part of the key: the whole puts get keys of their own.
    fn key_tag(self) -> &'static str {
        match self {
            Op::Put4k => "4k",
            Op::Put4kTwoTrips => "4k2",
            Op::PutTwoTrips => "m2",
            _ => "m",
        }
    }

    /// What upstream does for it (see the module doc).
    fn upstream(self) -> (upstream::Op, usize) {
        match self {
            Op::Put => (upstream::Op::PutMeta, OBJECT_BYTES as usize),
            Op::Get => (upstream::Op::ReplicaDesc, OBJECT_BYTES as usize),
            Op::Exist => (upstream::Op::Exist, OBJECT_BYTES as usize),
            Op::Remove => (upstream::Op::Remove, OBJECT_BYTES as usize),
            Op::Put4k | Op::Put4kTwoTrips => (upstream::Op::Put, PUT_VALUE_BYTES),
            Op::PutTwoTrips => (upstream::Op::PutMeta, OBJECT_BYTES as usize),
        }
    }
}

/// A system under load: its connections.
enum System {
    /// `client` is the registered client (PutStart needs a known writer); it
    /// also does the whole puts of `put_4KiB`.
    Mooncake {
        conns: Vec<MasterClient>,
        client: Arc<Client>,
        /// A client without writer chunks (`put_4KiB_2rt`).
        plain: Arc<Client>,
        value: Vec<u8>,
        /// Each connection's writer chunk for the metadata puts.
        chunks: Vec<tokio::sync::Mutex<Option<MetaChunk>>>,
    },
    Etcd {
        conns: Vec<EtcdKv>,
    },
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
            System::Mooncake { conns, client, plain, value, chunks } => {
                let i = conn % conns.len();
                let ours = Ours { mc: &conns[i], client, plain, value, chunk: &chunks[i] };
                mooncake_op(&ours, op, key).await
            }
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

/// A writer chunk of one connection: its id, ranges and next free offset.
struct MetaChunk {
    id: u64,
    ranges: Vec<Replica>,
    next: u64,
}

/// What one of our operations runs with.
struct Ours<'a> {
    mc: &'a MasterClient,
    client: &'a Client,
    plain: &'a Client,
    value: &'a [u8],
    chunk: &'a tokio::sync::Mutex<Option<MetaChunk>>,
}

/// A metadata-only put as the client library makes a small one: placed in
/// the connection's writer chunk (a new one when it is full), then PutEnd.
async fn chunk_put(o: &Ours<'_>, key: &str) -> anyhow::Result<()> {
    let client_id = o.client.client_id();
    let len = OBJECT_BYTES.next_multiple_of(mooncake_segment::ALLOC_ALIGN_BYTES);
    let mut held = o.chunk.lock().await;
    if held.as_ref().is_none_or(|c| c.ranges.iter().any(|r| c.next + len > r.len)) {
        let r = o.mc.reserve_chunk(client_id, 1, META_CHUNK_BYTES, OBJECT_BYTES).await?;
        if let Some(old) = held.replace(MetaChunk { id: r.chunk_id, ranges: r.replicas, next: 0 }) {
            o.mc.return_chunk(client_id, old.id).await?;
        }
    }
    let c = held.as_mut().context("a chunk")?;
    let replicas: Vec<Replica> =
        c.ranges.iter().map(|r| Replica { offset: r.offset + c.next, len, ..r.clone() }).collect();
    c.next += len;
    let id = c.id;
    drop(held);
    let end = PutEndRequest {
        client_id,
        key: key.to_string(),
        size: OBJECT_BYTES,
        replicas,
        chunk_id: id,
        // Keys are unique per put: so is this id (a retry shares it).
        request_id: key
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
            | 1,
        ..Default::default()
    };
    Ok(o.mc.put_end_with(end).await?)
}

async fn mooncake_op(o: &Ours<'_>, op: Op, key: &str) -> anyhow::Result<()> {
    let (mc, client_id) = (o.mc, o.client.client_id());
    match op {
        Op::Put => chunk_put(o, key).await?,
        Op::PutTwoTrips => {
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
        Op::Put4k | Op::Put4kTwoTrips => {
            let client = if op == Op::Put4k { o.client } else { o.plain };
            match client.put(key, o.value, &PutOptions { replicas: 1, ..Default::default() }).await? {
                PutOutcome::Stored => {}
                PutOutcome::KeptExisting => anyhow::bail!("{key} already existed"),
            }
        }
    }
    Ok(())
}

async fn etcd_op(kv: &EtcdKv, op: Op, key: &str) -> anyhow::Result<()> {
    match op {
        Op::Put | Op::PutTwoTrips => kv.put(key, &[0x6d; ETCD_VALUE_BYTES]).await?,
        Op::Get => anyhow::ensure!(kv.get(key).await? == ETCD_VALUE_BYTES, "{key} has no value"),
        Op::Exist => anyhow::ensure!(kv.exists(key).await?, "{key} does not exist"),
        Op::Remove => kv.delete(key).await?,
        Op::Put4k | Op::Put4kTwoTrips => kv.put(key, &[0x6d; PUT_VALUE_BYTES]).await?,
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
    let registered = Arc::new(cluster.client(mooncake_transfer::Protocol::Tcp, &ctx.tcp).await?);
    let plain = Arc::new(cluster.client_without_chunks(mooncake_transfer::Protocol::Tcp, &ctx.tcp).await?);
    let etcd = start_etcd(ctx, &mut section).await;
    let mut up = upstream::start_for(ctx, &mut section, UPSTREAM_SEGMENT_BYTES, 0).await;
    let up_time = if ctx.quick { UPSTREAM_QUICK_PHASE_TIME } else { time };
    let up_budget = Budget { ops_min: 1, ops_max: TASK_OPS_MAX, time: up_time };
    let mut table = results_table();
    for &conc in levels {
        let mooncake = mooncake_system(&cluster, &registered, &plain, conc)?;
        let mc = measure_system(ctx, &mooncake, "mooncake", conc, time).await?;
        for s in mc.values() {
            section.failed_ops += s.errors;
        }
        let et = match &etcd {
            Some(e) => measure_etcd(ctx, e, conc, time, &mut section).await,
            None => None,
        };
        let upm = if conc <= upstream::CLIENTS_MAX {
            let what = format!("metadata ops x{conc}");
            upstream::measure(ctx, &mut section, &mut up, &what, async |u: &mut Upstream| {
                measure_upstream(u, conc, up_budget).await
            })
            .await
        } else {
            None
        };
        add_rows(&mut table, conc, &mc, et.as_ref(), upm.as_ref());
    }
    for c in [registered, plain] {
        if let Ok(c) = Arc::try_unwrap(c) {
            c.close().await;
        }
    }
    section.tables.push(targets(&table));
    section.tables.push(table);
    section.note(
        "put = PutEnd into a writer chunk (1 commit; one ReserveChunk per 4 MiB of objects) for Mooncake, \
         put_2rt = PutStart+PutEnd (1 commit, no writer chunks), Put (1 commit) for etcd, both fsync every commit; \
         put session start+end for upstream (its master keeps metadata in memory only); \
         put_4KiB_2rt = put_4KiB by a client without writer chunks",
    );
    section.note(format!(
        "up = upstream Mooncake at up to {} clients (one process each): get = get_replica_desc, \
         put_4KiB = put_from; /up = our ops/s over its",
        upstream::CLIENTS_MAX
    ));
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

fn mooncake_system(
    cluster: &Cluster,
    registered: &Arc<Client>,
    plain: &Arc<Client>,
    conc: usize,
) -> anyhow::Result<Arc<System>> {
    let conns = (0..conc.min(CONNECTIONS_MAX))
        .map(|_| MasterClient::new(cluster.client_config()))
        .collect::<Result<Vec<_>, _>>()?;
    let value = crate::data::pattern(PUT_VALUE_BYTES, 4);
    let chunks = conns.iter().map(|_| tokio::sync::Mutex::new(None)).collect();
    Ok(Arc::new(System::Mooncake { conns, client: registered.clone(), plain: plain.clone(), value, chunks }))
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
    if conc == 1 {
        let ours = matches!(**sys, System::Mooncake { .. });
        let extra = ONE_CLIENT.iter().chain(OURS_ONE_CLIENT.iter().filter(|_| ours));
        for &op in extra {
            ctx.progress.step(&format!("meta: {name} {} x{conc}", op.name()));
            let (s, _) = phase(sys, op, conc, &stored, budget).await?;
            out.insert(op.name(), s);
        }
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
    if !w.op.is_put() && w.keys.is_empty() {
        return (s, ok_keys);
    }
    let bound = match w.op {
        Op::Remove => Budget { ops_max: w.keys.len() as u64, ..budget },
        _ => budget,
    }
    .start();
    let mut i = 0u64;
    while bound.go_on(i) {
        let n = if w.op.is_put() { i } else { w.keys[i as usize % w.keys.len()] };
        let key = format!("{KEY_PREFIX}{}/{}/{}/{n}", w.conc, w.op.key_tag(), w.task);
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
        ])
        .into_iter()
        .chain(upstream::columns(("upstream_ops_per_s", "up ops/s")))
        .collect(),
    )
}

fn add_rows(t: &mut Table, conc: usize, mc: &BySystemOp, et: Option<&BySystemOp>, up: Option<&BySystemOp>) {
    for op in ROWS {
        let Some(m) = mc.get(op.name()) else { continue };
        let e = et.and_then(|et| et.get(op.baseline().name()));
        let u = up.and_then(|up| up.get(op.baseline().name()));
        let mut row = vec![
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
        ];
        row.extend(upstream::cells(m.ops_per_s(), u, Samples::ops_per_s, (0, 2)));
        t.row(row);
    }
}

/// Upstream's phases at one concurrency, as [`measure_system`] runs ours.
async fn measure_upstream(u: &mut Upstream, conc: usize, budget: Budget) -> anyhow::Result<BySystemOp> {
    let mut out = BTreeMap::new();
    let mut stored = Vec::new();
    let one_client = if conc == 1 { &ONE_CLIENT[..] } else { &[] };
    for &op in OPS.iter().chain(one_client) {
        let (uop, size) = op.upstream();
        let load = Load { prefix: format!("{KEY_PREFIX}{conc}/{}", op.key_tag()), size, batch: 1, budget };
        let (s, done) = u.phase(uop, conc, &load, &stored).await?;
        if op == Op::Put {
            stored = done;
        }
        out.insert(op.name(), s);
    }
    u.clear().await?;
    Ok(out)
}

/// Our p50 of `op` at 1 client over column `base` of the same row.
fn p50_ratio(t: &Table, op: &str, base: &str) -> Option<f64> {
    let row = [("clients", "1"), ("op", op)];
    t.value(&row, "p50_ms").and_then(|ours| ratio(ours, t.value(&row, base)))
}

fn targets(t: &Table) -> Table {
    let mut out = targets_table();
    target_row(&mut out, "put p50 at 1 client / etcd put p50", p50_ratio(t, "put", "etcd_p50_ms"), 1.0, false, 2);
    let measured = p50_ratio(t, "put_4KiB", "etcd_p50_ms");
    target_row(&mut out, "put_4KiB p50 at 1 client / etcd put p50", measured, 1.0, false, 2);
    let measured = p50_ratio(t, "put_4KiB", "upstream_p50_ms");
    target_row(&mut out, "put_4KiB p50 at 1 client / upstream put p50", measured, 2.0, false, 2);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn took(ms: u64) -> Samples {
        let mut s = Samples::default();
        s.ok(Duration::from_millis(ms), 0, 1);
        s.wall = Duration::from_secs(1);
        s
    }

    #[test]
    fn targets_compare_p50s_of_one_row() {
        let ours = BySystemOp::from([("put", took(2)), ("put_4KiB", took(2))]);
        let etcd = BySystemOp::from([("put", took(1)), ("put_4KiB", took(4))]);
        let upstream = BySystemOp::from([("put", took(1)), ("put_4KiB", took(1))]);
        let mut t = results_table();
        add_rows(&mut t, 1, &ours, Some(&etcd), Some(&upstream));
        let goals = targets(&t).json();
        let met: Vec<&str> = (0..3).filter_map(|i| goals["rows"][i]["met"].as_str()).collect();
        assert_eq!(met, ["no", "yes", "yes"], "2/1 > 1, 2/4 <= 1, 2/1 <= 2");
        assert_eq!(t.value(&[("clients", "1"), ("op", "put")], "upstream_ratio"), Some(1.0));
    }
}
