//! Writer chunks in the leader's table of puts: a chunk is a reservation
//! without a key, ranges one writer places small objects in by itself
//! (`objects/chunks.rs`). It is handed out by the same bump pointer as a
//! put's ranges and holds its arenas the same way until it is returned or
//! expires.

use std::time::{Duration, Instant};

use mooncake_raft_store::PlacedReplica;
use mooncake_segment::ClientId;

use super::placement::Need;
use super::{Candidate, PutTable, Reserve, Round, aligned};

/// A writer chunk: ranges (one per replica, distinct segments, same
/// length) one writer places small objects in by itself, so each of its
/// puts needs only a PutEnd. Counted as one reservation in each arena until
/// returned (then held for the revoke quarantine) or expired (then held
/// until the release timeout after it was reserved), as a put's ranges are.
#[derive(Clone, Debug)]
pub struct Chunk {
    pub client: ClientId,
    pub replicas: Vec<PlacedReplica>,
    pub started: Instant,
}

/// Whether a PutEnd's ranges lie in the writer chunk it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkCover {
    Inside,
    /// This leader holds no such chunk (it expired, was returned, or
    /// another leader reserved it).
    Unknown,
    /// The chunk is this leader's, the ranges are not in it: why.
    Outside(String),
}

impl PutTable {
    /// Reserves a writer chunk of `len` bytes (aligned) for `client` on
    /// `replicas` segments of `candidates`, placed as a put of that size
    /// that accepts no fewer replicas: its id and ranges, or what must
    /// happen first. A chunk is one reservation in each of its arenas
    /// until it is returned or expires.
    pub fn reserve_chunk(
        &mut self,
        client: ClientId,
        replicas: usize,
        len: u64,
        candidates: &[Candidate],
        round: &Round,
        now: Instant,
    ) -> Result<(u64, Vec<PlacedReplica>), Reserve> {
        let need = Need { len: aligned(len), replicas, min_replicas: replicas };
        let placed = self.place(&need, candidates, round, now)?;
        self.next_chunk += 1;
        let id = self.next_chunk;
        self.chunks.insert(id, Chunk { client, replicas: placed.clone(), started: now });
        Ok((id, placed))
    }

    /// Whether `echoed` (a PutEnd's replicas) lies in `client`'s chunk `id`:
    /// one range per chunk range, in its order, on the same segment and
    /// arena and inside it.
    pub fn chunk_covers(&self, client: ClientId, id: u64, echoed: &[PlacedReplica]) -> ChunkCover {
        let Some(chunk) = self.chunks.get(&id) else { return ChunkCover::Unknown };
        if chunk.client != client {
            return ChunkCover::Outside(format!("chunk {id} is not {client}'s"));
        }
        if echoed.len() != chunk.replicas.len() {
            return ChunkCover::Outside(format!(
                "chunk {id} has {} replicas, the PutEnd names {}",
                chunk.replicas.len(),
                echoed.len()
            ));
        }
        for (i, (e, c)) in echoed.iter().zip(&chunk.replicas).enumerate() {
            let inside = e.range.offset >= c.range.offset
                && e.range.offset.checked_add(e.range.len).is_some_and(|end| end <= c.range.offset + c.range.len);
            if e.segment != c.segment || e.arena != c.arena || !inside {
                return ChunkCover::Outside(format!(
                    "replicas[{i}] ({} {} [{}, +{})) is not inside chunk {id}'s range there",
                    e.segment, e.arena, e.range.offset, e.range.len
                ));
            }
        }
        ChunkCover::Inside
    }

    /// The writer is done with chunk `id` (it sends ReturnChunk once every
    /// put placed in it has its answer): its ranges no longer hold their
    /// arenas, as a revoked put's (a TCP write it gave up on is refused once
    /// the arena is fenced for its return). False when `client` holds no
    /// such chunk here.
    /// (`hold_until`: only the planted bug `--dev-unsafe-hold-freed-ranges`.)
    pub fn return_chunk(&mut self, client: ClientId, id: u64, hold_until: Option<Instant>) -> bool {
        if self.chunks.get(&id).is_none_or(|c| c.client != client) {
            return false;
        }
        if let Some(c) = self.chunks.remove(&id) {
            self.let_go(&c.replicas, hold_until);
        }
        true
    }

