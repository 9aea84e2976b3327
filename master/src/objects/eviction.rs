//! Eviction rounds, run by the leader's duty (usage above the high
//! watermark) and by puts that found no room (they evict what they need and
//! retry). One round at a time: concurrent puts that all failed evict in
//! turn, each what it needs, instead of each evicting for everyone.
//!
//! A round reads its candidates from the state, then — under the soft-state
//! lock, after the state read (lock order, `leader.rs`) — drops the leased
//! and fenced ones, ranks the rest, and fences its victims in the same hold
//! of the lock, so no reader is admitted between the choice and the fence.
//!
//! Each tier has its rounds (docs/TIERS.md): memory against the high
//! watermark, disk against the disk watermark. A victim kept on another tier
//! loses only this tier's replicas (`DropTierReplicas`); others are removed.
//! With offload on, the memory duty's rounds leave the victims that are not
//! on disk yet to the copy duty (they are copied, then dropped from memory)
//! while the disk has room; a put that found no room still removes them.
//!
//! Bytes freed inside an earlier term's arena (after a failover, every
//! object of a full cache lives in one) are cut out of it once they may be
//! (`arena_cuts.rs`); a put's round does not evict, for nothing, objects
//! too young for that there.

use std::time::Instant;

use mooncake_raft_store::{ArenaId, Command, Pin, RemoveReason, Tier, VersionedKey};
use mooncake_segment::SegmentId;
use mooncake_segment::tenant::Tenant;

use crate::objects::arena_cuts::{self, arenas_holding};

use crate::duties::book;
use crate::leader::decisions::Candidate;
use crate::leader::decisions::{self, EvictionPolicy};
use crate::leader::kv_lease::KeyHash;
use crate::leader::tiering::OffloadMode;
use crate::leader::{FenceGuard, TermState};
use crate::objects::fenced::propose_fenced;
use crate::shared::Shared;

/// Most victims of one round (bounds one entry's size and apply time).
pub const EVICTION_BATCH_MAX: usize = 1_024;

/// One round: frees what the high watermark asks and at least
/// `need_bytes` (0 for the duty's rounds), from objects neither leased,
/// hard-pinned nor being removed. Returns how many objects it evicted:
/// 0 means nothing evictable was found (or this master does not lead).
pub async fn round(shared: &Shared, need_bytes: u64) -> u64 {
    round_on(shared, Tier::Dram, need_bytes).await
}

/// One round on `tier` (memory: the high watermark; disk: the disk
/// watermark). Returns how many objects it evicted from the tier.
pub async fn round_on(shared: &Shared, tier: Tier, need_bytes: u64) -> u64 {
    round_where(shared, tier, need_bytes, None).await
}

/// A put's round: frees about `need_bytes` on `segment` (the memory
/// segment the put could not place a replica on) and nothing for the
/// watermark, which is the duty's job. Returns how many objects it
/// evicted: 0 means nothing evictable holds bytes there.
pub async fn round_for_put(shared: &Shared, segment: SegmentId, need_bytes: u64) -> u64 {
    round_where(shared, Tier::Dram, need_bytes, Some(segment)).await
}

/// A quota's round (`quotas.rs`): frees about `need_bytes` of `tenant`'s
/// objects, whole (a quota counts objects, not replicas), from those
/// neither leased, hard-pinned nor being removed, nor `except` (the key the
/// put is for); never another tenant's. Returns how many objects it evicted.
pub async fn round_for_quota(shared: &Shared, tenant: &Tenant, except: &str, need_bytes: u64) -> u64 {
    let _one_at_a_time = shared.write_path.eviction_round.lock().await;
    let candidates: Vec<Candidate> = shared.reader.read(|s| {
        s.objects()
            .filter(|o| o.pin != Pin::Hard && o.key != except && tenant.owns(&o.key))
            .map(|o| Candidate {
                object: VersionedKey { key: o.key.clone(), version: o.version },
                hash: KeyHash::of(&o.key),
                pin: o.pin,
                committed_ms: o.committed_ms,
                bytes: o.size_bytes,
                kept_elsewhere: false,
            })
            .collect()
    });
    let all = |_: &TermState, c: Vec<Candidate>| c;
    let Some((victims, guard)) = choose_and_fence(shared, candidates, all, crate::raft::proposer::now_ms(), need_bytes)
    else {
        return 0;
    };
    remove_victims(shared, Tier::Dram, need_bytes, victims, guard, false).await
}

/// What holds the bytes of a memory segment a put found no room on: the
/// words of its refusal (a put is refused only when nothing evictable could
/// make the room; this says what held it instead).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeldBack {
    pub capacity_bytes: u64,
    /// Free of objects and outside arenas (in holes smaller than the put,
    /// or the put would have taken them), and the largest such hole.
    pub free_bytes: u64,
    pub largest_hole_bytes: u64,
    /// Free of objects but inside arenas: promised to puts and writer
    /// chunks in flight, or waiting for their store node to let go.
    pub free_in_arenas_bytes: u64,
    /// Objects under a KV lease (read within `default_kv_lease_ttl`, or
    /// covered by a new leader's grace) or being removed.
    pub leased_bytes: u64,
    pub hard_pinned_bytes: u64,
    /// Objects eviction could take now.
    pub evictable_bytes: u64,
}

