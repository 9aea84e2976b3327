//! The system under test inside the harness's network: three masters (and a
//! spare for membership changes) and two store nodes, each a real `mooncake`
//! process in its own namespace, started, killed, paused, power-cut and
//! restarted from its data directory. By default every one of them, and
//! every client of the harness ([`Access`]), speaks mutual TLS with
//! certificates of a CA made for the run. Queries to the masters are made by the
//! caller from a thread inside the client namespace, never from the root one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use mooncake_tls::Role;

use crate::access::Access;
use crate::clock::FakeClock;
use crate::faults;
use crate::net::Network;
use crate::power::LoopFs;

/// gRPC port of every master (each has its own address).
pub const MASTER_PORT: u16 = 50051;
/// Metrics and health HTTP port of every master.
pub const MASTER_HTTP_PORT: u16 = 8081;
/// Transfer port of the store node.
pub const STORE_PORT: u16 = 7000;
/// Size of each power-loss filesystem image (XFS needs ≥ 300 MiB).
/// Environment variable that overrides the nodes' `RUST_LOG` (default
/// `info,openraft=warn`), to replay a failing seed with debug logs.
pub const NODE_LOG_ENV: &str = "MOONCAKE_JEPSEN_NODE_LOG";

const LOOP_IMAGE_BYTES: u64 = 320 * 1024 * 1024;
/// Client id of store node n is `STORE_CLIENT_ID + n` (stable, so a restart
/// replaces its segment at once).
pub const STORE_CLIENT_ID: u64 = 0x9000;
/// Memory of each store node: 256 lease objects (16 KiB). The lease
/// workload passes the eviction watermark within seconds, so eviction runs
/// the whole time; the register workload's objects (4 KiB, a few dozen
/// keys) fit many times over.
pub const STORE_SEGMENT_SIZE: &str = "4MiB";
/// [`STORE_SEGMENT_SIZE`] in bytes.
pub const STORE_SEGMENT_BYTES: u64 = 4 << 20;
/// Memory of each store node in the `stalled-writers` scenario (see
/// [`crate::scenario::Scenario::store_segment_size`]). Eviction (at a
/// quarter of it) does not start within a 30 s run there.
pub const STALLED_WRITERS_SEGMENT_SIZE: &str = "64MiB";
/// The masters' hot-key flags where the scenario replicates hot keys: a key
/// with one memory replica read twice within 2 s gets a second, dropped
/// once it goes 2 s without (and unleased). Both workloads put 2 replicas
/// on the 2 store nodes, so this acts on the keys a store node's expiry
/// left with one (the copies race repair's).
pub const HOT_KEY_FLAGS: &[&str] = &[
    "--dynamic_replication_mode=enforce",
    "--dynamic_replication_heat_window_seconds=2",
    "--dynamic_replication_admission_qps_threshold=1",
    "--dynamic_replication_max_memory_replicas=2",
];

/// The masters' `--default_kv_lease_ttl`: short, so leases run out (and
/// removes win) inside a run, long against the races (a few ms).
pub const KV_LEASE_TTL: Duration = Duration::from_millis(2000);
/// The masters' `--eviction_high_watermark_ratio`. Well below one half:
/// after the faulted store node restarts empty, eviction (of total usage)
/// starts long before the never-faulted one is full, so no put is placed
/// only on the node faults may kill; and low enough that eviction runs
/// between the lease workload's RemoveAlls.
pub const EVICTION_HIGH_WATERMARK_RATIO: f64 = 0.25;

/// The masters' `--eviction_ratio` (their default, pinned here): the share
/// of used bytes one eviction round frees at least.
pub const EVICTION_RATIO: f64 = 0.05;

