//! The reference baseline: upstream Mooncake 0.3.13 (kvcache-ai), the PyPI
//! wheel `mooncake-transfer-engine-non-cuda`, measured in the same run as
//! ours on the same sizes and client counts.
//!
//! [`Venv`] finds or creates a Python venv with the wheel: the directory in
//! `MOONCAKE_UPSTREAM_VENV` if set, else a per-user cache directory; the
//! first run creates it with `python3 -m venv` and pip (progress on stderr),
//! later runs reuse it. Without python3, venv, pip, PyPI or the wheel's
//! shared libraries (`libibverbs1 librdmacm1 ibverbs-providers libnuma1` on
//! Debian) the scenarios skip this baseline with [`INSTALL_HINT`], as they
//! do for etcd and Redis.
//!
//! [`Upstream`] runs, on free 127.0.0.1 ports in its own temporary directory
//! (logs, the driver script): one `mooncake_master` with its built-in HTTP
//! metadata server (no etcd, no HA: upstream's fastest setup, nothing
//! replicated or fsynced), one *store* process that contributes a segment,
//! and one *client* process per concurrent client (processes, not threads:
//! threads of one Python process queue on the GIL and upstream's put falls
//! from ~5,000/s at 1 thread to ~300/s at 16). All speak TCP. Each client
//! runs the timed loop itself in `upstream_driver.py` (next to this file)
//! and answers one JSON line per job, so no hop between Rust and Python is
//! timed. Everything is SIGKILLed and removed on drop, also on error.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::Ctx;
use crate::baseline::{Proc, find_program, free_port, wait_until};
use crate::report::{Cell, Column, Section};
use crate::stats::{Budget, Samples};
use crate::trace::file::Request;
use crate::trace::outcome::Outcome;
use crate::trace::replay::Shape;

/// The pip requirement: 0.3.13 and its post-releases (PyPI serves 0.3.13.post1).
pub const WHEEL: &str = "mooncake-transfer-engine-non-cuda==0.3.13.*";
/// The wheel's distribution name (for its version).
const DIST: &str = "mooncake-transfer-engine-non-cuda";
/// Environment variable naming the venv to use (created there if missing).
pub const VENV_ENV: &str = "MOONCAKE_UPSTREAM_VENV";

/// What to do when the baseline cannot run.
pub const INSTALL_HINT: &str = "to measure upstream Mooncake: `apt-get install python3-venv libibverbs1 librdmacm1 \
     ibverbs-providers libnuma1` and PyPI access (the bench pip-installs mooncake-transfer-engine-non-cuda into \
     ~/.cache/mooncake-rs, or into $MOONCAKE_UPSTREAM_VENV)";

/// The driver script, written into the temporary directory of every run.
const DRIVER_PY: &str = include_str!("upstream_driver.py");

/// Concurrent clients at most (one Python process each, ~100 MB of memory).
pub const CLIENTS_MAX: usize = 16;
/// `python3 -m venv`, at most.
const VENV_TIMEOUT: Duration = Duration::from_secs(120);
/// `pip install` of the wheel (a 46 MB download) and its dependencies, at most.
const PIP_TIMEOUT: Duration = Duration::from_secs(600);
/// Importing the wheel to check its shared libraries, at most.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// The master listening, or a store or client process set up, at most.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// A job's answer may take its hard time limit (twice its budget) plus this.
const JOB_SLACK: Duration = Duration::from_secs(30);
/// `remove_all` of whatever a phase left, at most.
const CLEAR_TIMEOUT: Duration = Duration::from_secs(60);
/// One answer line of a client, at most: the latencies of up to ~5 M ops.
const REPLY_MAX_BYTES: u64 = 64 << 20;
/// What `data` and `small` pre-fault of the segment: they keep at most
/// 512 MiB stored at once, and the allocator needs slack (this stays under
/// upstream's 90 % eviction watermark of a 768 MiB segment).
pub const WARM_BYTES: u64 = 640 << 20;
/// Pre-faulting the store's segment by writing objects of this size.
const WARM_OBJECT_BYTES: usize = 4 << 20;
/// Pre-faulting the store's segment, at most (a put phase's hard limit is twice this).
const WARM_TIME: Duration = Duration::from_secs(5);

/// A venv with the wheel installed.
#[derive(Clone, Debug)]
pub struct Venv {
    dir: PathBuf,
    /// The wheel's version as pip installed it (e.g. `0.3.13.post1`).
    pub version: String,
}

