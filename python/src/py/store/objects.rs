//! `MooncakeDistributedStore`'s single-object calls: `put`, `upsert` and
//! their `_parts` and `_from` forms, `put_from_with_metadata`, `get`,
//! `get_buffer`, `get_into`, `get_size`, `remove`.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use super::MooncakeDistributedStore;
use crate::codes::{self, Code};
use crate::py::args::{HeldBuffer, unsigned};
use crate::py::config::{ReplicateConfig, spec_of};
use crate::py::handle::BufferHandle;

#[pymethods]
impl MooncakeDistributedStore {
    #[pyo3(signature = (key, value, config=None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_value(py, key, value, config, false)
    }

    #[pyo3(signature = (key, value, config=None))]
    fn upsert(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_value(py, key, value, config, true)
    }

    /// One object from several bytes-like parts, written from where they lie.
    #[pyo3(signature = (key, *parts, config=None))]
    fn put_parts(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_parts_of(py, key, parts, config, false)
    }

    /// `put_parts` that replaces an existing object (as `upsert`).
    #[pyo3(signature = (key, *parts, config=None))]
    fn upsert_parts(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_parts_of(py, key, parts, config, true)
    }

    #[pyo3(signature = (key, buffer_ptr, size, config=None))]
    fn put_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer_ptr: i64,
        size: i64,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_registered(py, key, buffer_ptr, size, config, false)
    }

    #[pyo3(signature = (key, buffer_ptr, size, config=None))]
    fn upsert_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer_ptr: i64,
        size: i64,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_registered(py, key, buffer_ptr, size, config, true)
    }

    /// The object's bytes, or `b""` when it is missing (or on any error).
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        let s = session!(self, PyBytes::new(py, b""));
        let got = py.detach(|| s.get_staged(key));
        Ok(PyBytes::new(py, got.as_ref().map_or(&[][..], |b| b.as_ref())))
    }

    /// The object in a `BufferHandle` (no copy), or `None`.
    fn get_buffer(&self, py: Python<'_>, key: &str) -> PyResult<Option<BufferHandle>> {
        let s = session!(self, None);
        Ok(py.detach(|| s.get_staged(key)).ok().map(BufferHandle::new))
    }

    /// Reads the object into registered memory; its size, or a negative code.
    fn get_into(&self, py: Python<'_>, key: &str, buffer_ptr: i64, size: i64) -> PyResult<Code> {
        let (ptr, len) = (unsigned(buffer_ptr, "buffer_ptr")?, unsigned(size, "size")?);
        let s = session!(self, codes::INVALID_PARAMS);
        let Some(region) = s.region(ptr, len) else { return Ok(codes::INVALID_PARAMS) };
        Ok(py.detach(|| s.get_into(key, region)))
    }

    fn get_size(&self, py: Python<'_>, key: &str) -> PyResult<Code> {
        let s = session!(self, codes::INVALID_PARAMS);
        Ok(py.detach(|| s.get_size(key)))
    }

    #[pyo3(signature = (key, force=false))]
    fn remove(&self, py: Python<'_>, key: &str, force: bool) -> PyResult<Code> {
        let s = session!(self, codes::INVALID_PARAMS);
        Ok(py.detach(|| s.remove(key, force)))
    }

    /// `put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size,
    /// metadata_size, config)`: one object, the metadata bytes followed by
    /// the data bytes, both from registered memory. `size == 0` stores
    /// nothing (0), as upstream.
    #[pyo3(signature = (key, buffer_ptr, metadata_buffer_ptr, size, metadata_size, config=None))]
    #[allow(clippy::too_many_arguments)]
    fn put_from_with_metadata(
        &self,
        py: Python<'_>,
        key: String,
        buffer_ptr: i64,
        metadata_buffer_ptr: i64,
        size: i64,
        metadata_size: i64,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        let (ptr, len) = (unsigned(buffer_ptr, "buffer_ptr")?, unsigned(size, "size")?);
        let (meta_ptr, meta_len) =
            (unsigned(metadata_buffer_ptr, "metadata_buffer_ptr")?, unsigned(metadata_size, "metadata_size")?);
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        if len == 0 {
            return Ok(codes::OK);
        }
        let parts = match meta_len {
            0 => s.region(ptr, len).map(|d| vec![d]),
            _ => s.region(meta_ptr, meta_len).zip(s.region(ptr, len)).map(|(m, d)| vec![m, d]),
        };
        let Some(parts) = parts else { return Ok(codes::INVALID_PARAMS) };
        let keys = [key];
        Ok(py
            .detach(|| s.put_batch_from(&keys, vec![Some(parts)], &spec, false))
            .first()
            .copied()
            .unwrap_or(codes::INTERNAL_ERROR))
    }
}

impl MooncakeDistributedStore {
    fn put_parts_of(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Code> {
        let held: Vec<HeldBuffer> = parts.iter().map(|p| HeldBuffer::of(&p)).collect::<PyResult<_>>()?;
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        let slices: Vec<&[u8]> = held.iter().map(HeldBuffer::bytes).collect();
        if slices.iter().all(|p| p.is_empty()) {
            return Ok(codes::OK); // Mooncake: nothing to store, nothing stored.
        }
        if let Err(code) = s.copying_put_allowed() {
            return Ok(code);
        }
        Ok(py.detach(|| s.put(key, &slices, &spec, upsert)))
    }

    fn put_value(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Code> {
        let held = HeldBuffer::of(value)?;
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        if let Err(code) = s.copying_put_allowed() {
            return Ok(code);
        }
        let data = held.bytes();
        Ok(py.detach(|| s.put(key, &[data], &spec, upsert)))
    }

    fn put_registered(
        &self,
        py: Python<'_>,
        key: &str,
        buffer_ptr: i64,
        size: i64,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Code> {
        let (ptr, len) = (unsigned(buffer_ptr, "buffer_ptr")?, unsigned(size, "size")?);
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        let Some(region) = s.region(ptr, len) else { return Ok(codes::INVALID_PARAMS) };
        Ok(py.detach(|| s.put_from(key, region, &spec, upsert)))
    }
}
