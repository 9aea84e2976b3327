//! Leader-local soft state: KV leases and removal fences ([`KvLeases`]),
//! puts in flight and this term's arenas ([`PutTable`]), arenas being taken
//! back ([`ArenaFences`]), client heartbeats, and when this leader first saw
//! each object retired by an upsert. None of it is replicated. A new leader
//! starts empty and is conservative instead: for one KV-lease TTL after its
//! election every object that existed when it took over counts as leased,
//! and every known client counts as seen at the election.
//!
//! **Lock order.** The soft state is one mutex, and it is never locked while
//! the applied state is being read: callers read the state (`StateReader`),
//! let go of it, and only then act on the soft state ("compute under the
//! read, act after"). Apply takes the state's write lock, and a waiting
//! writer blocks new readers, so a soft-state lock taken inside a state read
//! could deadlock with a duty holding the soft state and waiting to read.
//! [`LeaderState`] asserts the rule on every lock, so a violation fails the
//! tests at once instead of hanging one run in a thousand. Where the other
//! locks a master shares (the write path's, the leaves) sit around this one:
//! `Shared` (`shared.rs`).

pub mod arena_fences;
pub mod decisions;
pub mod hot_keys;
pub mod kv_lease;
pub mod reservations;
pub mod tiering;
pub mod user_tasks;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mooncake_raft_store::{ArenaId, ObjectVersion};
use mooncake_segment::{ClientId, Range};

use crate::leader::arena_fences::ArenaFences;
use crate::leader::kv_lease::{FenceWait, KeyHash, KvLeases};
use crate::leader::reservations::PutTable;
use crate::leader::tiering::CopyTable;

/// Freed pieces of earlier terms' arenas kept waiting for their arena's
/// take-back at most; beyond, a piece is left to its arena's return.
pub const CUTS_WAITING_MAX: usize = 1 << 20;

/// Soft state of one leadership term.
pub struct TermState {
    pub term: u64,
    pub elected_at: Instant,
    pub kv: KvLeases,
    /// Puts in flight and this term's arenas.
    pub puts: PutTable,
    /// Copies between tiers in flight (`tiering.rs`).
    pub copies: CopyTable,
    /// Reads counted for hot-key replication (`hot_keys.rs`).
    pub hot: hot_keys::HotKeys,
    /// Users' copy and move tasks (`user_tasks.rs`).
    pub tasks: user_tasks::TaskTable,
    /// Arenas being taken back from their store nodes (`arena_fences.rs`).
    pub fences: ArenaFences,
    /// Bytes removed objects freed in earlier terms' arenas, waiting for
    /// their arena to be taken back before they are cut out of it
    /// (`objects/arena_cuts.rs`); at most [`CUTS_WAITING_MAX`].
    pub cuts_waiting: Vec<(ArenaId, Range)>,
    heartbeats: HashMap<ClientId, Instant>,
    /// Since when this leader could hear every client: its election, or
    /// the end of the last stall of its own (`restart_hearing`). Nobody
    /// counts as unheard for longer than this.
    hearing_since: Instant,
    first_seen: HashMap<ObjectVersion, Instant>,
    /// Objects of this version and above were committed after everything
    /// earlier leaders committed was applied here: no earlier leader can
    /// have leased them, so the election's grace does not cover them.
    /// `None` until this leader has applied an entry of its own term.
    grace_below: Option<ObjectVersion>,
}

impl TermState {
    fn new(term: u64, now: Instant, unsafe_unfenced: bool) -> Self {
        TermState {
            term,
            elected_at: now,
            kv: KvLeases::new(unsafe_unfenced),
            puts: PutTable::for_term(term),
            copies: CopyTable::default(),
            hot: hot_keys::HotKeys::default(),
            tasks: user_tasks::TaskTable::default(),
            fences: ArenaFences::new(term),
            cuts_waiting: Vec::new(),
            heartbeats: HashMap::new(),
            hearing_since: now,
            first_seen: HashMap::new(),
            grace_below: None,
        }
    }

    /// Whether the objects the election's grace covers are not bounded yet.
    pub fn grace_unbounded(&self) -> bool {
        self.grace_below.is_none()
    }

