//! [`Cluster`]: the test-facing face of `mooncake_local_cluster::LocalCluster`.
//! Same processes and flags as `mooncake up`; failures panic with the logs'
//! tails so a test reads as a story, not as error plumbing.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use mooncake_client::MasterClient;
use mooncake_local_cluster::{LocalCluster, Role};
use mooncake_proto::master::GetClusterInfoResponse;

/// Polls `cond` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match mooncake_local_cluster::wait_for(what, timeout, cond).await {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// Builds a [`Cluster`].
pub struct ClusterBuilder {
    inner: mooncake_local_cluster::LocalClusterBuilder,
}

impl ClusterBuilder {
    pub fn masters(mut self, n: u64) -> Self {
        self.inner = self.inner.masters(n);
        self
    }
    pub fn stores(mut self, n: u64) -> Self {
        self.inner = self.inner.stores(n);
        self
    }
    /// Each store node also contributes a disk segment of `s`
    /// (`LocalClusterBuilder::disk_size`).
    pub fn disk_size(mut self, s: &str) -> Self {
        self.inner = self.inner.disk_size(s);
        self
    }
    pub fn segment_size(mut self, s: &str) -> Self {
        self.inner = self.inner.segment_size(s);
        self
    }
    /// An extra flag for every master (e.g. `--client_ttl=2`).
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.inner = self.inner.master_arg(a);
        self
    }
    pub fn store_arg(mut self, a: impl Into<String>) -> Self {
        self.inner = self.inner.store_arg(a);
        self
    }
    pub fn master_bin(mut self, p: impl Into<PathBuf>) -> Self {
        self.inner = self.inner.master_bin(p);
        self
    }
    /// Run every role from the one `mooncake` binary: `p master …`, `p store …`.
    pub fn binary(mut self, p: impl Into<PathBuf>) -> Self {
        let p = p.into();
        self.inner = self.inner.master_command(&p, &["master"]).store_command(&p, &["store"]);
        self
    }
    /// Mutual TLS everywhere, from a development PKI in the cluster's dir
    /// (`LocalClusterBuilder::tls`).
    pub fn tls(mut self) -> Self {
        self.inner = self.inner.tls();
        self
    }
    /// Run store nodes as `p store …` (the `mooncake` binary).
    pub fn mooncake_bin(mut self, p: impl Into<PathBuf>) -> Self {
        self.inner = self.inner.store_command(p, &["store"]);
        self
    }
    pub fn start(self) -> Cluster {
        Cluster { inner: self.inner.start().unwrap_or_else(|e| panic!("starting cluster: {e}")) }
    }
}

/// A running cluster of real processes, killed on drop.
pub struct Cluster {
    pub inner: LocalCluster,
}

impl Cluster {
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder { inner: LocalCluster::builder().masters(3) }
    }
    pub fn addrs(&self) -> Vec<String> {
        self.inner.master_addrs()
    }
    pub fn ids(&self) -> Vec<u64> {
        self.inner.master_ids()
    }
    pub fn client(&self) -> MasterClient {
        self.inner.client().unwrap_or_else(|e| panic!("{e}"))
    }
    /// The TLS identity of `role` in the cluster's PKI (`None` without TLS).
    pub fn tls_config(&self, role: mooncake_tls::Role) -> Option<mooncake_tls::TlsConfig> {
        self.inner.tls_config(role).unwrap_or_else(|e| panic!("TLS identity of {role}: {e}"))
    }
    /// The directory of the cluster's development PKI (TLS clusters only).
    pub fn tls_dir(&self) -> &std::path::Path {
        self.inner.tls_dir().unwrap_or_else(|| panic!("the cluster runs without TLS"))
    }
    pub fn kill(&mut self, id: u64) {
        self.inner.kill(Role::Master, id);
    }
    pub fn kill_store(&mut self, id: u64) {
        self.inner.kill(Role::Store, id);
    }
    /// SIGSTOP master `id` (see [`Cluster::resume`]).
    pub fn pause(&self, id: u64) {
        self.inner.pause(Role::Master, id).unwrap_or_else(|e| panic!("pause master {id}: {e}"));
    }
    pub fn resume(&self, id: u64) {
        self.inner.resume(Role::Master, id).unwrap_or_else(|e| panic!("resume master {id}: {e}"));
    }
    /// Master `id`'s exit status once it ended by itself (`None` while it runs).
    pub fn master_exit_status(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        self.inner.exit_status(Role::Master, id)
    }
    pub fn restart(&mut self, id: u64) {
        self.inner.restart(Role::Master, id).unwrap_or_else(|e| panic!("restart master {id}: {e}"));
    }
    pub fn start_joiner(&mut self, id: u64) -> String {
        self.inner.start_joiner(id).unwrap_or_else(|e| panic!("start joiner {id}: {e}"))
    }
    /// Master `id`'s own view, with the state hash (tests compare replicas).
    pub async fn info(&self, id: u64) -> Option<GetClusterInfoResponse> {
        self.inner.info_with_hash(id).await
    }
    pub async fn wait_for_leader(&self, timeout: Duration) -> (u64, u64) {
        match self.inner.wait_for_leader(timeout).await {
            Ok(v) => v,
            Err(e) => {
                self.dump_logs();
                panic!("{e}")
            }
        }
    }
    /// [`wait_until`] that prints the cluster's logs before it panics.
    pub async fn wait_until<T, F, Fut>(&self, what: &str, timeout: Duration, cond: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        match mooncake_local_cluster::wait_for(what, timeout, cond).await {
            Ok(v) => v,
            Err(e) => {
                self.dump_logs();
                panic!("{e}")
            }
        }
    }
    pub async fn wait_for_segments(&self, n: u64, timeout: Duration) {
        if let Err(e) = self.inner.wait_for_segments(n, timeout).await {
            self.dump_logs();
            panic!("{e}");
        }
    }
    /// Master `id`'s Prometheus metrics, parsed.
    pub fn metrics(&self, id: u64) -> Vec<crate::http::Sample> {
        let node = self.inner.node(Role::Master, id).unwrap_or_else(|| panic!("no master {id}"));
        let (code, body) = crate::http::http_get(&node.http, "/metrics").unwrap_or_else(|e| panic!("scrape {id}: {e}"));
        assert_eq!(code, 200, "metrics of master {id}: {body}");
        crate::http::parse_prometheus(&body).unwrap_or_else(|e| panic!("malformed metrics of master {id}: {e}"))
    }
    /// One metric of master `id` (no labels), 0 when absent.
    pub fn metric(&self, id: u64, name: &str) -> f64 {
        crate::http::sample_value(&self.metrics(id), name, &[]).unwrap_or(0.0)
    }
    pub fn dump_logs(&self) {
        eprintln!("{}", self.inner.log_tails(40));
    }
}
