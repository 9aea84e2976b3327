//! `BufferHandle`: an object read into memory of the store's own (a piece
//! of the local buffer, else the heap), exposed through the buffer protocol
//! (`memoryview(handle)`, `numpy.frombuffer(handle, ...)`) without a copy.
//! The memory lives as long as the handle and every view of it.

use std::ffi::{CStr, c_int};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::pool::Staging;

/// Mooncake's item format of a handle's buffer (signed bytes).
const FORMAT: &CStr = c"b";

#[pyclass(module = "mooncake_rs.store", frozen)]
pub struct BufferHandle {
    /// Owns the memory; never touched after construction (Python may write
    /// through a view), so the data is reached only through `ptr`.
    _memory: Staging,
    ptr: usize,
    len: usize,
}

impl BufferHandle {
    pub fn new(mut memory: Staging) -> BufferHandle {
        if let Staging::Pooled(lease) = &memory {
            lease.expose();
        }
        let bytes = memory.as_mut();
        let (ptr, len) = (bytes.as_mut_ptr() as usize, bytes.len());
        BufferHandle { _memory: memory, ptr, len }
    }
}

#[pymethods]
impl BufferHandle {
    /// Address of the object's first byte.
    fn ptr(&self) -> usize {
        self.ptr
    }

    /// Size of the object in bytes.
    fn size(&self) -> usize {
        self.len
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __repr__(&self) -> String {
        format!("<BufferHandle size={} ptr=0x{:x}>", self.len, self.ptr)
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no view to fill"));
        }
        let this = slf.get();
        let len = ffi::Py_ssize_t::try_from(this.len).map_err(|_| PyBufferError::new_err("object too large"))?;
        // SAFETY: `view` is the interpreter's; the memory stays valid while
        // the view holds a reference to this handle (FillInfo takes one).
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), this.ptr as *mut _, len, 0, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
            // SAFETY: the view was just filled; the format is a static string.
            unsafe { (*view).format = FORMAT.as_ptr() as *mut _ };
        }
        Ok(())
    }
}
