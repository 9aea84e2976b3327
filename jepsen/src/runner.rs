//! One chaos run: build the network, start the cluster (and preload a large
//! state, in scenarios that have one), run the register and
//! lease workloads (and the stall writers, in scenarios that stall them)
//! and the nemesis for the asked time, heal, wait for the cluster to
//! converge, read every key back, read every committed replica raw, run the
//! checkers and write the report. Everything after the network exists runs
//! on a thread inside the client namespace.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, ClientError, MasterClient};
use tokio::sync::Mutex;

use crate::access::Access;
use crate::availability_run;
use crate::chaos_cluster::{
    ChaosCluster, ClusterOptions, EVICTION_HIGH_WATERMARK_RATIO, EVICTION_RATIO, KV_LEASE_TTL, STORE_SEGMENT_BYTES,
};
use crate::checkers::{NodeId, NodeReport, cluster_health, no_lost_acked_puts};
use crate::committed_bytes::{CommittedBytesVerdict, StallPutsVerdict, check_committed_bytes, check_stall_puts};
use crate::disk_stores::{self, DiskStoresReport};
use crate::event_watcher::EventWatcher;
use crate::history::{History, OpKind, Outcome, ProcessId};
use crate::leader_stability::{FollowerWindow, check_leader_stability};
use crate::lease::{LeaseCheckConfig, check_kv_leases};
use crate::lease_workload::{self, LeaseWorkloadOptions};
use crate::linearizability::{LinearizabilityConfig, check_linearizable};
use crate::nemesis::{DiskFullOutcome, FaultEvent, Nemesis, STALL_WAIT_MAX, find_leader};
use crate::net::Network;
use crate::preload::{self, Preload};
use crate::report::{
    CheckerVerdict, LeaseReport, RunReport, write_lease_history, write_refusals, write_stall_history, write_tier_reads,
};
use crate::rng::Rng;
use crate::scenario::Scenario;
use crate::stall_process::{StallCounts, StallPut, StallSpawn, StallWriters};
use crate::stall_writer::{STALL_OBJECT_BYTES, STALL_PUTS_PER_ROUND};
use crate::store_kill::StoreKill;
use crate::tenant_probe::{self, TenantProbeOptions, TenantProbeReport};
use crate::term_watch::{self, TermSample};
use crate::tier_reader::{self, TierRead, TierReaderOptions};
use crate::workload::{self, Shared, WorkloadOptions, decode_value};
use crate::zone_loss::ZoneOutage;

/// Hosts of every run: masters (m4 is the spare), two store nodes, clients.
pub const HOSTS: &[&str] = &["m1", "m2", "m3", "m4", "s1", "s2", "c1"];
/// How long the cluster may take to serve, and to converge after healing.
const SETTLE: Duration = Duration::from_secs(45);
/// Slack of the lease checker, in the system's favour: a removal or copy
/// counts as inside a lease only when it came this much before the lease
/// could end (scheduling of the harness and masters on a loaded machine).
const LEASE_MARGIN: Duration = Duration::from_millis(50);
/// Final reads of one key before the run gives up on it (200 ms apart).
const FINAL_READ_ATTEMPTS_MAX: u32 = 50;
/// Final reads in which every replica failed (checksum mismatch, or no
/// store node served it) before the key counts as a corrupt read.
const CORRUPT_READ_ATTEMPTS: u32 = 5;
/// Every key prefix the harness's workloads and stall writers put under.
const HARNESS_KEY_PREFIXES: [&str; 3] = ["jepsen/", "lease/", "stall/"];
/// Store nodes of every run.
const STORE_NODES: u64 = 2;
/// Stall writer processes in scenarios that stall them: two clients whose
/// reservations interleave in the leader's arena, as independent writers'
/// do (eight half-written 64 KiB objects per stall).
const STALL_WRITERS: usize = 2;

