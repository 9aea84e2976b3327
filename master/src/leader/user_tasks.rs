//! Users' copy and move tasks (upstream 0.3.14's `create_copy_task`,
//! `create_move_task`, `query_task`; docs/TIERS.md, "Copy and move tasks"):
//! the leader's record of each task — its id, kind, status, times, the
//! store node that makes its copies and its message — and what is left of
//! it to do: targets not yet copied to, copies in flight, a moved object's
//! source replica to drop.
//!
//! Pure bookkeeping of one leadership term, part of the leader's soft state
//! (`leader.rs`, one lock): no clock (callers pass wall-clock milliseconds
//! for display and `Instant`s for timeouts), no I/O (`objects/user_tasks.rs`
//! reads the state, plans the copies and proposes). A new leader starts
//! empty: a task of an earlier term is unknown to it (`TASK_NOT_FOUND`), as
//! upstream's restarted master forgets its tasks.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use mooncake_raft_store::ObjectVersion;
use mooncake_segment::{ClientId, SegmentId};

/// Tasks not yet finished at most (upstream's `max_total_pending_tasks`):
/// past it a new task is refused (`TASK_PENDING_LIMIT_EXCEEDED`). Each
/// holds a key and a few segment ids: ~10,000 cost about a megabyte.
pub const TASKS_UNFINISHED_MAX: usize = 10_000;

/// Finished tasks kept for `query_task` at most (upstream's
/// `max_total_finished_tasks`); the oldest are forgotten first.
pub const TASKS_FINISHED_MAX: usize = 10_000;

/// Targets of one copy task at most (a replica per segment: more than the
/// cluster's segments is never useful).
pub const TASK_TARGETS_MAX: usize = 64;

/// Times a copy that found no room on its target is tried again before its
/// task fails (upstream retries `NO_AVAILABLE_HANDLE` 10 times).
pub const NO_ROOM_ATTEMPTS_MAX: u32 = 10;

/// A task not finished this long after it was made fails ("processing
/// timeout"), its source left as it was (upstream's
/// `processing_task_timeout_sec`: 300 s).
pub const TASK_TIMEOUT: Duration = Duration::from_secs(300);

/// A task's id: upstream's UUID pair. Ours is (the leader's term, a random
/// number), so no two leaders' tasks share an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    pub hi: u64,
    pub lo: u64,
}

/// What a task does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    /// Copies the object to each target segment (`REPLICA_COPY`).
    Copy,
    /// Copies the object to the target, then drops the source replica
    /// (`REPLICA_MOVE`).
    Move,
}

/// Where a task is (upstream's numbers in the wire enum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    Pending,
    Processing,
    Failed,
    Success,
}

impl TaskStatus {
    pub fn is_finished(self) -> bool {
        matches!(self, TaskStatus::Failed | TaskStatus::Success)
    }
}

/// Upstream's message of a task that succeeded.
pub const SUCCESS_MESSAGE: &str = "Task completed successfully";

/// One task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserTask {
    pub id: TaskId,
    pub kind: TaskKind,
    pub status: TaskStatus,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// The store node that makes its copies (the owner of the target).
    pub assigned: ClientId,
    pub message: String,
    /// The object (its stored key: the tenant is part of it).
    pub key: String,
    pub version: ObjectVersion,
    /// A move's source segment.
    pub source: Option<SegmentId>,
    /// Targets with no copy started yet.
    pub waiting: Vec<SegmentId>,
    /// Copies in flight (ids of the copy table).
    pub copies: Vec<u64>,
    /// Copies that found no room so far.
    pub no_room: u32,
    /// A move whose copy is done: its source replica is to be dropped.
    pub dropping: bool,
    pub issued: Instant,
}

/// A copy a task waits for: its object, a move's source, the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub task: TaskId,
    pub key: String,
    pub version: ObjectVersion,
    pub source: Option<SegmentId>,
    pub target: SegmentId,
}

/// The tasks of one term.
#[derive(Debug, Default)]
pub struct TaskTable {
    tasks: HashMap<TaskId, UserTask>,
    /// Unfinished tasks, oldest first.
    unfinished: BTreeMap<(Instant, TaskId), ()>,
    /// Finished tasks, oldest first (pruned past [`TASKS_FINISHED_MAX`]).
    finished: VecDeque<TaskId>,
    /// The task of each copy in flight.
    by_copy: HashMap<u64, TaskId>,
}

