//! Users' copy and move tasks on the leader (upstream 0.3.14's
//! `create_copy_task`, `create_move_task`, `query_task`; docs/TIERS.md,
//! "Copy and move tasks"), and users' prefetches to memory
//! (`ExistOptions.prefetch_to_memory`).
//!
//! A task is checked against the applied state (upstream's codes, in
//! upstream's order), recorded in the leader's task table
//! (`leader/user_tasks.rs`) and carried out by the copy duty
//! (`copies/`, `Purpose::User`): one copy per target, made by the
//! store node that owns the target segment and recorded by its report
//! (`AddReplica`), exactly as the tier's and hot keys' copies are. A move
//! then drops its source replica (`DropReplica`, fenced like a hot key's
//! cooled replica: only once no reader may hold a lease on the object).
//! Whatever fails leaves the source as it was.
//!
//! Segments are named as a user sees them: the transfer endpoint
//! (`host:port`) of the store node that serves them — what `get_hostname`
//! answers and replica descriptors carry — or a segment id as the master
//! prints it (`seg-…`). Only attached memory segments that serve the
//! object's tenant take copies.
//!
//! Lock order as everywhere (`leader.rs`): the state is read first, the
//! soft state consulted after.

use std::time::Instant;

use mooncake_raft_store::state::{ObjectMeta, SegmentEntry};
use mooncake_raft_store::{Command, MetaState, ObjectVersion, ReplicaPlacement, Response, Tier, VersionedKey};
use mooncake_segment::tenant::tenant_of;
use mooncake_segment::{ClientId, SegmentId};

use crate::leader::kv_lease::KeyHash;
use crate::leader::user_tasks::{
    AddError, TASK_TARGETS_MAX, TASK_TIMEOUT, TaskId, TaskKind, TaskStatus, UserTask, Waiting,
};
use crate::objects::copy_plan::Plan;
use crate::objects::fenced::propose_fenced;
use crate::raft::proposer::now_ms;
use crate::refusal::Refusal;
use crate::shared::Shared;

/// Users' copies in flight at most (each moves a whole object between two
/// store nodes: they never crowd out the nodes' own traffic).
pub const USER_COPIES_IN_FLIGHT_MAX: usize = 64;

/// Moves whose source replica one round drops at most.
const DROPS_PER_ROUND_MAX: usize = 64;

/// Keys of one prefetch call at most (a batch RPC's limit).
pub const PREFETCH_KEYS_MAX: usize = 1_024; // the batch RPCs' limit, BATCH_RPC_MAX (checked there)

/// The segments named `name`: by endpoint, or by id as printed.
fn named<'a>(s: &'a MetaState, name: &str) -> Vec<&'a SegmentEntry> {
    s.segments().filter(|g| g.spec.endpoint == name || g.spec.id.to_string() == name).collect()
}

/// Where a copy of `o` to the segment named `name` goes: `Ok(None)` when
/// a segment of that name holds the object already (nothing to copy).
/// `INVALID_PARAMS` for a name no segment has; `UNAVAILABLE_IN_CURRENT_STATUS`
/// when none of those segments may take it.
fn target_of<'a>(s: &'a MetaState, o: &ObjectMeta, name: &str) -> Result<Option<&'a SegmentEntry>, Refusal> {
    let all = named(s, name);
    if all.is_empty() {
        return Err(Refusal::Invalid(format!("no segment is named {name:?}")));
    }
    let tenant = tenant_of(&o.key);
    let usable: Vec<&SegmentEntry> =
        all.into_iter().filter(|g| g.tier() == Tier::Dram && g.is_attached() && g.serves(tenant)).collect();
    if usable.is_empty() {
        return Err(Refusal::Busy(format!(
            "segment {name:?} cannot take copies of this object (not an attached memory segment that serves its tenant)"
        )));
    }
    if usable.iter().any(|g| o.replicas.iter().any(|r| r.segment == g.spec.id)) {
        return Ok(None);
    }
    Ok(usable.into_iter().max_by_key(|g| (g.free_bytes(), std::cmp::Reverse(g.spec.id))))
}

/// What a task is, as checked against the state: its object, targets
/// (none: every target holds it already), a move's source, and the store
/// node assigned to it.
struct Checked {
    version: ObjectVersion,
    targets: Vec<SegmentId>,
    source: Option<SegmentId>,
    assigned: ClientId,
}

