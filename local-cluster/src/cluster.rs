//! `LocalCluster`: masters and store nodes as real child processes on
//! loopback, all data under one directory. It backs `mooncake up`,
//! `mooncake demo` and every multi-process test (through `mooncake-testkit`):
//! start, SIGKILL, restart from the data dir, add joiners, wait for a leader.
//! Every child is killed when the cluster is dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mooncake_client::{MasterClient, MasterClientConfig};
use mooncake_proto::master::GetClusterInfoResponse;

use crate::binary::find_binary;
use crate::node::{Node, Role};
use crate::ports::free_port;
use crate::wait::wait_for;

/// Store node `n` of a local cluster has client id `STORE_CLIENT_ID_BASE +
/// (pid << 20) + (k << 8) + n`, for the `k`-th cluster of the process whose
/// id is `pid`: clusters of one process (parallel tests) and of two
/// processes on one host (two `mooncake up`) never share an identity, nor
/// the /dev/shm file named after it. See [`LocalCluster::store_client_id`].
pub const STORE_CLIENT_ID_BASE: u64 = 0x5700;

fn next_store_id_base() -> u64 {
    static CLUSTERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = CLUSTERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & 0xFFF;
    STORE_CLIENT_ID_BASE + (u64::from(std::process::id()) << 20) + (k << 8)
}

/// How to build a [`LocalCluster`].
pub struct LocalClusterBuilder {
    masters: u64,
    stores: u64,
    segment_size: String,
    master_args: Vec<String>,
    store_args: Vec<String>,
    dir: Option<PathBuf>,
    master_cmd: Option<(PathBuf, Vec<String>)>,
    store_cmd: Option<(PathBuf, Vec<String>)>,
    tls: bool,
    disk_size: Option<String>,
}

/// The disk segment file of a store node in its data dir (with
/// [`LocalClusterBuilder::disk_size`]).
pub const STORE_DISK_FILE: &str = "disk.seg";

/// Tenants a TLS local cluster issues a bound client certificate for
/// (`<dir>/tls/tenant-<name>.pem`, docs/TENANTS.md): enough to try tenant
/// isolation with certificates.
pub const TLS_TENANTS: [&str; 2] = ["team-a", "team-b"];

/// Master certificates a TLS local cluster issues beyond its founding
/// masters, for joiners (`start_joiner` with ids up to masters + this).
const TLS_SPARE_MASTERS: u64 = 4;

