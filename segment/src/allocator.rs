//! The deterministic offset allocator that places objects inside a segment.
//!
//! This module owns [`RangeAllocator`], the bookkeeping of which byte ranges
//! of one segment (the contiguous range `[0, capacity)`) are free and which
//! are used, together with its value types [`Range`] and [`AllocError`] and
//! the alignment constant [`ALLOC_ALIGN_BYTES`].
//!
//! The allocator runs inside the replicated Raft state machine, so it is
//! strictly deterministic: the same sequence of calls yields the same results
//! on every node. It uses only ordered collections (no hashing, no
//! randomness), and it keeps the free set in canonical form — maximal,
//! coalesced free extents, no two of which touch. The free set is therefore a
//! pure function of the set of used bytes, so an allocator rebuilt from the
//! allocated ranges alone ([`RangeAllocator::with_allocated`]) behaves
//! identically to one that evolved through `allocate`/`free`/`reserve`.
//!
//! Allocations are not tracked individually: the allocator only knows free
//! extents, and everything else inside the capacity is used.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Every allocation's offset and length are multiples of this (64 bytes: a
/// cache line; keeps DMA/RDMA-friendly alignment).
pub const ALLOC_ALIGN_BYTES: u64 = 64;

/// A half-open byte range `[offset, offset + len)` inside a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct Range {
    /// First byte of the range, counted from the start of the segment.
    pub offset: u64,
    /// Number of bytes in the range.
    pub len: u64,
}

impl Range {
    /// Builds the range `[offset, offset + len)`.
    pub const fn new(offset: u64, len: u64) -> Self {
        Self { offset, len }
    }

    /// One past the last byte of the range (`offset + len`).
    ///
    /// Saturates at `u64::MAX` instead of overflowing, so it never panics on a
    /// malformed range; for every range the allocator hands out or accepts it
    /// is exact.
    pub const fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}, {}) ({} bytes)", self.offset, self.end(), self.len)
    }
}

/// Why a [`RangeAllocator`] refused a `free`, `reserve` or rebuild.
///
/// When an operation returns an error, the allocator is left unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The range is empty, is not aligned to [`ALLOC_ALIGN_BYTES`] (offset or
    /// length), or lies (partly) outside `[0, capacity)`.
    #[error(
        "range {range} is out of bounds: it must be non-empty, aligned to {align} bytes and lie inside the segment's usable capacity of {capacity} bytes",
        align = ALLOC_ALIGN_BYTES
    )]
    OutOfBounds {
        /// The offending range.
        range: Range,
        /// The allocator's usable capacity in bytes.
        capacity: u64,
    },
    /// A `free` of a range that is not entirely allocated (a double free, or
    /// a range that overlaps free space).
    #[error("cannot free range {range}: it is not entirely allocated (double free, or it overlaps free space)")]
    NotAllocated {
        /// The range that was passed to `free`.
        range: Range,
    },
    /// A `reserve` of a range that overlaps space that is already allocated.
    #[error("cannot reserve range {range}: it overlaps space that is already allocated")]
    Overlap {
        /// The range that was passed to `reserve`.
        range: Range,
    },
}

/// Deterministic best-fit offset allocator over one segment `[0, capacity)`.
///
/// The free set is kept as maximal coalesced extents in two ordered indexes
/// that always agree: one keyed by offset (for coalescing and lookups) and
/// one keyed by `(len, offset)` (for best fit). All mutating operations are
/// `O(log n)` in the number of free extents.
#[derive(Clone, Debug)]
pub struct RangeAllocator {
    /// Usable capacity: the requested capacity rounded down to
    /// [`ALLOC_ALIGN_BYTES`].
    capacity: u64,
    /// Free extents, offset -> len. Sorted, disjoint, no two touching.
    by_offset: BTreeMap<u64, u64>,
    /// The same free extents as `(len, offset)`, ordered for best fit.
    by_size: BTreeSet<(u64, u64)>,
    /// Sum of the lengths of all free extents.
    free_bytes: u64,
}

