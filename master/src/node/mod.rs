//! Wiring of one master: opens the store, starts Raft, the gRPC services,
//! the HTTP endpoint and the background workers; bootstraps the cluster on
//! first start of a founding member; stops everything on request.

pub mod config;
pub(crate) mod http;
pub mod ports;
pub mod run;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mooncake_proto::GRPC_MESSAGE_MAX_BYTES;
use mooncake_proto::admin::admin_service_server::AdminServiceServer;
use mooncake_proto::master::master_service_server::MasterServiceServer;
use mooncake_proto::raft::raft_service_server::RaftServiceServer;
use mooncake_raft_store::{Raft, StoreOptions, open_store};
use openraft::BasicNode;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::duties::{self, DutyContext};
use crate::leader::LeaderState;
use crate::leader::decisions::EvictionPolicy;
use crate::metrics::{MasterMetrics, MetricsObserver};
use crate::node::config::MasterConfig;
use crate::node::ports::{FD_RESERVE, FIRST_BYTES_TIMEOUT, GuardedListener, PortEvents, PortLimits, fd_budget};
use crate::objects::eviction::Evictor;
use crate::raft::cluster_id::{ClusterId, founding_id};
use crate::raft::leader_lease::AckClock;
use crate::raft::network::NetworkFactory;
use crate::raft::peers_heard::PeersHeard;
use crate::raft::prevote::{ElectionDriver, LeaderContact};
use crate::raft::proposer::Proposer;
use crate::rpc::admin_service::AdminServiceImpl;
use crate::rpc::client_service::MasterServiceImpl;
use crate::rpc::instrumented::Instrumented;
use crate::rpc::raft_service::{Admission, RaftServiceImpl, heard_from_mac};
use crate::shared::{Auth, ReadPath, Shared, Tiers, WritePath};
use mooncake_auth::{ClusterSecret, MacKey};

