//! GPU memory, found and reached at run time without a build-time CUDA
//! dependency: whether an address is host memory or a GPU's
//! ([`address_kind`]), and copies between device memory and host buffers
//! ([`CudaDriver`], a [`DeviceCopy`]). The CUDA driver (`libcuda.so.1`) is
//! used through `dlopen` only if this process has loaded it already
//! (`RTLD_NOLOAD`: a process that never touched CUDA cannot hold a device
//! pointer, and is not made to load the driver).
//!
//! Every route here reads, writes and checksums object bytes with the CPU,
//! and the TCP lanes would hand a device pointer to the kernel; so callers
//! that take raw addresses (the Python package's registered buffers) stage
//! device memory through host memory with these copies, and no device
//! address reaches a route.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

/// What memory an address is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddressKind {
    /// Host memory (pageable, pinned, or CUDA managed memory, which the CPU
    /// can touch), or no CUDA driver is loaded.
    #[default]
    Host,
    /// Memory of a GPU: the CPU cannot touch it.
    Device,
}

/// Why a copy to or from device memory failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("the CUDA driver is not loaded in this process (no device memory can exist)")]
    NoDriver,
    #[error("{call} failed with CUresult {code} (memory freed, or another device's context?)")]
    Driver { call: &'static str, code: c_int },
}

/// Copies between device memory and host buffers. [`CudaDriver`] is the
/// real one; the trait lets the staging logic above it be tested on
/// machines without a GPU.
pub trait DeviceCopy {
    /// Copies `dst.len()` bytes of device memory at `src` into `dst`.
    fn to_host(&self, dst: &mut [u8], src: usize) -> Result<(), DeviceError>;
    /// Copies `src` into device memory at `dst`.
    fn to_device(&self, dst: usize, src: &[u8]) -> Result<(), DeviceError>;
}

/// `CU_POINTER_ATTRIBUTE_CONTEXT`.
const ATTRIBUTE_CONTEXT: c_int = 1;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
const ATTRIBUTE_MEMORY_TYPE: c_int = 2;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
const ATTRIBUTE_IS_MANAGED: c_int = 8;
/// `CU_MEMORYTYPE_DEVICE`.
const MEMORYTYPE_DEVICE: c_uint = 2;

/// `cuPointerGetAttribute(void *data, CUpointer_attribute, CUdeviceptr)`.
type GetAttribute = unsafe extern "C" fn(*mut c_void, c_int, c_ulonglong) -> c_int;
/// `cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t)`.
type CopyToHost = unsafe extern "C" fn(*mut c_void, c_ulonglong, usize) -> c_int;
/// `cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t)`.
type CopyToDevice = unsafe extern "C" fn(c_ulonglong, *const c_void, usize) -> c_int;
/// `cuCtxPushCurrent_v2(CUcontext)`.
type PushContext = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `cuCtxPopCurrent_v2(CUcontext *)`.
type PopContext = unsafe extern "C" fn(*mut *mut c_void) -> c_int;

/// The driver entry points used here, found in a loaded `libcuda.so.1`.
#[derive(Clone, Copy)]
struct Entries {
    get_attribute: GetAttribute,
    to_host: CopyToHost,
    to_device: CopyToDevice,
    push: PushContext,
    pop: PopContext,
}

/// The driver's entry points, if the driver is loaded. Found once; until
/// then looked for on every call (a process may load CUDA lazily, after its
/// first question here).
fn entries() -> Option<Entries> {
    static FOUND: OnceLock<Entries> = OnceLock::new();
    if let Some(found) = FOUND.get() {
        return Some(*found);
    }
    // SAFETY: dlopen with RTLD_NOLOAD never loads a library; the name is a
    // NUL-terminated literal. The handle stays open for the process's life
    // (the driver stays loaded).
    let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    let symbol = |name: &std::ffi::CStr| {
        // SAFETY: a live handle and a NUL-terminated name.
        let s = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!s.is_null()).then_some(s)
    };
    let (get_attribute, to_host, to_device, push, pop) = (
        symbol(c"cuPointerGetAttribute")?,
        symbol(c"cuMemcpyDtoH_v2")?,
        symbol(c"cuMemcpyHtoD_v2")?,
        symbol(c"cuCtxPushCurrent_v2")?,
        symbol(c"cuCtxPopCurrent_v2")?,
    );
    // SAFETY: each symbol is the driver's function of that name, whose C
    // signature (cuda.h, stable since CUDA 4.0) is the type it becomes.
    let found = unsafe {
        Entries {
            get_attribute: std::mem::transmute::<*mut c_void, GetAttribute>(get_attribute),
            to_host: std::mem::transmute::<*mut c_void, CopyToHost>(to_host),
            to_device: std::mem::transmute::<*mut c_void, CopyToDevice>(to_device),
            push: std::mem::transmute::<*mut c_void, PushContext>(push),
            pop: std::mem::transmute::<*mut c_void, PopContext>(pop),
        }
    };
    Some(*FOUND.get_or_init(|| found))
}

