//! Aligned memory for `O_DIRECT` I/O: [`AlignedBuf`] (one zeroed allocation
//! aligned to [`DISK_BLOCK_BYTES`]), the bounded [`BufPool`] of chunk
//! buffers a segment moves object bytes through, and [`DiskBuf`], one pool
//! buffer lent to a caller with a window of valid bytes.
//!
//! The pool is fixed at [`DISK_BUFFERS_MAX`] buffers of
//! [`DISK_IO_CHUNK_BYTES`] plus one block each (a chunk that starts inside a
//! block covers one block more), allocated once: with io_uring they are
//! registered with the ring and addressed by index (`ReadFixed`/`WriteFixed`),
//! which saves pinning the pages on every request. A caller that finds the
//! pool empty waits for a buffer to come back (a semaphore), so the memory a
//! segment uses for I/O never grows.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{DISK_BLOCK_BYTES, DISK_BUFFERS_MAX, DISK_IO_CHUNK_BYTES, DiskError};

/// Alignment of every I/O buffer: `O_DIRECT` needs the logical block size
/// of the device (512 or 4096); the segment's block covers both.
const ALIGN_BYTES: usize = DISK_BLOCK_BYTES as usize;

/// Bytes of one pool buffer: a whole chunk plus the block it may straddle.
pub(crate) const SLOT_BYTES: usize = DISK_IO_CHUNK_BYTES + ALIGN_BYTES;

