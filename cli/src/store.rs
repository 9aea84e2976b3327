//! `mooncake store`: a store node. Contributes a segment of memory, serves
//! transfers on `--listen` (within the `--transfer-*` connection limits and
//! timeouts), keeps the segment registered with heartbeats (remounting it if
//! the masters forget it), and unmounts it on SIGINT/SIGTERM. At start it
//! removes the /dev/shm segment files a crashed node of the same
//! `--client-id` left behind. See docs/OPERATIONS.md, "Store nodes".

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use mooncake_client::{Client, ClientConfig, parse_size};
use mooncake_transfer::{
    Protocol, SERVER_CONNECTIONS_DEFAULT, SERVER_HEADER_TIMEOUT_DEFAULT, SERVER_IDLE_TIMEOUT_DEFAULT,
    SERVER_PEER_CONNECTIONS_DEFAULT, ServerConfig,
};

use crate::MastersArg;

#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    #[command(flatten)]
    pub masters: MastersArg,
    /// Memory to contribute (Mooncake: global_segment_size), e.g. 4GiB.
    #[arg(long = "segment-size", alias = "global_segment_size", default_value = "1GiB", value_parser = parse_size)]
    pub segment_size: u64,
    /// Address to serve transfers on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// How other nodes reach this host (Mooncake: local_hostname); default: the --listen IP.
    #[arg(long = "local-hostname", alias = "local_hostname")]
    pub local_hostname: Option<String>,
    /// Zone label (rack) for replica choice.
    #[arg(long, default_value = "")]
    pub zone: String,
    /// Stable identity; keep it across restarts so stale segments are replaced at once.
    #[arg(long = "client-id")]
    pub client_id: Option<u64>,
    /// The credential that proves this node is its --client-id (32 random
    /// bytes, mode 0600): read if the file exists, else created. Keep it
    /// with --client-id across restarts: a node restarted without it waits
    /// for its old registration to expire (client_ttl).
    #[arg(long = "credential-file", env = "MOONCAKE_CREDENTIAL_FILE")]
    pub credential_file: Option<std::path::PathBuf>,
    /// Touch every page at start (no page faults later; fails early if memory is short).
    #[arg(long)]
    pub prefault: bool,
    /// Use anonymous memory instead of a /dev/shm file (no same-host shm transfers).
    #[arg(long)]
    pub anonymous: bool,
    /// Also serve the segment to UCX readers: clients with protocol `ucx`
    /// read it one-sided over UCX RMA (verbs, TCP or shared memory, as
    /// UCX_TLS allows); writes stay on the checked TCP lanes. Needs a build
    /// with feature `ucx`. See docs/TRANSFER.md and docs/SECURITY.md.
    #[arg(long)]
    pub ucx: bool,
    /// With TLS on, `--ucx` is refused unless this says the fabric that
    /// reaches the node's UCX worker is trusted: where UCX emulates RMA
    /// (TCP, shared memory) any peer that reaches the worker can read any
    /// byte of this process (docs/SECURITY.md).
    #[arg(long = "ucx-trusted-fabric", requires = "ucx")]
    pub ucx_trusted_fabric: bool,
    /// Dedicate this node's segments to one tenant (docs/TENANTS.md): only
    /// its objects are placed on them. With --ucx they are dedicated to the
    /// default tenant unless this names another (or --ucx-shared-tenants).
    #[arg(long = "segment-tenant")]
    pub segment_tenant: Option<String>,
    /// With --ucx: let every tenant's objects be placed on this node's
    /// segments. A UCX key reaches its whole segment, so a tenant that reads
    /// one object here can read and write every other tenant's objects on
    /// it: for tenants that trust each other only.
    #[arg(long = "ucx-shared-tenants", requires = "ucx", conflicts_with = "segment_tenant")]
    pub ucx_shared_tenants: bool,
    /// On exit, unmount the memory segment (its objects are gone at once)
    /// and remove its /dev/shm file. Without it, a node with --client-id and
    /// --credential-file leaves both for its successor: restarted within
    /// client_ttl with the same flags, it serves the same objects again
    /// (docs/OPERATIONS.md, "Restarting a store node").
    #[arg(long = "unmount-on-exit")]
    pub unmount_on_exit: bool,
    /// TESTS ONLY. Serve UCX although no transport UCX opened does RMA in a
    /// NIC: over TCP or shared memory UCX emulates RMA and any peer that
    /// reaches the node's UCX worker can read any byte of this process or
    /// crash it. Without it such a node refuses to start.
    #[arg(long = "ucx-allow-emulated-rma", env = "MOONCAKE_UCX_ALLOW_EMULATED_RMA", num_args = 0..=1,
        default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new())]
    pub ucx_allow_emulated_rma: bool,
    /// HTTP address for /health, /metrics (Prometheus text) and /standalone
    /// (what an inference process on this host needs to use this node as its
    /// store: Python's `setup_dummy(…, "<this address>")`).
    #[arg(long)]
    pub http: Option<std::net::SocketAddr>,
    /// Most transfer connections served at once; more are answered BUSY.
    #[arg(long = "transfer-connections-max", default_value_t = SERVER_CONNECTIONS_DEFAULT)]
    pub transfer_connections_max: usize,
    /// Most transfer connections from one IP address (all clients of a host together).
    #[arg(long = "transfer-peer-connections-max", default_value_t = SERVER_PEER_CONNECTIONS_DEFAULT)]
    pub transfer_peer_connections_max: usize,
    /// Seconds a request header may take to arrive before its connection is closed.
    #[arg(long = "transfer-header-timeout-sec", default_value_t = SERVER_HEADER_TIMEOUT_DEFAULT.as_secs())]
    pub transfer_header_timeout_sec: u64,
    /// Seconds a transfer connection may stay idle before it is closed (clients reconnect).
    #[arg(long = "transfer-idle-timeout-sec", default_value_t = SERVER_IDLE_TIMEOUT_DEFAULT.as_secs())]
    pub transfer_idle_timeout_sec: u64,
    /// Milliseconds between heartbeats to the masters.
    #[arg(long = "heartbeat-interval-ms", default_value_t = mooncake_client::config::DEFAULT_HEARTBEAT_INTERVAL.as_millis() as u64)]
    pub heartbeat_interval_ms: u64,
    /// Serve plain TCP on addresses that are not loopback (--listen,
    /// --http) without TLS. Without this flag such a store node refuses to start.
    #[arg(long)]
    pub insecure: bool,
    /// A disk segment to contribute besides memory (docs/TIERS.md): a file
    /// on a local SSD (a filesystem with O_DIRECT), created with --disk-size
    /// bytes on the first start and served again, with its objects, after a
    /// restart. Needs --client-id (and keep --credential-file).
    #[arg(long = "disk-segment", requires = "disk_size", requires = "client_id")]
    pub disk_segment: Option<std::path::PathBuf>,
    /// Size of the disk segment's data, e.g. 64GiB (whole 4 KiB blocks).
    #[arg(long = "disk-size", value_parser = parse_size, requires = "disk_segment")]
    pub disk_size: Option<u64>,
    /// How the disk segment is read and written: auto (io_uring where the
    /// kernel allows it, else pread/pwrite), io-uring, or pread.
    #[arg(long = "disk-io", default_value = "auto", value_parser = parse_disk_io)]
    pub disk_io: mooncake_segment::BackendChoice,
    /// The planted bug (`--dev-unsafe-unwritten-copies`), in a build with
    /// the `planted-bugs` feature only.
    #[command(flatten)]
    pub planted: mooncake_client::planted::StorePlantedBugs,
}

