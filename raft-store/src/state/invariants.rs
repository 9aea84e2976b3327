//! What the state promises about itself, and the checks that hold it to
//! that. Two layers:
//!
//! - **Per command, every build.** Every free, allocation and reservation of
//!   a segment's bytes and every arena grant is checked as it happens, in
//!   O(1) or O(log n): a range freed on a segment that is gone, freed twice,
//!   freed beyond what its segment has in use, or handed out beyond the end
//!   of the segment. [`SegmentEntry::free`], [`SegmentEntry::allocate`] and
//!   [`SegmentEntry::reserve`] detect it and return the violation; `apply`
//!   then ends the process (`fatal::invariant_broken`) before anything
//!   reads or replicates the broken state. A restart rebuilds the state from
//!   the last snapshot and the log.
//! - **The whole state, debug builds and tests.** [`MetaState::check_invariants`]
//!   scans everything (O(n log n)): no two holders share a byte of a
//!   segment, each segment's accounting is exact, every held range and
//!   arena lies inside a mounted segment, arenas never overlap and their
//!   index agrees, every record is well formed, and the counters are ahead
//!   of every id they handed out. It runs after every applied entry while
//!   the state holds at most [`SCAN_EVERY_ENTRY_RECORDS_MAX`] records (as
//!   do all the states the raft-store tests build); on a larger state, once
//!   the entries since the last scan have earned it, at
//!   [`SCAN_RECORDS_PER_ENTRY`] records each. A scan after every entry
//!   would make a debug master's apply quadratic in its object count (a
//!   cluster test putting thousands of objects fell behind its timeouts);
//!   this way it costs little, and a broken state is still caught, some
//!   entries late.
//!
//! Both are pure functions of the state: no clock, no randomness. A valid
//! command never trips them, so they change no answer.

use std::collections::BTreeMap;
use std::fmt;

use mooncake_segment::{ALLOC_ALIGN_BYTES, AllocError, ClientId, Range, SegmentId};

use super::{ARENA_EXTENTS_MAX, MetaState, ObjectMeta, REPLICA_NUM_MAX, SegmentEntry, validate_stored_key};
use crate::command::{ArenaId, DISK_ALIGN_BYTES, ObjectVersion, ReplicaPlacement, Tier};

/// What a violation is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Object(String),
    Retired(ObjectVersion),
    Arena(ArenaId),
    Segment(SegmentId),
    Client(ClientId),
    /// The remembered answers of `Command::Once`.
    Requests,
    /// A tenant's usage (derived from its objects).
    Tenant(String),
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Object(key) => write!(f, "object {key:?}"),
            Record::Retired(v) => write!(f, "retired object v{}", v.0),
            Record::Arena(id) => write!(f, "{id}"),
            Record::Segment(id) => write!(f, "segment {id}"),
            Record::Client(id) => write!(f, "{id}"),
            Record::Requests => write!(f, "the request-id memory"),
            Record::Tenant(name) => write!(f, "tenant {name:?}'s usage"),
        }
    }
}

