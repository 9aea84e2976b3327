//! Availability: the store is a cache, so a put it refuses for want of room
//! (`NO_AVAILABLE_HANDLE`) must be one it could not have served by
//! evicting. This checker judges every such refusal against an upper bound
//! of the bytes nothing could evict from the live segments at the time; a
//! refusal that left, by that bound, room for the put on as many live
//! segments as it needed is a violation (docs/JEPSEN.md, *availability*).
//!
//! What cannot be evicted, per segment, over time:
//! - [`Hold`]s the workloads' histories show: hard-pinned objects from their
//!   put's invoke until a remove answered after the put's answer (an
//!   unknown put: to the end), and every object read (leased) from the
//!   read's invoke until one TTL after its answer;
//! - [`AvailabilityConfig::reserved_bytes`]: what the master keeps apart
//!   for writers (writer chunks, arenas being filled or returned) and
//!   whatever the run puts that no history records;
//! - after each leader change, the deposed leader's arenas
//!   ([`AvailabilityConfig::stranded_bytes_per_leader_change`]), held for
//!   the release timeout, longer than any run.
//!
//! Every bound errs in the system's favour: an object counts on every
//! segment (not only where its replicas are), an unknown put as stored, a
//! read that did not answer "not found" as leased; a refusal whose interval
//! meets a [`Disruption`] is not judged (a leader change and one lease TTL
//! after it: a new leader protects everything that existed at its
//! election; a store node that may be down: its segment does not count).
//!
//! Pure: no I/O, no clock, no other mooncake crate.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::history::{History, OpKind, Outcome};
use crate::lease::{LeaseOp, LeaseOutcome, LeaseRecord};

/// Which workload made a put.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PutSource {
    /// The register workload (`workload.rs`): hard-pinned, `min_replicas` 2.
    Register,
    /// The lease workload (`lease_workload.rs`): unpinned, best effort.
    Lease,
}

/// A put the master refused with `NO_AVAILABLE_HANDLE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutRefusal {
    pub source: PutSource,
    pub key: String,
    pub size_bytes: u64,
    pub replicas: u32,
    /// Fewest replicas the put accepts (0: best effort, which is one).
    pub min_replicas: u32,
    /// On the harness's monotonic clock, ns since the run's origin.
    pub invoke_ns: u64,
    pub complete_ns: u64,
    /// The master's message ("no segment has N free contiguous bytes ...").
    pub message: String,
}

impl PutRefusal {
    /// Distinct live segments the put needed.
    pub fn segments_needed(&self) -> usize {
        self.min_replicas.max(1) as usize
    }
}

/// Why bytes could not be evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    /// A hard-pinned object.
    Pinned,
    /// An object under a KV lease (read within one TTL).
    Leased,
}

/// `bytes` that may not be evictable on any segment from `from_ns` to
/// `until_ns` (inclusive; `u64::MAX`: to the end of the run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub from_ns: u64,
    pub until_ns: u64,
    pub bytes: u64,
    pub kind: HoldKind,
}

/// What a [`Disruption`] may have done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DisruptionKind {
    /// The leader may have changed (a master fault, its heal and the
    /// elections after them).
    LeaderChange,
    /// Store node `store` (0-based) may be down, or not yet mounted again:
    /// its segment does not count.
    StoreDown { store: usize },
}

/// A span of the run (inclusive) in which something may have happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disruption {
    pub from_ns: u64,
    pub until_ns: u64,
    pub kind: DisruptionKind,
}

/// The cluster, as far as room goes, and the slack of the judgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvailabilityConfig {
    /// Store nodes, one memory segment each.
    pub segments: usize,
    /// Bytes of each segment.
    pub segment_bytes: u64,
    /// Bytes of a segment that may be held outside the histories' objects
    /// at any time: writer chunks, arenas being filled or returned, puts
    /// in flight, objects no history records, fragmentation.
    pub reserved_bytes: u64,
    /// Bytes of a segment a leader change may strand (the deposed leader's
    /// arenas), for the rest of the run.
    pub stranded_bytes_per_leader_change: u64,
    /// The masters' `--default_kv_lease_ttl`, in ns: a new leader protects
    /// what existed at its election this long.
    pub lease_ttl_ns: u64,
    /// A refusal counts as meeting a span when it came within this of it
    /// (scheduling of the harness and the masters).
    pub margin_ns: u64,
}

