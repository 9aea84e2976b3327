//! `MooncakeDistributedStore`'s batch calls: `put_batch`, `upsert_batch`,
//! `get_batch`, `batch_get_buffer`, `batch_put_from`, `batch_upsert_from`,
//! `batch_get_into`, the multi-buffer calls, `get_into_ranges` and
//! `batch_remove`.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::MooncakeDistributedStore;
use super::shapes::{Parts, RangePlan, one_each};
use crate::buffers::carve;
use crate::codes::{self, Code};
use crate::py::args::{HeldBuffer, unsigned_all};
use crate::py::config::{ReplicateConfig, spec_of};
use crate::py::handle::BufferHandle;

#[pymethods]
impl MooncakeDistributedStore {
    /// Byte ranges of objects into registered buffers (buffer-major: for
    /// buffer `i`, key `j`, fragment `k`). Per fragment: bytes read or a code.
    fn get_into_ranges(
        &self,
        py: Python<'_>,
        buffer_ptrs: Vec<i64>,
        all_keys: Vec<Vec<String>>,
        all_dst_offsets: Vec<Vec<Vec<i64>>>,
        all_src_offsets: Vec<Vec<Vec<i64>>>,
        all_sizes: Vec<Vec<Vec<i64>>>,
    ) -> PyResult<Vec<Vec<Vec<Code>>>> {
        let plan = RangePlan::new(&buffer_ptrs, &all_keys, &all_dst_offsets, &all_src_offsets, &all_sizes)?;
        let s = session!(self, plan.refused());
        let regions = carve(&plan.destinations, |p, l| s.usable(p, l));
        let (keys, ranges) = plan.reads(regions);
        let results = py.detach(|| s.get_ranges(&keys, ranges));
        Ok(plan.shape(results))
    }

    /// `put_batch(keys, values, config)`: 0 when every item was stored (or
    /// kept), else the first item's error code.
    #[pyo3(signature = (keys, values, config=None))]
    fn put_batch(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.values_batch(py, keys, values, config, false)
    }

    /// `upsert_batch(keys, values, config)`: as `put_batch`, replacing the
    /// objects of keys that exist (readers see old or new bytes, never a mix).
    #[pyo3(signature = (keys, values, config=None))]
    fn upsert_batch(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.values_batch(py, keys, values, config, true)
    }

    /// Each object's bytes, `b""` for a missing one.
    fn get_batch<'py>(&self, py: Python<'py>, keys: Vec<String>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let s = session!(self, keys.iter().map(|_| PyBytes::new(py, b"")).collect());
        let got = py.detach(|| s.get_batch_staged(&keys));
        Ok(got.iter().map(|r| PyBytes::new(py, r.as_ref().map_or(&[][..], |b| b.as_ref()))).collect())
    }

    /// A `BufferHandle` per key, `None` for a missing one.
    fn batch_get_buffer(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<Vec<Option<BufferHandle>>> {
        let s = session!(self, keys.iter().map(|_| None).collect());
        let got = py.detach(|| s.get_batch_staged(&keys));
        Ok(got.into_iter().map(|r| r.ok().map(BufferHandle::new)).collect())
    }

    #[pyo3(signature = (keys, buffer_ptrs, sizes, config=None))]
    fn batch_put_from(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffer_ptrs: Vec<i64>,
        sizes: Vec<i64>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Vec<Code>> {
        self.put_from_parts(py, keys, one_each(buffer_ptrs), one_each(sizes), config, false)
    }

    /// `batch_upsert_from(keys, buffer_ptrs, sizes, config)`: as
    /// `batch_put_from`, replacing the objects of keys that exist.
    #[pyo3(signature = (keys, buffer_ptrs, sizes, config=None))]
    fn batch_upsert_from(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffer_ptrs: Vec<i64>,
        sizes: Vec<i64>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Vec<Code>> {
        self.put_from_parts(py, keys, one_each(buffer_ptrs), one_each(sizes), config, true)
    }

    /// Reads `keys[i]` into `buffer_ptrs[i]`; each object's size or a code.
    fn batch_get_into(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffer_ptrs: Vec<i64>,
        sizes: Vec<i64>,
    ) -> PyResult<Vec<Code>> {
        let requests: Vec<(usize, usize)> =
            unsigned_all(&buffer_ptrs, "buffer_ptrs")?.into_iter().zip(unsigned_all(&sizes, "sizes")?).collect();
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        if keys.len() != buffer_ptrs.len() || keys.len() != sizes.len() {
            return Ok(vec![codes::INVALID_PARAMS; keys.len()]);
        }
        let regions = carve(&requests, |p, l| s.usable(p, l));
        Ok(py.detach(|| s.get_batch_into(&keys, regions)))
    }

    #[pyo3(signature = (keys, all_buffer_ptrs, all_sizes, config=None))]
    fn batch_put_from_multi_buffers(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        all_buffer_ptrs: Vec<Vec<i64>>,
        all_sizes: Vec<Vec<i64>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Vec<Code>> {
        self.put_from_parts(py, keys, all_buffer_ptrs, all_sizes, config, false)
    }

    /// Reads `keys[i]` scattered over `all_buffer_ptrs[i]`, in order.
    #[pyo3(signature = (keys, all_buffer_ptrs, all_sizes, prefer_alloc_in_same_node=false))]
    fn batch_get_into_multi_buffers(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        all_buffer_ptrs: Vec<Vec<i64>>,
        all_sizes: Vec<Vec<i64>>,
        prefer_alloc_in_same_node: bool,
    ) -> PyResult<Vec<Code>> {
        let _ = prefer_alloc_in_same_node;
        let shape = Parts::new(&keys, &all_buffer_ptrs, &all_sizes)?;
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        let regions = shape.regions(carve(&shape.flat, |p, l| s.usable(p, l)));
        Ok(py.detach(|| s.get_batch_into_parts(&keys, regions)))
    }

    #[pyo3(signature = (keys, force=false))]
    fn batch_remove(&self, py: Python<'_>, keys: Vec<String>, force: bool) -> PyResult<Vec<Code>> {
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        Ok(py.detach(|| s.remove_each(&keys, force)))
    }
}

impl MooncakeDistributedStore {
    fn put_from_parts(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        ptrs: Vec<Vec<i64>>,
        sizes: Vec<Vec<i64>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Vec<Code>> {
        let shape = Parts::new(&keys, &ptrs, &sizes)?;
        let spec = spec_of(config);
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        // Sources may overlap (they are only read): each is checked alone.
        let regions = shape.regions(shape.flat.iter().map(|&(p, l)| s.region(p, l)).collect());
        Ok(py.detach(|| s.put_batch_from(&keys, regions, &spec, upsert)))
    }

    /// `put_batch` and `upsert_batch`: 0 when every item was stored (or,
    /// for a put, kept), else the first item's error code.
    fn values_batch(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Code> {
        let held: Vec<HeldBuffer> = values.iter().map(HeldBuffer::of).collect::<PyResult<_>>()?;
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        if keys.len() != held.len() {
            return Ok(codes::INVALID_PARAMS);
        }
        if let Err(code) = s.copying_put_allowed() {
            return Ok(code);
        }
        let items = keys.iter().zip(&held).map(|(k, v)| Some((k.as_str(), vec![v.bytes()]))).collect();
        let results = py.detach(|| s.put_batch(items, &spec, upsert));
        Ok(results.into_iter().find(|c| *c != codes::OK).unwrap_or(codes::OK))
    }
}
