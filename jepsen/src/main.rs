//! `mooncake-jepsen`: chaos runs against real masters and store nodes in
//! network namespaces. `run` one scenario, `suite --ci` the CI set, `soak`
//! many runs. Needs root. Every run prints its seed and results directory;
//! rerunning with `--seed` replays the same fault schedule and op mix.
//! The hidden `stall-writer` subcommand is a process the harness starts
//! itself (`stalled-writers` scenario), never run by hand.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mooncake_jepsen::access::Access;
use mooncake_jepsen::report::RunReport;
use mooncake_jepsen::runner::{self, RunOptions};
use mooncake_jepsen::scenario::{self, Scenario};
use mooncake_jepsen::stall_writer::{self, StallWriterOptions};

#[derive(Parser)]
#[command(name = "mooncake-jepsen", version, about = "Chaos harness for mooncake-rs (needs root)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// Operations per second across all clients.
    #[arg(long, default_value_t = 200)]
    rate: u64,
    /// Concurrent logical clients.
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// Where reports go.
    #[arg(long, default_value = "jepsen-results")]
    results: PathBuf,
    /// The `mooncake` binary (default: next to this one).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// DEVELOPMENT ONLY: pass a deliberately unsafe flag to every master
    /// (`--dev-unsafe-stale-reads`, `--dev-unsafe-no-fsync`,
    /// `--dev-unsafe-unfenced-removals`, `--dev-unsafe-arena-reuse`,
    /// `--dev-unsafe-chunk-reuse`, `--dev-unsafe-hold-freed-ranges` or
    /// `--dev-unsafe-expire-after-stall`) to show the checkers catch the
    /// bug. Never part of a real run.
    #[arg(long = "master-flag")]
    master_flags: Vec<String>,
    /// DEVELOPMENT ONLY: pass a deliberately unsafe flag to the workload's
    /// store nodes (`--dev-unsafe-unwritten-copies`) to show the checkers
    /// catch the bug. Never part of a real run.
    #[arg(long = "store-flag")]
    store_flags: Vec<String>,
    /// Objects preloaded (metadata only) by scenarios with a large state
    /// (`large-state`), at least (the fake segment is filled up: ~1.5 % more).
    #[arg(long, default_value_t = mooncake_jepsen::preload::PRELOAD_OBJECTS_DEFAULT)]
    preload_objects: u64,
    /// Run masters, store nodes and every client of the harness without
    /// TLS (plain TCP, servers `--insecure`), to compare with the default:
    /// mutual TLS with a PKI made in each run's dir.
    #[arg(long)]
    no_tls: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one scenario.
    Run {
        #[arg(long)]
        scenario: Scenario,
        /// Seed of every random choice (default: from the clock, printed).
        #[arg(long)]
        seed: Option<u64>,
        /// Length of the workload, e.g. 60s or 2m.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        time: Duration,
        #[command(flatten)]
        common: Common,
    },
    /// Run a set of scenarios and print a table; exits non-zero on any violation.
    Suite {
        /// The CI set (`scenario::CI_SUITE`: 18 scenarios, 30 s each; `large-state` preloads first).
        #[arg(long)]
        ci: bool,
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        time: Duration,
        #[arg(long)]
        seed: Option<u64>,
        #[command(flatten)]
        common: Common,
    },
    /// Many runs of random scenarios with fresh seeds.
    Soak {
        #[arg(long, default_value_t = 10)]
        runs: u32,
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        time: Duration,
        #[command(flatten)]
        common: Common,
    },
    /// A client that stops itself (SIGSTOP) between the two halves of its
    /// puts' writes; the harness starts it, continues it and kills it.
    #[command(hide = true)]
    StallWriter(StallWriterArgs),
}

/// The stall writer's command line (see `stall_writer.rs`).
#[derive(clap::Args)]
struct StallWriterArgs {
    #[arg(long, value_delimiter = ',', required = true)]
    masters: Vec<String>,
    /// This host's address, as the store nodes reach it.
    #[arg(long)]
    local_hostname: String,
    #[arg(long)]
    key_prefix: String,
    #[arg(long)]
    first_value: u64,
    #[arg(long)]
    seed: u64,
    #[arg(long, default_value_t = stall_writer::STALL_OBJECT_BYTES)]
    object_bytes: usize,
    #[arg(long, default_value_t = stall_writer::STALL_PUTS_PER_ROUND)]
    puts_per_stall: usize,
    /// The run's client certificate (none: plain TCP).
    #[command(flatten)]
    tls: mooncake_tls::TlsArgs,
}

