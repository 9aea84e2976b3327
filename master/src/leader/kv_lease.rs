//! KV leases: Mooncake's per-object promise to readers. A read answered OK
//! (GetReplicaList, ExistKey and their batches) carries a KV lease: until it
//! expires, no Remove (unless forced), RemoveAll (unless forced) or eviction
//! frees that object, so the reader can copy the bytes from the ranges it was
//! given. (Not to be confused with the *leader lease* of `leader_lease.rs`,
//! which lets the leader serve reads without a quorum round.)
//!
//! Two halves meet here, both under the leader's soft-state lock:
//! - **Readers are admitted** before their linearizable read: every key that
//!   may be answered OK is leased first, unless a removal of it is in flight
//!   (a *fence*): then the reader waits for the fence to lift and tries again.
//! - **Removals fence** the keys they are about to free, after checking they
//!   are not leased; the fence lifts only once the removal has been applied
//!   (or has failed). A removal that finds a lease is refused.
//!
//! Whichever comes first wins: a lease granted first makes the removal see it
//! and refuse; a fence installed first makes the reader wait until the state
//! it reads no longer holds the object. Either way no read answered OK is
//! followed by the freeing of its object inside the lease.
//!
//! Keys are held as 64-bit hashes: a collision can only make a key look
//! leased or fenced when it is not (a spurious OBJECT_HAS_LEASE or a short
//! wait), never the opposite, and it keeps the maps free of key copies.
//! Pure bookkeeping: no clock (callers pass `now`), no I/O.

use std::collections::HashMap;
use std::collections::hash_map::{DefaultHasher, Entry};
use std::hash::Hasher;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

/// A key as the lease maps know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyHash(u64);

impl KeyHash {
    pub fn of(key: &str) -> KeyHash {
        // Fixed keys (unlike RandomState): a key hashes the same in every map.
        let mut h = DefaultHasher::new();
        h.write(key.as_bytes());
        KeyHash(h.finish())
    }
}

/// How long a key's last use (read or write) is remembered for eviction
/// order after its lease expired. Older uses count as "not used by this
/// leader" (evicted first, oldest commit first), which keeps the map bounded
/// by the keys used in this window.
pub const ACCESS_HORIZON: Duration = Duration::from_secs(3600);

/// What this leader saw of one key: the end of its latest KV lease (none
/// for a key only written) and its latest use, a read or a commit.
#[derive(Clone, Copy, Debug)]
struct Seen {
    leased_until: Option<Instant>,
    used: Instant,
}

impl Seen {
    /// The last moment this record matters: its lease's end or its use.
    fn last(&self) -> Instant {
        self.leased_until.map_or(self.used, |u| u.max(self.used))
    }
}

/// A removal in flight on one key.
struct Fence {
    removals: u32,
    lifted: Arc<Notify>,
}

/// Resolves when the fence a reader ran into has lifted (or its term ended).
pub type FenceWait = Pin<Box<OwnedNotified>>;

/// The KV leases and removal fences of one leadership term.
#[derive(Default)]
pub struct KvLeases {
    /// `--dev-unsafe-unfenced-removals`: removals check leases but fence
    /// nothing (the race this module closes, kept so the chaos harness and
    /// the stress test can prove they catch it).
    unsafe_unfenced: bool,
    /// Key → its lease and last use. Kept after the lease expired (until
    /// [`ACCESS_HORIZON`]) as the key's recency, for eviction order.
    seen: HashMap<KeyHash, Seen>,
    fences: HashMap<KeyHash, Fence>,
}

impl KvLeases {
    /// Leases and fences as described above; `unsafe_unfenced` only for the
    /// deliberately broken build.
    pub fn new(unsafe_unfenced: bool) -> Self {
        KvLeases { unsafe_unfenced, seen: HashMap::new(), fences: HashMap::new() }
    }