/// What memory `ptr` is. Host unless a loaded CUDA driver says device (an
/// address CUDA does not know, or a driver error, is host).
pub fn address_kind(ptr: usize) -> AddressKind {
    let Some(cuda) = entries() else { return AddressKind::Host };
    let mut memory_type: c_uint = 0;
    // SAFETY: the out-pointer is a valid c_uint, the size the attribute
    // writes; the driver validates the address itself.
    let status =
        unsafe { (cuda.get_attribute)((&raw mut memory_type).cast(), ATTRIBUTE_MEMORY_TYPE, ptr as c_ulonglong) };
    if status != 0 || memory_type != MEMORYTYPE_DEVICE {
        return AddressKind::Host;
    }
    let mut managed: c_uint = 0;
    // SAFETY: as above (the attribute writes an unsigned int).
    let status = unsafe { (cuda.get_attribute)((&raw mut managed).cast(), ATTRIBUTE_IS_MANAGED, ptr as c_ulonglong) };
    if status == 0 && managed != 0 { AddressKind::Host } else { AddressKind::Device }
}

/// The CUDA driver's synchronous copies. Each runs in the context that
/// owns the device address (pushed for the copy and popped after it), so
/// it works on any thread, whatever context that thread has current. A
/// synchronous copy waits for work queued on the legacy default stream; a
/// caller that wrote or reads the buffer on another stream synchronises
/// that stream first (the contract of `register_buffer`: the memory is
/// neither written nor read by others during the call).
#[derive(Clone, Copy, Debug, Default)]
pub struct CudaDriver;

impl CudaDriver {
    /// Runs `copy` with the context owning `ptr` current. Memory that names
    /// no context (virtual memory management: `cuMemCreate` and
    /// `cuMemMap`, as PyTorch's expandable segments use) is copied with the
    /// calling thread's current context, which CUDA then requires.
    fn in_context_of(
        cuda: &Entries,
        ptr: usize,
        call: &'static str,
        copy: impl FnOnce() -> c_int,
    ) -> Result<(), DeviceError> {
        let check =
            |call: &'static str, code: c_int| if code == 0 { Ok(()) } else { Err(DeviceError::Driver { call, code }) };
        let mut context: *mut c_void = std::ptr::null_mut();
        // SAFETY: the attribute writes a CUcontext, a pointer: `context` is one.
        let status = unsafe { (cuda.get_attribute)((&raw mut context).cast(), ATTRIBUTE_CONTEXT, ptr as c_ulonglong) };
        if status != 0 || context.is_null() {
            return check(call, copy());
        }
        // SAFETY: a context the driver just named.
        check("cuCtxPushCurrent", unsafe { (cuda.push)(context) })?;
        let copied = check(call, copy());
        let mut popped: *mut c_void = std::ptr::null_mut();
        // SAFETY: pops what was pushed above; the out-pointer is valid.
        let status = unsafe { (cuda.pop)(&raw mut popped) };
        copied.and(check("cuCtxPopCurrent", status))
    }
}

impl DeviceCopy for CudaDriver {
    fn to_host(&self, dst: &mut [u8], src: usize) -> Result<(), DeviceError> {
        let cuda = entries().ok_or(DeviceError::NoDriver)?;
        if dst.is_empty() {
            return Ok(());
        }
        Self::in_context_of(&cuda, src, "cuMemcpyDtoH", || {
            // SAFETY: `dst` is valid for writes of its length; the driver
            // checks the device range.
            unsafe { (cuda.to_host)(dst.as_mut_ptr().cast(), src as c_ulonglong, dst.len()) }
        })
    }

    fn to_device(&self, dst: usize, src: &[u8]) -> Result<(), DeviceError> {
        let cuda = entries().ok_or(DeviceError::NoDriver)?;
        if src.is_empty() {
            return Ok(());
        }
        Self::in_context_of(&cuda, dst, "cuMemcpyHtoD", || {
            // SAFETY: `src` is valid for reads of its length; the driver
            // checks the device range.
            unsafe { (cuda.to_device)(dst as c_ulonglong, src.as_ptr().cast(), src.len()) }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_is_host() {
        let on_heap = vec![0u8; 1 << 20];
        let on_stack = 0u64;
        assert_eq!(address_kind(on_heap.as_ptr() as usize), AddressKind::Host);
        assert_eq!(address_kind(&raw const on_stack as usize), AddressKind::Host);
    }

    #[test]
    fn without_a_loaded_driver_copies_fail_cleanly() {
        // The test process never loads CUDA (RTLD_NOLOAD finds nothing).
        let mut buf = [0u8; 8];
        assert_eq!(CudaDriver.to_host(&mut buf, 0x1000), Err(DeviceError::NoDriver));
        assert_eq!(CudaDriver.to_device(0x1000, &buf), Err(DeviceError::NoDriver));
        assert_eq!(buf, [0; 8], "nothing written");
    }
}
