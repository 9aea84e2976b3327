//! What every service of one master shares: the Raft handle, the applied
//! state and the leader-local soft state, then one group per job — the read
//! path ([`ReadPath`]), the write path ([`WritePath`]), the tier copies
//! ([`Tiers`]) and who may do what ([`Auth`]); plus the leadership gate
//! the services pass before they act: [`Shared::require_leader`] is the one
//! answer to "am I leader" (soft state of this term and a fresh quorum
//! acknowledgement), and every read that must be linearizable goes through
//! [`Shared::read`] (or [`Shared::read_leased`], [`Shared::barrier`]), which
//! asks it first. Other looks at Raft's metrics are views (status, `/leader`,
//! the election driver), not gates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_raft_store::{MetaState, NodeId, Raft, StateMachineStore, StateReader};
use openraft::ServerState;
use openraft::error::ForwardToLeader;

use crate::leader::AdmitError;
use crate::leader::LeaderState;
use crate::leader::kv_lease::KeyHash;
use crate::metrics::MasterMetrics;
use crate::raft::leader_lease::{AckClock, LeaseQuery};
use crate::raft::proposer::Proposer;
use crate::refusal::Refusal;

/// Everything one master's services and duties share, grouped by job. The
/// top holds what every part uses (identity, Raft, the applied state, the
/// leader's soft state, metrics); the groups hold what one path needs.
///
/// **Lock order** (outer first), with the soft-state rule of `leader.rs`:
/// the write path's async locks ([`WritePath::arena_grants`],
/// [`WritePath::eviction_round`]) are held across proposals and never together; under
/// them, the state is read (`reader`) and let go of before the leader's soft
/// state (`leader`) is locked, never inside the read. The capability key
/// cache ([`Auth::capabilities`]) and the ack clock ([`ReadPath::acks`])
/// are leaves: taken last, nothing locked under them.
pub struct Shared {
    pub id: NodeId,
    pub raft: Raft,
    /// The applied state, for every reader: services, duties and the write
    /// path's plans (a read that must be linearizable goes through
    /// [`Shared::read`]).
    pub reader: StateReader,
    /// The state machine (shared with openraft) for consistent exports.
    pub sm: StateMachineStore,
    /// The leader's soft state (`leader.rs`): KV leases, puts and copies in
    /// flight, client heartbeats. Empty while this node does not lead.
    pub leader: Arc<LeaderState>,
    pub metrics: Arc<MasterMetrics>,
    /// How old the leader's last quorum acknowledgement may be while `/ready`
    /// still says yes (the election timeout: past it, followers may elect).
    pub quorum_ack_max: Duration,
    /// The data dir's NOSPACE alarm (`disk_space.rs`).
    pub disk_alarm: Arc<crate::raft::disk_space::DiskAlarm>,
    /// What each background duty last did (`duties/book.rs`).
    pub duties: Arc<crate::duties::book::DutyBook>,
    /// The object events this master applied recently, for `Watch`.
    pub events: Arc<mooncake_raft_store::events::EventHistory>,
    pub read_path: ReadPath,
    pub write_path: WritePath,
    pub tiers: Tiers,
    pub auth: Auth,
    /// True while a master started with `--restore` has not yet snapshotted
    /// the restored state and purged its log (`node/store.rs`): a master
    /// added before that would replicate the log, which lacks the restored
    /// state, so membership changes wait.
    pub restoring: Arc<std::sync::atomic::AtomicBool>,
    /// The planted bugs this master runs with (`node/planted.rs`; none in
    /// a default build), for `mooncake status`.
    pub planted_bugs: Vec<&'static str>,
}

/// What makes a read of the applied state linearizable and durable: the
/// quorum round, the leader lease that may skip it, and the synced log the
/// answer waits for. Touched only by [`Shared`]'s read methods
/// ([`Shared::read`], [`Shared::barrier`], [`Shared::read_durable`]);
/// the transport (`network.rs`) feeds `acks` and `flushed` through its own
/// handles.
pub struct ReadPath {
    /// Linearizable read barriers, one quorum round per batch of reads.
    pub barrier: crate::raft::read_barrier::ReadBarrier,
    /// Accepted AppendEntries per peer, for the leader lease.
    pub acks: Arc<AckClock>,
    /// How long an acknowledged heartbeat lets reads skip the quorum round
    /// (`--leader-lease-ms`); `None`: every read batch runs one.
    pub leader_lease: Option<Duration>,
    /// How far this master's log is synced: what is answered from the
    /// applied state waits until that state is synced (raft-store `log/flushed.rs`).
    pub flushed: mooncake_raft_store::FlushedLog,
    /// `--dev-unsafe-stale-reads`: reads skip the leadership check.
    pub unsafe_stale_reads: bool,
}

