//! Configuration of one master: identity, addresses, the Raft timing, and
//! Mooncake's knobs under Mooncake's flag names. Defaults are defined once
//! (here, or beside what they tune: the tier's in `leader/tiering.rs`) and
//! shared by `Default` and the CLI; `validate` checks relations.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::leader::tiering::{
    DEFAULT_DISK_EVICTION_HIGH_WATERMARK_RATIO, DEFAULT_DISK_REPLICA_GRACE_SEC, DEFAULT_OFFLOAD_QUEUE_LIMIT,
    DEFAULT_PROMOTION_ADMISSION_THRESHOLD, DEFAULT_PROMOTION_QUEUE_LIMIT, OffloadMode, TierPolicy,
};

/// KV lease granted by GetReplicaList/ExistKey (Mooncake 0.3.13: 10000 ms).
pub const DEFAULT_KV_LEASE_TTL_MS: u64 = 10_000;
/// Usage above which the leader evicts ahead of need (Mooncake 0.3.13:
/// 0.9). Higher than upstream's: a cache serves hits from what it holds, and
/// on Mooncake's conversation trace the hit rate follows the share of memory
/// in use (an exact LRU at 90 % of the capacity serves 0.91 of the hits of
/// one at 100 %); ours also evicts in a put's path when a segment is full,
/// so the headroom need only cover one duty tick of writes
/// (docs/PERFORMANCE.md, "The store as a cache").
pub const DEFAULT_EVICTION_HIGH_WATERMARK_RATIO: f64 = 0.98;
/// Share of used bytes one eviction round frees, and of a full segment a
/// put evicts at once (Mooncake 0.3.13: 0.05; see the watermark for why less).
pub const DEFAULT_EVICTION_RATIO: f64 = 0.02;
pub const DEFAULT_CLIENT_TTL_SEC: u64 = 10;
pub const DEFAULT_PUT_START_DISCARD_TIMEOUT_SEC: u64 = 30;
pub const DEFAULT_PUT_START_RELEASE_TIMEOUT_SEC: u64 = 600;
/// Lifetime of a data-path capability: twice the put discard timeout, so a
/// writer that may still finish its put holds a valid one (and a client's
/// 10 s transfer timeout fits six times over); a tenth of the release
/// timeout, so a write capability is dead long before its range can be
/// handed to another writer.
pub const DEFAULT_CAPABILITY_TTL_SEC: u64 = 60;
/// Default of `--state-audit-every`: a state hash every 65,536 entries.
pub const DEFAULT_STATE_AUDIT_EVERY: u64 = 65_536;
/// Default of `--grpc-connections-max`: room for a 100-node cluster's
/// clients and store nodes many times over, at one descriptor each.
pub const DEFAULT_GRPC_CONNECTIONS_MAX: usize = 8_192;
/// Default of `--grpc-peer-connections-max`.
pub const DEFAULT_GRPC_PEER_CONNECTIONS_MAX: usize = 2_048;
/// Leader heartbeat; well under the election timeout so one lost heartbeat
/// does not start an election.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u64 = 40;
/// Election timeout range. openraft makes a follower that knew a leader
/// wait `max` (openraft's vote lease) plus a random timeout in `min..max` after
/// the last heartbeat before it campaigns, so a dead leader is replaced
/// after 360–480 ms plus one vote round (`mooncake bench failover`: median
/// ≈ 0.45 s end to end). The default leader lease is a third of `max`.
pub const DEFAULT_ELECTION_TIMEOUT_MIN_MS: u64 = 120;
pub const DEFAULT_ELECTION_TIMEOUT_MAX_MS: u64 = 240;
/// Build a snapshot (and allow log purge) after this many applied entries.
pub const DEFAULT_SNAPSHOT_LOGS: u64 = 20_000;
/// Log entries per AppendEntries. openraft 0.9 gives every AppendEntries
/// one heartbeat interval (40 ms) to be sent, written and synced by the
/// follower, and retries a late one from the same place; an entry of a
/// 1,000-key batch put is ~100 KB, so its default of 300 entries (30 MB)
/// never arrived in time and a master that had to catch up (a new learner,
/// a restarted follower) stayed behind for good (seen at 1 M objects).
/// 8 entries of that size take a few ms; small entries are batched by
/// the group commit already.
pub const MAX_PAYLOAD_ENTRIES: u64 = 8;
/// How long a master may take to receive, decode and store a snapshot's
/// last chunk (openraft's default, 200 ms, is far below the ~2 s a snapshot
/// of 1 M objects takes: the leader gave up and sent the whole snapshot
/// again, over and over, while its own runtime was busy re-reading it).
pub const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 60_000;