    /// What a state read found: the term of its last applied entry and the
    /// next object version. The first read that shows an entry of this
    /// term bounds the objects earlier leaders can have leased (read as soon
    /// as the applied log reaches the term: `duties::follow_leadership`).
    pub fn note_applied(&mut self, applied_term: Option<u64>, next_version: ObjectVersion) {
        if self.grace_below.is_none() && applied_term == Some(self.term) {
            self.grace_below = Some(next_version);
        }
    }

    /// Whether the object `version` of `key` may be under a KV lease at
    /// `now`: one this leader granted, or — within one TTL of its election —
    /// one an earlier leader may have granted, unless the object was
    /// committed after everything earlier leaders committed was applied
    /// ([`note_applied`](Self::note_applied)). So a cache filled after an
    /// election can evict at once; only what existed then waits out the TTL.
    pub fn is_version_leased(&self, key: KeyHash, version: ObjectVersion, now: Instant, ttl: Duration) -> bool {
        let in_grace = now < self.elected_at + ttl && self.grace_below.is_none_or(|below| version < below);
        in_grace || self.kv.is_leased(key, now)
    }

    /// When `client` was last heard from (the election, and the end of a
    /// stall of this leader, count as a heartbeat).
    pub fn last_heartbeat(&self, client: ClientId) -> Instant {
        self.heartbeats.get(&client).copied().unwrap_or(self.elected_at).max(self.hearing_since)
    }

    /// This leader could not have heard anyone until `now` (its process was
    /// paused, its event loop stalled, or it ran out of a resource): every
    /// client's TTL starts again, as after an election. Absence of
    /// heartbeats is evidence only while the leader was able to receive them.
    pub fn restart_hearing(&mut self, now: Instant) {
        self.hearing_since = self.hearing_since.max(now);
    }

    /// When this leader first saw the object `version` retired (by its own
    /// upsert, or by an earlier leader's, the first time it looked); records
    /// `now` on first call. The release of its bytes counts from here.
    pub fn first_seen(&mut self, version: ObjectVersion, now: Instant) -> Instant {
        *self.first_seen.entry(version).or_insert(now)
    }

    /// Drops what can no longer matter: the times of versions that are not
    /// retired any more, and reads older than the horizon.
    pub fn prune(&mut self, now: Instant, still_held: &HashSet<ObjectVersion>) {
        self.first_seen.retain(|v, _| still_held.contains(v));
        self.kv.prune(now);
    }
}

/// Why readers could not be admitted.
#[derive(Debug, PartialEq, Eq)]
pub enum AdmitError {
    /// This master does not lead (any more).
    NotLeading,
    /// Removals of these keys kept fencing them for the whole wait.
    Fenced,
}

/// How long a read waits for removals of its keys to finish before it gives
/// up with UNAVAILABLE. A removal fences for one commit (milliseconds); this
/// only bounds a read against a stream of removals of the same key.
pub const FENCE_WAIT_MAX: Duration = Duration::from_secs(5);

/// The soft state of the current term, if this master leads.
pub struct LeaderState {
    kv_lease_ttl: Duration,
    unsafe_unfenced: bool,
    inner: Mutex<Option<TermState>>,
}

impl LeaderState {
    pub fn new(kv_lease_ttl: Duration) -> Self {
        LeaderState { kv_lease_ttl, unsafe_unfenced: false, inner: Mutex::new(None) }
    }

    /// DEVELOPMENT ONLY (`--dev-unsafe-unfenced-removals`): removals check
    /// KV leases before they propose but fence nothing, so a read admitted
    /// while a removal is in flight is answered OK and then freed.
    pub fn new_unfenced(kv_lease_ttl: Duration) -> Self {
        LeaderState { kv_lease_ttl, unsafe_unfenced: true, inner: Mutex::new(None) }
    }