/// Upstream's checks of a copy task, in its order.
fn check_copy(s: &MetaState, key: &str, targets: &[String]) -> Result<Checked, Refusal> {
    let Some(o) = s.object(key) else {
        return Err(Refusal::NotFound(format!("{key:?} does not exist")));
    };
    let mut chosen: Vec<&SegmentEntry> = Vec::new();
    for name in targets {
        if let Some(g) = target_of(s, o, name)?
            && !chosen.iter().any(|c| c.spec.id == g.spec.id)
        {
            chosen.push(g);
        }
    }
    let Some(assigned) = chosen.first().map(|g| g.owner).or_else(|| owner_of_readable(s, o)) else {
        return Err(Refusal::Internal(format!("{key:?} has no readable replica to copy from")));
    };
    Ok(Checked { version: o.version, targets: chosen.iter().map(|g| g.spec.id).collect(), source: None, assigned })
}

/// Upstream's checks of a move task, in its order.
fn check_move(s: &MetaState, key: &str, source: &str, target: &str) -> Result<Checked, Refusal> {
    let Some(o) = s.object(key) else {
        return Err(Refusal::NotFound(format!("{key:?} does not exist")));
    };
    if source == target {
        return Err(Refusal::Invalid(format!("the source and the target are both {source:?}")));
    }
    let to = target_of(s, o, target)?;
    let sources = named(s, source);
    let Some(from) = o.replicas.iter().find(|r| sources.iter().any(|g| g.spec.id == r.segment)) else {
        return Err(Refusal::Invalid(format!("segment {source:?} holds no replica of {key:?}")));
    };
    if to.is_some_and(|g| g.spec.id == from.segment) {
        return Err(Refusal::Invalid(format!("{source:?} and {target:?} are the same segment")));
    }
    let Some(assigned) = to.map(|g| g.owner).or_else(|| s.segment(from.segment).map(|g| g.owner)) else {
        return Err(Refusal::Internal(format!("the owner of {} is unknown", from.segment)));
    };
    Ok(Checked {
        version: o.version,
        targets: to.map(|g| g.spec.id).into_iter().collect(),
        source: Some(from.segment),
        assigned,
    })
}

/// The owner of a readable replica of `o`.
fn owner_of_readable(s: &MetaState, o: &ObjectMeta) -> Option<ClientId> {
    o.replicas.iter().filter(|r| s.is_readable(r)).find_map(|r| s.segment(r.segment)).map(|g| g.owner)
}

/// Records a checked task; its id.
fn record(shared: &Shared, kind: TaskKind, key: String, checked: Checked) -> Result<TaskId, Refusal> {
    let now = Instant::now();
    let ms = now_ms();
    let added = shared.leader.with(|t| {
        let mut id = TaskId { hi: t.term, lo: rand::random::<u64>() };
        while t.tasks.contains(id) {
            id.lo = rand::random::<u64>();
        }
        // A move whose target holds the object already only drops its source.
        let nothing_to_copy = checked.targets.is_empty();
        let task = UserTask {
            id,
            kind,
            status: TaskStatus::Pending,
            created_ms: ms,
            updated_ms: ms,
            assigned: checked.assigned,
            message: String::new(),
            key,
            version: checked.version,
            source: checked.source,
            waiting: checked.targets,
            copies: Vec::new(),
            no_room: 0,
            dropping: nothing_to_copy && kind == TaskKind::Move,
            issued: now,
        };
        let added = t.tasks.add(task);
        if added.is_ok() && nothing_to_copy && kind == TaskKind::Copy {
            t.tasks.succeed(id, ms);
        }
        added
    });
    match added {
        None => Err(shared.not_leader()),
        Some(Ok(id)) => Ok(id),
        Some(Err(AddError::PendingLimit)) => Err(Refusal::TooManyTasks(format!(
            "{} tasks are not finished; try again once some are",
            crate::leader::user_tasks::TASKS_UNFINISHED_MAX
        ))),
    }
}

/// `CreateCopyTask` of the stored `key` to the segments named `targets`.
pub async fn create_copy(shared: &Shared, key: String, targets: &[String]) -> Result<TaskId, Refusal> {
    if targets.is_empty() {
        return Err(Refusal::invalid("no target segment named"));
    }
    if targets.len() > TASK_TARGETS_MAX {
        return Err(Refusal::Invalid(format!("{} targets; at most {TASK_TARGETS_MAX}", targets.len())));
    }
    let checked = shared.read(|s| check_copy(s, &key, targets)).await??;
    let id = record(shared, TaskKind::Copy, key, checked)?;
    tracing::info!(task = %format_id(id), "copy task created");
    Ok(id)
}

/// `CreateMoveTask` of the stored `key` from segment `source` to `target`.
pub async fn create_move(shared: &Shared, key: String, source: &str, target: &str) -> Result<TaskId, Refusal> {
    let checked = shared.read(|s| check_move(s, &key, source, target)).await??;
    let id = record(shared, TaskKind::Move, key, checked)?;
    tracing::info!(task = %format_id(id), "move task created");
    Ok(id)
}