/// The first inconsistency found in the state. The per-command checks of
/// every build find `UnknownSegment` to `ReservedTwice` (and, rarer, an
/// allocator with more free bytes than capacity, `Accounting`, or an
/// unaligned range or a request id after the request clock, `Malformed`);
/// the full scan finds every kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvariantViolation {
    #[error("{holder} holds {range} on {segment}, which is not mounted")]
    UnknownSegment { holder: Record, segment: SegmentId, range: Range },
    #[error("{range} of {holder} lies beyond the end of {segment} ({size_bytes} bytes)")]
    BeyondSegment { holder: Record, segment: SegmentId, range: Range, size_bytes: u64 },
    #[error("freeing {range} of {holder} on {segment}, which has only {used_bytes} bytes in use")]
    FreedMoreThanUsed { holder: Record, segment: SegmentId, range: Range, used_bytes: u64 },
    #[error("freeing {range} of {holder} on {segment}, which is already (partly) free: a double free")]
    DoubleFree { holder: Record, segment: SegmentId, range: Range },
    #[error("reserving {range} for {holder} on {segment}, which is already (partly) in use")]
    ReservedTwice { holder: Record, segment: SegmentId, range: Range },
    #[error("{first} ({first_range}) and {second} ({second_range}) share bytes of {segment}")]
    SharedBytes { segment: SegmentId, first: Record, first_range: Range, second: Record, second_range: Range },
    #[error("{segment} of {size_bytes} bytes counts {used_bytes} used + {free_bytes} free bytes of {capacity_bytes}")]
    Accounting { segment: SegmentId, size_bytes: u64, capacity_bytes: u64, used_bytes: u64, free_bytes: u64 },
    #[error("{segment} has {used_bytes} bytes in use, but the ranges it holds add up to {held_bytes}")]
    HeldBytes { segment: SegmentId, used_bytes: u64, held_bytes: u64 },
    #[error("{range} of {holder} on {segment} is free in the segment's allocator")]
    HeldRangeFree { holder: Record, segment: SegmentId, range: Range },
    #[error("{first} ({first_extent}) and {second} ({second_extent}) overlap on {segment}")]
    ArenasOverlap { segment: SegmentId, first: ArenaId, first_extent: Range, second: ArenaId, second_extent: Range },
    #[error("the arena index of {segment} at offset {offset}: {problem}")]
    ArenaIndex { segment: SegmentId, offset: u64, problem: String },
    #[error("{record}: {problem}")]
    Malformed { record: Record, problem: String },
}

use InvariantViolation as V;

/// Who holds a range (borrowed; made a [`Record`] only for a violation).
#[derive(Clone, Copy, Debug)]
pub(super) enum HeldBy<'a> {
    Object(&'a str),
    Retired(ObjectVersion),
    Arena(ArenaId),
}

impl HeldBy<'_> {
    fn record(self) -> Record {
        match self {
            HeldBy::Object(key) => Record::Object(key.to_string()),
            HeldBy::Retired(v) => Record::Retired(v),
            HeldBy::Arena(id) => Record::Arena(id),
        }
    }
}

/// Debug builds scan a state of up to this many records (objects,
/// retired objects, arenas, segments, clients, request ids)
/// after every applied entry: about 0.2 ms of an unoptimised build (0.7 µs
/// a record). Every state the raft-store tests build is this small.
pub const SCAN_EVERY_ENTRY_RECORDS_MAX: u64 = 256;
/// On a larger state, the records the scan may cover per applied entry, on
/// average: about 20 µs, lost in a debug master's per-entry cost.
pub const SCAN_RECORDS_PER_ENTRY: u64 = 32;

fn malformed(record: Record, problem: impl Into<String>) -> InvariantViolation {
    V::Malformed { record, problem: problem.into() }
}

// ---------------------------------------------------------------- per command

impl SegmentEntry {
    /// Frees `range` of `holder`. Refuses, leaving the allocator as it was,
    /// a range beyond the segment, larger than what is in use, or (partly)
    /// free already.
    pub(super) fn free(&mut self, holder: HeldBy<'_>, range: Range) -> Result<(), InvariantViolation> {
        let segment = self.spec.id;
        self.check_inside(holder, range)?;
        let used_bytes = self.used_bytes_checked()?;
        if range.len > used_bytes {
            return Err(V::FreedMoreThanUsed { holder: holder.record(), segment, range, used_bytes });
        }
        self.alloc.free(range).map_err(|e| match e {
            AllocError::NotAllocated { .. } | AllocError::Overlap { .. } => {
                V::DoubleFree { holder: holder.record(), segment, range }
            }
            AllocError::OutOfBounds { .. } => malformed(holder.record(), format!("freeing on {segment}: {e}")),
        })
    }

    /// Marks `range` of `holder` used; the caller checked it is free.
    pub(super) fn reserve(&mut self, holder: HeldBy<'_>, range: Range) -> Result<(), InvariantViolation> {
        let segment = self.spec.id;
        self.check_inside(holder, range)?;
        self.alloc.reserve(range).map_err(|e| match e {
            AllocError::Overlap { .. } | AllocError::NotAllocated { .. } => {
                V::ReservedTwice { holder: holder.record(), segment, range }
            }
            AllocError::OutOfBounds { .. } => malformed(holder.record(), format!("reserving on {segment}: {e}")),
        })
    }

