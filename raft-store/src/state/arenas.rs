//! Apply of the one-commit put: allocation arenas (granted, trimmed and
//! returned through the log) and `PutCommit`, which records a written object
//! whose ranges its leader reserved inside an arena without a Raft round.
//!
//! Arenas overlay the segment allocator: the allocator holds every object's
//! ranges; an arena only says which leader term may place new objects in a
//! region. Apply accepts a new object only inside a live arena it names, on
//! bytes that are free — so a range is committed at most once, and once an
//! arena is returned (its leader has no reservation left in it, or a later
//! leader waited out the release timeout) no late writer of it can commit.

use std::collections::BTreeSet;

use mooncake_segment::{ALLOC_ALIGN_BYTES, Range, SegmentId};

use super::apply::Applied;
use super::invariants::{HeldBy, InvariantViolation, Record};
use super::validation::{invalid, validate_pin, validate_stored_key};
use super::{MetaState, ObjectMeta, RetiredObject, SegmentEntry};
use crate::command::*;
use crate::error::MetaError;

/// Most holes one arena may gather on a fragmented segment: bounds the size
/// of a grant entry and of the arena's record.
pub const ARENA_EXTENTS_MAX: usize = 1_024;

impl MetaState {
    /// Grants an arena of `len_bytes` (rounded up to the allocation unit) on
    /// `segment` from bytes free of objects and outside other arenas: the
    /// smallest hole that fits it whole (lowest offset on ties); or, on a
    /// fragmented segment, the largest holes of at least `unit_bytes` until
    /// `len_bytes` (at most [`ARENA_EXTENTS_MAX`] of them).
    pub(super) fn grant_arena(&mut self, segment: SegmentId, len_bytes: u64, unit_bytes: u64, term: u64) -> Applied {
        let Some(seg) = self.segments.get(&segment) else {
            return Ok(Response::Err(MetaError::SegmentNotFound(segment.to_string())));
        };
        // A length too large to round up to the allocation unit is larger
        // than any segment: refused, never wrapped to 0.
        // Disk segments take whole blocks (`tiers.rs`).
        if !seg.is_attached() {
            return Ok(Response::Err(MetaError::SegmentNotFound(format!("{segment} is detached"))));
        }
        let align = seg.tier().align_bytes();
        let len = len_bytes.checked_next_multiple_of(align).unwrap_or(u64::MAX);
        let unit = unit_bytes.checked_next_multiple_of(align).unwrap_or(u64::MAX).max(align);
        if len == 0 || unit > len || len > seg.capacity_bytes() {
            return Ok(Response::Err(invalid(format!(
                "arena of {len_bytes} bytes (pieces of at least {unit_bytes}) does not fit segment {segment} of {} bytes",
                seg.capacity_bytes()
            ))));
        }
        let mut holes: Vec<Range> = Vec::new();
        for extent in seg.alloc.free_extents() {
            holes.extend(self.gaps_outside_arenas(segment, extent).into_iter().filter(|g| g.len >= unit));
        }
        let whole = holes.iter().filter(|h| h.len >= len).min_by_key(|h| (h.len, h.offset));
        let mut extents: Vec<Range> = match whole {
            Some(h) => vec![Range::new(h.offset, len)],
            None => {
                holes.sort_by_key(|h| (std::cmp::Reverse(h.len), h.offset));
                let mut taken = 0;
                let mut picked = Vec::new();
                for h in holes.into_iter().take(ARENA_EXTENTS_MAX) {
                    if taken >= len {
                        break;
                    }
                    let piece = h.len.min(len - taken);
                    taken += piece;
                    picked.push(Range::new(h.offset, piece));
                }
                picked
            }
        };
        if extents.is_empty() {
            return Ok(Response::Err(MetaError::NoAvailableHandle(format!(
                "segment {segment} has no {unit} free contiguous bytes outside arenas"
            ))));
        }
        extents.sort_by_key(|e| e.offset);
        let arena = Arena { id: ArenaId(self.next_arena), segment, extents, term };
        for e in &arena.extents {
            seg.check_inside(HeldBy::Arena(arena.id), *e)?;
        }
        self.next_arena += 1;
        for e in &arena.extents {
            self.arenas_by_offset.insert((segment, e.offset), arena.id);
        }
        self.arenas.insert(arena.id, arena.clone());
        Ok(Response::ArenaGranted(arena))
    }

