//! Benchmarks of mooncake-rs: the end-to-end `mooncake bench` (this library)
//! and criterion micro-benchmarks (`benches/benches/*.rs`).
//!
//! `mooncake bench data|meta|small|failover|disk|all [--quick] [--json]` starts
//! real local clusters (the `mooncake` binary runs every role), drives them
//! with the client library, and measures a baseline in the same run for
//! every number, because on a shared 2-vCPU VM only ratios mean much:
//!
//! - [`data`]: put/get of 64 KiB–16 MiB objects over tcp and shm against a
//!   raw TCP request/response loop and memcpy ([`baseline::raw_tcp`],
//!   [`baseline::memcpy`]), and over mutual TLS against the same loop over
//!   TLS ([`baseline::raw_tls`]);
//! - [`meta`]: metadata-only ops against a 3-member etcd ([`baseline::etcd`]);
//! - [`small`]: 4 KiB objects in batches of 32 against Redis MSET/MGET
//!   ([`baseline::redis`]);
//! - [`failover`]: the unavailability gap after SIGKILL of the leader,
//!   next to etcd's;
//! - [`disk`]: the SSD tier: disk-only gets and offload of a cluster with a
//!   disk segment ([`disk_tier`]) and the [`DiskSegment`](mooncake_segment::DiskSegment)
//!   engine, against raw `O_DIRECT` io_uring I/O on the same file system
//!   ([`baseline::raw_disk`]);
//! - and upstream Mooncake 0.3.13 itself ([`baseline::upstream`]) in `data`,
//!   `meta` and `small`, on the same sizes and client counts.
//!
//! `mooncake bench ramp` (not part of `all`): [`ramp`], a store node
//! joining a full cluster under load.
//!
//! `mooncake bench scale [--objects N] [--stores K]` (not part of `all`)
//! runs the quorum at size: [`scale`] loads N objects and kills masters
//! under load (`--objects 0` skips it), then [`fleet`] runs K store node
//! processes and 1,000 heartbeating clients against one quorum.
//!
//! Progress goes to stderr, the tables (or one JSON document) to stdout; see
//! [`report`]. Every loop is bounded in operations and time ([`stats::Budget`]),
//! all traffic stays on 127.0.0.1, and every child process and temporary
//! directory is cleaned up by drop guards, also on error. Missing external
//! baselines (etcd, redis-server, upstream Mooncake's Python wheel) are
//! skipped with an install hint.
//!
//! The etcd and Redis clients, and so `meta`, `small` and `failover`, come
//! with feature `baselines` (on by default; `mooncake-cli` forwards it).
//! Without it, a run that asks for one of those scenarios stops at once with
//! an error naming the feature; `data`, `disk` and `scale` need no feature.
//!
//! Depends on `client`, `local-cluster`, `proto` and `transfer`, never on
//! `master`: masters run as processes.

pub mod baseline;
pub mod cluster;
pub mod data;
pub mod disk;
pub mod disk_tier;
#[cfg(feature = "baselines")]
pub mod failover;
pub mod fleet;
pub mod hot_key;
#[cfg(feature = "baselines")]
pub mod meta;
pub mod metrics;
pub mod ramp;
pub mod report;
pub mod scale;
#[cfg(feature = "baselines")]
pub mod small;
pub mod stats;
pub mod trace;
pub mod watch;

use std::path::PathBuf;

use serde_json::json;

use crate::report::{Cell, Progress, Section, Table, cols};

/// Which scenarios to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Data,
    Meta,
    Small,
    Failover,
    /// The SSD tier against raw `O_DIRECT` I/O on the same file system.
    Disk,
    /// Object events: commit latency with 0, 1 and 16 watchers, delivery
    /// latency and rate (docs/EVENTS.md).
    Watch,
    /// Not part of `all`: minutes at its default size.
    Scale,
    /// The store as a cache: a request trace replayed against ours,
    /// upstream and the LRU bound (not part of `all`: it needs a trace).
    Trace,
    /// A store node joins a full cluster under load: its share of the
    /// writes per second and put p99; repair after a node loss; a hot key
    /// read by 8 clients with hot-key replication off and on (not part of
    /// `all`).
    Ramp,
    All,
}

