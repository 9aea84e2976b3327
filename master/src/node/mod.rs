//! Wiring of one master: opens the store (`store`), settles its identity
//! (`identity`), starts Raft, builds the handles the services and duties
//! share, serves its ports (`serve`) and starts the background tasks;
//! bootstraps the cluster on first start of a founding member; stops
//! everything on request.

pub mod config;
pub(crate) mod http;
pub mod planted;
pub mod ports;
pub mod run;

mod identity;
mod serve;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mooncake_raft_store::{LogStore, Raft, StateMachineStore};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::duties::book::{self, DutyBook};
use crate::duties::runner::Runner;
use crate::duties::{self, DutyContext};
use crate::leader::LeaderState;
use crate::leader::decisions::EvictionPolicy;
use crate::metrics::MasterMetrics;
use crate::node::config::MasterConfig;
use crate::raft::leader_lease::AckClock;
use crate::raft::network::NetworkFactory;
use crate::raft::prevote::{ElectionDriver, LeaderContact};
use crate::raft::proposer::Proposer;
use crate::rpc::edge::Edge;
use crate::rpc::raft_service::{Admission, RaftServiceImpl};
use crate::rpc::roles::Roles;
use crate::rpc::watch::Watchers;
use crate::shared::{Auth, ReadPath, Shared, Tiers, WritePath};
use identity::Identity;

