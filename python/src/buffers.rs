//! Registered memory. Python hands the store raw addresses (`buffer_ptr`,
//! `size`); the store touches only bytes inside ranges the caller declared
//! with `register_buffer` (or its own local buffer pool), so a wrong
//! address gets `INVALID_PARAMS` instead of a crash or a write into
//! unrelated memory. Within one call, destination ranges that overlap are
//! refused too: each becomes its own `&mut [u8]`.
//!
//! A registered buffer may be GPU memory. The routes read, write and
//! checksum bytes with the CPU, so a region's bytes are reached only
//! through [`Region::readable`] and [`Region::writable`]: host memory in
//! place, device memory staged through a host buffer with the CUDA
//! driver's copies ([`DeviceCopy`]). No device address reaches a route.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::{PoisonError, RwLock};

use mooncake_client::ClientError;
pub use mooncake_transfer::AddressKind as Memory;
use mooncake_transfer::{CudaDriver, DeviceCopy, DeviceError};

use crate::codes::{self, Code};

/// Most buffers registered at once. vLLM and SGLang register a handful of
/// large pools; a caller registering per call would otherwise grow the map
/// without end (each entry is 24 bytes, looked up under a read lock).
pub const REGISTERED_BUFFERS_MAX: usize = 65_536;

/// Why `register_buffer` refused (all are Mooncake's `INVALID_PARAMS`).
#[derive(Debug, PartialEq, Eq)]
pub enum RegisterError {
    /// Address 0 or size 0.
    Empty,
    /// `ptr + size` wraps the address space.
    Wraps,
    /// Overlaps a buffer registered before (Mooncake refuses a second
    /// registration of the same memory, too).
    Overlaps { start: usize, len: usize },
    /// [`REGISTERED_BUFFERS_MAX`] buffers are registered.
    TooMany,
}

/// The buffers a store may read from and write into.
#[derive(Debug, Default)]
pub struct BufferRegistry {
    /// start address -> (length, what memory it is); disjoint.
    ranges: RwLock<BTreeMap<usize, (usize, Memory)>>,
}

impl BufferRegistry {
    /// Declares `[ptr, ptr + len)`, host or device `memory`, usable for
    /// zero-copy calls.
    pub fn register(&self, ptr: usize, len: usize, memory: Memory) -> Result<(), RegisterError> {
        if ptr == 0 || len == 0 {
            return Err(RegisterError::Empty);
        }
        let end = ptr.checked_add(len).ok_or(RegisterError::Wraps)?;
        let mut ranges = self.ranges.write().unwrap_or_else(PoisonError::into_inner);
        if ranges.len() >= REGISTERED_BUFFERS_MAX {
            return Err(RegisterError::TooMany);
        }
        let before = ranges.range(..end).next_back().map(|(s, (l, _))| (*s, *l));
        if let Some((start, l)) = before.filter(|(s, l)| s + l > ptr) {
            return Err(RegisterError::Overlaps { start, len: l });
        }
        ranges.insert(ptr, (len, memory));
        Ok(())
    }

    /// Forgets the buffer registered at exactly `ptr`; false if none was.
    pub fn unregister(&self, ptr: usize) -> bool {
        self.ranges.write().unwrap_or_else(PoisonError::into_inner).remove(&ptr).is_some()
    }

    /// What memory `[ptr, ptr + len)` is, when it lies inside one
    /// registered buffer; `None` when it does not.
    pub fn memory_of(&self, ptr: usize, len: usize) -> Option<Memory> {
        let end = ptr.checked_add(len)?;
        let ranges = self.ranges.read().unwrap_or_else(PoisonError::into_inner);
        let (start, (l, memory)) = ranges.range(..=ptr).next_back()?;
        (end <= start + l).then_some(*memory)
    }
}

/// A range of the caller's memory that a call may use: checked to lie in
/// registered memory (or the pool) and, within its call, to overlap no
/// other range handed out as mutable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    ptr: usize,
    len: usize,
    memory: Memory,
}

impl Region {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, for reading: in place for host memory, a host copy of
    /// device memory.
    ///
    /// # Safety
    ///
    /// The memory must stay valid and unwritten by others while the result
    /// lives: the contract `register_buffer` states (Mooncake's too).
    pub unsafe fn readable<'a>(self, device: &impl DeviceCopy) -> Result<Readable<'a>, DeviceError> {
        match self.memory {
            // SAFETY: registered host memory is valid for `len` bytes (the
            // caller's contract); a zero-length slice uses a dangling,
            // aligned pointer.
            Memory::Host => Ok(Readable::InPlace(unsafe { std::slice::from_raw_parts(self.base(), self.len) })),
            Memory::Device => {
                let mut staged = vec![0u8; self.len];
                device.to_host(&mut staged, self.ptr)?;
                Ok(Readable::Staged(staged))
            }
        }
    }