impl RangeAllocator {
    /// Creates an allocator whose whole usable capacity is free.
    ///
    /// The usable capacity is `capacity_bytes` rounded down to a multiple of
    /// [`ALLOC_ALIGN_BYTES`]; any tail shorter than that is never handed out.
    pub fn new(capacity_bytes: u64) -> Self {
        let capacity = capacity_bytes - capacity_bytes % ALLOC_ALIGN_BYTES;
        let mut alloc = Self { capacity, by_offset: BTreeMap::new(), by_size: BTreeSet::new(), free_bytes: 0 };
        if capacity > 0 {
            alloc.insert_free(0, capacity);
        }
        alloc.debug_check();
        alloc
    }

    /// Rebuilds an allocator from only the set of allocated ranges.
    ///
    /// Each range is reserved as by [`reserve`](Self::reserve); the order of
    /// `allocated` does not matter, and the result is identical (free extents
    /// and all future behaviour) to any allocator that evolved to hold exactly
    /// those bytes. Adjacent ranges are fine; overlapping or duplicated ranges
    /// give [`AllocError::Overlap`], and malformed ones
    /// [`AllocError::OutOfBounds`].
    pub fn with_allocated(capacity_bytes: u64, allocated: impl IntoIterator<Item = Range>) -> Result<Self, AllocError> {
        let mut alloc = Self::new(capacity_bytes);
        for range in allocated {
            alloc.reserve(range)?;
        }
        Ok(alloc)
    }