/// The venv of this run, found or installed once (a failure is kept too:
/// later scenarios skip at once instead of running pip again).
static VENV: tokio::sync::OnceCell<Result<Venv, String>> = tokio::sync::OnceCell::const_new();

impl Venv {
    /// The venv, installed on first use; `Err` says why the baseline is skipped.
    pub async fn get(ctx: &mut Ctx) -> Result<Venv, String> {
        VENV.get_or_init(|| Venv::find_or_install(ctx)).await.clone()
    }

    async fn find_or_install(ctx: &mut Ctx) -> Result<Venv, String> {
        let dir = venv_dir().ok_or("neither $MOONCAKE_UPSTREAM_VENV, $XDG_CACHE_HOME nor $HOME is set")?;
        let venv = Venv { dir, version: String::new() };
        if let Ok(version) = venv.check().await {
            return Ok(Venv { version, ..venv });
        }
        let python = find_program("python3").ok_or("python3 not found")?;
        ctx.progress.say(&format!(
            "upstream: installing {WHEEL} into {} (once: later runs reuse the venv)",
            venv.dir.display()
        ));
        let mut cmd = Command::new(&python);
        cmd.arg("-m").arg("venv").arg(&venv.dir);
        run_to_stderr(cmd, VENV_TIMEOUT).await.map_err(|e| format!("`python3 -m venv` failed: {e:#}"))?;
        let mut cmd = Command::new(venv.python());
        cmd.args(["-m", "pip", "install", "--progress-bar", "off", "--disable-pip-version-check", WHEEL]);
        run_to_stderr(cmd, PIP_TIMEOUT).await.map_err(|e| format!("pip install {WHEEL} failed: {e:#}"))?;
        let version = venv.check().await?;
        ctx.progress.say(&format!("upstream: installed {DIST} {version}"));
        Ok(Venv { version, ..venv })
    }

    fn python(&self) -> PathBuf {
        self.dir.join("bin").join("python")
    }

    fn master(&self) -> PathBuf {
        self.dir.join("bin").join("mooncake_master")
    }