/// Why a refusal was not judged a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Excuse {
    /// Within a leader change or one lease TTL after it.
    LeaderChange,
    /// Fewer live segments than the put needed (a store node down).
    StoreDown,
    /// By the bound, the live segments had no room for it.
    NoRoom,
}

/// A refusal with room for the put by the bound: what the bound was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvailabilityViolation {
    pub refusal: PutRefusal,
    /// Live segments, and how many the put needed.
    pub live_segments: usize,
    /// Bytes of each live segment free or evictable, by the bound.
    pub room_bytes: u64,
    /// Held by pinned and by leased objects, at most.
    pub pinned_bytes: u64,
    pub leased_bytes: u64,
    /// Leader changes before the refusal (their stranded arenas counted).
    pub leader_changes: usize,
    /// What the leader last said before the refusal's answer: host and
    /// bytes used by objects (arenas not counted) of each memory segment.
    /// Not part of the judgement (the master's own view); empty when unknown.
    pub leader_used_bytes: Vec<(String, u64)>,
}

/// What the checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AvailabilityCounts {
    /// Refusals seen, by workload.
    pub refusals: BTreeMap<PutSource, usize>,
    /// Refusals judged (not excused by a disruption).
    pub judged: usize,
    /// Refusals not judged a violation, by why.
    pub excused: BTreeMap<Excuse, usize>,
    pub violations: usize,
    /// The largest bound of pinned plus leased bytes met by a refusal.
    pub held_bytes_max: u64,
}

/// The verdict: counts, and the violations (the first [`VIOLATIONS_KEPT`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AvailabilityVerdict {
    pub counts: AvailabilityCounts,
    pub violations: Vec<AvailabilityViolation>,
}

/// Violations kept in a verdict (the count goes on).
pub const VIOLATIONS_KEPT: usize = 100;

impl AvailabilityVerdict {
    pub fn is_valid(&self) -> bool {
        self.counts.violations == 0
    }
}

/// The sum of the bytes of holds that meet a span, per kind, in
/// O(log n): holds meeting `[a, b]` are those begun by `b` less those ended
/// before `a` (each of which began before it).
struct HoldIndex {
    by_start: Vec<(u64, u64, u64)>,
    by_end: Vec<(u64, u64, u64)>,
}

impl HoldIndex {
    fn new(holds: &[Hold]) -> Self {
        let prefix = |mut v: Vec<(u64, Hold)>| {
            v.sort_by_key(|(t, _)| *t);
            let (mut pinned, mut leased) = (0u64, 0u64);
            v.into_iter()
                .map(|(t, h)| {
                    match h.kind {
                        HoldKind::Pinned => pinned += h.bytes,
                        HoldKind::Leased => leased += h.bytes,
                    }
                    (t, pinned, leased)
                })
                .collect()
        };
        HoldIndex {
            by_start: prefix(holds.iter().map(|h| (h.from_ns, *h)).collect()),
            by_end: prefix(holds.iter().map(|h| (h.until_ns, *h)).collect()),
        }
    }

    /// (pinned, leased) bytes of the holds that meet `[a, b]`.
    fn meeting(&self, a: u64, b: u64) -> (u64, u64) {
        let upto = |v: &[(u64, u64, u64)], pred: &dyn Fn(u64) -> bool| {
            let n = v.partition_point(|(t, _, _)| pred(*t));
            n.checked_sub(1).map_or((0, 0), |i| (v[i].1, v[i].2))
        };
        let begun = upto(&self.by_start, &|t| t <= b);
        let ended = upto(&self.by_end, &|t| t < a);
        (begun.0 - ended.0, begun.1 - ended.1)
    }
}