impl HeldBack {
    /// The bytes of `segment` by what holds them; `None` when this master
    /// does not lead or the segment is gone.
    pub fn of(shared: &Shared, segment: SegmentId) -> Option<HeldBack> {
        let ttl = shared.write_path.eviction_policy.kv_lease_ttl;
        let (capacity_bytes, free, objects) = shared.reader.read(|s| {
            let g = s.segment(segment)?;
            let objects: Vec<(KeyHash, mooncake_raft_store::ObjectVersion, Pin, u64)> = s
                .objects()
                .filter_map(|o| {
                    let bytes: u64 = o.replicas.iter().filter(|r| r.segment == segment).map(|r| r.range.len).sum();
                    (bytes > 0).then(|| (KeyHash::of(&o.key), o.version, o.pin, bytes))
                })
                .collect();
            let (grantable, largest) = s.grantable_bytes(segment);
            Some((g.capacity_bytes(), (grantable, largest, g.free_bytes().saturating_sub(grantable)), objects))
        })?;
        let (free_bytes, largest_hole_bytes, free_in_arenas_bytes) = free;
        let now = Instant::now();
        shared.leader.with(|t| {
            let mut held = HeldBack {
                capacity_bytes,
                free_bytes,
                largest_hole_bytes,
                free_in_arenas_bytes,
                ..HeldBack::default()
            };
            for (hash, version, pin, bytes) in objects {
                if pin == Pin::Hard {
                    held.hard_pinned_bytes += bytes;
                } else if t.is_version_leased(hash, version, now, ttl) || t.kv.is_fenced(hash) {
                    held.leased_bytes += bytes;
                } else {
                    held.evictable_bytes += bytes;
                }
            }
            held
        })
    }
}

impl std::fmt::Display for HeldBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bytes: {} free outside arenas (largest hole {}), {} free inside arenas (promised to puts or writer \
             chunks in flight, or waiting for their store node to let go), {} in objects read within the KV lease \
             TTL (or kept by a new leader's grace, or being removed), {} hard-pinned, {} in objects evictable but \
             not freeing room here yet",
            self.capacity_bytes,
            self.free_bytes,
            self.largest_hole_bytes,
            self.free_in_arenas_bytes,
            self.leased_bytes,
            self.hard_pinned_bytes,
            self.evictable_bytes
        )
    }
}

/// Under the soft-state lock (after the state read: lock order,
/// `leader.rs`): keeps the `candidates` `usable` keeps, drops the leased
/// and fenced ones, ranks the rest,
/// and fences the victims chosen for about `target` bytes in the same hold,
/// so no reader is admitted between the choice and the fence. `None`: no
/// victim, or this master does not lead.
fn choose_and_fence(
    shared: &Shared,
    candidates: Vec<Candidate>,
    usable: impl FnOnce(&TermState, Vec<Candidate>) -> Vec<Candidate>,
    wall_ms: u64,
    target: u64,
) -> Option<(Vec<Candidate>, FenceGuard)> {
    let ttl = shared.write_path.eviction_policy.kv_lease_ttl;
    let (term, victims) = shared.leader.with(|t| {
        let candidates = usable(t, candidates);
        let mut victims = decisions::choose_victims(candidates, t, Instant::now(), wall_ms, ttl, target);
        victims.truncate(EVICTION_BATCH_MAX);
        for v in &victims {
            t.kv.fence(v.hash);
        }
        (t.term, victims)
    })?;
    if victims.is_empty() {
        return None;
    }
    let guard = shared.leader.fenced_by(term, victims.iter().map(|v| v.hash).collect::<Vec<KeyHash>>());
    Some((victims, guard))
}

