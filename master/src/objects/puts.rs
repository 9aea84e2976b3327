//! The put path on the leader up to the PutEnd (`put_end.rs`). PutStart is
//! answered without a Raft round: a linearizable existence check (usually
//! under the leader lease), then a reservation inside this leader's own
//! arenas ([`crate::leader::reservations`]). Arenas are granted, trimmed and
//! returned here and by the duties; PutRevoke gives a reservation up.

use std::time::{Duration, Instant};

use mooncake_raft_store::{ArenaId, Command, MetaError, MetaState, PlacedReplica, Response, Tier};
use mooncake_segment::tenant::tenant_of;
use mooncake_segment::{ClientId, SegmentId};

use crate::leader::reservations::{Candidate, PutAsk, Reserve, Revoke, Round, Spreading, aligned};
use crate::objects::eviction;
use crate::refusal::Refusal;
use crate::shared::Shared;

/// Rounds of placement one PutStart may go through (each may grant arenas
/// or run an eviction round) before it gives up.
const PLACE_ROUNDS_MAX: usize = 12;
/// Eviction rounds one PutStart may run. A round evicts on each segment a
/// replica found no room on `eviction_ratio` of the segment, or twice the
/// previous round's bytes there if more (the object's size, then 2x, 4x,
/// 8x: freed bytes may be scattered, or in arenas not returned yet); a round
/// that finds nothing to evict ends them early.
const EVICT_ROUNDS_MAX: u32 = 4;

/// The placement candidates of a put and whether the key exists.
struct Look {
    exists: bool,
    candidates: Vec<Candidate>,
}

/// The placement candidates of a put of `key` and whether the key exists.
fn look(s: &MetaState, key: &str, size: u64, preferred: &[SegmentId]) -> Result<Look, MetaError> {
    let candidates = candidates(s, size, preferred, tenant_of(key)).map_err(|e| match e {
        MetaError::InvalidParams(why) => MetaError::InvalidParams(format!("object {key:?}: {why}")),
        other => other,
    })?;
    Ok(Look { exists: s.object(key).is_some(), candidates })
}

/// Preferred segments first (in the caller's order; those not mounted, not
/// memory, or dedicated to another tenant passed over), then the others,
/// the emptiest first; only attached memory segments `size` bytes fit in
/// (disk segments receive copies only, docs/TIERS.md) that serve `tenant`
/// (docs/TENANTS.md: a segment dedicated to one tenant holds its objects
/// only).
pub(crate) fn candidates(
    s: &MetaState,
    size: u64,
    preferred: &[SegmentId],
    tenant: &str,
) -> Result<Vec<Candidate>, MetaError> {
    let largest = s.attached(Tier::Dram).filter(|g| g.serves(tenant)).map(|g| g.capacity_bytes()).max();
    match largest {
        None if s.attached(Tier::Dram).next().is_some() => {
            return Err(MetaError::NoAvailableHandle(format!(
                "every memory segment is dedicated to another tenant than {tenant:?}: mount a store node with \
                 --segment-tenant {tenant}, or one without"
            )));
        }
        None => return Err(MetaError::NoAvailableHandle("no memory segment is mounted".into())),
        Some(cap) if aligned(size) > cap => {
            return Err(MetaError::InvalidParams(format!(
                "{size} bytes is larger than the largest segment ({cap} bytes)"
            )));
        }
        Some(_) => {}
    }
    // Preferred segments are a hint, as upstream's: one that is not
    // mounted (its node restarted, or the caller's list is stale) or is a
    // disk segment (disks receive copies only, docs/TIERS.md) is passed over.
    let mut candidates: Vec<Candidate> = Vec::new();
    for id in preferred {
        match s.segment(*id) {
            Some(g) if g.tier() == Tier::Dram && g.is_attached() && g.serves(tenant) => {
                if !candidates.iter().any(|c| c.segment == *id) {
                    candidates.push(Candidate::of(g, true));
                }
            }
            Some(g) if !g.serves(tenant) => {
                tracing::debug!(segment = %id, "preferred segment is dedicated to another tenant; placing elsewhere")
            }
            Some(_) => tracing::debug!(segment = %id, "preferred segment is a disk segment; placing in memory"),
            None => tracing::debug!(segment = %id, "preferred segment is not mounted; placing elsewhere"),
        }
    }
    let mut rest: Vec<_> = s
        .attached(Tier::Dram)
        .filter(|g| !preferred.contains(&g.spec.id) && g.capacity_bytes() >= aligned(size) && g.serves(tenant))
        .collect();
    rest.sort_by_key(|g| (std::cmp::Reverse(g.free_bytes()), g.spec.id));
    candidates.extend(rest.into_iter().map(|g| Candidate::of(g, false)));
    Ok(candidates)
}

