//! Background work of a master: following leadership (to reset the
//! leader-local soft state), and the leader's duties (client expiry,
//! eviction — its own duty, woken by puts past the watermark — reclaim of
//! puts, arenas and replaced objects), each decision proposed as a command.
//! Every periodic duty runs on the one runner (`runner.rs`): a name, a
//! tick, bounded rounds, a record in the book, and it stops with the node.

pub mod book;
pub mod runner;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_raft_store::{ArenaId, Command, ObjectVersion, Response, Tier};
use mooncake_segment::{ClientId, SegmentId};
use openraft::ServerState;
use tokio::sync::watch;

use mooncake_raft_store::StateReader;

use crate::duties::runner::{Duty, Record, Tick};
use crate::leader::LeaderState;
use crate::leader::decisions;
use crate::metrics::MasterMetrics;
use crate::objects::arenas;
use crate::shared::Shared;

/// Leader duties run this often.
pub const DUTY_TICK: Duration = Duration::from_millis(100);
/// The reclaim duty runs every this many ticks (a second).
pub const RECLAIM_EVERY_TICKS: u32 = 10;
/// A gap between two duty ticks longer than this (or than a quarter of the
/// client TTL, if shorter) is a stall of the leader: its process was
/// paused (SIGSTOP, a VM pause or migration) or its event loop could not
/// run, so no heartbeat could have been heard. Every client's TTL then
/// starts again (docs/GUARANTEES.md). Larger values let a longer stall
/// eat into the TTL; smaller ones take ordinary scheduling delays on a
/// busy host for stalls, which only postpones expiries.
const STALL_MAX: Duration = Duration::from_secs(1);

/// What the leader duties need: the master's handles ([`Shared`]) and the
/// timeouts that are theirs alone.
#[derive(Clone)]
pub struct DutyContext {
    pub shared: Arc<Shared>,
    pub client_ttl: Duration,
    pub discard_after: Duration,
    pub release_after: Duration,
    /// `--dev-unsafe-arena-reuse`: other terms' arenas returned at once.
    pub unsafe_arena_reuse: bool,
    /// `--dev-unsafe-expire-after-stall`: a stall of the leader does not
    /// restart the clients' TTLs.
    pub unsafe_expire_after_stall: bool,
}

/// Follows Raft metrics: keeps the leader-local soft state to the term,
/// bounds the election's KV-lease grace once the leader has applied an
/// entry of its own term (`TermState::note_applied`: objects committed
/// after that need no grace), and logs one line per leadership change and
/// per membership change.
pub async fn follow_leadership(
    mut raft_metrics: watch::Receiver<openraft::RaftMetrics<u64, openraft::BasicNode>>,
    leader: Arc<LeaderState>,
    reader: StateReader,
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
        if leading && leader.with(|t| t.grace_unbounded()) == Some(true) {
            // The state first, then the soft state (lock order, leader.rs).
            let (applied, next) = reader.read(|s| (s.applied_term(), s.next_object_version()));
            leader.with(|t| t.note_applied(applied, next));
        }
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

/// The leader's periodic duties (recorded as `client_expiry`, the reclaim
/// every [`RECLAIM_EVERY_TICKS`] as `reclaim`); idle on followers. Each
/// reads what it needs from the state first and consults the soft state
/// after (lock order, `leader.rs`).
impl Duty for DutyContext {
    fn name(&self) -> &'static str {
        book::CLIENT_EXPIRY
    }

    fn tick(&self) -> Duration {
        DUTY_TICK
    }

    fn leader_only(&self) -> bool {
        true
    }

    async fn round(&mut self, tick: Tick) -> Record {
        let ctx = &*self;
        // The gap counts the ticks a follower idled through too: a master
        // that just took over has not stalled.
        let stalled = tick.gap > STALL_MAX.min(ctx.client_ttl / 4) + DUTY_TICK;
        if stalled {
            note_stall(ctx, tick.gap, tick.at);
        }
        // DEV-UNSAFE: the old behaviour, made deterministic: a round that
        // ran before the heartbeats queued during the stall were handled
        // found everyone silent for the whole stall.
        let expire_all = stalled && ctx.unsafe_expire_after_stall && tick.gap > ctx.client_ttl;
        expire_clients(ctx, expire_all).await;
        // DEV-UNSAFE: the planted bug of --dev-unsafe-arena-reuse returns
        // earlier terms' arenas unfenced; keeping them out would hide it.
        if !ctx.unsafe_arena_reuse {
            arenas::keep_out_earlier_terms(&ctx.shared);
        }
        crate::objects::arena_cuts::cut_waiting(&ctx.shared).await;
        ctx.shared.metrics.leader_duty_rounds.inc();
        if tick.n.is_multiple_of(RECLAIM_EVERY_TICKS) {
            ctx.shared.duties.round(book::RECLAIM, reclaim_puts(ctx)).await;
        }
        Record::Round
    }
}

