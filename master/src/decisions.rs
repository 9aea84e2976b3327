//! Leader decisions as pure functions of the replicated state and the
//! leader's soft state: which clients expire, which objects to evict, which
//! abandoned puts to discard or release. No I/O here; the workers turn the
//! answers into proposed commands.

use std::time::{Duration, Instant};

use mooncake_raft_store::state::ObjectStatus;
use mooncake_raft_store::{MetaState, ObjectVersion, Pin, VersionedKey};
use mooncake_segment::ClientId;

use crate::leader::TermState;

/// Eviction knobs.
#[derive(Clone, Copy, Debug)]
pub struct EvictionPolicy {
    pub high_watermark_ratio: f64,
    pub eviction_ratio: f64,
    pub lease_ttl: Duration,
}

/// Clients not heard from for longer than `ttl`.
pub fn expired_clients(state: &MetaState, term: &TermState, now: Instant, ttl: Duration) -> Vec<ClientId> {
    state.clients().filter(|c| now.saturating_duration_since(term.last_heartbeat(c.id)) > ttl).map(|c| c.id).collect()
}

/// Whether usage is above the high watermark.
pub fn over_watermark(state: &MetaState, policy: &EvictionPolicy) -> bool {
    let capacity = state.capacity_bytes();
    capacity > 0 && state.used_bytes() as f64 > capacity as f64 * policy.high_watermark_ratio
}

/// Objects to evict so that about `eviction_ratio` of the used bytes are
/// freed: complete objects whose lease has expired, never hard-pinned;
/// unpinned before soft-pinned; least recently read (or, unread by this
/// leader, oldest completed) first.
pub fn eviction_victims(
    state: &MetaState,
    term: &TermState,
    now: Instant,
    policy: &EvictionPolicy,
) -> Vec<VersionedKey> {
    if !over_watermark(state, policy) {
        return Vec::new();
    }
    let target = (state.used_bytes() as f64 * policy.eviction_ratio).ceil() as u64;
    let mut candidates: Vec<_> = state
        .objects()
        .filter(|o| o.status == ObjectStatus::Complete && o.pin != Pin::Hard)
        .filter(|o| !term.is_leased(&o.key, now, policy.lease_ttl))
        .map(|o| {
            // Objects this leader saw read sort after those it never saw read.
            let rank = (o.pin == Pin::Soft, term.last_access(&o.key), o.completed_ms.unwrap_or(o.created_ms));
            (rank, o)
        })
        .collect();
    candidates.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.key.cmp(&b.1.key)));
    let mut freed = 0u64;
    let mut victims = Vec::new();
    for (_, o) in candidates {
        if freed >= target {
            break;
        }
        freed += o.replicas.iter().map(|r| r.range.len).sum::<u64>();
        victims.push(VersionedKey { key: o.key.clone(), version: o.version });
    }
    victims
}

/// Unfinished puts older than `discard_after` (as seen by this leader).
pub fn puts_to_discard(
    state: &MetaState,
    term: &mut TermState,
    now: Instant,
    discard_after: Duration,
) -> Vec<VersionedKey> {
    let mut out = Vec::new();
    for o in state.objects().filter(|o| o.status == ObjectStatus::Processing) {
        if now.saturating_duration_since(term.first_seen(o.version, now)) > discard_after {
            out.push(VersionedKey { key: o.key.clone(), version: o.version });
        }
    }
    out
}

/// Discarded puts whose writer can no longer be writing (`release_after`).
pub fn discards_to_release(
    state: &MetaState,
    term: &mut TermState,
    now: Instant,
    release_after: Duration,
) -> Vec<ObjectVersion> {
    let mut out = Vec::new();
    for d in state.discarded() {
        // A discarded put keeps its version; offset the key so the discard
        // clock starts when the leader sees it discarded, not when it was put.
        let seen = term.first_seen(ObjectVersion(d.version.0 | DISCARDED_BIT), now);
        if now.saturating_duration_since(seen) > release_after {
            out.push(d.version);
        }
    }
    out
}

/// Marks the "discarded" condition of a version in the first-seen map.
pub const DISCARDED_BIT: u64 = 1 << 63;