    /// Imports the wheel (which loads its shared libraries); its version.
    async fn check(&self) -> Result<String, String> {
        if !self.python().is_file() || !self.master().is_file() {
            return Err(format!("no venv with the wheel in {}", self.dir.display()));
        }
        let script = format!("import importlib.metadata, mooncake.store; print(importlib.metadata.version('{DIST}'))");
        let mut cmd = Command::new(self.python());
        cmd.arg("-c").arg(script).stdin(Stdio::null()).kill_on_drop(true);
        let out = match tokio::time::timeout(CHECK_TIMEOUT, cmd.output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(format!("running {}: {e}", self.python().display())),
            Err(_) => return Err(format!("importing the wheel took over {CHECK_TIMEOUT:?}")),
        };
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            return Err(format!("importing mooncake.store failed: {}", err.lines().last().unwrap_or("no output")));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

fn venv_dir() -> Option<PathBuf> {
    venv_dir_in(|k| std::env::var_os(k))
}

/// `$MOONCAKE_UPSTREAM_VENV`, else `$XDG_CACHE_HOME` or `~/.cache`, `/mooncake-rs/upstream-venv-0.3.13`.
fn venv_dir_in(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let nonempty = |k: &str| env(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = nonempty(VENV_ENV) {
        return Some(dir);
    }
    let cache = nonempty("XDG_CACHE_HOME").or_else(|| nonempty("HOME").map(|h| h.join(".cache")))?;
    Some(cache.join("mooncake-rs").join("upstream-venv-0.3.13"))
}

/// Runs `cmd` with its output on our stderr (stdout may carry `--json`), bounded in time.
async fn run_to_stderr(mut cmd: Command, timeout: Duration) -> anyhow::Result<()> {
    use std::os::fd::AsFd;
    let err = || -> anyhow::Result<Stdio> { Ok(Stdio::from(std::io::stderr().as_fd().try_clone_to_owned()?)) };
    cmd.stdin(Stdio::null()).stdout(err()?).stderr(err()?).kill_on_drop(true);
    let mut child = cmd.spawn().context("starting it")?;
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => {
            let status = status?;
            anyhow::ensure!(status.success(), "it exited with {status}");
            Ok(())
        }
        Err(_) => anyhow::bail!("it took over {timeout:?}"),
    }
}

/// Starts the baseline for a scenario, or notes why not (the scenario goes on
/// without it). `warm_bytes` of the segment are written once and freed, so
/// the measured puts do not pay its first page faults (ours are pre-faulted).
pub async fn start_for(ctx: &mut Ctx, section: &mut Section, segment_bytes: u64, warm_bytes: u64) -> Option<Upstream> {
    let name = section.name.clone();
    let skip = |ctx: &mut Ctx, section: &mut Section, why: String| {
        let msg = format!("upstream Mooncake baseline skipped: {why}");
        ctx.progress.say(&format!("{name}: {msg}"));
        section.note(msg);
    };
    let venv = match Venv::get(ctx).await {
        Ok(v) => v,
        Err(why) => {
            skip(ctx, section, format!("{why}; {INSTALL_HINT}"));
            return None;
        }
    };
    ctx.progress.step(&format!("{name}: starting upstream Mooncake {} (master, store)", venv.version));
    let started = async {
        let mut up = Upstream::start(&venv, segment_bytes).await?;
        if warm_bytes > 0 {
            ctx.progress.step(&format!("{name}: upstream: pre-faulting {} MiB of its segment", warm_bytes >> 20));
            up.warm(warm_bytes).await?;
        }
        anyhow::Ok(up)
    };
    match started.await {
        Ok(up) => Some(up),
        Err(e) => {
            skip(ctx, section, format!("{e:#}"));
            None
        }
    }
}

/// Runs `f` on the baseline if it is up. A failure is noted and ends the
/// baseline for the rest of the scenario (its processes go at once); failed
/// upstream operations are reported but, unlike ours, do not fail the run.
pub async fn measure<T, F>(
    ctx: &mut Ctx,
    section: &mut Section,
    up: &mut Option<Upstream>,
    what: &str,
    f: F,
) -> Option<T>
where
    T: Measured,
    F: AsyncFnOnce(&mut Upstream) -> anyhow::Result<T>,
{
    let u = up.as_mut()?;
    ctx.progress.step(&format!("{}: upstream {what}", section.name));
    match f(u).await {
        Ok(out) => {
            for s in out.samples().into_iter().filter(|s| s.errors > 0) {
                let first = s.error_texts.first().map_or("", String::as_str);
                let msg = format!("upstream {what}: {} keys failed, first: {first}", s.errors);
                ctx.progress.say(&format!("{}: {msg}", section.name));
                section.note(msg);
            }
            Some(out)
        }
        Err(e) => {
            let msg = format!("upstream baseline stopped at {what}: {e:#}");
            ctx.progress.say(&format!("{}: {msg}", section.name));
            section.note(msg);
            *up = None;
            None
        }
    }
}

/// The upstream columns of a results table: `rate` (its key and header),
/// p50, p99, and `/up`, ours over its rate.
pub fn columns(rate: (&'static str, &'static str)) -> Vec<Column> {
    crate::report::cols(&[
        rate,
        ("upstream_p50_ms", "up p50"),
        ("upstream_p99_ms", "up p99"),
        ("upstream_ratio", "/up"),
    ])
}

/// The cells of [`columns`]: `rate` of upstream's samples, if measured, with
/// `decimals` (of the rate, of the latencies), and `ours` over it.
pub fn cells(ours: f64, up: Option<&Samples>, rate: fn(&Samples) -> f64, decimals: (usize, usize)) -> [Cell; 4] {
    let (rate_dp, ms_dp) = decimals;
    [
        Cell::opt(up.map(rate), rate_dp),
        Cell::opt(up.map(Samples::p50_ms), ms_dp),
        Cell::opt(up.map(Samples::p99_ms), ms_dp),
        Cell::opt(crate::stats::ratio(ours, up.map(rate)), 2),
    ]
}

/// What [`measure`] returns: results made of [`Samples`].
pub trait Measured {
    fn samples(&self) -> Vec<&Samples>;
}

impl<const N: usize> Measured for [Samples; N] {
    fn samples(&self) -> Vec<&Samples> {
        self.iter().collect()
    }
}

impl<K> Measured for std::collections::BTreeMap<K, Samples> {
    fn samples(&self) -> Vec<&Samples> {
        self.values().collect()
    }
}

/// One operation of the driver (see `upstream_driver.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `put_from` a registered buffer.
    Put,
    /// `batch_put_session_start` + `batch_put_session_end` of one key: a put's
    /// two master calls with no bytes moved.
    PutMeta,
    /// `get_into` a registered buffer.
    Get,
    /// `get_replica_desc`: the replica list alone.
    ReplicaDesc,
    /// `is_exist`.
    Exist,
    /// `remove(key, force=True)`.
    Remove,
    /// `batch_put_from` of a batch of keys.
    BatchPut,
    /// `batch_get_into` of a batch of keys.
    BatchGet,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::PutMeta => "put_meta",
            Op::Get => "get",
            Op::ReplicaDesc => "replica_desc",
            Op::Exist => "exist",
            Op::Remove => "remove",
            Op::BatchPut => "batch_put",
            Op::BatchGet => "batch_get",
        }
    }
}