async fn round_where(shared: &Shared, tier: Tier, need_bytes: u64, segment: Option<SegmentId>) -> u64 {
    let _one_at_a_time = shared.write_path.eviction_round.lock().await;
    let (used, capacity, disk_has_room) = shared.reader.read(|s| {
        let disk_room = s.tier_capacity_bytes(Tier::Ssd) as f64 * shared.tiers.policy.disk_high_watermark_ratio;
        (s.tier_used_bytes(tier), s.tier_capacity_bytes(tier), (s.tier_used_bytes(Tier::Ssd) as f64) < disk_room)
    });
    let policy = match tier {
        Tier::Dram => shared.write_path.eviction_policy,
        Tier::Ssd => EvictionPolicy {
            high_watermark_ratio: shared.tiers.policy.disk_high_watermark_ratio,
            ..shared.write_path.eviction_policy
        },
    };
    // Room promised to puts in flight is as good as used: a watermark that
    // ignored it let a busy leader fill the segment with reservations and
    // refuse the next puts while the duty found nothing to do.
    let reserved = match tier {
        Tier::Dram => shared.leader.with(|t| t.puts.reserved_bytes()).unwrap_or(0),
        Tier::Ssd => 0,
    };
    let target = match segment {
        Some(_) => need_bytes,
        None => decisions::eviction_target(used.saturating_add(reserved).min(capacity), capacity, &policy, need_bytes),
    };
    if target == 0 {
        return 0;
    }
    // The duty's memory rounds leave what is not on disk yet to the copy
    // duty while offload is on and the disk has room.
    let leave_to_offload =
        tier == Tier::Dram && need_bytes == 0 && shared.tiers.policy.offload != OffloadMode::Off && disk_has_room;
    let mut candidates = shared.reader.read(|s| decisions::eviction_candidates_on(s, tier, segment));
    if leave_to_offload {
        candidates.retain(|c| c.kept_elsewhere);
    }
    let wall_ms = crate::raft::proposer::now_ms();
    let young_in = match segment {
        Some(seg) => young_in(shared, &candidates, tier, seg, wall_ms),
        None => Vec::new(),
    };
    // Bytes too young to be cut out of an earlier term's arena not yet
    // taken back free nothing a put could use there (this term's own
    // arenas excepted).
    let now = Instant::now();
    let usable = |t: &TermState, candidates: Vec<Candidate>| -> Vec<Candidate> {
        candidates
            .into_iter()
            .enumerate()
            .filter(|(i, _)| {
                young_in
                    .get(*i)
                    .copied()
                    .flatten()
                    .is_none_or(|a| t.puts.owns(a) || arena_cuts::taken_back(shared, t, a, now))
            })
            .map(|(_, c)| c)
            .collect()
    };
    let Some((victims, guard)) = choose_and_fence(shared, candidates, usable, wall_ms, target) else { return 0 };
    let duty_round = need_bytes == 0 && segment.is_none();
    remove_victims(shared, tier, need_bytes, victims, guard, duty_round).await
}

/// For a put's round on `segment`: for each candidate too young to be
/// cut, the arena its bytes there lie in (an earlier term's arena would
/// free nothing the put could use).
fn young_in(
    shared: &Shared,
    candidates: &[Candidate],
    tier: Tier,
    segment: SegmentId,
    wall_ms: u64,
) -> Vec<Option<ArenaId>> {
    shared.reader.read(|s| {
        candidates
            .iter()
            .map(|c| match arena_cuts::may_cut(shared, c.committed_ms, wall_ms) {
                true => None,
                false => arenas_holding(s, &c.object, Some(tier), Some(segment)).first().map(|(id, _)| *id),
            })
            .collect()
    })
}

/// Removes the fenced `victims` from `tier` (their replicas there, or
/// the objects with no other), cuts their bytes out of earlier terms'
/// arenas, and returns how many were evicted.
/// A failed proposal of a duty's round (`duty_round`) is noted in its
/// record: memory rounds are the eviction duty's, disk rounds the copy
/// duty's.
async fn remove_victims(
    shared: &Shared,
    tier: Tier,
    need_bytes: u64,
    victims: Vec<Candidate>,
    guard: FenceGuard,
    duty_round: bool,
) -> u64 {
    let asked = victims.len();
    if tier == Tier::Ssd {
        // Not offloaded again: that would push another copy out, and back.
        let keys: Vec<String> = victims.iter().map(|v| v.object.key.clone()).collect();
        shared.leader.with(|t| t.copies.note_disk_evicted(keys));
    }
    // Read before they go: the victims' bytes that may be cut out of
    // earlier terms' arenas once removed.
    let objects: Vec<_> = victims.iter().map(|v| v.object.clone()).collect();
    let cuts = arena_cuts::pieces(shared, &objects, Some(tier));
    let (kept, lost): (Vec<_>, Vec<_>) = victims.into_iter().partition(|v| v.kept_elsewhere);
    let mut cmds = Vec::new();
    if !kept.is_empty() {
        cmds.push(Command::DropTierReplicas { victims: kept.into_iter().map(|v| v.object).collect(), tier });
    }
    if !lost.is_empty() {
        cmds.push(Command::RemoveObjects {
            victims: lost.into_iter().map(|v| v.object).collect(),
            reason: RemoveReason::Evict,
        });
    }
    match propose_fenced(&shared.write_path.proposer, cmds, guard, |_, _| true).await {
        Ok(answers) => {
            let count = crate::objects::fenced::removed_total(&answers);
            shared.metrics.eviction_rounds.inc();
            shared.metrics.evicted_objects.inc_by(count);
            let (used, capacity) = shared.reader.read(|s| (s.tier_used_bytes(tier), s.tier_capacity_bytes(tier)));
            tracing::info!(
                tier = tier.name(),
                asked,
                evicted = count,
                need_bytes,
                used_bytes = used,
                capacity_bytes = capacity,
                "eviction round"
            );
            arena_cuts::cut(shared, cuts).await;
            count
        }
        Err(status) => {
            tracing::warn!(refusal = %status, "eviction proposal failed");
            if duty_round {
                let duty = match tier {
                    Tier::Dram => book::EVICTION,
                    Tier::Ssd => book::COPIES,
                };
                let why = format!("eviction proposal: {}", status);
                shared.duties.failed(duty, crate::raft::proposer::now_ms(), why);
            }
            0
        }
    }
}
