//! The leader's pure decisions (client expiry, eviction, release of
//! objects replaced by upserts) over a state machine built by applying
//! commands, and the leader-local soft state they read. Time is passed in explicitly: no sleeps.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mooncake_master::leader::LeaderState;
use mooncake_master::leader::decisions::{
    EvictionPolicy, choose_victims, eviction_candidates, eviction_target, expired_clients, retired_to_release,
};
use mooncake_master::leader::kv_lease::KeyHash;
use mooncake_raft_store::testing::{apply_next, mount_cmd, put_object, remount_cmd, segment};
use mooncake_raft_store::{Command, MetaState, ObjectVersion, Pin, RemoveReason, Response, VersionedKey};
use mooncake_segment::ClientId;

// ---------------------------------------------------------------- builders

/// Lease TTL of the leader under test.
const LEASE_TTL: Duration = Duration::from_secs(1);
const SEC: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

const W1: ClientId = ClientId(1);
const NODE_A: ClientId = ClientId(101);
const NODE_B: ClientId = ClientId(102);

/// Page-sized units (segments are whole pages; allocations 64-byte aligned):
/// object sizes below are whole units so used bytes are exact.
const UNIT: u64 = 4096;

/// Applies `cmd` one millisecond of state time after the last one.
fn apply(state: &mut MetaState, cmd: Command) -> Response {
    apply_next(state, cmd)
}

fn ok(state: &mut MetaState, cmd: Command) {
    let shown = format!("{cmd:?}");
    assert_eq!(apply(state, cmd), Response::Ok, "{shown}");
}

/// An object put as the master puts it, `units` allocation units per
/// replica.
fn complete(state: &mut MetaState, key: &str, units: u64, replicas: u32, pin: Pin) -> ObjectVersion {
    put_object(state, W1, key, units * UNIT, replicas, pin, false)
}

/// One segment of `units` allocation units, owned by NODE_A.
fn one_segment(units: u64) -> MetaState {
    let mut s = MetaState::default();
    ok(&mut s, mount_cmd(NODE_A, segment(1, units * UNIT, "host-a")));
    s
}

/// A leader elected (term 1) at `at`.
fn leader_elected_at(at: Instant) -> LeaderState {
    let l = LeaderState::new(LEASE_TTL);
    l.observe(Some(1), at);
    l
}

fn policy(high_watermark_ratio: f64, eviction_ratio: f64) -> EvictionPolicy {
    EvictionPolicy { high_watermark_ratio, eviction_ratio, kv_lease_ttl: LEASE_TTL }
}

fn keys(victims: &[VersionedKey]) -> Vec<&str> {
    victims.iter().map(|v| v.key.as_str()).collect()
}

/// A KV lease on `key` granted at `at` (a reader admitted then).
fn grant(leader: &LeaderState, key: &str, at: Instant) {
    let admitted = leader.with(|t| t.kv.admit_readers(&[KeyHash::of(key)], at, LEASE_TTL).is_ok());
    assert_eq!(admitted, Some(true), "leading, and no removal of {key} in flight");
}

/// Whether usage is above the watermark: a round has something to free.
fn over_watermark(state: &MetaState, p: &EvictionPolicy) -> bool {
    eviction_target(state.used_bytes(), state.capacity_bytes(), p, 0) > 0
}

/// Eviction victims as the leader would decide them at `now`: candidates
/// read from the state first, then filtered and ranked on the soft state.
fn victims(state: &MetaState, leader: &LeaderState, now: Instant, p: &EvictionPolicy) -> Vec<VersionedKey> {
    victims_at(state, leader, now, state.now_ms(), p)
}

/// [`victims`] with the leader's wall clock at `wall_ms`.
fn victims_at(
    state: &MetaState,
    leader: &LeaderState,
    now: Instant,
    wall_ms: u64,
    p: &EvictionPolicy,
) -> Vec<VersionedKey> {
    let target = eviction_target(state.used_bytes(), state.capacity_bytes(), p, 0);
    let candidates = eviction_candidates(state, mooncake_raft_store::Tier::Dram);
    let chosen = leader.with(|t| choose_victims(candidates, t, now, wall_ms, LEASE_TTL, target)).expect("leading");
    chosen.into_iter().map(|c| c.object).collect()
}