    /// Where a read into the region lands: the region itself for host
    /// memory; for device memory a host buffer that [`Writable::finish`]
    /// copies to the device.
    ///
    /// # Safety
    ///
    /// As [`readable`](Self::readable), and no other reference to these
    /// bytes may be used while the result lives ([`carve`] ensures it
    /// within one call; across threads it is the caller's contract).
    pub unsafe fn writable<'a>(self) -> Writable<'a> {
        let buf = match self.memory {
            // SAFETY: as in `readable`; exclusivity per the contract above.
            Memory::Host => WritableBuf::InPlace(unsafe { std::slice::from_raw_parts_mut(self.base(), self.len) }),
            Memory::Device => WritableBuf::Staged(vec![0u8; self.len]),
        };
        Writable { ptr: self.ptr, buf }
    }

    /// As [`writable`](Self::writable), with a device region's host buffer
    /// starting as a copy of the device bytes, so `finish` may copy it back
    /// whole without changing bytes the read left alone (for reads that do
    /// not say how many bytes each range received).
    ///
    /// # Safety
    ///
    /// As [`writable`](Self::writable).
    pub unsafe fn writable_prefilled<'a>(self, device: &impl DeviceCopy) -> Result<Writable<'a>, DeviceError> {
        // SAFETY: the caller's contract, passed on.
        let mut target = unsafe { self.writable() };
        if let WritableBuf::Staged(v) = &mut target.buf {
            device.to_host(v, self.ptr)?;
        }
        Ok(target)
    }

    fn base(self) -> *mut u8 {
        match self.len {
            0 => NonNull::dangling().as_ptr(),
            _ => self.ptr as *mut u8,
        }
    }
}

/// A region's bytes to read ([`Region::readable`]).
#[derive(Debug)]
pub enum Readable<'a> {
    /// Host memory, read where it is.
    InPlace(&'a [u8]),
    /// Device memory, copied to the host.
    Staged(Vec<u8>),
}

impl Deref for Readable<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Readable::InPlace(s) => s,
            Readable::Staged(v) => v,
        }
    }
}

/// Where a read into a region lands ([`Region::writable`]).
#[derive(Debug)]
pub struct Writable<'a> {
    ptr: usize,
    buf: WritableBuf<'a>,
}

#[derive(Debug)]
enum WritableBuf<'a> {
    InPlace(&'a mut [u8]),
    Staged(Vec<u8>),
}

impl Writable<'_> {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match &self.buf {
            WritableBuf::InPlace(s) => s.len(),
            WritableBuf::Staged(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The host bytes a read writes into.
    pub fn buf(&mut self) -> &mut [u8] {
        match &mut self.buf {
            WritableBuf::InPlace(s) => s,
            WritableBuf::Staged(v) => v,
        }
    }

    /// After a read that wrote the first `written` bytes: copies them to
    /// the device (nothing to do for host memory). Call it only for a read
    /// that succeeded: a failed one leaves the caller's memory untouched.
    pub fn finish(self, written: usize, device: &impl DeviceCopy) -> Result<(), DeviceError> {
        match &self.buf {
            WritableBuf::InPlace(_) => Ok(()),
            WritableBuf::Staged(v) => device.to_device(self.ptr, &v[..written.min(v.len())]),
        }
    }
}

/// The code of a call whose device memory could not be copied (memory
/// freed, or a context gone): `INVALID_PARAMS`, with a WARN naming the
/// driver's error.
pub fn device_copy_failed(e: &DeviceError) -> Code {
    tracing::warn!(error = %e, "a registered GPU buffer could not be copied; the call changed nothing there");
    codes::INVALID_PARAMS
}

/// Copies each target's `written` bytes to the device after a read that
/// succeeded; the first failure's code.
pub fn finish_all<'a>(
    targets: impl IntoIterator<Item = Writable<'a>>,
    written: impl IntoIterator<Item = usize>,
    device: &impl DeviceCopy,
) -> Result<(), Code> {
    let mut result = Ok(());
    for (target, n) in targets.into_iter().zip(written) {
        if let Err(e) = target.finish(n, device) {
            result = result.and(Err(device_copy_failed(&e)));
        }
    }
    result
}

/// The code of a read of `n` bytes into `targets`: the client's error, or
/// `n` once the bytes `written(n)` says each target received are where the
/// caller wants them (copied to device memory, for device targets).
pub fn read_into<'a, W: IntoIterator<Item = usize>>(
    read: &Result<usize, ClientError>,
    targets: impl IntoIterator<Item = Writable<'a>>,
    written: impl FnOnce(usize) -> W,
) -> Code {
    match read {
        Ok(n) => finish_all(targets, written(*n), &CudaDriver).map_or_else(|code| code, |()| *n as Code),
        Err(e) => codes::of_client(e),
    }
}

