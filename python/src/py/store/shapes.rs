//! The nested list arguments of the multi-buffer calls ([`Parts`],
//! [`one_each`]) and of `get_into_ranges` ([`RangePlan`]): checked,
//! flattened for [`carve`](crate::buffers::carve), and the results put
//! back in the arguments' shape.

use pyo3::prelude::*;

use crate::batches::RangeReads;
use crate::buffers::Region;
use crate::codes::{self, Code};
use crate::py::args::{unsigned, unsigned_all};

/// One buffer per key, in the shape of the multi-buffer calls.
pub(super) fn one_each(values: Vec<i64>) -> Vec<Vec<i64>> {
    values.into_iter().map(|v| vec![v]).collect()
}

/// The buffers of each key of a multi-buffer call, flattened for [`carve`](crate::buffers::carve).
pub(super) struct Parts {
    /// `(address, size)` of every buffer of every accepted key.
    pub(super) flat: Vec<(usize, usize)>,
    /// Per key: how many of `flat` are its buffers (`None`: refused).
    counts: Vec<Option<usize>>,
}

impl Parts {
    pub(super) fn new(keys: &[String], ptrs: &[Vec<i64>], sizes: &[Vec<i64>]) -> PyResult<Parts> {
        let mut flat = Vec::new();
        let mut counts = Vec::with_capacity(keys.len());
        let lists_match = keys.len() == ptrs.len() && keys.len() == sizes.len();
        for i in 0..keys.len() {
            let (Some(p), Some(n)) = (ptrs.get(i), sizes.get(i)) else {
                counts.push(None);
                continue;
            };
            let (p, n) = (unsigned_all(p, "buffer_ptrs")?, unsigned_all(n, "sizes")?);
            if !lists_match || p.len() != n.len() || p.is_empty() {
                counts.push(None);
                continue;
            }
            counts.push(Some(p.len()));
            flat.extend(p.into_iter().zip(n));
        }
        Ok(Parts { flat, counts })
    }

    /// Regroups checked buffers per key; a key with any refused buffer is refused.
    pub(super) fn regions(&self, checked: Vec<Option<Region>>) -> Vec<Option<Vec<Region>>> {
        let mut checked = checked.into_iter();
        self.counts
            .iter()
            .map(|count| {
                let parts: Vec<Option<Region>> = checked.by_ref().take(count.unwrap_or(0)).collect();
                count.and_then(|_| parts.into_iter().collect())
            })
            .collect()
    }
}

/// One (buffer, key) of `get_into_ranges`: its fragments `(src offset,
/// index into the destinations)`, or `None` when its shape is wrong.
type Fragments = Option<Vec<(u64, usize)>>;

/// `get_into_ranges`' nested arguments: the destination of every fragment,
/// and which fragments belong to which (buffer, key).
pub(super) struct RangePlan {
    /// Per buffer, per key: the key and its fragments `(src offset, index
    /// into destinations)`, or `None` when its shape is wrong.
    items: Vec<Vec<(String, Fragments)>>,
    pub(super) destinations: Vec<(usize, usize)>,
}

impl RangePlan {
    pub(super) fn new(
        ptrs: &[i64],
        keys: &[Vec<String>],
        dst: &[Vec<Vec<i64>>],
        src: &[Vec<Vec<i64>>],
        sizes: &[Vec<Vec<i64>>],
    ) -> PyResult<RangePlan> {
        let top = [keys.len(), dst.len(), src.len(), sizes.len()].iter().all(|n| *n == ptrs.len());
        let mut destinations = Vec::new();
        let mut items = Vec::with_capacity(keys.len());
        for (i, buffer_keys) in keys.iter().enumerate() {
            let mut per_buffer = Vec::with_capacity(buffer_keys.len());
            // A buffer whose keys and range groups differ in count is refused
            // whole, as upstream 0.3.14 refuses it.
            let groups = |v: &[Vec<Vec<i64>>]| v.get(i).map(Vec::len) == Some(buffer_keys.len());
            let whole = top && groups(dst) && groups(src) && groups(sizes);
            for (j, key) in buffer_keys.iter().enumerate() {
                let frag = |v: &[Vec<Vec<i64>>]| v.get(i).and_then(|b| b.get(j)).cloned();
                let fragments = match (whole, ptrs.get(i), frag(dst), frag(src), frag(sizes)) {
                    (true, Some(base), Some(d), Some(s), Some(n)) if d.len() == s.len() && d.len() == n.len() => {
                        let base = unsigned(*base, "buffer_ptrs")?;
                        let (d, s, n) = (
                            unsigned_all(&d, "all_dst_offsets")?,
                            unsigned_all(&s, "all_src_offsets")?,
                            unsigned_all(&n, "all_sizes")?,
                        );
                        let mut frags = Vec::with_capacity(d.len());
                        for k in 0..d.len() {
                            // An address that wraps can never be registered: it is refused by `carve`.
                            destinations.push((base.saturating_add(d[k]), n[k]));
                            frags.push((s[k] as u64, destinations.len() - 1));
                        }
                        Some(frags)
                    }
                    _ => None,
                };
                per_buffer.push((key.clone(), fragments));
            }
            items.push(per_buffer);
        }
        Ok(RangePlan { items, destinations })
    }

    /// The keys and ranges to read (accepted shapes only).
    pub(super) fn reads(&self, regions: Vec<Option<Region>>) -> (Vec<String>, RangeReads) {
        let accepted = self.items.iter().flatten().filter_map(|(key, f)| f.as_ref().map(|f| (key, f)));
        accepted.map(|(key, frags)| (key.clone(), frags.iter().map(|(src, d)| (*src, regions[*d])).collect())).unzip()
    }

    /// The results in the arguments' shape; refused shapes get `INVALID_PARAMS`.
    pub(super) fn shape(&self, results: Vec<Vec<Code>>) -> Vec<Vec<Vec<Code>>> {
        let mut results = results.into_iter();
        self.items
            .iter()
            .map(|per_buffer| {
                per_buffer
                    .iter()
                    .map(|(_, frags)| match frags {
                        Some(f) => results.next().unwrap_or_else(|| vec![codes::INTERNAL_ERROR; f.len()]),
                        None => vec![codes::INVALID_PARAMS],
                    })
                    .collect()
            })
            .collect()
    }

    /// Every result `INVALID_PARAMS` (before setup, after close).
    pub(super) fn refused(&self) -> Vec<Vec<Vec<Code>>> {
        self.shape(Vec::new())
            .into_iter()
            .map(|b| b.into_iter().map(|k| vec![codes::INVALID_PARAMS; k.len()]).collect())
            .collect()
    }
}