/// What every client of a phase does: keys `prefix/<client>/<i>` of `size`
/// bytes, `batch` keys per op, within `budget` (per client).
#[derive(Clone, Debug)]
pub struct Load {
    pub prefix: String,
    pub size: usize,
    pub batch: usize,
    pub budget: Budget,
}

/// A running upstream deployment; every process is killed and the directory
/// removed on drop (fields drop in order: processes first).
pub struct Upstream {
    clients: Vec<Driver>,
    _store: Driver,
    _master: Proc,
    paths: Paths,
    dir: tempfile::TempDir,
}

/// Where the processes find each other.
struct Paths {
    python: PathBuf,
    driver: PathBuf,
    master_addr: String,
    metadata_url: String,
}

impl Upstream {
    /// Starts the master and a store process contributing `segment_bytes`.
    pub async fn start(venv: &Venv, segment_bytes: u64) -> anyhow::Result<Upstream> {
        let dir = tempfile::Builder::new().prefix("mooncake-bench-upstream-").tempdir()?;
        let driver = dir.path().join("upstream_driver.py");
        std::fs::write(&driver, DRIVER_PY).with_context(|| format!("writing {}", driver.display()))?;
        let (rpc, http, metrics) = (free_port()?, free_port()?, free_port()?);
        let args: Vec<String> = [
            format!("--rpc_port={rpc}"),
            "--rpc_address=127.0.0.1".into(),
            "--enable_http_metadata_server=true".into(),
            format!("--http_metadata_server_port={http}"),
            "--http_metadata_server_host=127.0.0.1".into(),
            format!("--metrics_port={metrics}"),
            "--metrics_host=127.0.0.1".into(),
            "--logtostderr=true".into(),
        ]
        .into();
        let mut master = Proc::start("upstream mooncake_master", &venv.master(), args, dir.path().join("master.log"))?;
        let listening = || async move { connects(rpc).await && connects(http).await };
        if let Err(e) = wait_until("upstream mooncake_master to listen", START_TIMEOUT, listening).await {
            master.check_alive()?;
            return Err(e);
        }
        let paths = Paths {
            python: venv.python(),
            driver,
            master_addr: format!("127.0.0.1:{rpc}"),
            metadata_url: format!("http://127.0.0.1:{http}/metadata"),
        };
        let mut store = Driver::spawn(&paths, dir.path(), "store", segment_bytes, 0)?;
        store.ready().await?;
        Ok(Upstream { clients: Vec::new(), _store: store, _master: master, paths, dir })
    }

    /// Starts client processes until there are `n`.
    async fn ensure_clients(&mut self, n: usize) -> anyhow::Result<()> {
        anyhow::ensure!(n <= CLIENTS_MAX, "{n} upstream clients asked, at most {CLIENTS_MAX}");
        let first = self.clients.len();
        for i in first..n {
            self.clients.push(Driver::spawn(&self.paths, self.dir.path(), "client", 0, i)?);
        }
        for c in &mut self.clients[first..] {
            c.ready().await?;
        }
        Ok(())
    }

