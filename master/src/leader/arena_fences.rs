//! Arena fences: how the leader takes an arena back from the store node
//! that serves it before it returns the arena (after which its bytes can go
//! to a newer put). Leader-local soft state of one term, no clock (callers
//! pass `now`), no I/O.
//!
//! A WRITE capability names its arena and lives `--capability_ttl_sec`,
//! longer than the put it was issued for. So before returning an arena the
//! leader *revokes* it ([`ArenaFences::revoke`]): the segment's next fence
//! (sent in Ping and TakeCopies answers; a held TakeCopies is answered at
//! once) leaves it out, and the arena is returned only once the segment's
//! owner acknowledges a fence at least that new ([`ArenaFences::ack`]): it
//! then refuses every WRITE under the arena and has none still moving bytes
//! (`mooncake_transfer::fence`). An owner that never answers (down, or
//! partitioned) holds its arenas until every grant over them has expired
//! (`grants_live` in [`ArenaFences::ready`]).
//!
//! A new leader also *keeps out* its predecessors' arenas at once
//! ([`ArenaFences::keep_out`]): revoked the same way, but not returned
//! until the release timeout (their unused bytes may still be written by
//! a stalled shared-memory writer, which no fence binds). Once taken back,
//! the bytes their removed objects freed can be cut out at once
//! (`objects/arena_cuts.rs`): nothing but such a writer could still write
//! there, and an object's own writer finished before its commit.
//!
//! Versions: `term << 32 | n`, `n` counting this term's revokes, so a
//! new leader's fences are newer than any earlier leader's and a store node
//! can keep the highest it saw. A segment not revoked from this term has
//! version `term << 32`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use mooncake_raft_store::ArenaId;
use mooncake_segment::SegmentId;
use tokio::sync::Notify;

/// The wake-ups between the fence's parties, and who is listening.
#[derive(Debug, Default)]
pub struct FenceWakes {
    /// An arena was revoked: held TakeCopies calls answer with the new
    /// fences at once.
    pub moved: Notify,
    /// A store node acknowledged a fence: puts waiting to return arenas look again.
    pub acked: Notify,
    /// Clients holding a TakeCopies call now, with how many: a put waits
    /// for an acknowledgement only from a node that is listening (one that
    /// is not, or a segment mounted by hand, would make it wait in vain).
    /// A leaf lock: nothing is locked under it.
    listening: std::sync::Mutex<std::collections::HashMap<u64, u32>>,
}

impl FenceWakes {
    /// Counts `client` as listening until the guard drops.
    pub fn listen(self: &std::sync::Arc<Self>, client: u64) -> Listening {
        *self.listening_map().entry(client).or_insert(0) += 1;
        Listening { wakes: self.clone(), client }
    }

    /// Whether `client` holds a TakeCopies call now.
    pub fn is_listening(&self, client: u64) -> bool {
        self.listening_map().contains_key(&client)
    }

    fn listening_map(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, u32>> {
        self.listening.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A client counted as listening for fences ([`FenceWakes::listen`]).
#[derive(Debug)]
pub struct Listening {
    wakes: std::sync::Arc<FenceWakes>,
    client: u64,
}

impl Drop for Listening {
    fn drop(&mut self) {
        let mut map = self.wakes.listening_map();
        if let Some(n) = map.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.client);
            }
        }
    }
}

/// An arena being taken back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Revoking {
    segment: SegmentId,
    /// The first fence version of `segment` without it.
    version: u64,
    since: Instant,
    /// To be returned once let go ([`ArenaFences::revoke`]), or only kept
    /// out of the fences ([`ArenaFences::keep_out`]).
    returning: bool,
}

/// What one segment's fence says: which arenas a WRITE may name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentFence {
    pub segment: SegmentId,
    pub version: u64,
    pub live: BTreeSet<u64>,
    pub next: u64,
}

/// The fences of one leadership term. A fence is made from a clone taken
/// *before* the state is read ([`crate::objects::arenas::fences_of`]): an
/// arena missing from the revoking set then is either not revoked at that
/// version or already returned, and so gone from the state read after.
#[derive(Clone, Debug)]
pub struct ArenaFences {
    base: u64,
    revokes: u64,
    revoking: BTreeMap<ArenaId, Revoking>,
    /// Each segment's newest fence version (its last revoke).
    latest: HashMap<SegmentId, u64>,
    /// The newest fence version of this term each segment's owner acknowledged.
    acked: HashMap<SegmentId, u64>,
    /// DEVELOPMENT ONLY (`--dev-unsafe-arena-reuse`): arenas returned without
    /// being taken back, which every fence goes on admitting (their store
    /// nodes are never told). Empty in every real run.
    unfenced: BTreeSet<(SegmentId, ArenaId)>,
}

