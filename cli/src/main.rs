//! The `mooncake` command-line tool: cluster status and membership, object
//! commands, a master, a store node, a local cluster (`up`), the demo
//! workload and the end-to-end benchmark (`bench`). One binary runs every
//! role, so `mooncake up` needs nothing else.

mod admin;
mod certs;
mod demo;
mod events;
mod members;
mod objects;
mod status;
mod store;
mod store_http;
mod tenants;
mod up;
mod watch;

use std::time::Duration;

use clap::{Parser, Subcommand};
use mooncake_client::{MasterClient, MasterClientConfig};

#[derive(Parser)]
#[command(name = "mooncake", version, about = "mooncake-rs: a KV-cache store with a Raft-replicated master")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Where the masters are.
#[derive(clap::Args, Clone, Debug)]
pub struct MastersArg {
    /// Master addresses, comma separated (`host:port,host:port`).
    #[arg(long, env = "MOONCAKE_MASTERS", value_delimiter = ',', default_value = "127.0.0.1:50051")]
    pub masters: Vec<String>,
    /// Mutual TLS to the masters (and store nodes): all three of
    /// --tls-cert, --tls-key, --tls-ca, or none.
    #[command(flatten)]
    pub tls: mooncake_tls::TlsArgs,
    /// Act as admin with this token file (membership, eviction, snapshots,
    /// forced RemoveAll). Every master writes `admin.token` in its data dir;
    /// `mooncake up` writes one in its cluster dir.
    #[arg(long = "admin-token-file", env = "MOONCAKE_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<std::path::PathBuf>,
    /// The tenant (key space) object commands and watches act in
    /// (docs/TENANTS.md); `default` when not given.
    #[arg(long, env = "MOONCAKE_TENANT", default_value = "", hide_default_value = true)]
    pub tenant: String,
}

impl MastersArg {
    pub fn client(&self) -> anyhow::Result<MasterClient> {
        Ok(MasterClient::new(self.master_config()?)?)
    }

    /// The master client configuration these flags describe.
    pub fn master_config(&self) -> anyhow::Result<MasterClientConfig> {
        let mut cfg = MasterClientConfig::new(self.masters.clone());
        cfg.tls = self.tls.load()?;
        cfg.tenant = self.tenant()?;
        Ok(match &self.admin_token_file {
            Some(f) => cfg.with_admin_token_file(f)?,
            None => cfg,
        })
    }

    /// The tenant `--tenant` names.
    pub fn tenant(&self) -> anyhow::Result<mooncake_segment::tenant::Tenant> {
        mooncake_segment::tenant::Tenant::parse(&self.tenant).map_err(|e| anyhow::anyhow!("--tenant: {e}"))
    }

    /// The admin token, when `--admin-token-file` is given.
    pub fn admin_token(&self) -> anyhow::Result<Option<mooncake_auth::admin::AdminToken>> {
        Ok(self.master_config()?.admin_token)
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Show members, leader, term, commit index, segments and objects.
    Status {
        #[command(flatten)]
        masters: MastersArg,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Refresh every N seconds until interrupted.
        #[arg(long, value_name = "SECONDS")]
        watch: Option<u64>,
    },
    /// Change or list the master quorum.
    Member {
        #[command(subcommand)]
        op: members::MemberOp,
    },
    /// Save a metadata snapshot.
    Snapshot {
        #[command(subcommand)]
        op: admin::SnapshotOp,
    },
    /// List or evict clients.
    Client {
        #[command(subcommand)]
        op: admin::ClientOp,
    },
    /// Tenants' quotas and usage (docs/TENANTS.md).
    Tenant {
        #[command(subcommand)]
        op: tenants::TenantOp,
    },
    /// Create a development PKI for mutual TLS: a CA and certificates for
    /// masters, store nodes, clients and admins.
    Certs {
        #[command(subcommand)]
        op: certs::CertsOp,
    },
    /// Run a master (same flags as `mooncake-master`).
    Master(mooncake_master::MasterConfig),
    /// Run a store node: contribute a segment of memory and serve transfers.
    Store(store::StoreArgs),
    /// Store a file (or `-` for stdin) under KEY.
    Put(objects::PutArgs),
    /// Write the object KEY to FILE (or stdout).
    Get(objects::GetArgs),
    /// Remove the object KEY.
    Rm(objects::RmArgs),
    /// List objects (optionally by key prefix).
    Ls(objects::LsArgs),
    /// Show an object's size, checksum and replicas.
    Stat(objects::StatArgs),
    /// Print every object change (stored, removed, replicas moved) as it
    /// commits, from any revision the masters still hold.
    Watch(watch::WatchArgs),
    /// Publish upstream Mooncake's KV-event feed (ZMQ PUB) from the watch.
    Events(events::EventsArgs),
    /// Run a local cluster (3 masters, 2 store nodes) until Ctrl-C.
    Up(up::UpArgs),
    /// Start a local cluster, run a KV-cache workload through a leader kill, print a summary.
    Demo(demo::DemoArgs),
    /// Benchmark data path, metadata ops, small objects and failover against
    /// same-run baselines (raw TCP, memcpy, etcd, Redis).
    Bench(mooncake_benches::BenchArgs),
}

async fn status_cmd(masters: MastersArg, json: bool, watch: Option<u64>) -> anyhow::Result<()> {
    let c = masters.client()?;
    loop {
        let s = status::gather(&c, &masters.masters).await;
        if json {
            println!("{}", serde_json::to_string_pretty(&s)?);
        } else {
            if watch.is_some() {
                print!("\x1b[2J\x1b[H");
            }
            print!("{}", status::render(&s));
        }
        match watch {
            None => {
                anyhow::ensure!(s.leader_id.is_some(), "no leader known among {:?}", masters.masters);
                return Ok(());
            }
            Some(secs) => tokio::time::sleep(Duration::from_secs(secs.max(1))).await,
        }
    }
}

/// mimalloc instead of glibc malloc: the masters and the data path allocate
/// many small, short-lived buffers (gRPC frames, log entries) from several
/// threads; see docs/PERFORMANCE.md for the measured effect.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A master sets up its own logging (text or JSON, per its flags).
    let cmd = match Cli::parse().cmd {
        Cmd::Master(cfg) => return mooncake_master::run(cfg).await,
        other => other,
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cmd {
        Cmd::Master(cfg) => mooncake_master::run(cfg).await,
        Cmd::Status { masters, json, watch } => status_cmd(masters, json, watch).await,
        Cmd::Member { op } => members::run(op).await,
        Cmd::Snapshot { op } => admin::snapshot(op).await,
        Cmd::Client { op } => admin::client(op).await,
        Cmd::Tenant { op } => tenants::run(op).await,
        Cmd::Store(a) => store::run(a).await,
        Cmd::Certs { op } => certs::run(op),
        Cmd::Put(a) => objects::put(a).await,
        Cmd::Get(a) => objects::get(a).await,
        Cmd::Rm(a) => objects::rm(a).await,
        Cmd::Ls(a) => objects::ls(a).await,
        Cmd::Stat(a) => objects::stat(a).await,
        Cmd::Watch(a) => watch::run(a).await,
        Cmd::Events(a) => events::run(a).await,
        Cmd::Up(a) => up::run(a).await,
        Cmd::Demo(a) => demo::run(a).await,
        Cmd::Bench(a) => mooncake_benches::run(a).await,
    }
}