    /// Whether an `ArenaGrant` of pieces of at least `unit_bytes` on
    /// `segment` would find one: a hole that large, free of objects and
    /// outside every arena. A leader asks before proposing a grant that
    /// apply would refuse (each refusal is a commit).
    pub fn has_grantable_hole(&self, segment: SegmentId, unit_bytes: u64) -> bool {
        let Some(seg) = self.segments.get(&segment) else { return false };
        let align = seg.tier().align_bytes();
        let unit = unit_bytes.checked_next_multiple_of(align).unwrap_or(u64::MAX).max(align);
        seg.alloc
            .free_extents()
            .filter(|e| e.len >= unit)
            .any(|e| self.gaps_outside_arenas(segment, e).iter().any(|g| g.len >= unit))
    }

    /// Bytes of `segment` free of objects and outside every arena (what
    /// the next arena grants may take), and the largest such hole.
    pub fn grantable_bytes(&self, segment: SegmentId) -> (u64, u64) {
        let Some(seg) = self.segments.get(&segment) else { return (0, 0) };
        let gaps: Vec<Range> = seg.alloc.free_extents().flat_map(|e| self.gaps_outside_arenas(segment, e)).collect();
        (gaps.iter().map(|g| g.len).sum(), gaps.iter().map(|g| g.len).max().unwrap_or(0))
    }

    /// The parts of `extent` (of `segment`) not covered by any arena.
    fn gaps_outside_arenas(&self, segment: SegmentId, extent: Range) -> Vec<Range> {
        let mut gaps = Vec::new();
        let mut at = extent.offset;
        let before = self.arenas_by_offset.range(..(segment, extent.offset)).next_back();
        let from = before.filter(|((s, _), _)| *s == segment).map(|((_, o), _)| *o).unwrap_or(extent.offset);
        for ((_, offset), id) in self.arenas_by_offset.range((segment, from)..(segment, extent.end())) {
            let a = self.arenas[id].extents.iter().find(|e| e.offset == *offset).copied();
            let Some(a) = a else { continue };
            if a.end() <= at {
                continue;
            }
            if a.offset > at {
                gaps.push(Range::new(at, a.offset - at));
            }
            at = at.max(a.end());
        }
        if at < extent.end() {
            gaps.push(Range::new(at, extent.end() - at));
        }
        gaps
    }

    /// Shortens `arena` to its first `keep_bytes` (rounded up), counted
    /// across its extents in order; 0 ends it. Unknown arenas are fine (a
    /// retried trim).
    pub(super) fn trim_arena(&mut self, id: ArenaId, keep_bytes: u64) -> Result<(), MetaError> {
        // A length too large to round up to the allocation unit keeps the
        // whole arena (wrapped to 0, it would end it).
        let Some(arena) = self.arenas.get(&id) else { return Ok(()) };
        let align = self.segments.get(&arena.segment).map_or(ALLOC_ALIGN_BYTES, |s| s.tier().align_bytes());
        let keep = keep_bytes.checked_next_multiple_of(align).unwrap_or(u64::MAX);
        if keep == 0 {
            self.remove_arena(id);
            return Ok(());
        }
        let kept = arena.trimmed_extents(keep);
        let cut: Vec<Range> =
            arena.extents.iter().filter(|e| !kept.iter().any(|k| k.offset == e.offset)).copied().collect();
        let segment = arena.segment;
        for e in cut {
            self.arenas_by_offset.remove(&(segment, e.offset));
        }
        if let Some(arena) = self.arenas.get_mut(&id) {
            arena.extents = kept;
        }
        Ok(())
    }

