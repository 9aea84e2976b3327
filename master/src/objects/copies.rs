//! The leader's copy duty and the store nodes' copy reports (docs/TIERS.md):
//! objects copied to disk (offload) and back to memory (promotion) by the
//! store node that owns the target segment, every outcome recorded through
//! the log (`AddReplica`); disk segments of expired store nodes ended after
//! their grace (`DropDetached`); disk eviction; corrupt disk ranges reported
//! by their owner dropped (`DropCorrupt`).
//!
//! A copy's target range is reserved in this leader's own arena on the
//! target segment, exactly as a put's is (`reservations.rs`, under
//! [`Copy::reservation_key`]), so nothing else is placed there while the
//! store node writes, and a copy never reported is expired with the puts.
//! The copy goes to its executor in the answer to its waiting TakeCopies
//! call ([`copies_when_queued`]), or else to its next Ping.
//!
//! Lock order as everywhere (`leader.rs`): the state is read first, the
//! soft state consulted after.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_auth::capability::Access;
use mooncake_proto::master::{self as pb, ReportCopyRequest, ReportCorruptRequest};
use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::state::SegmentEntry;
use mooncake_raft_store::{Command, CredentialHash, MetaState, Pin, ReplicaPlacement, Response, StateReader, Tier};
use mooncake_segment::{ClientId, Range, SegmentId};

use crate::duties::book;
use crate::leader::TermState;
use crate::leader::reservations::{PutAsk, Reserve, Round};
use crate::leader::tiering::{Copy, OffloadMode, Purpose, Repair};
use crate::objects::copy_plan::Plan;
use crate::objects::eviction;
use crate::objects::puts::{Grant, Relief, grant_arena};
use crate::objects::user_tasks;
use crate::raft::proposer::now_ms;
use crate::rpc::convert;
use crate::rpc::errors::{meta_status, response_status};
use crate::shared::Shared;

/// The copy duty runs this often.
pub(crate) const COPY_TICK: Duration = Duration::from_millis(250);
/// Copies one Ping hands to a store node at most (64 of 4 MiB: 256 MiB per
/// heartbeat; the node runs a few at once and queues the rest).
pub const COPIES_PER_PING_MAX: usize = 64;
/// Rounds of planning per copy-duty tick: a round that had to grant arenas
/// is followed by one that uses them (each grant is one commit).
const SCHEDULE_ROUNDS_MAX: usize = 8;
/// Copies planned in one tick at most (each tick looks again).
const COPIES_PER_TICK_MAX: usize = 256;
/// Objects the eager offload looks at per tick (a slice of the key space,
/// from where the last tick stopped): about a millisecond under the state's
/// read lock, so a state of millions of objects is covered in minutes
/// without ever stalling applies.
const OFFLOAD_SCAN_PER_TICK: usize = 16_384;
/// Repair copies in flight at most (each moves an object's size between
/// two store nodes): repairs never crowd out the store nodes' own traffic.
pub const REPAIRS_IN_FLIGHT_MAX: usize = 64;

/// `--offload_on_evict` looks at every object for the oldest ones, at most
/// once per this many ticks, and only while memory is under pressure.
const ON_EVICT_SCAN_EVERY_TICKS: u32 = 4;

/// The copy duty: idle on followers. Besides its tick, a commit of new
/// objects wakes it when offload is eager
/// ([`crate::shared::Tiers::copy_wake`]): it then plans copies of those
/// objects only, at once.
pub async fn run(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(COPY_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u32 = 0;
    loop {
        let woken = tokio::select! {
            _ = tick.tick() => false,
            () = shared.tiers.copy_wake.notified() => true,
        };
        if shared.leader.with(|_| ()).is_none() {
            continue;
        }
        if woken {
            schedule(&shared, Purpose::Offload, Scan::FreshOnly).await;
            continue;
        }
        n = n.wrapping_add(1);
        shared.duties.round(book::COPIES, copy_round(&shared, n)).await;
    }
}

/// One ticked round of the copy duty (the `n`-th).
async fn copy_round(shared: &Shared, n: u32) {
    give_up_late_copies(shared);
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
    end_detached(shared).await;
    eviction::round_on(shared, Tier::Ssd, 0).await;
}

/// What eager offload planning looks at besides the objects just committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    /// The next slice of the key space too (on the duty's tick).
    KeySpace,
    /// Nothing else (woken by a commit: cheap, however often).
    FreshOnly,
}