/// Command-line flags of `mooncake-master`.
#[derive(clap::Parser, Clone, Debug)]
#[command(name = "mooncake-master", version, about = "A member of the mooncake-rs master quorum")]
pub struct MasterConfig {
    /// This master's Raft node id (unique, non-zero, stable for its data dir).
    #[arg(long)]
    pub id: u64,
    /// Address for client, admin and Raft gRPC.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Address other masters and clients use to reach this one (default: --listen).
    #[arg(long)]
    pub advertise: Option<String>,
    /// The founding members, `1=host:port,2=host:port,3=host:port`. A member
    /// listed here bootstraps the cluster on first start; a single entry is a
    /// valid one-node development cluster.
    #[arg(long = "initial-cluster", value_parser = parse_initial_cluster)]
    pub initial_cluster: Option<InitialCluster>,
    /// Name of the cluster; with the founding members it makes the cluster id
    /// every Raft message carries (masters refuse other clusters' messages).
    #[arg(long = "cluster-name", default_value = "mooncake")]
    pub cluster_name: String,
    /// Start empty and wait to be added by `AddLearner` (for new or replaced
    /// masters); never bootstraps a cluster.
    #[arg(long)]
    pub join: bool,
    /// The cluster secret: a file every master of the cluster is given
    /// (created, mode 0600, by the first founding master that finds none;
    /// copy it to masters on other hosts). Raft messages are accepted only
    /// from masters that hold it. Needed on first start, except by the only
    /// founding member of a one-master cluster; afterwards the copy in the
    /// data dir is used.
    #[arg(long = "cluster-secret-file", env = "MOONCAKE_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Where the Raft log, vote and snapshots live.
    #[arg(long = "data-dir")]
    pub data_dir: PathBuf,
    /// HTTP address for /health, /ready, /leader and /metrics.
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// Most connections to the gRPC port at once (clients, store nodes,
    /// the other masters). Capped at start by the file descriptor budget
    /// (`ulimit -n` less 512 kept for Raft and the data dir). A connection
    /// beyond it takes the place of one that has not spoken yet, or is
    /// refused (docs/OPERATIONS.md, Connection limits).
    #[arg(long = "grpc-connections-max", default_value_t = DEFAULT_GRPC_CONNECTIONS_MAX)]
    pub grpc_connections_max: usize,
    /// Most connections to the gRPC port from one IP address (every process
    /// of a host counts together; a client process holds about one per
    /// master). Lower protects other hosts from one misbehaving host; it
    /// must cover the busiest host's processes. 1..=grpc-connections-max.
    #[arg(long = "grpc-peer-connections-max", default_value_t = DEFAULT_GRPC_PEER_CONNECTIONS_MAX)]
    pub grpc_peer_connections_max: usize,
    /// Free space (MiB) below which the data dir raises the NOSPACE alarm:
    /// the master is not ready and does not lead, before a write fails
    /// (docs/OPERATIONS.md). Twice the last snapshot counts when larger.
    #[arg(long = "data-dir-min-free-mb", default_value_t = crate::raft::disk_space::DEFAULT_MIN_FREE_MB)]
    pub data_dir_min_free_mb: u64,
    /// State audit: every this many applied log entries each master hashes
    /// its state (off the apply path) and the masters compare the hashes;
    /// one whose state differs from a majority's exits (docs/OPERATIONS.md,
    /// "State audit"). Each checkpoint costs one pass over the state on a
    /// blocking thread (about a snapshot encode: 2 s at 3 M objects), so
    /// smaller values cost CPU at scale. 0 turns it off.
    #[arg(long = "state-audit-every", default_value_t = DEFAULT_STATE_AUDIT_EVERY)]
    pub state_audit_every: u64,
    /// Most `Watch` streams this master serves at once (docs/EVENTS.md);
    /// one more is refused UNAVAILABLE, to watch through another master.
    #[arg(long = "max-watchers", default_value_t = crate::rpc::watch::DEFAULT_MAX_WATCHERS)]
    pub max_watchers: usize,
    /// Most `Watch` streams one peer address holds on this master at once
    /// (one more is refused UNAVAILABLE), so one client cannot lock every
    /// other out; capped at --max-watchers.
    #[arg(long = "max-watchers-per-peer", default_value_t = crate::rpc::watch::DEFAULT_MAX_WATCHERS_PER_PEER)]
    pub max_watchers_per_peer: usize,
    /// Object events each master keeps in memory for watchers that resume
    /// (about 450 bytes each); a watcher further behind resyncs from a
    /// listing (docs/EVENTS.md).
    #[arg(long = "watch-history-events", default_value_t = mooncake_raft_store::events::HISTORY_EVENTS_MAX)]
    pub watch_history_events: usize,
    /// KV lease in milliseconds: how long an object read (GetReplicaList,
    /// ExistKey) is protected from Remove, RemoveAll and eviction.
    #[arg(long = "default_kv_lease_ttl", default_value_t = DEFAULT_KV_LEASE_TTL_MS)]
    pub default_kv_lease_ttl_ms: u64,
    /// Usage ratio of all segments above which eviction starts.
    #[arg(long = "eviction_high_watermark_ratio", default_value_t = DEFAULT_EVICTION_HIGH_WATERMARK_RATIO)]
    pub eviction_high_watermark_ratio: f64,
    /// Share of used bytes one eviction round tries to free.
    #[arg(long = "eviction_ratio", default_value_t = DEFAULT_EVICTION_RATIO)]
    pub eviction_ratio: f64,
    /// Seconds without a Ping after which a client is expired.
    #[arg(long = "client_ttl", default_value_t = DEFAULT_CLIENT_TTL_SEC)]
    pub client_ttl_sec: u64,
    /// Seconds after which an unfinished put may be discarded (its key freed).
    #[arg(long = "put_start_discard_timeout_sec", default_value_t = DEFAULT_PUT_START_DISCARD_TIMEOUT_SEC)]
    pub put_start_discard_timeout_sec: u64,
    /// Seconds after which a discarded put's space is given back.
    #[arg(long = "put_start_release_timeout_sec", default_value_t = DEFAULT_PUT_START_RELEASE_TIMEOUT_SEC)]
    pub put_start_release_timeout_sec: u64,
    /// Seconds a data-path capability stays valid after the master issued it
    /// (store nodes allow 5 s of clock skew on top; docs/SECURITY.md).
    /// Longer tolerates slower transfers; shorter narrows what a leaked
    /// capability is good for. It should cover a put's writes (at least the
    /// discard timeout) and end, with the skew, before the release timeout
    /// lets another writer have the range (a warning at start says when it
    /// does not). 1..=3600.
    #[arg(long = "capability_ttl_sec", default_value_t = DEFAULT_CAPABILITY_TTL_SEC)]
    pub capability_ttl_sec: u64,
    /// Copy objects to the disk segments of store nodes (docs/TIERS.md).
    /// Alone: every object is copied to disk once complete ("eager"); with
    /// --offload_on_evict, only objects memory eviction would drop. Memory
    /// eviction then drops only the memory copy of an object on disk.
    #[arg(long = "enable_offload", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub enable_offload: bool,
    /// With --enable_offload: copy to disk only what memory eviction is about
    /// to drop (objects are copied once memory is above its high watermark
    /// less one eviction round), instead of everything.
    #[arg(long = "offload_on_evict", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub offload_on_evict: bool,
    /// Copy an object that is only on disk back to memory once it was read
    /// --promotion_admission_threshold times, while memory is below its high
    /// watermark.
    #[arg(long = "promotion_on_hit", num_args = 0..=1, default_missing_value = "true", default_value_t = false, action = clap::ArgAction::Set)]
    pub promotion_on_hit: bool,
    /// Reads of a disk-only object before it is promoted (1..).
    #[arg(long = "promotion_admission_threshold", default_value_t = DEFAULT_PROMOTION_ADMISSION_THRESHOLD)]
    pub promotion_admission_threshold: u32,
    /// Promotions in flight at most (1..).
    #[arg(long = "promotion_queue_limit", default_value_t = DEFAULT_PROMOTION_QUEUE_LIMIT)]
    pub promotion_queue_limit: usize,
    /// Offload copies in flight at most (1..).
    #[arg(long = "offload_queue_limit", default_value_t = DEFAULT_OFFLOAD_QUEUE_LIMIT)]
    pub offload_queue_limit: usize,
    /// Hot keys (docs/OPERATIONS.md, "Hot keys"): `off`; `observe` (reads are
    /// counted, admitted keys reported in /metrics and the log); `enforce`
    /// (an admitted key gets one more memory replica on another host, up to
    /// --dynamic_replication_max_memory_replicas, dropped again once it
    /// cools).
    #[arg(long = "dynamic_replication_mode", value_enum, default_value = "off")]
    pub dynamic_replication_mode: crate::leader::hot_keys::HotKeyMode,
    /// Seconds over which a key's reads are counted (1..).
    #[arg(long = "dynamic_replication_heat_window_seconds", default_value_t = 10)]
    pub dynamic_replication_heat_window_seconds: u64,
    /// Reads a second, over the heat window, that make a key hot (> 0).
    #[arg(long = "dynamic_replication_admission_qps_threshold", default_value_t = 0.8)]
    pub dynamic_replication_admission_qps_threshold: f64,
    /// Most memory replicas a hot key gets, its put's included (1..).
    #[arg(long = "dynamic_replication_max_memory_replicas", default_value_t = 2)]
    pub dynamic_replication_max_memory_replicas: usize,
    /// Usage ratio of the disk tier above which disk eviction starts (the
    /// oldest unleased disk copies first; an object also in memory keeps
    /// its memory copy).
    #[arg(long = "disk_eviction_high_watermark_ratio", default_value_t = DEFAULT_DISK_EVICTION_HIGH_WATERMARK_RATIO)]
    pub disk_eviction_high_watermark_ratio: f64,
    /// Seconds the disk segments of an expired store node are kept, detached
    /// with their objects, for the node to come back with the same client id
    /// and credential (it then serves them again); past it they are dropped.
    #[arg(long = "disk_replica_grace_sec", default_value_t = DEFAULT_DISK_REPLICA_GRACE_SEC)]
    pub disk_replica_grace_sec: u64,
    /// Raft leader heartbeat interval.
    #[arg(long = "heartbeat-interval-ms", default_value_t = DEFAULT_HEARTBEAT_INTERVAL_MS)]
    pub heartbeat_interval_ms: u64,
    #[arg(long = "election-timeout-min-ms", default_value_t = DEFAULT_ELECTION_TIMEOUT_MIN_MS)]
    pub election_timeout_min_ms: u64,
    #[arg(long = "election-timeout-max-ms", default_value_t = DEFAULT_ELECTION_TIMEOUT_MAX_MS)]
    pub election_timeout_max_ms: u64,
    /// Leader lease: how long after a majority of the other masters
    /// acknowledged a heartbeat the leader answers reads without a new
    /// quorum round. Default: a third of --election-timeout-max-ms (followers
    /// refuse other candidates for that whole timeout); at most half of it;
    /// 0 = a quorum round for every batch of reads.
    #[arg(long = "leader-lease-ms", alias = "read-lease-ms")]
    pub leader_lease_ms: Option<u64>,
    /// Applied entries between snapshots.
    #[arg(long = "snapshot-logs", default_value_t = DEFAULT_SNAPSHOT_LOGS)]
    pub snapshot_logs: u64,
    /// Log entries the leader's group commit replicates at once (1 to
    /// `IN_FLIGHT_BATCHES_MAX`). More overlap their fsyncs and round trips;
    /// fewer gather more concurrent writes into each entry, which costs the
    /// masters' CPUs less per write (docs/PERFORMANCE.md, "The store as a
    /// cache").
    #[arg(long = "batches-in-flight", default_value_t = crate::raft::proposer::DEFAULT_BATCHES_IN_FLIGHT)]
    pub batches_in_flight: usize,
    /// Start a NEW one-master cluster from a snapshot file (`mooncake
    /// snapshot save`). Needs an empty --data-dir and an --initial-cluster of
    /// this master alone; grow it afterwards with `mooncake member add`
    /// (answered UNAVAILABLE, and retried by the CLI, until the restored
    /// state is snapshotted for new masters, a moment after start).
    #[arg(long)]
    pub restore: Option<PathBuf>,
    /// The planted bugs (`--dev-unsafe-*`), in a build with the
    /// `planted-bugs` feature only (`planted.rs`).
    #[command(flatten)]
    pub planted: crate::node::planted::PlantedBugs,
    /// Log format: `text` or `json`.
    #[arg(long = "log-format", default_value = "text")]
    pub log_format: String,
    /// Mutual TLS on the gRPC port (client, admin and Raft services) and to
    /// the other masters: all three of --tls-cert, --tls-key, --tls-ca, or
    /// none (docs/SECURITY.md).
    #[command(flatten)]
    pub tls: mooncake_tls::TlsArgs,
    /// Serve plain TCP on addresses that are not loopback (--listen,
    /// --http) without TLS. Without this flag such a master refuses to start.
    #[arg(long)]
    pub insecure: bool,
    /// Not a flag: the Raft links a test cuts between masters it runs in
    /// one process (`raft/partition.rs`).
    #[arg(skip)]
    pub raft_partition: Option<std::sync::Arc<crate::raft::partition::RaftPartition>>,
}