/// PutStart: reserve ranges for the object (on `preferred` segments
/// first), granting arenas and evicting as needed. The ranges reserved,
/// one per replica placed; the edge hands them out with WRITE grants.
pub async fn put_start(shared: &Shared, ask: &PutAsk, preferred: &[SegmentId]) -> Result<Vec<PlacedReplica>, Refusal> {
    crate::objects::quotas::admit(shared, ask).await?;
    // Fewer replicas than asked are placed only once eviction cannot help,
    // and without eviction when fewer segments than asked could hold one.
    let mut round = Round::default();
    let mut evictions = 0u32;
    for _ in 0..PLACE_ROUNDS_MAX {
        let found = shared.read(|s| look(s, &ask.key, ask.size_bytes, preferred)).await;
        let look = match found {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => return Err(Refusal::Meta(e)),
            Err(s) => return Err(s),
        };
        if look.exists && !ask.upsert {
            return Err(Refusal::Meta(MetaError::ObjectAlreadyExists(ask.key.clone())));
        }
        if look.candidates.len() < ask.min_replicas {
            return Err(Refusal::Meta(MetaError::NoAvailableHandle(format!(
                "min_replicas {} for {:?} but only {} memory segments can hold {} bytes: mount more store nodes \
                 or ask for fewer replicas",
                ask.min_replicas,
                ask.key,
                look.candidates.len(),
                aligned(ask.size_bytes)
            ))));
        }
        let now = Instant::now();
        let Some(r) = shared.leader.with(|t| t.puts.reserve(ask, &look.candidates, &round, now)) else {
            return Err(shared.not_leader());
        };
        match r {
            Reserve::Placed(p) => {
                shared.metrics.placements.with_label_values(&[Spreading::of(&p, &look.candidates).label()]).inc();
                return Ok(placed(shared, ask, p));
            }
            Reserve::Again(p) => return Ok(placed(shared, ask, p)),
            Reserve::Taken => return Err(Refusal::Meta(MetaError::ObjectAlreadyExists(ask.key.clone()))),
            Reserve::NeedArenas(wanted) => {
                let ramping = crate::leader::reservations::ramping(&look.candidates);
                for (segment, len) in wanted {
                    match grant_arena(shared, segment, len, aligned(ask.size_bytes), Relief::GiveBack).await {
                        Grant::Room => round.granted.push(segment),
                        // A node is filling: the full segment placement
                        // picked takes its share by evicting, instead of
                        // sending the put to the filling one.
                        Grant::NoRoom if ramping && evictions < EVICT_ROUNDS_MAX => {
                            let capacity =
                                look.candidates.iter().find(|c| c.segment == segment).map(|c| c.capacity_bytes);
                            let ahead = (capacity.unwrap_or(0) as f64
                                * shared.write_path.eviction_policy.eviction_ratio)
                                as u64;
                            let need = aligned(ask.size_bytes).saturating_mul(1 << evictions).max(ahead);
                            evictions += 1;
                            if eviction::round_for_put(shared, segment, need).await == 0 {
                                round.excluded.push(segment);
                            }
                        }
                        Grant::NoRoom => round.excluded.push(segment),
                        Grant::NotLeading => return Err(shared.not_leader()),
                    }
                }
            }
            Reserve::NoRoom { .. } if round.allow_fewer => {
                return Err(Refusal::Meta(MetaError::NoAvailableHandle(no_room(shared, ask, &look))));
            }
            Reserve::NoRoom { missing } => {
                make_room(shared, ask, &look, &mut round, missing, evictions).await;
                evictions += 1;
            }
        }
    }
    Err(Refusal::Meta(MetaError::NoAvailableHandle(format!(
        "{:?} was not placed in {PLACE_ROUNDS_MAX} rounds: concurrent puts kept taking the space granted for it; \
         put it again",
        ask.key
    ))))
}