/// The masters' `--client_ttl`: short, so expiry happens inside a run.
pub const CLIENT_TTL: Duration = Duration::from_secs(5);
/// The masters' `--put_start_discard_timeout_sec` (their default, pinned
/// here): a put unfinished this long frees its key. Far longer than a stall
/// writer's stall (`nemesis::STALL_HOLD` and the election before it).
pub const PUT_START_DISCARD_TIMEOUT: Duration = Duration::from_secs(30);
/// Disk segment of each store node in scenarios with disks
/// ([`ClusterOptions::disks`]): far more than a run copies to it (about
/// 1 MiB/s for both nodes), so disk eviction never runs in a CI run.
pub const STORE_DISK_SIZE: &str = "64MiB";
/// The store nodes' `--heartbeat-interval-ms` in scenarios with disks.
/// Chosen when copies reached a store node only in its Ping answers (at
/// most 16 a Ping: at the default 1 s the eager offload of the workloads'
/// puts, ~60 objects/s, fell behind). Copies now come by TakeCopies as soon
/// as they are planned; the interval is kept so runs stay comparable.
pub const DISK_STORE_HEARTBEAT: Duration = Duration::from_millis(200);
/// The masters' `--disk_replica_grace_sec` (their default, pinned here):
/// far longer than any run, so a store node's detached disk is always
/// attached again when it comes back, never dropped.
pub const DISK_REPLICA_GRACE: Duration = Duration::from_secs(600);

/// The masters' `--put_start_release_timeout_sec` (their default, pinned
/// here): how long a new leader leaves a deposed leader's arenas alone.
/// Far longer than any stall and than a 30 s run, so in the real build
/// nothing a stalled writer may still write into is ever granted again.
pub const PUT_START_RELEASE_TIMEOUT: Duration = Duration::from_secs(600);

/// How to start the cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The `mooncake` binary (runs `master` and `store`).
    pub bin: PathBuf,
    pub dir: PathBuf,
    /// Master data dirs on loop-mounted XFS, for power-loss faults.
    pub power_loss: bool,
    /// Masters run under libfaketime, for clock-skew faults.
    pub fake_clock: bool,
    /// Extra master flags (the deliberately broken builds).
    pub master_flags: Vec<String>,
    /// Extra flags of the workload's store nodes (`s1`, `s2`: a deliberately
    /// broken store node).
    pub store_flags: Vec<String>,
    pub segment_size: String,
    /// The masters' `--eviction_high_watermark_ratio` and `--eviction_ratio`
    /// ([`EVICTION_HIGH_WATERMARK_RATIO`] and [`EVICTION_RATIO`], but for
    /// a preloaded state: `preload::eviction_flags`).
    pub eviction: (f64, f64),
    /// Mutual TLS everywhere (a development PKI in `<dir>/tls`); off, the
    /// masters and store nodes run `--insecure` (plain TCP on the
    /// namespaces' private addresses).
    pub tls: bool,
    /// Store nodes also contribute a disk segment (`<dir>/store-<n>/disk.seg`,
    /// kept across their restarts), and the masters run `--enable_offload`
    /// and `--promotion_on_hit` (docs/TIERS.md).
    pub disks: bool,
    /// Store nodes serve UCX readers (`--ucx`, with TLS also
    /// `--ucx-trusted-fabric`: the namespaces are the harness's own), and
    /// every client of the harness reads over UCX (protocol `ucx`).
    pub ucx: bool,
    /// Store nodes keep their memory in /dev/shm files, which a restart
    /// re-attaches (`rolling-restart`); otherwise anonymous memory.
    pub shm_stores: bool,
    /// Masters replicate hot keys (`--dynamic_replication_mode enforce`,
    /// with thresholds a chaos workload reaches): their copies and the
    /// fenced drops of cooled replicas run under the faults.
    pub hot_keys: bool,
}

/// One process of the cluster.
struct Proc {
    host: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
}

