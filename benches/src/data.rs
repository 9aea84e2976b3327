//! `mooncake bench data`: the data path. Put and get of 64 KiB, 1 MiB,
//! 4 MiB and 16 MiB objects over `tcp` and `shm`, with 1 and 4 concurrent
//! clients (each its own `Client`, so its own lanes), replicas 1 and 2,
//! against 3 masters (fsync on) and 2 store nodes with pre-faulted segments.
//! `--quick`: 4 MiB only, 1 client, replicas 1, a few dozen ops.
//!
//! TLS: after the plain cells, the same cluster shape is started again with
//! mutual TLS everywhere, and tcp put and get of every size (1 client,
//! replicas 1) are measured over it; each is reported next to the plain
//! cell of the same size from this run, as a ratio. Right before the TLS
//! cells of each size, the raw TCP loop is measured again over one
//! mutual-TLS connection with the TLS cluster's certificates
//! ([`baseline::raw_tls`], 1 client): what TLS itself costs here, with no
//! protocol of ours in between. Its GET/PUT sit next to the TLS cells (our
//! TLS over raw TLS) and next to raw TCP GET/PUT of 1 client (raw TLS over
//! raw TCP: on loopback both ends' AES-GCM share the same cores, so this
//! bounds what TLS over plain can reach on this machine).
//!
//! Baselines of the same size and concurrency, measured in the same run
//! right before the Mooncake cells of that size: a raw TCP request/response
//! loop with the engine's socket options ([`baseline::raw_tcp`]) for tcp,
//! and memcpy into a pre-faulted reused buffer ([`baseline::memcpy`]) for
//! shm. Upstream Mooncake ([`baseline::upstream`]: its master, one store
//! process with a segment as large as ours, one Python client process per client,
//! all over TCP, no replication) puts with `put_from` and reads with
//! `get_into`, both from a registered buffer, on the same sizes and client
//! counts; its numbers sit next to our tcp rows of replicas 1. GB/s is
//! aggregate payload over the phase's wall time; latencies are
//! per operation. A Mooncake put includes PutStart and PutEnd (PutEnd is a
//! commit with fsync on a 3-master quorum) and the checksum; a get includes
//! GetReplicaList (a linearizable read) and the checksum check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, PutOptions, PutOutcome};
use mooncake_transfer::{Protocol, TcpConfig};
use tokio::task::JoinHandle;

use crate::baseline::raw_tcp::{Dir, RawServer, prefaulted};
use crate::baseline::raw_tls::TlsServer;
use crate::baseline::upstream::{self, Load, Upstream};
use crate::baseline::{memcpy, raw_tcp, raw_tls};
use crate::cluster::{Cluster, Spec};
use crate::report::{Cell, Section, Table, cols};
use crate::stats::{Budget, Samples, ratio};
use crate::{Ctx, bound_row, target_row, targets_table};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// Object bytes one cell keeps stored at once, over all its clients (so a
/// cell never needs more than half of the two segments, even with 2 replicas).
const WORKING_SET_MAX_BYTES: usize = 512 * MIB;
/// Payload bytes one client moves in one phase, at most (full run).
const PHASE_BYTES_MAX: u64 = 1 << 30;
/// Operations of one client in one phase: at least (unless the hard time
/// limit passes) and at most.
const PHASE_OPS_MIN: u64 = 8;
const PHASE_OPS_MAX: u64 = 4_000;
const PHASE_TIME: Duration = Duration::from_millis(2_500);
/// `--quick`: operations and time per phase.
const QUICK_OPS_MAX: u64 = 40;
const QUICK_PHASE_TIME: Duration = Duration::from_secs(2);
/// Concurrent clients when more than one.
pub const CLIENTS_N: usize = 4;

/// The routes measured: TCP lanes and shared memory, and in a build with
/// the `ucx` feature UCX reads (one-sided, from store nodes run `--ucx`;
/// writes over the TCP lanes), over the transports `UCX_TLS` allows.
fn protocols() -> Vec<Protocol> {
    let mut protocols = vec![Protocol::Tcp, Protocol::Shm];
    if cfg!(feature = "ucx") {
        protocols.push(Protocol::Ucx);
    }
    protocols
}

/// Store-node flags of the data cluster: `--ucx` where UCX rows are measured.
fn store_args() -> &'static [&'static str] {
    if cfg!(feature = "ucx") { &["--ucx"] } else { &[] }
}