/// A zeroed heap allocation of `len` bytes aligned to [`DISK_BLOCK_BYTES`].
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `AlignedBuf` owns its allocation exclusively, like a `Box<[u8]>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads (`as_slice`); writes need `&mut self`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes; `len` is rounded up to a whole block (at least one).
    pub(crate) fn zeroed(len: usize) -> Result<Self, DiskError> {
        let len = len.max(1).div_ceil(ALIGN_BYTES).saturating_mul(ALIGN_BYTES);
        let layout = Layout::from_size_align(len, ALIGN_BYTES).map_err(|_| DiskError::NoMemory { bytes: len })?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(DiskError::NoMemory { bytes: len })?;
        Ok(Self { ptr, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is `len` initialised (zeroed) bytes, alive
        // while `self` is, and only `&mut self` can change it.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this view exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this size and alignment,
        // which `zeroed` already proved valid.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Layout::from_size_align_unchecked(self.len, ALIGN_BYTES)) };
    }
}

/// The fixed set of I/O buffers of one segment. See the module doc.
pub(crate) struct BufPool {
    /// Never resized after `new`: the addresses are stable and, with
    /// io_uring, registered. The contents are only reached through the
    /// [`DiskBuf`] that holds a slot, never through `&AlignedBuf`.
    slots: Vec<AlignedBuf>,
    /// Indexes of the slots nobody holds.
    free: Mutex<Vec<usize>>,
    /// One permit per free slot: waiting here is waiting for a buffer.
    permits: Arc<Semaphore>,
}

impl BufPool {
    pub(crate) fn new() -> Result<Arc<Self>, DiskError> {
        let slots = (0..DISK_BUFFERS_MAX).map(|_| AlignedBuf::zeroed(SLOT_BYTES)).collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(Self {
            slots,
            free: Mutex::new((0..DISK_BUFFERS_MAX).rev().collect()),
            permits: Arc::new(Semaphore::new(DISK_BUFFERS_MAX)),
        }))
    }

    /// The slots as `iovec`s, for `register_buffers` (index = slot index).
    pub(crate) fn iovecs(&self) -> Vec<libc::iovec> {
        self.slots.iter().map(|s| libc::iovec { iov_base: s.as_ptr().cast(), iov_len: s.len() }).collect()
    }

    /// A buffer with a window of `len` bytes at its start, waiting while
    /// every buffer is lent out. `len` must be at most [`SLOT_BYTES`].
    pub(crate) async fn take(self: &Arc<Self>, len: usize) -> Option<DiskBuf> {
        assert!(len <= SLOT_BYTES, "callers check the chunk limit");
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        let index = self.free.lock().unwrap_or_else(PoisonError::into_inner).pop()?;
        Some(DiskBuf { pool: self.clone(), index, start: 0, len, _permit: permit })
    }

    /// A buffer if one is free now (for setup probes, before any caller).
    pub(crate) fn try_take(self: &Arc<Self>, len: usize) -> Option<DiskBuf> {
        assert!(len <= SLOT_BYTES, "callers check the chunk limit");
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        let index = self.free.lock().unwrap_or_else(PoisonError::into_inner).pop()?;
        Some(DiskBuf { pool: self.clone(), index, start: 0, len, _permit: permit })
    }

    fn slot_ptr(&self, index: usize) -> *mut u8 {
        self.slots[index].as_ptr()
    }
}

/// One I/O buffer of a disk segment, lent by its pool and given back when
/// dropped. Its window (`as_slice`) is the bytes a read returned, or the
/// bytes a write will store. Aligned for `O_DIRECT`.
pub struct DiskBuf {
    pool: Arc<BufPool>,
    index: usize,
    /// The window, inside the slot.
    start: usize,
    len: usize,
    /// Released after the slot index is back on the free list (fields drop
    /// after `Drop::drop`), so a waiter woken by it always finds a slot.
    _permit: OwnedSemaphorePermit,
}

impl DiskBuf {
    /// Bytes in the window.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The window: the bytes a read returned, or the bytes a write will store.
    pub fn as_slice(&self) -> &[u8] {
        &self.slot()[self.start..self.start + self.len]
    }

    /// The window, to fill (e.g. straight from a socket) before a write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let (start, len) = (self.start, self.len);
        &mut self.slot_mut()[start..start + len]
    }

    /// The whole slot, window or not.
    pub(crate) fn slot(&self) -> &[u8] {
        // SAFETY: the slot is `SLOT_BYTES` initialised bytes owned by the
        // pool, which this buffer keeps alive; the free list hands a slot to
        // one `DiskBuf` at a time, so no other view of it exists, and the
        // engine only does I/O on it while it owns this `DiskBuf`.
        unsafe { std::slice::from_raw_parts(self.pool.slot_ptr(self.index), SLOT_BYTES) }
    }

    /// The whole slot, mutable.
    pub(crate) fn slot_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `slot`; `&mut self` makes this view exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pool.slot_ptr(self.index), SLOT_BYTES) }
    }

    /// Start of the slot, for the kernel.
    pub(crate) fn slot_ptr(&self) -> *mut u8 {
        self.pool.slot_ptr(self.index)
    }

    /// Index of the slot in the pool (= its registered buffer index).
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// Where the window starts in the slot.
    pub(crate) fn window_start(&self) -> usize {
        self.start
    }

    /// Sets the window to `[start, start + len)` of the slot.
    pub(crate) fn set_window(&mut self, start: usize, len: usize) {
        assert!(start.checked_add(len).is_some_and(|end| end <= SLOT_BYTES), "window inside the slot");
        self.start = start;
        self.len = len;
    }

    /// Whether this buffer was lent by `pool`.
    pub(crate) fn belongs_to(&self, pool: &Arc<BufPool>) -> bool {
        Arc::ptr_eq(&self.pool, pool)
    }
}

impl Drop for DiskBuf {
    fn drop(&mut self) {
        self.pool.free.lock().unwrap_or_else(PoisonError::into_inner).push(self.index);
    }
}

impl std::fmt::Debug for DiskBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskBuf")
            .field("slot", &self.index)
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_are_aligned_zeroed_and_whole_blocks() {
        let buf = AlignedBuf::zeroed(100).unwrap();
        assert_eq!(buf.len(), ALIGN_BYTES);
        assert_eq!(buf.as_ptr() as usize % ALIGN_BYTES, 0);
        assert!(buf.as_slice().iter().all(|b| *b == 0));
    }

    #[tokio::test]
    async fn the_pool_lends_each_buffer_once_and_waits_when_empty() {
        let pool = BufPool::new().unwrap();
        let mut held = Vec::new();
        for _ in 0..DISK_BUFFERS_MAX {
            held.push(pool.take(10).await.unwrap());
        }
        let mut indexes: Vec<usize> = held.iter().map(DiskBuf::index).collect();
        indexes.sort_unstable();
        indexes.dedup();
        assert_eq!(indexes.len(), DISK_BUFFERS_MAX, "no slot lent twice");
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), pool.take(10)).await;
        assert!(waiting.is_err(), "an empty pool makes the caller wait");
        let back = held.pop().unwrap().index();
        let again = pool.take(SLOT_BYTES).await.unwrap();
        assert_eq!(again.index(), back);
        assert_eq!(again.slot_ptr() as usize % ALIGN_BYTES, 0);
    }
}
