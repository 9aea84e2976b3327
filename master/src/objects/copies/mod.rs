//! The leader's copy duty and the store nodes' copy reports (docs/TIERS.md):
//! objects copied to disk (offload) and back to memory (promotion) by the
//! store node that owns the target segment, every outcome recorded through
//! the log (`AddReplica`); disk segments of expired store nodes ended after
//! their grace (`DropDetached`); disk eviction; corrupt disk ranges reported
//! by their owner dropped (`DropCorrupt`).
//!
//! A copy's target range is reserved in this leader's own arena on the
//! target segment, exactly as a put's is (`reservations.rs`, under
//! [`Copy::reservation_key`](crate::leader::tiering::Copy::reservation_key)),
//! so nothing else is placed there while the store node writes, and a copy
//! never reported is expired with the puts.
//! The copy goes to its executor in the answer to its waiting TakeCopies
//! call ([`copies_when_queued`]), or else to its next Ping.
//!
//! This module owns the duty (run by `duties::runner`) and the order of one round; the rest
//! is by concern: `planning` (which copies, to which segment: pure
//! functions of the state), `schedule` (copies reserved and queued, arenas
//! granted), `dispatch` (copies handed to their executors), `reports`
//! (what store nodes report back) and `expiry` (copies and detached disks
//! given up in time).
//!
//! Lock order as everywhere (`leader.rs`): the state is read first, the
//! soft state consulted after.

mod dispatch;
mod expiry;
mod planning;
mod reports;
mod schedule;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mooncake_raft_store::Tier;
use mooncake_segment::SegmentId;

pub use dispatch::{copies_for_ping, copies_when_queued};
pub use planning::repairs_after_loss;
pub use reports::{CopyReport, count_hits, report_copy, report_corrupt};

use crate::duties::book;
use crate::duties::runner::{Duty, Record, Tick};
use crate::leader::tiering::{OffloadMode, Purpose};
use crate::objects::eviction;
use crate::objects::user_tasks;
use crate::shared::Shared;
use planning::Scan;
use schedule::schedule;

/// The copy duty runs this often.
pub(crate) const COPY_TICK: Duration = Duration::from_millis(250);

/// `--offload_on_evict` looks at every object for the oldest ones, at most
/// once per this many ticks, and only while memory is under pressure.
const ON_EVICT_SCAN_EVERY_TICKS: u32 = 4;

/// The copy duty: idle on followers. Besides its tick, a commit of new
/// objects wakes it when offload is eager
/// ([`crate::shared::Tiers::copy_wake`]): it then plans copies of those
/// objects only, at once (not a round of its record).
pub struct CopyDuty {
    pub shared: Arc<Shared>,
    /// Ticked rounds run while leading.
    rounds: u32,
}

impl CopyDuty {
    pub fn new(shared: Arc<Shared>) -> CopyDuty {
        CopyDuty { shared, rounds: 0 }
    }
}

impl Duty for CopyDuty {
    fn name(&self) -> &'static str {
        book::COPIES
    }

    fn tick(&self) -> Duration {
        COPY_TICK
    }

    fn leader_only(&self) -> bool {
        true
    }

    fn wake(&self) -> Option<&tokio::sync::Notify> {
        Some(&self.shared.tiers.copy_wake)
    }

    async fn round(&mut self, tick: Tick) -> Record {
        if tick.woken {
            schedule(&self.shared, Purpose::Offload, Scan::FreshOnly).await;
            return Record::Skip;
        }
        self.rounds = self.rounds.wrapping_add(1);
        copy_round(&self.shared, self.rounds).await;
        Record::Round
    }
}

/// One ticked round of the copy duty (the `n`-th).
async fn copy_round(shared: &Shared, n: u32) {
    expiry::give_up_late_copies(shared);
    let offload_due = match shared.tiers.policy.offload {
        OffloadMode::Off => false,
        OffloadMode::Eager => true,
        OffloadMode::OnEvict => n.is_multiple_of(ON_EVICT_SCAN_EVERY_TICKS),
    };
    if offload_due {
        schedule(shared, Purpose::Offload, Scan::KeySpace).await;
    }
    let prefetch = shared.leader.with(|t| t.copies.has_prefetch()).unwrap_or(false);
    if shared.tiers.policy.promotion_on_hit || prefetch {
        schedule(shared, Purpose::Promote, Scan::KeySpace).await;
    }
    if shared.leader.with(|t| t.tasks.has_waiting()).unwrap_or(false) {
        schedule(shared, Purpose::User, Scan::KeySpace).await;
    }
    user_tasks::round(shared).await;
    let memory: BTreeSet<SegmentId> = shared.reader.read(|s| s.attached(Tier::Dram).map(|g| g.spec.id).collect());
    let unparked = shared.leader.with(|t| t.copies.unpark_repairs(memory)).unwrap_or(0);
    if unparked > 0 {
        tracing::info!(repairs = unparked, "a memory segment joined: repairs that had nowhere to go are queued again");
    }
    let pending = shared.leader.with(|t| t.copies.repairs_pending()).unwrap_or(0);
    if pending > 0 {
        schedule(shared, Purpose::Repair, Scan::KeySpace).await;
    }
    if shared.tiers.policy.hot_keys.mode == crate::leader::hot_keys::HotKeyMode::Enforce {
        schedule(shared, Purpose::Replicate, Scan::KeySpace).await;
        crate::objects::hot_keys::drop_cooled(shared).await;
    }
    let backlog = shared.leader.with(|t| t.copies.repair_backlog()).unwrap_or(0);
    shared.metrics.repairs_pending.set(backlog as i64);
    expiry::end_detached(shared).await;
    eviction::round_on(shared, Tier::Ssd, 0).await;
}
