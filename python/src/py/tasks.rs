//! Upstream 0.3.14's task and existence-option classes, with its names:
//! `TaskType`, `TaskStatus`, `QueryTaskResponse` (what `query_task`
//! returns) and `ExistOptions` (the optional argument of `is_exist` and
//! `batch_is_exist`). The calls themselves are `MooncakeDistributedStore`
//! methods (`store/admin.rs`, `store/queries.rs`) over `crate::tasks`.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::tasks::{TaskPair, TaskState};

/// What a task does (upstream's numbers).
#[pyclass(module = "mooncake_rs.store", eq, eq_int, frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum TaskType {
    REPLICA_COPY = 0,
    REPLICA_MOVE = 1,
}

/// Where a task is (upstream's numbers: FAILED is 2, SUCCESS 3).
#[pyclass(module = "mooncake_rs.store", eq, eq_int, frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::upper_case_acronyms)]
pub enum TaskStatus {
    PENDING = 0,
    PROCESSING = 1,
    FAILED = 2,
    SUCCESS = 3,
}

impl TaskType {
    fn of(n: i32) -> Self {
        if n == 1 { TaskType::REPLICA_MOVE } else { TaskType::REPLICA_COPY }
    }
}

impl TaskStatus {
    fn of(n: i32) -> Self {
        match n {
            1 => TaskStatus::PROCESSING,
            2 => TaskStatus::FAILED,
            3 => TaskStatus::SUCCESS,
            _ => TaskStatus::PENDING,
        }
    }
}

/// A task's state (read-only attributes, as upstream's).
#[pyclass(module = "mooncake_rs.store", frozen)]
#[derive(Clone, Debug, Default)]
pub struct QueryTaskResponse {
    state: TaskState,
}

impl QueryTaskResponse {
    pub fn new(state: TaskState) -> Self {
        QueryTaskResponse { state }
    }
}

#[pymethods]
impl QueryTaskResponse {
    /// Upstream's default constructor: an empty response.
    #[new]
    fn empty() -> Self {
        Self::default()
    }

    #[getter]
    fn id(&self) -> TaskPair {
        self.state.id
    }

    #[getter(r#type)]
    fn kind(&self) -> TaskType {
        TaskType::of(self.state.kind)
    }

    #[getter]
    fn status(&self) -> TaskStatus {
        TaskStatus::of(self.state.status)
    }

    #[getter]
    fn created_at_ms_epoch(&self) -> u64 {
        self.state.created_at_ms
    }

    #[getter]
    fn last_updated_at_ms_epoch(&self) -> u64 {
        self.state.last_updated_at_ms
    }

    #[getter]
    fn assigned_client(&self) -> TaskPair {
        self.state.assigned_client
    }

    #[getter]
    fn message(&self) -> String {
        self.state.message.clone()
    }

    fn __repr__(&self) -> String {
        let s = &self.state;
        format!(
            "QueryTaskResponse(id={}-{}, type={}, status={}, created_at={}, last_updated_at={}, assigned_client={}-{}, \
             message=\"{}\")",
            s.id.0,
            s.id.1,
            s.kind,
            s.status,
            s.created_at_ms,
            s.last_updated_at_ms,
            s.assigned_client.0,
            s.assigned_client.1,
            s.message
        )
    }
}

/// `is_exist` and `batch_is_exist` options: `prefetch_to_memory` (default
/// False) asks, with `enable_ssd_prefetch` set at setup, for a best-effort
/// asynchronous promotion to memory of keys found only on disk.
#[pyclass(module = "mooncake_rs.store", from_py_object)]
#[derive(Clone, Debug, Default)]
pub struct ExistOptions {
    #[pyo3(get, set)]
    pub prefetch_to_memory: bool,
}

#[pymethods]
impl ExistOptions {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    fn __str__(&self) -> String {
        format!("ExistOptions: {{ prefetch_to_memory: {} }}", u8::from(self.prefetch_to_memory))
    }
}

/// A task id from Python: a tuple (or list) of two non-negative ints, as
/// upstream's binding converts it; anything else is a `TypeError`.
pub fn task_id(id: &Bound<'_, PyAny>) -> PyResult<TaskPair> {
    let parts: Vec<u64> = id
        .extract()
        .map_err(|_| PyTypeError::new_err("query_task(): task_id must be a tuple of two non-negative ints (hi, lo)"))?;
    match parts[..] {
        [hi, lo] => Ok((hi, lo)),
        _ => Err(PyTypeError::new_err(format!("query_task(): task_id has {} parts, not 2", parts.len()))),
    }
}

/// A task call's answer as upstream's: `(id, 0)` or `((0, 0), code)`.
pub fn task_answer(r: Result<TaskPair, crate::codes::Code>) -> (TaskPair, crate::codes::Code) {
    match r {
        Ok(id) => (id, crate::codes::OK),
        Err(code) => ((0, 0), code),
    }
}