/// A running master.
pub struct MasterNode {
    pub shared: Arc<Shared>,
    pub grpc_addr: SocketAddr,
    pub http_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl MasterNode {
    /// Starts a master from a validated configuration.
    pub async fn start(cfg: MasterConfig) -> anyhow::Result<MasterNode> {
        cfg.validate().map_err(anyhow::Error::msg)?;
        let tls = load_tls(&cfg)?;
        let metrics = Arc::new(MasterMetrics::new().context("registering metrics")?);
        let observer = Arc::new(MetricsObserver(metrics.clone()));
        let mut store_opts = StoreOptions::new(&cfg.data_dir).with_observer(observer);
        store_opts.fsync = !cfg.dev_unsafe_no_fsync;
        store_opts.node_id = Some(cfg.id);
        store_opts.checkpoint_every = cfg.state_audit_every;
        store_opts.dev_unsafe_tampered_checkpoints = cfg.dev_unsafe_diverge_node == Some(cfg.id);
        let unsafe_modes = [
            cfg.dev_unsafe_no_fsync,
            cfg.dev_unsafe_stale_reads,
            cfg.dev_unsafe_unfenced_removals,
            cfg.dev_unsafe_arena_reuse,
            cfg.dev_unsafe_expire_after_stall,
            store_opts.dev_unsafe_tampered_checkpoints,
        ];
        if unsafe_modes.contains(&true) {
            tracing::warn!(
                no_fsync = cfg.dev_unsafe_no_fsync,
                stale_reads = cfg.dev_unsafe_stale_reads,
                unfenced_removals = cfg.dev_unsafe_unfenced_removals,
                arena_reuse = cfg.dev_unsafe_arena_reuse,
                expire_after_stall = cfg.dev_unsafe_expire_after_stall,
                "DEVELOPMENT-ONLY UNSAFE MODE: this master breaks its guarantees on purpose"
            );
        }
        let (log, sm) =
            open_store(&store_opts).with_context(|| format!("opening data dir {}", cfg.data_dir.display()))?;
        let reader = sm.reader();
        let checkpoints = sm.checkpoints();
        let flushed = log.flushed();
        if let Some(file) = &cfg.restore {
            restore_from(&sm, file)?;
        }
        let raft_config = Arc::new(cfg.raft_config().validate().context("raft config")?);
        let sm_handle = sm.clone();
        let cluster = Arc::new(ClusterId::load(log.clone()).context("reading the cluster id")?);
        let heard = Arc::new(
            PeersHeard::load(&cfg.data_dir)
                .with_context(|| format!("reading the peers heard from in {}", cfg.data_dir.display()))?,
        );
        let sole_founder = cfg.initial_cluster.as_ref().is_some_and(|c| c.0.len() == 1);
        let (secret, origin) = ClusterSecret::load(&cfg.data_dir, cfg.cluster_secret_file.as_deref(), sole_founder)?;
        tracing::info!(?origin, "cluster secret loaded");
        let raft_key = secret.key("raft");
        let admin_token = mooncake_auth::admin::admin_token(&secret);
        let token_file = cfg.data_dir.join(mooncake_auth::admin::ADMIN_TOKEN_FILE);
        mooncake_auth::admin::write_token_file(&token_file, &admin_token)?;
        // No cluster id: a data dir that never held this master's state (or
        // was wiped). A founding member checks its peers never heard from it.
        if cluster.get().is_none()
            && cfg.restore.is_none()
            && let Some(c) = &cfg.initial_cluster
        {
            refuse_if_known(
                cfg.id,
                &cfg.data_dir,
                &founding_id(&cfg.cluster_name, &c.0),
                &c.0,
                &raft_key,
                tls.as_ref(),
            )
            .await?;
        }
        if let Some(c) = &cfg.initial_cluster {
            let id = cluster.adopt(&founding_id(&cfg.cluster_name, &c.0)).context("recording the cluster id")?;
            tracing::info!(cluster_id = %id, "cluster id");
        }
        let acks = Arc::new(AckClock::default());
        let network = NetworkFactory {
            cluster: cluster.clone(),
            acks: acks.clone(),
            rpc_seconds: metrics.raft_rpc.clone(),
            flushed: flushed.clone(),
            heard: heard.clone(),
            tls: tls.clone(),
            raft_key: raft_key.clone(),
        };
        let log_reader = log.clone();
        let raft = Raft::new(cfg.id, raft_config, network.clone(), log, sm).await.context("starting raft")?;
        let kv_lease_ttl = Duration::from_millis(cfg.default_kv_lease_ttl_ms);
        let leader = Arc::new(match cfg.dev_unsafe_unfenced_removals {
            false => LeaderState::new(kv_lease_ttl),
            true => LeaderState::new_unfenced(kv_lease_ttl),
        });
        let proposer =
            Proposer::start(raft.clone(), metrics.batch_commands.clone(), metrics.commit.clone(), flushed.clone());
        let policy = EvictionPolicy {
            high_watermark_ratio: cfg.eviction_high_watermark_ratio,
            eviction_ratio: cfg.eviction_ratio,
            kv_lease_ttl,
        };
        let tiers = cfg.tier_policy();
        // How long a WRITE grant can be used: an arena whose store node never
        // acknowledges its revoke is returned after this (arena_fences.rs).
        let skew = Duration::from_millis(mooncake_auth::capability::CAPABILITY_CLOCK_SKEW_MS);
        let grants_live = cfg.capability_ttl() + skew + Duration::from_secs(1);
        // Measured from a commit on an earlier leader's clock: one more skew.
        let cut_after = grants_live + skew;
        let cuts = Arc::new(crate::objects::arena_cuts::ArenaCuts {
            reader: reader.clone(),
            leader: leader.clone(),
            proposer: proposer.clone(),
            metrics: metrics.clone(),
            cut_after,
        });
        let evictor = Arc::new(Evictor::new(
            reader.clone(),
            leader.clone(),
            proposer.clone(),
            policy,
            tiers,
            metrics.clone(),
            cuts,
        ));
        let disk_alarm = Arc::new(crate::raft::disk_space::DiskAlarm::default());
        let fence_wakes = Arc::new(crate::leader::arena_fences::FenceWakes::default());
        let shared = Arc::new(Shared {
            id: cfg.id,
            raft: raft.clone(),
            reader: reader.clone(),
            sm: sm_handle,
            leader: leader.clone(),
            metrics: metrics.clone(),
            quorum_ack_max: Duration::from_millis(cfg.election_timeout_max_ms),
            disk_alarm: disk_alarm.clone(),
            read_path: ReadPath {
                barrier: crate::raft::read_barrier::ReadBarrier::start(raft.clone(), metrics.read_batch.clone()),
                acks,
                leader_lease: cfg.leader_lease(),
                flushed,
                unsafe_stale_reads: cfg.dev_unsafe_stale_reads,
            },
            write_path: WritePath {
                proposer: proposer.clone(),
                evictor: evictor.clone(),
                arena_grants: tokio::sync::Mutex::new(()),
            },
            tiers: Tiers {
                policy: tiers,
                copy_wake: tokio::sync::Notify::new(),
                copies_queued: tokio::sync::Notify::new(),
            },
            auth: Auth {
                capabilities: crate::objects::capabilities::CapabilityIssuer::new(&secret, cfg.capability_ttl()),
                secret,
                roles: crate::rpc::roles::Roles::new(admin_token),
                grants_live,
                fence_wakes: fence_wakes.clone(),
            },
        });
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let contact = Arc::new(LeaderContact::default());
        let timing = cfg.election_timing();
        let raft_service = RaftServiceImpl::new(
            raft.clone(),
            log_reader.clone(),
            Admission { cluster: cluster.clone(), raft_key: raft_key.clone() },
            contact.clone(),
            timing.quiet,
            metrics.raft_rpc_handled.clone(),
            heard,
        )
        .with_checkpoints(checkpoints.clone());
        let limits = port_limits(&cfg);
        let (grpc_addr, grpc_task) =
            serve_grpc(cfg.listen, limits.grpc, tls.as_ref(), shared.clone(), raft_service, stop_rx.clone())?;
        tasks.push(grpc_task);
        let driver = ElectionDriver {
            id: cfg.id,
            raft: raft.clone(),
            log: log_reader,
            contact,
            network,
            timing,
            elections: metrics.elections.clone(),
            disk_alarm: disk_alarm.clone(),
        };
        tasks.push(tokio::spawn(driver.run(stop_rx.clone())));
        if cfg.state_audit_every > 0 {
            tasks.push(tokio::spawn(crate::raft::state_audit::run(
                cfg.id,
                raft.clone(),
                checkpoints,
                raft_key,
                tls.clone(),
                stop_rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(crate::raft::disk_space::watch(
            cfg.data_dir.clone(),
            cfg.data_dir_min_free_mb.saturating_mul(1 << 20),
            disk_alarm,
            raft.clone(),
            metrics.clone(),
            stop_rx.clone(),
        )));
        let http_addr = match cfg.http {
            Some(addr) => {
                let (bound, task) = serve_http(addr, limits.http, shared.clone(), stop_rx.clone()).await?;
                tasks.push(task);
                Some(bound)
            }
            None => None,
        };
        tasks.push(tokio::spawn(duties::follow_leadership(raft.metrics(), leader.clone(), metrics.clone())));
        tasks.push(tokio::spawn(crate::objects::copies::run(shared.clone())));
        tasks.push(tokio::spawn(duties::leader_duties(DutyContext {
            reader,
            leader,
            proposer,
            client_ttl: Duration::from_secs(cfg.client_ttl_sec),
            discard_after: Duration::from_secs(cfg.put_start_discard_timeout_sec),
            release_after: Duration::from_secs(cfg.put_start_release_timeout_sec),
            kv_lease_ttl,
            unsafe_arena_reuse: cfg.dev_unsafe_arena_reuse,
            unsafe_expire_after_stall: cfg.dev_unsafe_expire_after_stall,
            grants_live,
            fence_wakes,
            evictor,
            metrics,
        })));
        if let Some(cluster) = &cfg.initial_cluster {
            bootstrap(&raft, &cluster.0).await?;
        }
        if cfg.restore.is_some() {
            tasks.push(tokio::spawn(compact_after_restore(raft.clone())));
        }
        tracing::info!(id = cfg.id, grpc = %grpc_addr, http = ?http_addr, data_dir = %cfg.data_dir.display(), "master started");
        Ok(MasterNode { shared, grpc_addr, http_addr, stop, tasks })
    }

    /// Resolves when the Raft core has stopped by itself (a storage error or
    /// a panic inside it), with the reason. A node in that state can answer
    /// nothing truthfully: the process must end (`run.rs`, crash-only).
    pub async fn core_failed(&self) -> String {
        let mut rx = self.shared.raft.metrics();
        loop {
            if let Err(fatal) = &rx.borrow_and_update().running_state
                && !matches!(fatal, openraft::error::Fatal::Stopped)
            {
                return fatal.to_string();
            }
            if rx.changed().await.is_err() {
                return "the Raft core ended".into();
            }
        }
    }

    /// Resolves when a committed membership no longer names this master,
    /// after one that did, with the log id of that membership. openraft 0.9
    /// lets a removed leader keep leading (it replicates to the voters that
    /// remain and commits with them); the Raft thesis (4.2.2) has it step
    /// down instead, and a removed follower has nothing left to do. Either
    /// way the process ends (`run.rs`) and the voters carry on: a removed
    /// leader's peers elect one of their own within an election timeout.
    /// Replayed memberships from before this master joined do not count,
    /// which is why it must first have seen itself named.
    pub async fn removed(&self) -> String {
        let mut rx = self.shared.raft.metrics();
        let mut named = false;
        loop {
            {
                let m = rx.borrow_and_update();
                let membership = &m.membership_config;
                let applied = m.last_applied.map(|l| l.index);
                if let Some(log) = membership.log_id() {
                    let in_it = membership.membership().get_node(&m.id).is_some();
                    named |= in_it;
                    if named && !in_it && applied.is_some_and(|a| a >= log.index) {
                        return log.to_string();
                    }
                }
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stops serving and shuts Raft down.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.shared.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        for t in self.tasks {
            t.abort();
        }
    }
}

/// How long a master with an empty data dir waits for each peer's answer
/// to `HeardFrom` (a peer that is down cannot vouch either way).
const HEARD_FROM_TIMEOUT: Duration = Duration::from_secs(2);

/// A founding member whose data dir holds no state asks the other founding
/// members whether they ever had a Raft exchange with its id. If one did,
/// this master lost the votes and log it promised (its data dir was wiped or
/// replaced): starting blank under the same id could let it vote twice in a
/// term, so it refuses and says how to replace it (`peers_heard.rs`).
async fn refuse_if_known(
    id: u64,
    data_dir: &std::path::Path,
    cluster_id: &str,
    members: &BTreeMap<u64, String>,
    raft_key: &MacKey,
    tls: Option<&mooncake_tls::TlsConfig>,
) -> anyhow::Result<()> {
    use mooncake_proto::raft::HeardFromRequest;
    use mooncake_proto::raft::raft_service_client::RaftServiceClient;
    for (peer, addr) in members.iter().filter(|(peer, _)| **peer != id) {
        let asked = async {
            let mut c = RaftServiceClient::new(mooncake_tls::grpc::endpoint(addr, tls).ok()?.connect().await.ok()?);
            let mac = heard_from_mac(raft_key, id);
            c.heard_from(HeardFromRequest { node_id: id, mac }).await.ok().map(|r| r.into_inner())
        };
        let Ok(Some(answer)) = tokio::time::timeout(HEARD_FROM_TIMEOUT, asked).await else {
            continue;
        };
        if answer.heard && answer.cluster_id == cluster_id {
            anyhow::bail!(
                "data dir {} holds no state, but master {peer} ({addr}) has had Raft exchanges with master {id} of \
                 cluster {cluster_id}: this master lost the votes and log it promised (wiped or replaced disk). It \
                 must not rejoin under id {id}. Replace it: start a fresh master with a NEW id and --join, then \
                 `mooncake member add <new-id> <addr>` and `mooncake member remove {id}` (docs/OPERATIONS.md, \
                 Membership)",
                data_dir.display()
            );
        }
    }
    Ok(())
}

/// Initializes the cluster on a pristine founding member. Every founding
/// member does this with the same membership, which openraft allows; a
/// member that already has state skips it.
async fn bootstrap(raft: &Raft, members: &BTreeMap<u64, String>) -> anyhow::Result<()> {
    if raft.is_initialized().await.context("raft state")? {
        return Ok(());
    }
    let nodes: BTreeMap<u64, BasicNode> = members.iter().map(|(id, a)| (*id, BasicNode::new(a))).collect();
    match raft.initialize(nodes).await {
        Ok(()) => tracing::info!(members = ?members, "bootstrapped the cluster"),
        Err(e) => tracing::info!(error = %e, "not bootstrapping: already initialized"),
    }
    Ok(())
}

/// Seeds a pristine store with the state of a snapshot file.
fn restore_from(sm: &mooncake_raft_store::StateMachineStore, file: &std::path::Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading snapshot file {}", file.display()))?;
    let (info, body) = mooncake_raft_store::decode_snapshot_file(&bytes)
        .with_context(|| format!("checking snapshot file {}", file.display()))?;
    sm.seed_restore(body).context("restoring")?;
    tracing::info!(
        file = %file.display(),
        source_applied_index = info.applied_index,
        state_hash = format!("{:016x}", info.state_hash),
        "restored the state from a snapshot file"
    );
    Ok(())
}

/// After a restore, snapshot and purge the log at once, so masters added
/// later receive the restored state as a snapshot (the log alone does not
/// contain it).
async fn compact_after_restore(raft: Raft) {
    let deadline = Duration::from_secs(60);
    let leading = raft.wait(Some(deadline)).state(openraft::ServerState::Leader, "restored master leads").await;
    if let Err(e) = leading {
        tracing::error!(error = %e, "restored master did not become leader; not compacting");
        return;
    }
    let applied = raft.metrics().borrow().last_applied.map(|l| l.index).unwrap_or(0);
    if let Err(e) = raft.trigger().snapshot().await {
        tracing::error!(error = %e, "snapshot after restore");
        return;
    }
    let built = raft
        .wait(Some(deadline))
        .metrics(|m| m.snapshot.is_some_and(|s| s.index >= applied), "snapshot after restore")
        .await;
    match built {
        Ok(m) => {
            let upto = m.snapshot.map(|l| l.index).unwrap_or(0);
            if let Err(e) = raft.trigger().purge_log(upto).await {
                tracing::error!(error = %e, "purge after restore");
            }
            tracing::info!(snapshot_index = upto, "restored state snapshotted; new masters will receive it");
        }
        Err(e) => tracing::error!(error = %e, "snapshot after restore did not complete"),
    }
}

async fn wait_stop(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Most connections to the HTTP port (health checks, metrics scrapers,
/// `mooncake status`), and from one address.
const HTTP_CONNECTIONS_MAX: usize = 128;
const HTTP_PEER_CONNECTIONS_MAX: usize = 32;

/// The connection limits of both ports.
struct Limits {
    grpc: PortLimits,
    http: PortLimits,
}

/// The configured limits within the file descriptor budget (`ports.rs`).
fn port_limits(cfg: &MasterConfig) -> Limits {
    let budget = usize::try_from(fd_budget()).unwrap_or(usize::MAX);
    let http_max = HTTP_CONNECTIONS_MAX.min(budget / 8).max(1);
    let grpc_max = cfg.grpc_connections_max.min(budget.saturating_sub(http_max)).max(1);
    if grpc_max < cfg.grpc_connections_max {
        tracing::warn!(
            configured = cfg.grpc_connections_max,
            used = grpc_max,
            reserve = FD_RESERVE,
            "the file descriptor limit (ulimit -n) caps the gRPC port's connections below --grpc-connections-max; \
             raise the limit (LimitNOFILE= in systemd) for larger clusters"
        );
    }
    let first_bytes_timeout = FIRST_BYTES_TIMEOUT;
    Limits {
        grpc: PortLimits {
            total_max: grpc_max,
            peer_max: cfg.grpc_peer_connections_max.min(grpc_max),
            first_bytes_timeout,
            budget_others: http_max,
        },
        http: PortLimits {
            total_max: http_max,
            peer_max: HTTP_PEER_CONNECTIONS_MAX.min(http_max),
            first_bytes_timeout,
            // Small: it takes its share first.
            budget_others: 0,
        },
    }
}

/// What a port tells the master: a refusal restarts every client's TTL
/// (a heartbeat may have been refused) and is counted.
fn port_events(port: &'static str, shared: &Arc<Shared>) -> PortEvents {
    let (leader, metrics) = (shared.leader.clone(), shared.metrics.clone());
    PortEvents {
        on_deaf: Box::new(move || {
            leader.with(|t| t.restart_hearing(std::time::Instant::now()));
        }),
        on_refused: Box::new(move |reason| metrics.port_refusals.with_label_values(&[port, reason]).inc()),
    }
}

/// Binds `addr` for a port and starts admitting connections under `limits`.
fn bind_port(
    port: &'static str,
    addr: SocketAddr,
    limits: PortLimits,
    shared: &Arc<Shared>,
) -> anyhow::Result<GuardedListener> {
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(std_listener)?;
    Ok(GuardedListener::start(port, listener, limits, port_events(port, shared))?)
}

fn serve_grpc(
    addr: SocketAddr,
    limits: PortLimits,
    tls: Option<&mooncake_tls::TlsConfig>,
    shared: Arc<Shared>,
    raft_service: RaftServiceImpl,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = bind_port("grpc", addr, limits, &shared)
        .with_context(|| format!("binding gRPC address {addr} (in use? pick another --listen)"))?;
    let bound = listener.local_addr();
    let incoming = listener.into_stream();
    let service = Instrumented::new(MasterServiceImpl::new(shared.clone()), shared.metrics.clone());
    let master = MasterServiceServer::new(service)
        .max_decoding_message_size(GRPC_MESSAGE_MAX_BYTES)
        .max_encoding_message_size(GRPC_MESSAGE_MAX_BYTES);
    let raft = RaftServiceServer::new(raft_service)
        .max_decoding_message_size(GRPC_MESSAGE_MAX_BYTES)
        .max_encoding_message_size(GRPC_MESSAGE_MAX_BYTES);
    let admin = AdminServiceServer::new(AdminServiceImpl::new(shared));
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(mooncake_tls::grpc::server_tls(tls)).context("gRPC TLS settings")?;
    }
    let task = tokio::spawn(async move {
        let server = builder
            .add_service(master)
            .add_service(raft)
            .add_service(admin)
            .serve_with_incoming_shutdown(incoming, wait_stop(stop));
        if let Err(e) = server.await {
            tracing::error!(error = %e, "gRPC server stopped");
        }
    });
    Ok((bound, task))
}

/// Loads the TLS files (`None`: TLS off), and logs the one warning of
/// `--insecure` when it lets a plain master bind a reachable address.
fn load_tls(cfg: &MasterConfig) -> anyhow::Result<Option<mooncake_tls::TlsConfig>> {
    if let mooncake_tls::Exposure::Insecure { warning } = cfg.exposure().map_err(anyhow::Error::msg)? {
        tracing::warn!("{warning}");
    }
    let tls = cfg.tls.load()?;
    if let Some(tls) = &tls {
        tracing::info!(cert = %tls.files().cert.display(), role = ?tls.own_role(), "mutual TLS on the gRPC port");
    }
    Ok(tls)
}

async fn serve_http(
    addr: SocketAddr,
    limits: PortLimits,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = bind_port("http", addr, limits, &shared)
        .with_context(|| format!("binding HTTP address {addr} (in use? pick another --http)"))?;
    let bound = listener.local_addr();
    let app = crate::node::http::router(shared);
    let task = tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(wait_stop(stop));
        if let Err(e) = server.await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok((bound, task))
}
