//! `MooncakeHostMemAllocator`: upstream's allocator of host memory for a
//! standalone-mode store's buffers (crate::standalone holds the memory).

use pyo3::prelude::*;

use super::args::unsigned;
use crate::codes::{self, Code};

/// Upstream's `MooncakeHostMemAllocator`: host memory for a standalone-mode
/// store's buffers (`alloc(size)` → address, `free(address)` → 0 or -1).
/// Register what it gives with `register_buffer` before passing it to a call.
#[pyclass(module = "mooncake_rs.store", frozen)]
#[derive(Default)]
pub struct MooncakeHostMemAllocator {
    memory: crate::standalone::HostMemory,
}

#[pymethods]
impl MooncakeHostMemAllocator {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// `size` bytes of page-aligned memory; their address (a `MemoryError`
    /// when the host has none to give).
    fn alloc(&self, size: i64) -> PyResult<usize> {
        let size = unsigned(size, "size")? as u64;
        self.memory.alloc(size).map_err(|e| pyo3::exceptions::PyMemoryError::new_err(e.to_string()))
    }

    /// Frees a block `alloc` gave: 0, or -1 for an address it did not give.
    fn free(&self, ptr: i64) -> PyResult<Code> {
        let ptr = unsigned(ptr, "ptr")?;
        Ok(if self.memory.free(ptr) { codes::OK } else { codes::INTERNAL_ERROR })
    }
}
