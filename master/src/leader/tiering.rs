//! The leader's bookkeeping of the SSD tier (docs/TIERS.md): the tier
//! policy (offload mode, promotion, disk watermark, grace), and the copies
//! in flight ([`CopyTable`]): which store node was asked to copy which
//! object where, which of them it has been handed (by its Ping), reads of
//! disk-only objects counted for promotion, and when this leader first saw
//! each detached disk segment.
//!
//! Pure bookkeeping of one leadership term, part of the leader's soft state
//! (`leader.rs`, one lock): no clock (callers pass `now`), no I/O (the
//! copy duty in `objects/copies/` reads the state, proposes, and answers Pings).
//! A new leader starts empty: copies handed out by an earlier leader are
//! reported to nobody, and their ranges (reserved in that leader's arenas)
//! come back with those arenas after the release timeout.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use mooncake_raft_store::{ObjectVersion, PlacedReplica, ReplicaPlacement};
use mooncake_segment::{ClientId, SegmentId};

/// Hits within the access horizon before a disk-only object is promoted
/// back to memory (Mooncake: 2).
pub const DEFAULT_PROMOTION_ADMISSION_THRESHOLD: u32 = 2;

/// Promotions in flight at most.
pub const DEFAULT_PROMOTION_QUEUE_LIMIT: usize = 256;

/// Offload copies in flight at most.
pub const DEFAULT_OFFLOAD_QUEUE_LIMIT: usize = 1_024;

/// Usage of the disk tier above which disk eviction starts.
pub const DEFAULT_DISK_EVICTION_HIGH_WATERMARK_RATIO: f64 = 0.95;

/// How long the disk segments of an expired store node are kept (detached,
/// their objects known) for it to come back: ten minutes covers a restart,
/// a kernel upgrade or a node drain.
pub const DEFAULT_DISK_REPLICA_GRACE_SEC: u64 = 600;

/// When objects are copied to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadMode {
    /// Never: disk segments stay empty (and memory eviction drops objects).
    Off,
    /// Every complete object, soon after its put (`--enable_offload`).
    Eager,
    /// Only what memory eviction is about to drop (`--offload_on_evict`).
    OnEvict,
}

/// The tier knobs of one master.
#[derive(Clone, Copy, Debug)]
pub struct TierPolicy {
    pub offload: OffloadMode,
    pub promotion_on_hit: bool,
    pub promotion_admission_threshold: u32,
    pub promotion_queue_limit: usize,
    pub offload_queue_limit: usize,
    pub disk_high_watermark_ratio: f64,
    pub disk_replica_grace: Duration,
    /// A copy not reported this long after it was handed out is given up
    /// (its range stays reserved until the put discard timeout expires it).
    pub copy_timeout: Duration,
    /// Hot keys' extra memory replicas (`hot_keys.rs`).
    pub hot_keys: super::hot_keys::HotKeyPolicy,
}

impl TierPolicy {
    /// Off everywhere (tests, and masters built without flags).
    pub fn off() -> Self {
        TierPolicy {
            offload: OffloadMode::Off,
            promotion_on_hit: false,
            promotion_admission_threshold: DEFAULT_PROMOTION_ADMISSION_THRESHOLD,
            promotion_queue_limit: DEFAULT_PROMOTION_QUEUE_LIMIT,
            offload_queue_limit: DEFAULT_OFFLOAD_QUEUE_LIMIT,
            disk_high_watermark_ratio: DEFAULT_DISK_EVICTION_HIGH_WATERMARK_RATIO,
            disk_replica_grace: Duration::from_secs(DEFAULT_DISK_REPLICA_GRACE_SEC),
            // The default put discard timeout (`node/config.rs`).
            copy_timeout: Duration::from_secs(30),
            hot_keys: super::hot_keys::HotKeyPolicy::off(),
        }
    }
}

/// Why a copy is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Memory → disk.
    Offload,
    /// Disk → memory.
    Promote,
    /// Memory → memory: a replica lost with its segment made again.
    Repair,
    /// Memory → memory: one more replica of a hot key (`hot_keys.rs`).
    Replicate,
    /// To the segment a user named: a copy or move task
    /// (`user_tasks.rs`).
    User,
}

