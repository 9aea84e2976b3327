//! The arguments of the ranged session calls
//! (`batch_put_from_multi_buffer_ranges`, `batch_get_into_multi_buffer_ranges`):
//! per key, lists of buffer addresses, sizes and offsets in the object,
//! checked against registered memory and regrouped per key.

use pyo3::prelude::*;

use super::args::unsigned_all;
use crate::buffers::{Region, carve};
use crate::session::Session;
use crate::sessions::KeyRanges;

/// Per key: `(offset in the object, address, length)` of each range, or
/// `None` when the key's lists differ in length (or the outer lists do).
pub struct Ranged {
    per_key: Vec<Option<Vec<(u64, usize, usize)>>>,
}

impl Ranged {
    /// Checks the shapes; a negative number is a `TypeError`, as upstream.
    pub fn new(keys: &[String], ptrs: &[Vec<i64>], sizes: &[Vec<i64>], offsets: &[Vec<i64>]) -> PyResult<Ranged> {
        let outer = keys.len() == ptrs.len() && keys.len() == sizes.len() && keys.len() == offsets.len();
        let mut per_key = Vec::with_capacity(keys.len());
        for i in 0..keys.len() {
            let (Some(p), Some(n), Some(o)) = (ptrs.get(i), sizes.get(i), offsets.get(i)) else {
                per_key.push(None);
                continue;
            };
            let (p, n, o) = (unsigned_all(p, "buffer_ptrs")?, unsigned_all(n, "sizes")?, unsigned_all(o, "offsets")?);
            if !outer || p.len() != n.len() || p.len() != o.len() {
                per_key.push(None);
                continue;
            }
            per_key.push(Some(o.into_iter().zip(p).zip(n).map(|((o, p), n)| (o as u64, p, n)).collect()));
        }
        Ok(Ranged { per_key })
    }

    /// Sources of a ranged write: each checked alone (they are only read,
    /// so they may overlap). A key with any unusable range is refused.
    pub fn sources(&self, s: &Session) -> Vec<KeyRanges> {
        self.per_key
            .iter()
            .map(|ranges| ranges.as_ref()?.iter().map(|&(o, p, n)| Some((o, s.region(p, n)?))).collect())
            .collect()
    }

    /// Destinations of a ranged read: usable and, across the whole call,
    /// not overlapping (`carve`). A key with any refused range is refused.
    pub fn destinations(&self, s: &Session) -> Vec<KeyRanges> {
        let flat: Vec<(usize, usize)> =
            self.per_key.iter().flatten().flat_map(|r| r.iter().map(|&(_, p, n)| (p, n))).collect();
        let mut checked = carve(&flat, |p, n| s.usable(p, n)).into_iter();
        self.per_key
            .iter()
            .map(|ranges| {
                let ranges = ranges.as_ref()?;
                let regions: Vec<Option<Region>> = checked.by_ref().take(ranges.len()).collect();
                ranges.iter().zip(regions).map(|(&(o, _, _), r)| Some((o, r?))).collect()
            })
            .collect()
    }
}