/// The leader's memory eviction ahead of need: a round every [`DUTY_TICK`],
/// and at once when a put's commit took the memory tier past the high
/// watermark (`WritePath::eviction_wake`): writers that fill the tier
/// faster than a round a tick frees would otherwise find it full and evict
/// in their own path. Idle on followers.
pub struct EvictionDuty(pub Arc<Shared>);

impl Duty for EvictionDuty {
    fn name(&self) -> &'static str {
        book::EVICTION
    }

    fn tick(&self) -> Duration {
        DUTY_TICK
    }

    fn leader_only(&self) -> bool {
        true
    }

    fn wake(&self) -> Option<&tokio::sync::Notify> {
        Some(&self.0.write_path.eviction_wake)
    }

    async fn round(&mut self, _: Tick) -> Record {
        crate::objects::eviction::round(&self.0, 0).await;
        Record::Round
    }
}

/// The leader could not run for `gap`: nobody could be heard meanwhile.
fn note_stall(ctx: &DutyContext, gap: Duration, now: Instant) {
    ctx.shared.metrics.leader_stalls.inc();
    if ctx.unsafe_expire_after_stall {
        tracing::warn!(stall_ms = gap.as_millis() as u64, "leader stalled; DEV-UNSAFE: client TTLs not restarted");
        return;
    }
    ctx.shared.leader.with(|t| t.restart_hearing(now));
    tracing::warn!(
        stall_ms = gap.as_millis() as u64,
        "leader stalled (process paused, host stall or overload): heartbeats could not be heard, so every client's \
         TTL starts again"
    );
}

/// Proposes `cmd` for `duty`; a failure is logged and noted in the duty's
/// record ([`book::DutyBook`]).
async fn propose_logged(ctx: &DutyContext, duty: &'static str, what: &str, cmd: Command) -> Option<Response> {
    match ctx.shared.write_path.proposer.propose(cmd).await {
        Ok(r) => Some(r),
        Err(status) => {
            tracing::warn!(duty = what, refusal = %status, "proposal failed");
            let why = format!("{what}: {}", status);
            ctx.shared.duties.failed(duty, crate::raft::proposer::now_ms(), why);
            None
        }
    }
}

/// Queues the repairs of `client`'s lost memory for the copy duty.
pub(crate) fn queue_repairs(shared: &Shared, client: ClientId, repairs: Vec<crate::leader::tiering::Repair>) {
    if repairs.is_empty() {
        return;
    }
    let n = repairs.len();
    let dropped = shared.leader.with(|t| t.copies.queue_repairs(repairs)).unwrap_or(n);
    shared.metrics.repairs_dropped.inc_by(dropped as u64);
    tracing::info!(%client, objects = n, dropped, "objects lost a memory replica with the client's segments; repairing");
}