/// What one run covers.
struct Plan {
    sizes: Vec<usize>,
    protocols: Vec<Protocol>,
    clients: Vec<usize>,
    replicas: Vec<u32>,
    quick: bool,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            return Plan { sizes: vec![4 * MIB], protocols: protocols(), clients: vec![1], replicas: vec![1], quick };
        }
        Plan {
            sizes: vec![64 * KIB, MIB, 4 * MIB, 16 * MIB],
            protocols: protocols(),
            clients: vec![1, CLIENTS_N],
            replicas: vec![1, 2],
            quick,
        }
    }

    /// Per-client budget of one phase with objects of `size`.
    fn budget(&self, size: usize) -> Budget {
        if self.quick {
            return Budget { ops_min: PHASE_OPS_MIN, ops_max: QUICK_OPS_MAX, time: QUICK_PHASE_TIME };
        }
        let ops_max = (PHASE_BYTES_MAX / size as u64).clamp(PHASE_OPS_MIN, PHASE_OPS_MAX);
        Budget { ops_min: PHASE_OPS_MIN, ops_max, time: PHASE_TIME }
    }
}

/// Baselines of one size and concurrency.
struct Base {
    get: Samples,
    put: Samples,
    copy: Samples,
    /// Upstream Mooncake's [put_from, get_into], if measured.
    upstream: Option<[Samples; 2]>,
    /// The raw TCP loop over mutual TLS (1 client only), if measured.
    raw_tls: Option<RawTls>,
}

/// GET and PUT of the raw TLS baseline of one size.
#[derive(Clone, Debug, Default)]
struct RawTls {
    get: Samples,
    put: Samples,
}

/// The tables being filled.
struct Tables {
    results: Table,
    baselines: Table,
}

pub async fn run(ctx: &mut Ctx) -> anyhow::Result<Section> {
    let plan = Plan::new(ctx.quick);
    ctx.progress.step("data: starting 3 masters and 2 store nodes (pre-faulted segments)");
    let (segment_size, segment_bytes) = if ctx.quick { ("768MiB", 768 << 20) } else { ("1GiB", 1 << 30) };
    let spec = Spec { masters: 3, stores: 2, segment_size, prefault: true };
    let cluster = Cluster::start_with_store_args(&ctx.exe, spec, &ctx.master_args, store_args()).await?;
    let congestion = TcpConfig::default().congestion;
    let server = RawServer::start(congestion.clone())?;
    let mut tables = Tables { results: results_table(), baselines: baselines_table() };
    let mut section = Section::new("data");
    let mut upstream = upstream::start_for(ctx, &mut section, segment_bytes, upstream::WARM_BYTES).await;
    let mut bases = Vec::new();
    for &size in &plan.sizes {
        for &n in &plan.clients {
            let budget = plan.budget(size);
            ctx.progress.step(&format!("data: baselines {} x{n} (raw TCP GET/PUT, memcpy)", size_name(size)));
            let mut base = baselines(&server, congestion.clone(), size, n, budget).await?;
            base.upstream = upstream_cell(ctx, &mut section, &mut upstream, size, n, budget).await;
            for &proto in &plan.protocols {
                let failed = protocol_cells(ctx, &cluster, &plan, (size, n, proto), &base, &mut tables).await?;
                section.failed_ops += failed;
            }
            bases.push((size, n, base));
        }
    }
    // One cluster at a time: the TLS cluster's segments take the memory the
    // plain one gave back.
    drop(cluster);
    let tls = tls_cells(ctx, &plan, segment_size, (&tables.results, &bases), congestion.clone()).await?;
    section.failed_ops += tls.failed;
    // The raw TLS rows go right after the raw TCP rows of 1 client.
    for (size, n, mut base) in bases {
        if n == 1 {
            base.raw_tls = tls.raw.iter().find(|(s, _)| *s == size).map(|(_, r)| r.clone());
        }
        add_baselines(&mut tables.baselines, size, n, &base);
    }
    let mut goals = targets(&tables.results, &plan.sizes);
    tls_targets(&mut goals, &tls.table);
    section.tables.push(goals);
    section.tables.push(tables.results);
    section.tables.push(tls.table);
    section.tables.push(tables.baselines);
    section.note(format!(
        "baselines use the engine's socket options: TCP_NODELAY, TCP_CONGESTION={}",
        congestion.as_deref().unwrap_or("system default")
    ));
    section.note("tcp ratio: get vs raw TCP GET, put vs raw TCP PUT (one connection per client); shm ratio: vs memcpy");
    if cfg!(feature = "ucx") {
        section.note(format!(
            "ucx: gets read one-sided over UCX (UCX_TLS={}; on loopback TCP UCX is slower than our lanes, the rows \
             are there so an RDMA fabric is measured with the same command), puts go over the TCP lanes; ratio vs \
             raw TCP",
            std::env::var("UCX_TLS").unwrap_or_else(|_| "unset: UCX's choice".into())
        ));
    }
    section.note(
        "over TLS: ratio = GB/s over TLS / plain cell; /raw TLS = GB/s over TLS / raw TLS of the same op; \
         raw TLS/TCP = raw TLS / raw TCP of 1 client (on loopback both ends' AES-GCM share these cores: \
         the bound of ratio on this machine)",
    );
    for n in tls.notes {
        section.note(n);
    }
    section.note(
        "up = upstream Mooncake over TCP, replicas 1: put = put_from, get = get_into (registered buffers); \
         /up = our GB/s over its",
    );
    Ok(section)
}

