//! Whether an address is host memory or a GPU's, found at run time without
//! a build-time CUDA dependency: the CUDA driver (`libcuda.so.1`) is asked
//! through `dlopen` only if this process has loaded it already
//! (`RTLD_NOLOAD`: a process that never touched CUDA cannot hold a device
//! pointer, and is not made to load the driver). Callers that take raw
//! addresses (the Python package's `register_buffer`) refuse device memory
//! this way: every route here reads and checksums object bytes with the
//! CPU, and the TCP lanes would hand a device pointer to the kernel.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

/// What memory an address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressKind {
    /// Host memory (pageable, pinned, or CUDA managed memory, which the CPU
    /// can touch), or no CUDA driver is loaded.
    Host,
    /// Memory of a GPU: the CPU cannot touch it.
    Device,
}

/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
const ATTRIBUTE_MEMORY_TYPE: c_int = 2;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
const ATTRIBUTE_IS_MANAGED: c_int = 8;
/// `CU_MEMORYTYPE_DEVICE`.
const MEMORYTYPE_DEVICE: c_uint = 2;

/// `cuPointerGetAttribute(void *data, CUpointer_attribute, CUdeviceptr)`.
type GetAttribute = unsafe extern "C" fn(*mut c_void, c_int, c_ulonglong) -> c_int;

/// The driver's `cuPointerGetAttribute`, if the driver is loaded. Found
/// once; until then looked for on every call (a process may load CUDA
/// lazily, after its first question here).
fn get_attribute() -> Option<GetAttribute> {
    static FOUND: OnceLock<usize> = OnceLock::new();
    let symbol = match FOUND.get() {
        Some(symbol) => *symbol,
        None => {
            // SAFETY: dlopen with RTLD_NOLOAD never loads a library; the
            // name is a NUL-terminated literal.
            let handle = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
            if handle.is_null() {
                return None;
            }
            // SAFETY: a live handle and a NUL-terminated name. The handle
            // stays open for the process's life (the driver stays loaded).
            let symbol = unsafe { libc::dlsym(handle, c"cuPointerGetAttribute".as_ptr()) };
            if symbol.is_null() {
                return None;
            }
            *FOUND.get_or_init(|| symbol as usize)
        }
    };
    // SAFETY: the symbol is the driver's cuPointerGetAttribute, whose C
    // signature is GetAttribute.
    Some(unsafe { std::mem::transmute::<usize, GetAttribute>(symbol) })
}

/// What memory `ptr` is. Host unless a loaded CUDA driver says device (an
/// address CUDA does not know, or a driver error, is host).
pub fn address_kind(ptr: usize) -> AddressKind {
    let Some(get) = get_attribute() else { return AddressKind::Host };
    let mut memory_type: c_uint = 0;
    // SAFETY: the out-pointer is a valid c_uint, the size the attribute
    // writes; the driver validates the address itself.
    let status = unsafe { get((&raw mut memory_type).cast(), ATTRIBUTE_MEMORY_TYPE, ptr as c_ulonglong) };
    if status != 0 || memory_type != MEMORYTYPE_DEVICE {
        return AddressKind::Host;
    }
    let mut managed: c_uint = 0;
    // SAFETY: as above (the attribute writes an unsigned int).
    let status = unsafe { get((&raw mut managed).cast(), ATTRIBUTE_IS_MANAGED, ptr as c_ulonglong) };
    if status == 0 && managed != 0 { AddressKind::Host } else { AddressKind::Device }
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
}