    /// `range` ends within the segment's declared size: the memory its
    /// store node really has, whatever the allocator believes.
    pub(super) fn check_inside(&self, holder: HeldBy<'_>, range: Range) -> Result<(), InvariantViolation> {
        match range.offset.checked_add(range.len) {
            Some(end) if end <= self.spec.size_bytes => Ok(()),
            _ => Err(V::BeyondSegment {
                holder: holder.record(),
                segment: self.spec.id,
                range,
                size_bytes: self.spec.size_bytes,
            }),
        }
    }

    /// Used bytes, refusing an allocator whose free bytes exceed its
    /// capacity (its `used_bytes` would wrap).
    fn used_bytes_checked(&self) -> Result<u64, InvariantViolation> {
        let (capacity_bytes, free_bytes) = (self.alloc.capacity_bytes(), self.alloc.free_bytes());
        capacity_bytes.checked_sub(free_bytes).ok_or(V::Accounting {
            segment: self.spec.id,
            size_bytes: self.spec.size_bytes,
            capacity_bytes,
            used_bytes: 0,
            free_bytes,
        })
    }

    /// The allocator covers the declared size (rounded down to the
    /// allocation unit), and used + free is its capacity. The allocator
    /// counts free bytes and derives used ones, so the sum holds as long as
    /// free bytes do not exceed the capacity; that used bytes are exactly
    /// the bytes held is `check_held_bytes`.
    fn check_accounting(&self) -> Result<(), InvariantViolation> {
        let used_bytes = self.used_bytes_checked()?;
        let (capacity_bytes, free_bytes) = (self.alloc.capacity_bytes(), self.alloc.free_bytes());
        let usable_bytes = self.spec.size_bytes - self.spec.size_bytes % ALLOC_ALIGN_BYTES;
        if capacity_bytes != usable_bytes {
            return Err(V::Accounting {
                segment: self.spec.id,
                size_bytes: self.spec.size_bytes,
                capacity_bytes,
                used_bytes,
                free_bytes,
            });
        }
        Ok(())
    }
}