/// The TLS rows, the raw TLS baselines, and the ops that failed in them.
struct TlsCells {
    table: Table,
    failed: u64,
    /// The raw TLS baseline of each size measured.
    raw: Vec<(usize, RawTls)>,
    notes: Vec<String>,
}

/// The plain run's results table and baselines ((size, clients, baselines)).
type PlainRun<'a> = (&'a Table, &'a [(usize, usize, Base)]);

/// tcp put and get of every size over a cluster with mutual TLS (1 client,
/// replicas 1), each beside the plain cell of `results`; right before them,
/// the raw TLS baseline of the size, beside raw TCP of 1 client from `bases`.
async fn tls_cells(
    ctx: &mut Ctx,
    plan: &Plan,
    segment_size: &'static str,
    (results, bases): PlainRun<'_>,
    congestion: Option<String>,
) -> anyhow::Result<TlsCells> {
    ctx.progress.step("data: starting 3 masters and 2 store nodes with mutual TLS");
    let spec = Spec { masters: 3, stores: 2, segment_size, prefault: true };
    let cluster = Cluster::start_with_tls(&ctx.exe, spec, &ctx.master_args, true).await?;
    let client = Arc::new(cluster.client(Protocol::Tcp, &ctx.tcp).await?);
    let mut cells = TlsCells { table: tls_table(), failed: 0, raw: Vec::new(), notes: Vec::new() };
    let mut raw_server = match RawTlsServer::start(&cluster, congestion) {
        Ok(s) => Some(s),
        Err(e) => {
            ctx.progress.say(&format!("data: raw TLS baseline skipped: {e:#}"));
            cells.notes.push(format!("raw TLS baseline not measured: {e:#}"));
            None
        }
    };
    for &size in &plan.sizes {
        let budget = plan.budget(size);
        let mut raw = None;
        if let Some(server) = &raw_server {
            ctx.progress.step(&format!("data: baseline {} x1 (raw TLS GET/PUT)", size_name(size)));
            match server.measure(size, budget).await {
                Ok((r, session)) => {
                    if cells.raw.is_empty() {
                        cells.notes.push(format!(
                            "raw TLS: the raw TCP loop over one mutual-TLS connection (tokio-rustls, mooncake-tls \
                             configs, the TLS cluster's store and client certificates), negotiated {session}"
                        ));
                    }
                    cells.raw.push((size, r.clone()));
                    raw = Some(r);
                }
                Err(e) => {
                    ctx.progress.say(&format!("data: raw TLS baseline {}: {e:#}", size_name(size)));
                    cells.notes.push(format!("raw TLS baseline {} not measured: {e:#}", size_name(size)));
                    raw_server = None;
                }
            }
        }
        ctx.progress.step(&format!("data: {} tcp x1 replicas 1 over TLS", size_name(size)));
        let tag = format!("{}-tls", size_name(size));
        let (put, get) = cell(std::slice::from_ref(&client), size, 1, budget, &tag).await?;
        // Raw TCP GET/PUT of this size and 1 client, from the plain run.
        let base = bases.iter().find(|(s, n, _)| *s == size && *n == 1).map(|(_, _, b)| b);
        for (op, s) in [("put", &put), ("get", &get)] {
            if let Some(e) = s.error_texts.first() {
                ctx.progress.say(&format!("data: {tag} {op}: {} failed, first: {e}", s.errors));
            }
            cells.failed += s.errors;
            let plain = pick(results, &size_name(size), "tcp", op, "gb_per_s");
            let (raw_tls, raw_tcp) = match op {
                "put" => (raw.as_ref().map(|r| &r.put), base.map(|b| &b.put)),
                _ => (raw.as_ref().map(|r| &r.get), base.map(|b| &b.get)),
            };
            let rate = |s: Option<&Samples>| s.map(Samples::gb_per_s);
            add_tls_row(&mut cells.table, (size, op), s, plain, rate(raw_tls), rate(raw_tcp));
        }
    }
    drop(raw_server);
    if let Ok(c) = Arc::try_unwrap(client) {
        c.close().await;
    }
    Ok(cells)
}