fn parse_disk_io(s: &str) -> Result<mooncake_segment::BackendChoice, String> {
    match s {
        "auto" => Ok(mooncake_segment::BackendChoice::Auto),
        "io-uring" | "io_uring" => Ok(mooncake_segment::BackendChoice::IoUring),
        "pread" => Ok(mooncake_segment::BackendChoice::Pread),
        other => Err(format!("{other:?} is not a disk I/O mode; use auto, io-uring or pread")),
    }
}

impl StoreArgs {
    /// The loopback rule (docs/SECURITY.md): without TLS, --listen and
    /// --http must be loopback unless --insecure.
    pub fn exposure(&self) -> anyhow::Result<mooncake_tls::Exposure> {
        self.masters.tls.validate()?;
        let mut binds = vec![("--listen", self.listen)];
        binds.extend(self.http.map(|http| ("--http", http)));
        mooncake_tls::check_binds(&binds, self.masters.tls.enabled(), self.insecure).map_err(anyhow::Error::msg)
    }

    /// The transfer server's limits from the `--transfer-*` flags.
    fn server_config(&self) -> ServerConfig {
        ServerConfig {
            connections_max: self.transfer_connections_max,
            peer_connections_max: self.transfer_peer_connections_max,
            header_timeout: Duration::from_secs(self.transfer_header_timeout_sec),
            idle_timeout: Duration::from_secs(self.transfer_idle_timeout_sec),
            ..ServerConfig::default()
        }
    }
}

/// Tries (50 ms apart) for the HTTP server's connections to let go of the
/// client at stop.
const HTTP_DRAIN_TRIES: u32 = 40;