/// How many bytes of a read of `total` bytes scattered over parts of
/// `lens`, in order, each part received.
pub fn scattered(total: usize, lens: impl IntoIterator<Item = usize>) -> Vec<usize> {
    let mut left = total;
    lens.into_iter()
        .map(|len| {
            let got = len.min(left);
            left -= got;
            got
        })
        .collect()
}

/// Checks the ranges one call reads into: each must pass `usable` (inside
/// registered memory, of the memory it names) and overlap no other range
/// of the call. One result per request, in order: `None` for a refused one.
pub fn carve(requests: &[(usize, usize)], usable: impl Fn(usize, usize) -> Option<Memory>) -> Vec<Option<Region>> {
    let mut out: Vec<Option<Region>> =
        requests.iter().map(|&(ptr, len)| usable(ptr, len).map(|memory| Region { ptr, len, memory })).collect();
    // Sweep the accepted, non-empty ranges by start: a range that begins
    // before the furthest end seen so far overlaps an earlier one.
    let mut order: Vec<usize> = (0..out.len()).filter(|i| out[*i].is_some_and(|r| r.len > 0)).collect();
    order.sort_by_key(|i| requests[*i].0);
    let mut furthest_end = 0usize;
    let mut owner: Option<usize> = None;
    for i in order {
        let (ptr, len) = requests[i];
        if ptr < furthest_end {
            out[i] = None;
            if let Some(o) = owner {
                out[o] = None;
            }
        }
        if ptr + len > furthest_end {
            furthest_end = ptr + len;
            owner = Some(i);
        }
    }
    out
}

