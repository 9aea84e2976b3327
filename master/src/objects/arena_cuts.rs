//! Cutting freed bytes out of earlier terms' arenas (`ArenaCut`).
//!
//! After a failover every object lives in arenas an earlier leader granted,
//! which this leader may return only after the release timeout (a put of
//! that leader may still be writing into their unused bytes). What eviction
//! or a remove frees there would stay unusable until then: after a
//! failover, a full cache could not take one put (each put evicting more and
//! finding no room), and a cache emptied by `remove_all` none at all.
//!
//! A removed object's bytes may leave such an arena once the object was
//! committed at least `cut_after` ago: its one writer (a leader hands each
//! range of an arena out once) finished before the commit, and every WRITE
//! grant over the bytes has expired, so nothing can still land on them.
//! The callers read the pieces ([`pieces`]) before proposing the
//! removal, and cut them ([`cut`]) once it is applied. Lock
//! order: state read, then the leader's soft state (`leader.rs`).

use std::collections::BTreeMap;

use mooncake_raft_store::{ArenaId, Command, MetaState, Response, Tier, VersionedKey};
use mooncake_segment::{Range, SegmentId};

use crate::shared::Shared;

/// Whether bytes of an object committed at `committed_ms` may be cut out
/// of an earlier term's arena at `wall_ms` (`WritePath::cut_after` later).
pub fn may_cut(shared: &Shared, committed_ms: u64, wall_ms: u64) -> bool {
    committed_ms.saturating_add(shared.write_path.cut_after.as_millis() as u64) <= wall_ms
}

/// The pieces of `victims` that may be cut once they are removed: their
/// ranges on `tier` (every tier when `None`) inside arenas of earlier
/// terms, for those committed long enough ago. Read before the removal
/// is proposed (a victim already gone has none).
pub fn pieces(shared: &Shared, victims: &[VersionedKey], tier: Option<Tier>) -> Vec<(ArenaId, Range)> {
    let wall_ms = crate::raft::proposer::now_ms();
    let held: Vec<(ArenaId, Range)> = shared.reader.read(|s| {
        victims
            .iter()
            .filter(|v| {
                let done = s.object(&v.key).map(|o| o.committed_ms);
                done.is_some_and(|done| may_cut(shared, done, wall_ms))
            })
            .flat_map(|v| arenas_holding(s, v, tier, None))
            .collect()
    });
    if held.is_empty() {
        return held;
    }
    shared.leader.with(|t| held.into_iter().filter(|(a, _)| !t.puts.owns(*a)).collect()).unwrap_or_default()
}

/// Cuts the freed `pieces` out of their arenas, one `ArenaCut` per
/// arena; pieces not free (their object was not removed after all)
/// stay. A refused cut only leaves the bytes to the arena's return.
pub async fn cut(shared: &Shared, pieces: Vec<(ArenaId, Range)>) {
    if pieces.is_empty() {
        return;
    }
    let by_arena: BTreeMap<ArenaId, Vec<Range>> = shared.reader.read(|s| {
        let mut by_arena: BTreeMap<ArenaId, Vec<Range>> = BTreeMap::new();
        for (id, range) in pieces {
            let free = s.arena(id).and_then(|a| s.segment(a.segment)).is_some_and(|g| g.is_free(range));
            if free {
                by_arena.entry(id).or_default().push(range);
            }
        }
        by_arena
    });
    let bytes: Vec<u64> = by_arena.values().map(|ranges| ranges.iter().map(|r| r.len).sum()).collect();
    let cmds: Vec<Command> = by_arena.into_iter().map(|(arena, ranges)| Command::ArenaCut { arena, ranges }).collect();
    if cmds.is_empty() {
        return;
    }
    match shared.write_path.proposer.propose_many(cmds).await {
        Ok(answers) => {
            let refused = answers.iter().filter(|a| matches!(a, Response::Err(_))).count();
            let cut: u64 =
                answers.iter().zip(&bytes).filter(|(a, _)| !matches!(a, Response::Err(_))).map(|(_, b)| b).sum();
            shared.metrics.arena_cut_bytes.inc_by(cut);
            tracing::info!(bytes = cut, refused, "freed bytes cut out of earlier terms' arenas");
        }
        Err(status) => tracing::warn!(message = %status.message, "arena cut failed"),
    }
}

/// The arenas holding `object`'s replicas on `tier` (every tier when
/// `None`; on `segment` when given), with the ranges they hold: none once
/// that version is gone.
pub fn arenas_holding(
    s: &MetaState,
    object: &VersionedKey,
    tier: Option<Tier>,
    segment: Option<SegmentId>,
) -> Vec<(ArenaId, Range)> {
    let Some(o) = s.object(&object.key).filter(|o| o.version == object.version) else { return Vec::new() };
    o.replicas
        .iter()
        .filter(|r| segment.is_none_or(|g| r.segment == g) && tier.is_none_or(|t| s.replica_tier(r) == Some(t)))
        .filter_map(|r| s.arena_holding(r.segment, r.range).map(|a| (a.id, r.range)))
        .collect()
}
