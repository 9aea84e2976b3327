//! Users' copy and move tasks and prefetches on the wire: the caller's key
//! space (tenant) applied to the keys, the answers built. What a task does
//! is `objects/user_tasks.rs`.

use mooncake_proto::Status;
use mooncake_proto::master::*;
use tonic::Request;

use super::*;
use crate::leader::user_tasks::{TaskId, TaskKind, TaskStatus, UserTask};
use crate::objects::user_tasks;
use crate::refusal::Refusal;

// A prefetch is one batch RPC: the objects layer's limit is the RPCs'.
const _: () = assert!(user_tasks::PREFETCH_KEYS_MAX == super::BATCH_RPC_MAX);

fn task_answer(id: Result<TaskId, Refusal>) -> CreateTaskResponse {
    match id {
        Ok(id) => CreateTaskResponse {
            status: Some(Status::ok()),
            id: Some(mooncake_proto::master::TaskId { hi: id.hi, lo: id.lo }),
        },
        Err(r) => CreateTaskResponse { status: Some(r.into()), id: None },
    }
}

/// The answer of a QueryTask: the task, or why there is none.
fn query_answer(id: TaskId, task: Result<UserTask, Refusal>) -> QueryTaskResponse {
    let task = match task {
        Ok(task) => task,
        Err(r) => return QueryTaskResponse { status: Some(r.into()), ..Default::default() },
    };
    let status = match task.status {
        TaskStatus::Pending => mooncake_proto::master::TaskStatus::Pending,
        TaskStatus::Processing => mooncake_proto::master::TaskStatus::Processing,
        TaskStatus::Failed => mooncake_proto::master::TaskStatus::Failed,
        TaskStatus::Success => mooncake_proto::master::TaskStatus::Success,
    };
    let kind = match task.kind {
        TaskKind::Copy => TaskType::ReplicaCopy,
        TaskKind::Move => TaskType::ReplicaMove,
    };
    QueryTaskResponse {
        status: Some(Status::ok()),
        id: Some(mooncake_proto::master::TaskId { hi: id.hi, lo: id.lo }),
        r#type: kind as i32,
        task_status: status as i32,
        created_at_ms: task.created_ms,
        last_updated_at_ms: task.updated_ms,
        assigned_client: task.assigned.0,
        message: task.message,
    }
}

impl MasterServiceImpl {
    pub(super) async fn copy_task(&self, req: Request<CreateCopyTaskRequest>) -> CreateTaskResponse {
        let key = match self.admit(&req, Needs::TENANT).and_then(|space| space.stored(&req.get_ref().key)) {
            Ok(key) => key,
            Err(s) => return CreateTaskResponse { status: Some(s), id: None },
        };
        task_answer(user_tasks::create_copy(&self.shared, key, &req.get_ref().targets).await)
    }

    pub(super) async fn move_task(&self, req: Request<CreateMoveTaskRequest>) -> CreateTaskResponse {
        let key = match self.admit(&req, Needs::TENANT).and_then(|space| space.stored(&req.get_ref().key)) {
            Ok(key) => key,
            Err(s) => return CreateTaskResponse { status: Some(s), id: None },
        };
        let r = req.get_ref();
        task_answer(user_tasks::create_move(&self.shared, key, &r.source, &r.target).await)
    }

    pub(super) fn task_state(&self, req: Request<QueryTaskRequest>) -> QueryTaskResponse {
        let space = match self.admit(&req, Needs::TENANT) {
            Ok(space) => space,
            Err(s) => return QueryTaskResponse { status: Some(s), ..Default::default() },
        };
        let id = req.get_ref().id.map(|id| TaskId { hi: id.hi, lo: id.lo }).unwrap_or(TaskId { hi: 0, lo: 0 });
        query_answer(id, user_tasks::query(&self.shared, id, space.tenant().name()))
    }

    pub(super) async fn prefetch(&self, req: Request<PrefetchToMemoryRequest>) -> PrefetchToMemoryResponse {
        let space = match self.admit(&req, Needs::TENANT) {
            Ok(space) => space,
            Err(s) => return PrefetchToMemoryResponse { status: Some(s), queued: 0 },
        };
        // Keys another tenant could not name are simply not prefetched.
        let (keys, _) = space.stored_all(&req.into_inner().keys);
        match user_tasks::prefetch(&self.shared, &keys).await {
            Ok(queued) => PrefetchToMemoryResponse { status: Some(Status::ok()), queued },
            Err(r) => PrefetchToMemoryResponse { status: Some(r.into()), queued: 0 },
        }
    }
}
