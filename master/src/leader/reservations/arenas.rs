//! This term's own arenas in the [`PutTable`]: granted through the log
//! (`ArenaGrant`), one open per segment, handed out by a bump pointer
//! that only moves forward, sealed when a put does not fit (the untouched
//! tail trimmed back to the segment), and returned once nothing in them
//! can still be written. Also the sweep that forgets own arenas gone with
//! their segment and returns other terms' arenas after the release
//! timeout, and how long arenas grow ([`arena_cap`]).

use std::time::{Duration, Instant};

use mooncake_raft_store::{Arena, ArenaId, PlacedReplica};
use mooncake_segment::{ALLOC_ALIGN_BYTES, Range, SegmentId};

use super::PutTable;

/// First arena granted on a segment in a term; each later one doubles, up to
/// [`ARENA_MAX_BYTES`] or an eighth of the segment. Small first arenas keep
/// a failover from stranding much space (a deposed leader's arenas are held
/// for the release timeout); large later ones amortise the grant commit.
pub const ARENA_START_BYTES: u64 = 4 << 20;
pub const ARENA_MAX_BYTES: u64 = 256 << 20;

/// An arena is at most 1/this of its segment.
pub const ARENA_SHARE_DIVISOR: u64 = 64;

/// The largest arena on a segment of `capacity` bytes: 1/64 of it, at most
/// [`ARENA_MAX_BYTES`]. A leader change holds the old leader's open arena on
/// every segment for the release timeout, so a small share keeps many
/// failovers in a row from filling a segment (8 in 10 minutes hold 1/8).
pub fn arena_cap(capacity: u64) -> u64 {
    ARENA_MAX_BYTES.min(aligned(capacity / ARENA_SHARE_DIVISOR).max(ALLOC_ALIGN_BYTES))
}

/// `len` rounded up to the allocation unit.
pub fn aligned(len: u64) -> u64 {
    len.next_multiple_of(ALLOC_ALIGN_BYTES)
}

/// One of this term's arenas. Ranges are handed out from its extents in
/// order: a cursor (extent, bytes used in it) only moves forward.
#[derive(Clone, Debug)]
pub(super) struct OwnArena {
    pub(super) arena: Arena,
    pub(super) extent: usize,
    pub(super) used_in_extent: u64,
    pub(super) sealed: bool,
    /// Reservations in it that may still be written.
    pub(super) outstanding: u32,
}

impl OwnArena {
    fn new(arena: Arena) -> Self {
        OwnArena { arena, extent: 0, used_in_extent: 0, sealed: false, outstanding: 0 }
    }

    /// Where `len` bytes fit next: (extent, offset in it).
    fn fit(&self, len: u64) -> Option<(usize, u64)> {
        (self.extent..self.arena.extents.len()).find_map(|i| {
            let used = if i == self.extent { self.used_in_extent } else { 0 };
            (self.arena.extents[i].len - used >= len).then_some((i, used))
        })
    }

    /// Bytes before the cursor, counted across the extents in order: what
    /// a trim keeps.
    fn handed_out(&self) -> u64 {
        self.arena.extents[..self.extent].iter().map(|e| e.len).sum::<u64>() + self.used_in_extent
    }

    /// Bytes not handed out yet.
    fn room(&self) -> u64 {
        let total: u64 = self.arena.extents.iter().map(|e| e.len).sum();
        total.saturating_sub(self.handed_out())
    }
}

impl PutTable {
    /// Whether this leader (this term, this process) granted `arena`: then
    /// it knows every range it handed out there.
    pub fn owns(&self, arena: ArenaId) -> bool {
        self.arenas.contains_key(&arena)
    }

    /// Own arenas: (count, bytes).
    pub fn arena_usage(&self) -> (usize, u64) {
        (self.arenas.len(), self.arenas.values().map(|a| a.arena.len_bytes()).sum())
    }

    /// Bytes left in this leader's open arena on `segment` (0 without one).
    pub(super) fn open_room(&self, segment: SegmentId) -> u64 {
        self.open.get(&segment).and_then(|id| self.arenas.get(id)).filter(|a| !a.sealed).map_or(0, OwnArena::room)
    }

    /// Whether `segment`'s open arena can take `len` more bytes.
    pub fn has_room(&self, segment: SegmentId, len: u64) -> bool {
        self.open.get(&segment).and_then(|id| self.arenas.get(id)).is_some_and(|a| a.fit(aligned(len)).is_some())
    }

    /// Hands out `len` bytes of `segment`'s open arena (which has room).
    #[allow(clippy::expect_used, reason = "callers checked the open arena has room (`has_room`) under the same lock")]
    pub(super) fn take(&mut self, segment: SegmentId, len: u64) -> PlacedReplica {
        let id = self.open[&segment];
        let a = self.arenas.get_mut(&id).expect("an open arena is an own arena");
        let (extent, used) = a.fit(len).expect("take without room in the open arena");
        let range = Range::new(a.arena.extents[extent].offset + used, len);
        a.extent = extent;
        a.used_in_extent = used + len;
        a.outstanding += 1;
        self.recent.add(segment, len);
        PlacedReplica { segment, arena: id, range }
    }