/// Where the replicas of an object are: their segments, hosts and zones (a
/// segment without a zone shares none).
struct Domains<'a> {
    segments: Vec<SegmentId>,
    hosts: Vec<&'a str>,
    zones: Vec<&'a str>,
}

impl<'a> Domains<'a> {
    fn of(s: &'a MetaState, replicas: &[ReplicaPlacement]) -> Self {
        let segments: Vec<&SegmentEntry> = replicas.iter().filter_map(|r| s.segment(r.segment)).collect();
        Domains {
            segments: replicas.iter().map(|r| r.segment).collect(),
            hosts: segments.iter().map(|g| g.spec.host_id.as_str()).collect(),
            zones: segments.iter().map(|g| g.spec.zone.as_str()).filter(|z| !z.is_empty()).collect(),
        }
    }
}

/// The segment of `tier` to copy an object of `len` bytes to: attached,
/// with that much free, holding no replica of it, serving the object's
/// `tenant`; as placement ranks (docs/OPERATIONS.md, "Failure
/// domains"), first one in a zone and on a host no replica of the object
/// (`held`) is in, then on a host of its own; among equals, one on a host
/// of the copy's sources (`sources`: a local copy), then the emptiest.
fn target_segment<'a>(
    s: &'a MetaState,
    tier: Tier,
    len: u64,
    held: &Domains<'_>,
    sources: &[&str],
    tenant: &str,
) -> Option<&'a SegmentEntry> {
    let fits = |g: &&SegmentEntry| g.free_bytes() >= len && may_hold(g, tenant, &held.segments);
    s.attached(tier).filter(fits).max_by_key(|g| {
        let host = g.spec.host_id.as_str();
        let new_host = !held.hosts.contains(&host);
        let new_zone = g.spec.zone.is_empty() || !held.zones.contains(&g.spec.zone.as_str());
        (new_host && new_zone, new_host, sources.contains(&host), g.free_bytes(), std::cmp::Reverse(g.spec.id))
    })
}

/// Whether segment `g` may take a copy of an object of `tenant` whose
/// replicas are on `held` (room aside).
fn may_hold(g: &SegmentEntry, tenant: &str, held: &[SegmentId]) -> bool {
    g.serves(tenant) && !held.contains(&g.spec.id)
}

/// A copy of `o` from its readable replicas on `from` to a segment of `to`.
fn plan_copy(s: &MetaState, o: &mooncake_raft_store::state::ObjectMeta, from: Tier, to: Tier) -> Option<Plan> {
    let sources: Vec<ReplicaPlacement> =
        o.replicas.iter().filter(|r| s.replica_tier(r) == Some(from) && s.is_readable(r)).cloned().collect();
    let hosts: Vec<&str> =
        sources.iter().filter_map(|r| s.segment(r.segment)).map(|g| g.spec.host_id.as_str()).collect();
    let len = to.range_len(o.size_bytes)?;
    let tenant = mooncake_segment::tenant::tenant_of(&o.key);
    let target = target_segment(s, to, len, &Domains::of(s, &o.replicas), &hosts, tenant)?;
    Some(Plan::of(o, sources, target, to, None))
}

/// Whether `o` is to be offloaded: readable, on no disk segment
/// (with `--offload_on_evict`, not hard-pinned: never evicted).
fn wants_offload(s: &MetaState, o: &mooncake_raft_store::state::ObjectMeta, on_evict: bool) -> bool {
    !(on_evict && o.pin == Pin::Hard)
        && o.replicas.iter().all(|r| s.replica_tier(r) != Some(Tier::Ssd))
        && o.replicas.iter().any(|r| s.is_readable(r))
}