/// Founding members: node id → advertised address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitialCluster(pub BTreeMap<u64, String>);

fn parse_initial_cluster(s: &str) -> Result<InitialCluster, String> {
    let mut members = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) =
            part.split_once('=').ok_or_else(|| format!("{part:?} is not ID=HOST:PORT (example: 1=127.0.0.1:50051)"))?;
        let id: u64 = id.trim().parse().map_err(|_| format!("{id:?} in {part:?} is not a node id"))?;
        if id == 0 {
            return Err("node id 0 is reserved; number masters from 1".into());
        }
        if addr.trim().is_empty() || !addr.contains(':') {
            return Err(format!("address {addr:?} of node {id} needs HOST:PORT"));
        }
        if members.insert(id, addr.trim().to_string()).is_some() {
            return Err(format!("node id {id} appears twice"));
        }
    }
    if members.is_empty() {
        return Err("empty member list".into());
    }
    Ok(InitialCluster(members))
}

impl MasterConfig {
    /// The tier knobs these flags set.
    pub fn tier_policy(&self) -> TierPolicy {
        let offload = match (self.enable_offload, self.offload_on_evict) {
            (false, _) => OffloadMode::Off,
            (true, false) => OffloadMode::Eager,
            (true, true) => OffloadMode::OnEvict,
        };
        TierPolicy {
            offload,
            promotion_on_hit: self.promotion_on_hit,
            promotion_admission_threshold: self.promotion_admission_threshold,
            promotion_queue_limit: self.promotion_queue_limit,
            offload_queue_limit: self.offload_queue_limit,
            disk_high_watermark_ratio: self.disk_eviction_high_watermark_ratio,
            disk_replica_grace: Duration::from_secs(self.disk_replica_grace_sec),
            copy_timeout: Duration::from_secs(self.put_start_discard_timeout_sec),
            hot_keys: crate::leader::hot_keys::HotKeyPolicy {
                mode: self.dynamic_replication_mode,
                window: Duration::from_secs(self.dynamic_replication_heat_window_seconds),
                admission_qps: self.dynamic_replication_admission_qps_threshold,
                max_memory_replicas: self.dynamic_replication_max_memory_replicas,
            },
        }
    }