    /// Usable capacity in bytes (the requested capacity rounded down to
    /// [`ALLOC_ALIGN_BYTES`]).
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity
    }

    /// Total bytes currently free.
    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Total bytes currently allocated (`capacity_bytes() - free_bytes()`).
    pub fn used_bytes(&self) -> u64 {
        self.capacity - self.free_bytes
    }

    /// Length of the largest free extent, i.e. the largest allocation that
    /// would currently succeed (0 when full).
    pub fn largest_free_bytes(&self) -> u64 {
        self.by_size.last().map_or(0, |&(len, _)| len)
    }

    /// Number of free extents (a measure of fragmentation; 1 when empty,
    /// 0 when full).
    pub fn free_extent_count(&self) -> usize {
        self.by_offset.len()
    }

    /// Allocates `len_bytes` rounded up to [`ALLOC_ALIGN_BYTES`].
    ///
    /// Best fit: picks the smallest free extent that can hold the rounded
    /// length, breaking ties by lowest offset, and carves the allocation from
    /// the start of that extent. Returns `None` when `len_bytes` is 0, when
    /// rounding overflows, or when no free extent is large enough.
    /// `O(log n)`.
    pub fn allocate(&mut self, len_bytes: u64) -> Option<Range> {
        if len_bytes == 0 {
            return None;
        }
        let len = len_bytes.checked_next_multiple_of(ALLOC_ALIGN_BYTES)?;
        let (ext_len, ext_offset) = self.by_size.range((len, 0)..).next().copied()?;
        self.remove_free(ext_offset, ext_len);
        if ext_len > len {
            self.insert_free(ext_offset + len, ext_len - len);
        }
        self.debug_check();
        Some(Range::new(ext_offset, len))
    }

    /// Returns `range` to the free set, coalescing it with free neighbours.
    ///
    /// `range` should be exactly a range returned by
    /// [`allocate`](Self::allocate) (same offset, rounded length). Because
    /// allocations are not tracked individually, any aligned range inside the
    /// capacity that lies entirely in used space is accepted.
    ///
    /// Errors (and then nothing changes): [`AllocError::OutOfBounds`] for an
    /// empty, unaligned or out-of-capacity range; [`AllocError::NotAllocated`]
    /// if any byte of it is already free. `O(log n)`.
    pub fn free(&mut self, range: Range) -> Result<(), AllocError> {
        let end = self.validate(range)?;
        let left = self.free_extent_at_or_before(range.offset);
        let overlaps_left = left.is_some_and(|(o, l)| o + l > range.offset);
        let overlaps_right = self.by_offset.range(range.offset..end).next().is_some();
        if overlaps_left || overlaps_right {
            return Err(AllocError::NotAllocated { range });
        }
        let mut start = range.offset;
        let mut stop = end;
        if let Some((o, l)) = left
            && o + l == range.offset
        {
            self.remove_free(o, l);
            start = o;
        }
        if let Some(&l) = self.by_offset.get(&end) {
            self.remove_free(end, l);
            stop = end + l;
        }
        self.insert_free(start, stop - start);
        self.debug_check();
        Ok(())
    }

    /// Marks the specific `range` as used, e.g. to replay a placement.
    ///
    /// The range must lie entirely inside one free extent. Errors (and then
    /// nothing changes): [`AllocError::OutOfBounds`] for an empty, unaligned
    /// or out-of-capacity range; [`AllocError::Overlap`] if any byte of it is
    /// already used. `O(log n)`.
    pub fn reserve(&mut self, range: Range) -> Result<(), AllocError> {
        let end = self.validate(range)?;
        let (o, l) = self
            .free_extent_at_or_before(range.offset)
            .filter(|&(o, l)| o + l >= end)
            .ok_or(AllocError::Overlap { range })?;
        self.remove_free(o, l);
        if range.offset > o {
            self.insert_free(o, range.offset - o);
        }
        if o + l > end {
            self.insert_free(end, o + l - end);
        }
        self.debug_check();
        Ok(())
    }

    /// The free extents in increasing offset order. They are maximal: no two
    /// are adjacent or overlapping.
    pub fn free_extents(&self) -> impl Iterator<Item = Range> + '_ {
        self.by_offset.iter().map(|(&offset, &len)| Range::new(offset, len))
    }

    /// Whether every byte of `range` is free (so [`reserve`](Self::reserve)
    /// of it would succeed). An invalid range is not free. `O(log n)`.
    pub fn is_free(&self, range: Range) -> bool {
        let Ok(end) = self.validate(range) else { return false };
        self.free_extent_at_or_before(range.offset).is_some_and(|(o, l)| o + l >= end)
    }

    /// The free extents clipped to `window`, in increasing offset order.
    /// `O(log n + k)` for `k` extents in the window.
    pub fn free_extents_within(&self, window: Range) -> impl Iterator<Item = Range> + '_ {
        let (start, end) = (window.offset, window.end());
        let first = self.free_extent_at_or_before(start).filter(|(o, l)| o + l > start).map(|(o, _)| o);
        self.by_offset
            .range(first.unwrap_or(start)..end)
            .map(move |(&o, &l)| {
                let from = o.max(start);
                Range::new(from, (o + l).min(end) - from)
            })
            .filter(|r| r.len > 0)
    }

    /// Checks that `range` is non-empty, aligned and inside the capacity, and
    /// returns its (non-overflowing) end.
    fn validate(&self, range: Range) -> Result<u64, AllocError> {
        let aligned = range.offset.is_multiple_of(ALLOC_ALIGN_BYTES) && range.len.is_multiple_of(ALLOC_ALIGN_BYTES);
        match range.offset.checked_add(range.len) {
            Some(end) if aligned && range.len > 0 && end <= self.capacity => Ok(end),
            _ => Err(AllocError::OutOfBounds { range, capacity: self.capacity }),
        }
    }

    /// The free extent with the greatest offset `<= offset`, as
    /// `(offset, len)`.
    fn free_extent_at_or_before(&self, offset: u64) -> Option<(u64, u64)> {
        self.by_offset.range(..=offset).next_back().map(|(&o, &l)| (o, l))
    }

    /// Adds a free extent to both indexes and to the free counter. The caller
    /// guarantees it is disjoint from, and not adjacent to, other extents.
    fn insert_free(&mut self, offset: u64, len: u64) {
        let fresh_offset = self.by_offset.insert(offset, len).is_none();
        let fresh_size = self.by_size.insert((len, offset));
        debug_assert!(fresh_offset && fresh_size, "free extent inserted twice");
        self.free_bytes += len;
    }

    /// Removes an existing free extent from both indexes and the counter.
    fn remove_free(&mut self, offset: u64, len: u64) {
        let had_offset = self.by_offset.remove(&offset) == Some(len);
        let had_size = self.by_size.remove(&(len, offset));
        debug_assert!(had_offset && had_size, "removed a missing free extent");
        self.free_bytes -= len;
    }

    /// Post-mutation sanity check. Outside this crate's tests it is `O(1)`
    /// and compiled out of release builds; in this crate's tests it also runs
    /// the full [`check_invariants`](Self::check_invariants) scan.
    fn debug_check(&self) {
        debug_assert_eq!(self.by_offset.len(), self.by_size.len());
        debug_assert!(self.free_bytes <= self.capacity);
        #[cfg(test)]
        self.check_invariants();
    }

    /// Full `O(n)` invariant check: the two indexes agree, every extent is
    /// non-empty, aligned and inside the capacity, extents are sorted,
    /// disjoint and non-adjacent (canonical), and `free_bytes` is exact.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        assert!(self.capacity.is_multiple_of(ALLOC_ALIGN_BYTES));
        assert_eq!(self.by_offset.len(), self.by_size.len());
        let mut sum = 0u64;
        let mut prev_end: Option<u64> = None;
        for (&offset, &len) in &self.by_offset {
            assert!(len > 0, "empty free extent at {offset}");
            assert!(offset.is_multiple_of(ALLOC_ALIGN_BYTES));
            assert!(len.is_multiple_of(ALLOC_ALIGN_BYTES));
            assert!(offset + len <= self.capacity);
            if let Some(prev) = prev_end {
                assert!(prev < offset, "extents touch or overlap at {offset}");
            }
            assert!(self.by_size.contains(&(len, offset)));
            prev_end = Some(offset + len);
            sum += len;
        }
        assert_eq!(sum, self.free_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: u64 = ALLOC_ALIGN_BYTES;

    fn r(offset: u64, len: u64) -> Range {
        Range::new(offset, len)
    }

    fn extents(a: &RangeAllocator) -> Vec<Range> {
        a.free_extents().collect()
    }

    /// Allocates blocks of the given sizes (in units of `A`) from an
    /// allocator of exactly their total size, so it ends up full.
    fn full_with(units: &[u64]) -> (RangeAllocator, Vec<Range>) {
        let mut a = RangeAllocator::new(units.iter().sum::<u64>() * A);
        let held = units.iter().map(|&u| a.allocate(u * A).expect("fits")).collect();
        assert_eq!(a.free_bytes(), 0);
        (a, held)
    }

    #[test]
    fn alloc_until_full_then_none() {
        let mut a = RangeAllocator::new(10 * A);
        for i in 0..10 {
            assert_eq!(a.allocate(A), Some(r(i * A, A)));
        }
        assert_eq!(a.allocate(1), None);
        assert_eq!(a.free_bytes(), 0);
        assert_eq!(a.used_bytes(), 10 * A);
        assert_eq!(a.largest_free_bytes(), 0);
        assert_eq!(a.free_extent_count(), 0);
    }

    #[test]
    fn free_coalesces_right_left_and_both() {
        let (mut a, h) = full_with(&[1, 1, 1, 1]);
        a.free(h[1]).expect("free b");
        assert_eq!(extents(&a), vec![r(A, A)]);
        // a's right neighbour is free: merge right.
        a.free(h[0]).expect("free a");
        assert_eq!(extents(&a), vec![r(0, 2 * A)]);
        a.free(h[3]).expect("free d");
        assert_eq!(extents(&a), vec![r(0, 2 * A), r(3 * A, A)]);
        // c has free space on both sides: merge both.
        a.free(h[2]).expect("free c");
        assert_eq!(extents(&a), vec![r(0, 4 * A)]);
    }

    #[test]
    fn free_coalesces_left() {
        let (mut a, h) = full_with(&[1, 2, 1]);
        a.free(h[0]).expect("free a");
        a.free(h[1]).expect("free b");
        assert_eq!(extents(&a), vec![r(0, 3 * A)]);
        assert_eq!(a.free_extent_count(), 1);
    }

    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let mut out = Vec::new();
        for p in permutations(n - 1) {
            for i in 0..=p.len() {
                let mut q = p.clone();
                q.insert(i, n - 1);
                out.push(q);
            }
        }
        out
    }

    #[test]
    fn freeing_everything_in_any_order_leaves_one_extent() {
        let sizes = [1, 3, 2, 1, 5];
        for perm in permutations(sizes.len()) {
            let (mut a, h) = full_with(&sizes);
            for &i in &perm {
                a.free(h[i]).expect("free");
            }
            assert_eq!(a.free_extent_count(), 1, "order {perm:?}");
            assert_eq!(extents(&a), vec![r(0, a.capacity_bytes())]);
            assert_eq!(a.used_bytes(), 0);
        }
    }

    #[test]
    fn best_fit_picks_smallest_then_lowest_offset() {
        // Units: A=0..3, x=3, B=4, x=5, C=6..8, x=8, D=9, x=10, E=11..16.
        let (mut a, h) = full_with(&[3, 1, 1, 1, 2, 1, 1, 1, 5]);
        for i in [0, 2, 4, 6] {
            a.free(h[i]).expect("free");
        }
        // Holes: [0,3) [4,5) [6,8) [9,10) in units.
        assert_eq!(a.largest_free_bytes(), 3 * A);
        assert_eq!(a.allocate(A), Some(r(4 * A, A)), "1-unit hole, lowest");
        assert_eq!(a.allocate(1), Some(r(9 * A, A)), "other 1-unit hole");
        assert_eq!(a.allocate(A + 1), Some(r(6 * A, 2 * A)), "2-unit hole");
        assert_eq!(a.allocate(A), Some(r(0, A)), "carve from start");
        assert_eq!(a.allocate(A), Some(r(A, A)));
        assert_eq!(a.allocate(2 * A), None);
        assert_eq!(a.allocate(A), Some(r(2 * A, A)));
        assert_eq!(a.allocate(1), None);
    }

    #[test]
    fn best_fit_prefers_smaller_later_extent() {
        let (mut a, h) = full_with(&[4, 1, 2, 1]);
        a.free(h[0]).expect("free");
        a.free(h[2]).expect("free");
        assert_eq!(a.allocate(2 * A), Some(r(5 * A, 2 * A)));
        assert_eq!(a.allocate(3 * A), Some(r(0, 3 * A)));
    }

    #[test]
    fn is_free_and_free_extents_within_see_exactly_the_free_bytes() {
        let mut a = RangeAllocator::new(16 * A);
        a.reserve(r(2 * A, 2 * A)).unwrap();
        a.reserve(r(8 * A, A)).unwrap();
        assert!(a.is_free(r(0, 2 * A)) && a.is_free(r(4 * A, 4 * A)) && a.is_free(r(9 * A, 7 * A)));
        assert!(!a.is_free(r(A, 2 * A)), "overlaps a used range");
        assert!(!a.is_free(r(7 * A, 2 * A)));
        assert!(!a.is_free(r(0, 0)) && !a.is_free(r(1, A)) && !a.is_free(r(15 * A, 2 * A)), "invalid ranges");
        let within: Vec<Range> = a.free_extents_within(r(A, 9 * A)).collect();
        assert_eq!(within, vec![r(A, A), r(4 * A, 4 * A), r(9 * A, A)]);
        assert_eq!(a.free_extents_within(r(2 * A, 2 * A)).count(), 0);
        assert_eq!(a.free_extents_within(r(0, 16 * A)).collect::<Vec<_>>(), a.free_extents().collect::<Vec<_>>());
    }

    #[test]
    fn len_is_rounded_up_to_alignment() {
        let mut a = RangeAllocator::new(1 << 20);
        assert_eq!(a.allocate(1), Some(r(0, A)));
        assert_eq!(a.allocate(A + 1), Some(r(A, 2 * A)));
        assert_eq!(a.allocate(2 * A), Some(r(3 * A, 2 * A)));
        assert_eq!(a.allocate(A - 1), Some(r(5 * A, A)));
        assert_eq!(a.used_bytes(), 6 * A);
    }

    #[test]
    fn zero_and_overflowing_len_return_none() {
        let mut a = RangeAllocator::new(1 << 20);
        let before = extents(&a);
        assert_eq!(a.allocate(0), None);
        assert_eq!(a.allocate(u64::MAX), None);
        assert_eq!(a.allocate(u64::MAX - A + 2), None);
        assert_eq!(a.allocate((1 << 20) + 1), None);
        assert_eq!(extents(&a), before);
        assert_eq!(a.free_bytes(), 1 << 20);
    }

    #[test]
    fn double_free_is_not_allocated_and_changes_nothing() {
        let mut a = RangeAllocator::new(8 * A);
        let x = a.allocate(A).expect("x");
        let y = a.allocate(A).expect("y");
        a.free(x).expect("first free");
        let before = extents(&a);
        assert_eq!(a.free(x), Err(AllocError::NotAllocated { range: x }));
        // Partly free, partly used.
        let span = r(0, 2 * A);
        assert_eq!(a.free(span), Err(AllocError::NotAllocated { range: span }));
        // Used start, free tail.
        let tail = r(y.offset, 2 * A);
        assert_eq!(a.free(tail), Err(AllocError::NotAllocated { range: tail }));
        assert_eq!(extents(&a), before);
        assert_eq!(a.free_bytes(), 7 * A);
    }

    #[test]
    fn free_accepts_any_used_range() {
        let (mut a, _) = full_with(&[2, 2]);
        // A sub-range of one allocation, then one spanning two.
        a.free(r(A, A)).expect("sub-range");
        a.free(r(2 * A, 2 * A)).expect("second block");
        assert_eq!(extents(&a), vec![r(A, 3 * A)]);
        a.free(r(0, A)).expect("rest");
        assert_eq!(extents(&a), vec![r(0, 4 * A)]);
    }

    #[test]
    fn free_and_reserve_out_of_bounds() {
        let cap = 4 * A;
        let bad = [
            r(1, A),                    // unaligned offset
            r(0, A + 1),                // unaligned len
            r(A, 0),                    // empty
            r(3 * A, 2 * A),            // runs past capacity
            r(cap, A),                  // starts at capacity
            r(u64::MAX - A + 1, 2 * A), // offset + len overflows
        ];
        let (mut used, _) = full_with(&[4]);
        let mut free = RangeAllocator::new(cap);
        for range in bad {
            let want = Err(AllocError::OutOfBounds { range, capacity: cap });
            assert_eq!(used.free(range), want, "{range:?}");
            assert_eq!(free.reserve(range), want, "{range:?}");
        }
        assert_eq!(used.free_bytes(), 0);
        assert_eq!(extents(&free), vec![r(0, cap)]);
    }

    #[test]
    fn reserve_over_allocated_is_overlap() {
        let mut a = RangeAllocator::new(8 * A);
        let x = a.allocate(2 * A).expect("x");
        let before = extents(&a);
        for range in [x, r(A, 2 * A), r(0, A), r(0, 8 * A)] {
            assert_eq!(a.reserve(range), Err(AllocError::Overlap { range }));
        }
        assert_eq!(extents(&a), before);
        a.reserve(r(2 * A, A)).expect("adjacent to x");
        assert_eq!(a.allocate(A), Some(r(3 * A, A)));
    }

    #[test]
    fn reserve_splits_extent() {
        let mut a = RangeAllocator::new(8 * A);
        a.reserve(r(3 * A, 2 * A)).expect("middle");
        assert_eq!(extents(&a), vec![r(0, 3 * A), r(5 * A, 3 * A)]);
        a.reserve(r(0, A)).expect("front");
        a.reserve(r(7 * A, A)).expect("back");
        assert_eq!(extents(&a), vec![r(A, 2 * A), r(5 * A, 2 * A)]);
        assert_eq!(a.used_bytes(), 4 * A);
    }

    #[test]
    fn capacity_rounds_down_to_alignment() {
        let a = RangeAllocator::new(1000);
        assert_eq!(a.capacity_bytes(), 960);
        assert_eq!(extents(&a), vec![r(0, 960)]);
        let mut tiny = RangeAllocator::new(A - 1);
        assert_eq!(tiny.capacity_bytes(), 0);
        assert_eq!(tiny.free_extent_count(), 0);
        assert_eq!(tiny.allocate(1), None);
        let mut zero = RangeAllocator::new(0);
        assert_eq!(zero.allocate(1), None);
        assert_eq!(zero.largest_free_bytes(), 0);
        assert_eq!(zero.free(r(0, A)), Err(AllocError::OutOfBounds { range: r(0, A), capacity: 0 }));
    }

    #[test]
    fn with_allocated_rebuilds_and_ignores_order() {
        let held = [r(0, A), r(A, 2 * A), r(5 * A, A), r(9 * A, A)];
        let a = RangeAllocator::with_allocated(10 * A + 7, held).expect("ok");
        let mut rev = held;
        rev.reverse();
        let b = RangeAllocator::with_allocated(10 * A, rev).expect("ok");
        let want = vec![r(3 * A, 2 * A), r(6 * A, 3 * A)];
        assert_eq!(extents(&a), want);
        assert_eq!(extents(&b), want);
        assert_eq!(a.used_bytes(), 5 * A);
    }

    #[test]
    fn with_allocated_rejects_bad_input() {
        let dup = [r(0, A), r(0, A)];
        let overlap = [r(0, 2 * A), r(A, 2 * A)];
        let oob = [r(0, A), r(4 * A, A)];
        assert_eq!(RangeAllocator::with_allocated(4 * A, dup).map(|_| ()), Err(AllocError::Overlap { range: r(0, A) }));
        assert_eq!(
            RangeAllocator::with_allocated(4 * A, overlap).map(|_| ()),
            Err(AllocError::Overlap { range: r(A, 2 * A) })
        );
        assert_eq!(
            RangeAllocator::with_allocated(4 * A, oob).map(|_| ()),
            Err(AllocError::OutOfBounds { range: r(4 * A, A), capacity: 4 * A })
        );
    }

    #[test]
    fn error_messages_name_the_range() {
        let e = AllocError::OutOfBounds { range: r(64, 128), capacity: 4096 };
        let msg = e.to_string();
        assert!(msg.contains("[64, 192)") && msg.contains("4096"), "{msg}");
        let msg = AllocError::NotAllocated { range: r(0, 64) }.to_string();
        assert!(msg.contains("free") && msg.contains("[0, 64)"), "{msg}");
        let msg = AllocError::Overlap { range: r(0, 64) }.to_string();
        assert!(msg.contains("reserve") && msg.contains("[0, 64)"), "{msg}");
    }

    // ---- property test -------------------------------------------------

    #[derive(Clone, Debug)]
    enum Op {
        Alloc(u64),
        Free(prop::sample::Index),
        Reserve { offset_unit: u64, len_units: u64 },
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (1u64..=4096 * 4).prop_map(Op::Alloc),
            4 => any::<prop::sample::Index>().prop_map(Op::Free),
            1 => (0u64..20_000, 1u64..=64).prop_map(|(offset_unit, len_units)| {
                Op::Reserve { offset_unit, len_units }
            }),
        ]
    }

    /// The canonical free set implied by `held`: the gaps between them.
    fn model_free(cap: u64, held: &[Range]) -> Vec<Range> {
        let mut sorted = held.to_vec();
        sorted.sort();
        let mut out = Vec::new();
        let mut cursor = 0;
        for h in sorted.iter().chain([r(cap, 0)].iter()) {
            if h.offset > cursor {
                out.push(r(cursor, h.offset - cursor));
            }
            cursor = cursor.max(h.end());
        }
        out
    }

    /// Best fit over the model free set.
    fn model_alloc(free: &[Range], len: u64) -> Option<Range> {
        let len = len.checked_next_multiple_of(A)?;
        free.iter().filter(|e| e.len >= len).min_by_key(|e| (e.len, e.offset)).map(|e| r(e.offset, len))
    }

    fn overlaps(x: Range, y: Range) -> bool {
        x.offset < y.end() && y.offset < x.end()
    }

    fn apply(a: &mut RangeAllocator, held: &mut Vec<Range>, op: Op) -> Result<(), TestCaseError> {
        let cap = a.capacity_bytes();
        match op {
            Op::Alloc(len) => {
                let want = model_alloc(&model_free(cap, held), len);
                let got = a.allocate(len);
                prop_assert_eq!(got, want);
                held.extend(got);
            }
            Op::Free(idx) if !held.is_empty() => {
                let range = held.swap_remove(idx.index(held.len()));
                prop_assert_eq!(a.free(range), Ok(()));
                prop_assert_eq!(a.free(range), Err(AllocError::NotAllocated { range }));
            }
            Op::Free(_) => {}
            Op::Reserve { offset_unit, len_units } => {
                let range = r(offset_unit * A, len_units * A);
                let want = if range.end() > cap {
                    Err(AllocError::OutOfBounds { range, capacity: cap })
                } else if held.iter().any(|&h| overlaps(h, range)) {
                    Err(AllocError::Overlap { range })
                } else {
                    Ok(())
                };
                prop_assert_eq!(a.reserve(range), want.clone());
                if want.is_ok() {
                    held.push(range);
                }
            }
        }
        Ok(())
    }

    fn check_state(a: &RangeAllocator, held: &[Range]) -> Result<(), TestCaseError> {
        let cap = a.capacity_bytes();
        a.check_invariants();
        for (i, &h) in held.iter().enumerate() {
            prop_assert!(h.len > 0 && h.end() <= cap, "{h:?} outside {cap}");
            prop_assert!(h.offset % A == 0 && h.len % A == 0, "{h:?} unaligned");
            for &g in &held[i + 1..] {
                prop_assert!(!overlaps(h, g), "{h:?} overlaps {g:?}");
            }
        }
        let held_sum: u64 = held.iter().map(|h| h.len).sum();
        prop_assert_eq!(a.free_bytes() + held_sum, cap);
        prop_assert_eq!(a.used_bytes(), held_sum);
        let free = extents(a);
        for w in free.windows(2) {
            prop_assert!(w[0].end() < w[1].offset, "not canonical: {:?}", w);
        }
        for e in &free {
            prop_assert!(!held.iter().any(|&h| overlaps(h, *e)), "{e:?} is held");
        }
        prop_assert_eq!(free, model_free(cap, held));
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn random_ops_keep_invariants_and_rebuild_identically(
            cap in (64u64 << 10)..=(1u64 << 20),
            ops in prop::collection::vec(op_strategy(), 1..150),
            probes in prop::collection::vec(1u64..=4096 * 4, 1..8),
        ) {
            let mut a = RangeAllocator::new(cap);
            let mut held: Vec<Range> = Vec::new();
            for op in ops {
                apply(&mut a, &mut held, op)?;
                check_state(&a, &held)?;
            }
            let mut rebuilt = RangeAllocator::with_allocated(cap, held.iter().rev().copied())
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(extents(&rebuilt), extents(&a));
            prop_assert_eq!(rebuilt.free_bytes(), a.free_bytes());
            prop_assert_eq!(rebuilt.largest_free_bytes(), a.largest_free_bytes());
            for len in probes {
                prop_assert_eq!(rebuilt.allocate(len), a.allocate(len));
                prop_assert_eq!(extents(&rebuilt), extents(&a));
            }
        }
    }
}