/// Objects to offload, and where the scan stopped (`None`: no scan).
/// Eager: the objects just committed (`fresh`), then, on a tick, the next
/// slice of the key space after `cursor` (wrapping). `--offload_on_evict`:
/// once memory is within one eviction round of its high watermark, the
/// oldest objects of all.
fn plan_offloads(
    s: &MetaState,
    shared: &Shared,
    max: usize,
    cursor: &str,
    (fresh, scan): (&[String], Scan),
) -> (Vec<Plan>, Option<String>) {
    if s.attached(Tier::Ssd).next().is_none() {
        return (Vec::new(), None);
    }
    if shared.tiers.policy.offload == OffloadMode::OnEvict {
        let policy = &shared.write_path.eviction_policy;
        let start = (policy.high_watermark_ratio - policy.eviction_ratio).max(0.0);
        let capacity = s.tier_capacity_bytes(Tier::Dram) as f64;
        if scan == Scan::FreshOnly || (s.tier_used_bytes(Tier::Dram) as f64) < capacity * start {
            return (Vec::new(), None);
        }
        let mut objects: Vec<&mooncake_raft_store::state::ObjectMeta> =
            s.objects().filter(|o| wants_offload(s, o, true)).collect();
        if objects.len() > max {
            objects.select_nth_unstable_by_key(max, |o| o.committed_ms);
            objects.truncate(max);
        }
        objects.sort_by_key(|o| o.committed_ms);
        let plans = objects.into_iter().filter_map(|o| plan_copy(s, o, Tier::Dram, Tier::Ssd)).collect();
        return (plans, None);
    }
    let mut plans: Vec<Plan> = fresh
        .iter()
        .filter_map(|k| s.object(k))
        .filter(|o| wants_offload(s, o, false))
        .filter_map(|o| plan_copy(s, o, Tier::Dram, Tier::Ssd))
        .collect();
    if scan == Scan::FreshOnly || plans.len() >= max {
        return (plans, None);
    }
    let mut last = cursor.to_string();
    let slice = s.objects_after(cursor).chain(s.objects()).take(OFFLOAD_SCAN_PER_TICK.min(s.object_count()));
    for o in slice {
        last.clone_from(&o.key);
        if wants_offload(s, o, false)
            && let Some(plan) = plan_copy(s, o, Tier::Dram, Tier::Ssd)
        {
            plans.push(plan);
            if plans.len() >= max {
                break;
            }
        }
    }
    (plans, Some(last))
}

/// Hot objects to promote: complete, readable on disk only, as many as fit
/// in memory below its high watermark (a promotion never makes memory
/// eviction run: it would drop another object's memory copy, or the
/// promoted one, and promote again). The others are kept hot for later.
fn plan_promotions(s: &MetaState, shared: &Shared, hot: &[String]) -> (Vec<Plan>, Vec<String>) {
    let ceiling =
        (s.tier_capacity_bytes(Tier::Dram) as f64 * shared.write_path.eviction_policy.high_watermark_ratio) as u64;
    let mut used = s.tier_used_bytes(Tier::Dram);
    let mut plans = Vec::new();
    let mut deferred = Vec::new();
    for o in hot.iter().filter_map(|k| s.object(k)) {
        let in_memory = o.replicas.iter().any(|r| s.replica_tier(r) == Some(Tier::Dram) && s.is_readable(r));
        if in_memory {
            continue;
        }
        let len = Tier::Dram.range_len(o.size_bytes).unwrap_or(u64::MAX);
        if used.saturating_add(len) > ceiling {
            deferred.push(o.key.clone());
            continue;
        }
        if let Some(plan) = plan_copy(s, o, Tier::Ssd, Tier::Dram) {
            used += len;
            plans.push(plan);
        }
    }
    (plans, deferred)
}

