//! Copies handed to their executors: the store node that owns a copy's
//! target gets it in the answer to its Ping, or at once to its waiting
//! TakeCopies call (the edge adds the capabilities to read the sources and
//! write the target).

use std::time::{Duration, Instant};

use mooncake_segment::ClientId;

use crate::leader::arena_fences::SegmentFence;
use crate::leader::tiering::Copy;
use crate::shared::Shared;

/// Copies one Ping hands to a store node at most (64 of 4 MiB: 256 MiB per
/// heartbeat; the node runs a few at once and queues the rest).
pub const COPIES_PER_PING_MAX: usize = 64;

/// Longest a TakeCopies call is held (`TakeCopiesRequest.wait_ms`).
pub const COPY_WAIT_MAX: Duration = Duration::from_secs(5);

/// [`copies_for_ping`], holding the answer up to `wait` (at most
/// [`COPY_WAIT_MAX`]) while none is queued for `client`: a store node
/// asking for copies gets them as soon as they are planned, not at its
/// next heartbeat. With them, the arena fences of its segments it has yet
/// to acknowledge; a fence that moves answers the call at once
/// (`arena_fences.rs`). Empty when nothing came in time (or leadership
/// was lost).
pub async fn copies_when_queued(shared: &Shared, client: ClientId, wait: Duration) -> (Vec<Copy>, Vec<SegmentFence>) {
    let deadline = tokio::time::Instant::now() + wait.min(COPY_WAIT_MAX);
    // While held, this node hears a moved fence at once: puts may wait for it.
    let _listening = shared.auth.fence_wakes.listen(client.0);
    loop {
        // Registered before looking, so copies queued or fences moved in
        // between wake it.
        let queued = shared.tiers.copies_queued.notified();
        let moved = shared.auth.fence_wakes.moved.notified();
        tokio::pin!(queued, moved);
        queued.as_mut().enable();
        moved.as_mut().enable();
        let copies = copies_for_ping(shared, client);
        let fences = crate::objects::arenas::fences_of(shared, client, None, true);
        if !copies.is_empty() || !fences.is_empty() || shared.leader.with(|_| ()).is_none() {
            return (copies, fences);
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return (Vec::new(), Vec::new()),
            () = &mut queued => {}
            () = &mut moved => {}
        }
    }
}

/// The copies to hand to `client` in its Ping answer (the edge adds what
/// it needs to read the sources and write the target: `rpc/grants.rs`).
pub fn copies_for_ping(shared: &Shared, client: ClientId) -> Vec<Copy> {
    shared.leader.with(|t| t.copies.take_for(client, COPIES_PER_PING_MAX, Instant::now())).unwrap_or_default()
}