    /// The address this master is known by.
    pub fn advertise_addr(&self) -> String {
        self.advertise.clone().unwrap_or_else(|| self.listen.to_string())
    }

    /// Checks values and their relations; the message names the bad values
    /// and what to do.
    pub fn validate(&self) -> Result<(), String> {
        if self.id == 0 {
            return Err("--id 0 is reserved; number masters from 1".into());
        }
        self.exposure()?;
        let unit = |name: &str, v: f64| {
            if v > 0.0 && v <= 1.0 { Ok(()) } else { Err(format!("--{name} {v} must be in (0, 1]")) }
        };
        if self.grpc_connections_max == 0
            || self.grpc_peer_connections_max == 0
            || self.grpc_peer_connections_max > self.grpc_connections_max
        {
            return Err(format!(
                "--grpc-peer-connections-max {} must be in 1..=--grpc-connections-max ({}), which must be positive",
                self.grpc_peer_connections_max, self.grpc_connections_max
            ));
        }
        if self.max_watchers_per_peer == 0 {
            return Err("--max-watchers-per-peer must be positive (it is capped at --max-watchers)".into());
        }
        self.validate_dynamic_replication()?;
        if !(1..=crate::raft::proposer::IN_FLIGHT_BATCHES_MAX).contains(&self.batches_in_flight) {
            return Err(format!(
                "--batches-in-flight {} must be in 1..={}",
                self.batches_in_flight,
                crate::raft::proposer::IN_FLIGHT_BATCHES_MAX
            ));
        }
        unit("eviction_high_watermark_ratio", self.eviction_high_watermark_ratio)?;
        unit("eviction_ratio", self.eviction_ratio)?;
        unit("disk_eviction_high_watermark_ratio", self.disk_eviction_high_watermark_ratio)?;
        if self.offload_on_evict && !self.enable_offload {
            return Err("--offload_on_evict needs --enable_offload (offload on eviction is a mode of offload)".into());
        }
        if self.promotion_admission_threshold == 0 || self.promotion_queue_limit == 0 || self.offload_queue_limit == 0 {
            return Err(
                "--promotion_admission_threshold, --promotion_queue_limit and --offload_queue_limit must be positive"
                    .into(),
            );
        }
        if self.default_kv_lease_ttl_ms == 0 || self.client_ttl_sec == 0 {
            return Err("--default_kv_lease_ttl and --client_ttl must be positive".into());
        }
        if self.put_start_release_timeout_sec < self.put_start_discard_timeout_sec {
            return Err(format!(
                "--put_start_release_timeout_sec {} must be >= --put_start_discard_timeout_sec {}",
                self.put_start_release_timeout_sec, self.put_start_discard_timeout_sec
            ));
        }
        self.validate_capability_ttl()?;
        if !(self.heartbeat_interval_ms > 0
            && self.heartbeat_interval_ms * 2 < self.election_timeout_min_ms
            && self.election_timeout_min_ms < self.election_timeout_max_ms)
        {
            return Err(format!(
                "need 0 < 2 x heartbeat ({} ms) < election-timeout-min ({} ms) < election-timeout-max ({} ms)",
                self.heartbeat_interval_ms, self.election_timeout_min_ms, self.election_timeout_max_ms
            ));
        }
        if let Some(ms) = self.leader_lease_ms
            && ms * 2 > self.election_timeout_max_ms
        {
            return Err(format!(
                "--leader-lease-ms {ms} must be at most half of --election-timeout-max-ms ({} ms), the time followers \
                 refuse other candidates; lower it or use 0 to disable lease reads",
                self.election_timeout_max_ms
            ));
        }
        self.validate_membership()
    }