impl ArenaFences {
    /// The fences of a term: none revoked yet.
    pub fn new(term: u64) -> Self {
        ArenaFences {
            base: term.min(u64::from(u32::MAX)) << 32,
            revokes: 0,
            revoking: BTreeMap::new(),
            latest: HashMap::new(),
            acked: HashMap::new(),
            unfenced: BTreeSet::new(),
        }
    }

    /// DEVELOPMENT ONLY, the planted bug of `--dev-unsafe-arena-reuse`: the
    /// arenas are returned without being taken back, and every later fence
    /// still admits WRITEs under them, as a leader that never told their
    /// store nodes would.
    pub fn admit_unsafely(&mut self, arenas: &[(ArenaId, SegmentId)]) {
        self.unfenced.extend(arenas.iter().map(|(id, segment)| (*segment, *id)));
    }

    /// Starts taking back each arena (with its segment) not already being
    /// taken back, to return it once its owner let go ([`ready`](Self::ready));
    /// whether any was new (the owners must be told).
    pub fn revoke(&mut self, arenas: &[(ArenaId, SegmentId)], now: Instant) -> bool {
        self.leave_out(arenas, now, true)
    }

    /// Leaves each arena out of its segment's fences without returning it:
    /// an earlier term's arena, whose unused bytes wait for the release
    /// timeout (a shared-memory writer, which no fence binds, may still
    /// write there) while the bytes its removed objects freed may be cut
    /// out once it is taken back ([`is_taken_back`](Self::is_taken_back)).
    /// Whether any was new (the owners must be told).
    pub fn keep_out(&mut self, arenas: &[(ArenaId, SegmentId)], now: Instant) -> bool {
        self.leave_out(arenas, now, false)
    }

    fn leave_out(&mut self, arenas: &[(ArenaId, SegmentId)], now: Instant, returning: bool) -> bool {
        let mut fresh = Vec::new();
        for (id, segment) in arenas {
            match self.revoking.get_mut(id) {
                Some(r) => r.returning |= returning,
                None => fresh.push((*id, *segment)),
            }
        }
        if fresh.is_empty() {
            return false;
        }
        self.revokes += 1;
        let version = self.base | (self.revokes & u64::from(u32::MAX));
        for (id, segment) in fresh {
            self.revoking.insert(id, Revoking { segment, version, since: now, returning });
            self.latest.insert(segment, version);
        }
        true
    }

    /// `segment`'s owner enforces fence `version` (an earlier term's
    /// versions say nothing about this term's revokes and are ignored).
    pub fn ack(&mut self, segment: SegmentId, version: u64) {
        if version >= self.base && version <= self.version(segment) {
            let acked = self.acked.entry(segment).or_insert(0);
            *acked = (*acked).max(version);
        }
    }

