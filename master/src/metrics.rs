//! Prometheus metrics of a master: per-RPC requests, error codes and
//! latency; storage costs (fsync, snapshots); the leader's duties (evictions,
//! expired clients, reclaimed puts); group-commit batch sizes. Gauges of Raft
//! progress and of the applied state are read at scrape time.

use std::sync::Arc;
use std::time::Duration;

use mooncake_raft_store::StoreObserver;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::leader::tiering::Purpose;

/// Latency buckets from 50 µs to 10 s: RPCs on loopback are sub-millisecond,
/// fsyncs are 0.2–5 ms, a leader change makes some calls wait seconds.
const LATENCY_BUCKETS: &[f64] =
    &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Every metric of one master.
pub struct MasterMetrics {
    pub registry: Registry,
    pub rpc_requests: IntCounterVec,
    pub rpc_duration: HistogramVec,
    /// Raft and its storage: commits, fsyncs, snapshots, elections.
    pub raft: RaftMetrics,
    pub leader_lease_reads: IntCounter,
    pub evicted_objects: IntCounter,
    pub arena_cut_bytes: IntCounter,
    pub eviction_rounds: IntCounter,
    pub expired_clients: IntCounter,
    pub repairs_pending: IntGauge,
    pub repairs_dropped: IntCounter,
    pub hot_keys_admitted: IntCounter,
    pub hot_keys_fanned: IntGauge,
    pub hot_replicas_dropped: IntCounter,
    pub leader_stalls: IntCounter,
    pub leader_without_quorum_refusals: IntCounter,
    pub port_refusals: IntCounterVec,
    pub leader_duty_rounds: IntCounter,
    pub discarded_puts: IntCounter,
    pub leader_changes: IntCounter,
    /// Copies between tiers, by purpose (offload, promote) and outcome
    /// (issued, done, failed).
    pub copies: IntCounterVec,
    /// A copy from issued to recorded, by purpose.
    pub copy_seconds: HistogramVec,
    /// Replicas dropped because their store node found their bytes corrupt.
    pub corrupt_replicas_dropped: IntCounter,
    /// Puts placed with fewer replicas than asked (no other segment had
    /// room after eviction; at least their `min_replicas`).
    pub puts_under_replicated: IntCounter,
    /// Writer chunks granted (`objects/chunks.rs`).
    pub writer_chunks: IntCounter,
    /// Placements of puts and writer chunks by how widely their replicas
    /// spread (`distinct`, or `shared_zone`/`shared_host` when the cluster
    /// had no better; `leader/reservations`).
    pub placements: IntCounterVec,
    /// Scrape-time gauges, set just before encoding.
    pub gauges: Gauges,
}

/// Raft and its storage.
pub struct RaftMetrics {
    pub fsync: Histogram,
    /// Proposal handed to Raft → committed and applied on this leader.
    pub commit: Histogram,
    /// Raft RPCs this master sent, round trip, by kind.
    pub rpc: HistogramVec,
    /// Raft RPCs this master received, time to handle, by kind.
    pub rpc_handled: HistogramVec,
    /// Elections this master considered, by outcome (`started`, `refused_by_pre_vote`,
    /// `leader_heard_during_pre_vote`).
    pub elections: IntCounterVec,
    pub snapshot_build: Histogram,
    pub snapshot_bytes: IntGauge,
    pub snapshot_install: Histogram,
    pub data_dir_free_bytes: IntGauge,
    pub nospace_alarm: IntGauge,
    /// Commands per log entry.
    pub batch_commands: Histogram,
    /// Reads per leadership confirmation.
    pub read_batch: Histogram,
}

