//! Local Mooncake clusters for the scenarios: masters and store nodes as
//! child processes of the `mooncake` binary itself (`mooncake master`,
//! `mooncake store`), exactly as `mooncake up` runs them, in a temporary
//! directory. [`Cluster`] stops them gracefully on drop (store nodes unmount
//! and remove their `/dev/shm` segment files; a SIGKILL would leave them
//! behind in memory), then `LocalCluster`'s own drop kills what is left.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use mooncake_client::{Client, ClientConfig};
use mooncake_local_cluster::LocalCluster;
use mooncake_transfer::{Protocol, TcpConfig};

/// How long a new cluster may take to elect a leader and mount its segments.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// More time per store node: a fleet of 100 starts its processes at once
/// on a 2-vCPU machine (each execs, maps its segment and mounts it).
const START_PER_STORE: Duration = Duration::from_millis(300);

/// The shape of a cluster.
#[derive(Clone, Copy, Debug)]
pub struct Spec<'a> {
    pub masters: u64,
    pub stores: u64,
    /// Segment size of every store node (e.g. `1GiB`).
    pub segment_size: &'a str,
    /// Store nodes touch every page at start (`--prefault`).
    pub prefault: bool,
}

/// With this variable set to a directory, each cluster's data and logs are
/// kept under it (by default they go to a temporary directory, removed).
pub const KEEP_DIR_ENV: &str = "MOONCAKE_BENCH_KEEP_DIR";

/// A running cluster, stopped on drop.
pub struct Cluster {
    inner: LocalCluster,
}

impl Cluster {
    /// Starts the cluster and waits for a leader and every segment.
    pub async fn start(exe: &Path, spec: Spec<'_>, master_args: &[String]) -> anyhow::Result<Cluster> {
        Self::start_with_tls(exe, spec, master_args, false).await
    }

    /// [`start`](Self::start), with mutual TLS everywhere when `tls` (a
    /// development PKI in the cluster's dir; its clients use it too).
    pub async fn start_with_tls(
        exe: &Path,
        spec: Spec<'_>,
        master_args: &[String],
        tls: bool,
    ) -> anyhow::Result<Cluster> {
        Self::launch(exe, spec, master_args, tls, &[]).await
    }

    /// [`start`](Self::start), with `store_args` given to every store node
    /// (`--ucx`: the data bench's UCX rows).
    pub async fn start_with_store_args(
        exe: &Path,
        spec: Spec<'_>,
        master_args: &[String],
        store_args: &[&str],
    ) -> anyhow::Result<Cluster> {
        Self::launch(exe, spec, master_args, false, store_args).await
    }

    async fn launch(
        exe: &Path,
        spec: Spec<'_>,
        master_args: &[String],
        tls: bool,
        store_args: &[&str],
    ) -> anyhow::Result<Cluster> {
        let mut b = LocalCluster::builder()
            .master_command(exe, &["master"])
            .store_command(exe, &["store"])
            .masters(spec.masters)
            .stores(spec.stores)
            .segment_size(spec.segment_size);
        if spec.prefault {
            b = b.store_arg("--prefault");
        }
        for a in store_args {
            b = b.store_arg(*a);
        }
        if tls {
            b = b.tls();
        }
        // Keep the masters' data and logs for a look afterwards.
        if let Some(dir) = std::env::var_os(KEEP_DIR_ENV) {
            static STARTED: AtomicU64 = AtomicU64::new(0);
            let n = STARTED.fetch_add(1, Ordering::Relaxed);
            let dir = PathBuf::from(dir).join(format!("cluster-{}-{n}", std::process::id()));
            eprintln!("{KEEP_DIR_ENV}: keeping this cluster's data and logs in {}", dir.display());
            b = b.dir(dir);
        }
        for a in master_args {
            b = b.master_arg(a);
        }
        let cluster = Cluster { inner: b.start().map_err(anyhow::Error::msg).context("starting a local cluster")? };
        let timeout = START_TIMEOUT
            .saturating_add(START_PER_STORE.saturating_mul(u32::try_from(spec.stores).unwrap_or(u32::MAX)));
        let ready = async {
            cluster.wait_for_leader(timeout).await?;
            cluster.wait_for_segments(spec.stores, timeout).await
        };
        if let Err(e) = ready.await {
            anyhow::bail!("the local cluster did not come up: {e}\n{}", cluster.log_tails(15));
        }
        Ok(cluster)
    }

    /// A connected workload client (contributes no memory).
    pub async fn client(&self, protocol: Protocol, tcp: &TcpConfig) -> anyhow::Result<Client> {
        Client::connect(self.client_config_for(protocol, tcp)?).await.context("connecting a workload client")
    }

    /// As [`client`](Self::client), without writer chunks: every put
    /// starts with a PutStart.
    pub async fn client_without_chunks(&self, protocol: Protocol, tcp: &TcpConfig) -> anyhow::Result<Client> {
        let cfg = ClientConfig { put_chunk_bytes: 0, ..self.client_config_for(protocol, tcp)? };
        Client::connect(cfg).await.context("connecting a workload client without writer chunks")
    }

    fn client_config_for(&self, protocol: Protocol, tcp: &TcpConfig) -> anyhow::Result<ClientConfig> {
        let mut cfg = ClientConfig::new(self.master_addrs());
        // The bench clears its objects between cells (forced RemoveAll).
        cfg.admin_token = Some(self.admin_token().clone());
        cfg.protocol = protocol;
        cfg.tcp = tcp.clone();
        cfg.tls = self.inner.tls_config(mooncake_tls::Role::Client).map_err(anyhow::Error::msg)?;
        Ok(cfg)
    }
}

impl Deref for Cluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.inner
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.inner
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.inner.stop();
    }
}