fn expired(state: &MetaState, leader: &LeaderState, now: Instant, ttl: Duration) -> Vec<ClientId> {
    let clients: Vec<ClientId> = state.clients().map(|c| c.id).collect();
    leader.with(|t| expired_clients(&clients, t, now, ttl)).expect("leading")
}

fn to_release(state: &MetaState, leader: &LeaderState, now: Instant, after: Duration) -> Vec<ObjectVersion> {
    let retired: Vec<ObjectVersion> = state.retired().map(|r| r.version).collect();
    leader.with(|t| retired_to_release(&retired, t, now, after)).expect("leading")
}

/// Bytes an object's replicas hold.
fn held(state: &MetaState, key: &str) -> u64 {
    state.object(key).unwrap().replicas.iter().map(|r| r.range.len).sum()
}

// ================================================================ watermark

#[test]
fn over_watermark_is_false_without_capacity_and_true_only_strictly_above_the_ratio() {
    let p = policy(0.9, 0.1);
    assert!(!over_watermark(&MetaState::default(), &p), "no capacity is never over the watermark");
    let mut s = one_segment(100);
    complete(&mut s, "ninety", 90, 1, Pin::None);
    assert_eq!(s.used_bytes(), 90 * UNIT);
    assert!(!over_watermark(&s, &p), "exactly at the watermark is not over it");
    complete(&mut s, "one-more", 1, 1, Pin::None);
    assert!(over_watermark(&s, &p));
}

// ================================================================ eviction

#[test]
fn a_round_frees_enough_to_get_under_the_watermark_and_at_least_the_ratio_or_what_a_put_needs() {
    let p = policy(0.9, 0.05);
    let cap = 1000 * UNIT;
    assert_eq!(eviction_target(900 * UNIT, cap, &p, 0), 0, "at the watermark nothing is due");
    assert_eq!(eviction_target(901 * UNIT, cap, &p, 0), (901 * UNIT * 5).div_ceil(100), "the ratio of used bytes");
    assert_eq!(eviction_target(990 * UNIT, cap, &p, 0), 90 * UNIT, "back under the watermark");
    assert_eq!(eviction_target(100 * UNIT, cap, &p, 7 * UNIT), 7 * UNIT, "a put that found no room");
    assert_eq!(eviction_target(990 * UNIT, cap, &p, 7 * UNIT), 90 * UNIT);
    assert_eq!(eviction_target(0, 0, &p, 0), 0);
}

#[test]
fn nothing_is_evicted_under_the_high_watermark() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    for i in 0..5 {
        complete(&mut s, &format!("k{i}"), 10, 1, Pin::None);
    }
    let late = t0 + 100 * SEC;
    assert!(victims(&s, &leader, late, &policy(0.9, 0.5)).is_empty());
    // The same state above a lower watermark does evict: the check is real.
    assert!(!victims(&s, &leader, late, &policy(0.4, 0.5)).is_empty());
}

#[test]
fn only_objects_whose_lease_has_expired_are_evicted() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    complete(&mut s, "filler", 40, 1, Pin::Hard);
    complete(&mut s, "leased", 20, 1, Pin::None);
    complete(&mut s, "expired-lease", 20, 1, Pin::None);
    complete(&mut s, "never-leased", 10, 1, Pin::None);
    let now = t0 + 10 * SEC;
    grant(&leader, "expired-lease", now - 2 * LEASE_TTL);
    grant(&leader, "leased", now - LEASE_TTL / 2);
    let chosen = victims(&s, &leader, now, &policy(0.5, 1.0));
    let mut chosen = keys(&chosen);
    chosen.sort();
    assert_eq!(chosen, vec!["expired-lease", "never-leased"]);
    // Once that lease runs out the object is a candidate too.
    let chosen = victims(&s, &leader, now + LEASE_TTL, &policy(0.5, 1.0));
    assert!(keys(&chosen).contains(&"leased"));
}