impl Scenario {
    fn expand(self) -> Vec<Scenario> {
        match self {
            Scenario::All => vec![
                Scenario::Data,
                Scenario::Meta,
                Scenario::Small,
                Scenario::Failover,
                Scenario::Disk,
                Scenario::Watch,
            ],
            one => vec![one],
        }
    }

    /// Whether the scenario measures against etcd or Redis, whose clients
    /// come with feature `baselines`: `meta` and `failover` against etcd,
    /// `small` against Redis (`all` runs all three).
    fn needs_baselines(self) -> bool {
        match self {
            Scenario::Meta | Scenario::Small | Scenario::Failover | Scenario::All => true,
            Scenario::Data | Scenario::Disk | Scenario::Scale | Scenario::Watch | Scenario::Trace | Scenario::Ramp => {
                false
            }
        }
    }
}

/// `Err` naming the feature to enable when `scenario` needs the etcd or
/// Redis baseline and this build left their clients out.
fn check_baselines(scenario: Scenario) -> anyhow::Result<()> {
    if cfg!(feature = "baselines") || !scenario.needs_baselines() {
        return Ok(());
    }
    Err(baselines_missing(scenario))
}

fn baselines_missing(scenario: Scenario) -> anyhow::Error {
    let name = format!("{scenario:?}").to_lowercase();
    anyhow::anyhow!(
        "`mooncake bench {name}` measures against etcd or Redis, whose clients this build leaves out; \
         rebuild with the `baselines` feature (on by default: `cargo build --release -p mooncake-cli`, \
         or add `--features baselines`); `bench data`, `bench disk`, `bench watch` and `bench scale` run without it"
    )
}

/// Arguments of `mooncake bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// Scenario to run.
    #[arg(value_enum, default_value_t = Scenario::All)]
    pub scenario: Scenario,
    /// A short run (seconds per scenario) that proves the bench works, for CI.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// An extra flag for every master the bench starts (repeatable), e.g.
    /// `--master-arg=--election-timeout-min-ms=300` to compare settings.
    #[arg(long = "master-arg", value_name = "FLAG", allow_hyphen_values = true)]
    pub master_args: Vec<String>,
    /// TCP lanes per store node of every workload client (default: the
    /// client library's, 4), to compare transport settings.
    #[arg(long = "tcp-lanes", value_name = "N")]
    pub tcp_lanes: Option<usize>,
    /// Split transfers above this many bytes across lanes (default: the
    /// client library's, 1 MiB).
    #[arg(long = "tcp-split-bytes", value_name = "BYTES")]
    pub tcp_split_bytes: Option<u64>,
    /// `scale`: objects to load (default 10 M; `--quick` 1 M); 0 skips the
    /// load, snapshot and failover phases and runs only the fleet.
    #[arg(long)]
    pub objects: Option<u64>,
    /// `scale`: store node processes of the fleet phase, 1 to 256 (default
    /// 100, also with `--quick`).
    #[arg(long)]
    pub stores: Option<u64>,
    #[command(flatten)]
    pub trace: TraceArgs,
}

/// The flags of `mooncake bench trace`; each defaults to
/// [`trace::Plan::new`]'s value for the run (full or `--quick`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TraceArgs {
    /// `trace`: the request trace to replay, JSON lines with `timestamp` and
    /// `hash_ids` [default: ../shared/traces/conversation_trace.jsonl].
    #[arg(long = "trace", value_name = "FILE")]
    pub path: Option<PathBuf>,
    /// `trace`: requests replayed, from the trace's start (default 3000;
    /// `--quick` 400).
    #[arg(long)]
    pub requests: Option<usize>,
    /// `trace`: concurrent clients, each replaying every N-th request
    /// (default 4; `--quick` 2).
    #[arg(long)]
    pub clients: Option<usize>,
    /// `trace`: bytes per block, e.g. 32KiB (default).
    #[arg(long = "block-bytes", value_parser = mooncake_client::parse_size)]
    pub block_bytes: Option<u64>,
    /// `trace`: the one store node's segment, e.g. 256MiB (default;
    /// `--quick` 64MiB); the upstream store gets the same.
    #[arg(long = "segment-size", value_parser = mooncake_client::parse_size)]
    pub segment_bytes: Option<u64>,
    /// `trace`: replay at the trace's timestamps divided by this (0, the
    /// default: each client's next request as soon as its last ended).
    #[arg(long)]
    pub speedup: Option<f64>,
    /// `trace`: which calls load and store blocks (default: both, one
    /// replay each).
    #[arg(long = "mode", value_enum)]
    pub modes: Vec<trace::Mode>,
}

