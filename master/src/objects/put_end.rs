//! PutEnd on the leader: the one replicated command of an object
//! (`PutCommit`, many per log entry under load), planned against the
//! applied state and the leader's table of puts in flight.
//!
//! A PutEnd the leader has no reservation for (it was elected, or restarted,
//! after the PutStart) is recorded from the ranges the writer echoes back —
//! if every one lies on free bytes in a live arena this leader did not grant:
//! nobody but that writer can have been given them. Anything else is "put
//! expired", and the client library puts again. A PutEnd naming a writer
//! chunk (`chunks.rs`) is recorded if its ranges lie in that chunk.

use mooncake_raft_store::{
    ArenaId, Command, MetaError, MetaState, NewObject, Pin, PlacedReplica, ReplicaPlacement, Tier,
};
use mooncake_segment::ClientId;
use mooncake_segment::tenant::tenant_of;

use crate::leader::kv_lease::KeyHash;
use crate::leader::reservations::{ChunkCover, Reservation};
use crate::leader::tiering::OffloadMode;
use crate::objects::capabilities::CapabilityIssuer;
use crate::objects::quotas;
use crate::refusal::{Refusal, answered};
use crate::shared::Shared;

/// One PutEnd as the leader plans it, read off the wire at the edge
/// (`rpc/convert.rs`; a pin this version does not know is refused there).
#[derive(Clone, Debug)]
pub struct EndAsk<'a> {
    /// The stored key (the caller's tenant applied).
    pub key: &'a str,
    pub client: ClientId,
    pub size: u64,
    pub checksum: u32,
    pub upsert: bool,
    /// Applied at most once per id; 0: none.
    pub request_id: u64,
    /// The writer chunk its ranges lie in; 0: a PutStart's put.
    pub chunk_id: u64,
    pub pin: Pin,
    /// The ranges the writer echoed back (empty: it named only its key) ...
    pub echoed: Vec<PlacedReplica>,
    /// ... and the WRITE capability it was handed for each, in order.
    pub grants: Vec<&'a [u8]>,
}

/// The answer a plan gives without a commit.
type Answer = Result<(), Refusal>;

/// What the leader's table knows of one PutEnd.
enum Known {
    /// A PutStart's put: its reservation, if this leader holds one.
    Reserved(Option<Reservation>),
    /// A put placed in a writer chunk: the put of its key in flight (any
    /// writer's), and whether the chunk covers its ranges.
    Chunk { in_flight: Option<ClientId>, cover: ChunkCover },
}

/// What to do with one PutEnd.
enum EndPlan {
    Propose(Commit),
    Answer(Answer),
}

/// A commit to propose: the object, the PutEnd's request id (0: none),
/// and whether its tenant has a quota (then apply bounds it).
struct Commit {
    new: NewObject,
    request_id: u64,
    in_quota: bool,
}

impl EndPlan {
    /// The commit of `new` for the PutEnd of `request_id`, as `s` bounds it.
    fn propose(s: &MetaState, new: NewObject, request_id: u64) -> EndPlan {
        let in_quota = s.tenant_quota(tenant_of(&new.key)).is_some();
        EndPlan::Propose(Commit { new, request_id, in_quota })
    }

    /// The command to propose: `PutCommitInQuota` for a tenant with a
    /// quota, else `PutCommit`; applied at most once per request id.
    fn command(&self) -> Option<Command> {
        let EndPlan::Propose(c) = self else { return None };
        let commit = match c.in_quota {
            true => Command::PutCommitInQuota(c.new.clone()),
            false => Command::PutCommit(c.new.clone()),
        };
        Some(match c.request_id {
            0 => commit,
            id => Command::Once { request_id: id, cmd: Box::new(commit) },
        })
    }
}

