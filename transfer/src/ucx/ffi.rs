//! The functions of `csrc/ucx_shim.c`, the narrow C face over UCX's UCP API
//! (linked against libucp and libucs by `build.rs`). Only the `worker`
//! module calls them, with the pointers they returned: its thread
//! (`worker/thread.rs`) every call on the worker, a handle only starting
//! the context, reading what it opened, and signalling it.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

/// Opaque: a UCP context and its one worker.
#[repr(C)]
pub(super) struct McUcx {
    _opaque: [u8; 0],
}

/// Opaque: one endpoint and the failure its error handler saw.
#[repr(C)]
pub(super) struct McEp {
    _opaque: [u8; 0],
}

/// One operation's completion, written by the shim's callback (`mc_op_t`:
/// two `int32_t`, which `AtomicI32` matches in size and alignment; the
/// shim writes `status`, then `done` with a release store).
#[repr(C)]
#[derive(Debug, Default)]
pub(super) struct McOp {
    done: AtomicI32,
    status: AtomicI32,
}

impl McOp {
    /// Whether the shim has set the final status (an acquire load, pairing
    /// with the callback's release store).
    pub(super) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire) != 0
    }

    /// The final status (meaningful once [`is_done`](Self::is_done)).
    pub(super) fn status(&self) -> i32 {
        self.status.load(Ordering::Relaxed)
    }

    /// The pointer the shim writes through (atomics allow writes through a
    /// shared reference).
    pub(super) fn as_ptr(&self) -> *mut McOp {
        std::ptr::from_ref(self).cast_mut()
    }
}

unsafe extern "C" {
    pub(super) fn mc_ucx_status_string(status: i32) -> *const c_char;
    pub(super) fn mc_ucx_version(major: *mut u32, minor: *mut u32, release: *mut u32);
    pub(super) fn mc_ucx_new(out: *mut *mut McUcx) -> i32;
    pub(super) fn mc_ucx_worker_destroy(ucx: *mut McUcx);
    pub(super) fn mc_ucx_free(ucx: *mut McUcx);
    pub(super) fn mc_ucx_address(ucx: *mut McUcx, buf: *mut *mut c_void, len: *mut usize) -> i32;
    pub(super) fn mc_ucx_free_buf(buf: *mut c_void);
    pub(super) fn mc_ucx_context_info(ucx: *mut McUcx, buf: *mut *mut c_char, len: *mut usize) -> i32;
    pub(super) fn mc_ucx_map(
        ucx: *mut McUcx,
        addr: *mut c_void,
        len: usize,
        remote_write: i32,
        memh: *mut *mut c_void,
    ) -> i32;
    pub(super) fn mc_ucx_unmap(ucx: *mut McUcx, memh: *mut c_void) -> i32;
    pub(super) fn mc_ucx_mem_type(memh: *mut c_void) -> i32;
    pub(super) fn mc_ucx_rkey_pack(ucx: *mut McUcx, memh: *mut c_void, buf: *mut *mut c_void, len: *mut usize) -> i32;
    pub(super) fn mc_ucx_ep_new(ucx: *mut McUcx, addr: *const c_void, peer_errors: i32, out: *mut *mut McEp) -> i32;
    pub(super) fn mc_ucx_ep_failed(ep: *const McEp) -> i32;
    pub(super) fn mc_ucx_ep_close(ucx: *mut McUcx, ep: *mut McEp) -> i32;
    pub(super) fn mc_ucx_ep_free(ep: *mut McEp);
    pub(super) fn mc_ucx_rkey_unpack(ep: *mut McEp, buf: *const c_void, rkey: *mut *mut c_void) -> i32;
    pub(super) fn mc_ucx_rkey_destroy(rkey: *mut c_void);
    pub(super) fn mc_ucx_get(
        ep: *mut McEp,
        local: *mut c_void,
        len: usize,
        remote: u64,
        rkey: *mut c_void,
        memh: *mut c_void,
        op: *mut McOp,
    ) -> i32;
    pub(super) fn mc_ucx_progress(ucx: *mut McUcx, rounds: u32) -> u32;
    pub(super) fn mc_ucx_wait(ucx: *mut McUcx, timeout_ms: i32) -> i32;
    pub(super) fn mc_ucx_signal(ucx: *mut McUcx) -> i32;
}

/// UCS's words for a status code.
pub(super) fn status_string(status: i32) -> String {
    // SAFETY: ucs_status_string returns a static NUL-terminated string for
    // every code, known or not.
    let text = unsafe { std::ffi::CStr::from_ptr(mc_ucx_status_string(status)) };
    text.to_string_lossy().into_owned()
}

/// The UCX library's version, as `major.minor.release`.
pub(super) fn version() -> String {
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: three valid out-pointers.
    unsafe { mc_ucx_version(&mut major, &mut minor, &mut release) };
    format!("{major}.{minor}.{release}")
}
