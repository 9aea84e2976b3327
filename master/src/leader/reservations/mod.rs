//! Put reservations and the leader's own arenas: how a PutStart is answered
//! without a Raft round. Pure bookkeeping of one leadership term (no clock:
//! callers pass `now`; no I/O: the caller proposes the commands it asks for).
//!
//! The leader grants itself arenas through the log (`ArenaGrant`), one open
//! arena per segment, and hands out ranges inside it with a bump pointer: a
//! range is handed out once in an arena's life, whatever happens to it after
//! (committed, revoked, expired). An arena is sealed when a put does not fit
//! in it (its untouched tail is trimmed back to the segment) and returned
//! (`ArenaReturn`) once no reservation in it can still be written: committed,
//! revoked or returned by its writer, or past the release timeout. So a writer
//! that stalls never finds its range given to someone else while the arena
//! lives, and a late PutEnd into a returned arena is refused by apply.
//!
//! A put its writer revoked (or a writer chunk it returned) frees its arena
//! at once: the writer sends the revoke only once its own writes ended
//! (shared-memory copies run on the put's task; TCP writes it gave up on may
//! still sit in a socket buffer), and the arena's return waits until its
//! store node fenced it (`arena_fences.rs`: the node refuses every write
//! under the arena and has none still moving bytes). Holding such ranges for
//! a quarantine as well (30 s until stop 43) kept a churning cache's freed
//! space in arenas nobody could return: every put into a full segment was
//! refused while it held evictable bytes.
//!
//! Arenas of other terms (a deposed leader's) are never used: they are
//! returned only `release_after` after this leader first saw them.
//!
//! The table is [`PutTable`]; this module keeps its reservations (a put's
//! life from PutStart to PutEnd, revoke or expiry). The rest of it lives
//! beside: `placement` (which segments a put's replicas go to: spread over
//! zones and hosts, rotated by recent bytes, ramped for an empty node),
//! `arenas` (this term's own arenas: the bump pointer, sealing, trims,
//! returns and the sweep of other terms' arenas), `chunks` (writer
//! chunks: reservations without a key) and `invariants` (what holds after
//! every change, checked in tests and debug builds).

mod arenas;
mod chunks;
mod invariants;
mod placement;

pub use arenas::{ARENA_MAX_BYTES, ARENA_SHARE_DIVISOR, ARENA_START_BYTES, aligned, arena_cap};
pub use chunks::{Chunk, ChunkCover};
pub use placement::{Candidate, RAMP_WEIGHT_CAP, Round, Spreading, ramping};

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use mooncake_raft_store::{ArenaId, Pin, PlacedReplica};
use mooncake_segment::{ClientId, SegmentId};

use arenas::OwnArena;
use placement::RecentTakes;

/// A put in flight: ranges reserved, bytes being written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub client: ClientId,
    pub size_bytes: u64,
    pub pin: Pin,
    pub upsert: bool,
    pub replicas: Vec<PlacedReplica>,
    pub started: Instant,
    /// PutEnds of this put being committed right now: while one is, a
    /// revoke cannot promise the put had no effect.
    pub ending: u32,
}

/// What a PutRevoke found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoke {
    /// The reservation is gone: the put can never be recorded by this leader.
    Revoked,
    /// No put of the key is in flight here.
    NotInFlight,
    /// Another client's put of the key is in flight: not this caller's to revoke.
    OtherWriter,
    /// A PutEnd of the put is being committed: its answer decides the put.
    Ending,
}

/// What a put asks for.
#[derive(Clone, Debug)]
pub struct PutAsk {
    pub key: String,
    pub client: ClientId,
    pub size_bytes: u64,
    pub replica_num: usize,
    /// Fewest replicas the put accepts, even once eviction cannot help
    /// (at least 1, at most `replica_num`).
    pub min_replicas: usize,
    pub pin: Pin,
    pub upsert: bool,
}

/// The answer of [`PutTable::reserve`].
#[derive(Debug, PartialEq, Eq)]
pub enum Reserve {
    /// Ranges reserved (fewer replicas than asked when fewer segments had room).
    Placed(Vec<PlacedReplica>),
    /// The same writer asked again for the same key and size: its placement.
    Again(Vec<PlacedReplica>),
    /// Another writer is putting this key.
    Taken,
    /// Arenas are needed on these segments first: (segment, length).
    NeedArenas(Vec<(SegmentId, u64)>),
    /// Too few candidate segments have room: `missing` more replicas need
    /// room made (on segments of the round's `excluded`).
    NoRoom { missing: usize },
}