/// Why a task cannot be added.
#[derive(Debug, PartialEq, Eq)]
pub enum AddError {
    /// [`TASKS_UNFINISHED_MAX`] tasks are not finished.
    PendingLimit,
}

impl TaskTable {
    /// Records `task` (PENDING, or finished already when it has nothing
    /// to do) unless too many are unfinished.
    pub fn add(&mut self, task: UserTask) -> Result<TaskId, AddError> {
        if self.unfinished.len() >= TASKS_UNFINISHED_MAX {
            return Err(AddError::PendingLimit);
        }
        let id = task.id;
        let finished = task.status.is_finished();
        if finished {
            self.finished.push_back(id);
        } else {
            self.unfinished.insert((task.issued, id), ());
        }
        self.tasks.insert(id, task);
        self.prune();
        Ok(id)
    }

    /// Whether `id` is taken (ids are drawn at random).
    pub fn contains(&self, id: TaskId) -> bool {
        self.tasks.contains_key(&id)
    }

    pub fn get(&self, id: TaskId) -> Option<&UserTask> {
        self.tasks.get(&id)
    }

    /// Tasks not finished.
    pub fn unfinished_count(&self) -> usize {
        self.unfinished.len()
    }

    /// Up to `max` copies to start, oldest task first; no longer waiting
    /// (give back what cannot start yet with [`TaskTable::wait_again`]).
    pub fn take_waiting(&mut self, max: usize) -> Vec<Waiting> {
        let mut out = Vec::new();
        for (_, id) in self.unfinished.keys() {
            if out.len() >= max {
                break;
            }
            let Some(t) = self.tasks.get_mut(id) else { continue };
            while out.len() < max {
                let Some(target) = t.waiting.pop() else { break };
                out.push(Waiting { task: *id, key: t.key.clone(), version: t.version, source: t.source, target });
            }
        }
        out
    }

    /// Whether some task has a copy to start.
    pub fn has_waiting(&self) -> bool {
        self.unfinished.keys().filter_map(|(_, id)| self.tasks.get(id)).any(|t| !t.waiting.is_empty())
    }

    /// A target whose copy could not start yet (an arena is being granted).
    pub fn wait_again(&mut self, id: TaskId, target: SegmentId) {
        if let Some(t) = self.tasks.get_mut(&id).filter(|t| !t.status.is_finished()) {
            t.waiting.push(target);
        }
    }

    /// A target whose copy found no room: waits again, or fails the task
    /// past [`NO_ROOM_ATTEMPTS_MAX`] tries.
    pub fn no_room(&mut self, id: TaskId, target: SegmentId, now_ms: u64) {
        let Some(t) = self.tasks.get_mut(&id).filter(|t| !t.status.is_finished()) else { return };
        t.no_room += 1;
        if t.no_room >= NO_ROOM_ATTEMPTS_MAX {
            let why = format!("NO_AVAILABLE_HANDLE (max retries reached: {NO_ROOM_ATTEMPTS_MAX}; no room on {target})");
            self.fail(id, why, now_ms);
        } else {
            t.waiting.push(target);
        }
    }

    /// Copy `copy` of task `id` started: the task is PROCESSING.
    pub fn copy_started(&mut self, id: TaskId, copy: u64, now_ms: u64) {
        let Some(t) = self.tasks.get_mut(&id).filter(|t| !t.status.is_finished()) else { return };
        t.copies.push(copy);
        t.status = TaskStatus::Processing;
        t.updated_ms = now_ms;
        self.by_copy.insert(copy, id);
    }

    /// A target needs no copy (it holds the object already): done with it.
    pub fn target_done(&mut self, id: TaskId, now_ms: u64) {
        self.settle(id, now_ms);
    }

    /// Copy `copy` ended (`Ok`: its replica is recorded, or was there
    /// already; `Err`: why it failed, upstream-style). Answers the task's
    /// id when it was a task's copy.
    pub fn copy_ended(&mut self, copy: u64, outcome: Result<(), String>, now_ms: u64) -> Option<TaskId> {
        let id = self.by_copy.remove(&copy)?;
        if let Some(t) = self.tasks.get_mut(&id) {
            t.copies.retain(|c| *c != copy);
        }
        match outcome {
            Ok(()) => self.settle(id, now_ms),
            Err(why) => self.fail(id, why, now_ms),
        }
        Some(id)
    }

