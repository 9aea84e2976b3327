//! The local buffer (Mooncake's `local_buffer_size`): one region allocated
//! and pre-faulted at setup, lent out in pieces ([`Lease`]) for the calls
//! that need memory of the store's own: `get` and `get_batch` read into a
//! lease and copy into the returned `bytes`, `get_buffer` hands the lease to
//! Python as a `BufferHandle`. A lease returns its piece when dropped (the
//! handle's memory lives as long as the handle). The memory of a live
//! handle counts as registered (its address may be passed to `get_into` and
//! friends); the rest of the pool does not: another call may be writing
//! there, and a handle's stale address must not reach it.
//! When the pool is absent, too small or full, [`Staging`] falls back to
//! a heap allocation, so a call never fails for want of pool space.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use mooncake_segment::{MemoryError, Range, RangeAllocator, SegmentMemory};

/// The region and its allocator.
#[derive(Debug)]
pub struct BufferPool {
    memory: SegmentMemory,
    free: Mutex<RangeAllocator>,
    /// Pieces handed to Python (offset → length), see [`Lease::expose`].
    exposed: Mutex<BTreeMap<u64, u64>>,
}

impl BufferPool {
    /// Maps and pre-faults `size_bytes` of anonymous memory.
    pub fn new(size_bytes: u64) -> Result<Arc<BufferPool>, MemoryError> {
        let memory = SegmentMemory::anonymous(size_bytes, true)?;
        let free = Mutex::new(RangeAllocator::new(size_bytes));
        Ok(Arc::new(BufferPool { memory, free, exposed: Mutex::default() }))
    }

    /// True when `[ptr, ptr + len)` lies inside one piece handed to Python
    /// (a live `BufferHandle`).
    pub fn contains(&self, ptr: usize, len: usize) -> bool {
        let base = self.base() as usize;
        let (Some(offset), Some(end)) = (ptr.checked_sub(base), ptr.checked_add(len)) else { return false };
        let exposed = self.exposed.lock().unwrap_or_else(PoisonError::into_inner);
        exposed.range(..=offset as u64).next_back().is_some_and(|(&start, &piece)| (end - base) as u64 <= start + piece)
    }

    /// `len_bytes` of the pool, or `None` when no free piece is large enough.
    pub fn lease(self: &Arc<Self>, len_bytes: usize) -> Option<Lease> {
        if len_bytes == 0 {
            return None;
        }
        let range = self.free.lock().unwrap_or_else(PoisonError::into_inner).allocate(len_bytes as u64)?;
        Some(Lease { pool: self.clone(), range, len: len_bytes })
    }

    /// Bytes not lent out.
    pub fn free_bytes(&self) -> u64 {
        self.free.lock().unwrap_or_else(PoisonError::into_inner).free_bytes()
    }

    fn base(&self) -> *const u8 {
        self.memory.as_ptr()
    }
}

/// A piece of the pool, returned on drop.
#[derive(Debug)]
pub struct Lease {
    pool: Arc<BufferPool>,
    range: Range,
    len: usize,
}

impl AsMut<[u8]> for Lease {
    #[allow(clippy::expect_used, reason = "the pool's allocator hands out ranges inside the pool only")]
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: the allocator gave this range to this lease alone, and it
        // is back in the allocator only after the lease is dropped.
        unsafe { self.pool.memory.slice_mut(self.range.offset, self.len as u64) }.expect("a lease lies inside its pool")
    }
}

impl AsRef<[u8]> for Lease {
    #[allow(clippy::expect_used, reason = "the pool's allocator hands out ranges inside the pool only")]
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the allocator gave this range to this lease alone; only its
        // owner writes it, through `as_mut`, which needs `&mut self`.
        unsafe { self.pool.memory.slice(self.range.offset, self.len as u64) }.expect("a lease lies inside its pool")
    }
}

impl Lease {
    /// Hands this piece to Python: until the lease is dropped, calls may
    /// name its memory as they name registered buffers.
    pub fn expose(&self) {
        self.pool.exposed.lock().unwrap_or_else(PoisonError::into_inner).insert(self.range.offset, self.len as u64);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.exposed.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.range.offset);
        let freed = self.pool.free.lock().unwrap_or_else(PoisonError::into_inner).free(self.range);
        assert!(freed.is_ok(), "a lease's range was allocated: {freed:?}");
    }
}

/// Memory for one object read by the store itself: a pool lease if one is
/// free, else the heap.
#[derive(Debug)]
pub enum Staging {
    Pooled(Lease),
    Heap(Vec<u8>),
}

impl Staging {
    /// `len` bytes from `pool` if it has them, else from the heap.
    pub fn take(pool: Option<&Arc<BufferPool>>, len: usize) -> Staging {
        match pool.and_then(|p| p.lease(len)) {
            Some(lease) => Staging::Pooled(lease),
            None => Staging::Heap(vec![0u8; len]),
        }
    }

    /// Keeps the first `len` bytes (an object's size; a lease keeps its
    /// piece, only the visible length changes).
    pub fn truncate(&mut self, len: usize) {
        match self {
            Staging::Pooled(lease) => lease.len = lease.len.min(len),
            Staging::Heap(v) => v.truncate(len),
        }
    }
}

impl AsMut<[u8]> for Staging {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            Staging::Pooled(lease) => lease.as_mut(),
            Staging::Heap(v) => v.as_mut_slice(),
        }
    }
}

impl AsRef<[u8]> for Staging {
    fn as_ref(&self) -> &[u8] {
        match self {
            Staging::Pooled(lease) => lease.as_ref(),
            Staging::Heap(v) => v.as_slice(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_come_back_and_fall_back_to_the_heap() {
        let pool = BufferPool::new(64 << 10).expect("pool");
        let mut a = Staging::take(Some(&pool), 40 << 10);
        assert!(matches!(a, Staging::Pooled(_)));
        a.as_mut().fill(7);
        let ptr = a.as_mut().as_ptr() as usize;
        assert!(!pool.contains(ptr, 1), "a lease not handed to Python is not the caller's memory");
        if let Staging::Pooled(lease) = &a {
            lease.expose();
        }
        assert!(pool.contains(ptr, 40 << 10) && !pool.contains(ptr, 200 << 10));
        assert!(!pool.contains(ptr - 1, 2), "starts before the piece");
        let b = Staging::take(Some(&pool), 40 << 10);
        assert!(matches!(b, Staging::Heap(_)), "the pool is out of room");
        a.truncate(10);
        assert_eq!(a.as_ref(), &[7u8; 10]);
        drop(a);
        assert_eq!(pool.free_bytes(), 64 << 10);
        assert!(!pool.contains(ptr, 1), "a dropped handle's address is refused");
        assert!(matches!(Staging::take(None, 5), Staging::Heap(v) if v.len() == 5));
    }
}