impl TraceArgs {
    /// The plan these flags make of the run's default.
    pub fn plan(&self, quick: bool) -> trace::Plan {
        let mut p = trace::Plan::new(quick);
        if let Some(path) = &self.path {
            p.trace = path.clone();
        }
        p.requests = self.requests.unwrap_or(p.requests);
        p.clients = self.clients.unwrap_or(p.clients);
        p.block_bytes = self.block_bytes.unwrap_or(p.block_bytes);
        p.segment_bytes = self.segment_bytes.unwrap_or(p.segment_bytes);
        p.speedup = self.speedup.unwrap_or(p.speedup);
        if !self.modes.is_empty() {
            p.modes = self.modes.clone();
        }
        p
    }
}

/// What every scenario gets: the run's mode, the binary that runs the
/// cluster roles, and the progress printer.
pub struct Ctx {
    pub quick: bool,
    /// The `mooncake` binary (`mooncake master`, `mooncake store`).
    pub exe: PathBuf,
    /// Extra flags for every master (`--master-arg`).
    pub master_args: Vec<String>,
    /// TCP settings of every workload client.
    pub tcp: mooncake_transfer::TcpConfig,
    pub progress: Progress,
}

/// Runs the bench from inside the `mooncake` binary (roles are started
/// as `current_exe() master|store`).
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    run_with(args, std::env::current_exe()?).await
}

/// Runs the bench with `exe` as the binary that runs every cluster role.
pub async fn run_with(args: BenchArgs, exe: PathBuf) -> anyhow::Result<()> {
    let mut tcp = mooncake_transfer::TcpConfig::default();
    tcp.lanes = args.tcp_lanes.unwrap_or(tcp.lanes);
    tcp.split_bytes = args.tcp_split_bytes.unwrap_or(tcp.split_bytes);
    tcp.validate().map_err(|e| anyhow::anyhow!("--tcp-lanes / --tcp-split-bytes: {e}"))?;
    check_baselines(args.scenario)?;
    let mut ctx = Ctx { quick: args.quick, exe, master_args: args.master_args.clone(), tcp, progress: Progress::new() };
    let started = std::time::SystemTime::now();
    let mut sections = Vec::new();
    let mut failures = Vec::new();
    for s in args.scenario.expand() {
        let results = match s {
            Scenario::Data => vec![data::run(&mut ctx).await],
            #[cfg(feature = "baselines")]
            Scenario::Meta => vec![meta::run(&mut ctx).await],
            #[cfg(feature = "baselines")]
            Scenario::Small => vec![small::run(&mut ctx).await],
            #[cfg(feature = "baselines")]
            Scenario::Failover => vec![failover::run(&mut ctx).await],
            // Refused by `check_baselines` before anything started.
            #[cfg(not(feature = "baselines"))]
            Scenario::Meta | Scenario::Small | Scenario::Failover => vec![Err(baselines_missing(s))],
            Scenario::Disk => vec![disk::run(&mut ctx).await],
            Scenario::Watch => vec![watch::run(&mut ctx).await],
            Scenario::Scale => scale_phases(&mut ctx, &args).await,
            Scenario::Trace => vec![trace::run(&mut ctx, &args.trace.plan(args.quick)).await],
            Scenario::Ramp => vec![ramp::run(&mut ctx).await],
            Scenario::All => continue,
        };
        for result in results {
            match result {
                Ok(sec) => sections.push(sec),
                Err(e) => {
                    ctx.progress.say(&format!("{s:?} failed: {e:#}"));
                    failures.push(format!("{s:?}: {e:#}"));
                }
            }
        }
    }
    ctx.progress.finish();
    print_report(&args, started, &sections, &failures);
    let failed_ops: u64 = sections.iter().map(|s| s.failed_ops).sum();
    anyhow::ensure!(failures.is_empty(), "{} scenario(s) failed: {}", failures.len(), failures.join("; "));
    anyhow::ensure!(failed_ops == 0, "{failed_ops} Mooncake operations failed (see the err columns)");
    Ok(())
}