/// The running cluster.
pub struct ChaosCluster {
    net: Arc<Network>,
    opts: ClusterOptions,
    masters: BTreeMap<u64, Proc>,
    /// Store node 1: the one faults may kill.
    store: Proc,
    /// Store node 2: never faulted (but by `disk-stores`, whose kills wait
    /// until nothing lives only in the victim's memory), so with two
    /// replicas every acknowledged object keeps a copy (a killed store node
    /// loses its memory).
    steady_store: Proc,
    loops: BTreeMap<u64, LoopFs>,
    clocks: BTreeMap<u64, FakeClock>,
    /// Masters that are voters now (membership faults change it).
    pub voters: Vec<u64>,
    /// Processes started under libfaketime: it leaves /dev/shm files named
    /// after the pid, removed at shutdown.
    faked_pids: Vec<u32>,
    /// The admin token of the cluster (its secret is made before any master
    /// starts, in `<dir>/cluster.secret`).
    admin_token: mooncake_auth::admin::AdminToken,
    /// The run's PKI (`<dir>/tls`), when TLS is on.
    tls_dir: Option<PathBuf>,
    /// How the harness's clients connect (the PKI's client certificate).
    access: Access,
    /// Leave the store nodes' disk files in place at shutdown: a failed or
    /// broken run's evidence. True until the runner saw the run pass.
    pub keep_disks: bool,
}

/// The cluster secret's file in the run's dir.
const SECRET_FILE: &str = "cluster.secret";
/// The run's PKI, in the run's dir: a CA and the certificates of masters
/// 1-4, the store nodes, the harness's clients and the admin.
const TLS_DIR: &str = "tls";
/// Masters the PKI issues certificates for: the three voters and the spare.
const TLS_MASTERS: u64 = 4;

/// Host name of master `id`.
pub fn master_host(id: u64) -> String {
    format!("m{id}")
}