/// What to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub scenario: Scenario,
    pub seed: u64,
    pub duration: Duration,
    pub rate: u64,
    pub clients: usize,
    /// The `mooncake` binary.
    pub bin: PathBuf,
    /// The `mooncake-jepsen` binary (runs the stall writers).
    pub harness_bin: PathBuf,
    pub results_root: PathBuf,
    /// Extra master flags (deliberately broken builds).
    pub master_flags: Vec<String>,
    /// Extra store node flags (a deliberately broken store node).
    pub store_flags: Vec<String>,
    /// Namespace prefix (unique per concurrent harness).
    pub prefix: String,
    /// Objects preloaded by scenarios that preload (at least; see `preload.rs`).
    pub preload_objects: u64,
    /// Mutual TLS for every master, store node and client of the run (a
    /// PKI made in the run's dir); off (`--no-tls`) they speak plain TCP.
    pub tls: bool,
}

/// What the run did besides the workloads, handed to the checkers.
struct Extras {
    faults: Vec<FaultEvent>,
    stall: Option<(Vec<StallPut>, StallCounts)>,
    windows: Vec<FollowerWindow>,
    preload: Option<Preload>,
    disk_full: Vec<DiskFullOutcome>,
    store_remounts: Vec<Option<f64>>,
    wipe_refused: Option<(bool, String)>,
    /// `disk-stores`: the nemesis's rounds and the tier reader's reads.
    store_kills: Vec<StoreKill>,
    tier_reads: Vec<TierRead>,
    /// `quorum-pause`: the store nodes' registrations before the run.
    registrations_before: Option<BTreeMap<u64, u64>>,
    /// The run's watcher, and the prefix it watches.
    watcher: (EventWatcher, &'static str),
    /// What the tenant probe saw.
    tenant_probe: TenantProbeReport,
    /// `zone-loss`: every loss of the zone.
    zone_outages: Vec<ZoneOutage>,
    store_restarts: Vec<crate::rolling_restart::StoreRestart>,
    /// The masters' terms through the run (`term_watch.rs`).
    terms: Vec<TermSample>,
}

/// Runs one scenario and writes its report; `Ok` even when a checker finds a
/// violation (that is in the report), `Err` when the run itself failed.
pub fn run(opts: RunOptions) -> anyhow::Result<RunReport> {
    anyhow::ensure!(
        !opts.scenario.over_ucx() || cfg!(feature = "ucx"),
        "scenario {} reads over UCX: build mooncake-jepsen and mooncake with the `ucx` feature \
         (`cargo build --release --features mooncake-cli/ucx,mooncake-jepsen/ucx --bin mooncake --bin mooncake-jepsen`)",
        opts.scenario
    );
    crate::safety::require_root()?;
    crate::safety::check_tools()?;
    let dir = opts.results_root.join(format!("{}-{}", opts.scenario, opts.seed));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    eprintln!("run {} seed {} → {}", opts.scenario, opts.seed, dir.display());
    let net = Arc::new(Network::create(&opts.prefix, HOSTS).context("building the test network")?);
    let inner_net = net.clone();
    let inner_dir = dir.clone();
    let handle = net.spawn_in("c1", move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        rt.block_on(run_inside(opts, inner_net, inner_dir))
    })?;
    let report = handle.join().map_err(|_| anyhow::anyhow!("the run thread panicked"))??;
    drop(net);
    report
}

