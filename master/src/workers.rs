//! Background work of a master: following leadership (to reset the
//! leader-local soft state), and the leader's duties (client expiry,
//! eviction, reclaim of abandoned puts), each decision proposed as a command.
//! Every loop has a name, bounded units of work, and stops with the node.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_raft_store::{Command, ObjectVersion, RemoveReason, Response, StateReader};
use openraft::ServerState;
use tokio::sync::{Notify, watch};

use crate::decisions::{self, DISCARDED_BIT, EvictionPolicy};
use crate::leader::LeaderState;
use crate::proposer::Proposer;

/// Leader duties run this often; eviction also runs at once when a put finds no room.
const DUTY_TICK: Duration = Duration::from_millis(100);
/// Scanning every object for abandoned puts is O(objects): do it less often.
const RECLAIM_EVERY_TICKS: u32 = 10;
/// Most victims proposed in one eviction command (bounds the entry size).
const EVICTION_BATCH_MAX: usize = 1_024;

/// What the leader duties need.
#[derive(Clone)]
pub struct DutyContext {
    pub reader: StateReader,
    pub leader: Arc<LeaderState>,
    pub proposer: Proposer,
    pub client_ttl: Duration,
    pub discard_after: Duration,
    pub release_after: Duration,
    pub eviction: EvictionPolicy,
    pub evict_now: Arc<Notify>,
}

/// Follows Raft metrics and keeps the leader-local soft state to the term.
pub async fn follow_leadership(
    mut metrics: watch::Receiver<openraft::RaftMetrics<u64, openraft::BasicNode>>,
    leader: Arc<LeaderState>,
) {
    loop {
        let (leading, term, id) = {
            let m = metrics.borrow_and_update();
            (m.state == ServerState::Leader, m.current_term, m.id)
        };
        leader.observe(leading.then_some(term), Instant::now());
        if leading {
            tracing::debug!(node = id, term, "leading");
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// The leader's periodic duties; idle on followers.
pub async fn leader_duties(ctx: DutyContext) {
    let mut tick = tokio::time::interval(DUTY_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u32 = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = ctx.evict_now.notified() => {}
        }
        n = n.wrapping_add(1);
        if ctx.leader.with(|_| ()).is_none() {
            continue;
        }
        expire_clients(&ctx).await;
        evict(&ctx).await;
        if n.is_multiple_of(RECLAIM_EVERY_TICKS) {
            reclaim_puts(&ctx).await;
        }
    }
}

async fn propose_logged(ctx: &DutyContext, what: &str, cmd: Command) -> Option<Response> {
    match ctx.proposer.propose(cmd).await {
        Ok(r) => Some(r),
        Err(status) => {
            tracing::warn!(duty = what, code = ?status.error_code(), message = %status.message, "proposal failed");
            None
        }
    }
}

async fn expire_clients(ctx: &DutyContext) {
    let now = Instant::now();
    let expired = ctx
        .leader
        .with(|t| ctx.reader.read(|s| decisions::expired_clients(s, t, now, ctx.client_ttl)))
        .unwrap_or_default();
    for client in expired {
        let r = propose_logged(ctx, "client expiry", Command::ExpireClient { client }).await;
        if r.is_some_and(|r| r.err().is_none()) {
            tracing::info!(%client, ttl_s = ctx.client_ttl.as_secs(), "client expired: no heartbeat; its segments are unmounted");
        }
    }
}

async fn evict(ctx: &DutyContext) {
    let now = Instant::now();
    let mut victims = ctx
        .leader
        .with(|t| ctx.reader.read(|s| decisions::eviction_victims(s, t, now, &ctx.eviction)))
        .unwrap_or_default();
    if victims.is_empty() {
        return;
    }
    victims.truncate(EVICTION_BATCH_MAX);
    let asked = victims.len();
    let cmd = Command::RemoveObjects { victims, reason: RemoveReason::Evict };
    if let Some(Response::Removed { count }) = propose_logged(ctx, "eviction", cmd).await {
        let used = ctx.reader.read(|s| (s.used_bytes(), s.capacity_bytes()));
        tracing::info!(asked, evicted = count, used_bytes = used.0, capacity_bytes = used.1, "eviction round");
    }
}

async fn reclaim_puts(ctx: &DutyContext) {
    let now = Instant::now();
    let decided = ctx.leader.with(|t| {
        ctx.reader.read(|s| {
            let discard = decisions::puts_to_discard(s, t, now, ctx.discard_after);
            let release = decisions::discards_to_release(s, t, now, ctx.release_after);
            let live: BTreeSet<ObjectVersion> = s
                .objects()
                .map(|o| o.version)
                .chain(s.discarded().map(|d| ObjectVersion(d.version.0 | DISCARDED_BIT)))
                .collect();
            t.prune(now, |v| live.contains(&v), |k| s.object(k).is_some());
            (discard, release)
        })
    });
    let Some((discard, release)) = decided else { return };
    if !discard.is_empty() {
        let n = discard.len();
        propose_logged(ctx, "discard abandoned puts", Command::DiscardPuts { victims: discard }).await;
        tracing::info!(count = n, "discarded abandoned puts; their space is held until the release timeout");
    }
    if !release.is_empty() {
        let n = release.len();
        propose_logged(ctx, "release discarded puts", Command::ReleaseDiscarded { versions: release }).await;
        tracing::info!(count = n, "released the space of discarded puts");
    }
}