/// `scale`: the object load (unless `--objects 0`), then the fleet, each
/// on a cluster of its own (the first is stopped before the second starts).
async fn scale_phases(ctx: &mut Ctx, args: &BenchArgs) -> Vec<anyhow::Result<Section>> {
    let mut results = Vec::new();
    if args.objects != Some(0) {
        results.push(scale::run(ctx, args.objects).await);
    }
    results.push(fleet::run(ctx, args.stores).await);
    results
}

fn print_report(args: &BenchArgs, started: std::time::SystemTime, sections: &[Section], failures: &[String]) {
    let date = utc_date(started);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    if args.json {
        let scenarios: serde_json::Map<String, serde_json::Value> =
            sections.iter().map(|s| (s.name.clone(), s.json())).collect();
        let doc = json!({
            "mooncake_bench": env!("CARGO_PKG_VERSION"),
            "date": date,
            "quick": args.quick,
            "cpus": cpus,
            "scenarios": scenarios,
            "failures": failures,
        });
        println!("{doc:#}");
        return;
    }
    let mode = if args.quick { "quick" } else { "full" };
    println!("mooncake bench {:?} ({mode} run), {date}, {cpus} CPUs\n", args.scenario);
    for s in sections {
        println!("{}", s.render());
    }
    for f in failures {
        println!("FAILED {f}");
    }
}

/// `YYYY-MM-DD HH:MM UTC` without a date crate (days-from-civil inverse).
fn utc_date(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}

/// A table of the targets: what was measured, the goal, and whether it is met.
pub(crate) fn targets_table() -> Table {
    Table::new("targets", cols(&[("target", "target"), ("measured", "measured"), ("goal", "goal"), ("met", "met")]))
}

/// One row of [`targets_table`]; `higher` says which side of `goal` passes.
pub(crate) fn target_row(t: &mut Table, name: &str, measured: Option<f64>, goal: f64, higher: bool, decimals: usize) {
    let met = measured.map(|m| if higher { m >= goal } else { m <= goal });
    let op = if higher { ">=" } else { "<=" };
    t.row(vec![
        Cell::text(name),
        Cell::opt(measured, decimals),
        Cell::text(format!("{op} {goal}")),
        Cell::text(match met {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        }),
    ]);
}

/// A row of [`targets_table`] without a goal: a measured bound that other
/// rows are read against (goal `bound`, met `-`).
pub(crate) fn bound_row(t: &mut Table, name: &str, measured: Option<f64>, decimals: usize) {
    t.row(vec![Cell::text(name), Cell::opt(measured, decimals), Cell::text("bound"), Cell::text("-")]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_render_in_utc() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_764_415_800);
        assert_eq!(utc_date(t), "2025-11-29 11:30 UTC");
        assert_eq!(utc_date(std::time::UNIX_EPOCH), "1970-01-01 00:00 UTC");
    }

    #[test]
    fn scenarios_against_etcd_or_redis_name_the_feature_they_need() {
        for s in [Scenario::Data, Scenario::Disk, Scenario::Scale, Scenario::Watch] {
            assert!(check_baselines(s).is_ok(), "{s:?} needs no baseline feature");
        }
        for s in [Scenario::Meta, Scenario::Small, Scenario::Failover, Scenario::All] {
            let refused = check_baselines(s).err();
            assert_eq!(refused.is_none(), cfg!(feature = "baselines"), "{s:?}");
            if let Some(e) = refused {
                assert!(e.to_string().contains("`baselines` feature"), "{e}");
            }
        }
    }

    #[test]
    fn targets_say_whether_they_are_met() {
        let mut t = targets_table();
        target_row(&mut t, "a", Some(0.95), 0.9, true, 2);
        target_row(&mut t, "b", Some(6.0), 5.0, false, 1);
        target_row(&mut t, "c", None, 1.0, true, 1);
        bound_row(&mut t, "d", Some(0.5), 2);
        let j = t.json();
        assert_eq!(j["rows"][0]["met"], "yes");
        assert_eq!(j["rows"][1]["met"], "no");
        assert_eq!(j["rows"][2]["met"], "-");
        assert_eq!((&j["rows"][3]["goal"], &j["rows"][3]["met"]), (&"bound".into(), &"-".into()));
    }
}