    /// Leases every key of `keys` until `now + ttl`, or — when a removal of
    /// one of them is in flight — leases none and returns what to wait for.
    pub fn admit_readers(&mut self, keys: &[KeyHash], now: Instant, ttl: Duration) -> Result<(), FenceWait> {
        if let Some(fence) = keys.iter().find_map(|k| self.fences.get(k)) {
            // Enabled before the soft-state lock is released: a lift that
            // happens after this point wakes it.
            let mut wait = Box::pin(fence.lifted.clone().notified_owned());
            wait.as_mut().enable();
            return Err(wait);
        }
        let until = now + ttl;
        for k in keys {
            let e = self.seen.entry(*k).or_insert(Seen { leased_until: None, used: now });
            e.leased_until = Some(e.leased_until.map_or(until, |u| u.max(until)));
            e.used = e.used.max(now);
        }
        Ok(())
    }

    /// `keys` were written (their puts committed) at `now`: as recent as a
    /// read for eviction order, but not leased (as upstream's PutEnd, whose
    /// lease is 0: a fresh object may be evicted at once when it is the
    /// least recently used).
    pub fn note_writes(&mut self, keys: &[KeyHash], now: Instant) {
        for k in keys {
            let e = self.seen.entry(*k).or_insert(Seen { leased_until: None, used: now });
            e.used = e.used.max(now);
        }
    }

    /// Whether `key` holds an unexpired lease at `now`.
    pub fn is_leased(&self, key: KeyHash, now: Instant) -> bool {
        self.seen.get(&key).and_then(|s| s.leased_until).is_some_and(|until| now < until)
    }

    /// Whether a removal of `key` is in flight.
    pub fn is_fenced(&self, key: KeyHash) -> bool {
        self.fences.contains_key(&key)
    }

    /// The last time `key` was read (leased to a reader) or written, if
    /// this leader saw it within [`ACCESS_HORIZON`].
    pub fn last_used(&self, key: KeyHash) -> Option<Instant> {
        self.seen.get(&key).map(|s| s.used)
    }

    /// Fences `key`: readers wait until [`KvLeases::lift`] is called as
    /// often as `fence` was. The caller has checked the lease.
    pub fn fence(&mut self, key: KeyHash) {
        if self.unsafe_unfenced {
            return; // deliberately broken build: readers never wait
        }
        self.fences.entry(key).or_insert_with(|| Fence { removals: 0, lifted: Arc::new(Notify::new()) }).removals += 1;
    }

    /// Ends one removal on `key`; `removed` says the key is gone, so its
    /// read record can go too. Wakes the waiting readers when the last
    /// removal on the key ends.
    pub fn lift(&mut self, key: KeyHash, removed: bool) {
        if let Entry::Occupied(mut e) = self.fences.entry(key) {
            e.get_mut().removals -= 1;
            if e.get().removals == 0 {
                e.remove().lifted.notify_waiters();
            }
        }
        if removed {
            self.seen.remove(&key);
        }
    }

    /// Forgets uses older than [`ACCESS_HORIZON`] (their leases long expired).
    pub fn prune(&mut self, now: Instant) {
        self.seen.retain(|_, s| now.saturating_duration_since(s.last()) < ACCESS_HORIZON);
    }

    /// Keys whose lease has not expired at `now`.
    pub fn lease_count(&self, now: Instant) -> usize {
        self.seen.values().filter(|s| s.leased_until.is_some_and(|u| now < u)).count()
    }

    /// Keys with a removal in flight.
    pub fn fence_count(&self) -> usize {
        self.fences.len()
    }
}