impl ChaosCluster {
    /// Starts masters 1..=3 and the store node; master 4 is a spare.
    pub fn start(net: Arc<Network>, opts: ClusterOptions) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&opts.dir)?;
        let secret = mooncake_auth::ClusterSecret::create_file(&opts.dir.join(SECRET_FILE))?;
        let admin_token = mooncake_auth::admin::admin_token(&secret);
        let tls_dir = opts.tls.then(|| opts.dir.join(TLS_DIR));
        let access = match &tls_dir {
            Some(dir) => {
                // Every certificate carries `localhost`, the name clients
                // check servers against, so no host names are needed.
                mooncake_tls::generate(dir, TLS_MASTERS, &[]).context("generating the run's PKI")?;
                let files = mooncake_tls::TlsFiles::in_dir(dir, Role::Client);
                Access::tls(files.load().context("loading the harness's client certificate")?)
            }
            None => Access::plain(),
        };
        let access = if opts.ucx { access.with_protocol(mooncake_client::Protocol::Ucx) } else { access };
        let initial =
            (1..=3u64).map(|id| Ok(format!("{id}={}", master_addr(&net, id)?))).collect::<anyhow::Result<Vec<_>>>()?;
        let store =
            Proc { host: "s1".into(), args: Vec::new(), log: opts.dir.join("store-1.log"), child: None, paused: false };
        let steady_store =
            Proc { host: "s2".into(), args: Vec::new(), log: opts.dir.join("store-2.log"), child: None, paused: false };
        let mut c = ChaosCluster {
            net,
            opts,
            masters: BTreeMap::new(),
            store,
            steady_store,
            loops: BTreeMap::new(),
            clocks: BTreeMap::new(),
            voters: vec![1, 2, 3],
            faked_pids: Vec::new(),
            admin_token,
            tls_dir,
            access,
            keep_disks: true,
        };
        for id in 1..=4 {
            c.prepare_master(id, &initial.join(","))?;
        }
        for id in 1..=3 {
            c.launch_master(id)?;
        }
        c.store.args = c.store_args(1)?;
        c.steady_store.args = c.store_args(2)?;
        c.launch(Target::Store)?;
        c.launch(Target::SteadyStore)?;
        Ok(c)
    }

    /// Data dir of master `id` (on its loop filesystem when power loss is on).
    fn data_dir(&self, id: u64) -> PathBuf {
        self.opts.dir.join(format!("master-{id}")).join("data")
    }

    fn prepare_master(&mut self, id: u64, initial: &str) -> anyhow::Result<()> {
        let root = self.opts.dir.join(format!("master-{id}"));
        std::fs::create_dir_all(&root)?;
        if self.opts.power_loss {
            let fs = LoopFs::create(&root.join("disk.img"), LOOP_IMAGE_BYTES, &root.join("data"))
                .with_context(|| format!("loop filesystem for master {id}"))?;
            self.loops.insert(id, fs);
        }
        if self.opts.fake_clock {
            self.clocks.insert(id, FakeClock::new(&root).context("libfaketime (install the faketime package)")?);
        }
        let addr = master_addr(&self.net, id)?;
        let mut args = vec![
            "master".to_string(),
            format!("--id={id}"),
            format!("--listen={addr}"),
            format!("--http={}:{MASTER_HTTP_PORT}", self.net.host_ip(&master_host(id))?),
            format!("--data-dir={}", self.data_dir(id).display()),
            format!("--cluster-secret-file={}", self.opts.dir.join(SECRET_FILE).display()),
            // Short TTLs keep expiry and reclaim inside a short run.
            format!("--client_ttl={}", CLIENT_TTL.as_secs()),
            format!("--put_start_discard_timeout_sec={}", PUT_START_DISCARD_TIMEOUT.as_secs()),
            format!("--put_start_release_timeout_sec={}", PUT_START_RELEASE_TIMEOUT.as_secs()),
            format!("--default_kv_lease_ttl={}", KV_LEASE_TTL.as_millis()),
            format!("--eviction_high_watermark_ratio={}", self.opts.eviction.0),
            format!("--eviction_ratio={}", self.opts.eviction.1),
            // The state audit compares the masters' state hashes every 256
            // entries, under every fault (a run applies thousands).
            "--state-audit-every=256".to_string(),
        ];
        if self.opts.disks {
            args.extend([
                "--enable_offload".to_string(),
                "--promotion_on_hit".to_string(),
                format!("--disk_replica_grace_sec={}", DISK_REPLICA_GRACE.as_secs()),
            ]);
        }
        if self.opts.hot_keys {
            args.extend(HOT_KEY_FLAGS.iter().map(|f| f.to_string()));
        }
        args.push(if id <= 3 { format!("--initial-cluster={initial}") } else { "--join".to_string() });
        args.extend(self.security_args(Role::Master { id }));
        args.extend(self.opts.master_flags.iter().cloned());
        let log = self.opts.dir.join(format!("master-{id}.log"));
        self.masters.insert(id, Proc { host: master_host(id), args, log, child: None, paused: false });
        Ok(())
    }

    fn store_args(&self, n: u64) -> anyhow::Result<Vec<String>> {
        let ip = self.net.host_ip(&format!("s{n}"))?;
        let masters: Vec<String> = (1..=4).map(|id| master_addr(&self.net, id)).collect::<anyhow::Result<_>>()?;
        let mut args = vec![
            "store".into(),
            format!("--masters={}", masters.join(",")),
            format!("--listen={ip}:{STORE_PORT}"),
            format!("--segment-size={}", self.opts.segment_size),
            format!("--client-id={}", STORE_CLIENT_ID + n),
            format!("--zone={}", crate::zone_loss::zone_of_store(n)),
            format!("--credential-file={}", self.opts.dir.join(format!("store-{n}.credential")).display()),
        ];
        if !self.opts.shm_stores {
            args.push("--anonymous".into());
        }
        if self.opts.disks {
            let disk = self.store_disk_file(n);
            if let Some(dir) = disk.parent() {
                std::fs::create_dir_all(dir)?;
            }
            args.extend([
                format!("--disk-segment={}", disk.display()),
                format!("--disk-size={STORE_DISK_SIZE}"),
                format!("--heartbeat-interval-ms={}", DISK_STORE_HEARTBEAT.as_millis()),
            ]);
        }
        if self.opts.ucx {
            // The tenant probe's tenants share the UCX segments (the
            // harness's tenants trust each other; docs/TENANTS.md).
            args.extend(["--ucx".into(), "--ucx-shared-tenants".into()]);
            if self.opts.tls {
                args.push("--ucx-trusted-fabric".into());
            }
        }
        args.extend(self.security_args(Role::Store));
        args.extend(self.opts.store_flags.iter().cloned());
        Ok(args)
    }

    /// The disk segment file of store node `n` (scenarios with disks), in
    /// its own data dir: the same file across its restarts.
    pub fn store_disk_file(&self, n: u64) -> PathBuf {
        self.opts.dir.join(format!("store-{n}")).join(mooncake_local_cluster::STORE_DISK_FILE)
    }

    /// `role`'s `--tls-cert --tls-key --tls-ca` with TLS on; `--insecure`
    /// without: the namespaces' private addresses are not loopback, and
    /// only this harness can reach them (the loopback rule, docs/SECURITY.md).
    fn security_args(&self, role: Role) -> Vec<String> {
        match &self.tls_dir {
            Some(dir) => mooncake_tls::TlsFiles::in_dir(dir, role).to_args(),
            None => vec!["--insecure".into()],
        }
    }

    fn launch_master(&mut self, id: u64) -> anyhow::Result<()> {
        self.launch(Target::Master(id))
    }

    fn launch(&mut self, t: Target) -> anyhow::Result<()> {
        let bin = self.opts.bin.display().to_string();
        let clock = match t {
            Target::Master(id) => self.clocks.get(&id).cloned(),
            Target::Store | Target::SteadyStore => None,
        };
        let net = self.net.clone();
        let p = match t {
            Target::Master(id) => self.masters.get_mut(&id).with_context(|| format!("no master {id}"))?,
            Target::Store => &mut self.store,
            Target::SteadyStore => &mut self.steady_store,
        };
        let mut cmd = net.command(&p.host, &bin)?;
        cmd.args(&p.args);
        crate::access::clear_tls_env(&mut cmd);
        if let Some(c) = &clock {
            c.apply(&mut cmd);
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&p.log)?;
        let filter = std::env::var(NODE_LOG_ENV).unwrap_or_else(|_| "info,openraft=warn".into());
        cmd.env("RUST_LOG", filter).stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        let child = cmd.spawn().with_context(|| format!("starting {t:?}"))?;
        crate::registry::track(child.id());
        if clock.is_some() {
            self.faked_pids.push(child.id());
        }
        p.child = Some(child);
        p.paused = false;
        Ok(())
    }

    fn proc_mut(&mut self, t: Target) -> anyhow::Result<&mut Proc> {
        match t {
            Target::Master(id) => self.masters.get_mut(&id).with_context(|| format!("no master {id}")),
            Target::Store => Ok(&mut self.store),
            Target::SteadyStore => Ok(&mut self.steady_store),
        }
    }

    /// Is the process up (not killed)?
    pub fn is_running(&self, t: Target) -> bool {
        match t {
            Target::Master(id) => self.masters.get(&id).is_some_and(|p| p.child.is_some()),
            Target::Store => self.store.child.is_some(),
            Target::SteadyStore => self.steady_store.child.is_some(),
        }
    }

    pub fn is_paused(&self, t: Target) -> bool {
        match t {
            Target::Master(id) => self.masters.get(&id).is_some_and(|p| p.paused),
            Target::Store => self.store.paused,
            Target::SteadyStore => self.steady_store.paused,
        }
    }

    /// SIGTERM, and waits up to `grace` for the process to exit (then
    /// SIGKILL): a store node's clean stop.
    pub fn stop(&mut self, t: Target, grace: std::time::Duration) -> anyhow::Result<()> {
        let p = self.proc_mut(t)?;
        if let Some(mut child) = p.child.take() {
            crate::registry::untrack(child.id());
            faults::terminate(child.id())?;
            let deadline = std::time::Instant::now() + grace;
            while child.try_wait()?.is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            faults::kill9_and_reap(&mut child)?;
        }
        p.paused = false;
        Ok(())
    }

    /// SIGKILL (resumes first if paused, so the kernel can reap it).
    pub fn kill(&mut self, t: Target) -> anyhow::Result<()> {
        let p = self.proc_mut(t)?;
        if let Some(mut child) = p.child.take() {
            crate::registry::untrack(child.id());
            faults::kill9_and_reap(&mut child)?;
        }
        p.paused = false;
        Ok(())
    }

    pub fn restart(&mut self, t: Target) -> anyhow::Result<()> {
        if !self.is_running(t) {
            self.launch(t)?;
        }
        Ok(())
    }

    pub fn pause(&mut self, t: Target) -> anyhow::Result<()> {
        let p = self.proc_mut(t)?;
        if let (Some(child), false) = (&p.child, p.paused) {
            faults::pause(child.id())?;
            p.paused = true;
        }
        Ok(())
    }

    pub fn resume(&mut self, t: Target) -> anyhow::Result<()> {
        let p = self.proc_mut(t)?;
        if let (Some(child), true) = (&p.child, p.paused) {
            faults::resume(child.id())?;
            p.paused = false;
        }
        Ok(())
    }

    /// Power loss of master `id`: kill it, drop its filesystem's unflushed
    /// writes (FS_IOC_SHUTDOWN without log flush), remount, restart.
    pub fn power_cut(&mut self, id: u64) -> anyhow::Result<()> {
        self.kill(Target::Master(id))?;
        let fs = self.loops.get_mut(&id).context("power loss needs --power-loss filesystems")?;
        fs.power_cut().with_context(|| format!("power cut of master {id}"))?;
        self.launch_master(id)
    }

    /// Fills master `id`'s disk (its loop filesystem); returns bytes written.
    pub fn fill_disk(&self, id: u64) -> anyhow::Result<u64> {
        let fs = self.loops.get(&id).context("a full disk needs loop filesystems")?;
        fs.fill().with_context(|| format!("filling the disk of master {id}"))
    }

    /// Empties master `id`'s data dir (a dead disk replaced by a blank one).
    /// Kill the master first.
    pub fn wipe_data_dir(&self, id: u64) -> anyhow::Result<()> {
        let dir = self.data_dir(id);
        for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) }
                .with_context(|| format!("wiping {}", path.display()))?;
        }
        Ok(())
    }

    /// Frees what [`ChaosCluster::fill_disk`] took, on every master.
    pub fn free_disks(&self) -> anyhow::Result<()> {
        for (id, fs) in &self.loops {
            fs.unfill().with_context(|| format!("freeing the disk of master {id}"))?;
        }
        Ok(())
    }

    /// How master `id` ended, once it ended by itself (`None` while it
    /// runs or when it was never started); reaps it.
    pub fn master_exit(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        let p = self.masters.get_mut(&id)?;
        let status = p.child.as_mut()?.try_wait().ok()??;
        if let Some(child) = p.child.take() {
            crate::registry::untrack(child.id());
        }
        p.paused = false;
        Some(status)
    }

    /// The line of master `id`'s log (its stderr included) that says why it
    /// ended: the last line containing `needle` among its last 200 lines
    /// (other threads, or a backtrace, may follow it before the exit), else
    /// its last non-empty line.
    pub fn master_exit_line(&self, id: u64, needle: &str) -> String {
        let Some(p) = self.masters.get(&id) else { return String::new() };
        let text = std::fs::read_to_string(&p.log).unwrap_or_default();
        let mut tail = text.lines().rev().filter(|l| !l.trim().is_empty()).take(200);
        let last = tail.clone().next().unwrap_or_default();
        tail.find(|l| l.contains(needle)).unwrap_or(last).to_string()
    }

    /// Shifts master `id`'s wall clock by `secs` (monotonic untouched).
    pub fn skew_clock(&self, id: u64, secs: i64) -> anyhow::Result<()> {
        let c = self.clocks.get(&id).context("clock skew needs --fake-clock")?;
        c.set_offset(secs)?;
        Ok(())
    }

    /// Ends every fault on processes: resume paused ones, restart dead ones
    /// (only current voters and the store nodes), reset clocks.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        let voters = self.voters.clone();
        for id in voters {
            self.resume(Target::Master(id))?;
            self.restart(Target::Master(id))?;
        }
        for store in [Target::Store, Target::SteadyStore] {
            self.resume(store)?;
            self.restart(store)?;
        }
        for c in self.clocks.values() {
            c.set_offset(0)?;
        }
        Ok(())
    }

    /// Sets master `id`'s soft file descriptor limit to `soft` (prlimit;
    /// its hard limit stays, so no privilege is needed to put it back): its
    /// opens past it fail with EMFILE. Returns the soft limit it had, for
    /// the heal to put back.
    pub fn set_fd_soft_limit(&self, id: u64, soft: u64) -> anyhow::Result<u64> {
        let pid = self.masters.get(&id).and_then(|p| p.child.as_ref()).map(|c| c.id()).context("master not running")?;
        let pid = pid as libc::pid_t;
        let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: a null new limit only reads; `old` is a live rlimit value.
        if unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) } != 0 {
            anyhow::bail!("prlimit of master {id} (pid {pid}): {}", std::io::Error::last_os_error());
        }
        let new = libc::rlimit { rlim_cur: soft.min(old.rlim_max), rlim_max: old.rlim_max };
        // SAFETY: `new` is a live rlimit value; nothing is written back.
        if unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) } != 0 {
            anyhow::bail!("prlimit of master {id} (pid {pid}): {}", std::io::Error::last_os_error());
        }
        Ok(old.rlim_cur)
    }

    /// Starts master `id` (the spare) so it can be added.
    pub fn start_spare(&mut self, id: u64) -> anyhow::Result<()> {
        self.restart(Target::Master(id))
    }

    pub fn master_addrs(&self) -> anyhow::Result<Vec<String>> {
        self.masters.keys().map(|id| master_addr(&self.net, *id)).collect()
    }

    /// A master client configuration of the cluster's admin (membership
    /// faults): the admin token, over the harness's usual connection (the
    /// token is the admin identity with TLS and without).
    pub fn admin_config(&self) -> anyhow::Result<mooncake_client::MasterClientConfig> {
        let mut cfg = self.access.master(self.master_addrs()?);
        cfg.admin_token = Some(self.admin_token.clone());
        Ok(cfg)
    }

    /// How the harness's clients connect to this cluster.
    pub fn access(&self) -> Access {
        self.access.clone()
    }

    /// Objects evicted by every leader of the run, from the masters' logs
    /// (their metrics restart from zero with the process; the logs do not).
    /// Memory replicas the leaders added to hot keys and dropped again once
    /// they cooled (from their logs).
    pub fn hot_key_replicas(&self) -> (u64, u64) {
        let logs: Vec<String> = self.masters.values().filter_map(|p| std::fs::read_to_string(&p.log).ok()).collect();
        let added =
            logs.iter().flat_map(|l| l.lines()).filter(|l| l.contains("a hot key got a memory replica")).count();
        let dropped = logs.iter().map(|l| sum_field(l, "cooled hot keys' extra replicas dropped", " replicas=")).sum();
        (added as u64, dropped)
    }

    pub fn evicted_objects(&self) -> u64 {
        self.masters.values().filter_map(|p| std::fs::read_to_string(&p.log).ok()).map(|log| evicted_in(&log)).sum()
    }

    pub fn log_path(&self, t: Target) -> Option<&Path> {
        match t {
            Target::Master(id) => self.masters.get(&id).map(|p| p.log.as_path()),
            Target::Store => Some(self.store.log.as_path()),
            Target::SteadyStore => Some(self.steady_store.log.as_path()),
        }
    }

    /// Stops everything and removes the loop filesystems.
    pub fn shutdown(&mut self) {
        let ids: Vec<u64> = self.masters.keys().copied().collect();
        for id in ids {
            let _ = self.kill(Target::Master(id));
        }
        let _ = self.kill(Target::Store);
        let _ = self.kill(Target::SteadyStore);
        // Shared-memory store nodes leave their memory for a successor.
        if self.opts.shm_stores {
            remove_store_shm_files();
        }
        if self.opts.disks && !self.keep_disks {
            for n in 1..=2 {
                let file = self.store_disk_file(n);
                match std::fs::remove_file(&file) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        tracing::warn!(error = %e, file = %file.display(), "removing a store node's disk file");
                    }
                    _ => {}
                }
            }
        }
        for fs in self.loops.values_mut() {
            if let Err(e) = fs.destroy() {
                tracing::warn!(error = %e, "removing a loop filesystem");
            }
        }
        for pid in self.faked_pids.drain(..) {
            let _ = std::fs::remove_file(format!("/dev/shm/faketime_shm_{pid}"));
            let _ = std::fs::remove_file(format!("/dev/shm/sem.faketime_sem_{pid}"));
        }
    }
}