/// Judges every refusal (see the module doc).
pub fn check_availability(
    refusals: &[PutRefusal],
    holds: &[Hold],
    disruptions: &[Disruption],
    config: &AvailabilityConfig,
) -> AvailabilityVerdict {
    let index = HoldIndex::new(holds);
    let mut verdict = AvailabilityVerdict::default();
    for refusal in refusals {
        *verdict.counts.refusals.entry(refusal.source).or_default() += 1;
        match judge(refusal, &index, disruptions, config) {
            Judgement::Excused(why, held) => {
                if why == Excuse::NoRoom {
                    verdict.counts.judged += 1;
                }
                verdict.counts.held_bytes_max = verdict.counts.held_bytes_max.max(held);
                *verdict.counts.excused.entry(why).or_default() += 1;
            }
            Judgement::Violation(v) => {
                verdict.counts.judged += 1;
                verdict.counts.violations += 1;
                verdict.counts.held_bytes_max = verdict.counts.held_bytes_max.max(v.pinned_bytes + v.leased_bytes);
                if verdict.violations.len() < VIOLATIONS_KEPT {
                    verdict.violations.push(*v);
                }
            }
        }
    }
    verdict
}

enum Judgement {
    /// Not a violation, and the held bytes the bound met (0 when not judged).
    Excused(Excuse, u64),
    Violation(Box<AvailabilityViolation>),
}

fn judge(r: &PutRefusal, index: &HoldIndex, disruptions: &[Disruption], c: &AvailabilityConfig) -> Judgement {
    let from = r.invoke_ns.saturating_sub(c.margin_ns);
    let until = r.complete_ns.saturating_add(c.margin_ns);
    let meets = |d: &Disruption, tail_ns: u64| d.from_ns <= until && d.until_ns.saturating_add(tail_ns) >= from;
    let leader_changes: Vec<&Disruption> =
        disruptions.iter().filter(|d| d.kind == DisruptionKind::LeaderChange).collect();
    if leader_changes.iter().any(|d| meets(d, c.lease_ttl_ns)) {
        return Judgement::Excused(Excuse::LeaderChange, 0);
    }
    let mut down: Vec<usize> = disruptions
        .iter()
        .filter_map(|d| match d.kind {
            DisruptionKind::StoreDown { store } if meets(d, 0) => Some(store),
            _ => None,
        })
        .collect();
    down.sort_unstable();
    down.dedup();
    let live_segments = c.segments.saturating_sub(down.len());
    if live_segments < r.segments_needed() {
        return Judgement::Excused(Excuse::StoreDown, 0);
    }
    let changes = leader_changes.iter().filter(|d| d.from_ns <= until).count();
    let (pinned_bytes, leased_bytes) = index.meeting(from, until);
    let held = pinned_bytes + leased_bytes;
    let room_bytes = c
        .segment_bytes
        .saturating_sub(c.reserved_bytes)
        .saturating_sub(c.stranded_bytes_per_leader_change.saturating_mul(changes as u64))
        .saturating_sub(held);
    if room_bytes < r.size_bytes {
        return Judgement::Excused(Excuse::NoRoom, held);
    }
    Judgement::Violation(Box::new(AvailabilityViolation {
        refusal: r.clone(),
        live_segments,
        room_bytes,
        pinned_bytes,
        leased_bytes,
        leader_changes: changes,
        leader_used_bytes: Vec::new(),
    }))
}

/// The register history's objects as holds: every put that may have
/// taken effect (not failed) holds `object_bytes` hard-pinned from its
/// invoke until the answer of the first remove invoked after its answer (a
/// forced remove: found or not, the object is gone by then), or to the end
/// (an unknown put may take effect any time; RemoveAlls leave pinned
/// objects alone).
pub fn pinned_holds(history: &History, object_bytes: u64) -> Vec<Hold> {
    let mut holds = Vec::new();
    for ops in history.by_key().values() {
        let removes: Vec<(u64, u64)> = ops
            .iter()
            .filter_map(|(_, r)| match (r.op, r.outcome, r.complete_ns) {
                (OpKind::Remove, Outcome::RemoveOk { .. }, Some(done)) => Some((r.invoke_ns, done)),
                _ => None,
            })
            .collect();
        let spans = ops
            .iter()
            .filter_map(|(_, r)| match (r.op, r.outcome, r.complete_ns) {
                (OpKind::Put { .. }, Outcome::Ok, Some(done)) => {
                    let gone = removes.iter().filter(|(invoke, _)| *invoke > done).map(|(_, removed)| *removed).min();
                    Some((r.invoke_ns, gone.unwrap_or(u64::MAX)))
                }
                (OpKind::Put { .. }, Outcome::Unknown, _) => Some((r.invoke_ns, u64::MAX)),
                _ => None,
            })
            .collect();
        holds.extend(merge_spans(spans).into_iter().map(|(from_ns, until_ns)| Hold {
            from_ns,
            until_ns,
            bytes: object_bytes,
            kind: HoldKind::Pinned,
        }));
    }
    holds
}