    /// The loopback rule (docs/SECURITY.md): without TLS, --listen and
    /// --http must be loopback unless --insecure; a partial TLS flag set is
    /// refused.
    pub fn exposure(&self) -> Result<mooncake_tls::Exposure, String> {
        self.tls.validate().map_err(|e| e.to_string())?;
        let mut binds = vec![("--listen", self.listen)];
        binds.extend(self.http.map(|http| ("--http", http)));
        mooncake_tls::check_binds(&binds, self.tls.enabled(), self.insecure)
    }

    /// A write capability should outlive the put it is for and die (skew
    /// included) before its range can be handed to another writer.
    fn validate_dynamic_replication(&self) -> Result<(), String> {
        if !(1..=3_600).contains(&self.dynamic_replication_heat_window_seconds) {
            return Err(format!(
                "--dynamic_replication_heat_window_seconds {} must be in 1..=3600",
                self.dynamic_replication_heat_window_seconds
            ));
        }
        let qps = self.dynamic_replication_admission_qps_threshold;
        if !(qps.is_finite() && qps > 0.0) {
            return Err(format!("--dynamic_replication_admission_qps_threshold {qps} must be a positive number"));
        }
        if !(1..=16).contains(&self.dynamic_replication_max_memory_replicas) {
            return Err(format!(
                "--dynamic_replication_max_memory_replicas {} must be in 1..=16 (1: hot keys get no extra replica)",
                self.dynamic_replication_max_memory_replicas
            ));
        }
        Ok(())
    }