/// What proposes commands on the leader's behalf: the services (puts,
/// removals, reports) and the duties propose through it.
pub struct WritePath {
    /// Batches commands into log entries and waits until they are applied.
    pub proposer: Proposer,
    /// What eviction rounds free (`eviction.rs`: the duty's rounds and
    /// those of puts that found no room).
    pub eviction_policy: crate::leader::decisions::EvictionPolicy,
    /// One eviction round at a time.
    pub eviction_round: tokio::sync::Mutex<()>,
    /// Puts ring it when their commits took the memory tier past the high
    /// watermark: the eviction duty runs at once instead of at its next
    /// tick, so room is made ahead of the puts that follow.
    pub eviction_wake: tokio::sync::Notify,
    /// How long after its commit an object's bytes may be cut out of an
    /// earlier term's arena (`arena_cuts.rs`): every WRITE grant over them
    /// has expired, the clock skew between two leaders included.
    pub cut_after: std::time::Duration,
    /// One arena grant at a time: concurrent puts that need an arena on the
    /// same segment share the first one's.
    pub arena_grants: tokio::sync::Mutex<()>,
    /// How long a writer may place objects in a writer chunk after it was
    /// granted (`chunks.rs`): half the shorter of the discard timeout and
    /// the capability TTL, so its PutEnds and writes arrive in time.
    pub chunk_valid: std::time::Duration,
    /// `--dev-unsafe-chunk-reuse`: a chunk's space is reclaimed as soon as
    /// it is granted (the planted bug of `jepsen/tests/t95`).
    pub unsafe_chunk_reuse: bool,
    /// `--dev-unsafe-hold-freed-ranges`: revoked puts' and returned chunks'
    /// ranges hold their arenas for this long instead of freeing them at
    /// once (the planted bug of the availability checker).
    pub unsafe_hold_freed: Option<std::time::Duration>,
}

/// Copies between tiers (`copies/`, `tiering.rs`): the knobs and the
/// copy duty's wake-ups. The copy duty and TakeCopies wait on the wake-ups;
/// puts ring `copy_wake`, the duty rings `copies_queued`.
pub struct Tiers {
    /// The tier knobs (offload, promotion, disk watermark, grace).
    pub policy: crate::leader::tiering::TierPolicy,
    /// Wakes the copy duty (`copies/`) between its ticks: new objects
    /// committed while offload is eager.
    pub copy_wake: tokio::sync::Notify,
    /// Wakes the TakeCopies calls held for copies
    /// (`copies::copies_when_queued`): copies were queued for a store node.
    pub copies_queued: tokio::sync::Notify,
}

/// Who may do what: the cluster secret and what is derived from it. Set at
/// start and only read afterwards (the capability key cache aside); the
/// services sign replicas with `capabilities` (who may call what is the
/// edge's: `rpc/edge.rs`).
pub struct Auth {
    /// The cluster secret: keys for admin tokens and data-path capabilities
    /// are derived from it (`secret.rs`).
    pub secret: mooncake_auth::ClusterSecret,
    /// Segment keys for mount answers and capabilities for replicas
    /// (`--capability_ttl_sec`; `capabilities.rs`).
    pub capabilities: crate::objects::capabilities::CapabilityIssuer,
    /// How long a WRITE grant can be used after it was issued (the
    /// capability TTL plus the store nodes' clock skew): an arena whose
    /// owner never acknowledges its revoke is returned after this.
    pub grants_live: Duration,
    /// Revokes and acknowledgements of arena fences (`arena_fences.rs`).
    pub fence_wakes: Arc<crate::leader::arena_fences::FenceWakes>,
}

impl Shared {
    /// Not the leader (with the leader's address when known), from this
    /// node's view.
    pub fn not_leader(&self) -> Refusal {
        let m = self.raft.metrics().borrow().clone();
        let forward = match m.current_leader {
            Some(id) if id != self.id => match m.membership_config.membership().get_node(&id) {
                Some(node) => ForwardToLeader::new(id, node.clone()),
                None => ForwardToLeader::empty(),
            },
            _ => ForwardToLeader::empty(),
        };
        Refusal::forward(&forward)
    }

    /// Ok when this node holds leader soft state for its current term and a
    /// quorum acknowledged it within [`Shared::quorum_ack_max`]. Cheap; for
    /// reads that must be linearizable use [`Shared::read`].
    ///
    /// A leader cut off from its quorum (openraft 0.9 has no CheckQuorum: it
    /// stays leader until it meets a higher term) answers UNAVAILABLE, so
    /// clients and store nodes try the other masters and find the leader
    /// the majority elected. Before, a store node kept pinging the cut-off
    /// leader, which kept answering OK, while the new leader heard nothing
    /// from it and expired it after the client TTL.
    pub fn require_leader(&self) -> Result<(), Refusal> {
        if self.leader.with(|_| ()).is_none() {
            return Err(self.not_leader());
        }
        match self.raft.metrics().borrow().millis_since_quorum_ack {
            Some(ms) if u128::from(ms) > self.quorum_ack_max.as_millis() => {
                self.metrics.leader_without_quorum_refusals.inc();
                Err(Refusal::unavailable(format!(
                    "this master leads without a quorum (last acknowledged {ms} ms ago); ask another master"
                )))
            }
            _ => Ok(()),
        }
    }

