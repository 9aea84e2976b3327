//! Leader decisions as pure functions: which clients expire, which objects
//! to evict, which replaced objects to release. Their inputs are
//! lists taken from the replicated state (under its read lock) and the
//! leader's soft state (under its own lock, after the state read — see the
//! lock order in `leader.rs`). No I/O here; the workers turn the answers into
//! proposed commands.

use std::time::{Duration, Instant};

use mooncake_raft_store::{MetaState, ObjectVersion, Pin, Tier, VersionedKey};
use mooncake_segment::{ClientId, SegmentId};

use crate::leader::TermState;
use crate::leader::kv_lease::KeyHash;

/// Eviction knobs.
#[derive(Clone, Copy, Debug)]
pub struct EvictionPolicy {
    pub high_watermark_ratio: f64,
    pub eviction_ratio: f64,
    pub kv_lease_ttl: Duration,
}

/// Clients (of `clients`) not heard from for longer than `ttl`.
pub fn expired_clients(clients: &[ClientId], term: &TermState, now: Instant, ttl: Duration) -> Vec<ClientId> {
    clients.iter().copied().filter(|c| now.saturating_duration_since(term.last_heartbeat(*c)) > ttl).collect()
}

/// An object that may be evicted, as read from the state.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub object: VersionedKey,
    pub hash: KeyHash,
    pub pin: Pin,
    pub committed_ms: u64,
    /// Bytes freed by evicting it from the tier (its replicas there).
    pub bytes: u64,
    /// It has a readable replica on another tier: evicting it from this one
    /// drops only this tier's replicas (`DropTierReplicas`), nothing is lost.
    pub kept_elsewhere: bool,
}

/// How many bytes a round must free: above the high watermark, enough to get
/// back under it and at least `eviction_ratio` of the used bytes; and at
/// least `need_bytes` (a put that found no room).
pub fn eviction_target(used: u64, capacity: u64, policy: &EvictionPolicy, need_bytes: u64) -> u64 {
    let watermark = (capacity as f64 * policy.high_watermark_ratio) as u64;
    let over = if capacity > 0 && used > watermark {
        (used - watermark).max((used as f64 * policy.eviction_ratio).ceil() as u64)
    } else {
        0
    };
    over.max(need_bytes)
}

/// Complete objects with a replica on `tier` that are not hard-pinned:
/// everything eviction from that tier may consider, before leases are
/// known. Taken under the state's read lock.
pub fn eviction_candidates(state: &MetaState, tier: Tier) -> Vec<Candidate> {
    eviction_candidates_on(state, tier, None)
}

/// [`eviction_candidates`] that hold bytes on `segment` (when given), each
/// counted by the bytes it frees there: what a put evicts to make room on
/// the one segment it could not place a replica on.
pub fn eviction_candidates_on(state: &MetaState, tier: Tier, segment: Option<SegmentId>) -> Vec<Candidate> {
    state
        .objects()
        .filter(|o| o.pin != Pin::Hard)
        .filter_map(|o| {
            let on_tier = |r: &&mooncake_raft_store::ReplicaPlacement| {
                state.replica_tier(r) == Some(tier) && segment.is_none_or(|s| r.segment == s)
            };
            let bytes: u64 = o.replicas.iter().filter(on_tier).map(|r| r.range.len).sum();
            let kept_elsewhere = o.replicas.iter().any(|r| state.replica_tier(r) != Some(tier) && state.is_readable(r));
            (bytes > 0).then(|| Candidate {
                object: VersionedKey { key: o.key.clone(), version: o.version },
                hash: KeyHash::of(&o.key),
                pin: o.pin,
                committed_ms: o.committed_ms,
                bytes,
                kept_elsewhere,
            })
        })
        .collect()
}

/// The candidates to evict to free about `target` bytes: neither leased nor
/// being removed; unpinned before soft-pinned (a soft pin with a TTL counts
/// until `wall_ms` passes its deadline); those kept on another tier
/// (nothing is lost) before the others; then least recently used first, a
/// put's commit counting as a use as a read does (an LRU): objects this
/// leader saw no use of (committed and last read under an earlier leader,
/// or beyond the access horizon) before those it did, oldest commit first;
/// then the least recent use first.
pub fn choose_victims(
    mut candidates: Vec<Candidate>,
    term: &TermState,
    now: Instant,
    wall_ms: u64,
    ttl: Duration,
    target: u64,
) -> Vec<Candidate> {
    if target == 0 {
        return Vec::new();
    }
    candidates.retain(|c| !term.is_version_leased(c.hash, c.object.version, now, ttl) && !term.kv.is_fenced(c.hash));
    candidates.sort_by(|a, b| {
        let rank = |c: &Candidate| {
            let soft = c.pin.soft_at(c.committed_ms, wall_ms);
            (soft, !c.kept_elsewhere, term.kv.last_used(c.hash), c.committed_ms)
        };
        rank(a).cmp(&rank(b)).then_with(|| a.object.key.cmp(&b.object.key))
    });
    let mut freed = 0u64;
    let mut victims = Vec::new();
    for c in candidates {
        if freed >= target {
            break;
        }
        freed += c.bytes;
        victims.push(c);
    }
    victims
}

/// Objects replaced by upserts (of `retired`) that this leader first saw
/// retired longer than `release_after` ago: no KV lease on their bytes can
/// be left.
pub fn retired_to_release(
    retired: &[ObjectVersion],
    term: &mut TermState,
    now: Instant,
    release_after: Duration,
) -> Vec<ObjectVersion> {
    retired
        .iter()
        .copied()
        .filter(|v| now.saturating_duration_since(term.first_seen(*v, now)) > release_after)
        .collect()
}