impl Purpose {
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Offload => "offload",
            Purpose::Promote => "promote",
            Purpose::Repair => "repair",
            Purpose::Replicate => "replicate",
            Purpose::User => "user",
        }
    }
}

/// One copy in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copy {
    pub id: u64,
    pub purpose: Purpose,
    pub key: String,
    pub version: ObjectVersion,
    pub size_bytes: u64,
    pub checksum: u32,
    /// The store node that makes it (the owner of the target segment).
    pub executor: ClientId,
    /// Readable replicas to copy from, best first.
    pub sources: Vec<ReplicaPlacement>,
    /// Where it goes: reserved in this leader's arena.
    pub target: PlacedReplica,
    pub issued: Instant,
    /// When a Ping or TakeCopies answer handed it to the executor.
    pub delivered: Option<Instant>,
}

impl Copy {
    /// The name its target range is reserved under in the put table: never
    /// a user key (those are reserved under themselves), so a copy never
    /// collides with a put of the same object.
    pub fn reservation_key(id: u64) -> String {
        format!("\u{0}copy-{id}")
    }
}

/// An object that lost a replica with its segment: copies are made until
/// it has `wanted` again (the replicas it had before the loss).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    pub key: String,
    pub version: ObjectVersion,
    pub wanted: usize,
}

/// Most repairs kept waiting; past it the objects of further losses stay
/// under-replicated (counted in the metric of dropped repairs).
pub const REPAIRS_MAX: usize = 1_000_000;

/// Most keys whose reads are counted for promotion; past it the counts
/// start over (hot keys reach the threshold again quickly).
pub const HITS_TRACKED_MAX: usize = 100_000;

/// Most keys just committed kept for the eager offload (at 200 B each,
/// ~13 MB); past it new keys wait for the offload's scan of the key space.
pub const FRESH_KEYS_MAX: usize = 65_536;

/// Objects users asked to promote to memory (`ExistOptions.prefetch_to_memory`)
/// kept waiting at most; past it further asks are dropped (best effort, as
/// upstream's).
pub const PREFETCH_QUEUED_MAX: usize = 4_096;

/// The copies in flight of one term, and what promotion and the detach
/// grace count.
#[derive(Debug, Default)]
pub struct CopyTable {
    next_id: u64,
    copies: BTreeMap<u64, Copy>,
    /// Copies in flight of each key (several only for users' tasks).
    by_key: HashMap<String, u32>,
    /// Copies not yet handed to their executor, by executor.
    outbox: HashMap<ClientId, VecDeque<u64>>,
    hits: HashMap<String, u32>,
    detached_seen: HashMap<SegmentId, Instant>,
    /// Where the eager offload scan goes on (the last key it looked at).
    pub offload_cursor: String,
    /// Keys of objects just committed, for the eager offload to copy first
    /// (the scan finds what falls off: at most [`FRESH_KEYS_MAX`]).
    fresh: VecDeque<String>,
    /// Objects whose disk copy disk eviction dropped: not offloaded again
    /// (it would only push another copy out, and back, for ever).
    disk_evicted: HashSet<String>,
    /// Objects to repair, oldest loss first (`copies/`, repair).
    repairs: VecDeque<Repair>,
    /// Repairs with nowhere to go (every memory segment that may hold the
    /// object holds it already), tried again once a memory segment joins.
    parked: Vec<Repair>,
    /// The memory segments attached when the repair duty last looked: one
    /// not among them has joined since.
    memory_seen: BTreeSet<SegmentId>,
    /// Keys users asked to promote, oldest first (at most
    /// [`PREFETCH_QUEUED_MAX`], each once).
    prefetch: VecDeque<String>,
    prefetch_queued: HashSet<String>,
}

impl CopyTable {
    /// The id the next copy gets (reserve its range under
    /// [`Copy::reservation_key`] of it first, then [`CopyTable::add`]).
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Copies in flight for `purpose`.
    pub fn in_flight(&self, purpose: Purpose) -> usize {
        self.copies.values().filter(|c| c.purpose == purpose).count()
    }

    /// The keys of every copy in flight.
    pub fn keys_in_flight(&self) -> std::collections::HashSet<String> {
        self.by_key.keys().cloned().collect()
    }