    /// `op` on `clients` client processes at once; client `w` reads the first
    /// `stored[w]` objects (writes ignore it). Returns the merged samples and
    /// the ops each client did.
    pub async fn phase(
        &mut self,
        op: Op,
        clients: usize,
        load: &Load,
        stored: &[u64],
    ) -> anyhow::Result<(Samples, Vec<u64>)> {
        self.ensure_clients(clients).await?;
        for (w, c) in self.clients[..clients].iter_mut().enumerate() {
            let job = json!({
                "op": op.name(),
                "prefix": load.prefix,
                "client": w,
                "size": load.size,
                "batch": load.batch,
                "ops_min": load.budget.ops_min,
                "ops_max": load.budget.ops_max,
                "time_s": load.budget.time.as_secs_f64(),
                "stored": stored.get(w).copied().unwrap_or(0),
            });
            c.send(&job).await?;
        }
        let timeout = load.budget.time * 2 + JOB_SLACK;
        let mut total = Samples::default();
        let mut done = Vec::with_capacity(clients);
        for c in &mut self.clients[..clients] {
            let r: Reply = serde_json::from_value(c.reply(timeout).await?).context("an upstream driver's answer")?;
            done.push(r.done);
            total.merge(r.samples());
        }
        Ok((total, done))
    }

    /// Puts with `put` (at most `put_ops_max` per client), reads them back
    /// with `get`, then removes everything. Returns [put, get].
    pub async fn put_get(
        &mut self,
        (put, get): (Op, Op),
        clients: usize,
        load: &Load,
        put_ops_max: u64,
    ) -> anyhow::Result<[Samples; 2]> {
        let budget = Budget { ops_max: load.budget.ops_max.min(put_ops_max), ..load.budget };
        let (put, stored) = self.phase(put, clients, &Load { budget, ..load.clone() }, &[]).await?;
        let (get, _) = self.phase(get, clients, load, &stored).await?;
        self.clear().await?;
        Ok([put, get])
    }

    /// Replays `shares[w]` (requests of a trace) on client process `w`, all
    /// at once (`trace_job` of the driver); their outcomes, waiting at most
    /// `timeout` for each.
    pub async fn trace(
        &mut self,
        shares: &[Vec<&Request>],
        shape: Shape,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Outcome>> {
        self.ensure_clients(shares.len()).await?;
        for (c, share) in self.clients.iter_mut().zip(shares) {
            let requests: Vec<(u64, &[u64])> = share.iter().map(|r| (r.timestamp_ms, r.blocks.as_slice())).collect();
            let job = json!({
                "op": "trace",
                "requests": requests,
                "block_bytes": shape.block_bytes,
                "speedup": shape.speedup,
                "mode": shape.mode.name(),
            });
            c.send(&job).await?;
        }
        let mut out = Vec::with_capacity(shares.len());
        for c in &mut self.clients[..shares.len()] {
            out.push(serde_json::from_value(c.reply(timeout).await?).context("an upstream driver's trace answer")?);
        }
        Ok(out)
    }

    /// `remove_all(force=True)`.
    pub async fn clear(&mut self) -> anyhow::Result<()> {
        self.ensure_clients(1).await?;
        self.clients[0].send(&json!({"op": "clear"})).await?;
        self.clients[0].reply(CLEAR_TIMEOUT).await.map(drop)
    }

    /// Writes `bytes` of objects once and removes them: the store's segment
    /// gets its page faults before anything is measured.
    async fn warm(&mut self, bytes: u64) -> anyhow::Result<()> {
        let ops = bytes / WARM_OBJECT_BYTES as u64;
        let budget = Budget { ops_min: ops, ops_max: ops, time: WARM_TIME };
        let load = Load { prefix: "bench/upstream-warm".into(), size: WARM_OBJECT_BYTES, batch: 1, budget };
        let (s, _) = self.phase(Op::Put, 1, &load, &[]).await?;
        anyhow::ensure!(s.errors == 0, "pre-faulting the segment: {:?}", s.error_texts);
        self.clear().await
    }
}

async fn connects(port: u16) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}

/// One answer to a measuring job.
#[derive(Debug, Deserialize)]
struct Reply {
    lat_ns: Vec<u64>,
    done: u64,
    keys: u64,
    bytes: u64,
    errors: u64,
    error_texts: Vec<String>,
    wall_ns: u64,
}

impl Reply {
    fn samples(self) -> Samples {
        let mut s = Samples::default();
        for ns in self.lat_ns {
            s.ok(Duration::from_nanos(ns), 0, 0);
        }
        s.bytes = self.bytes;
        s.items = self.keys;
        s.errors = self.errors;
        s.error_texts = self.error_texts;
        s.wall = Duration::from_nanos(self.wall_ns);
        s
    }
}

