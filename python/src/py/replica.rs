//! What `get_replica_desc` and `batch_get_replica_desc` return, with
//! Mooncake's class and method names. Our replicas are all in memory; a
//! descriptor's `buffer_address` is the object's offset in its segment (a
//! store node's addresses are its own).

use pyo3::prelude::*;

use crate::batches::ReplicaInfo;

/// Mooncake's replica states (ours are COMPLETE once readable).
#[pyclass(module = "mooncake_rs.store", eq, eq_int, frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::upper_case_acronyms)]
pub enum ReplicaStatus {
    UNDEFINED = 0,
    INITIALIZED = 1,
    PROCESSING = 2,
    COMPLETE = 3,
    REMOVED = 4,
    FAILED = 5,
}

/// Where a replica's bytes are.
#[pyclass(module = "mooncake_rs.store", name = "Descriptor", get_all, frozen, from_py_object)]
#[derive(Clone, Debug)]
pub struct BufferDescriptor {
    pub size: u64,
    pub buffer_address: u64,
    pub transport_endpoint: String,
    /// Our segment id (not in Mooncake's descriptor).
    pub segment_id: u64,
}

#[pymethods]
impl BufferDescriptor {
    fn __repr__(&self) -> String {
        format!(
            "<Descriptor size={} buffer_address={} transport_endpoint={}>",
            self.size, self.buffer_address, self.transport_endpoint
        )
    }
}

#[pyclass(module = "mooncake_rs.store", get_all, frozen)]
pub struct MemoryDescriptor {
    pub buffer_descriptor: BufferDescriptor,
}

#[pyclass(module = "mooncake_rs.store", frozen)]
pub struct ReplicaDescriptor {
    info: ReplicaInfo,
}

impl ReplicaDescriptor {
    pub fn new(info: ReplicaInfo) -> Self {
        ReplicaDescriptor { info }
    }
}

#[pymethods]
impl ReplicaDescriptor {
    #[getter]
    fn status(&self) -> ReplicaStatus {
        if self.info.complete { ReplicaStatus::COMPLETE } else { ReplicaStatus::PROCESSING }
    }

    fn is_memory_replica(&self) -> bool {
        !self.info.on_disk
    }

    /// Upstream's shared-file-system (DFS) replica: we have none.
    fn is_disk_replica(&self) -> bool {
        false
    }

    /// A replica on a store node's own disk segment.
    fn is_local_disk_replica(&self) -> bool {
        self.info.on_disk
    }

    fn get_memory_descriptor(&self) -> MemoryDescriptor {
        MemoryDescriptor {
            buffer_descriptor: BufferDescriptor {
                size: self.info.size,
                buffer_address: self.info.offset,
                transport_endpoint: self.info.endpoint.clone(),
                segment_id: self.info.segment_id,
            },
        }
    }

    fn __repr__(&self) -> String {
        format!("<ReplicaDescriptor {} at {} offset {}>", self.status_name(), self.info.endpoint, self.info.offset)
    }
}

impl ReplicaDescriptor {
    fn status_name(&self) -> &'static str {
        if self.info.complete { "COMPLETE" } else { "PROCESSING" }
    }
}