    /// Whether a copy of `key` is in flight.
    pub fn is_copying(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    /// Records a copy and queues it for its executor's next Ping.
    pub fn add(&mut self, copy: Copy) {
        *self.by_key.entry(copy.key.clone()).or_insert(0) += 1;
        self.outbox.entry(copy.executor).or_default().push_back(copy.id);
        self.copies.insert(copy.id, copy);
    }

    /// Up to `max` copies queued for `executor`, now handed to it.
    pub fn take_for(&mut self, executor: ClientId, max: usize, now: Instant) -> Vec<Copy> {
        let Some(queue) = self.outbox.get_mut(&executor) else { return Vec::new() };
        let mut out = Vec::new();
        while out.len() < max {
            let Some(id) = queue.pop_front() else { break };
            if let Some(c) = self.copies.get_mut(&id) {
                c.delivered = Some(now);
                out.push(c.clone());
            }
        }
        if queue.is_empty() {
            self.outbox.remove(&executor);
        }
        out
    }

    /// Ends copy `id` as reported by `executor`: `None` when it is unknown
    /// (given up, or handed out by an earlier leader) or not `executor`'s.
    pub fn finish(&mut self, id: u64, executor: ClientId) -> Option<Copy> {
        if self.copies.get(&id).is_none_or(|c| c.executor != executor) {
            return None;
        }
        let copy = self.copies.remove(&id)?;
        if let Some(n) = self.by_key.get_mut(&copy.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_key.remove(&copy.key);
            }
        }
        if let Some(q) = self.outbox.get_mut(&executor) {
            q.retain(|i| *i != id);
        }
        Some(copy)
    }

    /// Gives up copies issued longer than `timeout` ago (their executor died,
    /// or its report was lost): removed and returned.
    pub fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<Copy> {
        let old: Vec<u64> =
            self.copies.values().filter(|c| now.saturating_duration_since(c.issued) > timeout).map(|c| c.id).collect();
        old.into_iter().filter_map(|id| self.finish(id, self.copies.get(&id)?.executor)).collect()
    }

    /// Notes that `key` was just committed (eager offload copies it first).
    pub fn note_fresh(&mut self, key: &str) {
        if self.fresh.len() < FRESH_KEYS_MAX {
            self.fresh.push_back(key.to_string());
        }
    }

    /// Queues the repairs of a segment loss; answers how many did not fit
    /// ([`REPAIRS_MAX`]).
    pub fn queue_repairs(&mut self, repairs: Vec<Repair>) -> usize {
        let room = REPAIRS_MAX.saturating_sub(self.repairs.len() + self.parked.len());
        let dropped = repairs.len().saturating_sub(room);
        self.repairs.extend(repairs.into_iter().take(room));
        dropped
    }

    /// Up to `max` repairs, oldest first, no longer kept.
    pub fn take_repairs(&mut self, max: usize) -> Vec<Repair> {
        let n = max.min(self.repairs.len());
        self.repairs.drain(..n).collect()
    }

    /// Keeps a repair for a later round (no room for its copy yet).
    pub fn keep_repair(&mut self, repair: Repair) {
        if self.repairs.len() + self.parked.len() < REPAIRS_MAX {
            self.repairs.push_back(repair);
        }
    }

    /// Keeps a repair that has nowhere to go until a memory segment joins
    /// ([`CopyTable::unpark_repairs`]).
    pub fn park_repair(&mut self, repair: Repair) {
        if self.repairs.len() + self.parked.len() < REPAIRS_MAX {
            self.parked.push(repair);
        }
    }

    /// Notes the memory segments attached now; when one joined since the
    /// last look, the parked repairs are queued again (answers how many).
    pub fn unpark_repairs(&mut self, memory: BTreeSet<SegmentId>) -> usize {
        let joined = memory.iter().any(|g| !self.memory_seen.contains(g));
        self.memory_seen = memory;
        if !joined || self.parked.is_empty() {
            return 0;
        }
        let n = self.parked.len();
        self.repairs.extend(self.parked.drain(..));
        n
    }

    /// Repairs waiting, for a copy or for a segment to go to (copies in
    /// flight not counted).
    pub fn repairs_pending(&self) -> usize {
        self.repairs.len() + self.parked.len()
    }