    /// Cuts `ranges` out of arena `id` (`Command::ArenaCut`): each wholly
    /// inside one of its extents and free, or wholly outside the arena (cut
    /// already: skipped). Refused whole, nothing changed, on an empty,
    /// unaligned or overlapping range, one on an object's bytes or across
    /// an extent's edge, or when the arena would keep more than
    /// [`ARENA_EXTENTS_MAX`] extents. An arena left with nothing ends.
    pub(super) fn cut_arena(&mut self, id: ArenaId, ranges: &[Range]) -> Response {
        let Some(arena) = self.arenas.get(&id) else { return Response::Removed { count: 0 } };
        let Some(seg) = self.segments.get(&arena.segment) else {
            return Response::Err(MetaError::SegmentNotFound(arena.segment.to_string()));
        };
        if ranges.is_empty() || ranges.len() > ARENA_EXTENTS_MAX {
            return Response::Err(invalid(format!("{} ranges to cut; give 1..={ARENA_EXTENTS_MAX}", ranges.len())));
        }
        let align = seg.tier().align_bytes();
        let mut sorted = ranges.to_vec();
        sorted.sort_by_key(|r| r.offset);
        let mut cut: Vec<Range> = Vec::new();
        let mut end_of_last = 0u64;
        for (i, r) in sorted.iter().enumerate() {
            let end = r.offset.checked_add(r.len);
            let shaped = r.len > 0 && r.offset.is_multiple_of(align) && r.len.is_multiple_of(align);
            let Some(end) = end.filter(|_| shaped) else {
                return Response::Err(invalid(format!("cannot cut {r:?} from {id}: empty, unaligned or overflowing")));
            };
            if i > 0 && r.offset < end_of_last {
                return Response::Err(invalid(format!("cannot cut {r:?} from {id}: it overlaps another range")));
            }
            end_of_last = end;
            if arena.holds(*r) {
                if !seg.alloc.is_free(*r) {
                    return Response::Err(invalid(format!("cannot cut {r:?} from {id}: it holds an object")));
                }
                cut.push(*r);
            } else if arena.extents.iter().any(|e| e.offset < end && r.offset < e.end()) {
                return Response::Err(invalid(format!("cannot cut {r:?} from {id}: it crosses an extent's edge")));
            }
        }
        // Cuts and extents are sorted and each cut lies inside one extent.
        let mut extents = Vec::with_capacity(arena.extents.len() + cut.len());
        let mut cuts = cut.iter().peekable();
        for e in &arena.extents {
            let mut at = e.offset;
            while let Some(c) = cuts.next_if(|c| c.offset < e.end()) {
                if c.offset > at {
                    extents.push(Range::new(at, c.offset - at));
                }
                at = c.end();
            }
            if at < e.end() {
                extents.push(Range::new(at, e.end() - at));
            }
        }
        if extents.len() > ARENA_EXTENTS_MAX {
            return Response::Err(invalid(format!(
                "cutting {} ranges from {id} would leave {} extents (at most {ARENA_EXTENTS_MAX})",
                cut.len(),
                extents.len()
            )));
        }
        let count = cut.len() as u64;
        if extents.is_empty() {
            self.remove_arena(id);
            return Response::Removed { count };
        }
        let segment = arena.segment;
        let old: Vec<u64> = arena.extents.iter().map(|e| e.offset).collect();
        for offset in old {
            self.arenas_by_offset.remove(&(segment, offset));
        }
        for e in &extents {
            self.arenas_by_offset.insert((segment, e.offset), id);
        }
        if let Some(arena) = self.arenas.get_mut(&id) {
            arena.extents = extents;
        }
        Response::Removed { count }
    }

    /// Ends the listed arenas (unknown ones are skipped); answers how many ended.
    pub(super) fn return_arenas(&mut self, ids: &[ArenaId]) -> Response {
        let count = ids.iter().filter(|id| self.remove_arena(**id)).count();
        Response::Removed { count: count as u64 }
    }

    fn remove_arena(&mut self, id: ArenaId) -> bool {
        match self.arenas.remove(&id) {
            Some(a) => {
                for e in &a.extents {
                    self.arenas_by_offset.remove(&(a.segment, e.offset));
                }
                true
            }
            None => false,
        }
    }

    /// Drops the arenas of a segment that is gone.
    pub(super) fn drop_arenas_of(&mut self, segment: SegmentId) {
        let gone: Vec<ArenaId> = self.arenas.values().filter(|a| a.segment == segment).map(|a| a.id).collect();
        for id in gone {
            self.remove_arena(id);
        }
    }

    /// Records a written object as complete. A retry of a commit that was
    /// applied (same writer, checksum and ranges) answers the same version.
    pub(super) fn put_commit(&mut self, new: &NewObject) -> Applied {
        if let Err(e) = validate_new_object(new) {
            return Ok(Response::Err(e));
        }
        let placements: Vec<ReplicaPlacement> =
            new.replicas.iter().map(|r| ReplicaPlacement { segment: r.segment, range: r.range }).collect();
        if let Some(existing) = self.objects.get(&new.key) {
            if is_retry_of(existing, new) {
                return Ok(Response::Committed { version: existing.version });
            }
            if !new.upsert {
                return Ok(Response::Err(MetaError::ObjectAlreadyExists(new.key.clone())));
            }
        }
        if let Err(e) = self.check_placement(new) {
            return Ok(Response::Err(e));
        }
        if new.upsert
            && let Some(old) = self.objects.remove(&new.key)
        {
            // Readers may hold KV leases on the old bytes: keep them until
            // the leader releases them.
            let retired =
                RetiredObject { version: old.version, key: old.key, replicas: old.replicas, retired_ms: self.now_ms };
            self.retired.insert(retired.version, retired);
        }
        // check_placement found every segment and every range free.
        for r in &placements {
            let holder = HeldBy::Object(&new.key);
            let Some(seg) = self.segments.get_mut(&r.segment) else {
                let record = Record::Object(new.key.clone());
                return Err(InvariantViolation::UnknownSegment { holder: record, segment: r.segment, range: r.range });
            };
            seg.reserve(holder, r.range)?;
        }
        let version = ObjectVersion(self.next_version);
        self.next_version += 1;
        let object = ObjectMeta {
            key: new.key.clone(),
            version,
            size_bytes: new.size_bytes,
            checksum: new.checksum,
            writer: new.client,
            replicas: placements,
            pin: new.pin,
            committed_ms: self.now_ms,
        };
        self.objects.insert(object);
        Ok(Response::Committed { version })
    }