/// Checks one range a call reads from or writes into.
pub fn check(ptr: usize, len: usize, usable: impl Fn(usize, usize) -> Option<Memory>) -> Option<Region> {
    usable(ptr, len).map(|memory| Region { ptr, len, memory })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const HOST: Memory = Memory::Host;

    #[test]
    fn registration_is_exact_and_disjoint() {
        let r = BufferRegistry::default();
        assert_eq!(r.register(0, 10, HOST), Err(RegisterError::Empty));
        assert_eq!(r.register(1000, 0, HOST), Err(RegisterError::Empty));
        assert_eq!(r.register(usize::MAX - 5, 10, HOST), Err(RegisterError::Wraps));
        r.register(1000, 100, HOST).expect("register");
        assert_eq!(r.register(1000, 100, HOST), Err(RegisterError::Overlaps { start: 1000, len: 100 }));
        assert_eq!(r.register(1050, 10, Memory::Device), Err(RegisterError::Overlaps { start: 1000, len: 100 }));
        assert_eq!(r.register(900, 101, HOST), Err(RegisterError::Overlaps { start: 1000, len: 100 }));
        r.register(900, 100, HOST).expect("touching is fine");
        r.register(1100, 1, Memory::Device).expect("touching is fine");
        assert_eq!(r.memory_of(1000, 100), Some(HOST));
        assert_eq!(r.memory_of(1099, 1), Some(HOST));
        assert_eq!(r.memory_of(950, 0), Some(HOST));
        assert_eq!(r.memory_of(1100, 1), Some(Memory::Device), "each buffer keeps what memory it is");
        assert_eq!(r.memory_of(1000, 101), None, "spans two buffers: refused");
        assert_eq!(r.memory_of(1101, 1), None);
        assert_eq!(r.memory_of(usize::MAX, 2), None);
        assert!(!r.unregister(1001) && r.unregister(1000) && !r.unregister(1000));
        assert_eq!(r.memory_of(1000, 1), None);
    }

    #[test]
    fn overlapping_destinations_of_one_call_are_all_refused() {
        let all = |_: usize, _: usize| Some(HOST);
        let got = carve(&[(100, 10), (200, 10), (105, 10), (300, 0), (300, 5), (400, 1)], all);
        assert_eq!(got.iter().map(Option::is_some).collect::<Vec<_>>(), [false, true, false, true, true, true]);
        let got = carve(&[(100, 50), (110, 5), (120, 5)], all);
        assert!(got.iter().all(Option::is_none), "every range inside the first overlaps it");
        let got = carve(&[(100, 10), (50, 10)], |p, _| (p >= 100).then_some(HOST));
        assert_eq!(got, vec![Some(Region { ptr: 100, len: 10, memory: HOST }), None]);
    }

    /// "Device memory" that is host memory the test owns, copied with
    /// plain copies and counted; `fail` makes every copy fail.
    #[derive(Default)]
    struct FakeDevice {
        copies: Cell<usize>,
        fail: bool,
    }

    impl DeviceCopy for FakeDevice {
        fn to_host(&self, dst: &mut [u8], src: usize) -> Result<(), DeviceError> {
            self.copies.set(self.copies.get() + 1);
            if self.fail {
                return Err(DeviceError::Driver { call: "cuMemcpyDtoH", code: 1 });
            }
            // SAFETY: `src` is the address of a live test buffer of at least `dst.len()` bytes.
            dst.copy_from_slice(unsafe { std::slice::from_raw_parts(src as *const u8, dst.len()) });
            Ok(())
        }
        fn to_device(&self, dst: usize, src: &[u8]) -> Result<(), DeviceError> {
            self.copies.set(self.copies.get() + 1);
            if self.fail {
                return Err(DeviceError::Driver { call: "cuMemcpyHtoD", code: 1 });
            }
            // SAFETY: `dst` is the address of a live test buffer of at least `src.len()` bytes.
            unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, src.len()) }.copy_from_slice(src);
            Ok(())
        }
    }

    fn region_of(buf: &mut [u8], memory: Memory) -> Region {
        Region { ptr: buf.as_mut_ptr() as usize, len: buf.len(), memory }
    }

    #[test]
    fn host_regions_are_used_in_place_and_never_copied() {
        let device = FakeDevice::default();
        let mut mem = vec![7u8; 16];
        let region = region_of(&mut mem, HOST);
        // SAFETY: `mem` outlives the views and nothing else touches it.
        let view = unsafe { region.readable(&device) }.expect("host");
        assert!(matches!(view, Readable::InPlace(_)) && view[..] == [7u8; 16]);
        drop(view);
        // SAFETY: `mem` outlives the target and nothing else touches it.
        let mut target = unsafe { region.writable_prefilled(&device) }.expect("host");
        target.buf()[..4].copy_from_slice(&[1, 2, 3, 4]);
        target.finish(4, &device).expect("nothing to copy");
        assert_eq!(&mem[..5], &[1, 2, 3, 4, 7]);
        assert_eq!(device.copies.get(), 0);
    }

    #[test]
    fn device_regions_are_staged_and_only_the_bytes_read_go_back() {
        let device = FakeDevice::default();
        let mut mem = vec![7u8; 16];
        let region = region_of(&mut mem, Memory::Device);
        // SAFETY: as above.
        let view = unsafe { region.readable(&device) }.expect("staged");
        assert!(matches!(view, Readable::Staged(_)) && view[..] == [7u8; 16], "a put reads a host copy");
        drop(view);
        // A read of 5 bytes: those go to the device, the rest stays as it was.
        // SAFETY: `mem` outlives the target and nothing else touches it.
        let mut target = unsafe { region.writable() };
        assert_eq!(target.buf().len(), 16);
        target.buf()[..5].copy_from_slice(&[1, 2, 3, 4, 5]);
        target.finish(5, &device).expect("copied");
        assert_eq!(&mem[..6], &[1, 2, 3, 4, 5, 7]);
        // Prefilled: copied back whole, bytes the read left alone unchanged.
        // SAFETY: `mem` outlives the target and nothing else touches it.
        let mut target = unsafe { region.writable_prefilled(&device) }.expect("staged");
        target.buf()[10] = 9;
        target.finish(16, &device).expect("copied");
        assert_eq!(mem, [1, 2, 3, 4, 5, 7, 7, 7, 7, 7, 9, 7, 7, 7, 7, 7]);
        // A failed read calls no finish: the device memory is untouched.
        // SAFETY: `mem` outlives the target and nothing else touches it.
        let mut target = unsafe { region.writable() };
        target.buf().fill(0);
        drop(target);
        assert_eq!(mem[0], 1);
    }

    #[test]
    fn a_failed_device_copy_is_an_error_not_stale_bytes() {
        let device = FakeDevice { fail: true, ..Default::default() };
        let mut mem = vec![7u8; 16];
        let region = region_of(&mut mem, Memory::Device);
        // SAFETY: as above.
        assert!(unsafe { region.readable(&device) }.is_err());
        // SAFETY: `mem` outlives the target and nothing else touches it.
        assert!(unsafe { region.writable_prefilled(&device) }.is_err());
        // SAFETY: `mem` outlives the target and nothing else touches it.
        let target = unsafe { region.writable() };
        assert!(target.finish(4, &device).is_err());
        assert_eq!(mem, [7u8; 16]);
    }

    #[test]
    fn scattered_reads_fill_parts_in_order() {
        assert_eq!(scattered(10, [4, 4, 4]), [4, 4, 2]);
        assert_eq!(scattered(3, [4, 4]), [3, 0]);
        assert_eq!(scattered(0, [4]), [0]);
        assert_eq!(scattered(100, [1, 2]), [1, 2]);
    }
}