/// The raw TLS baseline server with the TLS cluster's store node
/// certificate, and the client identity its connections present.
struct RawTlsServer {
    server: TlsServer,
    client: mooncake_tls::TlsConfig,
    congestion: Option<String>,
}

impl RawTlsServer {
    fn start(cluster: &Cluster, congestion: Option<String>) -> anyhow::Result<RawTlsServer> {
        let load = |role| {
            cluster
                .tls_config(role)
                .map_err(anyhow::Error::msg)?
                .with_context(|| format!("the TLS cluster has no {role} certificate"))
        };
        let server = TlsServer::start(&load(mooncake_tls::Role::Store)?, congestion.clone())?;
        Ok(RawTlsServer { server, client: load(mooncake_tls::Role::Client)?, congestion })
    }

    /// GET, then PUT of `size` over one connection each; and the session
    /// (protocol version and cipher suite) negotiated.
    async fn measure(&self, size: usize, budget: Budget) -> anyhow::Result<(RawTls, String)> {
        let (addr, tls, congestion) = (self.server.addr(), self.client.clone(), self.congestion.clone());
        tokio::task::spawn_blocking(move || {
            let get = raw_tls::measure(addr, &tls, congestion.as_deref(), Dir::Get, size, 1, budget)?;
            let put = raw_tls::measure(addr, &tls, congestion.as_deref(), Dir::Put, size, 1, budget)?;
            Ok((RawTls { get: get.samples, put: put.samples }, get.session))
        })
        .await
        .context("raw TLS baseline thread")?
    }
}

/// One row of [`tls_table`]: `s` over TLS of `op` at `size`, and the plain
/// cell, raw TLS and raw TCP (GB/s) of the same op and size.
fn add_tls_row(
    t: &mut Table,
    (size, op): (usize, &str),
    s: &Samples,
    plain: Option<f64>,
    raw_tls: Option<f64>,
    raw_tcp: Option<f64>,
) {
    t.row(vec![
        Cell::text(size_name(size)),
        Cell::text(op),
        Cell::Int(s.ops()),
        Cell::Int(s.errors),
        Cell::Num(s.gb_per_s(), 2),
        Cell::Num(s.p50_ms(), 3),
        Cell::Num(s.p99_ms(), 3),
        Cell::opt(plain, 2),
        Cell::opt(ratio(s.gb_per_s(), plain), 2),
        Cell::opt(raw_tls, 2),
        Cell::opt(ratio(s.gb_per_s(), raw_tls), 2),
        Cell::opt(raw_tcp, 2),
        Cell::opt(raw_tls.and_then(|r| ratio(r, raw_tcp)), 2),
    ]);
}