#[test]
fn hard_pinned_objects_are_never_evicted() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    complete(&mut s, "hard", 50, 1, Pin::Hard);
    complete(&mut s, "soft", 20, 1, Pin::Soft);
    complete(&mut s, "none", 20, 1, Pin::None);
    let chosen = victims(&s, &leader, t0 + 10 * SEC, &policy(0.5, 1.0));
    assert_eq!(keys(&chosen), vec!["none", "soft"], "everything but the hard pin, unpinned first");
    // Even when hard-pinned objects are all there is.
    let mut s = one_segment(100);
    complete(&mut s, "hard", 95, 1, Pin::Hard);
    assert!(victims(&s, &leader, t0 + 10 * SEC, &policy(0.5, 1.0)).is_empty());
}

#[test]
fn unpinned_objects_go_before_soft_pinned_ones_even_when_newer() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    complete(&mut s, "soft-old", 30, 1, Pin::Soft);
    complete(&mut s, "soft-older-read", 10, 1, Pin::Soft);
    complete(&mut s, "none-new", 30, 1, Pin::None);
    complete(&mut s, "none-newest", 20, 1, Pin::None);
    let now = t0 + 10 * SEC;
    // One small eviction: the first unpinned object, not the oldest soft one.
    let chosen = victims(&s, &leader, now, &policy(0.89, 0.01));
    assert_eq!(keys(&chosen), vec!["none-new"]);
    let chosen = victims(&s, &leader, now, &policy(0.5, 1.0));
    assert_eq!(keys(&chosen), vec!["none-new", "none-newest", "soft-old", "soft-older-read"]);
}

#[test]
fn a_soft_pin_with_a_ttl_lapses_on_the_wall_clock_from_completion() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    complete(&mut s, "soft-for-1s", 45, 1, Pin::SoftFor { ttl_ms: 1000 });
    let completed = s.object("soft-for-1s").unwrap().committed_ms;
    complete(&mut s, "none", 45, 1, Pin::None);
    let p = policy(0.89, 0.01);
    // Within its TTL the pinned object waits for the unpinned one...
    assert_eq!(keys(&victims_at(&s, &leader, t0 + 10 * SEC, completed + 999, &p)), vec!["none"]);
    // ...after it, it is an ordinary object again, the older one first.
    assert_eq!(keys(&victims_at(&s, &leader, t0 + 10 * SEC, completed + 1000, &p)), vec!["soft-for-1s"]);
}

#[test]
fn never_read_objects_go_before_read_ones_and_the_least_recently_read_first() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    for key in ["a", "b", "c", "d"] {
        complete(&mut s, key, 20, 1, Pin::None);
    }
    // a (the oldest) and c were read, c before a; both leases are long over.
    grant(&leader, "c", t0 + 2 * SEC);
    grant(&leader, "a", t0 + 3 * SEC);
    let chosen = victims(&s, &leader, t0 + 10 * SEC, &policy(0.5, 1.0));
    assert_eq!(keys(&chosen), vec!["b", "d", "c", "a"]);
}

#[test]
fn a_put_counts_as_a_use_as_a_read_does() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    for key in ["read-early", "written-late", "read-late"] {
        complete(&mut s, key, 20, 1, Pin::None);
    }
    complete(&mut s, "unused", 20, 1, Pin::None);
    // The leader saw "written-late" committed after "read-early" was read:
    // it is the more recently used (an LRU), whatever its commit order.
    grant(&leader, "read-early", t0 + 2 * SEC);
    leader.with(|t| t.kv.note_writes(&[KeyHash::of("written-late")], t0 + 3 * SEC)).expect("leading");
    grant(&leader, "read-late", t0 + 4 * SEC);
    let chosen = victims(&s, &leader, t0 + 10 * SEC, &policy(0.5, 1.0));
    assert_eq!(keys(&chosen), vec!["unused", "read-early", "written-late", "read-late"]);
    // A put leases nothing: a fresh object is evictable when least recently used.
    leader.with(|t| t.kv.note_writes(&[KeyHash::of("unused")], t0 + 10 * SEC)).expect("leading");
    let chosen = victims(&s, &leader, t0 + 10 * SEC, &policy(0.5, 1.0));
    assert_eq!(keys(&chosen), vec!["read-early", "written-late", "read-late", "unused"]);
}