    fn validate_capability_ttl(&self) -> Result<(), String> {
        use mooncake_auth::capability::{CAPABILITY_CLOCK_SKEW_MS, CAPABILITY_TTL_MAX_MS};
        let ttl_ms = self.capability_ttl_sec.saturating_mul(1_000);
        if ttl_ms == 0 || ttl_ms > CAPABILITY_TTL_MAX_MS {
            return Err(format!(
                "--capability_ttl_sec {} must be in 1..={}",
                self.capability_ttl_sec,
                CAPABILITY_TTL_MAX_MS / 1_000
            ));
        }
        // Warnings, not errors: tests shorten the put timeouts to seconds,
        // below any useful TTL, and lose only this extra fence.
        let release_ms = self.put_start_release_timeout_sec.saturating_mul(1_000);
        if ttl_ms.saturating_add(CAPABILITY_CLOCK_SKEW_MS) >= release_ms {
            tracing::warn!(
                capability_ttl_sec = self.capability_ttl_sec,
                clock_skew_ms = CAPABILITY_CLOCK_SKEW_MS,
                put_start_release_timeout_sec = self.put_start_release_timeout_sec,
                "a write capability (plus the clock skew store nodes allow) outlives the release timeout: a writer \
                 stalled that long could still write into a range already given to another writer"
            );
        }
        if self.capability_ttl_sec < self.put_start_discard_timeout_sec {
            tracing::warn!(
                capability_ttl_sec = self.capability_ttl_sec,
                put_start_discard_timeout_sec = self.put_start_discard_timeout_sec,
                "capabilities expire before an unfinished put is discarded: a put slower than the TTL fails"
            );
        }
        Ok(())
    }

