//! Leader-local soft state: read leases, client heartbeats, access recency,
//! and when this leader first saw each unfinished or discarded put. None of it
//! is replicated. A new leader starts empty and is conservative instead: for
//! one lease TTL after its election every object counts as leased, and every
//! known client counts as seen at the election.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mooncake_raft_store::ObjectVersion;
use mooncake_segment::ClientId;

/// Soft state of one leadership term.
#[derive(Debug)]
pub struct TermState {
    pub term: u64,
    pub elected_at: Instant,
    leases: HashMap<String, Instant>,
    heartbeats: HashMap<ClientId, Instant>,
    access: HashMap<String, Instant>,
    first_seen: HashMap<ObjectVersion, Instant>,
}

impl TermState {
    fn new(term: u64, now: Instant) -> Self {
        TermState {
            term,
            elected_at: now,
            leases: HashMap::new(),
            heartbeats: HashMap::new(),
            access: HashMap::new(),
            first_seen: HashMap::new(),
        }
    }

    /// Whether `key` may have a reader in flight at `now`.
    pub fn is_leased(&self, key: &str, now: Instant, lease_ttl: Duration) -> bool {
        now < self.elected_at + lease_ttl || self.leases.get(key).is_some_and(|exp| now < *exp)
    }

    /// When `client` was last heard from (the election counts as a heartbeat).
    pub fn last_heartbeat(&self, client: ClientId) -> Instant {
        self.heartbeats.get(&client).copied().unwrap_or(self.elected_at).max(self.elected_at)
    }

    /// Last read of `key` seen by this leader, if any.
    pub fn last_access(&self, key: &str) -> Option<Instant> {
        self.access.get(key).copied()
    }

    /// When this leader first saw `version` in its current condition; records `now` on first call.
    pub fn first_seen(&mut self, version: ObjectVersion, now: Instant) -> Instant {
        *self.first_seen.entry(version).or_insert(now)
    }

    /// Read leases currently recorded (some may have expired since the last prune).
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// Drops entries that can no longer matter: expired leases, first-seen
    /// times of versions that are gone, access times of keys that are gone.
    pub fn prune(&mut self, now: Instant, live: impl Fn(ObjectVersion) -> bool, live_key: impl Fn(&str) -> bool) {
        self.leases.retain(|_, exp| *exp > now);
        self.first_seen.retain(|v, _| live(*v));
        self.access.retain(|k, _| live_key(k));
    }
}

/// The soft state of the current term, if this master leads.
pub struct LeaderState {
    lease_ttl: Duration,
    inner: Mutex<Option<TermState>>,
}

impl LeaderState {
    pub fn new(lease_ttl: Duration) -> Self {
        LeaderState { lease_ttl, inner: Mutex::new(None) }
    }

    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<TermState>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called on every metrics change: starts fresh soft state when this node
    /// becomes leader of a new term, drops it when it stops leading.
    pub fn observe(&self, leading_term: Option<u64>, now: Instant) {
        let mut guard = self.lock();
        match leading_term {
            Some(term) if guard.as_ref().map(|t| t.term) != Some(term) => {
                *guard = Some(TermState::new(term, now));
            }
            Some(_) => {}
            None => *guard = None,
        }
    }

    /// Runs `f` on the term's soft state; `None` when not leading.
    pub fn with<R>(&self, f: impl FnOnce(&mut TermState) -> R) -> Option<R> {
        self.lock().as_mut().map(f)
    }

    /// Grants or extends the read lease on `key` and records the access.
    pub fn grant_lease(&self, key: &str, now: Instant) {
        let ttl = self.lease_ttl;
        self.with(|t| {
            t.leases.insert(key.to_string(), now + ttl);
            t.access.insert(key.to_string(), now);
        });
    }

    /// Whether `key` is (or may be) leased. Not leading counts as leased: a
    /// master that is not sure must not free what a reader may hold.
    pub fn is_leased(&self, key: &str, now: Instant) -> bool {
        let ttl = self.lease_ttl;
        self.with(|t| t.is_leased(key, now, ttl)).unwrap_or(true)
    }

    /// Records a client heartbeat.
    pub fn heartbeat(&self, client: ClientId, now: Instant) {
        self.with(|t| {
            t.heartbeats.insert(client, now);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_millis(100);

    #[test]
    fn a_new_leader_treats_everything_as_leased_for_one_ttl() {
        let t0 = Instant::now();
        let s = LeaderState::new(TTL);
        assert!(s.is_leased("k", t0), "not leading counts as leased");
        s.observe(Some(3), t0);
        assert!(s.is_leased("k", t0 + TTL / 2));
        assert!(!s.is_leased("k", t0 + TTL * 2));
        s.grant_lease("k", t0 + TTL * 2);
        assert!(s.is_leased("k", t0 + TTL * 2 + TTL / 2));
        assert!(!s.is_leased("k", t0 + TTL * 4));
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
}