    /// A task with no target waiting and no copy in flight is done: a copy
    /// succeeds, a move goes on to drop its source.
    fn settle(&mut self, id: TaskId, now_ms: u64) {
        let Some(t) = self.tasks.get_mut(&id).filter(|t| !t.status.is_finished()) else { return };
        t.updated_ms = now_ms;
        if !t.waiting.is_empty() || !t.copies.is_empty() {
            return;
        }
        match t.kind {
            TaskKind::Copy => self.succeed(id, now_ms),
            TaskKind::Move => {
                t.dropping = true;
                t.status = TaskStatus::Processing;
            }
        }
    }

    /// Moves whose copy is done: (task, key, version, source segment).
    pub fn drops_due(&self) -> Vec<(TaskId, String, ObjectVersion, SegmentId)> {
        self.unfinished
            .keys()
            .filter_map(|(_, id)| self.tasks.get(id))
            .filter(|t| t.dropping)
            .filter_map(|t| Some((t.id, t.key.clone(), t.version, t.source?)))
            .collect()
    }

    /// Ends task `id` as a success.
    pub fn succeed(&mut self, id: TaskId, now_ms: u64) {
        self.finish(id, TaskStatus::Success, SUCCESS_MESSAGE.to_string(), now_ms);
    }

    /// Ends task `id` as failed, saying why.
    pub fn fail(&mut self, id: TaskId, why: String, now_ms: u64) {
        self.finish(id, TaskStatus::Failed, why, now_ms);
    }

    fn finish(&mut self, id: TaskId, status: TaskStatus, message: String, now_ms: u64) {
        let Some(t) = self.tasks.get_mut(&id).filter(|t| !t.status.is_finished()) else { return };
        t.status = status;
        t.message = message;
        t.updated_ms = now_ms;
        t.waiting.clear();
        t.dropping = false;
        for c in t.copies.drain(..) {
            self.by_copy.remove(&c);
        }
        self.unfinished.remove(&(t.issued, id));
        self.finished.push_back(id);
        self.prune();
    }

    /// Fails the tasks made longer than `timeout` ago (a move whose source
    /// stays leased, a copy stuck): answers how many.
    pub fn expire(&mut self, now: Instant, timeout: Duration, now_ms: u64) -> usize {
        let old: Vec<TaskId> = self
            .unfinished
            .keys()
            .take_while(|(issued, _)| now.saturating_duration_since(*issued) > timeout)
            .map(|(_, id)| *id)
            .collect();
        for id in &old {
            self.fail(*id, "processing timeout".to_string(), now_ms);
        }
        old.len()
    }