    /// How long a capability lives after it is issued.
    pub fn capability_ttl(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.capability_ttl_sec)
    }

    fn validate_membership(&self) -> Result<(), String> {
        match (&self.initial_cluster, self.join) {
            (Some(_), true) => Err("--join and --initial-cluster exclude each other".into()),
            (None, false) => Err("give --initial-cluster (founding member) or --join (added later)".into()),
            (Some(c), false) if !c.0.contains_key(&self.id) => Err(format!(
                "--id {} is not in --initial-cluster {:?}; add it there or start with --join",
                self.id,
                c.0.keys().collect::<Vec<_>>()
            )),
            (Some(c), false) if self.restore.is_some() && c.0.len() != 1 => Err(format!(
                "--restore starts a one-master cluster, but --initial-cluster names {} masters; restore on one, \
                 then add the others with `mooncake member add`",
                c.0.len()
            )),
            _ => Ok(()),
        }
    }

    /// The openraft configuration these flags describe.
    /// The leader lease window, `None` when lease reads are off.
    pub fn leader_lease(&self) -> Option<std::time::Duration> {
        match self.leader_lease_ms.unwrap_or(self.election_timeout_max_ms / 3) {
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }

    /// When the PreVote driver elects (prevote.rs): as openraft's own timer
    /// would, a leader lease (`election-timeout-max`) plus a random timeout.
    pub fn election_timing(&self) -> crate::raft::prevote::ElectionTiming {
        crate::raft::prevote::ElectionTiming {
            quiet: std::time::Duration::from_millis(self.election_timeout_max_ms),
            timeout_min: std::time::Duration::from_millis(self.election_timeout_min_ms),
            timeout_max: std::time::Duration::from_millis(self.election_timeout_max_ms),
        }
    }

    pub fn raft_config(&self) -> openraft::Config {
        openraft::Config {
            cluster_name: "mooncake".into(),
            heartbeat_interval: self.heartbeat_interval_ms,
            election_timeout_min: self.election_timeout_min_ms,
            election_timeout_max: self.election_timeout_max_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(self.snapshot_logs),
            max_in_snapshot_log_to_keep: 1_000,
            max_payload_entries: MAX_PAYLOAD_ENTRIES,
            install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
            // Elections are started by the PreVote driver (prevote.rs).
            enable_elect: false,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<MasterConfig, String> {
        let mut argv = vec!["mooncake-master"];
        argv.extend_from_slice(args);
        let cfg = MasterConfig::try_parse_from(argv).map_err(|e| e.to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    #[test]
    fn defaults_match_mooncake() {
        let cfg = parse(&["--id", "1", "--data-dir", "/tmp/x", "--initial-cluster", "1=127.0.0.1:1"]).unwrap();
        assert_eq!(cfg.default_kv_lease_ttl_ms, 10_000);
        assert_eq!(cfg.eviction_high_watermark_ratio, 0.98);
        assert_eq!(cfg.eviction_ratio, 0.02);
        assert_eq!(cfg.client_ttl_sec, 10);
        assert_eq!(cfg.put_start_discard_timeout_sec, 30);
        assert_eq!(cfg.put_start_release_timeout_sec, 600);
        assert_eq!(cfg.capability_ttl_sec, 60);
        assert_eq!(cfg.leader_lease(), Some(std::time::Duration::from_millis(DEFAULT_ELECTION_TIMEOUT_MAX_MS / 3)));
    }

    #[test]
    fn leader_lease_zero_turns_lease_reads_off() {
        let base = ["--id", "1", "--data-dir", "/tmp/x", "--initial-cluster", "1=127.0.0.1:1"];
        let mut args = base.to_vec();
        args.extend(["--leader-lease-ms", "0"]);
        assert_eq!(parse(&args).unwrap().leader_lease(), None);
        // The flag's earlier name still works.
        let mut args = base.to_vec();
        args.extend(["--read-lease-ms", "0"]);
        assert_eq!(parse(&args).unwrap().leader_lease(), None);
    }

    #[test]
    fn impossible_configs_are_refused_with_the_value() {
        let base = ["--id", "1", "--data-dir", "/tmp/x", "--initial-cluster", "1=127.0.0.1:1"];
        for (extra, needle) in [
            (vec!["--eviction_ratio", "1.5"], "eviction_ratio 1.5"),
            (vec!["--eviction_high_watermark_ratio=-0.1"], "eviction_high_watermark_ratio -0.1"),
            (vec!["--eviction_ratio", "0"], "eviction_ratio 0"),
            (vec!["--election-timeout-min-ms", "50"], "election-timeout-min (50 ms)"),
            (vec!["--put_start_release_timeout_sec", "5"], "release_timeout_sec 5"),
            (vec!["--leader-lease-ms", "200"], "--leader-lease-ms 200 must be at most half"),
            (vec!["--capability_ttl_sec", "0"], "--capability_ttl_sec 0 must be in 1..=3600"),
            (vec!["--capability_ttl_sec", "3601"], "--capability_ttl_sec 3601 must be in 1..=3600"),
        ] {
            let mut args = base.to_vec();
            args.extend(extra);
            let err = parse(&args).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn membership_flags_are_checked() {
        let err = parse(&["--id", "4", "--data-dir", "/x", "--initial-cluster", "1=a:1,2=b:2"]).unwrap_err();
        assert!(err.contains("not in --initial-cluster"), "{err}");
        let err = parse(&["--id", "4", "--data-dir", "/x"]).unwrap_err();
        assert!(err.contains("--join"), "{err}");
        let err = parse(&["--id", "1", "--data-dir", "/x", "--initial-cluster", "1=a:1,1=b:2"]).unwrap_err();
        assert!(err.contains("appears twice"), "{err}");
        parse(&["--id", "4", "--data-dir", "/x", "--join"]).unwrap();
    }

    #[test]
    fn without_tls_only_loopback_binds_start_unless_insecure() {
        let base = ["--id", "1", "--data-dir", "/x", "--initial-cluster", "1=127.0.0.1:1"];
        let with = |extra: &[&str]| {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            parse(&args)
        };
        let err = with(&["--listen", "0.0.0.0:50051"]).unwrap_err();
        assert!(err.contains("--listen 0.0.0.0:50051") && err.contains("mooncake certs init"), "{err}");
        let err = with(&["--http", "10.1.2.3:8081"]).unwrap_err();
        assert!(err.contains("--http 10.1.2.3:8081") && err.contains("--insecure"), "{err}");
        with(&["--listen", "0.0.0.0:50051", "--insecure"]).unwrap();
        with(&["--listen", "[::1]:50051", "--http", "127.0.0.1:8081"]).unwrap();
        // With TLS the address is free (the files are read at start, not here).
        with(&["--listen", "0.0.0.0:50051", "--tls-cert=c", "--tls-key=k", "--tls-ca=a"]).unwrap();
        let err = with(&["--tls-cert=c", "--tls-ca=a"]).unwrap_err();
        assert!(err.contains("missing: --tls-key"), "{err}");
    }
}
