//! Cutting freed bytes out of earlier terms' arenas (`ArenaCut`).
//!
//! After a failover every object lives in arenas an earlier leader granted,
//! which this leader may return only after the release timeout (a put of
//! that leader may still be writing into their unused bytes). What eviction
//! or a remove frees there would stay unusable until then: after a
//! failover, a full cache could not take one put (each put evicting more and
//! finding no room), and a cache emptied by `remove_all` none at all.
//!
//! A removed object's bytes may leave such an arena once nothing can still
//! write them: its one writer (a leader hands each range of an arena out
//! once) finished before the commit, so what is left to exclude is a WRITE
//! grant over the bytes used again. Either the arena was taken back from
//! its store node (a new leader keeps its predecessors' arenas out of the
//! fences at once: `leader/arena_fences.rs`), or the object was committed
//! at least `cut_after` ago, when every such grant has expired.
//! The callers read the pieces ([`pieces`]) before proposing the removal,
//! and cut them ([`cut`]) once it is applied; a piece whose arena is not
//! taken back yet waits in the leader's soft state ([`cut_waiting`]).
//! Lock order: state read, then the leader's soft state (`leader.rs`).

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use mooncake_raft_store::{ArenaId, Command, MetaState, Response, Tier, VersionedKey};
use mooncake_segment::{Range, SegmentId};

use crate::leader::{CUTS_WAITING_MAX, TermState};
use crate::shared::Shared;

/// Bytes of a removed object inside an earlier term's arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub arena: ArenaId,
    pub range: Range,
    /// Committed at least `cut_after` ago: cut whether or not its arena
    /// was taken back.
    pub aged: bool,
}

/// Whether bytes of an object committed at `committed_ms` may be cut out
/// of an earlier term's arena at `wall_ms` (`WritePath::cut_after` later)
/// whether or not the arena was taken back.
pub fn may_cut(shared: &Shared, committed_ms: u64, wall_ms: u64) -> bool {
    committed_ms.saturating_add(shared.write_path.cut_after.as_millis() as u64) <= wall_ms
}

/// Whether freed bytes in `arena` may be cut now without waiting for their
/// object's age: the arena is taken back from its store node.
pub fn taken_back(shared: &Shared, t: &TermState, arena: ArenaId, now: Instant) -> bool {
    t.fences.is_taken_back(arena, now, shared.auth.grants_live)
}

/// The pieces of `victims` inside earlier terms' arenas: their ranges on
/// `tier` (every tier when `None`). Read before the removal is proposed (a
/// victim already gone has none).
pub fn pieces(shared: &Shared, victims: &[VersionedKey], tier: Option<Tier>) -> Vec<Piece> {
    let wall_ms = crate::raft::proposer::now_ms();
    let held: Vec<Piece> = shared.reader.read(|s| {
        victims
            .iter()
            .flat_map(|v| {
                let aged = s.object(&v.key).is_some_and(|o| may_cut(shared, o.committed_ms, wall_ms));
                arenas_holding(s, v, tier, None).into_iter().map(move |(arena, range)| Piece { arena, range, aged })
            })
            .collect()
    });
    if held.is_empty() {
        return held;
    }
    shared.leader.with(|t| held.into_iter().filter(|p| !t.puts.owns(p.arena)).collect()).unwrap_or_default()
}

/// Cuts the freed `pieces` that may go now out of their arenas, one
/// `ArenaCut` per arena, and leaves the others waiting for their arena's
/// take-back ([`cut_waiting`]). Pieces not free (their object was not
/// removed after all) stay. A refused cut only leaves the bytes to the
/// arena's return.
pub async fn cut(shared: &Shared, pieces: Vec<Piece>) {
    if pieces.is_empty() {
        return;
    }
    let now = Instant::now();
    let ready: Vec<(ArenaId, Range)> = shared
        .leader
        .with(|t| {
            let (ready, wait): (Vec<Piece>, Vec<Piece>) =
                pieces.into_iter().partition(|p| p.aged || taken_back(shared, t, p.arena, now));
            let room = CUTS_WAITING_MAX.saturating_sub(t.cuts_waiting.len());
            t.cuts_waiting.extend(wait.into_iter().take(room).map(|p| (p.arena, p.range)));
            ready.into_iter().map(|p| (p.arena, p.range)).collect()
        })
        .unwrap_or_default();
    propose_cuts(shared, ready).await;
}

/// Cuts the waiting pieces whose arena was taken back since, and forgets
/// those whose arena is gone (returned, or with its segment).
pub async fn cut_waiting(shared: &Shared) {
    if shared.leader.with(|t| t.cuts_waiting.is_empty()).unwrap_or(true) {
        return;
    }
    let in_state: HashSet<ArenaId> = shared.reader.read(|s| s.arenas().map(|a| a.id).collect());
    let now = Instant::now();
    let ready: Vec<(ArenaId, Range)> = shared
        .leader
        .with(|t| {
            let waiting = std::mem::take(&mut t.cuts_waiting);
            let (ready, wait): (Vec<_>, Vec<_>) = waiting
                .into_iter()
                .filter(|(arena, _)| in_state.contains(arena))
                .partition(|(arena, _)| taken_back(shared, t, *arena, now));
            t.cuts_waiting = wait;
            ready
        })
        .unwrap_or_default();
    propose_cuts(shared, ready).await;
}

async fn propose_cuts(shared: &Shared, pieces: Vec<(ArenaId, Range)>) {
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
        Err(status) => tracing::warn!(refusal = %status, "arena cut failed"),
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