impl Drop for ChaosCluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Removes the /dev/shm files of this harness's store nodes (client ids
/// `STORE_CLIENT_ID + n`).
fn remove_store_shm_files() {
    let prefixes: Vec<String> = (1..=2).map(|n| format!("mooncake-{:016x}-", STORE_CLIENT_ID + n)).collect();
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return };
    for e in entries.flatten() {
        if prefixes.iter().any(|p| e.file_name().to_string_lossy().starts_with(p.as_str())) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A process of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Master(u64),
    /// Store node 1 (faults may kill it).
    Store,
    /// Store node 2 (never faulted but by `disk-stores`).
    SteadyStore,
}

impl Target {
    /// Store node `n` (1 or 2).
    pub fn store(n: u64) -> Target {
        if n == 1 { Target::Store } else { Target::SteadyStore }
    }
}

/// Host name of store node `n`.
pub fn store_host(n: u64) -> String {
    format!("s{n}")
}

/// The sum of `evicted=N` over a master log's "eviction round" lines (with
/// or without terminal colours).
fn evicted_in(log: &str) -> u64 {
    sum_field(log, "eviction round", " evicted=")
}

/// The sum of the numeric `field` (` name=`) over the lines of `log` that
/// contain `marker`.
fn sum_field(log: &str, marker: &str, field: &str) -> u64 {
    log.lines()
        .filter(|line| line.contains(marker))
        .filter_map(|line| {
            let plain = strip_ansi(line);
            let rest = &plain[plain.find(field)? + field.len()..];
            rest.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok()
        })
        .sum()
}

/// `line` without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `ip:port` of master `id`.
pub fn master_addr(net: &Network, id: u64) -> anyhow::Result<String> {
    Ok(format!("{}:{MASTER_PORT}", net.host_ip(&master_host(id))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evictions_are_summed_from_plain_and_coloured_log_lines() {
        let log = "2026-01-01T00:00:00Z  INFO mooncake_master::eviction: eviction round asked=3 evicted=3 need_bytes=0\n\
                   \x1b[2m2026\x1b[0m \x1b[32m INFO\x1b[0m eviction round \x1b[3masked\x1b[0m\x1b[2m=\x1b[0m5 \
                   \x1b[3mevicted\x1b[0m\x1b[2m=\x1b[0m4 \x1b[3mneed_bytes\x1b[0m\x1b[2m=\x1b[0m0\n\
                   INFO something else evicted=100\n";
        assert_eq!(evicted_in(log), 7);
    }
}
