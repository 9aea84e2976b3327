//! Removals that must respect KV leases: Remove, BatchRemove, RemoveAll and
//! eviction. Each one is pinned to the object incarnation the leader looked
//! at (`RemoveVersion`, `RemoveObjects` with versions), and fences its keys
//! against readers from before its lease check until after it was applied
//! (`kv_lease.rs`): a reader admitted before the fence holds a lease the
//! removal sees and refuses; a reader arriving after waits, then reads a
//! state without the object.

use mooncake_raft_store::{Command, MetaError, MetaState, ObjectVersion, Response, VersionedKey};
use mooncake_segment::tenant::Tenant;

use crate::leader::kv_lease::KeyHash;
use crate::objects::arena_cuts;
use crate::objects::fenced::propose_fenced;
use crate::refusal::{Refusal, answered};
use crate::shared::Shared;

/// What the leader found for one key a client asks to remove.
enum Found {
    /// A retry of a request id already applied: its first answer.
    Answered(Response),
    Missing,
    Present(ObjectVersion),
}

fn find(s: &MetaState, key: &str, request_id: u64) -> Found {
    if request_id != 0
        && let Some(answer) = s.request_answer(request_id)
    {
        return Found::Answered(answer);
    }
    match s.object(key) {
        None => Found::Missing,
        Some(o) => Found::Present(o.version),
    }
}

/// Removes the listed keys (Remove is a batch of one). One linearizable
/// read finds each key's incarnation; keys that are missing (or not ready:
/// a put of them in flight) are answered from it; the rest are fenced (refused with
/// OBJECT_HAS_LEASE while leased, unless `force`) and removed by version.
/// `request_ids[i]` (0 = none) makes key `i`'s removal apply at most once.
pub async fn remove_keys(
    shared: &Shared,
    keys: &[String],
    request_ids: &[u64],
    force: bool,
) -> Vec<Result<(), Refusal>> {
    let id_of = |i: usize| request_ids.get(i).copied().unwrap_or(0);
    let found = match shared.read(|s| (0..keys.len()).map(|i| find(s, &keys[i], id_of(i))).collect::<Vec<_>>()).await {
        Ok(f) => f,
        Err(refusal) => return vec![Err(refusal); keys.len()],
    };
    let mut out: Vec<Option<Result<(), Refusal>>> = vec![None; keys.len()];
    let mut todo: Vec<(usize, ObjectVersion)> = Vec::new();
    // A key with a put in flight on this leader is not ready, as upstream
    // says, rather than not found (read after the state: leader.rs).
    let in_flight = crate::objects::puts::in_flight(shared, keys);
    for (i, f) in found.into_iter().enumerate() {
        out[i] = match f {
            Found::Answered(r) => Some(answered(&r)),
            Found::Missing if in_flight[i] => Some(Err(crate::objects::puts::not_ready(&keys[i]))),
            Found::Missing => Some(Err(MetaError::ObjectNotFound(keys[i].clone()).into())),
            Found::Present(v) => {
                todo.push((i, v));
                None
            }
        };
    }
    if !todo.is_empty() {
        let hashes: Vec<(KeyHash, ObjectVersion)> = todo.iter().map(|(i, v)| (KeyHash::of(&keys[*i]), *v)).collect();
        let Some(fenced) = shared.leader.fence_removals(&hashes, force) else {
            return vec![Err(shared.not_leader()); keys.len()];
        };
        let mut go: Vec<(usize, ObjectVersion)> = Vec::with_capacity(todo.len());
        for ((i, version), refused) in todo.iter().zip(&fenced.refused) {
            if *refused {
                out[*i] = Some(Err(MetaError::ObjectHasLease(keys[*i].clone()).into()));
            } else {
                go.push((*i, *version));
            }
        }
        let cmds: Vec<Command> = go
            .iter()
            .map(|(i, version)| {
                let remove = Command::RemoveVersion { key: keys[*i].clone(), version: *version };
                match id_of(*i) {
                    0 => remove,
                    id => Command::Once { request_id: id, cmd: Box::new(remove) },
                }
            })
            .collect();
        let victims: Vec<VersionedKey> =
            go.iter().map(|(i, version)| VersionedKey { key: keys[*i].clone(), version: *version }).collect();
        let cuts = arena_cuts::pieces(shared, &victims, None);
        let removed = |answers: &[Response], j: usize| answers.get(j).is_some_and(|a| a.err().is_none());
        match propose_fenced(&shared.write_path.proposer, cmds, fenced.guard, removed).await {
            Ok(answers) => {
                for ((i, _), a) in go.iter().zip(&answers) {
                    out[*i] = Some(answered(a));
                }
                arena_cuts::cut(shared, cuts).await;
            }
            Err(refusal) => {
                for (i, _) in &go {
                    out[*i] = Some(Err(refusal.clone()));
                }
            }
        }
    }
    out.into_iter().map(|s| s.unwrap_or_else(|| Err(Refusal::internal("removal left a key unanswered")))).collect()
}

/// RemoveAll: every object of `tenant` not leased (all of them with
/// `force`); other tenants' objects are never touched. Returns how many
/// were removed.
pub async fn remove_all(shared: &Shared, tenant: &Tenant, force: bool) -> Result<u64, Refusal> {
    let victims = shared
        .read(|s| {
            s.objects()
                .filter(|o| tenant.owns(&o.key))
                .map(|o| mooncake_raft_store::VersionedKey { key: o.key.clone(), version: o.version })
                .collect::<Vec<_>>()
        })
        .await?;
    if victims.is_empty() {
        return Ok(0);
    }
    let hashes: Vec<(KeyHash, ObjectVersion)> = victims.iter().map(|v| (KeyHash::of(&v.key), v.version)).collect();
    let fenced = shared.leader.fence_removals(&hashes, force).ok_or_else(|| shared.not_leader())?;
    let go: Vec<_> = victims.into_iter().zip(&fenced.refused).filter(|(_, r)| !**r).map(|(v, _)| v).collect();
    let cmds: Vec<Command> = go
        .chunks(mooncake_raft_store::state::BATCH_MAX)
        .map(|chunk| Command::RemoveObjects {
            victims: chunk.to_vec(),
            reason: mooncake_raft_store::RemoveReason::RemoveAll,
        })
        .collect();
    let cuts = arena_cuts::pieces(shared, &go, None);
    let answers = propose_fenced(&shared.write_path.proposer, cmds, fenced.guard, |_, _| true).await?;
    arena_cuts::cut(shared, cuts).await;
    Ok(answers.iter().map(|a| if let Response::Removed { count } = a { *count } else { 0 }).sum())
}