/// PutEnd of many objects: one proposal for all of them.
pub async fn put_end(shared: &Shared, asks: &[EndAsk<'_>]) -> Vec<Result<(), Refusal>> {
    let Some((owned, known)) = shared.leader.with(|t| {
        // Marked as ending: a revoke racing this PutEnd's commit must not
        // answer that the put had no effect. A put placed in a writer chunk
        // has no reservation of its own: it only looks (another writer's
        // put of the key may be in flight) and whether its chunk covers it.
        let known: Vec<Known> = asks
            .iter()
            .map(|r| {
                let client = r.client;
                match r.chunk_id {
                    0 => Known::Reserved(t.puts.begin_end(r.key, client)),
                    id => Known::Chunk {
                        in_flight: t.puts.find(r.key).map(|p| p.client),
                        cover: t.puts.chunk_covers(client, id, &r.echoed),
                    },
                }
            })
            .collect();
        // The arenas named that this leader granted (it knows their ranges).
        let owned: Vec<ArenaId> =
            asks.iter().flat_map(|r| r.echoed.iter()).map(|r| r.arena).filter(|a| t.puts.owns(*a)).collect();
        (owned, known)
    }) else {
        return vec![Err(shared.not_leader()); asks.len()];
    };
    // Plans answered from the state (a retry's first answer) must rest on
    // synced state.
    let grants = &shared.auth.capabilities;
    let plans: Vec<EndPlan> = shared
        .read_durable(|s| {
            asks.iter()
                .zip(known)
                .map(|(req, known)| match known {
                    Known::Reserved(res) => plan_end(s, req, res, &owned, grants),
                    Known::Chunk { in_flight, cover } => plan_chunk_end(s, req, in_flight, cover, &owned, grants),
                })
                .collect()
        })
        .await;
    let cmds: Vec<Command> = plans.iter().filter_map(EndPlan::command).collect();
    let answers = shared.write_path.proposer.propose_many(cmds).await;
    let mut answers = match answers {
        Ok(a) => a.iter().map(answered).collect::<Vec<_>>().into_iter(),
        Err(refusal) => {
            return plans
                .into_iter()
                .map(|p| match p {
                    EndPlan::Answer(a) => a,
                    EndPlan::Propose(..) => Err(refusal.clone()),
                })
                .collect();
        }
    };
    let out: Vec<Answer> = plans
        .into_iter()
        .map(|p| match p {
            EndPlan::Answer(a) => a,
            EndPlan::Propose(..) => {
                answers.next().unwrap_or_else(|| Err(Refusal::internal("missing PutCommit answer")))
            }
        })
        .collect();
    // The commits are applied (or refused): those ranges are not being
    // written any more. A committed object is as recent as a read for
    // eviction (an LRU). With eager offload, the new objects are copied to
    // disk first, and the copy duty is woken for them.
    let eager = shared.tiers.policy.offload == OffloadMode::Eager;
    let now = std::time::Instant::now();
    let fresh = shared.leader.with(|t| {
        let mut fresh = false;
        let mut written = Vec::with_capacity(asks.len());
        for (req, answer) in asks.iter().zip(&out) {
            if req.chunk_id == 0 {
                t.puts.finish(req.key, req.client);
            }
            if answer.is_ok() {
                written.push(KeyHash::of(req.key));
                if eager {
                    t.copies.note_fresh(req.key);
                    fresh = true;
                }
            }
        }
        t.kv.note_writes(&written, now);
        fresh
    });
    if fresh == Some(true) {
        shared.tiers.copy_wake.notify_one();
    }
    wake_eviction_past_watermark(shared);
    out
}

/// Wakes the eviction duty when the memory tier, with the room promised to
/// puts in flight, is past the high watermark (state first, then the soft
/// state: lock order, `leader.rs`).
fn wake_eviction_past_watermark(shared: &Shared) {
    let (used, capacity) = shared.reader.read(|s| (s.tier_used_bytes(Tier::Dram), s.tier_capacity_bytes(Tier::Dram)));
    let reserved = shared.leader.with(|t| t.puts.reserved_bytes()).unwrap_or(0);
    let watermark = capacity as f64 * shared.write_path.eviction_policy.high_watermark_ratio;
    if capacity > 0 && used.saturating_add(reserved) as f64 > watermark {
        shared.write_path.eviction_wake.notify_one();
    }
}

/// The answer of a PutEnd decided before its put is looked at: a malformed
/// key, or a retry of a PutEnd that was applied, which gets its first
/// answer whatever happened to the object since (a remove must not be
/// undone by a retry).
fn answered_already(s: &MetaState, req: &EndAsk<'_>) -> Option<EndPlan> {
    if let Err(e) = mooncake_raft_store::state::validate_stored_key(req.key) {
        return Some(EndPlan::Answer(Err(e.into())));
    }
    if req.request_id != 0
        && let Some(first) = s.request_answer(req.request_id)
    {
        return Some(EndPlan::Answer(answered(&first)));
    }
    None
}

/// Decides one PutEnd against the applied state (`owned`: arenas this
/// leader granted).
fn plan_end(
    s: &MetaState,
    req: &EndAsk<'_>,
    reservation: Option<Reservation>,
    owned: &[ArenaId],
    grants: &CapabilityIssuer,
) -> EndPlan {
    if let Some(answer) = answered_already(s, req) {
        return answer;
    }
    let client = req.client;
    let echoed = &req.echoed;
    match reservation {
        Some(r) if r.client == client => {
            if !echoed.is_empty() && *echoed != r.replicas {
                return EndPlan::Answer(Err(MetaError::InvalidParams(format!(
                    "the replicas of {:?} differ from those PutStart reserved",
                    req.key
                ))
                .into()));
            }
            let new = NewObject {
                client,
                key: req.key.to_string(),
                size_bytes: r.size_bytes,
                checksum: req.checksum,
                pin: r.pin,
                replicas: r.replicas,
                upsert: r.upsert,
            };
            EndPlan::propose(s, new, req.request_id)
        }
        // Another client's put of the key is in flight: only its writer
        // may end it (upstream's ILLEGAL_CLIENT). This client's own put of
        // the key, if it had one, expired before that one started.
        Some(r) => EndPlan::Answer(Err(MetaError::IllegalClient(format!(
            "the put of {:?} in flight is {}'s, not {client}'s: only its writer may end it (a put of this client's \
             own expired before it started)",
            req.key, r.client
        ))
        .into())),
        None => plan_unknown_end(s, req, owned, grants),
    }
}

/// Decides the PutEnd of a put placed in a writer chunk, against the
/// applied state: `in_flight` is the writer of the put of its key this
/// leader has in flight, if any, `cover` whether the chunk named covers its ranges,
/// `owned` the arenas this leader granted.
fn plan_chunk_end(
    s: &MetaState,
    req: &EndAsk<'_>,
    in_flight: Option<ClientId>,
    cover: ChunkCover,
    owned: &[ArenaId],
    grants: &CapabilityIssuer,
) -> EndPlan {
    if let Some(answer) = answered_already(s, req) {
        return answer;
    }
    let client = req.client;
    let echoed = &req.echoed;
    // A key that exists is kept (upstream's answer), without a commit: the
    // writer's bytes stay garbage in its chunk.
    if !req.upsert
        && let Some(o) = s.object(req.key)
    {
        let same = o.writer == client
            && o.checksum == req.checksum
            && o.replicas.iter().map(|r| (r.segment, r.range)).eq(echoed.iter().map(|r| (r.segment, r.range)));
        return EndPlan::Answer(match same {
            true => Ok(()),
            false => Err(MetaError::ObjectAlreadyExists(req.key.to_string()).into()),
        });
    }
    // Another writer's PutStart of the key came first: it wins.
    if in_flight.is_some_and(|writer| writer != client) {
        return EndPlan::Answer(Err(MetaError::ObjectAlreadyExists(req.key.to_string()).into()));
    }
    match cover {
        ChunkCover::Inside => commit_echoed(s, req),
        ChunkCover::Outside(why) => EndPlan::Answer(Err(MetaError::InvalidParams(why).into())),
        ChunkCover::Unknown => plan_unknown_end(s, req, owned, grants),
    }
}

/// A PutEnd this leader holds no reservation for: a retry of one it
/// committed, or a put an earlier leader (or this master before a restart)
/// reserved. The latter is recorded if its ranges are free in live arenas
/// this leader did not grant: their granter handed each range out once, so
/// only this writer can have been given them. In its own arenas this leader
/// knows every reservation, so an unknown one there has expired.
fn plan_unknown_end(s: &MetaState, req: &EndAsk<'_>, owned: &[ArenaId], grants: &CapabilityIssuer) -> EndPlan {
    let (client, echoed) = (req.client, &req.echoed);
    let placements: Vec<ReplicaPlacement> =
        echoed.iter().map(|r| ReplicaPlacement { segment: r.segment, range: r.range }).collect();
    if let Some(o) = s.object(req.key)
        && o.writer == client
        && o.checksum == req.checksum
        && (placements.is_empty() || o.replicas == placements)
    {
        return EndPlan::Answer(Ok(())); // a retry of a commit that was applied
    }
    let granted_elsewhere =
        !echoed.is_empty() && echoed.iter().all(|r| s.arena(r.arena).is_some() && !owned.contains(&r.arena));
    if !granted_elsewhere {
        return EndPlan::Answer(Err(MetaError::PutExpired(format!(
            "{:?}: this master holds no reservation for it (it expired, or was made before a leader change \
             and its space was reclaimed); put it again",
            req.key
        ))
        .into()));
    }
    // Only the writer a range was handed to holds its WRITE capability:
    // anyone else naming free bytes of an earlier term's arena (another
    // tenant's removed object, or a put still being written) is refused.
    let unproven = req.echoed.iter().zip(&req.grants).find_map(|(p, cap)| grants.check_write(s, p, cap).err());
    if let Some(why) = unproven
        .or_else(|| (req.grants.len() != req.echoed.len()).then(|| "a range came without its grant".to_string()))
    {
        return EndPlan::Answer(Err(MetaError::PutExpired(format!(
            "{:?}: this master holds no reservation for it and {why}; put it again",
            req.key
        ))
        .into()));
    }
    if let Some(refused) = quotas::over_quota_at_end(s, req.key, req.size, req.upsert) {
        return EndPlan::Answer(Err(refused));
    }
    commit_echoed(s, req)
}

/// The commit of a put recorded from what its writer sent: its ranges,
/// size, checksum, pin and upsert.
fn commit_echoed(s: &MetaState, req: &EndAsk<'_>) -> EndPlan {
    let new = NewObject {
        client: req.client,
        key: req.key.to_string(),
        size_bytes: req.size,
        checksum: req.checksum,
        pin: req.pin,
        replicas: req.echoed.clone(),
        upsert: req.upsert,
    };
    EndPlan::propose(s, new, req.request_id)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use mooncake_auth::capability::Access;
    use mooncake_raft_store::Response;
    use mooncake_raft_store::testing::{apply_next, mount_cmd, segment};
    use mooncake_segment::{Range, SegmentId};

    use super::*;

    const LEN: u64 = 1 << 20;
    const WRITER: ClientId = ClientId(1000);

    /// A state with two mounted memory segments and an arena on each: the
    /// arenas' ids.
    fn state() -> (MetaState, Vec<ArenaId>) {
        let mut s = MetaState::default();
        let mut arenas = Vec::new();
        for id in 1..=2u64 {
            apply_next(&mut s, mount_cmd(ClientId(500 + id), segment(id, 64 << 20, &format!("h{id}"))));
            let grant = Command::ArenaGrant { segment: SegmentId(id), len_bytes: 4 * LEN, unit_bytes: LEN, term: 1 };
            match apply_next(&mut s, grant) {
                Response::ArenaGranted(a) => arenas.push(a.id),
                other => panic!("no arena on segment {id}: {other:?}"),
            }
        }
        (s, arenas)
    }

    fn placed(s: &MetaState, arenas: &[ArenaId]) -> Vec<PlacedReplica> {
        arenas
            .iter()
            .map(|id| {
                let a = s.arena(*id).expect("a granted arena");
                PlacedReplica { segment: a.segment, arena: *id, range: Range::new(a.extents[0].offset, LEN) }
            })
            .collect()
    }

    /// The WRITE capabilities `grants` hands out for `echoed` (what a
    /// PutStart's answer carried).
    fn signed(s: &MetaState, grants: &CapabilityIssuer, echoed: &[PlacedReplica]) -> Vec<Vec<u8>> {
        echoed
            .iter()
            .map(|p| grants.issue(s, p.segment, p.range, p.arena, Access::Write).expect("a mounted segment"))
            .collect()
    }

    /// The PutEnd of `k` by the writer, echoing `echoed` with `caps`.
    fn end<'a>(echoed: &[PlacedReplica], caps: &'a [Vec<u8>], checksum: u32, pin: Pin) -> EndAsk<'a> {
        EndAsk {
            key: "k",
            client: WRITER,
            size: LEN,
            checksum,
            upsert: false,
            request_id: 0,
            chunk_id: 0,
            pin,
            echoed: echoed.to_vec(),
            grants: caps.iter().map(Vec::as_slice).collect(),
        }
    }

    fn issuer() -> (tempfile::TempDir, CapabilityIssuer) {
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = mooncake_auth::ClusterSecret::create_file(&dir.path().join("secret")).expect("secret");
        (dir, CapabilityIssuer::new(&secret, Duration::from_secs(60)))
    }

    fn reservation(client: ClientId, replicas: Vec<PlacedReplica>) -> Reservation {
        Reservation {
            client,
            size_bytes: LEN,
            pin: Pin::None,
            upsert: false,
            replicas,
            started: Instant::now(),
            ending: 1,
        }
    }

    fn answer(plan: EndPlan) -> Answer {
        match plan {
            EndPlan::Answer(a) => a,
            EndPlan::Propose(c) => panic!("proposed {:?} where an answer was due", c.new.key),
        }
    }

    fn proposed(plan: EndPlan) -> NewObject {
        match plan {
            EndPlan::Propose(c) => c.new,
            EndPlan::Answer(a) => panic!("answered {a:?} where a commit was due"),
        }
    }

    #[test]
    fn the_reserving_writers_put_end_commits_what_was_reserved_and_only_that() {
        let (s, arenas) = state();
        let (_dir, grants) = issuer();
        let reserved = placed(&s, &arenas);
        let bare = end(&[], &[], 7, Pin::None);
        let new = proposed(plan_end(&s, &bare, Some(reservation(WRITER, reserved.clone())), &arenas, &grants));
        assert_eq!((new.replicas, new.size_bytes, new.checksum), (reserved.clone(), LEN, 7));

        // Another client's put of the key is in flight: only its writer ends it.
        let other = plan_end(&s, &bare, Some(reservation(ClientId(9), reserved.clone())), &arenas, &grants);
        assert!(matches!(answer(other), Err(Refusal::Meta(MetaError::IllegalClient(_)))));

        // Echoed ranges that are not the reservation's are refused.
        let mut moved = reserved.clone();
        moved[0].range = Range::new(moved[0].range.offset + LEN, LEN);
        let caps = signed(&s, &grants, &moved);
        let refused =
            plan_end(&s, &end(&moved, &caps, 7, Pin::None), Some(reservation(WRITER, reserved)), &arenas, &grants);
        assert!(matches!(answer(refused), Err(Refusal::Meta(MetaError::InvalidParams(_)))));
    }

    /// A PutEnd no reservation of this leader knows (it was elected after
    /// the PutStart) is recorded from the echoed ranges when they lie in a
    /// live arena another leader granted and carry their WRITE grants; in
    /// an arena of its own (where it knows every reservation), without the
    /// grants, or with nothing echoed, the put expired.
    #[test]
    fn an_unknown_put_end_is_recorded_only_from_another_leaders_arena_with_its_grants() {
        let (s, arenas) = state();
        let (_dir, grants) = issuer();
        let echoed = placed(&s, &arenas);
        let caps = signed(&s, &grants, &echoed);
        let ask = end(&echoed, &caps, 7, Pin::Soft);
        let new = proposed(plan_end(&s, &ask, None, &[], &grants));
        assert_eq!((new.replicas, new.pin, new.client), (echoed.clone(), Pin::Soft, WRITER));

        let expired = |plan: EndPlan| matches!(answer(plan), Err(Refusal::Meta(MetaError::PutExpired(_))));
        assert!(expired(plan_end(&s, &ask, None, &arenas[..1], &grants)), "an arena of this leader's");
        let (_other_dir, stranger) = issuer();
        let forged = signed(&s, &stranger, &echoed);
        assert!(expired(plan_end(&s, &end(&echoed, &forged, 7, Pin::None), None, &[], &grants)), "grants not ours");
        assert!(expired(plan_end(&s, &end(&echoed, &caps[..1], 7, Pin::None), None, &[], &grants)), "a grant missing");
        assert!(expired(plan_end(&s, &end(&[], &[], 7, Pin::None), None, &[], &grants)), "nothing echoed");
    }

    /// A retry of a PutEnd whose commit was applied answers OK and commits
    /// nothing again; a chunk's PutEnd of a key that exists keeps it.
    #[test]
    fn a_retry_of_an_applied_commit_is_answered_and_a_chunk_put_never_replaces_an_object() {
        let (mut s, arenas) = state();
        let (_dir, grants) = issuer();
        let echoed = placed(&s, &arenas);
        let caps = signed(&s, &grants, &echoed);
        let ask = end(&echoed, &caps, 7, Pin::None);
        let new = proposed(plan_end(&s, &ask, None, &[], &grants));
        assert!(matches!(apply_next(&mut s, Command::PutCommit(new)), Response::Committed { .. }));
        assert_eq!(answer(plan_end(&s, &ask, None, &[], &grants)), Ok(()), "the retry");

        let same = plan_chunk_end(&s, &ask, None, ChunkCover::Inside, &[], &grants);
        assert_eq!(answer(same), Ok(()), "the same put, echoed again");
        let other = end(&echoed, &caps, 8, Pin::None);
        let kept = plan_chunk_end(&s, &other, None, ChunkCover::Inside, &[], &grants);
        assert!(matches!(answer(kept), Err(Refusal::Meta(MetaError::ObjectAlreadyExists(_)))));
    }
}