impl MetaState {
    /// Frees every replica of `holder`. A replica on a segment that is gone
    /// is a violation too: dropping a segment drops every replica on it.
    pub(super) fn free_replicas(
        &mut self,
        holder: HeldBy<'_>,
        replicas: &[ReplicaPlacement],
    ) -> Result<(), InvariantViolation> {
        for r in replicas {
            let Some(seg) = self.segments.get_mut(&r.segment) else {
                return Err(V::UnknownSegment { holder: holder.record(), segment: r.segment, range: r.range });
            };
            seg.free(holder, r.range)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- the whole state

impl MetaState {
    /// Checks every invariant of the state and returns the first violation
    /// (see the module doc). O(n log n): `apply` runs it in debug builds
    /// (`scan_if_due`), never on the release apply path.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.check_segments()?;
        self.check_clients()?;
        self.check_records()?;
        self.check_held_bytes()?;
        self.check_arenas()?;
        self.requests.check()
    }

    /// Debug builds, after each entry: the full scan, on a small state
    /// every time, on a larger one once the entries since the last scan
    /// have earned it ([`SCAN_RECORDS_PER_ENTRY`] each).
    #[cfg(debug_assertions)]
    pub(super) fn scan_if_due(&mut self) -> Result<(), InvariantViolation> {
        let records = self.record_count();
        self.scan_credit_records = self.scan_credit_records.saturating_add(SCAN_RECORDS_PER_ENTRY);
        if records > SCAN_EVERY_ENTRY_RECORDS_MAX && self.scan_credit_records < records {
            return Ok(());
        }
        self.scan_credit_records = 0;
        self.check_invariants()
    }

    /// Records the full scan covers.
    #[cfg(debug_assertions)]
    fn record_count(&self) -> u64 {
        let counts = [
            self.objects.len(),
            self.retired.len(),
            self.arenas.len(),
            self.segments.len(),
            self.clients.len(),
            self.requests.count(),
        ];
        counts.iter().map(|n| *n as u64).sum()
    }

    fn check_segments(&self) -> Result<(), InvariantViolation> {
        // Not `validate_segment` or the one-segment-per-memory rule: those
        // refuse commands, and a later version may make them stricter while
        // its states still hold what earlier versions of format v1 accepted.
        for (id, s) in &self.segments {
            let record = Record::Segment(*id);
            if s.spec.id != *id {
                return Err(malformed(record, format!("stored under {id} but declares {}", s.spec.id)));
            }
            s.check_accounting()?;
            // A detached disk segment outlives its owner's registration.
            if s.is_attached() && !self.clients.contains_key(&s.owner) {
                return Err(malformed(record, format!("its owner {} is not registered", s.owner)));
            }
            if let Some(d) = s.detached() {
                if s.tier() != Tier::Ssd {
                    return Err(malformed(record, "detached, but not a disk segment"));
                }
                if d.since_ms > self.now_ms {
                    return Err(malformed(record, self.in_the_future("detached", d.since_ms)));
                }
            }
        }
        Ok(())
    }

    fn check_clients(&self) -> Result<(), InvariantViolation> {
        for (id, c) in &self.clients {
            if c.id != *id {
                return Err(malformed(Record::Client(*id), format!("stored under {id} but is {}", c.id)));
            }
            if c.registered_ms > self.now_ms {
                return Err(malformed(Record::Client(*id), self.in_the_future("registered", c.registered_ms)));
            }
        }
        Ok(())
    }

    fn in_the_future(&self, what: &str, ms: u64) -> String {
        format!("{what} at {ms} ms, after the state's time {} ms", self.now_ms)
    }

    /// Objects and retired objects: their shape, their
    /// times, and versions that are unique and below the counter.
    fn check_records(&self) -> Result<(), InvariantViolation> {
        let count = self.objects.len() + self.retired.len();
        let mut versions: Vec<(ObjectVersion, HeldBy<'_>)> = Vec::with_capacity(count);
        let mut usage: std::collections::BTreeMap<&str, super::TenantUsage> = Default::default();
        for o in self.objects.values() {
            self.check_object(o)?;
            versions.push((o.version, HeldBy::Object(&o.key)));
            usage.entry(mooncake_segment::tenant::tenant_of(&o.key)).or_default().add(o.size_bytes);
        }
        let kept: std::collections::BTreeMap<&str, super::TenantUsage> = self.objects.usages().collect();
        if let Some((name, u)) = usage.iter().find(|(name, u)| kept.get(*name) != Some(*u)) {
            let problem = format!("kept as {:?}, its objects make {u:?}", kept.get(name));
            return Err(malformed(Record::Tenant(name.to_string()), problem));
        }
        if let Some(name) = kept.keys().find(|name| !usage.contains_key(*name)) {
            return Err(malformed(Record::Tenant(name.to_string()), "kept, but the tenant has no object"));
        }
        for (v, r) in &self.retired {
            let holder = HeldBy::Retired(*v);
            self.check_held(holder, r.version, &r.replicas, r.retired_ms)?;
            versions.push((*v, holder));
        }
        versions.sort_by_key(|(v, _)| *v);
        if let Some((v, holder)) = versions.last()
            && v.0 >= self.next_version
        {
            let problem = format!("version {} is not below the counter {}", v.0, self.next_version);
            return Err(malformed(holder.record(), problem));
        }
        if let Some(pair) = versions.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            let (v, holder) = pair[1];
            return Err(malformed(holder.record(), format!("version {} is used twice", v.0)));
        }
        Ok(())
    }

    fn check_object(&self, o: &ObjectMeta) -> Result<(), InvariantViolation> {
        let holder = HeldBy::Object(&o.key);
        let bad = |problem: String| Err(malformed(holder.record(), problem));
        if let Err(e) = validate_stored_key(&o.key) {
            return bad(e.to_string());
        }
        check_replica_set(holder, &o.replicas)?;
        if o.size_bytes == 0 || o.size_bytes.checked_next_multiple_of(DISK_ALIGN_BYTES).is_none() {
            return bad(format!("size {} bytes", o.size_bytes));
        }
        let tenant = mooncake_segment::tenant::tenant_of(&o.key);
        for r in &o.replicas {
            if let Some(seg) = self.segments.get(&r.segment)
                && !seg.serves(tenant)
            {
                return bad(format!("replica on {}, which serves tenant {:?} only", r.segment, seg.tenant()));
            }
            // An unknown segment is `check_held_bytes`'s to report.
            let Some(tier) = self.replica_tier(r) else { continue };
            let len = tier.range_len(o.size_bytes).unwrap_or(0);
            // Disk ranges are whole blocks (memory offsets are the allocator's to check).
            let misplaced = tier == Tier::Ssd && !r.range.offset.is_multiple_of(tier.align_bytes());
            if r.range.len != len || misplaced {
                return bad(format!(
                    "replica {} on {} ({}) is not {len} bytes on a {}-byte boundary (its size, aligned)",
                    r.range,
                    r.segment,
                    tier.name(),
                    tier.align_bytes()
                ));
            }
        }
        if o.committed_ms > self.now_ms {
            return bad(self.in_the_future("committed", o.committed_ms));
        }
        Ok(())
    }

    /// A retired object, stored under the version of `holder`.
    fn check_held(
        &self,
        holder: HeldBy<'_>,
        version: ObjectVersion,
        replicas: &[ReplicaPlacement],
        since_ms: u64,
    ) -> Result<(), InvariantViolation> {
        let HeldBy::Retired(key) = holder else { return Ok(()) };
        if key != version {
            return Err(malformed(holder.record(), format!("stored under v{} but is v{}", key.0, version.0)));
        }
        check_replica_set(holder, replicas)?;
        if since_ms > self.now_ms {
            return Err(malformed(holder.record(), self.in_the_future("held since", since_ms)));
        }
        Ok(())
    }

    /// Every held range (objects, retired objects) lies
    /// inside a mounted segment, no two share a byte, none is free in the
    /// allocator, and each segment's used bytes are exactly what they hold.
    fn check_held_bytes(&self) -> Result<(), InvariantViolation> {
        let mut by_segment: BTreeMap<SegmentId, Vec<(Range, HeldBy<'_>)>> = BTreeMap::new();
        let objects = self.objects.values().map(|o| (HeldBy::Object(&o.key), &o.replicas));
        let retired = self.retired.values().map(|r| (HeldBy::Retired(r.version), &r.replicas));
        for (holder, replicas) in objects.chain(retired) {
            for r in replicas {
                let Some(seg) = self.segments.get(&r.segment) else {
                    return Err(V::UnknownSegment { holder: holder.record(), segment: r.segment, range: r.range });
                };
                seg.check_inside(holder, r.range)?;
                by_segment.entry(r.segment).or_default().push((r.range, holder));
            }
        }
        for seg in self.segments.values() {
            let mut held = by_segment.remove(&seg.spec.id).unwrap_or_default();
            held.sort_by_key(|(range, _)| (range.offset, range.len));
            for pair in held.windows(2) {
                let ((a, a_holder), (b, b_holder)) = (pair[0], pair[1]);
                if a.end() > b.offset {
                    let (first, second) = (a_holder.record(), b_holder.record());
                    return Err(V::SharedBytes {
                        segment: seg.spec.id,
                        first,
                        first_range: a,
                        second,
                        second_range: b,
                    });
                }
            }
            // Both in offset order, the held ranges disjoint: one walk.
            let mut free = seg.alloc.free_extents().peekable();
            for (range, holder) in &held {
                while free.next_if(|f| f.end() <= range.offset).is_some() {}
                if free.peek().is_some_and(|f| f.offset < range.end()) {
                    return Err(V::HeldRangeFree { holder: holder.record(), segment: seg.spec.id, range: *range });
                }
            }
            // Disjoint ranges inside the capacity: the sum cannot overflow.
            let held_bytes: u64 = held.iter().map(|(r, _)| r.len).sum();
            if held_bytes != seg.used_bytes() {
                return Err(V::HeldBytes { segment: seg.spec.id, used_bytes: seg.used_bytes(), held_bytes });
            }
        }
        Ok(())
    }

    /// Arenas: on a mounted segment, inside it, sorted disjoint extents,
    /// no two arenas overlapping, ids below the counter, and the by-offset
    /// index naming exactly their extents.
    fn check_arenas(&self) -> Result<(), InvariantViolation> {
        let mut by_segment: BTreeMap<SegmentId, Vec<(Range, ArenaId)>> = BTreeMap::new();
        for (id, a) in &self.arenas {
            let bad = |problem: String| Err(malformed(Record::Arena(*id), problem));
            if a.id != *id {
                return bad(format!("stored under {id} but is {}", a.id));
            }
            if id.0 >= self.next_arena {
                return bad(format!("id not below the counter {}", self.next_arena));
            }
            if a.extents.is_empty() || a.extents.len() > ARENA_EXTENTS_MAX {
                return bad(format!("{} extents; 1..={ARENA_EXTENTS_MAX} expected", a.extents.len()));
            }
            let Some(seg) = self.segments.get(&a.segment) else {
                return Err(V::UnknownSegment { holder: Record::Arena(*id), segment: a.segment, range: a.extents[0] });
            };
            if !seg.is_attached() {
                return bad(format!("on {}, which is detached", a.segment));
            }
            for e in &a.extents {
                if e.len == 0 {
                    return bad(format!("empty extent at {}", e.offset));
                }
                seg.check_inside(HeldBy::Arena(*id), *e)?;
                if self.arenas_by_offset.get(&(a.segment, e.offset)) != Some(id) {
                    let problem = format!("{e} of {id} is not indexed under it");
                    return Err(V::ArenaIndex { segment: a.segment, offset: e.offset, problem });
                }
                by_segment.entry(a.segment).or_default().push((*e, *id));
            }
        }
        for (segment, mut extents) in by_segment {
            extents.sort_by_key(|(e, _)| (e.offset, e.len));
            for pair in extents.windows(2) {
                let ((a, a_id), (b, b_id)) = (pair[0], pair[1]);
                if a.end() > b.offset {
                    return Err(V::ArenasOverlap {
                        segment,
                        first: a_id,
                        first_extent: a,
                        second: b_id,
                        second_extent: b,
                    });
                }
            }
        }
        let indexed: usize = self.arenas.values().map(|a| a.extents.len()).sum();
        if indexed != self.arenas_by_offset.len() {
            let stale = self.arenas_by_offset.iter().find(|((segment, offset), id)| {
                let arena = self.arenas.get(id);
                !arena.is_some_and(|a| a.segment == *segment && a.extents.iter().any(|e| e.offset == *offset))
            });
            let ((segment, offset), id) = stale.map(|(k, v)| (*k, *v)).unwrap_or(((SegmentId(0), 0), ArenaId(0)));
            let problem = format!("indexes {id}, which has no extent there");
            return Err(V::ArenaIndex { segment, offset, problem });
        }
        Ok(())
    }
}

/// One holder's replicas: 1..=REPLICA_NUM_MAX of them, on distinct segments.
fn check_replica_set(holder: HeldBy<'_>, replicas: &[ReplicaPlacement]) -> Result<(), InvariantViolation> {
    if replicas.is_empty() || replicas.len() > REPLICA_NUM_MAX as usize {
        let problem = format!("{} replicas; 1..={REPLICA_NUM_MAX} expected", replicas.len());
        return Err(malformed(holder.record(), problem));
    }
    // At most 16: compare pairwise rather than build a set.
    let shared = replicas.iter().enumerate().any(|(i, r)| replicas[..i].iter().any(|q| q.segment == r.segment));
    if shared {
        return Err(malformed(holder.record(), "two replicas on one segment"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