    /// The repair backlog an operator sees: repairs waiting and repair
    /// copies in flight (`mooncake status`, `mooncake_repairs_pending`).
    pub fn repair_backlog(&self) -> usize {
        self.repairs_pending() + self.in_flight(Purpose::Repair)
    }

    /// Up to `max` of the keys just committed, oldest first, no longer kept.
    pub fn take_fresh(&mut self, max: usize) -> Vec<String> {
        let n = max.min(self.fresh.len());
        self.fresh.drain(..n).collect()
    }

    /// Keeps `key` for the next planning round (its copy waits for an arena).
    pub fn keep_fresh(&mut self, key: String) {
        if self.fresh.len() < FRESH_KEYS_MAX {
            self.fresh.push_front(key);
        }
    }

    /// Counts one read of the disk-only object `key`; answers the count.
    pub fn hit(&mut self, key: &str) -> u32 {
        if !self.hits.contains_key(key) && self.hits.len() >= HITS_TRACKED_MAX {
            self.hits.clear();
        }
        let n = self.hits.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// The keys read at least `threshold` times (their counts start over).
    pub fn take_hot(&mut self, threshold: u32) -> Vec<String> {
        let hot: Vec<String> = self.hits.iter().filter(|(_, n)| **n >= threshold).map(|(k, _)| k.clone()).collect();
        for k in &hot {
            self.hits.remove(k);
        }
        hot
    }

    /// Records that disk eviction dropped these objects' disk copies (the
    /// record starts over past [`HITS_TRACKED_MAX`] keys).
    pub fn note_disk_evicted(&mut self, keys: impl IntoIterator<Item = String>) {
        for key in keys {
            if self.disk_evicted.len() >= HITS_TRACKED_MAX {
                self.disk_evicted.clear();
            }
            self.disk_evicted.insert(key);
        }
    }

    /// Whether disk eviction dropped `key`'s disk copy (this term).
    pub fn was_disk_evicted(&self, key: &str) -> bool {
        self.disk_evicted.contains(key)
    }

    /// Queues `key` for promotion to memory (a user's prefetch): whether it
    /// was queued (not when queued already, or the queue is full).
    pub fn queue_prefetch(&mut self, key: &str) -> bool {
        if self.prefetch.len() >= PREFETCH_QUEUED_MAX || self.prefetch_queued.contains(key) {
            return false;
        }
        self.prefetch_queued.insert(key.to_string());
        self.prefetch.push_back(key.to_string());
        true
    }

    /// Up to `max` keys users asked to promote, oldest first, no longer kept.
    pub fn take_prefetch(&mut self, max: usize) -> Vec<String> {
        let n = max.min(self.prefetch.len());
        let keys: Vec<String> = self.prefetch.drain(..n).collect();
        for k in &keys {
            self.prefetch_queued.remove(k);
        }
        keys
    }

    /// Whether users asked for promotions not planned yet.
    pub fn has_prefetch(&self) -> bool {
        !self.prefetch.is_empty()
    }

    /// Keeps `key` hot (at `threshold` reads): its promotion was planned but
    /// could not be placed yet (an arena is being granted).
    pub fn keep_hot(&mut self, key: &str, threshold: u32) {
        let n = self.hits.entry(key.to_string()).or_insert(0);
        *n = (*n).max(threshold);
    }

    /// Detached segments (of `detached`) first seen by this leader longer
    /// than `grace` ago; forgets segments no longer detached.
    pub fn detached_past_grace(&mut self, detached: &[SegmentId], now: Instant, grace: Duration) -> Vec<SegmentId> {
        let live: HashSet<SegmentId> = detached.iter().copied().collect();
        self.detached_seen.retain(|s, _| live.contains(s));
        detached
            .iter()
            .copied()
            .filter(|s| now.saturating_duration_since(*self.detached_seen.entry(*s).or_insert(now)) > grace)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mooncake_raft_store::ArenaId;
    use mooncake_segment::Range;

    fn copy(t: &mut CopyTable, key: &str, executor: u64, now: Instant) -> u64 {
        let id = t.next_id();
        t.add(Copy {
            id,
            purpose: Purpose::Offload,
            key: key.into(),
            version: ObjectVersion(1),
            size_bytes: 10,
            checksum: 0,
            executor: ClientId(executor),
            sources: vec![],
            target: PlacedReplica { segment: SegmentId(9), arena: ArenaId(1), range: Range::new(0, 4096) },
            issued: now,
            delivered: None,
        });
        id
    }

    #[test]
    fn copies_are_handed_to_their_executor_once_and_finished_only_by_it() {
        let now = Instant::now();
        let mut t = CopyTable::default();
        let a = copy(&mut t, "a", 1, now);
        let b = copy(&mut t, "b", 1, now);
        let c = copy(&mut t, "c", 2, now);
        assert!(t.is_copying("a") && t.is_copying("c"));
        assert_eq!(t.take_for(ClientId(1), 1, now).iter().map(|c| c.id).collect::<Vec<_>>(), vec![a]);
        assert_eq!(t.take_for(ClientId(1), 8, now).iter().map(|c| c.id).collect::<Vec<_>>(), vec![b]);
        assert!(t.take_for(ClientId(1), 8, now).is_empty(), "handed out once");
        assert!(t.finish(c, ClientId(1)).is_none(), "another node's copy");
        assert!(t.finish(c, ClientId(2)).is_some());
        assert!(t.finish(c, ClientId(2)).is_none(), "finished once");
        assert!(t.take_for(ClientId(2), 8, now).is_empty(), "a finished copy is not handed out");
        assert_eq!(t.in_flight(Purpose::Offload), 2);
    }

    #[test]
    fn repairs_with_nowhere_to_go_wait_for_a_memory_segment_to_join() {
        let mut t = CopyTable::default();
        let segs = |ids: &[u64]| ids.iter().map(|i| SegmentId(*i)).collect::<BTreeSet<_>>();
        assert_eq!(t.unpark_repairs(segs(&[1, 2])), 0, "nothing parked");
        t.park_repair(Repair { key: "k".into(), version: ObjectVersion(3), wanted: 2 });
        assert_eq!(t.repairs_pending(), 1, "a parked repair is part of the backlog");
        assert!(t.take_repairs(8).is_empty(), "not handed out while nothing joined");
        assert_eq!(t.unpark_repairs(segs(&[2])), 0, "a segment leaving is no place to go");
        assert_eq!(t.unpark_repairs(segs(&[2])), 0);
        assert_eq!(t.unpark_repairs(segs(&[1, 2])), 1, "segment 1 came back");
        assert_eq!(t.take_repairs(8).iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), vec!["k"]);
        assert_eq!(t.repairs_pending(), 0);
    }

    #[test]
    fn copies_not_reported_in_time_are_given_up() {
        let t0 = Instant::now();
        let mut t = CopyTable::default();
        copy(&mut t, "old", 1, t0);
        copy(&mut t, "new", 1, t0 + Duration::from_secs(5));
        let gone = t.expire(t0 + Duration::from_secs(11), Duration::from_secs(10));
        assert_eq!(gone.iter().map(|c| c.key.as_str()).collect::<Vec<_>>(), vec!["old"]);
        assert!(!t.is_copying("old") && t.is_copying("new"));
    }

    #[test]
    fn hot_keys_reach_the_threshold_and_start_over() {
        let mut t = CopyTable::default();
        assert_eq!(t.hit("k"), 1);
        assert!(t.take_hot(2).is_empty());
        assert_eq!(t.hit("k"), 2);
        assert_eq!(t.take_hot(2), vec!["k".to_string()]);
        assert!(t.take_hot(2).is_empty());
        assert_eq!(t.hit("k"), 1, "counting starts over");
    }

    #[test]
    fn a_detached_segment_is_past_its_grace_from_when_this_leader_first_saw_it() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(60);
        let mut t = CopyTable::default();
        let s = SegmentId(9);
        assert!(t.detached_past_grace(&[s], t0, grace).is_empty());
        assert!(t.detached_past_grace(&[s], t0 + grace / 2, grace).is_empty());
        assert_eq!(t.detached_past_grace(&[s], t0 + grace * 2, grace), vec![s]);
        // Attached again, then detached again: the grace starts over.
        assert!(t.detached_past_grace(&[], t0 + grace * 3, grace).is_empty());
        assert!(t.detached_past_grace(&[s], t0 + grace * 3, grace).is_empty());
    }
}
