//! Upstream 0.3.14's task calls and prefetch over [`Session`]: copy and
//! move tasks made by the leader and their state (docs/PYTHON.md, "Copy,
//! move and query tasks (0.3.14)"), and `ExistOptions.prefetch_to_memory`.
//! Every failure is one of Mooncake's codes; nothing here raises.

use mooncake_proto::master::{QueryTaskResponse, TaskId};

use crate::codes::{self, Code};
use crate::session::Session;

/// A task id as upstream returns it: its two halves.
pub type TaskPair = (u64, u64);

/// A task's state, as `query_task` reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskState {
    pub id: TaskPair,
    /// Upstream's `TaskType`: 0 copy, 1 move.
    pub kind: i32,
    /// Upstream's `TaskStatus`: 0 pending, 1 processing, 2 failed, 3 success.
    pub status: i32,
    pub created_at_ms: u64,
    pub last_updated_at_ms: u64,
    /// Upstream's client UUID; ours is one number: `(0, client id)`.
    pub assigned_client: TaskPair,
    pub message: String,
}

impl From<QueryTaskResponse> for TaskState {
    fn from(r: QueryTaskResponse) -> Self {
        let id = r.id.map_or((0, 0), |i| (i.hi, i.lo));
        TaskState {
            id,
            kind: r.r#type,
            status: r.task_status,
            created_at_ms: r.created_at_ms,
            last_updated_at_ms: r.last_updated_at_ms,
            assigned_client: (0, r.assigned_client),
            message: r.message,
        }
    }
}

fn of_master(e: mooncake_client::MasterError) -> Code {
    codes::of_master(&e)
}

impl Session {
    /// `create_copy_task(key, targets)`: the task's id, or a code.
    pub fn create_copy_task(&self, key: &str, targets: Vec<String>) -> Result<TaskPair, Code> {
        let master = self.client().master();
        let id = self.block_on(master.create_copy_task(key, targets)).map_err(of_master)?;
        Ok((id.hi, id.lo))
    }

    /// `create_move_task(key, source, target)`: the task's id, or a code.
    pub fn create_move_task(&self, key: &str, source: &str, target: &str) -> Result<TaskPair, Code> {
        let master = self.client().master();
        let id = self.block_on(master.create_move_task(key, source, target)).map_err(of_master)?;
        Ok((id.hi, id.lo))
    }

    /// `query_task(task_id)`: the task's state, or a code (`TASK_NOT_FOUND`
    /// for an id the leader does not know).
    pub fn query_task(&self, (hi, lo): TaskPair) -> Result<TaskState, Code> {
        let master = self.client().master();
        Ok(self.block_on(master.query_task(TaskId { hi, lo })).map_err(of_master)?.into())
    }

    /// After an existence check with `prefetch_to_memory`: asks the leader,
    /// without waiting for its answer, to promote those of `found` whose
    /// only readable replicas are on disk. Only with `enable_ssd_prefetch`
    /// (as upstream); best effort, a failure is logged at debug level.
    pub fn prefetch(&self, found: Vec<String>) {
        if !self.ssd_prefetch() || found.is_empty() {
            return;
        }
        let master = self.client().master_handle();
        self.spawn(async move {
            for chunk in found.chunks(crate::batches::BATCH_KEYS_MAX) {
                if let Err(e) = master.prefetch_to_memory(chunk.to_vec()).await {
                    tracing::debug!(error = %e, "prefetch to memory not asked");
                }
            }
        });
    }
}
