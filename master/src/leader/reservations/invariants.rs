//! What must hold of a [`PutTable`] after every change, checked by
//! [`PutTable::check`]: after each operation in the unit tests (a random
//! walk over every operation below), and after each use of the leader's
//! soft state in debug builds (`leader/mod.rs`). Release builds keep the
//! cheap half beside the code that could break it (an arena's count of
//! reservations never goes below zero: `arenas.rs`).
//!
//! 1. Each range a put in flight or a writer chunk holds, in one of this
//!    term's arenas, lies on that arena's segment, inside the part of it
//!    the bump pointer has handed out.
//! 2. No two such ranges overlap: a byte is promised to one writer.
//! 3. Each own arena counts exactly the reservations that may still be
//!    written in it (puts, chunks, and ranges held after an expiry): it is
//!    returned when, and only when, nothing can write into it.
//! 4. A segment's open arena is an unsealed own arena of that segment.
//! 5. A put's or chunk's replicas lie on distinct segments.
//!
//! Ranges in arenas this leader no longer owns (their segment went) are
//! not checked. The planted bug of `--dev-unsafe-chunk-reuse` breaks 1
//! and 2 on purpose; a table it touched skips them.

use std::collections::HashMap;

use mooncake_raft_store::{ArenaId, PlacedReplica};
use mooncake_segment::SegmentId;

use super::PutTable;

/// Whose a live range is: a put's key or a chunk's id (said only when a
/// check fails: checking allocates nothing per range).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Whose<'a> {
    Put(&'a str),
    Chunk(u64),
}

impl std::fmt::Display for Whose<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Whose::Put(key) => write!(f, "the put of {key:?}"),
            Whose::Chunk(id) => write!(f, "chunk {id}"),
        }
    }
}

/// One live range: (segment, start, end, whose).
type Live<'a> = (SegmentId, u64, u64, Whose<'a>);

impl PutTable {
    /// Ok, or the first invariant (module doc) found broken, said.
    pub fn check(&self) -> Result<(), String> {
        for (segment, id) in &self.open {
            match self.arenas.get(id) {
                None => return Err(format!("segment {segment}'s open arena {id} is not one of this term's")),
                Some(a) if a.arena.segment != *segment => {
                    return Err(format!("segment {segment}'s open arena {id} is on {}", a.arena.segment));
                }
                Some(a) if a.sealed => return Err(format!("segment {segment}'s open arena {id} is sealed")),
                Some(_) => {}
            }
        }
        let mut refs: HashMap<ArenaId, u32> = HashMap::new();
        let mut live: Vec<Live> = Vec::new();
        let puts = self.active.iter().map(|(key, r)| (Whose::Put(key), &r.replicas));
        let chunks = self.chunks.iter().map(|(id, c)| (Whose::Chunk(*id), &c.replicas));
        for (whose, replicas) in puts.chain(chunks) {
            let distinct =
                replicas.iter().enumerate().all(|(i, p)| replicas[..i].iter().all(|q| q.segment != p.segment));
            if !distinct {
                return Err(format!("{whose} has two replicas on one segment: {replicas:?}"));
            }
            for p in replicas {
                if self.arenas.contains_key(&p.arena) {
                    *refs.entry(p.arena).or_default() += 1;
                    self.handed_out_holds(p, whose)?;
                    live.push((p.segment, p.range.offset, p.range.offset + p.range.len, whose));
                }
            }
        }
        for (ids, _) in &self.held {
            for id in ids {
                *refs.entry(*id).or_default() += 1;
            }
        }
        for (id, a) in &self.arenas {
            let counted = refs.get(id).copied().unwrap_or(0);
            if a.outstanding != counted {
                return Err(format!(
                    "arena {id} counts {} reservations that may be written, {counted} exist",
                    a.outstanding
                ));
            }
        }
        if self.planted_reuse {
            return Ok(());
        }
        live.sort_unstable();
        for w in live.windows(2) {
            let ((s0, _, end0, who0), (s1, start1, _, who1)) = (&w[0], &w[1]);
            if s0 == s1 && end0 > start1 {
                return Err(format!("{who0} and {who1} overlap on segment {s0} at {start1}"));
            }
        }
        Ok(())
    }