    pub fn kv_lease_ttl(&self) -> Duration {
        self.kv_lease_ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<TermState>> {
        assert!(
            !mooncake_raft_store::in_state_read(),
            "lock order violated: the leader's soft state was locked inside a state read (see master/src/leader/mod.rs)"
        );
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called on every metrics change: starts fresh soft state when this node
    /// becomes leader of a new term, drops it when it stops leading.
    pub fn observe(&self, leading_term: Option<u64>, now: Instant) {
        let mut guard = self.lock();
        match leading_term {
            Some(term) if guard.as_ref().map(|t| t.term) != Some(term) => {
                *guard = Some(TermState::new(term, now, self.unsafe_unfenced));
            }
            Some(_) => {}
            None => *guard = None,
        }
    }

    /// Runs `f` on the term's soft state; `None` when not leading.
    pub fn with<R>(&self, f: impl FnOnce(&mut TermState) -> R) -> Option<R> {
        let mut guard = self.lock();
        let out = guard.as_mut().map(f);
        // Debug builds (every test) check the put table after each use: a
        // broken invariant ends the process here, not at a corrupt read.
        #[cfg(debug_assertions)]
        if let Some(t) = guard.as_ref()
            && let Err(why) = t.puts.check()
        {
            tracing::error!(%why, "the put table's invariants broke (reservations/invariants.rs)");
            eprintln!("the put table's invariants broke: {why}");
            std::process::abort();
        }
        out
    }

    /// Records a client heartbeat.
    pub fn heartbeat(&self, client: ClientId, now: Instant) {
        self.with(|t| {
            t.heartbeats.insert(client, now);
        });
    }

    /// Leases `keys` to a reader about to read them, waiting while removals
    /// of any of them are in flight. Called *before* the linearizable read,
    /// so the read sees every removal that fenced first.
    pub async fn admit_readers(&self, keys: &[KeyHash]) -> Result<(), AdmitError> {
        let ttl = self.kv_lease_ttl;
        let deadline = tokio::time::Instant::now() + FENCE_WAIT_MAX;
        loop {
            let wait: FenceWait = match self.with(|t| t.kv.admit_readers(keys, Instant::now(), ttl)) {
                None => return Err(AdmitError::NotLeading),
                Some(Ok(())) => return Ok(()),
                Some(Err(wait)) => wait,
            };
            if tokio::time::timeout_at(deadline, wait).await.is_err() {
                return Err(AdmitError::Fenced);
            }
        }
    }

    /// Fences the keys of a removal. Unless `force`, a key that may be
    /// leased is refused instead (its index is in the answer's `refused`).
    /// `None` when not leading. The fences lift when the guard is finished
    /// or dropped.
    pub fn fence_removals(self: &Arc<Self>, keys: &[(KeyHash, ObjectVersion)], force: bool) -> Option<Fenced> {
        let now = Instant::now();
        let ttl = self.kv_lease_ttl;
        let (term, refused) = self.with(|t| {
            let refused: Vec<bool> = keys
                .iter()
                .map(|(k, version)| {
                    let leased = !force && t.is_version_leased(*k, *version, now, ttl);
                    if !leased {
                        t.kv.fence(*k);
                    }
                    leased
                })
                .collect();
            (t.term, refused)
        })?;
        let fenced = keys.iter().zip(&refused).filter(|(_, r)| !**r).map(|((k, _), _)| *k).collect();
        Some(Fenced { guard: FenceGuard { leader: self.clone(), term, keys: fenced, lifted: false }, refused })
    }

    /// Fences `keys` chosen under one hold of the lock (eviction victims:
    /// picked as unleased and fenced in the same [`LeaderState::with`]);
    /// the guard lifts them.
    pub fn fenced_by(self: &Arc<Self>, term: u64, keys: Vec<KeyHash>) -> FenceGuard {
        FenceGuard { leader: self.clone(), term, keys, lifted: false }
    }
}

/// The answer of [`LeaderState::fence_removals`].
pub struct Fenced {
    pub guard: FenceGuard,
    /// Per key asked: refused because a reader may hold its lease.
    pub refused: Vec<bool>,
}

/// Keys fenced for one removal. Lift it with [`FenceGuard::lift`] once the
/// removal was applied or failed; dropping it lifts too (nothing removed).
/// Must outlive the proposal: a removal that commits after its fence lifted
/// could free an object a reader was just admitted to.
pub struct FenceGuard {
    leader: Arc<LeaderState>,
    term: u64,
    keys: Vec<KeyHash>,
    lifted: bool,
}

impl FenceGuard {
    /// The fenced keys, in the order given.
    pub fn keys(&self) -> &[KeyHash] {
        &self.keys
    }

    /// Lifts every fence; `removed(i)` says whether key `i` is now gone.
    pub fn lift(mut self, removed: impl Fn(usize) -> bool) {
        self.lift_all(removed);
    }

    /// Leaves the fences up until this term ends: for a removal whose
    /// outcome is unknown (it may still commit under the next leader).
    pub fn keep_for_the_term(mut self) {
        self.lifted = true;
    }

    fn lift_all(&mut self, removed: impl Fn(usize) -> bool) {
        if self.lifted {
            return;
        }
        self.lifted = true;
        let (term, keys) = (self.term, std::mem::take(&mut self.keys));
        // Another term's soft state never held these fences (and waking its
        // readers happened when this term's state was dropped).
        self.leader.with(|t| {
            if t.term == term {
                for (i, k) in keys.iter().enumerate() {
                    t.kv.lift(*k, removed(i));
                }
            }
        });
    }
}

impl Drop for FenceGuard {
    fn drop(&mut self) {
        self.lift_all(|_| false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_millis(100);
    /// The version of the objects the removal tests remove.
    const V: ObjectVersion = ObjectVersion(1);

    fn k(s: &str) -> KeyHash {
        KeyHash::of(s)
    }

    #[test]
    fn a_new_leader_treats_everything_that_existed_as_leased_for_one_ttl() {
        let t0 = Instant::now();
        let mut t = TermState::new(3, t0, false);
        let (old, new) = (ObjectVersion(4), ObjectVersion(5));
        assert!(t.is_version_leased(k("k"), new, t0 + TTL / 2, TTL), "no bound yet: every version");
        t.note_applied(Some(2), ObjectVersion(1));
        assert!(t.is_version_leased(k("k"), new, t0 + TTL / 2, TTL), "an earlier term's entry bounds nothing");
        t.note_applied(Some(3), new);
        assert!(t.is_version_leased(k("k"), old, t0 + TTL / 2, TTL));
        assert!(!t.is_version_leased(k("k"), new, t0 + TTL / 2, TTL), "committed after the bound");
        t.note_applied(Some(3), ObjectVersion(9));
        assert!(!t.is_version_leased(k("k"), ObjectVersion(8), t0 + TTL / 2, TTL), "the first bound holds");
        assert!(!t.is_version_leased(k("k"), old, t0 + TTL * 2, TTL));
        assert!(t.kv.admit_readers(&[k("k")], t0 + TTL * 2, TTL).is_ok());
        assert!(t.is_version_leased(k("k"), old, t0 + TTL * 2 + TTL / 2, TTL));
        assert!(!t.is_version_leased(k("k"), old, t0 + TTL * 4, TTL));
    }

    #[test]
    fn a_new_term_forgets_the_old_soft_state() {
        let t0 = Instant::now();
        let s = LeaderState::new(TTL);
        s.observe(Some(1), t0);
        s.heartbeat(ClientId(7), t0 + TTL * 3);
        let seen = s.with(|t| t.last_heartbeat(ClientId(7))).unwrap();
        assert_eq!(seen, t0 + TTL * 3);
        s.observe(Some(1), t0 + TTL * 4);
        assert_eq!(s.with(|t| t.last_heartbeat(ClientId(7))).unwrap(), t0 + TTL * 3, "same term keeps state");
        s.observe(None, t0 + TTL * 5);
        assert!(s.with(|_| ()).is_none());
        s.observe(Some(2), t0 + TTL * 6);
        assert_eq!(s.with(|t| t.last_heartbeat(ClientId(7))).unwrap(), t0 + TTL * 6, "election counts as seen");
    }

    #[test]
    fn a_stall_of_the_leader_restarts_every_clients_ttl() {
        let t0 = Instant::now();
        let s = LeaderState::new(TTL);
        s.observe(Some(1), t0);
        s.heartbeat(ClientId(7), t0 + TTL);
        // Paused for three TTLs: the client was not heard, but could not be.
        let resumed = t0 + TTL * 4;
        let clients = [ClientId(7), ClientId(8)];
        let expired = s.with(|t| crate::leader::decisions::expired_clients(&clients, t, resumed, TTL)).unwrap();
        assert_eq!(expired, clients.to_vec(), "without the stall noted, both would expire");
        s.with(|t| t.restart_hearing(resumed));
        let expired = s.with(|t| crate::leader::decisions::expired_clients(&clients, t, resumed, TTL)).unwrap();
        assert!(expired.is_empty(), "{expired:?}");
        // A full TTL of hearing nothing after the stall is evidence again.
        let later = resumed + TTL + Duration::from_millis(1);
        let expired = s.with(|t| crate::leader::decisions::expired_clients(&clients, t, later, TTL)).unwrap();
        assert_eq!(expired, clients.to_vec());
        s.heartbeat(ClientId(8), later);
        let expired = s.with(|t| crate::leader::decisions::expired_clients(&clients, t, later, TTL)).unwrap();
        assert_eq!(expired, vec![ClientId(7)]);
    }

    #[test]
    fn a_removal_is_refused_on_a_leased_key_unless_forced_and_fences_the_others() {
        let s = Arc::new(LeaderState::new(TTL));
        // Elected long enough ago that the post-election grace is over.
        s.observe(Some(1), Instant::now() - TTL * 2);
        assert_eq!(s.with(|t| t.kv.admit_readers(&[k("leased")], Instant::now(), TTL).is_ok()), Some(true));
        let f = s.fence_removals(&[(k("free"), V), (k("leased"), V)], false).unwrap();
        assert_eq!(f.refused, vec![false, true]);
        assert_eq!(f.guard.keys(), &[k("free")]);
        assert!(s.with(|t| t.kv.is_fenced(k("free"))).unwrap());
        f.guard.lift(|_| true);
        assert!(!s.with(|t| t.kv.is_fenced(k("free"))).unwrap());
        let forced = s.fence_removals(&[(k("leased"), V)], true).unwrap();
        assert_eq!(forced.refused, vec![false]);
        drop(forced);
        assert!(!s.with(|t| t.kv.is_fenced(k("leased"))).unwrap(), "dropping the guard lifts the fence");
    }

    /// A leader past its election grace with a removal of "a" in flight,
    /// and a reader of "a" that has started waiting.
    async fn reader_behind_a_fence() -> (Arc<LeaderState>, Fenced, tokio::task::JoinHandle<Result<(), AdmitError>>) {
        let s = Arc::new(LeaderState::new(TTL));
        s.observe(Some(1), Instant::now() - TTL * 2);
        let fenced = s.fence_removals(&[(k("a"), V)], false).unwrap();
        let reader = {
            let s = s.clone();
            tokio::spawn(async move { s.admit_readers(&[k("a")]).await })
        };
        tokio::task::yield_now().await;
        (s, fenced, reader)
    }

    #[tokio::test]
    async fn a_reader_waits_for_a_removal_in_flight_and_is_admitted_after_it() {
        let (s, fenced, reader) = reader_behind_a_fence().await;
        assert!(!reader.is_finished(), "admitted while the removal was in flight");
        fenced.guard.lift(|_| true);
        assert_eq!(reader.await.unwrap(), Ok(()));
        assert!(s.with(|t| t.kv.is_leased(k("a"), Instant::now())).unwrap());
    }

    #[tokio::test]
    async fn a_reader_waiting_on_a_fence_learns_when_the_term_ends() {
        let (s, fenced, reader) = reader_behind_a_fence().await;
        s.observe(None, Instant::now());
        assert_eq!(reader.await.unwrap(), Err(AdmitError::NotLeading));
        drop(fenced); // lifting into a term that is gone changes nothing
        s.observe(Some(2), Instant::now());
        assert!(!s.with(|t| t.kv.is_fenced(k("a"))).unwrap());
    }
}