    fn prune(&mut self) {
        while self.finished.len() > TASKS_FINISHED_MAX {
            if let Some(id) = self.finished.pop_front() {
                self.tasks.remove(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(t: &mut TaskTable, lo: u64, kind: TaskKind, targets: &[u64], now: Instant) -> TaskId {
        let id = TaskId { hi: 1, lo };
        let task = UserTask {
            id,
            kind,
            status: TaskStatus::Pending,
            created_ms: 5,
            updated_ms: 5,
            assigned: ClientId(3),
            message: String::new(),
            key: format!("k{lo}"),
            version: ObjectVersion(1),
            source: (kind == TaskKind::Move).then_some(SegmentId(1)),
            waiting: targets.iter().map(|s| SegmentId(*s)).collect(),
            copies: Vec::new(),
            no_room: 0,
            dropping: false,
            issued: now,
        };
        t.add(task).expect("room")
    }

    #[test]
    fn a_copy_succeeds_once_every_target_is_copied_and_a_move_then_drops_its_source() {
        let now = Instant::now();
        let mut t = TaskTable::default();
        let copy = task(&mut t, 1, TaskKind::Copy, &[2, 3], now);
        let mv = task(&mut t, 2, TaskKind::Move, &[4], now);
        let started = t.take_waiting(8);
        assert_eq!(started.len(), 3);
        for (i, w) in started.iter().enumerate() {
            t.copy_started(w.task, 10 + i as u64, 6);
        }
        assert_eq!(t.get(copy).map(|t| t.status), Some(TaskStatus::Processing));
        assert_eq!(t.copy_ended(10, Ok(()), 7), Some(copy));
        assert_eq!(t.get(copy).map(|t| t.status), Some(TaskStatus::Processing), "one target left");
        t.copy_ended(11, Ok(()), 8);
        let done = t.get(copy).expect("kept");
        assert_eq!((done.status, done.message.as_str(), done.updated_ms), (TaskStatus::Success, SUCCESS_MESSAGE, 8));
        assert!(t.drops_due().is_empty());
        t.copy_ended(12, Ok(()), 9);
        assert_eq!(t.drops_due().iter().map(|d| d.0).collect::<Vec<_>>(), vec![mv]);
        t.succeed(mv, 10);
        assert!(t.drops_due().is_empty());
        assert_eq!(t.unfinished_count(), 0);
        assert_eq!(t.copy_ended(12, Ok(()), 11), None, "ended once");
    }

    #[test]
    fn a_failed_copy_fails_its_task_and_no_room_is_tried_again_up_to_the_limit() {
        let now = Instant::now();
        let mut t = TaskTable::default();
        let a = task(&mut t, 1, TaskKind::Copy, &[2], now);
        let b = task(&mut t, 2, TaskKind::Move, &[3], now);
        for w in t.take_waiting(8) {
            if w.task == a {
                t.copy_started(a, 1, 6);
            }
        }
        t.copy_ended(1, Err("TRANSFER_FAIL (source unreadable)".into()), 7);
        assert_eq!(
            t.get(a).map(|t| (t.status, t.message.clone())),
            Some((TaskStatus::Failed, "TRANSFER_FAIL (source unreadable)".into()))
        );
        for _ in 0..NO_ROOM_ATTEMPTS_MAX {
            assert_eq!(t.get(b).map(|t| t.status), Some(TaskStatus::Pending));
            t.no_room(b, SegmentId(3), 8);
        }
        let failed = t.get(b).expect("kept");
        assert_eq!(failed.status, TaskStatus::Failed);
        assert!(failed.message.starts_with("NO_AVAILABLE_HANDLE (max retries reached: 10"), "{}", failed.message);
    }

    #[test]
    fn unfinished_tasks_are_bounded_and_finished_ones_pruned_oldest_first() {
        let now = Instant::now();
        let mut t = TaskTable::default();
        for lo in 0..TASKS_UNFINISHED_MAX as u64 {
            task(&mut t, lo, TaskKind::Copy, &[2], now);
        }
        let id = TaskId { hi: 1, lo: u64::MAX };
        let over = UserTask { id, ..t.get(TaskId { hi: 1, lo: 0 }).expect("there").clone() };
        assert_eq!(t.add(over), Err(AddError::PendingLimit));
        // Finish them all, then more: the oldest finished are forgotten.
        for lo in 0..TASKS_UNFINISHED_MAX as u64 {
            t.succeed(TaskId { hi: 1, lo }, 6);
        }
        for lo in 0..10 {
            let id = task(&mut t, TASKS_UNFINISHED_MAX as u64 + lo, TaskKind::Copy, &[], now);
            t.succeed(id, 7);
        }
        assert!(t.get(TaskId { hi: 1, lo: 9 }).is_none(), "pruned");
        assert!(t.get(TaskId { hi: 1, lo: 10 }).is_some());
    }

    #[test]
    fn tasks_not_finished_in_time_fail_with_upstreams_message() {
        let t0 = Instant::now();
        let mut t = TaskTable::default();
        let old = task(&mut t, 1, TaskKind::Move, &[2], t0);
        let new = task(&mut t, 2, TaskKind::Move, &[2], t0 + Duration::from_secs(5));
        assert_eq!(t.expire(t0 + Duration::from_secs(11), Duration::from_secs(10), 9), 1);
        assert_eq!(
            t.get(old).map(|t| (t.status, t.message.as_str())),
            Some((TaskStatus::Failed, "processing timeout"))
        );
        assert_eq!(t.get(new).map(|t| t.status), Some(TaskStatus::Pending));
    }
}