/// Reservations and arenas of one leadership term.
#[derive(Default)]
pub struct PutTable {
    active: HashMap<String, Reservation>,
    /// Bytes this leader handed out per segment lately: placement gives
    /// each segment new bytes in proportion to its (capped) free bytes
    /// ([`PutTable::place`]), so puts rotate over equally free segments (a
    /// batch's puts are placed before any commits) and a new, empty node
    /// fills over seconds instead of taking every write at once.
    recent: RecentTakes,
    arenas: BTreeMap<ArenaId, OwnArena>,
    open: HashMap<SegmentId, ArenaId>,
    next_len: HashMap<SegmentId, u64>,
    /// Arenas of ended reservations, held until the time given.
    held: Vec<(Vec<ArenaId>, Instant)>,
    /// Arenas not this term's, and when this leader first saw each.
    foreign_seen: HashMap<ArenaId, Instant>,
    /// Writer chunks by id: the term in the high 32 bits, then a count, so
    /// an id a deposed leader handed out never names a chunk of this term
    /// (a PutEnd into it is recorded as a deposed leader's reservation).
    chunks: HashMap<u64, Chunk>,
    next_chunk: u64,
    /// The planted bug of `--dev-unsafe-chunk-reuse` rewound an arena's
    /// bump pointer: [`PutTable::check`] skips what it breaks on purpose.
    planted_reuse: bool,
}

impl PutTable {
    /// The reservations of leadership term `term`: none yet.
    pub fn for_term(term: u64) -> Self {
        PutTable { next_chunk: term.min(u64::from(u32::MAX)) << 32, ..PutTable::default() }
    }

    /// The reservation of `key`, if a put of it is in flight.
    pub fn find(&self, key: &str) -> Option<&Reservation> {
        self.active.get(key)
    }

    pub fn active_count(&self) -> usize {
        self.active.len()
    }

    /// Bytes of memory reserved for puts in flight (PutStart answered, no
    /// PutEnd yet), over all their replicas: room already promised, which
    /// the eviction watermark counts as used.
    pub fn reserved_bytes(&self) -> u64 {
        self.active.values().flat_map(|r| r.replicas.iter()).map(|p| p.range.len).sum()
    }

    /// Bytes of the objects of `tenant` (by stored key) being put now,
    /// each once at its size, `except` one key (a repeated ask of it):
    /// what its quota counts besides its stored objects.
    pub fn tenant_in_flight(&self, tenant: &str, except: &str) -> u64 {
        self.active
            .iter()
            .filter(|(key, _)| key.as_str() != except && mooncake_segment::tenant::tenant_of(key) == tenant)
            .map(|(_, r)| r.size_bytes)
            .sum()
    }

    /// The put of `key` by `client` was committed or refused: its ranges
    /// are no longer being written. Returns its reservation.
    pub fn finish(&mut self, key: &str, client: ClientId) -> Option<Reservation> {
        if self.active.get(key).is_none_or(|r| r.client != client) {
            return None;
        }
        let r = self.active.remove(key)?;
        self.release(&r.replicas.iter().map(|p| p.arena).collect::<Vec<_>>());
        Some(r)
    }

    /// The writer gave up: the key is free at once, and its ranges no longer
    /// hold their arenas (module doc: the arena's return is fenced), unless
    /// `hold_until` (only the planted bug `--dev-unsafe-hold-freed-ranges`).
    pub fn revoke(&mut self, key: &str, client: ClientId, hold_until: Option<Instant>) -> Revoke {
        match self.active.get(key) {
            Some(r) if r.client == client && r.ending > 0 => return Revoke::Ending,
            Some(r) if r.client == client => {}
            Some(_) => return Revoke::OtherWriter,
            None => return Revoke::NotInFlight,
        }
        if let Some(r) = self.active.remove(key) {
            self.let_go(&r.replicas, hold_until);
        }
        Revoke::Revoked
    }

    /// A PutEnd of `client`'s put of `key` is about to be proposed; returns
    /// the reservation as it was. [`finish`](Self::finish) ends it.
    pub fn begin_end(&mut self, key: &str, client: ClientId) -> Option<Reservation> {
        let r = self.active.get_mut(key)?;
        let found = r.clone();
        if r.client == client {
            r.ending += 1;
        }
        Some(found)
    }

