//! Arenas being taken back from store nodes (`leader/arena_fences.rs`):
//! the fences a store node is told (mount, Ping and TakeCopies answers), the
//! acknowledgements it sends back, and the arenas returned through the log
//! once no WRITE grant over them can still land.

use std::time::{Duration, Instant};

use mooncake_raft_store::{ArenaId, Command};
use mooncake_segment::{ClientId, SegmentId};

use crate::leader::LeaderState;
use crate::leader::arena_fences::{FenceWakes, SegmentFence};
use crate::raft::proposer::Proposer;
use crate::shared::Shared;

/// The arena fences of `client`'s segments, as this leader makes them
/// now: all of them (`only_due` false: a mount answer), or those the client
/// has yet to acknowledge (Ping and TakeCopies answers). Empty when this
/// master does not lead.
pub fn fences_of(
    shared: &Shared,
    client: ClientId,
    segments: Option<&[SegmentId]>,
    only_due: bool,
) -> Vec<SegmentFence> {
    // The soft state first, then the state (see `ArenaFences`): an arena
    // returned before the clone is gone from the state read after it.
    let Some(fences) = shared.leader.with(|t| t.fences.clone()) else { return Vec::new() };
    shared.reader.read(|s| {
        let owned: Vec<SegmentId> = match segments {
            Some(ids) => ids.iter().copied().filter(|id| s.segment(*id).is_some_and(|g| g.owner == client)).collect(),
            None => s.client_segments(client).map(|g| g.spec.id).collect(),
        };
        owned
            .into_iter()
            .filter(|id| !only_due || fences.due(*id))
            .map(|id| {
                let in_state = s.arenas().filter(|a| a.segment == id).map(|a| a.id);
                fences.fence(id, in_state, s.next_arena_id())
            })
            .collect()
    })
}

/// Records the fences `client`'s store node says it enforces, as (segment,
/// fence version), only for segments it owns; wakes puts waiting to return
/// arenas when one counts.
pub fn take_acks(shared: &Shared, client: ClientId, acks: &[(SegmentId, u64)]) {
    if acks.is_empty() {
        return;
    }
    let owned: Vec<(SegmentId, u64)> = shared
        .reader
        .read(|s| acks.iter().copied().filter(|(id, _)| s.segment(*id).is_some_and(|g| g.owner == client)).collect());
    let moved = shared.leader.with(|t| {
        let mut moved = false;
        for (segment, version) in owned {
            let was_due = t.fences.due(segment);
            t.fences.ack(segment, version);
            moved |= was_due && !t.fences.due(segment);
        }
        moved
    });
    if moved == Some(true) {
        shared.auth.fence_wakes.acked.notify_waiters();
    }
}

/// Keeps every arena an earlier term granted out of its segment's fences
/// (`ArenaFences::keep_out`): once its store node let go, the bytes its
/// removed objects free are cut out at once (`arena_cuts.rs`), and a
/// deposed leader's writer still writing over TCP is refused and puts
/// again. Its unused bytes still wait for the release timeout.
pub fn keep_out_earlier_terms(shared: &Shared) {
    let Some(term) = shared.leader.with(|t| t.term) else { return };
    let earlier: Vec<(ArenaId, SegmentId)> =
        shared.reader.read(|s| s.arenas().filter(|a| a.term < term).map(|a| (a.id, a.segment)).collect());
    if earlier.is_empty() {
        return;
    }
    if shared.leader.with(|t| t.fences.keep_out(&earlier, Instant::now())) == Some(true) {
        shared.auth.fence_wakes.moved.notify_waiters();
    }
}

/// Takes `arenas` (nothing is written to them any more) back from their
/// store nodes and returns, through the log, those whose store nodes let go
/// of them (`arena_fences.rs`): the others are returned by a later call,
/// once their nodes acknowledge, or once every grant over them expired.
/// Returns the arenas returned now.
pub async fn take_back(
    proposer: &Proposer,
    leader: &LeaderState,
    wakes: &FenceWakes,
    grants_live: Duration,
    arenas: &[(ArenaId, SegmentId)],
) -> Vec<ArenaId> {
    let now = Instant::now();
    let Some((moved, ready)) = leader.with(|t| (t.fences.revoke(arenas, now), t.fences.ready(now, grants_live))) else {
        return Vec::new();
    };
    if moved {
        wakes.moved.notify_waiters();
    }
    return_arenas(proposer, leader, ready.clone()).await;
    ready
}

/// Returns `arenas` through the log and forgets them once returned.
pub async fn return_arenas(proposer: &Proposer, leader: &LeaderState, arenas: Vec<ArenaId>) {
    if arenas.is_empty() {
        return;
    }
    match proposer.propose(Command::ArenaReturn { arenas: arenas.clone() }).await {
        Ok(_) => {
            leader.with(|t| {
                t.puts.forget(&arenas);
                t.fences.forget(&arenas);
            });
            tracing::debug!(count = arenas.len(), "arenas returned");
        }
        Err(s) => tracing::warn!(refusal = %s, "arena return failed"),
    }
}
