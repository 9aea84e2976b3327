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
use crate::metrics::MasterMetrics;
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
    pub metrics: Arc<MasterMetrics>,
}

/// Follows Raft metrics: keeps the leader-local soft state to the term, and
/// logs one line per leadership change and per membership change.
pub async fn follow_leadership(
    mut raft_metrics: watch::Receiver<openraft::RaftMetrics<u64, openraft::BasicNode>>,
    leader: Arc<LeaderState>,
    metrics: Arc<MasterMetrics>,
) {
    let mut known_leader = None;
    let mut known_membership = None;
    loop {
        let (leading, term, id, current, membership) = {
            let m = raft_metrics.borrow_and_update();
            let membership = m.membership_config.clone();
            (m.state == ServerState::Leader, m.current_term, m.id, m.current_leader, membership)
        };
        leader.observe(leading.then_some(term), Instant::now());
        if current != known_leader {
            match current {
                Some(l) => tracing::info!(node = id, leader = l, term, this_node_leads = leading, "leader changed"),
                None => tracing::info!(node = id, term, "leader lost; election in progress"),
            }
            metrics.leader_changes.inc();
            known_leader = current;
        }
        if known_membership != Some(*membership.log_id()) {
            let voters: Vec<u64> = membership.membership().voter_ids().collect();
            let learners: Vec<u64> = membership.membership().learner_ids().collect();
            tracing::info!(node = id, ?voters, ?learners, log = ?membership.log_id(), "membership");
            known_membership = Some(*membership.log_id());
        }
        if raft_metrics.changed().await.is_err() {
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
            ctx.metrics.expired_clients.inc();
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
        ctx.metrics.eviction_rounds.inc();
        ctx.metrics.evicted_objects.inc_by(count);
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
        if let Some(Response::Removed { count }) =
            propose_logged(ctx, "discard abandoned puts", Command::DiscardPuts { victims: discard }).await
        {
            ctx.metrics.discarded_puts.inc_by(count);
        }
        tracing::info!(count = n, "discarded abandoned puts; their space is held until the release timeout");
    }
    if !release.is_empty() {
        let n = release.len();
        if let Some(Response::Removed { count }) =
            propose_logged(ctx, "release discarded puts", Command::ReleaseDiscarded { versions: release }).await
        {
            ctx.metrics.released_puts.inc_by(count);
        }
        tracing::info!(count = n, "released the space of discarded puts");
    }
}