fn tls_table() -> Table {
    Table::new(
        "data path over mutual TLS: tcp, 1 client, replicas 1, vs the plain cell and the raw TLS and raw TCP \
         streams of this run",
        cols(&[
            ("size", "size"),
            ("op", "op"),
            ("ops", "ops"),
            ("errors", "err"),
            ("gb_per_s", "GB/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
            ("plain_gb_per_s", "plain GB/s"),
            ("ratio", "ratio"),
            ("raw_tls_gb_per_s", "raw TLS GB/s"),
            ("raw_tls_ratio", "/raw TLS"),
            ("raw_tcp_gb_per_s", "raw TCP GB/s"),
            ("raw_tls_tcp_ratio", "raw TLS/TCP"),
        ]),
    )
}

/// The TLS rows of the targets table, from [`tls_table`].
fn tls_targets(goals: &mut Table, tls: &Table) {
    let get4 = |key| tls.value(&[("size", "4MiB"), ("op", "get")], key);
    target_row(goals, "tcp get 4MiB TLS / plain", get4("ratio"), 0.85, true, 2);
    target_row(goals, "tcp get 4MiB TLS / raw TLS stream", get4("raw_tls_ratio"), 0.85, true, 2);
    bound_row(goals, "raw TLS / raw TCP 4MiB", get4("raw_tls_tcp_ratio"), 2);
}

/// Upstream's put and get of one size and concurrency, as our [`cell`] does them.
async fn upstream_cell(
    ctx: &mut Ctx,
    section: &mut Section,
    up: &mut Option<Upstream>,
    size: usize,
    n: usize,
    budget: Budget,
) -> Option<[Samples; 2]> {
    let what = format!("put_from/get_into {} x{n}", size_name(size));
    let load = Load { prefix: format!("bench/data/{}-{n}", size_name(size)), size, batch: 1, budget };
    let slots = objects_per_client(size, n);
    upstream::measure(ctx, section, up, &what, async |u: &mut Upstream| {
        u.put_get((upstream::Op::Put, upstream::Op::Get), n, &load, slots).await
    })
    .await
}

/// Every replicas cell of one (size, clients, protocol); returns failed ops.
async fn protocol_cells(
    ctx: &mut Ctx,
    cluster: &Cluster,
    plan: &Plan,
    (size, n, proto): (usize, usize, Protocol),
    base: &Base,
    tables: &mut Tables,
) -> anyhow::Result<u64> {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(Arc::new(cluster.client(proto, &ctx.tcp).await?));
    }
    let mut failed = 0;
    for &replicas in &plan.replicas {
        let tag = format!("{}-{proto:?}-{n}-{replicas}", size_name(size));
        ctx.progress.step(&format!("data: {} {proto:?} x{n} replicas {replicas}", size_name(size)));
        let (put, get) = cell(&clients, size, replicas, plan.budget(size), &tag).await?;
        for (op, s) in [("put", &put), ("get", &get)] {
            if let Some(e) = s.error_texts.first() {
                ctx.progress.say(&format!("data: {tag} {op}: {} failed, first: {e}", s.errors));
            }
            failed += s.errors;
        }
        add_results(&mut tables.results, (size, n, proto, replicas), &put, &get, base);
    }
    for c in clients {
        if let Ok(c) = Arc::try_unwrap(c) {
            c.close().await;
        }
    }
    Ok(failed)
}

/// Runs the put phase, then the get phase over what was put, then removes
/// everything. Returns (put, get) samples.
async fn cell(
    clients: &[Arc<Client>],
    size: usize,
    replicas: u32,
    budget: Budget,
    tag: &str,
) -> anyhow::Result<(Samples, Samples)> {
    let slots = objects_per_client(size, clients.len());
    let put_budget = Budget { ops_max: budget.ops_max.min(slots), ..budget };
    let start = Instant::now();
    let handles: Vec<JoinHandle<(Samples, Vec<String>)>> = clients
        .iter()
        .enumerate()
        .map(|(w, c)| tokio::spawn(put_worker(c.clone(), format!("bench/data/{tag}/{w}"), size, replicas, put_budget)))
        .collect();
    let mut put = Samples::default();
    let mut stored = Vec::new();
    for h in handles {
        let (s, keys) = h.await.context("put worker")?;
        put.merge(s);
        stored.push(keys);
    }
    put.wall = start.elapsed();
    let start = Instant::now();
    let handles: Vec<JoinHandle<Samples>> =
        clients.iter().zip(stored).map(|(c, keys)| tokio::spawn(get_worker(c.clone(), keys, size, budget))).collect();
    let mut get = Samples::default();
    for h in handles {
        get.merge(h.await.context("get worker")?);
    }
    get.wall = start.elapsed();
    clients[0].remove_all(true).await.context("removing the cell's objects")?;
    Ok((put, get))
}