impl Drop for KvLeases {
    /// The term ended: readers waiting on its fences must not wait forever
    /// (they retry, and find this master no longer leads).
    fn drop(&mut self) {
        for fence in self.fences.values() {
            fence.lifted.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll, Waker};

    const TTL: Duration = Duration::from_millis(100);

    fn k(s: &str) -> KeyHash {
        KeyHash::of(s)
    }

    /// Admits readers of `keys`, which must not be fenced.
    fn admit(l: &mut KvLeases, keys: &[KeyHash], now: Instant) {
        assert!(l.admit_readers(keys, now, TTL).is_ok(), "a key of {keys:?} was fenced");
    }

    /// Tries to admit readers of `keys`, which must be fenced: what to wait for.
    fn must_wait(l: &mut KvLeases, keys: &[KeyHash], now: Instant) -> FenceWait {
        match l.admit_readers(keys, now, TTL) {
            Ok(()) => panic!("admitted readers of {keys:?} although a removal was in flight"),
            Err(wait) => wait,
        }
    }

    fn ready(w: &mut FenceWait) -> bool {
        matches!(w.as_mut().poll(&mut Context::from_waker(Waker::noop())), Poll::Ready(()))
    }

    #[test]
    fn a_read_leases_its_keys_for_one_ttl() {
        let t0 = Instant::now();
        let mut l = KvLeases::default();
        admit(&mut l, &[k("a"), k("b")], t0);
        assert!(l.is_leased(k("a"), t0 + TTL / 2) && l.is_leased(k("b"), t0));
        assert!(!l.is_leased(k("a"), t0 + TTL), "the lease ends after one ttl");
        assert!(!l.is_leased(k("c"), t0));
        assert_eq!(l.last_used(k("a")), Some(t0));
    }

    #[test]
    fn a_write_is_a_use_but_no_lease() {
        let t0 = Instant::now();
        let mut l = KvLeases::default();
        l.note_writes(&[k("w")], t0 + TTL);
        assert!(!l.is_leased(k("w"), t0 + TTL), "a put leases nothing");
        assert_eq!(l.last_used(k("w")), Some(t0 + TTL));
        admit(&mut l, &[k("w")], t0);
        assert_eq!(l.last_used(k("w")), Some(t0 + TTL), "an earlier read does not make it older");
        assert!(l.is_leased(k("w"), t0 + TTL / 2), "but it leases");
        l.note_writes(&[k("w")], t0 + 2 * TTL);
        assert_eq!(l.last_used(k("w")), Some(t0 + 2 * TTL));
        assert!(!l.is_leased(k("w"), t0 + 2 * TTL));
    }

    #[test]
    fn a_later_read_extends_and_never_shortens_a_lease() {
        let t0 = Instant::now();
        let mut l = KvLeases::default();
        admit(&mut l, &[k("a")], t0 + TTL);
        admit(&mut l, &[k("a")], t0);
        assert!(l.is_leased(k("a"), t0 + TTL + TTL / 2));
    }

    #[test]
    fn a_fenced_key_admits_no_reader_until_the_removal_ends() {
        let t0 = Instant::now();
        let mut l = KvLeases::default();
        l.fence(k("a"));
        let mut wait = must_wait(&mut l, &[k("b"), k("a")], t0);
        assert!(!l.is_leased(k("b"), t0), "nothing of a refused batch is leased");
        assert!(!ready(&mut wait));
        l.lift(k("a"), true);
        assert!(ready(&mut wait), "the lift wakes the reader");
        admit(&mut l, &[k("b"), k("a")], t0);
    }

    #[test]
    fn two_removals_on_one_key_lift_the_fence_only_when_both_end() {
        let t0 = Instant::now();
        let mut l = KvLeases::default();
        l.fence(k("a"));
        l.fence(k("a"));
        l.lift(k("a"), false);
        assert!(l.is_fenced(k("a")));
        let mut wait = must_wait(&mut l, &[k("a")], t0);
        l.lift(k("a"), false);
        assert!(ready(&mut wait));
        assert_eq!(l.fence_count(), 0);
    }

    #[test]
    fn a_removed_key_forgets_its_reads_and_old_reads_are_pruned() {
        let t0 = Instant::now();
        let mut l = KvLeases::default();
        admit(&mut l, &[k("a"), k("b")], t0);
        l.fence(k("a"));
        l.lift(k("a"), true);
        assert_eq!(l.last_used(k("a")), None);
        l.prune(t0 + TTL + ACCESS_HORIZON / 2);
        assert!(l.last_used(k("b")).is_some());
        l.prune(t0 + TTL + ACCESS_HORIZON);
        assert_eq!(l.last_used(k("b")), None);
    }

    #[test]
    fn the_end_of_a_term_wakes_every_waiting_reader() {
        let t0 = Instant::now();
        let mut l = KvLeases::default();
        l.fence(k("a"));
        let mut wait = must_wait(&mut l, &[k("a")], t0);
        drop(l);
        assert!(ready(&mut wait));
    }
}
