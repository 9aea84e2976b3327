//! `MooncakeDistributedStore`'s put and get sessions (`batch_put_session_*`,
//! `batch_put_from_multi_buffer_ranges`, `batch_get_session_*`,
//! `batch_get_into_multi_buffer_ranges`) over crate::sessions.

use pyo3::prelude::*;

use super::MooncakeDistributedStore;
use crate::codes::{self, Code};
use crate::py::args::unsigned_all;
use crate::py::config::{ReplicateConfig, spec_of};
use crate::py::ranges::Ranged;

#[pymethods]
impl MooncakeDistributedStore {
    /// `batch_put_session_start(keys, sizes, config)`: reserves each
    /// object's space; nothing is readable until `batch_put_session_end`.
    /// Per key 0 or a code; `[]` before `setup`.
    #[pyo3(signature = (keys, sizes, config=None))]
    fn batch_put_session_start(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        sizes: Vec<i64>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Vec<Code>> {
        let sizes = unsigned_all(&sizes, "sizes")?;
        let spec = spec_of(config);
        let s = session!(self, Vec::new());
        if keys.len() != sizes.len() {
            return Ok(vec![codes::INVALID_PARAMS; keys.len()]);
        }
        let items: Vec<(String, u64)> = keys.into_iter().zip(sizes.into_iter().map(|n| n as u64)).collect();
        Ok(py.detach(|| s.put_sessions_start(&items, &spec)))
    }

    /// `batch_put_from_multi_buffer_ranges(keys, all_buffer_ptrs, all_sizes,
    /// all_dst_offsets)`: writes range j of key i (`all_sizes[i][j]` bytes
    /// from `all_buffer_ptrs[i][j]`) at `all_dst_offsets[i][j]` of the
    /// object its put session reserved. Per key the bytes written or a code.
    fn batch_put_from_multi_buffer_ranges(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        all_buffer_ptrs: Vec<Vec<i64>>,
        all_sizes: Vec<Vec<i64>>,
        all_dst_offsets: Vec<Vec<i64>>,
    ) -> PyResult<Vec<Code>> {
        let ranged = Ranged::new(&keys, &all_buffer_ptrs, &all_sizes, &all_dst_offsets)?;
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        let sources = ranged.sources(&s);
        Ok(py.detach(|| s.put_sessions_write(&keys, sources)))
    }

    /// `batch_put_session_end(keys)`: makes each session's object readable.
    /// Per key 0 (the session is gone) or a code (it stays: end it again or
    /// revoke it); `[]` before `setup`.
    fn batch_put_session_end(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<Vec<Code>> {
        let s = session!(self, Vec::new());
        Ok(py.detach(|| s.put_sessions_end(&keys)))
    }

    /// `batch_put_session_revoke(keys)`: frees each session's reservation;
    /// nothing is stored. Per key 0 or a code; `[]` before `setup`.
    fn batch_put_session_revoke(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<Vec<Code>> {
        let s = session!(self, Vec::new());
        Ok(py.detach(|| s.put_sessions_revoke(&keys)))
    }

    /// `batch_get_session_start(keys)`: resolves each object's replicas
    /// once, for ranged reads under its KV lease. Per key 0 or a code.
    fn batch_get_session_start(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<Vec<Code>> {
        let s = session!(self, Vec::new());
        Ok(py.detach(|| s.get_sessions_start(&keys).0))
    }

    /// `batch_get_session_start_with_sources(keys)`: as
    /// `batch_get_session_start`, and per key where the bytes come from
    /// (`"memory"` or `"local_disk"`; `""` for a key that failed).
    fn batch_get_session_start_with_sources(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
    ) -> PyResult<(Vec<Code>, Vec<String>)> {
        let s = session!(self, (Vec::new(), Vec::new()));
        Ok(py.detach(|| s.get_sessions_start(&keys)))
    }

    /// `batch_get_into_multi_buffer_ranges(keys, all_buffer_ptrs, all_sizes,
    /// all_src_offsets)`: reads `all_sizes[i][j]` bytes at
    /// `all_src_offsets[i][j]` of key i's object into `all_buffer_ptrs[i][j]`,
    /// from the replica its get session resolved. Per key the bytes read or
    /// a code (`LEASE_EXPIRED`: start the session again).
    fn batch_get_into_multi_buffer_ranges(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        all_buffer_ptrs: Vec<Vec<i64>>,
        all_sizes: Vec<Vec<i64>>,
        all_src_offsets: Vec<Vec<i64>>,
    ) -> PyResult<Vec<Code>> {
        let ranged = Ranged::new(&keys, &all_buffer_ptrs, &all_sizes, &all_src_offsets)?;
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        let destinations = ranged.destinations(&s);
        Ok(py.detach(|| s.get_sessions_read(&keys, destinations)))
    }

    /// `batch_get_session_end(keys)`: drops the get sessions; 0 (-1 before
    /// `setup`, as upstream).
    fn batch_get_session_end(&self, keys: Vec<String>) -> Code {
        match self.state.session() {
            Ok(s) => {
                s.get_sessions_end(&keys);
                codes::OK
            }
            Err(_) => codes::INTERNAL_ERROR,
        }
    }
}
