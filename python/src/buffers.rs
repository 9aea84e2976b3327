//! Registered memory. Python hands the store raw addresses (`buffer_ptr`,
//! `size`); the store touches only bytes inside ranges the caller declared
//! with `register_buffer` (or its own local buffer pool), so a wrong
//! address gets `INVALID_PARAMS` instead of a crash or a write into
//! unrelated memory. Within one call, destination ranges that overlap are
//! refused too: each becomes its own `&mut [u8]`.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{PoisonError, RwLock};

/// Most buffers registered at once. vLLM and SGLang register a handful of
/// large pools; a caller registering per call would otherwise grow the map
/// without end (each entry is 16 bytes, looked up under a read lock).
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
    /// start address -> length; disjoint.
    ranges: RwLock<BTreeMap<usize, usize>>,
}

impl BufferRegistry {
    /// Declares `[ptr, ptr + len)` usable for zero-copy calls.
    pub fn register(&self, ptr: usize, len: usize) -> Result<(), RegisterError> {
        if ptr == 0 || len == 0 {
            return Err(RegisterError::Empty);
        }
        let end = ptr.checked_add(len).ok_or(RegisterError::Wraps)?;
        let mut ranges = self.ranges.write().unwrap_or_else(PoisonError::into_inner);
        if ranges.len() >= REGISTERED_BUFFERS_MAX {
            return Err(RegisterError::TooMany);
        }
        let before = ranges.range(..end).next_back().map(|(s, l)| (*s, *l));
        if let Some((start, l)) = before.filter(|(s, l)| s + l > ptr) {
            return Err(RegisterError::Overlaps { start, len: l });
        }
        ranges.insert(ptr, len);
        Ok(())
    }

    /// Forgets the buffer registered at exactly `ptr`; false if none was.
    pub fn unregister(&self, ptr: usize) -> bool {
        self.ranges.write().unwrap_or_else(PoisonError::into_inner).remove(&ptr).is_some()
    }

    /// True when `[ptr, ptr + len)` lies inside one registered buffer.
    pub fn contains(&self, ptr: usize, len: usize) -> bool {
        let Some(end) = ptr.checked_add(len) else { return false };
        let ranges = self.ranges.read().unwrap_or_else(PoisonError::into_inner);
        ranges.range(..=ptr).next_back().is_some_and(|(start, l)| end <= start + l)
    }
}

/// A range of the caller's memory that a call may use: checked to lie in
/// registered memory (or the pool) and, within its call, to overlap no
/// other range handed out as mutable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    ptr: usize,
    len: usize,
}

impl Region {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, for reading.
    ///
    /// # Safety
    ///
    /// The memory must stay valid and unwritten by others while the slice
    /// lives: the contract `register_buffer` states (Mooncake's too).
    pub unsafe fn as_slice<'a>(self) -> &'a [u8] {
        // SAFETY: registered memory is valid for `len` bytes (the caller's
        // contract); a zero-length slice uses a dangling, aligned pointer.
        unsafe { std::slice::from_raw_parts(self.base(), self.len) }
    }

    /// The bytes, for writing.
    ///
    /// # Safety
    ///
    /// As [`as_slice`](Self::as_slice), and no other reference to these
    /// bytes may be used while the slice lives ([`carve`] ensures it within
    /// one call; across threads it is the caller's contract).
    pub unsafe fn as_mut_slice<'a>(self) -> &'a mut [u8] {
        // SAFETY: as in `as_slice`; exclusivity per the contract above.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len) }
    }

    fn base(self) -> *mut u8 {
        match self.len {
            0 => NonNull::dangling().as_ptr(),
            _ => self.ptr as *mut u8,
        }
    }
}

/// Checks the ranges one call reads into: each must pass `usable` (inside
/// registered memory) and overlap no other range of the call. One result
/// per request, in order: `None` for a refused one.
pub fn carve(requests: &[(usize, usize)], usable: impl Fn(usize, usize) -> bool) -> Vec<Option<Region>> {
    let mut out: Vec<Option<Region>> =
        requests.iter().map(|&(ptr, len)| usable(ptr, len).then_some(Region { ptr, len })).collect();
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
pub fn check(ptr: usize, len: usize, usable: impl Fn(usize, usize) -> bool) -> Option<Region> {
    usable(ptr, len).then_some(Region { ptr, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_is_exact_and_disjoint() {
        let r = BufferRegistry::default();
        assert_eq!(r.register(0, 10), Err(RegisterError::Empty));
        assert_eq!(r.register(1000, 0), Err(RegisterError::Empty));
        assert_eq!(r.register(usize::MAX - 5, 10), Err(RegisterError::Wraps));
        r.register(1000, 100).expect("register");
        assert_eq!(r.register(1000, 100), Err(RegisterError::Overlaps { start: 1000, len: 100 }));
        assert_eq!(r.register(1050, 10), Err(RegisterError::Overlaps { start: 1000, len: 100 }));
        assert_eq!(r.register(900, 101), Err(RegisterError::Overlaps { start: 1000, len: 100 }));
        r.register(900, 100).expect("touching is fine");
        r.register(1100, 1).expect("touching is fine");
        assert!(r.contains(1000, 100) && r.contains(1099, 1) && r.contains(950, 0));
        assert!(!r.contains(1000, 101), "spans two buffers: refused");
        assert!(!r.contains(1101, 1) && !r.contains(usize::MAX, 2));
        assert!(!r.unregister(1001) && r.unregister(1000) && !r.unregister(1000));
        assert!(!r.contains(1000, 1));
    }

    #[test]
    fn overlapping_destinations_of_one_call_are_all_refused() {
        let all = |_: usize, _: usize| true;
        let got = carve(&[(100, 10), (200, 10), (105, 10), (300, 0), (300, 5), (400, 1)], all);
        assert_eq!(got.iter().map(Option::is_some).collect::<Vec<_>>(), [false, true, false, true, true, true]);
        let got = carve(&[(100, 50), (110, 5), (120, 5)], all);
        assert!(got.iter().all(Option::is_none), "every range inside the first overlaps it");
        let got = carve(&[(100, 10), (50, 10)], |p, _| p >= 100);
        assert_eq!(got, vec![Some(Region { ptr: 100, len: 10 }), None]);
    }
}