/// Runs the stall writer until it is killed.
fn stall_writer_main(args: StallWriterArgs) -> anyhow::Result<()> {
    let access = match args.tls.load()? {
        Some(tls) => Access::tls(tls),
        None => Access::plain(),
    };
    let opts = StallWriterOptions {
        access,
        masters: args.masters,
        local_hostname: args.local_hostname,
        key_prefix: args.key_prefix,
        first_value: args.first_value,
        seed: args.seed,
        object_bytes: args.object_bytes,
        puts_per_stall: args.puts_per_stall,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(stall_writer::run(opts))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("{s:?}: use e.g. 30s, 5m"))?;
    match unit {
        "" | "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("{s:?}: unit must be s, m or h")),
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
}

fn options(common: &Common, scenario: Scenario, seed: u64, time: Duration) -> anyhow::Result<RunOptions> {
    let bin = match &common.bin {
        Some(b) => b.clone(),
        None => mooncake_local_cluster::find_binary("mooncake").map_err(anyhow::Error::msg)?,
    };
    Ok(RunOptions {
        scenario,
        seed,
        duration: time,
        rate: common.rate,
        clients: common.clients,
        bin,
        harness_bin: std::env::current_exe()?,
        results_root: common.results.clone(),
        master_flags: common.master_flags.clone(),
        store_flags: common.store_flags.clone(),
        prefix: format!("mcj{}", std::process::id() % 100_000),
        preload_objects: common.preload_objects,
        tls: !common.no_tls,
    })
}

fn table(reports: &[Result<RunReport, (Scenario, u64, String)>]) -> String {
    let mut s = format!(
        "\n{:<16} {:>20} {:>7} {:>6} {:>7} {:>7}  {:<43}  {:<22}  {}\n",
        "SCENARIO",
        "SEED",
        "OPS",
        "OK",
        "FAILED",
        "UNKNOWN",
        "LEASES found/rm/refused/RA/evict/copies/bad",
        "BYTES obj/replicas/bad",
        "VERDICT"
    );
    for r in reports {
        match r {
            Ok(r) => {
                let bad: Vec<&str> = r.checkers.iter().filter(|c| !c.valid).map(|c| c.checker.as_str()).collect();
                let verdict = if r.valid { "pass".to_string() } else { format!("FAIL ({})", bad.join(", ")) };
                let (l, k) = (&r.kv_leases.counts, &r.kv_leases);
                let leases = format!(
                    "{}/{}/{}/{}/{}/{}/{}",
                    l.reads_found,
                    l.removes_ok,
                    l.removes_refused,
                    l.removed_by_remove_all,
                    k.evicted_objects,
                    l.copies_verified,
                    k.violations
                );
                let b = &r.committed_bytes;
                let bytes = format!("{}/{}/{}", b.objects, b.replicas, b.corrupt);
                s += &format!(
                    "{:<16} {:>20} {:>7} {:>6} {:>7} {:>7}  {leases:<43}  {bytes:<22}  {verdict}\n",
                    r.scenario, r.seed, r.ops, r.ok, r.failed, r.unknown
                );
            }
            Err((sc, seed, e)) => {
                s += &format!(
                    "{:<16} {:>20} {:>7} {:>6} {:>7} {:>7}  {:<43}  {:<22}  ERROR: {e}\n",
                    sc.name(),
                    seed,
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-"
                )
            }
        }
    }
    s
}

/// The first problems of every failed checker, after the table: a CI log that
/// keeps only its tail still says why a scenario failed, not just which.
fn failure_reasons(reports: &[Result<RunReport, (Scenario, u64, String)>]) -> String {
    const SHOWN: usize = 3;
    let mut s = String::new();
    for r in reports.iter().filter_map(|r| r.as_ref().ok()).filter(|r| !r.valid) {
        for c in r.checkers.iter().filter(|c| !c.valid) {
            s += &format!("{} seed {} {}:\n", r.scenario, r.seed, c.checker);
            for p in c.problems.iter().take(SHOWN) {
                s += &format!("  {p}\n");
            }
            if c.problems.len() > SHOWN {
                s += &format!("  ... {} more in {}\n", c.problems.len() - SHOWN, r.dir.join("summary.txt").display());
            }
        }
    }
    s
}

fn run_one(opts: RunOptions) -> Result<RunReport, (Scenario, u64, String)> {
    let (sc, seed) = (opts.scenario, opts.seed);
    match runner::run(opts) {
        Ok(r) => {
            eprint!("{}", r.summary());
            eprintln!("report: {}", r.dir.join("timeline.html").display());
            Ok(r)
        }
        Err(e) => {
            eprintln!("run {sc} seed {seed} failed: {e:#}");
            Err((sc, seed, format!("{e:#}")))
        }
    }
}

fn install_ctrl_c() {
    // A dedicated thread waits for SIGINT/SIGTERM and cleans up what the
    // harness created before exiting: processes, namespaces, route, mounts.
    std::thread::spawn(|| {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(mut term) = signal(SignalKind::terminate()) else { return };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        eprintln!("\ninterrupted: killing the cluster and removing the test network");
        mooncake_jepsen::registry::kill_all();
        let prefix = format!("mcj{}", std::process::id() % 100_000);
        let _ = mooncake_jepsen::net::cleanup_leftovers(&prefix);
        mooncake_jepsen::registry::unmount_all_under(std::path::Path::new("."));
        std::process::exit(130);
    });
}

/// Raises this process's soft descriptor limit to its hard limit: the
/// `fd-flood` scenario holds thousands of connections from here.
fn raise_fd_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a live rlimit value for both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                tracing::warn!("could not raise the descriptor limit: {}", std::io::Error::last_os_error());
            }
        }
    }
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,mooncake_jepsen=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    mooncake_jepsen::safety::require_root()?;
    raise_fd_limit();
    let cli = Cli::parse();
    if !matches!(cli.cmd, Cmd::StallWriter(_)) {
        install_ctrl_c();
    }
    let (reports, violations, tls) = match cli.cmd {
        Cmd::StallWriter(args) => return stall_writer_main(args),
        Cmd::Run { scenario, seed, time, common } => {
            let seed = seed.unwrap_or_else(clock_seed);
            let r = run_one(options(&common, scenario, seed, time)?);
            let bad = !matches!(&r, Ok(r) if r.valid);
            (vec![r], bad, !common.no_tls)
        }
        Cmd::Suite { ci, time, seed, common } => {
            let set: Vec<Scenario> = if ci { scenario::CI_SUITE.to_vec() } else { scenario::runnable() };
            let base = seed.unwrap_or_else(clock_seed);
            let mut out = Vec::new();
            for (i, sc) in set.iter().enumerate() {
                out.push(run_one(options(&common, *sc, base.wrapping_add(i as u64), time)?));
            }
            let bad = out.iter().any(|r| !matches!(r, Ok(r) if r.valid));
            (out, bad, !common.no_tls)
        }
        Cmd::Soak { runs, time, common } => {
            let mut rng = mooncake_jepsen::rng::Rng::new(clock_seed());
            let mut out = Vec::new();
            for _ in 0..runs {
                let sc = *rng.pick(&scenario::runnable()).unwrap_or(&Scenario::Mixed);
                out.push(run_one(options(&common, sc, rng.next_u64(), time)?));
            }
            let bad = out.iter().any(|r| !matches!(r, Ok(r) if r.valid));
            (out, bad, !common.no_tls)
        }
    };
    println!("{}", table(&reports));
    print!("{}", failure_reasons(&reports));
    let passed = reports.iter().filter(|r| matches!(r, Ok(r) if r.valid)).count();
    let transport = if tls { "mutual TLS" } else { "plain TCP (--no-tls)" };
    println!("{passed} passed, {} failed ({transport})", reports.len() - passed);
    if violations {
        std::process::exit(1);
    }
    Ok(())
}