/// A Python process running `upstream_driver.py`: JSON lines in and out,
/// its log in the temporary directory, SIGKILLed on drop.
struct Driver {
    name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    log: PathBuf,
}

impl Driver {
    fn spawn(paths: &Paths, dir: &Path, role: &str, segment_bytes: u64, index: usize) -> anyhow::Result<Driver> {
        let name = format!("upstream {role} {index}");
        let log = dir.join(format!("{role}-{index}.log"));
        let log_file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut child = Command::new(&paths.python)
            .arg(&paths.driver)
            .args([role, &paths.master_addr, &paths.metadata_url, &segment_bytes.to_string()])
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let stdin = child.stdin.take().context("driver stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("driver stdout")?);
        Ok(Driver { name, child, stdin, stdout, log })
    }

    /// Waits for the line that says setup is done.
    async fn ready(&mut self) -> anyhow::Result<()> {
        self.reply(START_TIMEOUT).await.map(drop)
    }

    async fn send(&mut self, job: &serde_json::Value) -> anyhow::Result<()> {
        let mut line = job.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).await.with_context(|| format!("sending a job to {}", self.name))?;
        Ok(self.stdin.flush().await?)
    }

    /// The next answer line, parsed; `{"error": …}` becomes `Err`.
    async fn reply(&mut self, timeout: Duration) -> anyhow::Result<serde_json::Value> {
        let mut line = String::new();
        let mut bounded = (&mut self.stdout).take(REPLY_MAX_BYTES);
        let n = match tokio::time::timeout(timeout, bounded.read_line(&mut line)).await {
            Ok(r) => r.with_context(|| format!("reading from {}", self.name))?,
            Err(_) => anyhow::bail!("{} did not answer within {timeout:?}", self.name),
        };
        if n == 0 {
            let _ = self.check_alive();
            anyhow::bail!(
                "{} closed its output; last lines of {}:\n{}",
                self.name,
                self.log.display(),
                self.log_tail()
            );
        }
        anyhow::ensure!(line.ends_with('\n'), "{} answered over {REPLY_MAX_BYTES} bytes", self.name);
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{} answered {line:?}", self.name))?;
        if let Some(e) = v.get("error") {
            anyhow::bail!("{}: {e}; last lines of {}:\n{}", self.name, self.log.display(), self.log_tail());
        }
        Ok(v)
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        let exited = !matches!(self.child.try_wait(), Ok(None));
        anyhow::ensure!(!exited, "{} exited; last lines of {}:\n{}", self.name, self.log.display(), self.log_tail());
        Ok(())
    }

    fn log_tail(&self) -> String {
        crate::baseline::log_tail(&self.log, LOG_TAIL_LINES)
    }
}

/// Lines of a process log shown with an error.
const LOG_TAIL_LINES: usize = 15;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_become_samples() {
        let line = r#"{"lat_ns": [1000000, 3000000], "done": 3, "keys": 2, "bytes": 8192,
            "errors": 1, "error_texts": ["get k: returned -704"], "wall_ns": 2000000000}"#;
        let s = serde_json::from_str::<Reply>(line).unwrap().samples();
        assert_eq!((s.ops(), s.items, s.bytes, s.errors), (2, 2, 8192, 1));
        assert_eq!(s.quantile(0.99), Duration::from_millis(3));
        assert!((s.ops_per_s() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_venv_honours_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.into())
        };
        assert_eq!(venv_dir_in(env(&[(VENV_ENV, "/v"), ("HOME", "/h")])), Some("/v".into()));
        let cached = Some(PathBuf::from("/h/.cache/mooncake-rs/upstream-venv-0.3.13"));
        assert_eq!(venv_dir_in(env(&[(VENV_ENV, ""), ("HOME", "/h")])), cached);
        assert_eq!(venv_dir_in(env(&[("XDG_CACHE_HOME", "/x")])), Some("/x/mooncake-rs/upstream-venv-0.3.13".into()));
        assert_eq!(venv_dir_in(env(&[])), None);
    }

    #[test]
    fn the_driver_knows_every_op() {
        for op in [Op::Put, Op::PutMeta, Op::Get, Op::ReplicaDesc, Op::Exist, Op::Remove, Op::BatchPut, Op::BatchGet] {
            assert!(DRIVER_PY.contains(&format!("\"{}\"", op.name())), "{op:?}");
        }
    }
}