    /// Puts started longer than `discard_after` ago free their keys; their
    /// ranges are held until `release_after` after they started. Held
    /// ranges whose time has come release their arenas. Returns the keys
    /// discarded.
    pub fn expire(&mut self, now: Instant, discard_after: Duration, release_after: Duration) -> Vec<String> {
        let old: Vec<String> = self
            .active
            .iter()
            .filter(|(_, r)| now.saturating_duration_since(r.started) > discard_after)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &old {
            if let Some(r) = self.active.remove(key) {
                self.hold(&r.replicas, r.started + release_after);
            }
        }
        self.expire_chunks(now, discard_after, release_after);
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held).into_iter().partition(|(_, t)| *t <= now);
        self.held = keep;
        for (arenas, _) in due {
            self.release(&arenas);
        }
        old
    }

    /// The client expired: its puts can never complete; hold their ranges
    /// until `release_after` after they started (it may be alive behind a
    /// partition).
    pub fn expire_client(&mut self, client: ClientId, release_after: Duration) {
        let keys: Vec<String> =
            self.active.iter().filter(|(_, r)| r.client == client).map(|(k, _)| k.clone()).collect();
        for key in keys {
            if let Some(r) = self.active.remove(&key) {
                self.hold(&r.replicas, r.started + release_after);
            }
        }
        self.expire_client_chunks(client, release_after);
    }

    /// Frees the arenas of `replicas` of ranges nobody writes any more: at
    /// once, or at `hold_until` (the planted bug's hold).
    pub(super) fn let_go(&mut self, replicas: &[PlacedReplica], hold_until: Option<Instant>) {
        match hold_until {
            None => self.release(&replicas.iter().map(|p| p.arena).collect::<Vec<_>>()),
            Some(until) => self.hold(replicas, until),
        }
    }

    /// Holds the arenas of `replicas` (a put's or a chunk's ranges that may
    /// still be written) until `until`; [`expire`](Self::expire) then
    /// releases them.
    fn hold(&mut self, replicas: &[PlacedReplica], until: Instant) {
        self.held.push((replicas.iter().map(|p| p.arena).collect(), until));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mooncake_raft_store::Arena;
    use mooncake_segment::Range;

    pub(super) const MB: u64 = 1 << 20;
    pub(super) const SEG: u64 = 1 << 30;

    /// A round that accepts fewer replicas than asked.
    pub(super) fn fewer() -> Round {
        Round { allow_fewer: true, ..Round::default() }
    }

    pub(super) fn cand(id: u64, host: &str) -> Candidate {
        zoned(id, host, "")
    }

    pub(super) fn zoned(id: u64, host: &str, zone: &str) -> Candidate {
        Candidate {
            segment: SegmentId(id),
            host: host.into(),
            zone: zone.into(),
            preferred: false,
            capacity_bytes: SEG,
            free_bytes: SEG,
        }
    }

    pub(super) fn ask(key: &str, client: u64, size: u64, replicas: usize) -> PutAsk {
        PutAsk {
            key: key.into(),
            client: ClientId(client),
            size_bytes: size,
            replica_num: replicas,
            min_replicas: 1,
            pin: Pin::None,
            upsert: false,
        }
    }

    pub(super) fn arena(id: u64, segment: u64, offset: u64, len: u64) -> Arena {
        Arena { id: ArenaId(id), segment: SegmentId(segment), extents: vec![Range::new(offset, len)], term: 1 }
    }

    /// A table with an open arena of `len` on each of segments 1..=n.
    pub(super) fn table(n: u64, len: u64) -> PutTable {
        table_in_term(0, n, len)
    }

    /// `n` segments with one arena of `len` bytes each, in term `term`.
    pub(super) fn table_in_term(term: u64, n: u64, len: u64) -> PutTable {
        let mut t = PutTable::for_term(term);
        for s in 1..=n {
            assert_eq!(t.add_arena(arena(100 + s, s, 0, len), SEG), None);
        }
        t
    }

    pub(super) fn placed(r: Reserve) -> Vec<PlacedReplica> {
        match r {
            Reserve::Placed(p) => p,
            other => panic!("not placed: {other:?}"),
        }
    }

    #[test]
    fn a_key_in_flight_is_taken_for_others_and_the_same_ask_gets_the_same_placement() {
        let t0 = Instant::now();
        let mut t = table(2, 4 * MB);
        let cands = [cand(1, "h1"), cand(2, "h2")];
        let p = placed(t.reserve(&ask("k", 1, 100, 2), &cands, &fewer(), t0));
        assert_eq!(p.len(), 2);
        assert_eq!(t.reserve(&ask("k", 1, 100, 2), &cands, &fewer(), t0), Reserve::Again(p));
        assert_eq!(t.reserve(&ask("k", 2, 100, 2), &cands, &fewer(), t0), Reserve::Taken);
        assert_eq!(
            t.reserve(&ask("k", 1, 200, 2), &cands, &fewer(), t0),
            Reserve::Taken,
            "another size is another put"
        );
        assert_eq!(t.revoke("k", ClientId(1), None), Revoke::Revoked);
        assert!(
            matches!(t.reserve(&ask("k", 2, 100, 2), &cands, &fewer(), t0), Reserve::Placed(_)),
            "revoke frees the key"
        );
    }

    /// A writer whose PutEnd call failed sends PutRevoke; if the PutEnd is
    /// still being committed here, "revoked" would be a lie (it may land).
    #[test]
    fn a_put_whose_end_is_being_committed_cannot_be_revoked() {
        let t0 = Instant::now();
        let mut t = table(1, 4 * MB);
        let c = [cand(1, "h1")];
        placed(t.reserve(&ask("k", 1, 100, 1), &c, &fewer(), t0));
        assert_eq!(t.begin_end("k", ClientId(2)).map(|r| r.client), Some(ClientId(1)), "another writer's end");
        assert_eq!(t.revoke("k", ClientId(1), None), Revoke::Revoked, "another writer's end marks nothing");
        placed(t.reserve(&ask("k", 1, 100, 1), &c, &fewer(), t0));
        assert!(t.begin_end("k", ClientId(1)).is_some());
        assert_eq!(t.revoke("k", ClientId(1), None), Revoke::Ending);
        assert!(t.finish("k", ClientId(1)).is_some(), "the end finishes the put");
        assert_eq!(t.revoke("k", ClientId(1), None), Revoke::NotInFlight);
    }

    #[test]
    fn a_revoked_put_frees_its_arena_at_once_and_an_expired_one_holds_it_until_the_writer_cannot_be_writing() {
        let t0 = Instant::now();
        let (discard, release) = (Duration::from_secs(30), Duration::from_secs(600));
        let mut t = table(1, 4 * MB);
        placed(t.reserve(&ask("revoked", 1, 100, 1), &[cand(1, "h1")], &fewer(), t0));
        placed(t.reserve(&ask("stalled", 2, 100, 1), &[cand(1, "h1")], &fewer(), t0));
        t.relieve(SegmentId(1));
        assert_eq!(t.revoke("revoked", ClientId(9), None), Revoke::OtherWriter, "only its writer revokes a put");
        assert!(t.find("revoked").is_some(), "another client's revoke changes nothing");
        assert_eq!(t.revoke("revoked", ClientId(1), None), Revoke::Revoked);
        assert_eq!(t.revoke("revoked", ClientId(1), None), Revoke::NotInFlight, "a second revoke finds nothing");
        assert!(t.returnable().is_empty(), "the stalled put still holds the arena");
        assert!(t.expire(t0 + discard, discard, release).is_empty(), "exactly the timeout is not past it");
        assert_eq!(t.expire(t0 + discard + Duration::from_millis(1), discard, release), vec!["stalled".to_string()]);
        assert!(t.find("stalled").is_none(), "its key is free");
        t.expire(t0 + release / 2, discard, release);
        assert!(t.returnable().is_empty(), "the stalled writer may still be writing");
        t.expire(t0 + release, discard, release);
        assert_eq!(t.returnable(), vec![ArenaId(101)]);
    }

    #[test]
    fn an_expired_client_frees_its_keys_and_holds_its_ranges() {
        let t0 = Instant::now();
        let mut t = table(1, 4 * MB);
        placed(t.reserve(&ask("k", 9, 100, 1), &[cand(1, "h1")], &fewer(), t0));
        t.expire_client(ClientId(9), Duration::from_secs(60));
        assert!(t.find("k").is_none());
        t.relieve(SegmentId(1));
        assert!(t.returnable().is_empty());
        t.expire(t0 + Duration::from_secs(60), Duration::from_secs(30), Duration::from_secs(60));
        assert_eq!(t.returnable(), vec![ArenaId(101)]);
    }
}