/// Objects one of `clients` clients keeps stored in a cell (its get phase
/// cycles over them).
fn objects_per_client(size: usize, clients: usize) -> u64 {
    (WORKING_SET_MAX_BYTES / (size * clients)).max(1) as u64
}

async fn put_worker(
    client: Arc<Client>,
    prefix: String,
    size: usize,
    replicas: u32,
    budget: Budget,
) -> (Samples, Vec<String>) {
    let data = pattern(size, prefix.len() as u64);
    let opts = PutOptions { replicas, ..Default::default() };
    let mut s = Samples::default();
    let mut stored = Vec::new();
    let bound = budget.start();
    let mut i = 0;
    while bound.go_on(i) {
        let key = format!("{prefix}/{i}");
        let t = Instant::now();
        match client.put(&key, &data, &opts).await {
            Ok(PutOutcome::Stored) => {
                s.ok(t.elapsed(), size as u64, 1);
                stored.push(key);
            }
            Ok(PutOutcome::KeptExisting) => s.failed(format!("put {key}: the key already existed")),
            Err(e) => s.failed(format!("put {key}: {e}")),
        }
        i += 1;
    }
    (s, stored)
}

async fn get_worker(client: Arc<Client>, keys: Vec<String>, size: usize, budget: Budget) -> Samples {
    let mut s = Samples::default();
    if keys.is_empty() {
        s.failed("no object was stored to read");
        return s;
    }
    let mut buf = prefaulted(size);
    let bound = budget.start();
    let mut i = 0;
    while bound.go_on(i) {
        let key = &keys[i as usize % keys.len()];
        let t = Instant::now();
        match client.get_into(key, &mut buf).await {
            Ok(n) if n == size => s.ok(t.elapsed(), n as u64, 1),
            Ok(n) => s.failed(format!("get {key}: {n} bytes, expected {size}")),
            Err(e) => s.failed(format!("get {key}: {e}")),
        }
        i += 1;
    }
    s
}

/// Deterministic, non-repeating-looking bytes (so nothing compresses or dedups).
pub fn pattern(size: usize, seed: u64) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ seed.wrapping_mul(0x100_0000_01b3);
    let mut v = vec![0u8; size];
    for chunk in v.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    v
}

async fn baselines(
    server: &RawServer,
    congestion: Option<String>,
    size: usize,
    n: usize,
    budget: Budget,
) -> anyhow::Result<Base> {
    let addr = server.addr();
    tokio::task::spawn_blocking(move || {
        let get = raw_tcp::measure(addr, congestion.as_deref(), Dir::Get, size, n, budget)?;
        let put = raw_tcp::measure(addr, congestion.as_deref(), Dir::Put, size, n, budget)?;
        // Each copy thread cycles over as many source objects as one client
        // reads in its get phase, so both read their source from RAM.
        let sources = objects_per_client(size, n).min(budget.ops_max) as usize;
        let copy = memcpy::measure(size, n, budget, sources);
        Ok(Base { get, put, copy, upstream: None, raw_tls: None })
    })
    .await
    .context("baseline thread")?
}

pub fn size_name(size: usize) -> String {
    if size >= MIB && size.is_multiple_of(MIB) {
        format!("{}MiB", size / MIB)
    } else if size >= KIB && size.is_multiple_of(KIB) {
        format!("{}KiB", size / KIB)
    } else {
        format!("{size}B")
    }
}

fn proto_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Shm => "shm",
        Protocol::Rdma => "rdma",
        Protocol::Ucx => "ucx",
        Protocol::Auto => "auto",
        Protocol::Tcp => "tcp",
    }
}