/// A running master.
pub struct MasterNode {
    pub shared: Arc<Shared>,
    pub grpc_addr: SocketAddr,
    pub http_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl MasterNode {
    /// Starts a master from a validated configuration: its data dir and
    /// identity, Raft, the handles the services and duties share, then its
    /// ports and background tasks; bootstraps a new cluster on a founding
    /// member's first start.
    pub async fn start(cfg: MasterConfig) -> anyhow::Result<MasterNode> {
        cfg.validate().map_err(anyhow::Error::msg)?;
        let tls = serve::load_tls(&cfg)?;
        let metrics = Arc::new(MasterMetrics::new().context("registering metrics")?);
        let (log, sm) = store::open(&cfg, &metrics)?;
        let identity = Identity::establish(&cfg, &log, tls.as_ref()).await?;
        let acks = Arc::new(AckClock::default());
        let network = NetworkFactory {
            cluster: identity.cluster.clone(),
            acks: acks.clone(),
            rpc_seconds: metrics.raft.rpc.clone(),
            flushed: log.flushed(),
            heard: identity.heard.clone(),
            tls: tls.clone(),
            raft_key: identity.raft_key.clone(),
            partition: cfg.raft_partition.clone().map(|p| (cfg.id, p)),
        };
        let raft_config = Arc::new(cfg.raft_config().validate().context("raft config")?);
        let raft =
            Raft::new(cfg.id, raft_config, network.clone(), log.clone(), sm.clone()).await.context("starting raft")?;
        let shared = shared_handles(&cfg, &raft, &log, &sm, metrics, acks, &identity);
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let contact = Arc::new(LeaderContact::default());
        let timing = cfg.election_timing();
        let raft_service = RaftServiceImpl::new(
            raft.clone(),
            log.clone(),
            Admission { cluster: identity.cluster.clone(), raft_key: identity.raft_key.clone() },
            contact.clone(),
            timing.quiet,
            shared.metrics.raft.rpc_handled.clone(),
            identity.heard.clone(),
        )
        .with_checkpoints(sm.checkpoints());
        let limits = serve::port_limits(&cfg);
        let edge = Arc::new(Edge {
            roles: Roles::new(identity.admin_token.clone()),
            watchers: Arc::new(Watchers::new(cfg.max_watchers, cfg.max_watchers_per_peer, cfg.planted.skip_events())),
            listings: Default::default(),
            ignore_tenants: cfg.planted.ignore_tenants(),
        });
        let services = serve::Services { shared: shared.clone(), edge, raft: raft_service };
        let (grpc_addr, grpc_task) =
            serve::serve_grpc(cfg.listen, limits.grpc, tls.as_ref(), services, stop_rx.clone())?;
        tasks.push(grpc_task);
        let http_addr = match cfg.http {
            Some(addr) => {
                let (bound, task) = serve::serve_http(addr, limits.http, shared.clone(), stop_rx.clone()).await?;
                tasks.push(task);
                Some(bound)
            }
            None => None,
        };
        shared.duties.register(book::ELECTIONS, timing.timeout_min);
        let driver = ElectionDriver {
            id: cfg.id,
            raft: raft.clone(),
            log,
            contact,
            network,
            timing,
            elections: shared.metrics.raft.elections.clone(),
            disk_alarm: shared.disk_alarm.clone(),
            duties: shared.duties.clone(),
        };
        tasks.push(tokio::spawn(driver.run(stop_rx.clone())));
        tasks.extend(background_tasks(&cfg, &shared, &sm, &identity, tls, stop_rx));
        if let Some(cluster) = &cfg.initial_cluster {
            identity::bootstrap(&raft, &cluster.0).await?;
        }
        if cfg.restore.is_some() {
            tasks.push(tokio::spawn(store::compact_after_restore(raft.clone(), shared.restoring.clone())));
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

/// The handles the services and duties share ([`Shared`]): the applied
/// state, the leader-local soft state, the proposer and the eviction knobs, the
/// read path's barrier and lease, the tier policy, and what the cluster
/// secret grants.
fn shared_handles(
    cfg: &MasterConfig,
    raft: &Raft,
    log: &LogStore,
    sm: &StateMachineStore,
    metrics: Arc<MasterMetrics>,
    acks: Arc<AckClock>,
    identity: &Identity,
) -> Arc<Shared> {
    let reader = sm.reader();
    let flushed = log.flushed();
    let kv_lease_ttl = Duration::from_millis(cfg.default_kv_lease_ttl_ms);
    let leader = Arc::new(match cfg.planted.unfenced_removals() {
        false => LeaderState::new(kv_lease_ttl),
        true => LeaderState::new_unfenced(kv_lease_ttl),
    });
    let proposer = Proposer::start(
        raft.clone(),
        metrics.raft.batch_commands.clone(),
        metrics.raft.commit.clone(),
        flushed.clone(),
        cfg.batches_in_flight,
    );
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
    // The duties register themselves as they start (`duties::runner`).
    let duties = Arc::new(DutyBook::default());
    Arc::new(Shared {
        id: cfg.id,
        raft: raft.clone(),
        reader,
        sm: sm.clone(),
        leader,
        metrics: metrics.clone(),
        quorum_ack_max: Duration::from_millis(cfg.election_timeout_max_ms),
        disk_alarm: Arc::new(crate::raft::disk_space::DiskAlarm::default()),
        duties,
        events: sm.events(),
        read_path: ReadPath {
            barrier: crate::raft::read_barrier::ReadBarrier::start(raft.clone(), metrics.raft.read_batch.clone()),
            acks,
            leader_lease: cfg.leader_lease(),
            flushed,
            unsafe_stale_reads: cfg.planted.stale_reads(),
        },
        write_path: WritePath {
            proposer,
            eviction_policy: policy,
            eviction_round: Default::default(),
            eviction_wake: tokio::sync::Notify::new(),
            cut_after,
            arena_grants: Default::default(),
            chunk_valid: Duration::from_secs(cfg.put_start_discard_timeout_sec).min(cfg.capability_ttl()) / 2,
            unsafe_chunk_reuse: cfg.planted.chunk_reuse(),
            unsafe_hold_freed: cfg.planted.hold_freed_ranges().then_some(Duration::from_secs(30)),
        },
        tiers: Tiers {
            policy: tiers,
            copy_wake: tokio::sync::Notify::new(),
            copies_queued: tokio::sync::Notify::new(),
        },
        auth: Auth {
            capabilities: crate::objects::capabilities::CapabilityIssuer::new(&identity.secret, cfg.capability_ttl()),
            secret: identity.secret.clone(),
            grants_live,
            fence_wakes: Arc::new(crate::leader::arena_fences::FenceWakes::default()),
        },
        restoring: Arc::new(std::sync::atomic::AtomicBool::new(cfg.restore.is_some())),
        planted_bugs: cfg.planted.on(cfg.id),
    })
}

/// The background tasks beside the election driver: following leadership
/// (woken by Raft metrics, not by a tick), and the periodic duties on the
/// runner (`duties::runner`: interval, stop, leader check, record): the
/// state audit, the disk-space watch, the copy duty, eviction and the
/// leader's duties.
fn background_tasks(
    cfg: &MasterConfig,
    shared: &Arc<Shared>,
    sm: &StateMachineStore,
    identity: &Identity,
    tls: Option<mooncake_tls::TlsConfig>,
    stop_rx: watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let runner = Runner { book: shared.duties.clone(), leader: shared.leader.clone(), stop: stop_rx };
    let mut tasks = Vec::new();
    if cfg.state_audit_every > 0 {
        tasks.push(runner.spawn(crate::raft::state_audit::StateAudit {
            id: cfg.id,
            raft: shared.raft.clone(),
            checkpoints: sm.checkpoints(),
            raft_key: identity.raft_key.clone(),
            tls,
            duties: shared.duties.clone(),
        }));
    }
    tasks.push(runner.spawn(crate::raft::disk_space::DiskWatch {
        dir: cfg.data_dir.clone(),
        min_free_bytes: cfg.data_dir_min_free_mb.saturating_mul(1 << 20),
        alarm: shared.disk_alarm.clone(),
        raft: shared.raft.clone(),
        metrics: shared.metrics.clone(),
        duties: shared.duties.clone(),
    }));
    tasks.push(tokio::spawn(duties::follow_leadership(
        shared.raft.metrics(),
        shared.leader.clone(),
        shared.reader.clone(),
        shared.metrics.clone(),
    )));
    tasks.push(runner.spawn(crate::objects::copies::CopyDuty::new(shared.clone())));
    tasks.push(runner.spawn(duties::EvictionDuty(shared.clone())));
    // The reclaim is a round of the leader's duties every few ticks, with
    // a record of its own.
    shared.duties.register(book::RECLAIM, duties::DUTY_TICK * duties::RECLAIM_EVERY_TICKS);
    tasks.push(runner.spawn(DutyContext {
        shared: shared.clone(),
        client_ttl: Duration::from_secs(cfg.client_ttl_sec),
        discard_after: Duration::from_secs(cfg.put_start_discard_timeout_sec),
        release_after: Duration::from_secs(cfg.put_start_release_timeout_sec),
        unsafe_arena_reuse: cfg.planted.arena_reuse(),
        unsafe_expire_after_stall: cfg.planted.expire_after_stall(),
    }));
    tasks
}