/// Why a put found no room once eviction could not help: on each candidate
/// segment, what holds its bytes ([`eviction::HeldBack`]).
fn no_room(shared: &Shared, ask: &PutAsk, look: &Look) -> String {
    let segments = match ask.min_replicas {
        1 => "no segment has".to_string(),
        n => format!("fewer than min_replicas {n} segments have"),
    };
    let held: Vec<String> = look
        .candidates
        .iter()
        .take(4)
        .filter_map(|c| eviction::HeldBack::of(shared, c.segment).map(|h| format!("segment {} of {h}", c.segment)))
        .collect();
    format!(
        "{segments} {} free contiguous bytes for {:?} and eviction could not make room: {}; retry once leases \
         expire, or give the cluster more memory",
        aligned(ask.size_bytes),
        ask.key,
        held.join("; ")
    )
}

/// The replicas of a placed put (counted as under-replicated when fewer
/// than asked).
fn placed(shared: &Shared, ask: &PutAsk, p: Vec<PlacedReplica>) -> Vec<PlacedReplica> {
    if p.len() < ask.replica_num {
        shared.metrics.puts_under_replicated.inc();
        tracing::debug!(
            key = %ask.key,
            placed = p.len(),
            asked = ask.replica_num,
            "put placed with fewer replicas than asked: fewer segments could hold it, or no other had room after eviction"
        );
    }
    p
}

/// Round `evictions` (0-based) of making room for a put that found none on
/// `missing` of its segments: room is made on the segments that had none,
/// the emptiest first, one per missing replica (never more than the put
/// will place). A round frees at least `eviction_ratio` of the segment
/// (Mooncake's `--eviction_ratio`), or `2^evictions` times the put's size
/// if that is more: room made ahead for the puts that follow, so that
/// concurrent puts into a full segment do not each evict their own size and
/// take each other's (each then running out of rounds, refused while the
/// segment held evictable bytes). Once eviction cannot help any more, the
/// put takes what room there is.
async fn make_room(shared: &Shared, ask: &PutAsk, look: &Look, round: &mut Round, missing: usize, evictions: u32) {
    let full: Vec<&Candidate> =
        look.candidates.iter().filter(|c| round.excluded.contains(&c.segment)).take(missing).collect();
    let ratio = shared.write_path.eviction_policy.eviction_ratio;
    let mut evicted = 0;
    if evictions < EVICT_ROUNDS_MAX {
        for c in full {
            let ahead = (c.capacity_bytes as f64 * ratio) as u64;
            let need = aligned(ask.size_bytes).saturating_mul(1 << evictions).max(ahead);
            evicted += eviction::round_for_put(shared, c.segment, need).await;
        }
    }
    if evicted == 0 {
        round.allow_fewer = true;
    }
    round.excluded.clear();
}

/// Whether an arena grant that finds no room may first give back what
/// this leader holds unused on the segment (and wait up to
/// [`TAKE_BACK_WAIT`] for its store node): a put may; a writer chunk, which
/// goes shorter instead, may not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Relief {
    GiveBack,
    None,
}