/// The lease workload's reads as holds: every read (GetReplicaList,
/// ExistKey) not answered "not found" may have leased its key's object
/// (`object_bytes`) from its invoke until `ttl_ns` after its answer.
pub fn leased_holds(records: &[LeaseRecord], object_bytes: u64, ttl_ns: u64) -> Vec<Hold> {
    let mut by_key: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for r in records {
        let read = matches!(r.op, LeaseOp::ReplicaList | LeaseOp::Exists);
        if read && r.outcome != LeaseOutcome::Missing {
            by_key.entry(r.key.as_str()).or_default().push((r.invoke_ns, r.complete_ns.saturating_add(ttl_ns)));
        }
    }
    by_key
        .into_values()
        .flat_map(merge_spans)
        .map(|(from_ns, until_ns)| Hold { from_ns, until_ns, bytes: object_bytes, kind: HoldKind::Leased })
        .collect()
}

/// Merges one key's spans (inclusive) into disjoint ones: a key holds one
/// object at a time (a put on a present key fails), so its overlapping
/// spans are the same bytes.
pub fn merge_spans(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (from, until) in spans {
        match out.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(until),
            _ => out.push((from, until)),
        }
    }
    out
}

impl fmt::Display for AvailabilityViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.refusal;
        write!(
            f,
            "{:?} put of {:?} ({} bytes, {} of {} live segments needed) refused at {:.3}–{:.3} s, while each \
             live segment had at least {} bytes free or evictable (at most {} pinned, {} leased, {} leader \
             changes before); the master said: {}",
            r.source,
            r.key,
            r.size_bytes,
            r.segments_needed(),
            self.live_segments,
            r.invoke_ns as f64 / 1e9,
            r.complete_ns as f64 / 1e9,
            self.room_bytes,
            self.pinned_bytes,
            self.leased_bytes,
            self.leader_changes,
            r.message
        )?;
        if !self.leader_used_bytes.is_empty() {
            let used: Vec<String> =
                self.leader_used_bytes.iter().map(|(host, used)| format!("{host} {used}")).collect();
            write!(f, " (the leader last counted bytes in objects: {})", used.join(", "))?;
        }
        Ok(())
    }
}