/// Upstream's way of printing a task id.
pub fn format_id(id: TaskId) -> String {
    format!("{}-{}", id.hi, id.lo)
}

/// `QueryTask` of `id` by a caller of `tenant`: the task as it stands
/// (another tenant's task is not found).
pub fn query(shared: &Shared, id: TaskId, tenant: &str) -> Result<UserTask, Refusal> {
    let found = shared.leader.with(|t| t.tasks.get(id).filter(|t| tenant_of(&t.key) == tenant).cloned());
    let Some(found) = found else {
        return Err(shared.not_leader());
    };
    found.ok_or_else(|| {
        Refusal::TaskNotFound(format!(
            "no task {} here (never made, pruned past {} finished tasks, or made under an earlier leader)",
            format_id(id),
            crate::leader::user_tasks::TASKS_FINISHED_MAX
        ))
    })
}

/// What planning made of one waiting copy, besides a plan.
pub(crate) enum Settled {
    /// The target holds the object already.
    Done(TaskId),
    /// The task cannot go on: why, upstream-style.
    Failed(TaskId, String),
    /// No room on the target now.
    NoRoom(TaskId, SegmentId),
}

/// The copies of `waiting`: from a readable replica (a move's source
/// first) to its target.
pub(crate) fn plan(s: &MetaState, waiting: Vec<Waiting>) -> (Vec<Plan>, Vec<Settled>) {
    let mut plans = Vec::new();
    let mut settled = Vec::new();
    for w in waiting {
        let Some(o) = s.object(&w.key).filter(|o| o.version == w.version) else {
            let why = format!("OBJECT_NOT_FOUND ({:?} was removed or replaced)", w.key);
            settled.push(Settled::Failed(w.task, why));
            continue;
        };
        if o.replicas.iter().any(|r| r.segment == w.target) {
            settled.push(Settled::Done(w.task));
            continue;
        }
        let target = s.segment(w.target).filter(|g| g.tier() == Tier::Dram && g.is_attached());
        let Some(target) = target else {
            let why = format!("UNAVAILABLE_IN_CURRENT_STATUS (segment {} is gone)", w.target);
            settled.push(Settled::Failed(w.task, why));
            continue;
        };
        let Some(len) = Tier::Dram.range_len(o.size_bytes) else {
            settled.push(Settled::Failed(w.task, "INVALID_PARAMS (the object's size has no memory range)".into()));
            continue;
        };
        if target.free_bytes() < len {
            settled.push(Settled::NoRoom(w.task, w.target));
            continue;
        }
        let mut sources: Vec<ReplicaPlacement> = o.replicas.iter().filter(|r| s.is_readable(r)).cloned().collect();
        sources.sort_by_key(|r| Some(r.segment) != w.source);
        if sources.is_empty() {
            settled
                .push(Settled::Failed(w.task, format!("REPLICA_IS_NOT_READY ({:?} has no readable replica)", w.key)));
            continue;
        }
        plans.push(Plan::of(o, sources, target, Tier::Dram, Some(w.task)));
    }
    (plans, settled)
}

/// Applies what planning settled to the task table.
pub(crate) fn settle(shared: &Shared, settled: Vec<Settled>) {
    if settled.is_empty() {
        return;
    }
    let ms = now_ms();
    shared.leader.with(|t| {
        for s in settled {
            match s {
                Settled::Done(id) => t.tasks.target_done(id, ms),
                Settled::Failed(id, why) => t.tasks.fail(id, why, ms),
                Settled::NoRoom(id, target) => t.tasks.no_room(id, target, ms),
            }
        }
    });
}

/// The outcome of a user copy reported by its store node: the task goes
/// on, or fails saying why (upstream's error name first).
pub(crate) fn copy_reported(shared: &Shared, copy: u64, outcome: Result<(), String>) {
    let ms = now_ms();
    if let Some(Some(id)) = shared.leader.with(|t| t.tasks.copy_ended(copy, outcome, ms)) {
        tracing::debug!(task = %format_id(id), copy, "a task's copy ended");
    }
}

/// One round of the tasks: those past [`TASK_TIMEOUT`] fail; moves whose
/// copy is done drop their source replica.
pub(crate) async fn round(shared: &Shared) {
    let ms = now_ms();
    let expired = shared.leader.with(|t| t.tasks.expire(Instant::now(), TASK_TIMEOUT, ms)).unwrap_or(0);
    if expired > 0 {
        tracing::warn!(
            tasks = expired,
            timeout_s = TASK_TIMEOUT.as_secs(),
            "copy or move tasks not done in time failed"
        );
    }
    drop_moved(shared).await;
}