    /// The planted bug of `--dev-unsafe-chunk-reuse`: chunk `id`'s space
    /// goes back to its arenas at once (the bump pointer rewound over it:
    /// the next put or chunk there is handed the same bytes) while its
    /// writer keeps placing objects in it.
    pub fn dev_unsafe_reclaim_chunk(&mut self, id: u64) {
        let Some(chunk) = self.chunks.get(&id) else { return };
        self.planted_reuse = true;
        for r in &chunk.replicas {
            if let Some(a) = self.arenas.get_mut(&r.arena) {
                let start = a.arena.extents.get(a.extent).map_or(0, |e| e.offset);
                if start + a.used_in_extent == r.range.offset + r.range.len {
                    a.used_in_extent -= r.range.len;
                }
            }
        }
    }

    /// Writer chunks held now.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Chunks reserved longer than `discard_after` ago end: a PutEnd into
    /// one is refused (PUT_EXPIRED) and its ranges are held until
    /// `release_after` after it was reserved, as a discarded put's.
    pub(super) fn expire_chunks(&mut self, now: Instant, discard_after: Duration, release_after: Duration) {
        self.end_chunks(|c| now.saturating_duration_since(c.started) > discard_after, release_after);
    }

    /// `client` expired: its chunks end, their ranges held until
    /// `release_after` after each was reserved.
    pub(super) fn expire_client_chunks(&mut self, client: ClientId, release_after: Duration) {
        self.end_chunks(|c| c.client == client, release_after);
    }