fn results_table() -> Table {
    Table::new(
        "data path: Mooncake put/get vs same-run baseline",
        cols(&[
            ("size", "size"),
            ("protocol", "proto"),
            ("clients", "clients"),
            ("replicas", "repl"),
            ("op", "op"),
            ("ops", "ops"),
            ("errors", "err"),
            ("gb_per_s", "GB/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
            ("baseline", "baseline"),
            ("baseline_gb_per_s", "base GB/s"),
            ("ratio", "ratio"),
        ])
        .into_iter()
        .chain(upstream::columns(("upstream_gb_per_s", "up GB/s")))
        .collect(),
    )
}

fn baselines_table() -> Table {
    Table::new(
        "data path baselines",
        cols(&[
            ("size", "size"),
            ("clients", "clients"),
            ("baseline", "baseline"),
            ("ops", "ops"),
            ("gb_per_s", "GB/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
        ]),
    )
}

fn add_baselines(t: &mut Table, size: usize, n: usize, b: &Base) {
    let mut rows = vec![("raw TCP GET", &b.get), ("raw TCP PUT", &b.put)];
    if let Some(t) = &b.raw_tls {
        rows.extend([("raw TLS GET", &t.get), ("raw TLS PUT", &t.put)]);
    }
    rows.push(("memcpy", &b.copy));
    if let Some([put, get]) = &b.upstream {
        rows.extend([("upstream put_from", put), ("upstream get_into", get)]);
    }
    for (name, s) in rows {
        t.row(vec![
            Cell::text(size_name(size)),
            Cell::Int(n as u64),
            Cell::text(name),
            Cell::Int(s.ops()),
            Cell::Num(s.gb_per_s(), 2),
            Cell::Num(s.p50_ms(), 3),
            Cell::Num(s.p99_ms(), 3),
        ]);
    }
}

fn add_results(t: &mut Table, key: (usize, usize, Protocol, u32), put: &Samples, get: &Samples, b: &Base) {
    let (size, n, proto, replicas) = key;
    let shm = proto == Protocol::Shm;
    for (i, (op, s)) in [("put", put), ("get", get)].into_iter().enumerate() {
        let (bname, base) = match (shm, op) {
            (true, _) => ("memcpy", &b.copy),
            (false, "put") => ("raw TCP PUT", &b.put),
            (false, _) => ("raw TCP GET", &b.get),
        };
        // Upstream runs over TCP without replication: it goes next to those rows only.
        let up = b.upstream.as_ref().filter(|_| proto == Protocol::Tcp && replicas == 1).map(|u| &u[i]);
        let mut row = vec![
            Cell::text(size_name(size)),
            Cell::text(proto_name(proto)),
            Cell::Int(n as u64),
            Cell::Int(u64::from(replicas)),
            Cell::text(op),
            Cell::Int(s.ops()),
            Cell::Int(s.errors),
            Cell::Num(s.gb_per_s(), 2),
            Cell::Num(s.p50_ms(), 3),
            Cell::Num(s.p99_ms(), 3),
            Cell::text(bname),
            Cell::Num(base.gb_per_s(), 2),
            Cell::opt(ratio(s.gb_per_s(), Some(base.gb_per_s())), 2),
        ];
        row.extend(upstream::cells(s.gb_per_s(), up, Samples::gb_per_s, (2, 3)));
        t.row(row);
    }
}

/// Column `key` of the 1 client, replicas 1 row of `size`/`proto`/`op`.
fn pick(results: &Table, size: &str, proto: &str, op: &str, key: &str) -> Option<f64> {
    let filter = [("size", size), ("protocol", proto), ("clients", "1"), ("replicas", "1"), ("op", op)];
    results.value(&filter, key)
}

fn targets(results: &Table, sizes: &[usize]) -> Table {
    let mut t = targets_table();
    let at4 = |proto, op, key| pick(results, "4MiB", proto, op, key);
    target_row(&mut t, "tcp get 4MiB / raw TCP GET", at4("tcp", "get", "ratio"), 0.9, true, 2);
    target_row(&mut t, "tcp get 4MiB GB/s", at4("tcp", "get", "gb_per_s"), 4.0, true, 2);
    target_row(&mut t, "tcp put 4MiB p99 ms", at4("tcp", "put", "p99_ms"), 5.0, false, 2);
    target_row(&mut t, "shm get 4MiB / memcpy", at4("shm", "get", "ratio"), 0.8, true, 2);
    for size in [64 * KIB, 4 * MIB].into_iter().filter(|s| sizes.contains(s)) {
        let name = size_name(size);
        let p50 = |key| pick(results, &name, "tcp", "put", key);
        let measured = p50("p50_ms").and_then(|ours| ratio(ours, p50("upstream_p50_ms")));
        target_row(&mut t, &format!("tcp put {name} p50 / upstream put p50"), measured, 1.0, false, 2);
    }
    for &size in sizes {
        let name = size_name(size);
        let measured = pick(results, &name, "tcp", "get", "upstream_ratio");
        target_row(&mut t, &format!("tcp get {name} GB/s / upstream get_into"), measured, 1.0, true, 2);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_goes_next_to_tcp_rows_of_one_replica() {
        let mut s = Samples::default();
        s.ok(Duration::from_millis(1), MIB as u64, 1);
        s.wall = Duration::from_secs(1);
        let upstream = Some([s.clone(), s.clone()]);
        let base = Base { get: s.clone(), put: s.clone(), copy: s.clone(), upstream, raw_tls: None };
        let mut t = results_table();
        for (proto, replicas) in [(Protocol::Tcp, 1), (Protocol::Tcp, 2), (Protocol::Shm, 1)] {
            add_results(&mut t, (4 * MIB, 1, proto, replicas), &s, &s, &base);
        }
        let up = |proto, repl| t.value(&[("protocol", proto), ("replicas", repl), ("op", "get")], "upstream_ratio");
        assert_eq!((up("tcp", "1"), up("tcp", "2"), up("shm", "1")), (Some(1.0), None, None));
        let goals = targets(&t, &[4 * MIB]).json();
        assert_eq!(goals["rows"][4]["target"], "tcp put 4MiB p50 / upstream put p50");
        assert_eq!((&goals["rows"][4]["met"], &goals["rows"][5]["met"]), (&"yes".into(), &"yes".into()));
    }

    #[test]
    fn tls_rows_sit_next_to_raw_tls_and_raw_tcp() {
        let rate = |gb: u64| {
            let mut s = Samples::default();
            s.ok(Duration::from_millis(1), gb * 1_000_000_000, 1);
            s.wall = Duration::from_secs(1);
            s
        };
        let mut t = tls_table();
        add_tls_row(&mut t, (4 * MIB, "put"), &rate(1), Some(2.0), None, Some(4.0));
        add_tls_row(&mut t, (4 * MIB, "get"), &rate(2), Some(4.0), Some(2.5), Some(5.0));
        let mut goals = targets_table();
        tls_targets(&mut goals, &t);
        let j = goals.json();
        let row =
            |i: usize| (j["rows"][i]["target"].clone(), j["rows"][i]["measured"].clone(), j["rows"][i]["met"].clone());
        assert_eq!(row(0), ("tcp get 4MiB TLS / plain".into(), 0.5.into(), "no".into()));
        assert_eq!(row(1), ("tcp get 4MiB TLS / raw TLS stream".into(), 0.8.into(), "no".into()));
        assert_eq!(row(2), ("raw TLS / raw TCP 4MiB".into(), 0.5.into(), "-".into()));
        assert_eq!(j["rows"][2]["goal"], "bound");
        // Not measured: null in JSON, `-` in the table.
        let put = &t.json()["rows"][0];
        assert!(
            put["raw_tls_gb_per_s"].is_null() && put["raw_tls_ratio"].is_null() && put["raw_tls_tcp_ratio"].is_null()
        );
        assert_eq!(put["raw_tcp_gb_per_s"], 4.0);

        let s = rate(1);
        let raw_tls = Some(RawTls { get: s.clone(), put: s.clone() });
        let mut b = baselines_table();
        add_baselines(
            &mut b,
            4 * MIB,
            1,
            &Base { get: s.clone(), put: s.clone(), copy: s.clone(), upstream: None, raw_tls },
        );
        let names: Vec<_> = b.json()["rows"].as_array().unwrap().iter().map(|r| r["baseline"].clone()).collect();
        assert_eq!(names, ["raw TCP GET", "raw TCP PUT", "raw TLS GET", "raw TLS PUT", "memcpy"]);
    }

    #[test]
    fn sizes_have_short_names() {
        assert_eq!(size_name(64 * KIB), "64KiB");
        assert_eq!(size_name(16 * MIB), "16MiB");
        assert_eq!(size_name(1000), "1000B");
    }

    #[test]
    fn budgets_bound_bytes_and_ops() {
        let full = Plan::new(false);
        assert_eq!(full.budget(16 * MIB).ops_max, 64);
        assert_eq!(full.budget(64 * KIB).ops_max, PHASE_OPS_MAX);
        assert_eq!(Plan::new(true).budget(4 * MIB).ops_max, QUICK_OPS_MAX);
        assert_ne!(pattern(64, 1), pattern(64, 2));
    }
}
