//! Copies planned (`planning`) made real: each target range reserved in
//! this leader's arena on its segment, the copy queued for its executor
//! (`dispatch` hands it out), and the arenas granted that the copies which
//! found no room asked for, for the next round to use at once.

use std::time::Instant;

use mooncake_raft_store::Pin;
use mooncake_segment::SegmentId;

use super::planning::{Scan, plan_fan_out, plan_offloads, plan_promotions, plan_repairs};
use crate::leader::TermState;
use crate::leader::reservations::{PutAsk, Reserve, Round};
use crate::leader::tiering::{Copy, Purpose, Repair};
use crate::objects::copy_plan::Plan;
use crate::objects::puts::{Grant, Relief, grant_arena};
use crate::objects::user_tasks;
use crate::raft::proposer::now_ms;
use crate::shared::Shared;

/// Rounds of planning per copy-duty tick: a round that had to grant arenas
/// is followed by one that uses them (each grant is one commit).
const SCHEDULE_ROUNDS_MAX: usize = 8;
/// Copies planned in one tick at most (each tick looks again).
const COPIES_PER_TICK_MAX: usize = 256;
/// Repair copies in flight at most (each moves an object's size between
/// two store nodes): repairs never crowd out the store nodes' own traffic.
pub const REPAIRS_IN_FLIGHT_MAX: usize = 64;

/// The keys of every copy in flight (none when not leading).
fn keys_in_flight(shared: &Shared) -> std::collections::HashSet<String> {
    shared.leader.with(|t| t.copies.keys_in_flight()).unwrap_or_default()
}

/// Plans copies for `purpose` and reserves their targets; grants the
/// arenas the reservations asked for (used by the next round at once).
pub(super) async fn schedule(shared: &Shared, purpose: Purpose, scan: Scan) {
    for _ in 0..SCHEDULE_ROUNDS_MAX {
        if !schedule_round(shared, purpose, scan).await {
            return;
        }
    }
}

/// One round of [`schedule`]: whether it granted arenas for copies it
/// could not place yet (another round places them).
async fn schedule_round(shared: &Shared, purpose: Purpose, scan: Scan) -> bool {
    let limit = match purpose {
        Purpose::Offload => shared.tiers.policy.offload_queue_limit,
        Purpose::Promote => shared.tiers.policy.promotion_queue_limit,
        Purpose::Repair => REPAIRS_IN_FLIGHT_MAX,
        Purpose::Replicate => crate::objects::hot_keys::REPLICATIONS_IN_FLIGHT_MAX,
        Purpose::User => user_tasks::USER_COPIES_IN_FLIGHT_MAX,
    };
    let Some((room, hot, fresh, repairs, waiting, cursor)) = shared.leader.with(|t| {
        let room = limit.saturating_sub(t.copies.in_flight(purpose)).min(COPIES_PER_TICK_MAX);
        let (mut hot, mut fresh, mut repairs, mut waiting) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        match purpose {
            Purpose::Promote if room > 0 => {
                hot = t.copies.take_hot(shared.tiers.policy.promotion_admission_threshold);
                hot.extend(t.copies.take_prefetch(room));
            }
            Purpose::Offload if room > 0 => fresh = t.copies.take_fresh(room),
            Purpose::Repair if room > 0 => repairs = t.copies.take_repairs(room),
            Purpose::Replicate if room > 0 => hot = t.hot.take_admitted(room),
            Purpose::User if room > 0 => waiting = t.tasks.take_waiting(room),
            _ => {}
        }
        (room, hot, fresh, repairs, waiting, t.copies.offload_cursor.clone())
    }) else {
        return false;
    };
    if room == 0 {
        return false;
    }
    let mut scanned_to = None;
    let plans = match purpose {
        Purpose::Offload => {
            let (plans, last) = shared.reader.read(|s| plan_offloads(s, shared, room * 2, &cursor, (&fresh, scan)));
            scanned_to = last;
            plans
        }
        Purpose::Promote => {
            let (plans, deferred) = shared.reader.read(|s| plan_promotions(s, shared, &hot));
            // Kept for later when promotion counts hits; a user's prefetch
            // that does not fit under the watermark now is dropped (best
            // effort, as upstream's).
            if shared.tiers.policy.promotion_on_hit {
                let threshold = shared.tiers.policy.promotion_admission_threshold;
                shared.leader.with(|t| deferred.iter().for_each(|k| t.copies.keep_hot(k, threshold)));
            }
            plans
        }
        Purpose::Repair => {
            let in_flight = keys_in_flight(shared);
            let copying = |k: &str| in_flight.contains(k);
            let out = shared.reader.read(|s| plan_repairs(s, repairs, &copying));
            shared.leader.with(|t| {
                out.later.into_iter().for_each(|r| t.copies.keep_repair(r));
                out.parked.into_iter().for_each(|r| t.copies.park_repair(r));
            });
            out.plans
        }
        Purpose::Replicate => {
            let in_flight = keys_in_flight(shared);
            let cap = shared.tiers.policy.hot_keys.max_memory_replicas;
            shared.reader.read(|s| plan_fan_out(s, &hot, cap, &|k: &str| in_flight.contains(k)))
        }
        Purpose::User => {
            let (plans, settled) = shared.reader.read(|s| user_tasks::plan(s, waiting));
            user_tasks::settle(shared, settled);
            plans
        }
    };
    if plans.is_empty() {
        if let Some(last) = scanned_to {
            shared.leader.with(|t| t.copies.offload_cursor = last);
        }
        return false;
    }
    let now = Instant::now();
    let wanted = shared.leader.with(|t| reserve_copies(t, shared, purpose, plans, room, scanned_to, now));
    let wanted = wanted.unwrap_or_default();
    for (segment, len, unit) in &wanted {
        if let Grant::NotLeading = grant_arena(shared, *segment, *len, *unit, Relief::GiveBack).await {
            return false;
        }
    }
    !wanted.is_empty()
}