    /// How long the next arena on `segment` (of `capacity` bytes) should be
    /// for an object of `len`.
    pub(super) fn arena_len(&self, segment: SegmentId, len: u64, capacity: u64) -> u64 {
        let cap = arena_cap(capacity);
        self.next_len.get(&segment).copied().unwrap_or(ARENA_START_BYTES).min(cap).max(len)
    }

    /// Adopts a granted arena as `segment`'s open one (`capacity`: the
    /// segment's size, which caps arena growth). The arena it replaces is
    /// sealed; returns the trim of its untouched tail to propose.
    pub fn add_arena(&mut self, arena: Arena, capacity: u64) -> Option<(ArenaId, u64)> {
        let segment = arena.segment;
        let cap = arena_cap(capacity);
        let grown = arena.len_bytes().saturating_mul(2).min(cap);
        self.next_len.insert(segment, grown.max(ARENA_START_BYTES.min(cap)));
        self.foreign_seen.remove(&arena.id);
        let id = arena.id;
        self.arenas.insert(id, OwnArena::new(arena));
        let old = self.open.insert(segment, id)?;
        self.seal(old)
    }

    /// Seals an arena; the trim of its untouched tail, if it has one.
    fn seal(&mut self, id: ArenaId) -> Option<(ArenaId, u64)> {
        let a = self.arenas.get_mut(&id)?;
        a.sealed = true;
        let keep = a.handed_out();
        (keep < a.arena.len_bytes()).then_some((id, keep))
    }

    /// Under pressure on `segment`: seals its open arena and answers the
    /// trim of its tail, so the segment's free space is all grantable again.
    pub fn relieve(&mut self, segment: SegmentId) -> Option<(ArenaId, u64)> {
        let id = self.open.remove(&segment)?;
        self.seal(id)
    }

    /// A trim was applied (the arena is sealed: nothing more is handed out).
    pub fn trimmed(&mut self, id: ArenaId, keep: u64) {
        if let Some(a) = self.arenas.get_mut(&id) {
            a.arena.extents = a.arena.trimmed_extents(aligned(keep));
        }
    }

    pub(super) fn release(&mut self, arenas: &[ArenaId]) {
        for id in arenas {
            if let Some(a) = self.arenas.get_mut(id) {
                // Invariant 3 (`invariants.rs`), kept in release: a release
                // without a reservation would return an arena still written.
                assert!(a.outstanding > 0, "arena {id} released more reservations than it holds");
                a.outstanding -= 1;
            }
        }
    }

    /// Sealed own arenas with nothing left in flight: to return.
    pub fn returnable(&self) -> Vec<ArenaId> {
        self.arenas.values().filter(|a| a.sealed && a.outstanding == 0).map(|a| a.arena.id).collect()
    }

    /// Arenas were returned (or are gone with their segment): forget them.
    pub fn forget(&mut self, ids: &[ArenaId]) {
        for id in ids {
            if let Some(a) = self.arenas.remove(id)
                && self.open.get(&a.arena.segment) == Some(id)
            {
                self.open.remove(&a.arena.segment);
            }
            self.foreign_seen.remove(id);
        }
    }

