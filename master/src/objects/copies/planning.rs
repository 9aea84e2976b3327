//! Which copies the copy duty makes, and to which segment: pure functions
//! of the applied state (and the policy), so each is tested without a
//! leader. Offloads to disk (eager, or of the oldest objects under memory
//! pressure), promotions of hot disk-only objects, repairs of objects that
//! lost a memory replica, and hot keys' extra memory replicas; every target
//! ranked as placement ranks a replica's (zone and host of its own first).

use mooncake_raft_store::state::SegmentEntry;
use mooncake_raft_store::{MetaState, Pin, ReplicaPlacement, StateReader, Tier};
use mooncake_segment::{ClientId, SegmentId};

use crate::leader::tiering::{OffloadMode, Repair};
use crate::objects::copy_plan::Plan;
use crate::shared::Shared;

/// Objects the eager offload looks at per tick (a slice of the key space,
/// from where the last tick stopped): about a millisecond under the state's
/// read lock, so a state of millions of objects is covered in minutes
/// without ever stalling applies.
const OFFLOAD_SCAN_PER_TICK: usize = 16_384;

/// What eager offload planning looks at besides the objects just committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scan {
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
pub(super) fn plan_offloads(
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
pub(super) fn plan_promotions(s: &MetaState, shared: &Shared, hot: &[String]) -> (Vec<Plan>, Vec<String>) {
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
pub(super) fn plan_repairs(s: &MetaState, repairs: Vec<Repair>, copying: &dyn Fn(&str) -> bool) -> RepairPlans {
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
pub(super) fn plan_fan_out(s: &MetaState, keys: &[String], cap: usize, copying: &dyn Fn(&str) -> bool) -> Vec<Plan> {
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
pub(super) struct RepairPlans {
    /// Copies to start.
    pub(super) plans: Vec<Plan>,
    /// Repairs for a later round (a copy of the object in flight, or no
    /// room on the segments it may go to yet).
    pub(super) later: Vec<Repair>,
    /// Repairs with no segment to go to: kept until a memory segment joins.
    pub(super) parked: Vec<Repair>,
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
