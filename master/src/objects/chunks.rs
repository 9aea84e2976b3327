//! Writer chunks: one master round trip per small put.
//!
//! A writer asks the leader once (ReserveChunk) for a chunk: one range per
//! replica, on distinct segments, inside this leader's own arenas, with a
//! WRITE capability for each whole range. It then places small objects in
//! the chunk by itself (the same offset in every range, bumped, never
//! reused), writes their bytes, and sends only their PutEnds. The leader
//! records such a put if its ranges lie in the chunk it names and the key
//! is free (apply checks again that they are free and in a live arena).
//!
//! Why nothing another writer was promised can be overwritten: a chunk is
//! a reservation like a PutStart's, held by one writer, counted in each of
//! its arenas until returned (the arena's own return is then fenced on its
//! store node) or expired (held until the release timeout after it was
//! reserved), and
//! ranges are handed out once in an arena's life (`reservations.rs`). A new
//! leader knows nothing of its predecessor's chunks: a PutEnd into one is
//! recorded as any PutEnd of a deposed leader's reservation
//! (`put_end::plan_unknown_end`), and that leader's arenas are returned only
//! after the release timeout, fenced on the store nodes.

use std::time::Instant;

use mooncake_raft_store::state::REPLICA_NUM_MAX;
use mooncake_raft_store::{MetaError, PlacedReplica};
use mooncake_segment::ClientId;

use crate::leader::reservations::{Reserve, Round, Spreading, aligned, arena_cap};
use crate::objects::puts::{Grant, Relief, candidates, grant_arena};
use crate::refusal::Refusal;
use crate::shared::Shared;

/// Rounds of arena grants one ReserveChunk may go through (each halving
/// of the chunk's length starts another).
const CHUNK_ROUNDS_MAX: usize = 12;

/// A chunk is halved, on segments without room for it whole, down to room
/// for this many objects of the size its writer asked for: below that a
/// chunk saves its writer few round trips.
const CHUNK_SLOTS_MIN: u64 = 8;

/// The largest chunk a writer may ask for.
pub const CHUNK_MAX_BYTES: u64 = 64 << 20;