async fn run_inside(opts: RunOptions, net: Arc<Network>, dir: PathBuf) -> anyhow::Result<RunReport> {
    let started = Instant::now();
    let preload_objects = opts.scenario.preloads().then_some(opts.preload_objects);
    let eviction = match preload_objects {
        Some(n) => preload::eviction_flags(preload::segment_bytes(n), 2 * STORE_SEGMENT_BYTES, EVICTION_RATIO),
        None => (EVICTION_HIGH_WATERMARK_RATIO, EVICTION_RATIO),
    };
    let cluster_opts = ClusterOptions {
        bin: opts.bin.clone(),
        dir: dir.join("nodes"),
        power_loss: opts.scenario.needs_power_loss(),
        fake_clock: opts.scenario.needs_fake_clock(),
        master_flags: opts.master_flags.clone(),
        store_flags: opts.store_flags.clone(),
        segment_size: opts.scenario.store_segment_size().into(),
        eviction,
        tls: opts.tls,
        disks: opts.scenario.has_disks(),
        ucx: opts.scenario.over_ucx(),
        shm_stores: opts.scenario.shm_stores(),
        hot_keys: opts.scenario.replicates_hot_keys(),
    };
    let cluster = Arc::new(Mutex::new(ChaosCluster::start(net.clone(), cluster_opts)?));
    let (addrs, access) = {
        let c = cluster.lock().await;
        (c.master_addrs()?, c.access())
    };
    let voters3: Vec<String> = addrs[..3].to_vec();
    let segments = if opts.scenario.has_disks() { 2 * STORE_NODES } else { STORE_NODES };
    wait_ready(&access, &voters3, segments).await?;
    // `quorum-pause`, `fd-flood`: which store nodes are registered since
    // when, to tell at the end whether any was expired (and registered
    // again) meanwhile.
    let keeps_store_nodes = opts.scenario.faults().iter().any(|f| {
        use crate::scenario::Fault;
        matches!(f, Fault::QuorumPause | Fault::FdFlood)
    });
    let registrations_before = match keeps_store_nodes {
        true => Some(store_registrations(&cluster).await.context("listing the store nodes before the run")?),
        false => None,
    };
    // Every key over a small state; the harness's own over a preloaded one.
    let watched = if preload_objects.is_some() { "jepsen/" } else { "" };
    let watcher = (EventWatcher::start(access.master(voters3.clone()), watched)?, watched);
    let preload = match preload_objects {
        Some(n) => {
            eprintln!("preloading at least {n} objects (metadata only, batch RPCs)");
            let p = Preload::load(&access, &voters3, n).await.context("preloading the large state")?;
            let r = &p.report;
            eprintln!(
                "preloaded {} objects in {:.1} s ({:.0}/s); fake segment {} of {} bytes used",
                r.objects, r.load_s, r.objects_per_s, r.segment_used_bytes, r.segment_bytes
            );
            Some(p)
        }
        None => None,
    };

    let shared = Shared::new(Instant::now());
    let wl_opts = WorkloadOptions {
        access: access.clone(),
        masters: voters3.clone(),
        local_hostname: net.host_ip("c1")?.to_string(),
        clients: opts.clients,
        rate: opts.rate,
        seed: opts.seed,
        admin_token: cluster.lock().await.admin_config()?.admin_token,
    };
    let lease_opts = LeaseWorkloadOptions {
        access: access.clone(),
        masters: voters3.clone(),
        local_hostname: wl_opts.local_hostname.clone(),
        seed: opts.seed,
        lease_ttl: KV_LEASE_TTL,
        steady_store_host: net.host_ip("s2")?.to_string(),
        remove_all_for: if opts.scenario.runs_remove_all() { opts.duration / 2 } else { Duration::ZERO },
    };
    let stall = match opts.scenario.needs_stall_writers() {
        // Puts are held until the first kill under stall is over: the
        // writers' first reservations are alone in the first leader's arena.
        true => {
            shared.puts_held.store(true, Ordering::Relaxed);
            Some(start_stall_writers(&opts, &net, &access, &voters3, &dir, shared.clone())?)
        }
        false => None,
    };
    let tier_reader = opts.scenario.has_disks().then(|| {
        let tier_opts = TierReaderOptions {
            access: access.clone(),
            masters: voters3.clone(),
            local_hostname: wl_opts.local_hostname.clone(),
            seed: opts.seed,
            process: ProcessId(opts.clients as u64 + 1),
        };
        tokio::spawn(tier_reader::run(tier_opts, shared.clone()))
    });
    let workload = tokio::spawn(workload::run(wl_opts, shared.clone()));
    let terms = tokio::spawn(term_watch::run(access.clone(), addrs.clone(), shared.clone()));
    let leases = tokio::spawn(lease_workload::run(lease_opts, shared.clone()));
    let probe_opts = TenantProbeOptions {
        access: access.clone(),
        masters: voters3.clone(),
        local_hostname: net.host_ip("c1")?.to_string(),
        admin_token: cluster.lock().await.admin_config()?.admin_token,
    };
    let probe = tokio::spawn(tenant_probe::run(probe_opts, shared.clone()));
    let mut nemesis = Nemesis {
        net: net.clone(),
        access: access.clone(),
        cluster: cluster.clone(),
        shared: shared.clone(),
        faults: opts.scenario.faults(),
        rng: Rng::new(opts.seed),
        log: Vec::new(),
        membership_done: false,
        stall,
        stall_kills: 0,
        leader_kill_at: opts.scenario.preloads().then(|| opts.duration / 2),
        leader_killed: false,
        windows: Vec::new(),
        disk_full: Vec::new(),
        store_remounts: Vec::new(),
        wipe_refused: None,
        store_kills: Vec::new(),
        store_kill_next: None,
        quorum_paused_leader: None,
        flood: None,
        zone_outages: Vec::new(),
        store_restarts: Vec::new(),
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let nemesis_stop = stop.clone();
    let nemesis_task = async {
        let r = nemesis.run(nemesis_stop).await;
        let healed = nemesis.heal_all().await;
        r.and(healed)
    };
    let timer = async {
        tokio::time::sleep(opts.duration).await;
        stop.store(true, Ordering::Relaxed);
    };
    let (nemesis_result, ()) = tokio::join!(nemesis_task, timer);
    shared.stop.store(true, Ordering::Relaxed);
    workload.await.context("workload task")?.context("workload")?;
    leases.await.context("lease workload task")?.context("lease workload")?;
    let terms = terms.await.context("term watch task")?;
    let tenant_probe = probe.await.context("tenant probe task")?.context("tenant probe")?;
    let tier_reads = match tier_reader {
        Some(t) => t.await.context("tier reader task")?.context("tier reader")?,
        None => Vec::new(),
    };
    nemesis_result.context("nemesis")?;
    // The writers end their round and are killed before anything is read:
    // none may write while the checkers read.
    let stall = match nemesis.stall.take() {
        Some(writers) => Some(writers.finish(STALL_WAIT_MAX).await.context("stopping the stall writers")?),
        None => None,
    };
    let extras = Extras {
        faults: std::mem::take(&mut nemesis.log),
        stall,
        windows: std::mem::take(&mut nemesis.windows),
        preload,
        disk_full: std::mem::take(&mut nemesis.disk_full),
        store_remounts: std::mem::take(&mut nemesis.store_remounts),
        wipe_refused: nemesis.wipe_refused.take(),
        store_kills: std::mem::take(&mut nemesis.store_kills),
        tier_reads,
        registrations_before,
        watcher,
        tenant_probe,
        zone_outages: std::mem::take(&mut nemesis.zone_outages),
        store_restarts: std::mem::take(&mut nemesis.store_restarts),
        terms,
    };
    finish(&opts, &dir, &cluster, &access, &shared, extras, started).await
}

/// How long the watcher may take, after the run, to reach the final
/// listing's revision (it hears progress at least every second).
const FEED_CATCH_UP: Duration = Duration::from_secs(60);

/// The `events` checker: lists the watched keys (at one revision), lets the
/// watcher reach that revision, and replays what it saw against the
/// listing. What the watcher saw is kept as `event-feed.json`.
async fn check_feed(
    access: &Access,
    voter_addrs: &[String],
    (watcher, prefix): (EventWatcher, &'static str),
    dir: &std::path::Path,
) -> anyhow::Result<crate::event_feed::FeedVerdict> {
    let master = MasterClient::new(access.master(voter_addrs.to_vec()))?;
    let (objects, revision) =
        master.list_all_at(prefix, crate::event_watcher::LIST_PAGE).await.context("the event feed's listing")?;
    let log = watcher.finish(revision, FEED_CATCH_UP).await;
    std::fs::write(dir.join("event-feed.json"), serde_json::to_string(&log)?)?;
    Ok(crate::event_feed::check_event_feed(&log, &crate::event_watcher::listed(&objects), revision))
}

/// Store nodes (clients with a segment) and when each registered, as the
/// leader has them (ListClients, an admin call).
async fn store_registrations(cluster: &Arc<Mutex<ChaosCluster>>) -> anyhow::Result<BTreeMap<u64, u64>> {
    let cfg = cluster.lock().await.admin_config()?;
    let clients = MasterClient::new(cfg)?.list_clients().await?;
    Ok(clients.into_iter().filter(|c| !c.segments.is_empty()).map(|c| (c.id, c.registered_ms)).collect())
}

fn start_stall_writers(
    opts: &RunOptions,
    net: &Network,
    access: &Access,
    masters: &[String],
    dir: &std::path::Path,
    shared: Arc<Shared>,
) -> anyhow::Result<StallWriters> {
    let spawn = StallSpawn {
        bin: opts.harness_bin.clone(),
        host: "c1".into(),
        masters: masters.to_vec(),
        tls: access.tls_files().cloned(),
        local_hostname: net.host_ip("c1")?.to_string(),
        writers: STALL_WRITERS,
        object_bytes: STALL_OBJECT_BYTES,
        puts_per_stall: STALL_PUTS_PER_ROUND,
        seed: opts.seed,
        log_dir: dir.join("nodes"),
    };
    StallWriters::start(net, &spawn, shared)
}

/// Waits until a leader serves and `segments` store segments are mounted.
async fn wait_ready(access: &Access, addrs: &[String], segments: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + SETTLE;
    loop {
        if let Some(leader) = find_leader(access, addrs).await {
            let c = MasterClient::new(access.master(addrs.to_vec()))?;
            let addr = &addrs[(leader - 1) as usize % addrs.len()];
            if c.cluster_info_of(addr).await.is_ok_and(|i| i.segment_count >= segments) {
                return Ok(());
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "cluster not ready within {SETTLE:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn finish(
    opts: &RunOptions,
    dir: &std::path::Path,
    cluster: &Arc<Mutex<ChaosCluster>>,
    access: &Access,
    shared: &Arc<Shared>,
    extras: Extras,
    started: Instant,
) -> anyhow::Result<RunReport> {
    let Extras {
        faults,
        stall,
        windows,
        mut preload,
        disk_full,
        store_remounts,
        wipe_refused,
        store_kills,
        tier_reads,
        registrations_before,
        watcher,
        tenant_probe,
        zone_outages,
        store_restarts,
        terms,
    } = extras;
    let (voters, addrs) = {
        let c = cluster.lock().await;
        (c.voters.clone(), c.master_addrs()?)
    };
    let voter_addrs: Vec<String> = voters.iter().map(|v| addrs[(*v - 1) as usize].clone()).collect();
    let nodes = converge(access, &voters, &voter_addrs).await;
    // Disk objects are read back only once every disk is attached again.
    let disks_attached = match opts.scenario.has_disks() {
        true => disk_stores::wait_disks_attached(access, &voter_addrs).await,
        false => true,
    };
    let keys = shared.all_keys().await;
    let (final_reads, corrupt_final, final_transports) = final_reads(access, &voter_addrs, &keys).await?;
    // Over a preloaded state only the harness's own keys are listed: the
    // preloaded objects have no bytes, and are too many for one listing.
    let prefixes: &[&str] = if preload.is_some() { &HARNESS_KEY_PREFIXES } else { &[""] };
    let (committed, stall_puts) = read_back_bytes(access, &voter_addrs, shared, stall.as_ref(), prefixes).await?;
    let preload_missing = match preload.as_mut() {
        Some(p) => {
            let missing = p.verify().await.context("reading the preloaded keys back")?;
            p.stop().await;
            Some(missing)
        }
        None => None,
    };
    let feed = check_feed(access, &voter_addrs, watcher, dir).await?;
    let mut records = std::mem::take(&mut *shared.records.lock().await);
    // The lease workload's RemoveAlls, as ops of one more process.
    records.extend(shared.remove_all_records(ProcessId(opts.clients as u64)).await);
    let history = History::new(records).context("the recorded history is malformed")?;
    let lin = check_linearizable(&history, &LinearizabilityConfig::default());
    let lost = no_lost_acked_puts(&history, &final_reads);
    let health = cluster_health(&nodes);
    let corrupt = shared.corrupt_reads.load(Ordering::Relaxed) + corrupt_final;
    let lease_records = std::mem::take(&mut *shared.lease_records.lock().await);
    let lease_config =
        LeaseCheckConfig { ttl_ns: KV_LEASE_TTL.as_nanos() as u64, margin_ns: LEASE_MARGIN.as_nanos() as u64 };
    let leases = check_kv_leases(&lease_records, &lease_config);
    let refusals = shared.refusals();
    let availability = availability_run::check_run(&refusals, &history, &lease_records, &faults, &terms, opts.clients);
    let evicted = cluster.lock().await.evicted_objects();
    let (hot_replicas_added, hot_replicas_dropped) = cluster.lock().await.hot_key_replicas();
    let put_failures = shared.put_failures();
    let acked_puts =
        history.records().iter().filter(|r| matches!(r.op, OpKind::Put { .. }) && r.outcome == Outcome::Ok).count()
            + shared.lease_stored.lock().await.len();
    let mut checkers = vec![
        CheckerVerdict::from_linearizability(&lin),
        CheckerVerdict::from_check(&lost),
        CheckerVerdict::from_check(&health),
        CheckerVerdict::data_integrity(corrupt, shared.verified_reads.load(Ordering::Relaxed)),
        CheckerVerdict::from_leases(&leases),
        CheckerVerdict::from_committed_bytes(&committed),
        CheckerVerdict::from_event_feed(&feed),
        CheckerVerdict::puts_acknowledged(acked_puts, &put_failures),
        CheckerVerdict::tenant_isolation(&tenant_probe),
    ];
    checkers.extend(stall_puts.as_ref().map(CheckerVerdict::from_stall_puts));
    if opts.scenario.checks_availability() {
        checkers.push(CheckerVerdict::from_availability(&availability));
    }
    if opts.scenario.faults().contains(&crate::scenario::Fault::FollowerBursts) {
        checkers.push(CheckerVerdict::from_leader_stability(&check_leader_stability(&windows)));
    }
    if opts.scenario.faults().contains(&crate::scenario::Fault::WipeReplace) {
        checkers.push(CheckerVerdict::wipe_refused(wipe_refused.as_ref()));
    }
    if opts.scenario.faults().contains(&crate::scenario::Fault::StorePause) {
        checkers.push(CheckerVerdict::store_remounted(&store_remounts));
    }
    if let Some(before) = &registrations_before {
        let after = store_registrations(cluster).await.context("listing the store nodes after the run")?;
        let pauses =
            faults.iter().filter(|f| f.phase == "start" && (f.fault == "QuorumPause" || f.fault == "FdFlood")).count();
        checkers.push(CheckerVerdict::store_nodes_kept(before, &after, pauses));
    }
    if opts.scenario.faults().contains(&crate::scenario::Fault::ZoneLoss) {
        checkers.push(CheckerVerdict::zone_loss(&zone_outages));
    }
    if opts.scenario.faults().contains(&crate::scenario::Fault::RollingRestart) {
        checkers.push(CheckerVerdict::store_restarts(&store_restarts));
    }
    if opts.scenario.faults().contains(&crate::scenario::Fault::DiskFull) {
        checkers.push(CheckerVerdict::crash_only(&disk_full));
    }
    if opts.scenario.over_ucx() {
        let FinalTransports { memory_backed, memory_over_ucx, ucx_errors } = final_transports;
        checkers.push(CheckerVerdict::ucx_reads(memory_backed, memory_over_ucx, ucx_errors));
    }
    if let (Some(p), Some(missing)) = (&preload, preload_missing) {
        checkers.push(CheckerVerdict::preload_intact(p.report.objects, missing));
    }
    let disk_stores = match opts.scenario.has_disks() {
        true => {
            let disk = disk_stores::check_disk_objects(access, &voter_addrs, &history, &tier_reads, &final_reads)
                .await
                .context("disk checker")?;
            checkers.push(CheckerVerdict::from_disk_objects(&disk, disks_attached));
            checkers.push(CheckerVerdict::disk_remounted(&store_kills));
            let lease_disk_only = shared.lease_disk_only_reads.load(Ordering::Relaxed);
            let mut r = DiskStoresReport::new(&store_kills, &tier_reads, &history, lease_disk_only);
            (r.disk_backed, r.disk_replicas_ok) = (disk.checked, disk.disk_replicas_ok);
            Some(r)
        }
        false => None,
    };
    let mut report =
        RunReport::new(opts.scenario, opts.seed, dir, &history, faults, checkers, nodes, started.elapsed());
    report.kv_leases = LeaseReport {
        counts: leases.counts,
        evicted_objects: evicted,
        violations: leases.violations.len(),
        hot_replicas_added,
        hot_replicas_dropped,
    };
    report.committed_bytes = committed.counts;
    report.event_feed = feed.counts;
    report.tls = access.is_tls();
    report.put_failures = put_failures;
    report.tenant_probe = tenant_probe;
    report.zone_outages = zone_outages;
    report.store_restarts = store_restarts;
    report.availability = opts.scenario.checks_availability().then_some(availability.counts);
    report.stall_writers = stall.as_ref().map(|(_, counts)| *counts);
    report.preload = preload.as_ref().map(|p| p.report);
    report.follower_windows = windows;
    report.disk_stores = disk_stores;
    report.write(&history)?;
    if opts.scenario.has_disks() {
        write_tier_reads(dir, &tier_reads)?;
    }
    // Only a passing run drops the store nodes' disk files (evidence).
    cluster.lock().await.keep_disks = !report.valid;
    write_lease_history(dir, &lease_records)?;
    write_refusals(dir, &refusals, &terms)?;
    if let Some((puts, _)) = &stall {
        write_stall_history(dir, puts)?;
    }
    Ok(report)
}

/// Waits (bounded) until every voter agrees on a leader and has applied the
/// same state; returns what each reports (the health checker judges it).
async fn converge(access: &Access, voters: &[u64], addrs: &[String]) -> Vec<NodeReport> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let reports = node_reports(access, voters, addrs).await;
        let agreed = reports.len() == voters.len()
            && reports.windows(2).all(|w| {
                w[0].leader_id == w[1].leader_id
                    && w[0].commit_index == w[1].commit_index
                    && w[0].applied_index == w[1].applied_index
                    && w[0].state_hash == w[1].state_hash
            })
            && reports.first().is_some_and(|r| r.leader_id.is_some());
        if agreed || Instant::now() > deadline {
            return reports;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn node_reports(access: &Access, voters: &[u64], addrs: &[String]) -> Vec<NodeReport> {
    let mut out = Vec::new();
    for (id, addr) in voters.iter().zip(addrs) {
        let Ok(c) = MasterClient::new(access.master(vec![addr.clone()])) else { continue };
        if let Ok(info) = c.cluster_info_with_hash_of(addr).await {
            out.push(NodeReport {
                id: NodeId(*id),
                leader_id: (info.leader_id != 0).then_some(NodeId(info.leader_id)),
                commit_index: info.commit_index,
                applied_index: info.applied_index,
                state_hash: format!("{:016x}", info.state_hash),
            });
        }
    }
    out
}

/// Reads every committed replica raw, and every acknowledged stall put.
async fn read_back_bytes(
    access: &Access,
    addrs: &[String],
    shared: &Arc<Shared>,
    stall: Option<&(Vec<StallPut>, StallCounts)>,
    prefixes: &[&str],
) -> anyhow::Result<(CommittedBytesVerdict, Option<StallPutsVerdict>)> {
    let client = Client::connect(access.client(addrs.to_vec())).await.context("committed-bytes client")?;
    let committed = check_committed_bytes(&client, prefixes).await.context("committed-bytes check");
    let stall_puts = match (&committed, stall) {
        (Ok(_), Some((puts, _))) => {
            let remove_alls = shared.remove_alls.lock().await.clone();
            Some(check_stall_puts(&client, puts, &remove_alls, STALL_OBJECT_BYTES).await)
        }
        _ => None,
    };
    client.close().await;
    Ok((committed?, stall_puts))
}

/// How the final reads moved their bytes (the final-read client's engine
/// counters, read around each key's read): the objects read that had a
/// memory replica, and those of them whose read crossed UCX; reads that
/// failed over UCX. (A disk-only object is served over TCP by design.)
#[derive(Clone, Copy, Debug, Default)]
struct FinalTransports {
    memory_backed: u64,
    memory_over_ucx: u64,
    ucx_errors: u64,
}

/// The final-read client's reads over UCX so far, and its UCX errors.
fn ucx_counts(client: &Client) -> (u64, u64) {
    let snapshot = client.engine().stats().snapshot();
    let ucx = snapshot.iter().filter(|(kind, _, _)| *kind == mooncake_client::TransportKind::Ucx);
    ucx.fold((0, 0), |(reads, errors), (_, _, s)| (reads + s.reads, errors + s.errors))
}

/// Whether `key`'s object has a replica in memory (read over UCX when the
/// store nodes serve it) at the moment of asking.
async fn has_memory_replica(client: &Client, key: &str) -> bool {
    let list = client.master().get_replica_list(client.client_id(), key).await;
    list.is_ok_and(|l| l.replicas.iter().any(|r| r.tier == mooncake_proto::master::Tier::Dram as i32))
}

/// Reads every key after healing: its value, or `None` if absent. Bytes that
/// match no put count as corrupt.
async fn final_reads(
    access: &Access,
    addrs: &[String],
    keys: &[String],
) -> anyhow::Result<(BTreeMap<String, Option<u64>>, u64, FinalTransports)> {
    let client = Client::connect(access.client(addrs.to_vec())).await.context("final-read client")?;
    let mut out = BTreeMap::new();
    let mut corrupt = 0;
    let mut transports = FinalTransports::default();
    for key in keys {
        let (ucx_before, _) = ucx_counts(&client);
        let value = read_settled(&client, key).await.with_context(|| format!("final read of {key}"))?;
        let crossed_ucx = ucx_counts(&client).0 > ucx_before;
        if matches!(value, Ok(Some(_))) && has_memory_replica(&client, key).await {
            transports.memory_backed += 1;
            transports.memory_over_ucx += u64::from(crossed_ucx);
        }
        match value {
            Ok(v) => {
                out.insert(key.clone(), v);
            }
            Err(()) => corrupt += 1,
        }
    }
    transports.ucx_errors = ucx_counts(&client).1;
    client.close().await;
    Ok((out, corrupt, transports))
}

/// One key's final value, retrying while a put of it is still settling.
/// A key no replica of which serves bytes matching its checksum (after a
/// few tries, with every store node up) is a corrupt read, not an error.
async fn read_settled(client: &Client, key: &str) -> anyhow::Result<Result<Option<u64>, ()>> {
    let mut last = String::new();
    let mut all_replicas_failed = 0;
    for _ in 0..FINAL_READ_ATTEMPTS_MAX {
        match client.get(key).await {
            Ok(bytes) => return Ok(decode_value(&bytes).map(Some).ok_or(())),
            Err(ClientError::NotFound(_)) => return Ok(Ok(None)),
            // A put that never completed (its client gave up): not readable,
            // and never acknowledged, so for the checkers the key is absent.
            Err(e) if e.code() == Some(mooncake_proto::ErrorCode::ReplicaIsNotReady) => return Ok(Ok(None)),
            Err(e @ ClientError::AllReplicasFailed { .. }) => {
                all_replicas_failed += 1;
                if all_replicas_failed >= CORRUPT_READ_ATTEMPTS {
                    tracing::warn!(key, error = %e, "final read: no replica holds the object's bytes");
                    return Ok(Err(()));
                }
                last = e.to_string();
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("no stable answer: {last}")
}