/// Drops the source replicas of moves whose copy is done, for each object
/// no reader may hold a lease on (the others wait for a later round): a
/// move whose source is gone already succeeds; one whose target replica
/// is gone fails, its source kept.
async fn drop_moved(shared: &Shared) {
    let mut due = shared.leader.with(|t| t.tasks.drops_due()).unwrap_or_default();
    if due.is_empty() {
        return;
    }
    due.truncate(DROPS_PER_ROUND_MAX);
    let ms = now_ms();
    let (drops, settled) = shared.reader.read(|s| {
        let mut drops = Vec::new();
        let mut settled = Vec::new();
        for (id, key, version, source) in due {
            let Some(o) = s.object(&key).filter(|o| o.version == version) else {
                settled.push(Settled::Failed(id, format!("OBJECT_NOT_FOUND ({key:?} was removed or replaced)")));
                continue;
            };
            if !o.replicas.iter().any(|r| r.segment == source) {
                settled.push(Settled::Done(id));
                continue;
            }
            let memory_elsewhere = o
                .replicas
                .iter()
                .any(|r| r.segment != source && s.is_readable(r) && s.replica_tier(r) == Some(Tier::Dram));
            if !memory_elsewhere {
                let why = "UNAVAILABLE_IN_CURRENT_STATUS (the copy on the target is gone; the source is kept)";
                settled.push(Settled::Failed(id, why.to_string()));
                continue;
            }
            drops.push((id, key, version, source));
        }
        (drops, settled)
    });
    shared.leader.with(|t| {
        for s in settled {
            match s {
                // Done here: the source replica is gone.
                Settled::Done(id) => t.tasks.succeed(id, ms),
                Settled::Failed(id, why) => t.tasks.fail(id, why, ms),
                Settled::NoRoom(..) => {}
            }
        }
    });
    if drops.is_empty() {
        return;
    }
    let hashes: Vec<(KeyHash, ObjectVersion)> = drops.iter().map(|(_, k, v, _)| (KeyHash::of(k), *v)).collect();
    let Some(fenced) = shared.leader.fence_removals(&hashes, false) else { return };
    let mut cmds = Vec::new();
    let mut tasks = Vec::new();
    for ((id, key, version, source), leased) in drops.into_iter().zip(&fenced.refused) {
        if *leased {
            continue; // a reader may hold its replica list: a later round
        }
        cmds.push(Command::DropReplica { victim: VersionedKey { key, version }, segment: source });
        tasks.push(id);
    }
    if cmds.is_empty() {
        return;
    }
    match propose_fenced(&shared.write_path.proposer, cmds, fenced.guard, |_, _| false).await {
        Ok(answers) => {
            let ms = now_ms();
            shared.leader.with(|t| {
                // One skipped is checked again next round (the source gone
                // is a success, the target gone a failure).
                for (id, answer) in tasks.iter().zip(&answers) {
                    if let Response::Removed { count: 1 } = answer {
                        t.tasks.succeed(*id, ms);
                    }
                }
            });
            tracing::info!(moves = tasks.len(), "moved objects' source replicas dropped");
        }
        Err(status) => {
            tracing::debug!(refusal = %status, "dropping moved objects' sources failed; a later round retries")
        }
    }
}

/// `PrefetchToMemory`: queues for promotion the stored `keys` whose only
/// readable replicas are on disk; answers how many were queued.
pub async fn prefetch(shared: &Shared, keys: &[String]) -> Result<u32, Refusal> {
    if keys.len() > PREFETCH_KEYS_MAX {
        return Err(Refusal::Invalid(format!("{} keys; at most {PREFETCH_KEYS_MAX}", keys.len())));
    }
    let disk_only: Vec<String> = shared
        .read(|s| {
            keys.iter()
                .filter_map(|k| s.object(k))
                .filter(|o| {
                    let readable =
                        |tier| o.replicas.iter().any(|r| s.is_readable(r) && s.replica_tier(r) == Some(tier));
                    readable(Tier::Ssd) && !readable(Tier::Dram)
                })
                .map(|o| o.key.clone())
                .collect()
        })
        .await?;
    let queued = shared
        .leader
        .with(|t| disk_only.iter().filter(|k| !t.copies.is_copying(k) && t.copies.queue_prefetch(k)).count())
        .ok_or_else(|| shared.not_leader())?;
    if queued > 0 {
        tracing::debug!(keys = queued, "disk-only objects queued for promotion (prefetch)");
    }
    Ok(queued as u32)
}