    /// Given every arena in the state: own arenas no longer there (their
    /// segment went) to forget, and foreign arenas (another term's, or a
    /// grant whose answer this leader lost) first seen longer than
    /// `release_after` ago, to return.
    pub fn sweep(
        &mut self,
        in_state: &[ArenaId],
        now: Instant,
        release_after: Duration,
    ) -> (Vec<ArenaId>, Vec<ArenaId>) {
        let gone: Vec<ArenaId> = self.arenas.keys().filter(|id| !in_state.contains(id)).copied().collect();
        self.foreign_seen.retain(|id, _| in_state.contains(id));
        let mut reclaim = Vec::new();
        for id in in_state.iter().filter(|id| !self.arenas.contains_key(id)) {
            let seen = *self.foreign_seen.entry(*id).or_insert(now);
            if now.saturating_duration_since(seen) >= release_after {
                reclaim.push(*id);
            }
        }
        (gone, reclaim)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Reserve;
    use super::super::tests::{MB, SEG, arena, ask, cand, fewer, placed, table};
    use super::*;
    use mooncake_segment::ClientId;

    #[test]
    fn ranges_are_handed_out_once_each_by_a_bump_pointer() {
        let t0 = Instant::now();
        let mut t = table(1, 4 * MB);
        let a = placed(t.reserve(&ask("a", 1, 1000, 1), &[cand(1, "h1")], &fewer(), t0));
        let b = placed(t.reserve(&ask("b", 1, 1000, 1), &[cand(1, "h1")], &fewer(), t0));
        assert_eq!(a[0].range, Range::new(0, aligned(1000)));
        assert_eq!(b[0].range, Range::new(aligned(1000), aligned(1000)));
        // Even after a's put ends, its range is never handed out again.
        t.finish("a", ClientId(1));
        let c = placed(t.reserve(&ask("c", 1, 1000, 1), &[cand(1, "h1")], &fewer(), t0));
        assert_eq!(c[0].range.offset, 2 * aligned(1000));
    }

    #[test]
    fn a_put_that_does_not_fit_asks_for_a_new_arena_and_the_old_one_is_sealed_and_trimmed() {
        let t0 = Instant::now();
        let mut t = table(1, 4 * MB);
        placed(t.reserve(&ask("a", 1, 3 * MB, 1), &[cand(1, "h1")], &fewer(), t0));
        let r = t.reserve(&ask("b", 1, 2 * MB, 1), &[cand(1, "h1")], &fewer(), t0);
        assert_eq!(r, Reserve::NeedArenas(vec![(SegmentId(1), 8 * MB)]), "the next arena doubles");
        let trim = t.add_arena(arena(200, 1, 4 * MB, 8 * MB), SEG);
        assert_eq!(trim, Some((ArenaId(101), 3 * MB)), "the old arena keeps only what it handed out");
        t.trimmed(ArenaId(101), 3 * MB);
        assert!(t.returnable().is_empty(), "a's put is still in flight in the sealed arena");
        t.finish("a", ClientId(1));
        assert_eq!(t.returnable(), vec![ArenaId(101)]);
        t.forget(&[ArenaId(101)]);
        assert_eq!(t.arena_usage(), (1, 8 * MB));
    }

    #[test]
    fn an_arena_of_several_holes_fills_them_in_order_and_never_straddles_two() {
        let t0 = Instant::now();
        let mut t = PutTable::default();
        let holes = vec![Range::new(0, 2 * MB), Range::new(8 * MB, MB), Range::new(16 * MB, 4 * MB)];
        t.add_arena(Arena { id: ArenaId(1), segment: SegmentId(1), extents: holes, term: 1 }, SEG);
        let c = [cand(1, "h1")];
        let a = placed(t.reserve(&ask("a", 1, 1536 << 10, 1), &c, &fewer(), t0));
        assert_eq!(a[0].range, Range::new(0, 1536 << 10));
        // 1 MiB does not fit the 512 KiB left of the first hole: the next hole.
        let b = placed(t.reserve(&ask("b", 1, MB, 1), &c, &fewer(), t0));
        assert_eq!(b[0].range, Range::new(8 * MB, MB));
        let d = placed(t.reserve(&ask("d", 1, 3 * MB, 1), &c, &fewer(), t0));
        assert_eq!(d[0].range, Range::new(16 * MB, 3 * MB));
        // The cursor never goes back, even for what would fit behind it.
        let e = placed(t.reserve(&ask("e", 1, 256 << 10, 1), &c, &fewer(), t0));
        assert_eq!(e[0].range.offset, 19 * MB);
        assert_eq!(t.relieve(SegmentId(1)), Some((ArenaId(1), 2 * MB + MB + 3 * MB + (256 << 10))));
    }

    #[test]
    fn arenas_grow_to_a_cap_and_an_object_larger_than_that_gets_an_arena_of_its_size() {
        let mut t = PutTable::default();
        t.add_arena(arena(1, 1, 0, ARENA_MAX_BYTES), 1 << 40);
        assert_eq!(t.arena_len(SegmentId(1), 1, 1 << 40), ARENA_MAX_BYTES);
        assert_eq!(t.arena_len(SegmentId(1), ARENA_MAX_BYTES * 3, 1 << 40), ARENA_MAX_BYTES * 3);
        // A small segment: arenas are at most 1/64 of it, from the first.
        let mut t = PutTable::default();
        assert_eq!(t.arena_len(SegmentId(1), 64, 1 << 20), 16 << 10);
        t.add_arena(arena(1, 1, 0, 8 << 10), 1 << 20);
        assert_eq!(t.arena_len(SegmentId(1), 64, 1 << 20), 16 << 10);
        assert_eq!(t.arena_len(SegmentId(1), 64 << 10, 1 << 20), 64 << 10, "never smaller than the object");
    }

    #[test]
    fn foreign_arenas_are_returned_only_after_the_release_timeout_and_gone_ones_forgotten() {
        let t0 = Instant::now();
        let release = Duration::from_secs(600);
        let mut t = table(1, 4 * MB);
        let in_state = [ArenaId(5), ArenaId(6)]; // another term's; our 101 went with its segment
        assert_eq!(t.sweep(&in_state, t0, release), (vec![ArenaId(101)], vec![]));
        assert_eq!(t.sweep(&in_state, t0 + release / 2, release), (vec![ArenaId(101)], vec![]));
        assert_eq!(t.sweep(&[ArenaId(5)], t0 + release, release).1, vec![ArenaId(5)], "counted from the first look");
    }
}