/// Reserves ranges for up to `room` of `plans` in the leader's arenas and
/// queues those copies for their store nodes; answers the arenas to grant
/// (segment, length, unit) for the copies that found no room. The offload
/// scan moves on to `scanned_to` only once every copy of its slice is
/// placed.
fn reserve_copies(
    t: &mut TermState,
    shared: &Shared,
    purpose: Purpose,
    plans: Vec<Plan>,
    room: usize,
    scanned_to: Option<String>,
    now: Instant,
) -> Vec<(SegmentId, u64, u64)> {
    let mut wanted: Vec<(SegmentId, u64, u64)> = Vec::new();
    let mut added = 0;
    for p in plans {
        let evicted_from_disk = purpose == Purpose::Offload && t.copies.was_disk_evicted(&p.key);
        // A user's copies of one key may run side by side (one per target).
        let busy = purpose != Purpose::User && t.copies.is_copying(&p.key);
        if added >= room || busy || evicted_from_disk {
            if let Some(task) = p.task {
                t.tasks.wait_again(task, p.target.segment);
            }
            continue;
        }
        let Some(len) = p.tier.range_len(p.size_bytes) else { continue };
        let id = t.copies.next_id();
        let ask = PutAsk {
            key: Copy::reservation_key(id),
            client: p.executor,
            size_bytes: len,
            replica_num: 1,
            min_replicas: 1,
            pin: Pin::None,
            upsert: false,
        };
        match t.puts.reserve(&ask, std::slice::from_ref(&p.target), &Round::default(), now) {
            Reserve::Placed(mut placed) | Reserve::Again(mut placed) => {
                let Some(target) = placed.pop() else {
                    if let Some(task) = p.task {
                        t.tasks.wait_again(task, p.target.segment);
                    }
                    continue;
                };
                if let Some(task) = p.task {
                    t.tasks.copy_started(task, id, now_ms());
                }
                t.copies.add(Copy {
                    id,
                    purpose,
                    key: p.key,
                    version: p.version,
                    size_bytes: p.size_bytes,
                    checksum: p.checksum,
                    executor: p.executor,
                    sources: p.sources,
                    target,
                    issued: now,
                    delivered: None,
                });
                added += 1;
            }
            Reserve::NeedArenas(segments) => {
                match purpose {
                    Purpose::Promote => t.copies.keep_hot(&p.key, shared.tiers.policy.promotion_admission_threshold),
                    Purpose::Offload => t.copies.keep_fresh(p.key.clone()),
                    Purpose::Repair => {
                        t.copies.keep_repair(Repair { key: p.key.clone(), version: p.version, wanted: p.wanted })
                    }
                    Purpose::Replicate => t.hot.requeue(p.key.clone()),
                    Purpose::User => {
                        if let Some(task) = p.task {
                            t.tasks.wait_again(task, p.target.segment);
                        }
                    }
                }
                for (segment, arena_len) in segments {
                    if !wanted.iter().any(|(s, _, _)| *s == segment) {
                        wanted.push((segment, arena_len, len));
                    }
                }
            }
            Reserve::Taken | Reserve::NoRoom { .. } => {
                if let Some(task) = p.task {
                    t.tasks.no_room(task, p.target.segment, now_ms());
                }
            }
        }
    }
    if added > 0 {
        tracing::debug!(copies = added, purpose = purpose.name(), "copies handed to store nodes' next pings");
        shared.tiers.copies_queued.notify_waiters();
    }
    shared.metrics.copies_issued(purpose).inc_by(added as u64);
    // The scan goes on past this slice only once every copy in it is
    // placed (the others are planned again with the arenas granted).
    if wanted.is_empty()
        && let Some(last) = scanned_to
    {
        t.copies.offload_cursor = last;
    }
    wanted
}
