//! The PyO3 layer: the extension module `mooncake_rs._native`, whose
//! classes `mooncake_rs.store` re-exports under Mooncake's names.

mod allocator;
mod args;
mod config;
mod handle;
mod ranges;
mod replica;
mod store;
mod tasks;
mod watch;

use pyo3::prelude::*;

use crate::codes;

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::session::init_logging();
    m.add_class::<store::MooncakeDistributedStore>()?;
    m.add_class::<allocator::MooncakeHostMemAllocator>()?;
    m.add_class::<config::ReplicateConfig>()?;
    m.add_class::<config::SoftPinAction>()?;
    m.add_class::<handle::BufferHandle>()?;
    m.add_class::<replica::ReplicaDescriptor>()?;
    m.add_class::<replica::MemoryDescriptor>()?;
    m.add_class::<replica::BufferDescriptor>()?;
    m.add_class::<replica::ReplicaStatus>()?;
    m.add_class::<watch::KVEventWatch>()?;
    m.add_class::<tasks::TaskType>()?;
    m.add_class::<tasks::TaskStatus>()?;
    m.add_class::<tasks::QueryTaskResponse>()?;
    m.add_class::<tasks::ExistOptions>()?;
    m.add("WatchCompactedError", m.py().get_type::<watch::WatchCompactedError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    let close_all = wrap_pyfunction!(store::_close_all_stores, m)?;
    m.add_function(close_all.clone())?;
    m.py().import("atexit")?.call_method1("register", (close_all,))?;
    let errors = [
        ("OK", codes::OK),
        ("INTERNAL_ERROR", codes::INTERNAL_ERROR),
        ("SEGMENT_NOT_FOUND", codes::SEGMENT_NOT_FOUND),
        ("SEGMENT_ALREADY_EXISTS", codes::SEGMENT_ALREADY_EXISTS),
        ("NO_AVAILABLE_HANDLE", codes::NO_AVAILABLE_HANDLE),
        ("INVALID_PARAMS", codes::INVALID_PARAMS),
        ("ILLEGAL_CLIENT", codes::ILLEGAL_CLIENT),
        ("REPLICA_IS_NOT_READY", codes::REPLICA_IS_NOT_READY),
        ("OBJECT_NOT_FOUND", codes::OBJECT_NOT_FOUND),
        ("OBJECT_ALREADY_EXISTS", codes::OBJECT_ALREADY_EXISTS),
        ("OBJECT_HAS_LEASE", codes::OBJECT_HAS_LEASE),
        ("LEASE_EXPIRED", codes::LEASE_EXPIRED),
        ("TRANSFER_FAIL", codes::TRANSFER_FAIL),
        ("RPC_FAIL", codes::RPC_FAIL),
        ("UNAVAILABLE_IN_CURRENT_STATUS", codes::UNAVAILABLE_IN_CURRENT_STATUS),
        ("TASK_NOT_FOUND", codes::TASK_NOT_FOUND),
        ("TASK_PENDING_LIMIT_EXCEEDED", codes::TASK_PENDING_LIMIT_EXCEEDED),
    ];
    m.add("ERROR_CODES", errors.into_iter().collect::<std::collections::HashMap<_, _>>())?;
    Ok(())
}