impl fmt::Display for AvailabilityCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let refused: usize = self.refusals.values().sum();
        let by_source: Vec<String> = self.refusals.iter().map(|(s, n)| format!("{s:?} {n}")).collect();
        let excused: Vec<String> = self.excused.iter().map(|(e, n)| format!("{e:?} {n}")).collect();
        write!(
            f,
            "{refused} puts refused for room ({}), {} judged, excused: {}; {} violations; at most {} bytes \
             pinned or leased at a refusal",
            if by_source.is_empty() { "none".to_string() } else { by_source.join(", ") },
            self.judged,
            if excused.is_empty() { "none".to_string() } else { excused.join(", ") },
            self.violations,
            self.held_bytes_max
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const SEC: u64 = 1_000 * MS;
    const KIB: u64 = 1 << 10;

    fn config() -> AvailabilityConfig {
        AvailabilityConfig {
            segments: 2,
            segment_bytes: 1024 * KIB,
            reserved_bytes: 256 * KIB,
            stranded_bytes_per_leader_change: 128 * KIB,
            lease_ttl_ns: 2 * SEC,
            margin_ns: 50 * MS,
        }
    }

    fn refusal(source: PutSource, at_ns: u64) -> PutRefusal {
        let (size_bytes, min_replicas) = match source {
            PutSource::Register => (4 * KIB, 2),
            PutSource::Lease => (16 * KIB, 0),
        };
        PutRefusal {
            source,
            key: "k".into(),
            size_bytes,
            replicas: 2,
            min_replicas,
            invoke_ns: at_ns,
            complete_ns: at_ns + 5 * MS,
            message: "no segment has 16384 free contiguous bytes".into(),
        }
    }

    fn hold(kind: HoldKind, from_ns: u64, until_ns: u64, bytes: u64) -> Hold {
        Hold { from_ns, until_ns, bytes, kind }
    }

    #[test]
    fn a_refusal_with_evictable_room_is_a_violation() {
        // 1 MiB segments, 256 KiB reserved, 400 KiB pinned: 368 KiB of room.
        let holds = [hold(HoldKind::Pinned, 0, u64::MAX, 400 * KIB), hold(HoldKind::Leased, 0, SEC, 512 * KIB)];
        let v = check_availability(&[refusal(PutSource::Lease, 10 * SEC)], &holds, &[], &config());
        assert!(!v.is_valid());
        let violation = &v.violations[0];
        assert_eq!((violation.room_bytes, violation.pinned_bytes, violation.leased_bytes), (368 * KIB, 400 * KIB, 0));
        assert!(violation.to_string().contains("the master said: no segment has"), "{violation}");
        assert_eq!(v.counts.judged, 1);
    }

    #[test]
    fn a_refusal_while_everything_is_pinned_or_leased_is_not() {
        let holds = [
            hold(HoldKind::Pinned, 0, u64::MAX, 400 * KIB),
            // Leased until one TTL after the read's answer, which the refusal meets.
            hold(HoldKind::Leased, 9 * SEC, 11 * SEC, 360 * KIB),
        ];
        let v = check_availability(&[refusal(PutSource::Lease, 10 * SEC)], &holds, &[], &config());
        assert!(v.is_valid(), "{:?}", v.violations);
        assert_eq!(v.counts.excused.get(&Excuse::NoRoom), Some(&1));
        assert_eq!(v.counts.held_bytes_max, 760 * KIB);
        // The same refusal after the lease ran out had room.
        let v = check_availability(&[refusal(PutSource::Lease, 12 * SEC)], &holds, &[], &config());
        assert!(!v.is_valid());
    }

    #[test]
    fn a_refusal_within_a_lease_ttl_of_a_leader_change_is_not_judged() {
        let change = Disruption { from_ns: 5 * SEC, until_ns: 8 * SEC, kind: DisruptionKind::LeaderChange };
        let inside = refusal(PutSource::Lease, 9 * SEC);
        let v = check_availability(std::slice::from_ref(&inside), &[], &[change], &config());
        assert!(v.is_valid());
        assert_eq!(v.counts.excused.get(&Excuse::LeaderChange), Some(&1));
        assert_eq!(v.counts.judged, 0);
        // Past the grace it is judged, with the deposed leader's arenas counted.
        let after = refusal(PutSource::Lease, 11 * SEC);
        let v = check_availability(&[after], &[], &[change], &config());
        assert!(!v.is_valid());
        assert_eq!((v.violations[0].leader_changes, v.violations[0].room_bytes), (1, 640 * KIB));
        // Enough leader changes strand every byte: no violation.
        let many: Vec<Disruption> = (0..6)
            .map(|i| Disruption { from_ns: i * SEC, until_ns: i * SEC, kind: DisruptionKind::LeaderChange })
            .collect();
        let v = check_availability(&[refusal(PutSource::Lease, 20 * SEC)], &[], &many, &config());
        assert!(v.is_valid());
    }

    #[test]
    fn a_put_needing_more_live_segments_than_there_are_is_not_judged() {
        let down = Disruption { from_ns: 5 * SEC, until_ns: 8 * SEC, kind: DisruptionKind::StoreDown { store: 0 } };
        let v = check_availability(&[refusal(PutSource::Register, 6 * SEC)], &[], &[down], &config());
        assert!(v.is_valid());
        assert_eq!(v.counts.excused.get(&Excuse::StoreDown), Some(&1));
        // A best-effort put needs one segment: the other one had room.
        let v = check_availability(&[refusal(PutSource::Lease, 6 * SEC)], &[], &[down], &config());
        assert!(!v.is_valid());
        assert_eq!(v.violations[0].live_segments, 1);
    }

    #[test]
    fn holds_that_meet_a_span_are_summed_by_kind() {
        let holds = [
            hold(HoldKind::Pinned, 0, 10, 1),
            hold(HoldKind::Pinned, 5, 20, 2),
            hold(HoldKind::Leased, 12, 30, 4),
            hold(HoldKind::Leased, 31, 40, 8),
        ];
        let index = HoldIndex::new(&holds);
        assert_eq!(index.meeting(0, 4), (1, 0));
        assert_eq!(index.meeting(10, 12), (3, 4));
        assert_eq!(index.meeting(11, 11), (2, 0));
        assert_eq!(index.meeting(21, 30), (0, 4));
        assert_eq!(index.meeting(41, 50), (0, 0));
    }

    fn op(key: &str, op: OpKind, invoke_ns: u64, complete_ns: Option<u64>, outcome: Outcome) -> crate::OpRecord {
        crate::OpRecord { process: crate::ProcessId(1), key: key.into(), op, invoke_ns, complete_ns, outcome }
    }

    #[test]
    fn a_pinned_object_holds_from_its_put_until_a_remove_after_its_answer() {
        let put = |key, value, at, outcome| op(key, OpKind::Put { value }, at, Some(at + 10), outcome);
        let removed = |key, at, existed| op(key, OpKind::Remove, at, Some(at + 10), Outcome::RemoveOk { existed });
        let history = History::new(vec![
            put("a", 1, 100, Outcome::Ok),
            // Concurrent with the put: it may have come first, so it frees nothing.
            removed("a", 105, false),
            removed("a", 200, true),
            put("a", 2, 300, Outcome::Fail),
            put("b", 3, 100, Outcome::Ok),
            // Unknown: may take effect after the remove, so it holds to the end.
            op("c", OpKind::Put { value: 4 }, 100, None, Outcome::Unknown),
            removed("c", 400, false),
        ])
        .unwrap();
        let mut spans: Vec<(u64, u64)> =
            pinned_holds(&history, 4 * KIB).iter().map(|h| (h.from_ns, h.until_ns)).collect();
        spans.sort_unstable();
        assert_eq!(spans, vec![(100, 210), (100, u64::MAX), (100, u64::MAX)]);
    }

    #[test]
    fn a_read_leases_its_object_until_a_ttl_after_its_answer_unless_it_found_nothing() {
        let read = |key: &str, op, invoke_ns, outcome| LeaseRecord {
            key: key.into(),
            op,
            invoke_ns,
            complete_ns: invoke_ns + 10,
            outcome,
        };
        let found = LeaseOutcome::Found { on_steady_store: Some(true) };
        let records = [
            read("x", LeaseOp::ReplicaList, 100, found),
            read("x", LeaseOp::Exists, 150, LeaseOutcome::Unknown),
            read("x", LeaseOp::ReplicaList, 5_000, LeaseOutcome::Missing),
            read("y", LeaseOp::Remove, 100, LeaseOutcome::Removed),
            read("y", LeaseOp::Exists, 200, found),
        ];
        let holds = leased_holds(&records, 16 * KIB, 1_000);
        let spans: Vec<(u64, u64)> = holds.iter().map(|h| (h.from_ns, h.until_ns)).collect();
        // x's two reads overlap: one hold of its bytes, not two.
        assert_eq!(spans, vec![(100, 1_160), (200, 1_210)]);
        assert!(holds.iter().all(|h| h.kind == HoldKind::Leased && h.bytes == 16 * KIB));
    }

    #[test]
    fn one_keys_overlapping_spans_merge() {
        assert_eq!(merge_spans(vec![(5, 9), (0, 3), (3, 4), (8, 12), (20, 21)]), vec![(0, 4), (5, 12), (20, 21)]);
        assert!(merge_spans(Vec::new()).is_empty());
    }
}