/// What an arena grant for a put came to.
pub(crate) enum Grant {
    /// The segment's open arena has room for the put (granted now, or by a
    /// concurrent put).
    Room,
    /// The segment has no room for the put (or the grant failed).
    NoRoom,
    /// This master stopped leading: the put goes to the new leader.
    NotLeading,
}

/// Grants this leader an arena of `len` (at least `min_len`) on `segment`,
/// unless a concurrent put already did. With [`Relief::GiveBack`], under
/// pressure it first gives back the tail of the segment's open arena and
/// every own arena with nothing in flight (waiting briefly for the store
/// node to let go of them). A grant the applied state shows cannot succeed
/// (no hole of `min_len` outside arenas) is not proposed.
pub(crate) async fn grant_arena(shared: &Shared, segment: SegmentId, len: u64, min_len: u64, relief: Relief) -> Grant {
    let _one_grant_at_a_time = shared.write_path.arena_grants.lock().await;
    let Some((term, room)) = shared.leader.with(|t| (t.term, t.puts.has_room(segment, min_len))) else {
        return Grant::NotLeading;
    };
    if room {
        return Grant::Room;
    }
    // The segment's holes first (as many as make `len`, each at least the
    // object); then again after giving back what this leader holds but
    // does not use.
    let tries: &[bool] = match relief {
        Relief::GiveBack => &[false, true],
        Relief::None => &[false],
    };
    for &relieve_first in tries {
        if relieve_first {
            relieve(shared, segment).await;
        }
        if !shared.reader.read(|s| s.has_grantable_hole(segment, min_len)) {
            continue;
        }
        let grant = Command::ArenaGrant { segment, len_bytes: len, unit_bytes: min_len, term };
        match shared.write_path.proposer.propose(grant).await {
            Ok(Response::ArenaGranted(arena)) => {
                let capacity = shared.reader.read(|s| s.segment(segment).map(|g| g.capacity_bytes()).unwrap_or(0));
                // Adopted only by the term that asked for it (a later term
                // of this node leaves it to the release timeout, as any
                // deposed leader's arena).
                let trim = shared.leader.with(|t| (t.term == term).then(|| t.puts.add_arena(arena, capacity)));
                match trim {
                    None | Some(None) => return Grant::NotLeading,
                    Some(Some(Some((id, keep)))) => trim_arena(shared, id, keep).await,
                    Some(Some(None)) => {}
                }
                return Grant::Room;
            }
            Ok(Response::Err(MetaError::NoAvailableHandle(_))) => continue,
            Ok(other) => {
                tracing::warn!(%segment, ?other, "arena grant refused");
                return Grant::NoRoom;
            }
            Err(s) => {
                tracing::warn!(%segment, refusal = %s, "arena grant failed");
                return Grant::NoRoom;
            }
        }
    }
    Grant::NoRoom
}

/// How long a put that found no room waits for a store node to let go of
/// the arenas given back on the segment it wants (one TakeCopies round trip
/// when the node is up).
const TAKE_BACK_WAIT: Duration = Duration::from_secs(1);

/// Gives back what this leader holds but does not use: the tail of
/// `segment`'s open arena (never handed out: at once), and every own arena
/// with nothing in flight (once their store nodes let go of them: waits up
/// to [`TAKE_BACK_WAIT`] for those on `segment`).
async fn relieve(shared: &Shared, segment: SegmentId) {
    let Some((trim, done)) = shared.leader.with(|t| (t.puts.relieve(segment), t.puts.returnable())) else { return };
    if let Some((id, keep)) = trim {
        trim_arena(shared, id, keep).await;
    }
    take_back_waiting(shared, done, segment).await;
}