    /// Invariant 1 for `p` (in an own arena).
    fn handed_out_holds(&self, p: &PlacedReplica, whose: Whose<'_>) -> Result<(), String> {
        let Some(a) = self.arenas.get(&p.arena) else { return Ok(()) };
        if a.arena.segment != p.segment {
            return Err(format!("{whose} names arena {} of {} on segment {}", p.arena, a.arena.segment, p.segment));
        }
        if self.planted_reuse {
            return Ok(());
        }
        let (start, end) = (p.range.offset, p.range.offset + p.range.len);
        let inside = a.arena.extents.iter().enumerate().find(|(_, e)| e.offset <= start && end <= e.offset + e.len);
        let handed_out = match inside {
            Some((i, e)) => i < a.extent || (i == a.extent && end <= e.offset + a.used_in_extent),
            None => false,
        };
        if !handed_out {
            return Err(format!(
                "{whose} holds [{start}, {end}) of arena {}, outside what its bump pointer handed out",
                p.arena
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use mooncake_raft_store::ArenaId;
    use mooncake_segment::{ClientId, Range, SegmentId};

    use super::super::tests::{MB, SEG, arena, ask, cand, fewer};
    use super::super::{PutTable, Reservation, Reserve, Round};

    /// A small deterministic generator (xorshift): the walk is the same
    /// every run, and a failure names its seed and step.
    struct Walk(u64);

    impl Walk {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below
        }
    }

    /// Grants the arenas a reservation asked for, each on fresh bytes of
    /// its segment (as the state machine would).
    fn grant(t: &mut PutTable, wanted: Vec<(SegmentId, u64)>, next_id: &mut u64, next_offset: &mut [u64; 4]) {
        for (segment, len) in wanted {
            let at = &mut next_offset[segment.0 as usize];
            *next_id += 1;
            t.add_arena(arena(*next_id, segment.0, *at, len), SEG);
            *at += len;
        }
    }

    /// Every operation of the table, in a random order, thousands of
    /// times: the invariants hold after each.
    #[test]
    fn the_invariants_hold_after_every_operation_of_a_random_walk() {
        for seed in 1..=8u64 {
            let mut w = Walk(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut t = PutTable::for_term(3);
            let (mut next_id, mut next_offset) = (100u64, [0u64; 4]);
            let cands = [cand(1, "h1"), cand(2, "h2"), cand(3, "h3")];
            let t0 = Instant::now();
            let (discard, release) = (Duration::from_secs(30), Duration::from_secs(60));
            let mut chunks: Vec<(ClientId, u64)> = Vec::new();
            for step in 0..2_000u64 {
                let now = t0 + Duration::from_millis(step * 50);
                let key = format!("k{}", w.next(40));
                let client = ClientId(1 + w.next(4));
                match w.next(10) {
                    0..=3 => {
                        let a = ask(&key, client.0, 1 + w.next(2 * MB), 1 + w.next(3) as usize);
                        match t.reserve(&a, &cands, &fewer(), now) {
                            Reserve::NeedArenas(wanted) => grant(&mut t, wanted, &mut next_id, &mut next_offset),
                            Reserve::Placed(_) | Reserve::Again(_) | Reserve::Taken | Reserve::NoRoom { .. } => {}
                        }
                    }
                    4 => {
                        t.begin_end(&key, client);
                        t.finish(&key, client);
                    }
                    5 => {
                        t.revoke(&key, client, None);
                    }
                    6 => match t.reserve_chunk(client, 1 + w.next(2) as usize, MB, &cands, &Round::default(), now) {
                        Ok((id, _)) => chunks.push((client, id)),
                        Err(Reserve::NeedArenas(wanted)) => grant(&mut t, wanted, &mut next_id, &mut next_offset),
                        Err(_) => {}
                    },
                    7 if !chunks.is_empty() => {
                        let (c, id) = chunks.swap_remove(w.next(chunks.len() as u64) as usize);
                        t.return_chunk(c, id, None);
                    }
                    8 => {
                        t.expire(now, discard, release);
                        if w.next(4) == 0 {
                            t.expire_client(client, release);
                        }
                    }
                    _ => {
                        if let Some((id, keep)) = t.relieve(SegmentId(1 + w.next(3))) {
                            t.trimmed(id, keep);
                        }
                        let done = t.returnable();
                        t.forget(&done);
                    }
                }
                if let Err(why) = t.check() {
                    panic!("seed {seed}, step {step}: {why}");
                }
            }
            assert!(next_id > 110, "seed {seed}: the walk granted few arenas ({})", next_id - 100);
        }
    }

    /// The check is not vacuous: a table with a range promised twice, one
    /// past the bump pointer, or a count that drifted, is refused.
    #[test]
    fn the_check_finds_each_broken_invariant() {
        let t0 = Instant::now();
        let fresh = || {
            let mut t = PutTable::for_term(1);
            t.add_arena(arena(101, 1, 0, 4 * MB), SEG);
            assert!(matches!(t.reserve(&ask("a", 1, MB, 1), &[cand(1, "h1")], &fewer(), t0), Reserve::Placed(_)));
            assert_eq!(t.check(), Ok(()));
            t
        };
        let copy_of_a = |t: &PutTable| Reservation { client: ClientId(2), ..t.active["a"].clone() };

        let mut twice = fresh();
        let again = copy_of_a(&twice);
        twice.active.insert("b".into(), again);
        if let Some(a) = twice.arenas.get_mut(&ArenaId(101)) {
            a.outstanding += 1;
        }
        assert!(twice.check().is_err_and(|why| why.contains("overlap")), "{:?}", twice.check());

        let mut beyond = fresh();
        let mut past = copy_of_a(&beyond);
        past.replicas[0].range = Range::new(2 * MB, MB);
        beyond.active.insert("b".into(), past);
        if let Some(a) = beyond.arenas.get_mut(&ArenaId(101)) {
            a.outstanding += 1;
        }
        assert!(beyond.check().is_err_and(|why| why.contains("bump pointer")), "{:?}", beyond.check());

        let mut drifted = fresh();
        drifted.finish("a", ClientId(1));
        if let Some(a) = drifted.arenas.get_mut(&ArenaId(101)) {
            a.outstanding += 1;
        }
        assert!(drifted.check().is_err_and(|why| why.contains("counts")), "{:?}", drifted.check());
    }
}