impl LocalClusterBuilder {
    /// Mutual TLS everywhere: a development PKI in `<dir>/tls`
    /// (`mooncake certs init`), each node started with its role's
    /// certificate, and this cluster's clients using the admin's.
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }
    pub fn masters(mut self, n: u64) -> Self {
        self.masters = n;
        self
    }
    pub fn stores(mut self, n: u64) -> Self {
        self.stores = n;
        self
    }
    /// Each store node also contributes a disk segment of `s` (e.g.
    /// `256MiB`): `<dir>/store-<id>/disk.seg`, kept across its restarts.
    pub fn disk_size(mut self, s: impl Into<String>) -> Self {
        self.disk_size = Some(s.into());
        self
    }
    /// Segment size of each store node (e.g. `256MiB`).
    pub fn segment_size(mut self, s: impl Into<String>) -> Self {
        self.segment_size = s.into();
        self
    }
    /// An extra flag for every master (e.g. `--client_ttl=2`).
    pub fn master_arg(mut self, a: impl Into<String>) -> Self {
        self.master_args.push(a.into());
        self
    }
    /// An extra flag for every store node.
    pub fn store_arg(mut self, a: impl Into<String>) -> Self {
        self.store_args.push(a.into());
        self
    }
    /// Keep data here instead of a new temporary directory (kept after exit).
    pub fn dir(mut self, d: impl Into<PathBuf>) -> Self {
        self.dir = Some(d.into());
        self
    }
    /// Run masters as `p` (default: `mooncake-master` next to this executable).
    pub fn master_bin(mut self, p: impl Into<PathBuf>) -> Self {
        self.master_cmd = Some((p.into(), Vec::new()));
        self
    }
    /// Run masters as `program prefix… flags…` (e.g. `mooncake master`).
    pub fn master_command(mut self, program: impl Into<PathBuf>, prefix: &[&str]) -> Self {
        self.master_cmd = Some((program.into(), prefix.iter().map(|s| s.to_string()).collect()));
        self
    }
    /// Run store nodes as `program prefix… flags…` (default: `mooncake store`).
    pub fn store_command(mut self, program: impl Into<PathBuf>, prefix: &[&str]) -> Self {
        self.store_cmd = Some((program.into(), prefix.iter().map(|s| s.to_string()).collect()));
        self
    }

    /// Starts the founding masters, then the store nodes (not waiting for either).
    pub fn start(self) -> Result<LocalCluster, String> {
        let (dir, temp) = match self.dir {
            Some(d) => (d, None),
            None => {
                let t = tempfile::Builder::new().prefix("mooncake-").tempdir().map_err(|e| e.to_string())?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        // The cluster's secret, made before any master starts (they all read
        // it), and the admin token derived from it, for this cluster's tools.
        let secret = mooncake_auth::ClusterSecret::create_file(&dir.join(SECRET_FILE)).map_err(|e| e.to_string())?;
        let admin_token = mooncake_auth::admin::admin_token(&secret);
        mooncake_auth::admin::write_token_file(&dir.join(mooncake_auth::admin::ADMIN_TOKEN_FILE), &admin_token)
            .map_err(|e| e.to_string())?;
        let tls = match self.tls {
            false => None,
            true => Some(ClusterTls::generate(&dir.join("tls"), self.masters + TLS_SPARE_MASTERS)?),
        };
        let master_cmd = match self.master_cmd {
            Some(c) => c,
            None => (find_binary("mooncake-master")?, Vec::new()),
        };
        let mut cluster = LocalCluster {
            dir,
            _temp: temp,
            master_cmd,
            store_cmd: self.store_cmd,
            nodes: BTreeMap::new(),
            master_args: self.master_args,
            store_args: self.store_args,
            segment_size: self.segment_size,
            disk_size: self.disk_size,
            store_id_base: next_store_id_base(),
            tls,
            admin_token,
        };
        let port = |_| free_port().map_err(|e| e.to_string());
        let addrs: Vec<(u64, String)> =
            (1..=self.masters).map(|id| port(id).map(|p| (id, format!("127.0.0.1:{p}")))).collect::<Result<_, _>>()?;
        let initial = addrs.iter().map(|(id, a)| format!("{id}={a}")).collect::<Vec<_>>().join(",");
        for (id, addr) in addrs {
            cluster.spawn_master(id, addr, vec![format!("--initial-cluster={initial}")])?;
        }
        for id in 1..=self.stores {
            cluster.spawn_store(id)?;
        }
        Ok(cluster)
    }
}

/// A running local cluster.
pub struct LocalCluster {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    master_cmd: (PathBuf, Vec<String>),
    store_cmd: Option<(PathBuf, Vec<String>)>,
    nodes: BTreeMap<(u8, u64), Node>,
    master_args: Vec<String>,
    store_args: Vec<String>,
    segment_size: String,
    disk_size: Option<String>,
    store_id_base: u64,
    /// Set when the cluster runs with mutual TLS.
    tls: Option<ClusterTls>,
    /// This cluster's admin token (also in `<dir>/admin.token`).
    admin_token: mooncake_auth::admin::AdminToken,
}

/// The cluster secret's file in a local cluster's dir (every master gets
/// `--cluster-secret-file` naming it).
pub const SECRET_FILE: &str = "cluster.secret";

fn key(role: Role, id: u64) -> (u8, u64) {
    (if role == Role::Master { 0 } else { 1 }, id)
}

impl LocalCluster {
    pub fn builder() -> LocalClusterBuilder {
        LocalClusterBuilder {
            masters: 3,
            stores: 0,
            segment_size: "256MiB".into(),
            master_args: Vec::new(),
            store_args: Vec::new(),
            dir: None,
            master_cmd: None,
            store_cmd: None,
            tls: false,
            disk_size: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The client id (identity) of store node `id`.
    pub fn store_client_id(&self, id: u64) -> u64 {
        self.store_id_base + id
    }

    fn spawn_master(&mut self, id: u64, addr: String, membership: Vec<String>) -> Result<(), String> {
        let data_dir = self.dir.join(format!("master-{id}"));
        let http = format!("127.0.0.1:{}", free_port().map_err(|e| e.to_string())?);
        let (bin, mut args) = self.master_cmd.clone();
        args.extend([
            format!("--id={id}"),
            format!("--listen={addr}"),
            format!("--data-dir={}", data_dir.display()),
            format!("--http={http}"),
            // One secret for the whole local cluster (made in `start`).
            format!("--cluster-secret-file={}", self.dir.join(SECRET_FILE).display()),
        ]);
        args.extend(membership);
        args.extend(self.tls_args(mooncake_tls::Role::Master { id }));
        args.extend(self.master_args.iter().cloned());
        let log = self.dir.join(format!("master-{id}.log"));
        let mut node = Node { role: Role::Master, id, addr, http, data_dir, log, bin, args, child: None };
        node.launch().map_err(|e| e.to_string())?;
        self.nodes.insert(key(Role::Master, id), node);
        Ok(())
    }

    fn spawn_store(&mut self, id: u64) -> Result<(), String> {
        let (bin, mut args) = match &self.store_cmd {
            Some(c) => c.clone(),
            None => (find_binary("mooncake")?, vec!["store".to_string()]),
        };
        let port = free_port().map_err(|e| e.to_string())?;
        args.extend([
            format!("--masters={}", self.master_addrs().join(",")),
            format!("--segment-size={}", self.segment_size),
            format!("--listen=127.0.0.1:{port}"),
            format!("--client-id={}", self.store_client_id(id)),
            format!("--zone=zone-{}", (id - 1) % 2),
        ]);
        args.extend(self.tls_args(mooncake_tls::Role::Store));
        args.extend(self.store_args.iter().cloned());
        let log = self.dir.join(format!("store-{id}.log"));
        let data_dir = self.dir.join(format!("store-{id}"));
        // A restarted node (same --client-id, same credential) re-registers
        // at once instead of waiting for its old registration to expire.
        std::fs::create_dir_all(&data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
        let credential = data_dir.join(mooncake_auth::credential::CREDENTIAL_FILE);
        args.push(format!("--credential-file={}", credential.display()));
        if let Some(size) = &self.disk_size {
            args.push(format!("--disk-segment={}", data_dir.join(STORE_DISK_FILE).display()));
            args.push(format!("--disk-size={size}"));
        }
        let addr = format!("127.0.0.1:{port}");
        let mut node = Node { role: Role::Store, id, addr, http: String::new(), data_dir, log, bin, args, child: None };
        node.launch().map_err(|e| e.to_string())?;
        self.nodes.insert(key(Role::Store, id), node);
        Ok(())
    }

    /// Starts one more store node (the next id, the cluster's store flags);
    /// returns its id.
    pub fn add_store(&mut self) -> Result<u64, String> {
        let id = self.store_ids().into_iter().max().unwrap_or(0) + 1;
        self.spawn_store(id)?;
        Ok(id)
    }

    /// Starts a new master with `--join` (a member only once added).
    pub fn start_joiner(&mut self, id: u64) -> Result<String, String> {
        let addr = format!("127.0.0.1:{}", free_port().map_err(|e| e.to_string())?);
        self.spawn_master(id, addr.clone(), vec!["--join".into()])?;
        Ok(addr)
    }

    pub fn node(&self, role: Role, id: u64) -> Option<&Node> {
        self.nodes.get(&key(role, id))
    }

    pub fn master_ids(&self) -> Vec<u64> {
        self.nodes.values().filter(|n| n.role == Role::Master).map(|n| n.id).collect()
    }

    pub fn store_ids(&self) -> Vec<u64> {
        self.nodes.values().filter(|n| n.role == Role::Store).map(|n| n.id).collect()
    }

    /// gRPC addresses of every master (running or not).
    pub fn master_addrs(&self) -> Vec<String> {
        self.nodes.values().filter(|n| n.role == Role::Master).map(|n| n.addr.clone()).collect()
    }

    /// A master client that knows every master.
    /// A client of this cluster acting as admin (an operator's tool).
    pub fn client(&self) -> Result<MasterClient, String> {
        MasterClient::new(self.client_config()).map_err(|e| e.to_string())
    }

    /// The master client configuration of this cluster's admin.
    pub fn client_config(&self) -> MasterClientConfig {
        MasterClientConfig {
            admin_token: Some(self.admin_token.clone()),
            tls: self.tls.as_ref().map(|t| t.admin.clone()),
            ..MasterClientConfig::new(self.master_addrs())
        }
    }

    /// This cluster's admin token.
    pub fn admin_token(&self) -> &mooncake_auth::admin::AdminToken {
        &self.admin_token
    }

    /// SIGKILL.
    pub fn kill(&mut self, role: Role, id: u64) {
        if let Some(n) = self.nodes.get_mut(&key(role, id)) {
            n.kill();
        }
    }

    /// SIGTERM, waiting up to 10 s for the node to exit (then SIGKILL).
    pub fn stop_node(&mut self, role: Role, id: u64) {
        if let Some(n) = self.nodes.get_mut(&key(role, id)) {
            n.stop(Duration::from_secs(10));
        }
    }

    /// The exit status of a node that ended by itself; `None` while it runs
    /// (or was never started).
    pub fn exit_status(&mut self, role: Role, id: u64) -> Option<std::process::ExitStatus> {
        let n = self.nodes.get_mut(&key(role, id))?;
        let status = n.child.as_mut()?.try_wait().ok()??;
        n.child = None;
        Some(status)
    }

    /// SIGSTOP: the node stops answering (a GC pause, an overloaded host)
    /// until [`LocalCluster::resume`].
    pub fn pause(&self, role: Role, id: u64) -> Result<(), String> {
        self.signal(role, id, libc::SIGSTOP)
    }

    /// SIGCONT after [`LocalCluster::pause`].
    pub fn resume(&self, role: Role, id: u64) -> Result<(), String> {
        self.signal(role, id, libc::SIGCONT)
    }

    fn signal(&self, role: Role, id: u64, sig: i32) -> Result<(), String> {
        let pid = self.node(role, id).and_then(Node::pid).ok_or(format!("{role:?} {id} is not running"))?;
        let pid = i32::try_from(pid).map_err(|_| format!("pid {pid} out of range"))?;
        // SAFETY: kill(2) on a child we started, with a valid signal number.
        match unsafe { libc::kill(pid, sig) } {
            0 => Ok(()),
            _ => Err(format!("signal {sig} to {role:?} {id}: {}", std::io::Error::last_os_error())),
        }
    }

    /// Restarts a stopped node with its original flags and data dir.
    pub fn restart(&mut self, role: Role, id: u64) -> Result<(), String> {
        let n = self.nodes.get_mut(&key(role, id)).ok_or("unknown node")?;
        if n.is_running() {
            return Err(format!("{role:?} {id} is running"));
        }
        n.launch().map_err(|e| e.to_string())
    }

    /// Cluster info from master `id`, if it answers.
    pub async fn info(&self, id: u64) -> Option<GetClusterInfoResponse> {
        let n = self.node(Role::Master, id).filter(|n| n.is_running())?;
        let c = MasterClient::new(self.config_for(vec![n.addr.clone()])).ok()?;
        c.cluster_info_of(&n.addr).await.ok()
    }

    /// [`info`](Self::info) with the state hash (O(objects) on the master).
    pub async fn info_with_hash(&self, id: u64) -> Option<GetClusterInfoResponse> {
        let n = self.node(Role::Master, id).filter(|n| n.is_running())?;
        let c = MasterClient::new(self.config_for(vec![n.addr.clone()])).ok()?;
        c.cluster_info_with_hash_of(&n.addr).await.ok()
    }

    /// Waits until every running master agrees on one leader: `(id, term)`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<(u64, u64), String> {
        wait_for("a leader all running masters agree on", timeout, || async {
            let mut seen = None;
            for id in self.master_ids() {
                if !self.node(Role::Master, id)?.is_running() {
                    continue;
                }
                let info = self.info(id).await?;
                if info.leader_id == 0 || seen.is_some_and(|s| s != (info.leader_id, info.term)) {
                    return None;
                }
                seen = Some((info.leader_id, info.term));
            }
            let (leader, _) = seen?;
            self.node(Role::Master, leader).filter(|n| n.is_running())?;
            seen
        })
        .await
    }

    /// Waits until the leader knows `n` segments.
    pub async fn wait_for_segments(&self, n: u64, timeout: Duration) -> Result<(), String> {
        let (leader, _) = self.wait_for_leader(timeout).await?;
        wait_for(&format!("{n} mounted segments"), timeout, || async {
            (self.info(leader).await?.segment_count >= n).then_some(())
        })
        .await
    }

    /// The last lines of every log (for failures).
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for n in self.nodes.values() {
            out.push_str(&format!("---- {:?} {} ({}) ----\n", n.role, n.id, n.log.display()));
            out.push_str(&log_tail(&n.log, lines));
        }
        out
    }

    /// Stops every node: store nodes first (they unmount), then masters.
    pub fn stop(&mut self) {
        for n in self.nodes.values_mut().filter(|n| n.role == Role::Store) {
            n.stop(Duration::from_secs(3));
        }
        for n in self.nodes.values_mut() {
            n.stop(Duration::from_secs(3));
        }
        // Stopped store nodes hand their memory over to a successor that
        // will not come: the cluster is gone.
        self.remove_store_segments();
    }
}

/// The development PKI of a TLS local cluster.
struct ClusterTls {
    dir: PathBuf,
    /// The admin's identity, loaded once: this cluster's own tools use it.
    admin: mooncake_tls::TlsConfig,
}

impl ClusterTls {
    fn generate(dir: &Path, masters: u64) -> Result<ClusterTls, String> {
        let tenants: Vec<String> = TLS_TENANTS.iter().map(|t| t.to_string()).collect();
        mooncake_tls::generate_with_tenants(dir, masters, &[], &tenants).map_err(|e| e.to_string())?;
        let admin = mooncake_tls::TlsFiles::in_dir(dir, mooncake_tls::Role::Admin).load().map_err(|e| e.to_string())?;
        Ok(ClusterTls { dir: dir.to_owned(), admin })
    }
}

impl LocalCluster {
    /// The TLS flags of a node of `role` (none without TLS).
    fn tls_args(&self, role: mooncake_tls::Role) -> Vec<String> {
        self.tls.as_ref().map(|t| mooncake_tls::TlsFiles::in_dir(&t.dir, role).to_args()).unwrap_or_default()
    }

    /// The directory of the cluster's development PKI, if it runs with TLS.
    pub fn tls_dir(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.dir.as_path())
    }

    /// The TLS identity of `role` in this cluster's PKI (`None` without TLS).
    pub fn tls_config(&self, role: mooncake_tls::Role) -> Result<Option<mooncake_tls::TlsConfig>, String> {
        let Some(dir) = self.tls_dir() else { return Ok(None) };
        mooncake_tls::TlsFiles::in_dir(dir, role).load().map(Some).map_err(|e| e.to_string())
    }

    /// An admin's configuration for `masters` (with TLS when the cluster has it).
    fn config_for(&self, masters: Vec<String>) -> MasterClientConfig {
        MasterClientConfig { tls: self.tls.as_ref().map(|t| t.admin.clone()), ..MasterClientConfig::new(masters) }
    }
}

impl LocalCluster {
    /// Removes the /dev/shm segment files of this cluster's store nodes
    /// (a SIGKILLed store node cannot remove its own).
    fn remove_store_segments(&self) {
        let prefixes: Vec<String> =
            self.store_ids().iter().map(|id| format!("mooncake-{:016x}-", self.store_client_id(*id))).collect();
        let Ok(entries) = std::fs::read_dir("/dev/shm") else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if prefixes.iter().any(|p| name.starts_with(p)) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for n in self.nodes.values_mut() {
            n.kill();
        }
        self.remove_store_segments();
    }
}

/// The last `lines` lines of the log file at `path`, each ending in a
/// newline ("" when it cannot be read), for failure messages.
pub fn log_tail(path: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(lines).collect();
    tail.into_iter().rev().flat_map(|l| [l, "\n"]).collect()
}