/// Takes `ids` back from their store nodes and returns those whose nodes
/// let go, waiting up to [`TAKE_BACK_WAIT`] for `segment`'s node. The rest
/// are returned by the reclaim duty once their nodes acknowledge (or their
/// grants expired).
async fn take_back_waiting(shared: &Shared, ids: Vec<ArenaId>, segment: SegmentId) {
    if ids.is_empty() {
        return;
    }
    let (arenas, owner) = shared.reader.read(|s| {
        let arenas: Vec<(ArenaId, SegmentId)> =
            ids.iter().filter_map(|id| s.arena(*id).map(|a| (*id, a.segment))).collect();
        (arenas, s.segment(segment).map(|g| g.owner))
    });
    // Only a node holding a TakeCopies call hears the fence at once; for
    // any other (down, or a segment mounted by hand) waiting is in vain.
    let listening = owner.is_some_and(|o| shared.auth.fence_wakes.is_listening(o.0));
    let mut waiting: Vec<ArenaId> = match listening {
        true => arenas.iter().filter(|(_, g)| *g == segment).map(|(id, _)| *id).collect(),
        false => Vec::new(),
    };
    let mut asked = arenas;
    let deadline = tokio::time::Instant::now() + TAKE_BACK_WAIT;
    loop {
        // Registered before looking, so an acknowledgement in between wakes it.
        let acked = shared.auth.fence_wakes.acked.notified();
        tokio::pin!(acked);
        acked.as_mut().enable();
        let returned = crate::objects::arenas::take_back(
            &shared.write_path.proposer,
            &shared.leader,
            &shared.auth.fence_wakes,
            shared.auth.grants_live,
            &asked,
        )
        .await;
        waiting.retain(|id| !returned.contains(id));
        asked.retain(|(id, _)| waiting.contains(id));
        if waiting.is_empty() || tokio::time::timeout_at(deadline, acked).await.is_err() {
            return;
        }
    }
}

async fn trim_arena(shared: &Shared, arena: ArenaId, keep_bytes: u64) {
    match shared.write_path.proposer.propose(Command::ArenaTrim { arena, keep_bytes }).await {
        Ok(_) => {
            shared.leader.with(|t| t.puts.trimmed(arena, keep_bytes));
        }
        Err(s) => tracing::warn!(%arena, refusal = %s, "arena trim failed"),
    }
}

/// For each key, whether a put of it is in flight on this leader (PutStart
/// answered, PutEnd not yet committed). Read apart from the state (lock
/// order: leader.rs); all false when this master does not lead.
pub fn in_flight(shared: &Shared, keys: &[String]) -> Vec<bool> {
    shared
        .leader
        .with(|t| keys.iter().map(|k| t.puts.find(k).is_some()).collect())
        .unwrap_or_else(|| vec![false; keys.len()])
}

/// The answer about a key whose put is in flight: REPLICA_IS_NOT_READY, as
/// upstream answers (its bytes are being written).
pub fn not_ready(key: &str) -> Refusal {
    Refusal::NotReady(format!("object {key:?} is still being written (its put is in flight)"))
}

/// PutRevoke of `key` by `client`: the writer gave up; the key is free at once.
pub fn put_revoke(shared: &Shared, key: &str, client: ClientId) -> Result<(), Refusal> {
    let hold = shared.write_path.unsafe_hold_freed.map(|d| Instant::now() + d);
    match shared.leader.with(|t| t.puts.revoke(key, client, hold)) {
        None => Err(shared.not_leader()),
        Some(Revoke::Revoked) => Ok(()),
        Some(Revoke::Ending) => Err(Refusal::NotReady(format!(
            "a PutEnd of {key:?} is being committed: its answer decides the put; read the key"
        ))),
        Some(Revoke::OtherWriter) => Err(Refusal::NotTheWriter(format!(
            "the put of {key:?} in flight is another client's; only its writer may revoke it"
        ))),
        Some(Revoke::NotInFlight) => shared.reader.read(|s| match s.object(key) {
            Some(o) if o.writer == client => {
                Err(MetaError::InvalidParams(format!("{key:?} is complete; use Remove")).into())
            }
            _ => Err(Refusal::NotFound(format!("no put of {key:?} by {client} is in flight"))),
        }),
    }
}