/// ReserveChunk: a chunk for the writer, granting arenas as needed (a
/// shorter chunk where no segment has the asked length contiguous) but
/// never evicting: a chunk needs contiguous room, which an LRU's scattered
/// victims rarely make, so evicting for it would empty a fragmented cache
/// (a writer refused puts the usual way, which evicts what each needs).
pub async fn reserve_chunk(shared: &Shared, req: &ChunkAsk, tenant: &str) -> Result<GrantedChunk, Refusal> {
    let no_room = |why: String| {
        Err(MetaError::NoAvailableHandle(format!("no writer chunk: {why}; put the usual way (PutStart)")).into())
    };
    let replicas = req.replicas.max(1);
    if replicas > REPLICA_NUM_MAX {
        return Err(Refusal::Meta(MetaError::InvalidParams(format!(
            "replica_num {replicas} of a writer chunk: give 1..={REPLICA_NUM_MAX}"
        ))));
    }
    if req.min_len == 0 || req.min_len > req.len || req.len > CHUNK_MAX_BYTES {
        return Err(Refusal::Meta(MetaError::InvalidParams(format!(
            "a writer chunk of len {} and min_len {}: give 1 <= min_len <= len <= {CHUNK_MAX_BYTES}",
            req.len, req.min_len
        ))));
    }
    let client = req.client;
    let mut round = Round::default();
    // The chunk's length: asked, then halved while no segment has that
    // much contiguous room (a full cache's free bytes lie in the holes
    // eviction left), down to CHUNK_SLOTS_MIN of the writer's objects.
    let mut halvings = 0u32;
    for _ in 0..CHUNK_ROUNDS_MAX {
        let found = shared.reader.read(|s| candidates(s, req.min_len, &[], tenant));
        let cands = match found {
            Ok(c) => c,
            Err(e @ MetaError::NoAvailableHandle(_)) => return Err(Refusal::Meta(e)),
            Err(e) => return no_room(e.to_string()),
        };
        if cands.len() < replicas as usize {
            return no_room(format!("{replicas} replicas, {} memory segments", cands.len()));
        }
        // A chunk fits in one arena of the smallest segment it may go to.
        let cap = cands.iter().map(|c| arena_cap(c.capacity_bytes)).min().unwrap_or(0);
        let len = aligned(aligned(req.len).min(cap) >> halvings);
        if len < aligned(req.min_len) {
            return no_room(format!("at most {len} bytes fit one arena, {} asked at least", req.min_len));
        }
        let now = Instant::now();
        let unsafe_reuse = shared.write_path.unsafe_chunk_reuse;
        let reserved = shared.leader.with(|t| {
            let reserved = t.puts.reserve_chunk(client, replicas as usize, len, &cands, &round, now);
            if let (true, Ok((id, _))) = (unsafe_reuse, &reserved) {
                t.puts.dev_unsafe_reclaim_chunk(*id);
            }
            reserved
        });
        match reserved {
            None => return Err(shared.not_leader()),
            Some(Ok((id, placed))) => {
                shared.metrics.placements.with_label_values(&[Spreading::of(&placed, &cands).label()]).inc();
                return Ok(granted(shared, id, placed));
            }
            Some(Err(Reserve::NeedArenas(wanted))) => {
                let ramping = crate::leader::reservations::ramping(&cands);
                for (segment, arena_len) in wanted {
                    match grant_arena(shared, segment, arena_len, len, Relief::None).await {
                        Grant::Room => round.granted.push(segment),
                        // A node is filling and placement picked a full
                        // segment: the writer puts the usual way, which
                        // evicts there, instead of every chunk going to
                        // the filling node (`reservations::ramping`).
                        Grant::NoRoom if ramping => {
                            return no_room(format!("segment {segment} is full while another fills"));
                        }
                        Grant::NoRoom => round.excluded.push(segment),
                        Grant::NotLeading => return Err(shared.not_leader()),
                    }
                }
            }
            Some(Err(Reserve::NoRoom { .. })) if (len >> 1) >= aligned(req.min_len).saturating_mul(CHUNK_SLOTS_MIN) => {
                halvings += 1;
                round = Round::default();
            }
            Some(Err(_)) => return no_room(format!("fewer than {replicas} segments have {len} bytes free")),
        }
    }
    no_room(format!("no room made in {CHUNK_ROUNDS_MAX} rounds of arena grants"))
}

/// What a ReserveChunk asks for: `len` bytes per replica (at least
/// `min_len` where no segment has `len` contiguous), on `replicas` segments.
pub struct ChunkAsk {
    pub client: ClientId,
    pub replicas: u32,
    pub len: u64,
    pub min_len: u64,
}

/// A granted writer chunk: its id, one range per replica (the edge hands
/// them out with WRITE grants), and how long its writer may place objects
/// in it.
pub struct GrantedChunk {
    pub id: u64,
    pub ranges: Vec<PlacedReplica>,
    pub valid_ms: u64,
}

fn granted(shared: &Shared, id: u64, placed: Vec<PlacedReplica>) -> GrantedChunk {
    shared.metrics.writer_chunks.inc();
    let valid_ms = u64::try_from(shared.write_path.chunk_valid.as_millis()).unwrap_or(u64::MAX);
    GrantedChunk { id, ranges: placed, valid_ms }
}

/// ReturnChunk: `client` is done with its chunk `chunk_id`.
pub fn return_chunk(shared: &Shared, client: ClientId, chunk_id: u64) -> Result<(), Refusal> {
    let hold = shared.write_path.unsafe_hold_freed.map(|d| Instant::now() + d);
    match shared.leader.with(|t| t.puts.return_chunk(client, chunk_id, hold)) {
        None => Err(shared.not_leader()),
        Some(true) => Ok(()),
        Some(false) => Err(MetaError::InvalidParams(format!(
            "this leader holds no writer chunk {chunk_id} of {client} (it expired, or another leader reserved it)"
        ))
        .into()),
    }
}