/// The repairs a loss of `client`'s segments calls for, read before the
/// loss is proposed: each object with a memory replica there and another
/// replica elsewhere (one with none left cannot be copied), to be brought
/// back to the replicas it has now. The objects are read in slices of
/// [`OFFLOAD_SCAN_PER_TICK`], each under the state's read lock for about a
/// millisecond, so a state of millions of objects never stalls applies.
pub fn repairs_after_loss(reader: &StateReader, client: ClientId) -> Vec<Repair> {
    let lost: Vec<SegmentId> =
        reader.read(|s| s.client_segments(client).filter(|g| g.tier() == Tier::Dram).map(|g| g.spec.id).collect());
    let mut repairs = Vec::new();
    let mut cursor = String::new();
    while !lost.is_empty() {
        let (found, last) = reader.read(|s| {
            let mut found = Vec::new();
            let mut last = None;
            for o in s.objects_after(&cursor).take(OFFLOAD_SCAN_PER_TICK) {
                last = Some(o.key.clone());
                let on_lost = |r: &ReplicaPlacement| lost.contains(&r.segment);
                if o.replicas.iter().any(on_lost) && !o.replicas.iter().all(on_lost) {
                    found.push(Repair { key: o.key.clone(), version: o.version, wanted: o.replicas.len() });
                }
            }
            (found, last)
        });
        repairs.extend(found);
        match last {
            Some(key) => cursor = key,
            None => break,
        }
    }
    repairs
}

/// The copies that bring `repairs` back to their replica counts, from a
/// readable memory replica to a memory segment holding none of the
/// object; the repairs to try again later (no segment has room now, or a
/// copy of the object is in flight); and those with no segment to go to,
/// parked until a memory segment joins (a node restarted or added).
/// Repairs of objects removed, replaced or whole again are done.
fn plan_repairs(s: &MetaState, repairs: Vec<Repair>, copying: &dyn Fn(&str) -> bool) -> RepairPlans {
    let mut out = RepairPlans::default();
    for r in repairs {
        let Some(o) = s.object(&r.key).filter(|o| o.version == r.version && o.replicas.len() < r.wanted) else {
            continue;
        };
        if copying(&r.key) {
            out.later.push(r);
            continue;
        }
        match plan_copy(s, o, Tier::Dram, Tier::Dram) {
            Some(plan) => out.plans.push(Plan { wanted: r.wanted, ..plan }),
            None => {
                // Somewhere to go later (memory that serves it and holds
                // no replica, full now), or nowhere until a segment joins.
                let tenant = mooncake_segment::tenant::tenant_of(&o.key);
                let held: Vec<SegmentId> = o.replicas.iter().map(|p| p.segment).collect();
                if s.attached(Tier::Dram).any(|g| may_hold(g, tenant, &held)) {
                    out.later.push(r);
                } else {
                    out.parked.push(r);
                }
            }
        }
    }
    out
}

/// One more memory replica for each of the admitted hot `keys` with
/// fewer than `cap` readable memory replicas (and at least one to copy
/// from), on a memory segment as placement would pick for a replica (zone
/// and host of their own first). A key whose copy is in flight waits for
/// its next admission.
fn plan_fan_out(s: &MetaState, keys: &[String], cap: usize, copying: &dyn Fn(&str) -> bool) -> Vec<Plan> {
    let memory = |o: &mooncake_raft_store::state::ObjectMeta| {
        o.replicas.iter().filter(|r| s.replica_tier(r) == Some(Tier::Dram) && s.is_readable(r)).count()
    };
    keys.iter()
        .filter(|k| !copying(k))
        .filter_map(|k| s.object(k))
        .filter(|o| (1..cap).contains(&memory(o)))
        .filter_map(|o| plan_copy(s, o, Tier::Dram, Tier::Dram))
        .collect()
}

/// What [`plan_repairs`] made of a slice of the backlog.
#[derive(Default)]
struct RepairPlans {
    /// Copies to start.
    plans: Vec<Plan>,
    /// Repairs for a later round (a copy of the object in flight, or no
    /// room on the segments it may go to yet).
    later: Vec<Repair>,
    /// Repairs with no segment to go to: kept until a memory segment joins.
    parked: Vec<Repair>,
}