pub async fn run(a: StoreArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.local_hostname.is_some() || !a.listen.ip().is_unspecified(),
        "--listen {} binds every address; give --local-hostname so other nodes know how to reach this one",
        a.listen
    );
    if let mooncake_tls::Exposure::Insecure { warning } = a.exposure()? {
        tracing::warn!("{warning}");
    }
    anyhow::ensure!(
        !(a.ucx && a.masters.tls.enabled() && !a.ucx_trusted_fabric),
        "--ucx with TLS on: UCX reads bypass TLS, and where UCX emulates RMA (its TCP and shared-memory \
         transports) any peer that reaches this node's UCX worker can read any byte of this process. Add \
         --ucx-trusted-fabric if only the cluster's hosts can reach it (an RDMA fabric, a private network), or \
         leave --ucx off (docs/SECURITY.md)"
    );
    if a.ucx {
        tracing::warn!(
            "--ucx: this node's segment is reachable one-sided by UCX peers; its key goes only to holders of a \
             READ grant, but a key also writes (UCX registers with full access), and where UCX emulates RMA \
             (TCP, shared memory) a peer that reaches the UCX worker can read any byte of this process: serve \
             UCX on a trusted fabric only (docs/SECURITY.md)"
        );
    }
    let mut cfg = ClientConfig::new(a.masters.masters.clone());
    cfg.tls = a.masters.tls.load()?;
    cfg.local_hostname = a.local_hostname.clone().unwrap_or_else(|| a.listen.ip().to_string());
    cfg.zone = a.zone.clone();
    cfg.global_segment_size = a.segment_size;
    cfg.client_id = a.client_id;
    if let Some(file) = &a.credential_file {
        cfg.credential = Some(mooncake_auth::Credential::load_or_create(file).context("--credential-file")?);
    }
    cfg.transfer_listen = a.listen;
    cfg.prefault = a.prefault;
    cfg.shm_segment = !a.anonymous;
    cfg.serve_ucx = a.ucx;
    cfg.ucx_allow_emulated_rma = a.ucx_allow_emulated_rma;
    cfg.ucx_shared_tenants = a.ucx_shared_tenants;
    cfg.hand_over_on_close = !a.unmount_on_exit;
    cfg.dedicated_tenant = match &a.segment_tenant {
        Some(name) => {
            Some(mooncake_segment::tenant::Tenant::parse(name).map_err(|e| anyhow::anyhow!("--segment-tenant: {e}"))?)
        }
        None => None,
    };
    cfg.protocol = Protocol::Tcp;
    cfg.heartbeat_interval = Duration::from_millis(a.heartbeat_interval_ms);
    cfg.disk_segment = a.disk_segment.clone();
    cfg.disk_size = a.disk_size.unwrap_or(0);
    cfg.disk_io = a.disk_io;
    cfg.planted = a.planted.clone();
    let client = Client::connect_with_server_config(cfg, a.server_config()).await.context("starting the store node")?;
    let seg = client.local_segment().map(|l| l.spec()).context("store node has no segment")?;
    eprintln!(
        "store node {:016x}: segment {:016x} of {} bytes served at {} (shm {}, tls {}, ucx {}, tenants: {})",
        client.client_id(),
        seg.id,
        seg.size,
        seg.endpoint,
        if seg.shm_path.is_empty() { "off" } else { &seg.shm_path },
        if a.masters.tls.enabled() { "on" } else { "off" },
        if a.ucx { "on" } else { "off" },
        match client.local_segment().and_then(|l| l.tenant()) {
            Some(t) => format!("{t} only"),
            None => "all".to_string(),
        }
    );
    if let Some(disk) = client.local_segment().and_then(|l| l.disk_spec()) {
        eprintln!(
            "store node {:016x}: disk segment {:016x} of {} bytes at {}",
            client.client_id(),
            disk.id,
            disk.size,
            a.disk_segment.as_deref().map(|p| p.display().to_string()).unwrap_or_default()
        );
    }
    let client = std::sync::Arc::new(client);
    let http = match a.http {
        Some(addr) => {
            let node = crate::store_http::NodeState { client: client.clone(), masters: a.masters.masters.clone() };
            Some(crate::store_http::serve(addr, node).await?)
        }
        None => None,
    };
    wait_for_signal().await;
    let hands_over = !a.unmount_on_exit && a.client_id.is_some() && a.credential_file.is_some() && !a.anonymous;
    match hands_over {
        true => eprintln!(
            "store node stopping: its segment stays mounted for a restart with the same --client-id and \
             --credential-file within client_ttl (--unmount-on-exit unmounts it)"
        ),
        false => eprintln!("store node stopping: unmounting its segment"),
    }
    if let Some(h) = http {
        // Wait for the aborted server to drop its handle on the client:
        // otherwise the segment would be left to expire instead of being
        // unmounted (or handed over).
        h.abort();
        let _ = h.await;
    }
    // Connections the server had open hold it too, until they end.
    let mut client = client;
    for _ in 0..HTTP_DRAIN_TRIES {
        match std::sync::Arc::try_unwrap(client) {
            Ok(c) => {
                c.close().await;
                return Ok(());
            }
            Err(still_shared) => client = still_shared,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("store node: HTTP connections still hold the client; segment left to expire");
    Ok(())
}

pub use mooncake_master::wait_for_signal;