    /// Ends the chunks `ended` picks, holding their ranges until
    /// `release_after` after each was reserved.
    fn end_chunks(&mut self, ended: impl Fn(&Chunk) -> bool, release_after: Duration) {
        let gone: Vec<u64> = self.chunks.iter().filter(|(_, c)| ended(c)).map(|(id, _)| *id).collect();
        for id in gone {
            if let Some(c) = self.chunks.remove(&id) {
                self.hold(&c.replicas, c.started + release_after);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use mooncake_raft_store::{ArenaId, PlacedReplica};
    use mooncake_segment::{ClientId, Range, SegmentId};

    use super::super::tests::{MB, ask, cand, fewer, placed, table, table_in_term};
    use super::super::{Candidate, PutTable, aligned};
    use super::ChunkCover;

    /// A chunk reserved on the given segments.
    fn chunk(t: &mut PutTable, client: u64, len: u64, cands: &[Candidate], now: Instant) -> (u64, Vec<PlacedReplica>) {
        t.reserve_chunk(ClientId(client), cands.len(), len, cands, &fewer(), now).expect("a chunk")
    }

    #[test]
    fn a_chunk_is_handed_out_once_beside_puts_and_covers_only_its_own_ranges() {
        let t0 = Instant::now();
        let mut t = table(2, 4 * MB);
        let cands = [cand(1, "h1"), cand(2, "h2")];
        let a = placed(t.reserve(&ask("a", 1, 1000, 2), &cands, &fewer(), t0));
        let (id, c) = chunk(&mut t, 7, MB, &cands, t0);
        let b = placed(t.reserve(&ask("b", 1, 1000, 2), &cands, &fewer(), t0));
        for (seg, r) in c.iter().enumerate() {
            assert_eq!(r.range, Range::new(aligned(1000), MB), "replica {seg}: after a, before b");
            assert_eq!(b[seg].range.offset, aligned(1000) + MB);
            assert_eq!(a[seg].range.offset, 0);
        }
        assert_eq!(t.chunk_count(), 1);
        let inside = |off: u64, len: u64| -> Vec<PlacedReplica> {
            c.iter().map(|r| PlacedReplica { range: Range::new(r.range.offset + off, len), ..r.clone() }).collect()
        };
        assert_eq!(t.chunk_covers(ClientId(7), id, &inside(0, 4096)), ChunkCover::Inside);
        assert_eq!(t.chunk_covers(ClientId(7), id, &inside(MB - 4096, 4096)), ChunkCover::Inside);
        let outside = |cover: ChunkCover| matches!(cover, ChunkCover::Outside(_));
        assert!(outside(t.chunk_covers(ClientId(7), id, &inside(MB - 4096, 4160))), "past its end");
        assert!(outside(t.chunk_covers(ClientId(8), id, &inside(0, 4096))), "another writer");
        assert!(outside(t.chunk_covers(ClientId(7), id, &inside(0, 4096)[..1])), "one replica of two");
        let swapped: Vec<PlacedReplica> = inside(0, 4096).into_iter().rev().collect();
        assert!(outside(t.chunk_covers(ClientId(7), id, &swapped)), "replicas in another order");
        assert_eq!(t.chunk_covers(ClientId(7), id + 1, &inside(0, 4096)), ChunkCover::Unknown);
        // Overflowing ranges are outside, not a panic.
        let huge = vec![PlacedReplica { range: Range::new(u64::MAX - 10, 100), ..c[0].clone() }; 2];
        assert!(outside(t.chunk_covers(ClientId(7), id, &huge)));
    }

    #[test]
    fn a_deposed_leaders_chunk_id_is_unknown_to_the_next_term_whoever_holds_that_id_now() {
        let t0 = Instant::now();
        let cands = [cand(1, "h1")];
        let mut old = table_in_term(4, 1, 4 * MB);
        let (old_id, old_ranges) = chunk(&mut old, 7, MB, &cands, t0);
        // The next leader hands its first chunk to another writer, and one to 7.
        let mut new = table_in_term(5, 1, 4 * MB);
        let (other, _) = chunk(&mut new, 8, MB, &cands, t0);
        let (mine, _) = chunk(&mut new, 7, MB, &cands, t0);
        assert!(old_id != other && old_id != mine, "ids {old_id}, {other}, {mine}");
        let end: Vec<PlacedReplica> =
            old_ranges.iter().map(|r| PlacedReplica { range: Range::new(r.range.offset, 4096), ..r.clone() }).collect();
        assert_eq!(new.chunk_covers(ClientId(7), old_id, &end), ChunkCover::Unknown);
    }

    #[test]
    fn a_chunk_holds_its_arena_until_returned_or_expired_and_released() {
        let t0 = Instant::now();
        let (discard, release) = (Duration::from_secs(30), Duration::from_secs(600));
        let mut t = table(1, 4 * MB);
        let cands = [cand(1, "h1")];
        let (returned, _) = chunk(&mut t, 7, MB, &cands, t0);
        let (stalled, _) = chunk(&mut t, 8, MB, &cands, t0);
        t.relieve(SegmentId(1));
        assert!(!t.return_chunk(ClientId(8), returned, None), "only its writer returns a chunk");
        assert!(t.return_chunk(ClientId(7), returned, None));
        assert!(!t.return_chunk(ClientId(7), returned, None), "returned once");
        assert!(t.returnable().is_empty(), "the stalled writer's chunk still holds the arena");
        assert_eq!(t.chunk_covers(ClientId(7), returned, &[]), ChunkCover::Unknown);
        t.expire(t0 + discard, discard, release);
        assert_eq!(
            t.chunk_covers(ClientId(8), stalled, &[]),
            ChunkCover::Outside("chunk 2 has 1 replicas, the PutEnd names 0".into()),
            "exactly the timeout is not past it"
        );
        t.expire(t0 + discard + Duration::from_millis(1), discard, release);
        assert_eq!(t.chunk_count(), 0, "the stalled writer's chunk expired");
        t.expire(t0 + release / 2, discard, release);
        assert!(t.returnable().is_empty(), "the stalled writer may still be writing into its chunk");
        t.expire(t0 + release, discard, release);
        assert_eq!(t.returnable(), vec![ArenaId(101)]);
    }

    #[test]
    fn an_expired_clients_chunks_hold_their_ranges_until_the_release_timeout() {
        let t0 = Instant::now();
        let mut t = table(1, 4 * MB);
        let (id, _) = chunk(&mut t, 9, MB, &[cand(1, "h1")], t0);
        t.expire_client(ClientId(9), Duration::from_secs(60));
        assert_eq!(t.chunk_covers(ClientId(9), id, &[]), ChunkCover::Unknown);
        t.relieve(SegmentId(1));
        t.expire(t0 + Duration::from_secs(59), Duration::from_secs(30), Duration::from_secs(60));
        assert!(t.returnable().is_empty());
        t.expire(t0 + Duration::from_secs(60), Duration::from_secs(30), Duration::from_secs(60));
        assert_eq!(t.returnable(), vec![ArenaId(101)]);
    }
}