/// Gauges refreshed at scrape time.
pub struct Gauges {
    pub term: IntGauge,
    pub is_leader: IntGauge,
    pub leader_id: IntGauge,
    pub last_log_index: IntGauge,
    pub committed_index: IntGauge,
    pub applied_index: IntGauge,
    pub snapshot_index: IntGauge,
    pub purged_index: IntGauge,
    pub log_entries: IntGauge,
    pub segments: IntGauge,
    pub capacity_bytes: IntGauge,
    pub used_bytes: IntGauge,
    pub objects: IntGauge,
    pub objects_processing: IntGauge,
    pub writer_chunks: IntGauge,
    pub arenas: IntGauge,
    pub arena_bytes: IntGauge,
    pub clients: IntGauge,
    pub kv_leases: IntGauge,
    pub kv_fences: IntGauge,
    pub retired_bytes: IntGauge,
    /// Per tier (memory, disk): attached capacity, used bytes, objects with
    /// a replica there.
    pub tier_capacity_bytes: IntGaugeVec,
    pub tier_used_bytes: IntGaugeVec,
    pub tier_objects: IntGaugeVec,
    /// Per tenant (docs/TENANTS.md): objects, their bytes (each once, at
    /// its size: what a quota bounds), and the quota (tenants with one).
    pub tenant_objects: IntGaugeVec,
    pub tenant_used_bytes: IntGaugeVec,
    pub tenant_quota_bytes: IntGaugeVec,
    /// Disk segments of expired store nodes kept for their grace.
    pub detached_segments: IntGauge,
    /// Per background duty (`duties/book.rs`): rounds run, errors, and the
    /// unix times of its last success and last error (0: never).
    pub duty_runs: IntGaugeVec,
    pub duty_errors: IntGaugeVec,
    pub duty_last_success: IntGaugeVec,
    pub duty_last_error: IntGaugeVec,
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntGaugeVec> {
    let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntCounterVec> {
    let c = IntCounterVec::new(Opts::new(name, help), labels)?;
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

fn counter(r: &Registry, name: &str, help: &str) -> prometheus::Result<IntCounter> {
    let c = IntCounter::new(name, help)?;
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

fn gauge(r: &Registry, name: &str, help: &str) -> prometheus::Result<IntGauge> {
    let g = IntGauge::new(name, help)?;
    r.register(Box::new(g.clone()))?;
    Ok(g)
}

fn histogram_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<HistogramVec> {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec()), labels)?;
    r.register(Box::new(h.clone()))?;
    Ok(h)
}

fn histogram(r: &Registry, name: &str, help: &str, buckets: &[f64]) -> prometheus::Result<Histogram> {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?;
    r.register(Box::new(h.clone()))?;
    Ok(h)
}

impl Gauges {
    fn new(r: &Registry) -> prometheus::Result<Self> {
        Ok(Gauges {
            term: gauge(r, "mooncake_raft_term", "Current Raft term.")?,
            is_leader: gauge(r, "mooncake_raft_is_leader", "1 if this master leads.")?,
            leader_id: gauge(r, "mooncake_raft_leader_id", "Id of the known leader (0 if none).")?,
            last_log_index: gauge(r, "mooncake_raft_last_log_index", "Index of the last log entry.")?,
            committed_index: gauge(r, "mooncake_raft_committed_index", "Index of the last committed entry.")?,
            applied_index: gauge(r, "mooncake_raft_applied_index", "Index of the last applied entry.")?,
            snapshot_index: gauge(r, "mooncake_raft_snapshot_index", "Last log index in the current snapshot.")?,
            purged_index: gauge(r, "mooncake_raft_purged_index", "Last purged log index.")?,
            log_entries: gauge(r, "mooncake_raft_log_entries", "Log entries kept on disk.")?,
            segments: gauge(r, "mooncake_segments", "Mounted segments.")?,
            capacity_bytes: gauge(r, "mooncake_capacity_bytes", "Capacity of all mounted segments.")?,
            used_bytes: gauge(r, "mooncake_used_bytes", "Allocated bytes in all segments.")?,
            objects: gauge(r, "mooncake_objects", "Objects (complete and being written).")?,
            objects_processing: gauge(
                r,
                "mooncake_objects_processing",
                "Puts in flight on this leader (reserved, not yet committed).",
            )?,
            writer_chunks: gauge(
                r,
                "mooncake_writer_chunks",
                "Writer chunks this leader holds for writers (not returned, not expired).",
            )?,
            arenas: gauge(r, "mooncake_arenas", "Allocation arenas in the applied state (every leader term's).")?,
            arena_bytes: gauge(r, "mooncake_arena_bytes", "Bytes covered by allocation arenas.")?,
            clients: gauge(r, "mooncake_clients", "Registered clients.")?,
            kv_leases: gauge(r, "mooncake_kv_leases", "Objects under an unexpired KV lease on this leader.")?,
            kv_fences: gauge(
                r,
                "mooncake_kv_fences",
                "Keys with a removal in flight on this leader (their readers wait).",
            )?,
            retired_bytes: gauge(
                r,
                "mooncake_retired_bytes",
                "Bytes of objects replaced by upserts, held until no KV lease on them can be left.",
            )?,
            tier_capacity_bytes: gauge_vec(
                r,
                "mooncake_tier_capacity_bytes",
                "Capacity of the attached segments of each tier (memory, disk).",
                &["tier"],
            )?,
            tier_used_bytes: gauge_vec(r, "mooncake_tier_used_bytes", "Allocated bytes of each tier.", &["tier"])?,
            tier_objects: gauge_vec(r, "mooncake_tier_objects", "Objects with a replica on each tier.", &["tier"])?,
            tenant_objects: gauge_vec(r, "mooncake_tenant_objects", "Objects of each tenant.", &["tenant"])?,
            tenant_used_bytes: gauge_vec(
                r,
                "mooncake_tenant_used_bytes",
                "Bytes of each tenant's objects (each once, at its size: what its quota bounds).",
                &["tenant"],
            )?,
            tenant_quota_bytes: gauge_vec(
                r,
                "mooncake_tenant_quota_bytes",
                "Quota of each tenant that has one.",
                &["tenant"],
            )?,
            detached_segments: gauge(
                r,
                "mooncake_detached_segments",
                "Disk segments of expired store nodes kept, with their objects, for the grace.",
            )?,
            duty_runs: gauge_vec(
                r,
                "mooncake_duty_runs",
                "Rounds each background duty ran on this master.",
                &["duty"],
            )?,
            duty_errors: gauge_vec(r, "mooncake_duty_errors", "Failures each background duty noted.", &["duty"])?,
            duty_last_success: gauge_vec(
                r,
                "mooncake_duty_last_success_timestamp_seconds",
                "When each background duty last finished a round without error (unix seconds; 0: never).",
                &["duty"],
            )?,
            duty_last_error: gauge_vec(
                r,
                "mooncake_duty_last_error_timestamp_seconds",
                "When each background duty last noted a failure (unix seconds; 0: never).",
                &["duty"],
            )?,
        })
    }
}

impl RaftMetrics {
    fn new(r: &Registry) -> prometheus::Result<Self> {
        let batch = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0];
        Ok(RaftMetrics {
            fsync: histogram(r, "mooncake_fsync_duration_seconds", "Flush + fdatasync of the store.", LATENCY_BUCKETS)?,
            commit: histogram(
                r,
                "mooncake_commit_seconds",
                "A batch of proposals, from hand-over to Raft to committed and applied (leader).",
                LATENCY_BUCKETS,
            )?,
            rpc: histogram_vec(
                r,
                "mooncake_raft_rpc_seconds",
                "Raft RPCs sent to peers, round trip (append, vote, snapshot).",
                &["rpc"],
            )?,
            rpc_handled: histogram_vec(
                r,
                "mooncake_raft_rpc_handled_seconds",
                "Raft RPCs received from peers, decode to reply (append, vote, snapshot).",
                &["rpc"],
            )?,
            elections: counter_vec(
                r,
                "mooncake_elections_total",
                "Elections this master considered after losing its leader: started (pre-vote won) or \
                 refused_by_pre_vote (the other voters still had a leader) or \
                 leader_heard_during_pre_vote (won, but a leader spoke during the round).",
                &["outcome"],
            )?,
            snapshot_build: histogram(r, "mooncake_snapshot_build_seconds", "Snapshot build time.", LATENCY_BUCKETS)?,
            snapshot_bytes: gauge(r, "mooncake_snapshot_bytes", "Size of the last snapshot built or installed.")?,
            snapshot_install: histogram(
                r,
                "mooncake_snapshot_install_seconds",
                "Snapshot install time.",
                LATENCY_BUCKETS,
            )?,
            data_dir_free_bytes: gauge(
                r,
                "mooncake_data_dir_free_bytes",
                "Bytes free on the data dir's file system (read every 500 ms).",
            )?,
            nospace_alarm: gauge(
                r,
                "mooncake_data_dir_nospace_alarm",
                "1 while the data dir has less free space than this master needs: not ready, not leading.",
            )?,
            batch_commands: histogram(r, "mooncake_proposal_batch_commands", "Commands per log entry.", &batch)?,
            read_batch: histogram(
                r,
                "mooncake_read_barrier_batch",
                "Reads served per leadership confirmation.",
                &batch,
            )?,
        })
    }
}

impl MasterMetrics {
    pub fn new() -> prometheus::Result<Self> {
        let r = Registry::new();
        Ok(MasterMetrics {
            rpc_requests: counter_vec(
                &r,
                "mooncake_rpc_requests_total",
                "Client API requests by method and answer code.",
                &["method", "code"],
            )?,
            rpc_duration: histogram_vec(
                &r,
                "mooncake_rpc_duration_seconds",
                "Client API latency by method.",
                &["method"],
            )?,
            raft: RaftMetrics::new(&r)?,
            port_refusals: counter_vec(
                &r,
                "mooncake_port_refusals_total",
                "Connections the gRPC or HTTP port could not take, by port and reason (a connection limit, or a \
                 failed accept: out of file descriptors). Each restarts every client's TTL.",
                &["port", "reason"],
            )?,
            leader_lease_reads: counter(
                &r,
                "mooncake_leader_lease_reads_total",
                "Reads served under the leader lease, without a quorum round.",
            )?,
            evicted_objects: counter(&r, "mooncake_evicted_objects_total", "Objects evicted.")?,
            arena_cut_bytes: counter(
                &r,
                "mooncake_arena_cut_bytes_total",
                "Bytes of evicted objects cut out of earlier leaders' arenas, grantable again at once.",
            )?,
            eviction_rounds: counter(&r, "mooncake_eviction_rounds_total", "Eviction rounds run.")?,
            expired_clients: counter(&r, "mooncake_expired_clients_total", "Clients expired for missing heartbeats.")?,
            repairs_pending: gauge(
                &r,
                "mooncake_repairs_pending",
                "Objects waiting for (or in) a copy that brings back a replica lost with its segment (the leader's).",
            )?,
            repairs_dropped: counter(
                &r,
                "mooncake_repairs_dropped_total",
                "Objects left under-replicated because the leader's repair backlog was full.",
            )?,
            hot_keys_admitted: counter(
                &r,
                "mooncake_hot_keys_admitted_total",
                "Times a key's reads over the heat window made it hot (--dynamic_replication_mode observe or enforce).",
            )?,
            hot_keys_fanned: gauge(
                &r,
                "mooncake_hot_keys_fanned",
                "Keys holding memory replicas the leader added because they were hot.",
            )?,
            hot_replicas_dropped: counter(
                &r,
                "mooncake_hot_replicas_dropped_total",
                "Memory replicas of hot keys dropped again once their key cooled.",
            )?,
            leader_stalls: counter(
                &r,
                "mooncake_leader_stalls_total",
                "Stalls of this master while leading (paused or overloaded past a second): client TTLs restarted.",
            )?,
            leader_without_quorum_refusals: counter(
                &r,
                "mooncake_leader_without_quorum_refusals_total",
                "Requests this master refused (UNAVAILABLE) because it led without a quorum's acknowledgement.",
            )?,
            leader_duty_rounds: counter(
                &r,
                "mooncake_leader_duty_rounds_total",
                "Rounds of the leader's duties (client expiry, eviction) completed.",
            )?,
            discarded_puts: counter(
                &r,
                "mooncake_discarded_puts_total",
                "Puts whose reservation expired unfinished (discard timeout).",
            )?,
            leader_changes: counter(&r, "mooncake_leader_changes_total", "Leaders this master has seen.")?,
            copies: counter_vec(
                &r,
                "mooncake_copies_total",
                "Copies between tiers by purpose (offload: memory to disk, promote: disk to memory) and outcome \
                 (issued, done, failed).",
                &["purpose", "outcome"],
            )?,
            copy_seconds: histogram_vec(
                &r,
                "mooncake_copy_seconds",
                "Copies between tiers, from issued to recorded, by purpose.",
                &["purpose"],
            )?,
            corrupt_replicas_dropped: counter(
                &r,
                "mooncake_corrupt_replicas_dropped_total",
                "Replicas dropped because their store node found their bytes corrupt.",
            )?,
            puts_under_replicated: counter(
                &r,
                "mooncake_puts_under_replicated_total",
                "Puts placed with fewer replicas than asked: no other segment had room after eviction.",
            )?,
            writer_chunks: counter(
                &r,
                "mooncake_writer_chunks_total",
                "Writer chunks granted: ranges a writer places small puts in itself, one PutEnd per put.",
            )?,
            placements: counter_vec(
                &r,
                "mooncake_placements_total",
                "Puts and writer chunks placed, by spread: distinct (every replica on a host and in a zone of \
                 its own, or one replica), shared_zone (distinct hosts, a zone twice: too few zones had room), \
                 shared_host (a host twice: too few hosts had room).",
                &["spread"],
            )?,
            gauges: Gauges::new(&r)?,
            registry: r,
        })
    }

