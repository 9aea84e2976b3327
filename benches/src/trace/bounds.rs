//! The hit rates a replay is judged against, computed on the same
//! requests in trace order: an exact LRU cache of the same capacity in
//! blocks, and a cache of unbounded size. Each request looks up the longest
//! stored prefix of its blocks (those are hits and become the most recently
//! used), then stores the blocks after it (those already stored are only
//! touched), as the replay does.

use std::collections::{BTreeMap, HashMap};

use super::file::Request;

/// Block references and prefix hits of a replay or a bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hits {
    pub refs: u64,
    pub hits: u64,
}

impl Hits {
    /// Hits over references (0 without references).
    pub fn rate(&self) -> f64 {
        if self.refs == 0 { 0.0 } else { self.hits as f64 / self.refs as f64 }
    }
}

/// An exact LRU cache of block ids.
struct Lru {
    capacity: Option<usize>,
    stamp_of: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
}

impl Lru {
    fn new(capacity: Option<usize>) -> Lru {
        Lru { capacity, stamp_of: HashMap::new(), by_stamp: BTreeMap::new(), clock: 0 }
    }

    fn contains(&self, id: u64) -> bool {
        self.stamp_of.contains_key(&id)
    }

    /// Makes `id` the most recently used, inserting it (and evicting the
    /// least recently used beyond the capacity) if absent.
    fn touch(&mut self, id: u64) {
        self.clock += 1;
        if let Some(old) = self.stamp_of.insert(id, self.clock) {
            self.by_stamp.remove(&old);
        }
        self.by_stamp.insert(self.clock, id);
        while self.capacity.is_some_and(|c| self.stamp_of.len() > c) {
            let Some((_, victim)) = self.by_stamp.pop_first() else { break };
            self.stamp_of.remove(&victim);
        }
    }
}

/// Replays `requests` on a cache of `capacity_blocks` (`None`: unbounded).
pub fn replay(requests: &[Request], capacity_blocks: Option<usize>) -> Hits {
    let mut cache = Lru::new(capacity_blocks);
    let mut h = Hits::default();
    for r in requests {
        let prefix = r.blocks.iter().take_while(|b| cache.contains(**b)).count();
        h.refs += r.blocks.len() as u64;
        h.hits += prefix as u64;
        for b in &r.blocks {
            cache.touch(*b);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(blocks: &[u64]) -> Request {
        Request { timestamp_ms: 0, blocks: blocks.to_vec() }
    }

    #[test]
    fn only_the_stored_prefix_counts() {
        // 2 is stored by the first request, but the second's prefix stops at 9.
        let h = replay(&[req(&[1, 2]), req(&[1, 9, 2])], None);
        assert_eq!(h, Hits { refs: 5, hits: 1 });
    }

    #[test]
    fn the_least_recently_used_block_goes_first() {
        // Capacity 2: [1,2], then 1 is read again (most recent), 3 evicts 2.
        let h = replay(&[req(&[1, 2]), req(&[1]), req(&[3]), req(&[1]), req(&[2])], Some(2));
        assert_eq!(h, Hits { refs: 6, hits: 2 }, "1 hits twice; 2 was evicted by 3");
        let unbounded = replay(&[req(&[1, 2]), req(&[1]), req(&[3]), req(&[1]), req(&[2])], None);
        assert_eq!(unbounded.hits, 3);
    }
}
