//! Argument conversions with Mooncake's behavior: a negative size or
//! address is a `TypeError` (as pybind11's unsigned conversion raises), a
//! value is any object exporting a contiguous buffer (bytes, bytearray,
//! memoryview, numpy arrays of any dtype), read in place.

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;

/// A non-negative integer argument (an address or a size) as `usize`.
pub fn unsigned(value: i64, name: &str) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| PyTypeError::new_err(format!("{name} must be a non-negative integer, got {value}")))
}

/// Every element of a list argument, as [`unsigned`].
pub fn unsigned_all(values: &[i64], name: &str) -> PyResult<Vec<usize>> {
    values.iter().map(|v| unsigned(*v, name)).collect()
}

/// A contiguous buffer of a Python object, held (so neither freed nor
/// resized) until dropped, which needs the GIL (the bindings drop it after
/// re-attaching).
pub struct HeldBuffer {
    view: ffi::Py_buffer,
}

impl HeldBuffer {
    /// The bytes of `obj`'s buffer (`PyBUF_SIMPLE`: contiguous, any item
    /// type); `TypeError` if it exports none, `BufferError` if not contiguous.
    pub fn of(obj: &Bound<'_, PyAny>) -> PyResult<HeldBuffer> {
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        // SAFETY: `obj` is a live object (the GIL is held); on success the
        // view is filled and owned by us until PyBuffer_Release.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_SIMPLE) };
        if rc != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        // SAFETY: PyObject_GetBuffer succeeded, so the view is initialized.
        Ok(HeldBuffer { view: unsafe { view.assume_init() } })
    }

    /// The bytes, valid while `self` lives.
    pub fn bytes(&self) -> &[u8] {
        match usize::try_from(self.view.len) {
            // SAFETY: the exporter guarantees `len` readable bytes at `buf`
            // until the view is released, which happens only on drop.
            Ok(len) if len > 0 && !self.view.buf.is_null() => unsafe {
                std::slice::from_raw_parts(self.view.buf as *const u8, len)
            },
            _ => &[],
        }
    }
}

impl Drop for HeldBuffer {
    fn drop(&mut self) {
        // Dropped by the bindings with the GIL held (after `detach` returns).
        Python::attach(|_| {
            // SAFETY: the view came from a successful PyObject_GetBuffer and
            // is released exactly once.
            unsafe { ffi::PyBuffer_Release(&mut self.view) }
        });
    }
}