    /// Records one client RPC.
    pub fn observe_rpc(&self, method: &str, code: &str, took: Duration) {
        self.rpc_requests.with_label_values(&[method, code]).inc();
        self.rpc_duration.with_label_values(&[method]).observe(took.as_secs_f64());
    }

    pub fn copies_issued(&self, purpose: Purpose) -> IntCounter {
        self.copies.with_label_values(&[purpose.name(), "issued"])
    }
    pub fn copies_done(&self, purpose: Purpose) -> IntCounter {
        self.copies.with_label_values(&[purpose.name(), "done"])
    }
    pub fn copies_failed(&self, purpose: Purpose) -> IntCounter {
        self.copies.with_label_values(&[purpose.name(), "failed"])
    }
    pub fn copy_latency(&self, purpose: Purpose) -> Histogram {
        self.copy_seconds.with_label_values(&[purpose.name()])
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            return format!("# encoding failed: {e}\n");
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Feeds storage events into the metrics.
pub struct MetricsObserver(pub Arc<MasterMetrics>);

impl StoreObserver for MetricsObserver {
    fn synced(&self, took: Duration) {
        self.0.raft.fsync.observe(took.as_secs_f64());
    }
    fn snapshot_built(&self, took: Duration, bytes: usize) {
        self.0.raft.snapshot_build.observe(took.as_secs_f64());
        self.0.raft.snapshot_bytes.set(bytes as i64);
    }
    fn snapshot_installed(&self, took: Duration, bytes: usize) {
        self.0.raft.snapshot_install.observe(took.as_secs_f64());
        self.0.raft.snapshot_bytes.set(bytes as i64);
    }
}