#[test]
fn older_objects_go_before_newer_ones() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    // Created in reverse key order, so key order cannot pass for age order.
    for key in ["e", "d", "c", "b", "a"] {
        complete(&mut s, key, 15, 1, Pin::None);
    }
    let chosen = victims(&s, &leader, t0 + 10 * SEC, &policy(0.5, 1.0));
    assert_eq!(keys(&chosen), vec!["e", "d", "c", "b", "a"]);
    let chosen = victims(&s, &leader, t0 + 10 * SEC, &policy(0.5, 0.3));
    assert_eq!(keys(&chosen), vec!["e", "d"]);
}

#[test]
fn eviction_stops_once_about_the_eviction_ratio_of_used_bytes_is_freed() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    for i in 0..10 {
        complete(&mut s, &format!("k{i}"), 10, 1, Pin::None);
    }
    let used = s.used_bytes();
    assert_eq!(used, 100 * UNIT);
    let now = t0 + 10 * SEC;
    for (ratio, expect) in [(0.3, 3), (0.25, 3), (0.05, 1), (0.31, 4), (1.0, 10)] {
        let chosen = victims(&s, &leader, now, &policy(0.9, ratio));
        assert_eq!(chosen.len(), expect, "eviction ratio {ratio}");
        let target = (used as f64 * ratio).ceil() as u64;
        let freed: u64 = chosen.iter().map(|v| held(&s, &v.key)).sum();
        let last = held(&s, &chosen.last().unwrap().key);
        assert!(freed >= target, "ratio {ratio}: freed {freed} < target {target}");
        assert!(freed - last < target, "ratio {ratio}: evicted more than needed");
    }
}

#[test]
fn eviction_counts_the_bytes_of_every_replica() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = MetaState::default();
    ok(&mut s, mount_cmd(NODE_A, segment(1, 40 * UNIT, "host-a")));
    ok(&mut s, mount_cmd(NODE_B, segment(2, 40 * UNIT, "host-b")));
    complete(&mut s, "x", 10, 2, Pin::None);
    complete(&mut s, "y", 10, 2, Pin::None);
    assert_eq!(held(&s, "x"), 20 * UNIT);
    // Half of the 40 used units is exactly x's two replicas (and more than
    // the 4 units above the watermark).
    let chosen = victims(&s, &leader, t0 + 10 * SEC, &policy(0.45, 0.5));
    assert_eq!(keys(&chosen), vec!["x"]);
}

#[test]
fn a_new_leader_evicts_nothing_within_one_lease_ttl_of_its_election() {
    let t0 = Instant::now();
    let mut s = one_segment(100);
    for i in 0..9 {
        complete(&mut s, &format!("k{i}"), 10, 1, Pin::None);
    }
    let p = policy(0.5, 0.5);
    let elected = t0 + 100 * SEC;
    let leader = leader_elected_at(elected);
    assert!(victims(&s, &leader, elected, &p).is_empty());
    assert!(victims(&s, &leader, elected + LEASE_TTL / 2, &p).is_empty());
    assert!(victims(&s, &leader, elected + LEASE_TTL - MS, &p).is_empty());
    assert!(!victims(&s, &leader, elected + LEASE_TTL, &p).is_empty(), "one TTL after election it may evict");
    // Another election starts the grace period again.
    let reelected = elected + 10 * SEC;
    leader.observe(Some(2), reelected);
    assert!(victims(&s, &leader, reelected + LEASE_TTL / 2, &p).is_empty());
    // And a master that does not lead decides nothing.
    leader.observe(None, reelected + 20 * SEC);
    assert!(leader.with(|_| ()).is_none());
}

