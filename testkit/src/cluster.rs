//! [`Cluster`]: real master processes under one temporary directory.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mooncake_client::{MasterClient, MasterClientConfig};
use mooncake_proto::master::GetClusterInfoResponse;

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port on loopback");
    l.local_addr().expect("local addr").port()
}

/// Polls `cond` every 20 ms until it returns `Some`, or panics with `what`
/// after `timeout`. The condition is the event; the poll interval only
/// bounds how late we notice it.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One master process.
pub struct MasterProc {
    pub id: u64,
    pub addr: String,
    pub http: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl MasterProc {
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

/// Builds a [`Cluster`].
pub struct ClusterBuilder {
    masters: u64,
    extra_args: Vec<String>,
    master_bin: Option<PathBuf>,
}

impl ClusterBuilder {
    pub fn masters(mut self, n: u64) -> Self {
        self.masters = n;
        self
    }
    /// Extra flags for every master (e.g. `--client_ttl=2`).
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.extra_args.push(a.into());
        self
    }
    pub fn master_bin(mut self, p: impl Into<PathBuf>) -> Self {
        self.master_bin = Some(p.into());
        self
    }

    /// Starts the founding masters (does not wait for a leader).
    pub fn start(self) -> Cluster {
        let dir = tempfile::Builder::new().prefix("mooncake-test-").tempdir().expect("temp dir");
        let bin = self.master_bin.unwrap_or_else(default_master_bin);
        assert!(bin.exists(), "{} not found; build it with `cargo build --bin mooncake-master`", bin.display());
        let ids: Vec<u64> = (1..=self.masters).collect();
        let addrs: BTreeMap<u64, String> = ids.iter().map(|id| (*id, format!("127.0.0.1:{}", free_port()))).collect();
        let initial = addrs.iter().map(|(id, a)| format!("{id}={a}")).collect::<Vec<_>>().join(",");
        let mut cluster = Cluster { dir, bin, masters: BTreeMap::new(), extra_args: self.extra_args };
        for (id, addr) in addrs {
            let args = vec!["--initial-cluster".to_string(), initial.clone()];
            cluster.spawn_master(id, addr, args);
        }
        cluster
    }
}

/// The binary next to the test executable's directory (`target/<profile>/`).
fn default_master_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("MOONCAKE_MASTER_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    profile_dir.join("mooncake-master")
}

/// A running cluster of master processes.
pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    masters: BTreeMap<u64, MasterProc>,
    extra_args: Vec<String>,
}

impl Cluster {
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder { masters: 3, extra_args: Vec::new(), master_bin: None }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn_master(&mut self, id: u64, addr: String, membership_args: Vec<String>) {
        let data_dir = self.dir.path().join(format!("master-{id}"));
        let log = self.dir.path().join(format!("master-{id}.log"));
        let http = format!("127.0.0.1:{}", free_port());
        let mut args = vec![
            format!("--id={id}"),
            format!("--listen={addr}"),
            format!("--data-dir={}", data_dir.display()),
            format!("--http={http}"),
        ];
        args.extend(membership_args);
        args.extend(self.extra_args.iter().cloned());
        let mut m = MasterProc { id, addr, http, data_dir, log, args, child: None };
        self.launch(&mut m);
        self.masters.insert(id, m);
    }

    fn launch(&self, m: &mut MasterProc) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&m.log).expect("master log file");
        let child = Command::new(&self.bin)
            .args(&m.args)
            .env("RUST_LOG", std::env::var("MOONCAKE_TEST_LOG").unwrap_or_else(|_| "info,openraft=warn".into()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.bin.display()));
        m.child = Some(child);
    }

    /// Starts a new master with `--join` (not a member until added).
    pub fn start_joiner(&mut self, id: u64) -> String {
        let addr = format!("127.0.0.1:{}", free_port());
        self.spawn_master(id, addr.clone(), vec!["--join".into()]);
        addr
    }

    pub fn master(&self, id: u64) -> &MasterProc {
        &self.masters[&id]
    }

    pub fn ids(&self) -> Vec<u64> {
        self.masters.keys().copied().collect()
    }

    /// Addresses of all masters (running or not).
    pub fn addrs(&self) -> Vec<String> {
        self.masters.values().map(|m| m.addr.clone()).collect()
    }

    /// A client that knows every master.
    pub fn client(&self) -> MasterClient {
        MasterClient::new(MasterClientConfig::new(self.addrs())).expect("client config")
    }

    /// SIGKILLs master `id` and reaps it.
    pub fn kill(&mut self, id: u64) {
        let m = self.masters.get_mut(&id).expect("known master");
        if let Some(mut c) = m.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Restarts master `id` with its data dir and original flags.
    pub fn restart(&mut self, id: u64) {
        let mut m = self.masters.remove(&id).expect("known master");
        assert!(m.child.is_none(), "master {id} is still running");
        self.launch(&mut m);
        self.masters.insert(id, m);
    }

    /// Cluster info from master `id`, if it answers.
    pub async fn info(&self, id: u64) -> Option<GetClusterInfoResponse> {
        let m = self.masters.get(&id)?;
        m.child.as_ref()?;
        let client = MasterClient::new(MasterClientConfig::new(vec![m.addr.clone()])).ok()?;
        client.cluster_info_of(&m.addr).await.ok()
    }

    /// Waits until every running master agrees on one leader; returns its id and term.
    pub async fn wait_for_leader(&self, timeout: Duration) -> (u64, u64) {
        wait_until("a leader all running masters agree on", timeout, || async {
            let mut seen = None;
            for id in self.ids() {
                if !self.masters[&id].is_running() {
                    continue;
                }
                let info = self.info(id).await?;
                if info.leader_id == 0 || seen.is_some_and(|s| s != (info.leader_id, info.term)) {
                    return None;
                }
                seen = Some((info.leader_id, info.term));
            }
            let (leader, _) = seen?;
            self.masters.get(&leader).filter(|m| m.is_running())?;
            seen
        })
        .await
    }

    /// Prints the tail of every master's log (for failing tests).
    pub fn dump_logs(&self) {
        for m in self.masters.values() {
            let text = std::fs::read_to_string(&m.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!("---- master {} log (last 40 lines) ----", m.id);
            for l in tail.into_iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for m in self.masters.values_mut() {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