    /// Every replica lies inside the live arena it names, on its segment
    /// (one that serves the object's tenant), on bytes that are free.
    fn check_placement(&self, new: &NewObject) -> Result<(), MetaError> {
        for r in &new.replicas {
            let expired = |why: String| MetaError::PutExpired(format!("{:?}: {why}; retry the put", new.key));
            let seg = self.segments.get(&r.segment).ok_or_else(|| expired(format!("segment {} is gone", r.segment)))?;
            if seg.tier() != Tier::Dram {
                return Err(invalid(format!("{} is a disk segment; puts are placed in memory", r.segment)));
            }
            check_serves(seg, &new.key)?;
            let arena = self.arenas.get(&r.arena).ok_or_else(|| expired(format!("{} was returned", r.arena)))?;
            if arena.segment != r.segment || !arena.holds(r.range) {
                return Err(invalid(format!("{:?} on {} is not inside {}", r.range, r.segment, r.arena)));
            }
            if !seg.alloc.is_free(r.range) {
                return Err(expired(format!("{:?} on {} holds another object", r.range, r.segment)));
            }
        }
        Ok(())
    }

    /// Frees the ranges of the listed retired objects (unknown ones skipped).
    pub(super) fn release_retired(&mut self, versions: &[ObjectVersion]) -> Applied {
        let mut count = 0;
        for v in versions {
            if let Some(old) = self.retired.remove(v) {
                self.free_replicas(HeldBy::Retired(*v), &old.replicas)?;
                count += 1;
            }
        }
        Ok(Response::Removed { count })
    }
}

/// Refuses an object of another tenant than the one `seg` is dedicated to
/// (`MountTenantSegment`).
pub(super) fn check_serves(seg: &SegmentEntry, key: &str) -> Result<(), MetaError> {
    let tenant = mooncake_segment::tenant::tenant_of(key);
    match seg.serves(tenant) {
        true => Ok(()),
        false => Err(MetaError::PermissionDenied(format!(
            "segment {} holds tenant {:?}'s objects only, not tenant {tenant:?}'s; place it elsewhere",
            seg.spec.id,
            seg.tenant().unwrap_or_default()
        ))),
    }
}

/// Checks the shape of a PutCommit (not the arenas or free space).
pub fn validate_new_object(new: &NewObject) -> Result<(), MetaError> {
    validate_stored_key(&new.key)?;
    validate_pin(new.pin)?;
    if new.size_bytes == 0 {
        return Err(invalid(format!("object {:?} has size 0", new.key)));
    }
    let n = new.replicas.len();
    if n == 0 || n > super::REPLICA_NUM_MAX as usize {
        return Err(invalid(format!("{n} replicas; give 1..={}", super::REPLICA_NUM_MAX)));
    }
    let segments: BTreeSet<SegmentId> = new.replicas.iter().map(|r| r.segment).collect();
    if segments.len() != n {
        return Err(invalid(format!("two replicas of {:?} on one segment", new.key)));
    }
    let Some(len) = new.size_bytes.checked_next_multiple_of(ALLOC_ALIGN_BYTES) else {
        return Err(invalid(format!("object {:?} of {} bytes is larger than any segment", new.key, new.size_bytes)));
    };
    if let Some(r) = new.replicas.iter().find(|r| r.range.len != len) {
        return Err(invalid(format!(
            "replica range {:?} is not {len} bytes long (the object's size, aligned)",
            r.range
        )));
    }
    if let Some(r) = new.replicas.iter().find(|r| !r.range.offset.is_multiple_of(ALLOC_ALIGN_BYTES)) {
        return Err(invalid(format!(
            "replica range {:?} does not start on a {ALLOC_ALIGN_BYTES}-byte boundary",
            r.range
        )));
    }
    Ok(())
}

/// Whether `new` repeats the commit that recorded `existing`: the same
/// writer, checksum and ranges (a retried PutEnd), which answers that
/// commit's version.
pub(super) fn is_retry_of(existing: &ObjectMeta, new: &NewObject) -> bool {
    existing.writer == new.client
        && existing.checksum == new.checksum
        && existing.replicas.iter().map(|r| (r.segment, r.range)).eq(new.replicas.iter().map(|r| (r.segment, r.range)))
}