#[test]
fn the_election_grace_covers_only_what_existed_before_the_leader_applied_its_own_term() {
    let t0 = Instant::now();
    let mut s = one_segment(100);
    for i in 0..4 {
        complete(&mut s, &format!("old{i}"), 10, 1, Pin::None);
    }
    let p = policy(0.5, 1.0);
    let leader = leader_elected_at(t0);
    // Before the leader applied an entry of its term, nothing is bounded.
    leader.with(|t| t.note_applied(Some(0), s.next_object_version())).expect("leading");
    let bound = s.next_object_version();
    for i in 0..5 {
        complete(&mut s, &format!("new{i}"), 10, 1, Pin::None);
    }
    assert!(victims(&s, &leader, t0 + LEASE_TTL / 2, &p).is_empty(), "no bound yet: every object is in the grace");
    leader.with(|t| t.note_applied(Some(1), bound)).expect("leading");
    leader.with(|t| t.note_applied(Some(1), s.next_object_version())).expect("leading");
    let chosen = victims(&s, &leader, t0 + LEASE_TTL / 2, &p);
    let mut chosen = keys(&chosen);
    chosen.sort();
    assert_eq!(chosen, vec!["new0", "new1", "new2", "new3", "new4"], "the first bound holds; old objects wait");
    assert_eq!(victims(&s, &leader, t0 + LEASE_TTL, &p).len(), 9, "after one TTL every object may go");
}

#[test]
fn a_lease_granted_by_this_leader_protects_the_object_until_it_expires() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    complete(&mut s, "read", 45, 1, Pin::None);
    complete(&mut s, "other", 45, 1, Pin::None);
    let granted = t0 + 5 * SEC;
    grant(&leader, "read", granted);
    let p = policy(0.5, 1.0);
    assert_eq!(keys(&victims(&s, &leader, granted + LEASE_TTL / 2, &p)), vec!["other"]);
    assert_eq!(keys(&victims(&s, &leader, granted + LEASE_TTL, &p)), vec!["other", "read"]);
}

#[test]
fn applying_the_victims_frees_at_least_the_target_and_removes_each_named_version() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    for i in 0..12 {
        complete(&mut s, &format!("k{i:02}"), 8, 1, Pin::None);
    }
    let used = s.used_bytes();
    let p = policy(0.8, 0.4);
    let chosen = victims(&s, &leader, t0 + 10 * SEC, &p);
    for v in &chosen {
        assert_eq!(s.object(&v.key).unwrap().version, v.version, "victims name the current version");
    }
    let resp = apply(&mut s, Command::RemoveObjects { victims: chosen.clone(), reason: RemoveReason::Evict });
    assert_eq!(resp, Response::Removed { count: chosen.len() as u64 });
    assert!(used - s.used_bytes() >= (used as f64 * 0.4).ceil() as u64);
    assert!(!over_watermark(&s, &p));
    assert!(victims(&s, &leader, t0 + 10 * SEC, &p).is_empty(), "under the watermark again");
}

// ================================================================ client expiry

/// Two store nodes registered by mounting.
fn two_clients() -> MetaState {
    let mut s = MetaState::default();
    ok(&mut s, mount_cmd(NODE_A, segment(1, 100 * UNIT, "host-a")));
    ok(&mut s, mount_cmd(NODE_B, segment(2, 100 * UNIT, "host-b")));
    s
}

#[test]
fn a_client_silent_for_longer_than_the_ttl_expires_and_one_heard_from_within_it_does_not() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let s = two_clients();
    let ttl = 3 * SEC;
    leader.heartbeat(NODE_A, t0 + 5 * SEC);
    leader.heartbeat(NODE_B, t0 + SEC);
    assert_eq!(expired(&s, &leader, t0 + 4 * SEC, ttl), vec![], "B was heard from exactly one TTL ago");
    assert_eq!(expired(&s, &leader, t0 + 4 * SEC + MS, ttl), vec![NODE_B]);
    assert_eq!(expired(&s, &leader, t0 + 8 * SEC, ttl), vec![NODE_B]);
    assert_eq!(expired(&s, &leader, t0 + 8 * SEC + MS, ttl), vec![NODE_A, NODE_B]);
    // A fresh heartbeat takes B off the list.
    leader.heartbeat(NODE_B, t0 + 8 * SEC);
    assert_eq!(expired(&s, &leader, t0 + 8 * SEC + MS, ttl), vec![NODE_A]);
}