/// The keys of every copy in flight (none when not leading).
fn keys_in_flight(shared: &Shared) -> std::collections::HashSet<String> {
    shared.leader.with(|t| t.copies.keys_in_flight()).unwrap_or_default()
}

/// Plans copies for `purpose` and reserves their targets; grants the
/// arenas the reservations asked for (used by the next round at once).
async fn schedule(shared: &Shared, purpose: Purpose, scan: Scan) {
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

/// Gives up copies not reported in time (their executor died or its report
/// was lost): the object is planned again; the range stays reserved until
/// the put table expires it.
fn give_up_late_copies(shared: &Shared) {
    let timeout = shared.tiers.policy.copy_timeout;
    let gone = shared.leader.with(|t| t.copies.expire(Instant::now(), timeout)).unwrap_or_default();
    for c in &gone {
        if c.purpose == Purpose::User {
            let why = format!("processing timeout (the copy was not reported within {} s)", timeout.as_secs());
            user_tasks::copy_reported(shared, c.id, Err(why));
        }
        shared.metrics.copies_failed(c.purpose).inc();
        tracing::warn!(key = %c.key, executor = %c.executor, purpose = c.purpose.name(), "copy not reported in time; given up");
    }
}

/// Ends detached disk segments past their grace.
async fn end_detached(shared: &Shared) {
    let detached: Vec<SegmentId> =
        shared.reader.read(|s| s.segments().filter(|g| !g.is_attached()).map(|g| g.spec.id).collect());
    let grace = shared.tiers.policy.disk_replica_grace;
    let Some(ended) = shared.leader.with(|t| t.copies.detached_past_grace(&detached, Instant::now(), grace)) else {
        return;
    };
    if ended.is_empty() {
        return;
    }
    match shared.write_path.proposer.propose(Command::DropDetached { segments: ended.clone() }).await {
        Ok(Response::Removed { count }) => tracing::info!(
            count,
            grace_s = grace.as_secs(),
            segments = ?ended,
            "disk segments of store nodes that did not come back within the grace dropped with their objects"
        ),
        Ok(other) => {
            tracing::warn!(?other, "dropping detached disk segments refused");
            shared.duties.failed(book::COPIES, now_ms(), format!("dropping detached disk segments refused: {other:?}"));
        }
        Err(s) => {
            tracing::warn!(message = %s.message, "dropping detached disk segments failed");
            shared.duties.failed(book::COPIES, now_ms(), format!("dropping detached disk segments: {}", s.message));
        }
    }
}

/// Longest a TakeCopies call is held (`TakeCopiesRequest.wait_ms`).
pub const COPY_WAIT_MAX: Duration = Duration::from_secs(5);

/// [`copies_for_ping`], holding the answer up to `wait` (at most
/// [`COPY_WAIT_MAX`]) while none is queued for `client`: a store node
/// asking for copies gets them as soon as they are planned, not at its
/// next heartbeat. With them, the arena fences of its segments it has yet
/// to acknowledge; a fence that moves answers the call at once
/// (`arena_fences.rs`). Empty when nothing came in time (or leadership
/// was lost).
pub async fn copies_when_queued(
    shared: &Shared,
    client: ClientId,
    wait: Duration,
) -> (Vec<pb::CopyTask>, Vec<pb::ArenaFence>) {
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

/// The copies to hand to `client` in its Ping answer, with what it needs to
/// read the sources and write the target.
pub fn copies_for_ping(shared: &Shared, client: ClientId) -> Vec<pb::CopyTask> {
    let copies = shared.leader.with(|t| t.copies.take_for(client, COPIES_PER_PING_MAX, Instant::now()));
    let Some(copies) = copies.filter(|c| !c.is_empty()) else { return Vec::new() };
    shared.reader.read(|s| {
        copies
            .iter()
            .map(|c| {
                let mut sources: Vec<pb::Replica> =
                    c.sources.iter().map(|r| convert::replica_pb(s, r, convert::ReplicaState::Complete)).collect();
                shared.auth.capabilities.grant(s, &mut sources, Access::Read);
                let placement = ReplicaPlacement { segment: c.target.segment, range: c.target.range };
                let mut target = vec![pb::Replica {
                    arena_id: c.target.arena.0,
                    ..convert::replica_pb(s, &placement, convert::ReplicaState::Processing)
                }];
                shared.auth.capabilities.grant(s, &mut target, Access::Write);
                pb::CopyTask {
                    task_id: c.id,
                    key: c.key.clone(),
                    size: c.size_bytes,
                    checksum: c.checksum,
                    sources,
                    target: target.pop(),
                }
            })
            .collect()
    })
}

/// A store node's report of a copy: a written copy is recorded
/// (`AddReplica`); a failed one releases its range.
pub async fn report_copy(shared: &Shared, req: &ReportCopyRequest, credential: &CredentialHash) -> Status {
    let client = ClientId(req.client_id);
    if let Err(e) = shared.reader.read(|s| s.check_credential(client, credential)) {
        return meta_status(&e);
    }
    let now = Instant::now();
    let Some(found) = shared.leader.with(|t| t.copies.finish(req.task_id, client)) else {
        return shared.not_leader();
    };
    let Some(copy) = found else {
        return Status::with(
            ErrorCode::ObjectNotFound,
            format!(
                "copy {} is not one this leader handed to {client} (given up after {} s, or handed out by an \
                 earlier leader); nothing to do",
                req.task_id,
                shared.tiers.policy.copy_timeout.as_secs()
            ),
        );
    };
    let reservation = Copy::reservation_key(copy.id);
    if !req.error.is_empty() {
        shared.leader.with(|t| t.puts.revoke(&reservation, client, None));
        if copy.purpose == Purpose::User {
            user_tasks::copy_reported(shared, copy.id, Err(format!("TRANSFER_FAIL ({})", req.error)));
        }
        shared.metrics.copies_failed(copy.purpose).inc();
        tracing::warn!(key = %copy.key, executor = %client, purpose = copy.purpose.name(), error = %req.error, "copy failed");
        return Status::ok();
    }
    let cmd = Command::AddReplica { key: copy.key.clone(), version: copy.version, replica: copy.target.clone() };
    let answer = shared.write_path.proposer.propose(cmd).await;
    // Applied or refused, the range is not being written any more.
    shared.leader.with(|t| t.puts.finish(&reservation, client));
    match answer {
        Ok(r) => {
            let status = response_status(&r);
            if copy.purpose == Purpose::User {
                // A replica there already (another task's copy) is as good.
                let outcome = match status.error_code() {
                    ErrorCode::Ok | ErrorCode::ObjectAlreadyExists => Ok(()),
                    code => Err(format!("{} ({})", code.as_str_name(), status.message)),
                };
                user_tasks::copy_reported(shared, copy.id, outcome);
            }
            if status.error_code() == ErrorCode::Ok {
                if copy.purpose == Purpose::Replicate {
                    shared.leader.with(|t| t.hot.note_added(&copy.key, copy.version, copy.target.segment));
                    tracing::info!(key = %copy.key, segment = %copy.target.segment, "a hot key got a memory replica");
                }
                shared.metrics.copies_done(copy.purpose).inc();
                shared
                    .metrics
                    .copy_latency(copy.purpose)
                    .observe(now.saturating_duration_since(copy.issued).as_secs_f64());
            } else {
                shared.metrics.copies_failed(copy.purpose).inc();
                tracing::debug!(key = %copy.key, message = %status.message, "copy not recorded");
            }
            status
        }
        Err(s) => {
            if copy.purpose == Purpose::User {
                user_tasks::copy_reported(shared, copy.id, Err(format!("RPC_FAIL ({})", s.message)));
            }
            s
        }
    }
}

/// A store node's report of corrupt ranges of its segment: the replicas on
/// them are dropped. Answers the status and how many replicas went.
pub async fn report_corrupt(shared: &Shared, req: &ReportCorruptRequest, credential: &CredentialHash) -> (Status, u64) {
    if let Err(s) = shared.require_leader() {
        return (s, 0);
    }
    let ranges: Vec<Range> = req.ranges.iter().map(|r| Range::new(r.offset, r.len)).collect();
    let cmd = Command::DropCorrupt {
        client: ClientId(req.client_id),
        credential: *credential,
        segment: SegmentId(req.segment_id),
        ranges,
    };
    match shared.write_path.proposer.propose(cmd).await {
        Ok(Response::Removed { count }) => {
            shared.metrics.corrupt_replicas_dropped.inc_by(count);
            tracing::warn!(
                client = req.client_id,
                segment = %SegmentId(req.segment_id),
                ranges = req.ranges.len(),
                dropped = count,
                "a store node found corrupt disk ranges; the replicas on them are dropped"
            );
            (Status::ok(), count)
        }
        Ok(r) => (response_status(&r), 0),
        Err(s) => (s, 0),
    }
}

/// Counts reads of disk-only objects for promotion (`--promotion_on_hit`):
/// answers whose replicas are all on disk.
pub fn count_hits(shared: &Shared, keys: &[String], answers: &[pb::GetReplicaListResponse]) {
    if !shared.tiers.policy.promotion_on_hit {
        return;
    }
    let disk_only = |a: &pb::GetReplicaListResponse| {
        !a.replicas.is_empty() && a.replicas.iter().all(|r| r.tier == pb::Tier::Ssd as i32)
    };
    let hot: Vec<&String> = keys.iter().zip(answers).filter(|(_, a)| disk_only(a)).map(|(k, _)| k).collect();
    if hot.is_empty() {
        return;
    }
    shared.leader.with(|t| {
        for k in hot {
            t.copies.hit(k);
        }
    });
}

#[cfg(test)]
mod tests {
    use mooncake_raft_store::Request;
    use mooncake_raft_store::testing::{SegmentSpecExt, mount_cmd, segment};
    use mooncake_segment::{ClientId, Range};

    use super::*;

    /// Why: a copy on the host (or zone) that already holds the object's
    /// only other replica is lost with it; placement avoids that, copies
    /// between tiers must too, and fall back to a local copy only among
    /// equals.
    #[test]
    fn a_copy_goes_to_a_zone_and_host_without_a_replica_then_a_host_of_its_own_then_the_sources() {
        let mut s = MetaState::default();
        let disks = [(11, "h1", "za"), (12, "h2", "za"), (13, "h3", "zb")];
        for (i, (id, host, zone)) in disks.into_iter().enumerate() {
            let cmd = mount_cmd(ClientId(100 + i as u64), segment(id, 1 << 20, host).ssd().zone(zone));
            s.apply(&Request { ts_ms: 1, cmd });
        }
        let replica = |id: u64| ReplicaPlacement { segment: SegmentId(id), range: Range::new(0, 4096) };
        let mem = [(1, "h1", "za"), (2, "h2", "za")];
        for (i, (id, host, zone)) in mem.into_iter().enumerate() {
            let cmd = mount_cmd(ClientId(200 + i as u64), segment(id, 1 << 20, host).zone(zone));
            s.apply(&Request { ts_ms: 1, cmd });
        }
        let target = |held: &[u64], sources: &[&str]| {
            let held: Vec<ReplicaPlacement> = held.iter().map(|id| replica(*id)).collect();
            target_segment(&s, Tier::Ssd, 4096, &Domains::of(&s, &held), sources, "default").map(|g| g.spec.id.0)
        };
        // A replica on h1 (zone a): the disk of zone b, not h1's own.
        assert_eq!(target(&[1], &["h1"]), Some(13));
        // Replicas in both zones: a host of its own (h3), still.
        assert_eq!(target(&[1, 13], &["h1"]), Some(12), "h2 holds none; h3 and h1 do");
        // Every host holds one: the sources' host, a local copy.
        assert_eq!(target(&[1, 2, 13], &["h2"]), Some(12));
    }
}
