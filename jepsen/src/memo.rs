//! The memo table of the linearizability search: every (set of linearized
//! ops, register state) pair already explored, so no pair is searched twice.
//!
//! This table is the search's hot path. The set is a fixed array of words
//! (no allocation per probe) and its hash is kept incrementally (Zobrist:
//! one random word per op, XORed in and out), so a probe costs one hash
//! mix and, on a hash match, one comparison of a few words.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use crate::model::State;

/// A set of op indices stored as 64-bit words.
pub(crate) trait OpSet: Clone + Eq {
    fn empty(ops: usize) -> Self;
    fn flip(&mut self, op: usize);
}

/// Fixed-size sets for keys of up to `64 * WORDS` ops.
impl<const WORDS: usize> OpSet for [u64; WORDS] {
    fn empty(ops: usize) -> Self {
        assert!(ops <= 64 * WORDS, "{ops} ops do not fit a set of {WORDS} words");
        [0; WORDS]
    }

    fn flip(&mut self, op: usize) {
        self[op / 64] ^= 1 << (op % 64);
    }
}

/// Sets for keys with more ops than the fixed sizes hold.
impl OpSet for Box<[u64]> {
    fn empty(ops: usize) -> Self {
        vec![0; ops.div_ceil(64)].into_boxed_slice()
    }

    fn flip(&mut self, op: usize) {
        self[op / 64] ^= 1 << (op % 64);
    }
}

/// One explored pair, carrying its precomputed hash.
#[derive(Clone, PartialEq, Eq)]
struct Entry<S> {
    hash: u64,
    set: S,
    state: State,
}

impl<S> Hash for Entry<S> {
    fn hash<H: Hasher>(&self, hasher: &mut H) {
        hasher.write_u64(self.hash);
    }
}

/// Passes the precomputed hash of an [`Entry`] through unchanged.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = mix(self.0 ^ u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// The current set of linearized ops and every (set, state) pair seen.
pub(crate) struct Memo<S: OpSet> {
    /// A random word per op; the set's hash is the XOR of its members' words.
    zobrist: Vec<u64>,
    set: S,
    set_hash: u64,
    seen: HashSet<Entry<S>, BuildHasherDefault<Prehashed>>,
}

impl<S: OpSet> Memo<S> {
    pub(crate) fn new(ops: usize) -> Self {
        let zobrist = (0..ops as u64).map(|op| mix(op ^ 0x6A09_E667_F3BC_C908)).collect();
        Self { zobrist, set: S::empty(ops), set_hash: 0, seen: HashSet::default() }
    }

    /// Adds `op` to the current set, or removes it if present.
    pub(crate) fn flip(&mut self, op: usize) {
        self.set.flip(op);
        self.set_hash ^= self.zobrist[op];
    }

    /// Remembers (current set, `state`); false if it was already seen.
    pub(crate) fn insert(&mut self, state: State) -> bool {
        let hash = self.set_hash ^ state_hash(state);
        self.seen.insert(Entry { hash, set: self.set.clone(), state })
    }

    /// How many pairs have been explored.
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }
}

fn state_hash(state: State) -> u64 {
    match state {
        None => 0x3C6E_F372_FE94_F82B,
        Some(value) => mix(value ^ 0xBB67_AE85_84CA_A73B),
    }
}

/// SplitMix64's finalizer: spreads every input bit over the output.
fn mix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_set_reached_in_another_order_is_seen() {
        let mut memo: Memo<[u64; 1]> = Memo::new(3);
        memo.flip(0);
        memo.flip(2);
        assert!(memo.insert(Some(1)));
        memo.flip(0);
        memo.flip(2);
        memo.flip(2);
        memo.flip(0);
        assert!(!memo.insert(Some(1)));
        assert!(memo.insert(None));
        assert_eq!(memo.len(), 2);
    }

    #[test]
    fn large_sets_work_too() {
        let mut memo: Memo<Box<[u64]>> = Memo::new(1000);
        memo.flip(999);
        assert!(memo.insert(None));
        memo.flip(999);
        assert!(memo.insert(None));
        assert!(!memo.insert(None));
    }
}