#[test]
fn the_election_counts_as_a_heartbeat_for_every_known_client() {
    let t0 = Instant::now();
    let s = two_clients();
    let ttl = 3 * SEC;
    let elected = t0 + 100 * SEC;
    let leader = leader_elected_at(elected);
    assert_eq!(expired(&s, &leader, elected + ttl, ttl), vec![]);
    assert_eq!(expired(&s, &leader, elected + ttl + MS, ttl), vec![NODE_A, NODE_B]);
    // A heartbeat stamped before the election does not make a client look older.
    leader.heartbeat(NODE_A, t0 + 50 * SEC);
    assert_eq!(leader.with(|t| t.last_heartbeat(NODE_A)), Some(elected));
    assert_eq!(expired(&s, &leader, elected + ttl, ttl), vec![]);
    // A new term forgets the old heartbeats but counts its own election.
    leader.heartbeat(NODE_A, elected + 10 * SEC);
    let reelected = elected + 20 * SEC;
    leader.observe(Some(2), reelected);
    assert_eq!(expired(&s, &leader, reelected + ttl, ttl), vec![]);
    assert_eq!(expired(&s, &leader, reelected + ttl + MS, ttl), vec![NODE_A, NODE_B]);
}

#[test]
fn only_registered_clients_can_expire() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = two_clients();
    let ttl = 3 * SEC;
    // Heartbeats from a stranger do not register it; an expired client is gone.
    leader.heartbeat(ClientId(999), t0);
    ok(&mut s, Command::ExpireClient { client: NODE_B });
    assert_eq!(expired(&s, &leader, t0 + 100 * SEC, ttl), vec![NODE_A]);
    // A writer registered with an empty remount expires like a store node.
    ok(&mut s, remount_cmd(W1, vec![]));
    assert_eq!(expired(&s, &leader, t0 + 100 * SEC, ttl), vec![W1, NODE_A]);
}

// ================================================================ objects replaced by upserts

/// "k" put, then replaced by an upsert: its first incarnation retired.
fn upserted(s: &mut MetaState) -> ObjectVersion {
    let old = complete(s, "k", 10, 1, Pin::None);
    put_object(s, W1, "k", 10 * UNIT, 1, Pin::None, true);
    assert_eq!(s.retired().map(|r| r.version).collect::<Vec<_>>(), vec![old], "the old bytes are held");
    old
}

#[test]
fn a_replaced_object_is_released_one_lease_ttl_after_this_leader_first_saw_it_retired() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    let old = upserted(&mut s);
    // First seen long after the election and the upsert: the clock starts now.
    let seen = t0 + 1000 * SEC;
    assert!(to_release(&s, &leader, seen, LEASE_TTL).is_empty());
    assert!(to_release(&s, &leader, seen + LEASE_TTL, LEASE_TTL).is_empty(), "exactly the TTL is not past it");
    let released = to_release(&s, &leader, seen + LEASE_TTL + MS, LEASE_TTL);
    assert_eq!(released, vec![old]);
    // Applying the decision gives the old bytes back; the new object stays.
    let used = s.used_bytes();
    let resp = apply(&mut s, Command::ReleaseRetired { versions: released });
    assert_eq!(resp, Response::Removed { count: 1 });
    assert_eq!(s.used_bytes(), used - 10 * UNIT);
    assert!(s.object("k").is_some_and(|o| o.version > old));
    assert!(to_release(&s, &leader, seen + 10 * LEASE_TTL, LEASE_TTL).is_empty(), "nothing is left to release");
}

#[test]
fn a_new_leader_starts_the_release_clock_again() {
    let t0 = Instant::now();
    let leader = leader_elected_at(t0);
    let mut s = one_segment(100);
    let old = upserted(&mut s);
    assert!(to_release(&s, &leader, t0, LEASE_TTL).is_empty());
    let reelected = t0 + LEASE_TTL / 2;
    leader.observe(Some(2), reelected);
    assert!(to_release(&s, &leader, reelected, LEASE_TTL).is_empty(), "the new leader's first look");
    assert!(
        to_release(&s, &leader, t0 + LEASE_TTL + MS, LEASE_TTL).is_empty(),
        "the old leader's clock would release it now; the new leader's must not (its readers' leases are unknown)"
    );
    assert!(to_release(&s, &leader, reelected + LEASE_TTL, LEASE_TTL).is_empty());
    assert_eq!(to_release(&s, &leader, reelected + LEASE_TTL + MS, LEASE_TTL), vec![old]);
}