    /// [`Shared::require_leader`], then a quorum round that confirms the
    /// leadership and waits until everything committed before the call is
    /// applied: a read after this sees every acknowledged write (admin
    /// exports; object reads use [`Shared::read`], which may skip the round
    /// under the leader lease).
    pub async fn barrier(&self) -> Result<(), Refusal> {
        self.require_leader()?;
        self.linearizable().await
    }

    /// The quorum round alone; callers go through [`Shared::read`] or
    /// [`Shared::barrier`], which ask [`Shared::require_leader`] first.
    async fn linearizable(&self) -> Result<(), Refusal> {
        self.read_path.barrier.wait().await
    }

    /// Runs `f` on the applied state as a linearizable read: under the
    /// leader lease when it holds at the moment after the state was read
    /// ([`crate::raft::leader_lease`]), else after a quorum round ([`Shared::barrier`]).
    /// `f` may run twice (once before and once after the round).
    pub async fn read<T>(&self, f: impl Fn(&MetaState) -> T) -> Result<T, Refusal> {
        if self.read_path.unsafe_stale_reads {
            return Ok(self.reader.read(f)); // deliberately broken build for the chaos harness
        }
        self.require_leader()?;
        if let Some(window) = self.read_path.leader_lease {
            let (value, applied) = self.reader.read(|s| (f(s), s.last_applied));
            if self.leader_lease_holds(applied.map(|l| l.leader_id.term), window) {
                self.metrics.leader_lease_reads.inc();
                self.read_path.flushed.wait_for(applied.map(|l| l.index).unwrap_or(0)).await;
                return Ok(value);
            }
        }
        self.linearizable().await?;
        Ok(self.read_durable(f).await)
    }

    /// `f` on the applied state, answered once that state is synced on this
    /// master: the leader applies its own entries while their sync runs
    /// (`mooncake_raft_store::FlushedLog`), and nothing it answers may rest
    /// on an entry a power cut could still take back. Not a leadership check.
    pub async fn read_durable<T>(&self, f: impl FnOnce(&MetaState) -> T) -> T {
        let (value, applied) = self.reader.read(|s| (f(s), s.last_applied.map(|l| l.index).unwrap_or(0)));
        self.read_path.flushed.wait_for(applied).await;
        value
    }

    /// The lease check of [`Shared::read`], taken after the state was read:
    /// this node leads, has applied an entry of its own term (so everything
    /// committed by earlier leaders), and a majority of the other voters
    /// acknowledged its vote within `window`.
    fn leader_lease_holds(&self, applied_term: Option<u64>, window: Duration) -> bool {
        let now = Instant::now();
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        if m.state != ServerState::Leader || !m.vote.is_committed() || m.vote.leader_id().voted_for() != Some(self.id) {
            return false;
        }
        if applied_term != Some(m.vote.leader_id().get_term()) {
            return false;
        }
        let joint = m.membership_config.membership().get_joint_config();
        let [voters] = joint.as_slice() else { return false };
        self.read_path.acks.holds(&LeaseQuery { me: self.id, vote: &m.vote, voters, now, window })
    }

    pub fn now(&self) -> Instant {
        Instant::now()
    }

    /// A linearizable read of `keys` ([`Shared::read`]) whose OK answers
    /// (`ok`) carry KV leases. Every key that may be answered OK is leased
    /// *before* the read, waiting out removals of it in flight
    /// ([`crate::leader::kv_lease`]): so the read sees every removal that won the
    /// race, and every later removal sees the lease. A key that became
    /// readable between the first look and the read is leased and read
    /// again; the last round leases every key, so the loop ends.
    pub async fn read_leased<T>(
        &self,
        keys: &[&str],
        f: impl Fn(&MetaState) -> Vec<T>,
        ok: impl Fn(&T) -> bool,
    ) -> Result<Vec<T>, Refusal> {
        let hashes: Vec<KeyHash> = keys.iter().map(|k| KeyHash::of(k)).collect();
        let mut leased = vec![false; keys.len()];
        for round in 0..LEASED_READ_ROUNDS_MAX {
            let last = round + 1 == LEASED_READ_ROUNDS_MAX;
            let want: Vec<usize> = self
                .reader
                .read(|s| (0..keys.len()).filter(|i| !leased[*i] && (last || s.object(keys[*i]).is_some())).collect());
            let want_hashes: Vec<KeyHash> = want.iter().map(|i| hashes[*i]).collect();
            match self.leader.admit_readers(&want_hashes).await {
                Ok(()) => want.iter().for_each(|i| leased[*i] = true),
                Err(AdmitError::NotLeading) => return Err(self.not_leader()),
                Err(AdmitError::Fenced) => {
                    return Err(Refusal::unavailable("removals of these keys kept them fenced; retry the read"));
                }
            }
            let answers = self.read(&f).await?;
            if answers.iter().enumerate().all(|(i, a)| leased[i] || !ok(a)) {
                return Ok(answers);
            }
        }
        Err(Refusal::internal("a leased read did not settle (every key was leased in the last round)"))
    }
}

/// Rounds of [`Shared::read_leased`]: a key becomes readable between the
/// first look and the read only when a put completes in that window; the
/// last round leases every key asked.
const LEASED_READ_ROUNDS_MAX: usize = 3;