    /// Arenas that may be returned now: their owner acknowledged a fence
    /// without them, or they were revoked longer than `grants_live` ago
    /// (every WRITE grant over them has expired). Only arenas revoked to be
    /// returned count, not those only kept out.
    pub fn ready(&self, now: Instant, grants_live: Duration) -> Vec<ArenaId> {
        self.revoking
            .iter()
            .filter(|(_, r)| r.returning && self.let_go(r, now, grants_live))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether `id` was revoked and is [`ready`](Self::ready): no WRITE
    /// under it can land any more (shared-memory copies aside, which no
    /// fence binds).
    pub fn is_taken_back(&self, id: ArenaId, now: Instant, grants_live: Duration) -> bool {
        self.revoking.get(&id).is_some_and(|r| self.let_go(r, now, grants_live))
    }

    fn let_go(&self, r: &Revoking, now: Instant, grants_live: Duration) -> bool {
        self.acked.get(&r.segment).is_some_and(|a| *a >= r.version)
            || now.saturating_duration_since(r.since) >= grants_live
    }

    /// The arenas were returned, or are gone with their segment.
    pub fn forget(&mut self, ids: &[ArenaId]) {
        for id in ids {
            self.revoking.remove(id);
        }
    }

    /// Whether `id` is being taken back.
    pub fn is_revoking(&self, id: ArenaId) -> bool {
        self.revoking.contains_key(&id)
    }

    /// `segment`'s current fence version.
    pub fn version(&self, segment: SegmentId) -> u64 {
        self.latest.get(&segment).copied().unwrap_or(self.base)
    }

    /// Whether `segment`'s owner has yet to acknowledge a fence that takes
    /// back an arena of this term's revokes. Until one is revoked there is
    /// nothing to tell: whatever fence the owner holds (its mount's, or an
    /// earlier leader's) admits every arena this leader hands out, as those
    /// are newer than any fence made before.
    pub fn due(&self, segment: SegmentId) -> bool {
        self.latest.get(&segment).is_some_and(|v| self.acked.get(&segment).copied().unwrap_or(0) < *v)
    }

    /// `segment`'s fence, given the arenas the state holds on it and the
    /// next arena id.
    pub fn fence(
        &self,
        segment: SegmentId,
        in_state: impl IntoIterator<Item = ArenaId>,
        next: ArenaId,
    ) -> SegmentFence {
        SegmentFence {
            segment,
            version: self.version(segment),
            live: in_state
                .into_iter()
                .filter(|id| !self.is_revoking(*id))
                .chain(self.unfenced.range((segment, ArenaId(0))..=(segment, ArenaId(u64::MAX))).map(|(_, id)| *id))
                .map(|id| id.0)
                .collect(),
            next: next.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: SegmentId = SegmentId(1);
    const S2: SegmentId = SegmentId(2);
    const LIVE: Duration = Duration::from_secs(65);

    #[test]
    fn the_planted_bug_keeps_returned_arenas_in_their_own_segments_fences() {
        let mut f = ArenaFences::new(2);
        assert_eq!(f.fence(S1, [ArenaId(6)], ArenaId(9)).live, BTreeSet::from([6]));
        f.admit_unsafely(&[(ArenaId(3), S1), (ArenaId(4), S2)]);
        // Returned: gone from the state, still admitted on their own segment only.
        assert_eq!(f.fence(S1, [ArenaId(6)], ArenaId(9)).live, BTreeSet::from([3, 6]));
        assert_eq!(f.fence(S2, [], ArenaId(9)).live, BTreeSet::from([4]));
    }

    #[test]
    fn an_arena_is_ready_once_its_owner_acknowledged_a_fence_without_it() {
        let t0 = Instant::now();
        let mut f = ArenaFences::new(3);
        assert_eq!(f.version(S1), 3 << 32);
        assert!(!f.due(S1), "nothing revoked: nothing to tell");
        assert!(f.revoke(&[(ArenaId(7), S1), (ArenaId(8), S2)], t0));
        assert!(!f.revoke(&[(ArenaId(7), S1)], t0), "already being taken back");
        let v = f.version(S1);
        assert!(v > 3 << 32 && f.due(S1));
        let fence = f.fence(S1, [ArenaId(6), ArenaId(7)], ArenaId(9));
        assert_eq!(fence.live, BTreeSet::from([6]), "a revoked arena leaves the fence");
        assert!(f.ready(t0, LIVE).is_empty());
        f.ack(S1, v - 1);
        assert!(f.ready(t0, LIVE).is_empty(), "an older fence still lets arena 7 through");
        assert!(!f.is_taken_back(ArenaId(7), t0, LIVE));
        f.ack(S1, v);
        assert_eq!(f.ready(t0, LIVE), vec![ArenaId(7)]);
        assert!(f.is_taken_back(ArenaId(7), t0, LIVE));
        assert!(!f.is_taken_back(ArenaId(6), t0, LIVE), "never revoked");
        f.forget(&[ArenaId(7)]);
        assert!(!f.is_revoking(ArenaId(7)));
        // S2's owner never answers: its arena waits for every grant to expire.
        assert!(f.ready(t0 + LIVE - Duration::from_millis(1), LIVE).is_empty());
        assert_eq!(f.ready(t0 + LIVE, LIVE), vec![ArenaId(8)]);
    }

    #[test]
    fn an_arena_kept_out_is_taken_back_but_never_ready_until_revoked() {
        let t0 = Instant::now();
        let mut f = ArenaFences::new(3);
        assert!(f.keep_out(&[(ArenaId(2), S1)], t0));
        assert!(!f.keep_out(&[(ArenaId(2), S1)], t0), "already kept out");
        let fence = f.fence(S1, [ArenaId(2), ArenaId(5)], ArenaId(9));
        assert_eq!(fence.live, BTreeSet::from([5]), "a kept-out arena leaves the fence");
        f.ack(S1, f.version(S1));
        assert!(f.is_taken_back(ArenaId(2), t0, LIVE));
        assert!(f.ready(t0, LIVE).is_empty(), "kept out, not to be returned");
        assert!(!f.revoke(&[(ArenaId(2), S1)], t0), "no new fence: the node already let go");
        assert_eq!(f.ready(t0, LIVE), vec![ArenaId(2)]);
    }

    #[test]
    fn acks_of_another_term_or_of_fences_never_sent_count_for_nothing() {
        let t0 = Instant::now();
        let mut f = ArenaFences::new(4);
        f.revoke(&[(ArenaId(1), S1)], t0);
        f.ack(S1, (3 << 32) | 99);
        f.ack(S1, (4 << 32) | 99);
        assert!(f.ready(t0, LIVE).is_empty());
        assert!(f.due(S1));
    }

    #[test]
    fn a_new_term_starts_above_every_version_of_the_last() {
        let mut old = ArenaFences::new(5);
        for n in 0..10 {
            old.revoke(&[(ArenaId(n), S1)], Instant::now());
        }
        assert!(ArenaFences::new(6).version(S1) > old.version(S1));
    }
}