async fn expire_clients(ctx: &DutyContext, expire_all: bool) {
    let now = Instant::now();
    let clients: Vec<ClientId> = ctx.shared.reader.read(|s| s.clients().map(|c| c.id).collect());
    let expired = match expire_all {
        true => clients,
        false => {
            ctx.shared.leader.with(|t| decisions::expired_clients(&clients, t, now, ctx.client_ttl)).unwrap_or_default()
        }
    };
    for client in expired {
        // A store node with a disk keeps it (detached) for the grace: its
        // objects come back when it does (docs/TIERS.md).
        let has_disk = ctx.shared.reader.read(|s| s.client_segments(client).any(|g| g.tier() == Tier::Ssd));
        // What its memory's loss leaves under-replicated, read before it.
        let repairs = crate::objects::copies::repairs_after_loss(&ctx.shared.reader, client);
        let cmd = match has_disk {
            true => Command::ExpireClientKeepDisk { client },
            false => Command::ExpireClient { client },
        };
        let r = propose_logged(ctx, book::CLIENT_EXPIRY, "client expiry", cmd).await;
        if r.is_some_and(|r| r.err().is_none()) {
            ctx.shared.leader.with(|t| t.puts.expire_client(client, ctx.release_after));
            ctx.shared.metrics.expired_clients.inc();
            queue_repairs(&ctx.shared, client, repairs);
            tracing::info!(%client, ttl_s = ctx.client_ttl.as_secs(), "client expired: no heartbeat; its segments are unmounted");
        }
    }
}

/// What the state holds that the reclaim duty looks after.
struct Held {
    retired: Vec<ObjectVersion>,
    arenas: Vec<(ArenaId, SegmentId)>,
}

/// Every second: expires puts in flight, returns arenas nothing is written
/// to any more (own sealed ones at once, other terms' after the release
/// timeout), and releases objects retired by upserts once no KV lease on
/// them can be left.
async fn reclaim_puts(ctx: &DutyContext) {
    let now = Instant::now();
    let held: Held = ctx.shared.reader.read(|s| Held {
        retired: s.retired().map(|r| r.version).collect(),
        arenas: s.arenas().map(|a| (a.id, a.segment)).collect(),
    });
    let in_state: Vec<ArenaId> = held.arenas.iter().map(|(id, _)| *id).collect();
    let foreign_after = if ctx.unsafe_arena_reuse { Duration::ZERO } else { ctx.release_after };
    // Objects replaced by upserts are released one KV lease TTL after this
    // leader first saw them retired: no KV lease on them can be left.
    let lease_ttl = ctx.shared.leader.kv_lease_ttl();
    let decided = ctx.shared.leader.with(|t| {
        let expired = t.puts.expire(now, ctx.discard_after, ctx.release_after);
        let (gone, foreign) = t.puts.sweep(&in_state, now, foreign_after);
        t.puts.forget(&gone);
        t.fences.forget(&gone);
        let mut arenas = t.puts.returnable();
        // The planted bug returns other terms' arenas at once, and its
        // fences go on admitting writes under them.
        let unfenced = if ctx.unsafe_arena_reuse {
            let with_segments: Vec<(ArenaId, SegmentId)> =
                held.arenas.iter().filter(|(id, _)| foreign.contains(id)).copied().collect();
            t.fences.admit_unsafely(&with_segments);
            foreign
        } else {
            arenas.extend(foreign);
            Vec::new()
        };
        let retired = decisions::retired_to_release(&held.retired, t, now, lease_ttl);
        let live: HashSet<ObjectVersion> = held.retired.iter().copied().collect();
        t.prune(now, &live);
        (expired.len(), (arenas, unfenced), retired)
    });
    let Some((expired, (arenas, unfenced), retired)) = decided else { return };
    if expired > 0 {
        ctx.shared.metrics.discarded_puts.inc_by(expired as u64);
        tracing::info!(count = expired, "puts unfinished past the discard timeout: keys freed, ranges held");
    }
    arenas::return_arenas(&ctx.shared.write_path.proposer, &ctx.shared.leader, unfenced).await;
    let arenas: Vec<(ArenaId, SegmentId)> = held.arenas.iter().filter(|(id, _)| arenas.contains(id)).copied().collect();
    arenas::take_back(
        &ctx.shared.write_path.proposer,
        &ctx.shared.leader,
        &ctx.shared.auth.fence_wakes,
        ctx.shared.auth.grants_live,
        &arenas,
    )
    .await;
    if !retired.is_empty()
        && let Some(Response::Removed { count }) =
            propose_logged(ctx, book::RECLAIM, "release retired objects", Command::ReleaseRetired { versions: retired })
                .await
    {
        tracing::debug!(count, "released the bytes of objects replaced by upserts");
    }
}
