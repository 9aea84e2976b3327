//! State checkpoints: the hash of the applied state at fixed log indices,
//! the same on every master that applied the same entries. Masters compare
//! them (`master/src/raft/state_audit.rs`) to notice a replica whose state
//! diverged — a follower that applied an entry the leader never committed
//! (only a holder of the cluster secret can make one), a bit flipped in
//! memory, a bug that made apply depend on something local.
//!
//! Every `every`-th applied index (a multiple of it, so every master picks
//! the same ones), apply clones the state (its large indexes are shared, not
//! copied) and a blocking thread hashes the clone (`MetaState::state_hash`,
//! O(state)), off the apply path. The last [`CHECKPOINTS_KEPT`] are kept.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::state::MetaState;

/// Checkpoints kept: enough for peers applying a little behind to find one
/// in common.
pub const CHECKPOINTS_KEPT: usize = 16;

/// This master's recent checkpoints.
#[derive(Debug, Default)]
pub struct Checkpoints {
    every: u64,
    /// DEVELOPMENT ONLY: this master's hashes are altered, so the audit
    /// must find it diverged and end it.
    tampered: bool,
    recent: Mutex<VecDeque<(u64, u64)>>,
}

impl Checkpoints {
    /// A checkpoint every `every` applied indices (0: none).
    pub fn new(every: u64, tampered: bool) -> Self {
        Checkpoints { every, tampered, recent: Mutex::new(VecDeque::new()) }
    }

    /// Whether the state right after applying `index` is checkpointed.
    pub fn due(&self, index: u64) -> bool {
        self.every > 0 && index > 0 && index.is_multiple_of(self.every)
    }

    /// Hashes `state` (applied up to `index`) on a blocking thread and
    /// records it.
    pub fn take(self: &std::sync::Arc<Self>, index: u64, state: MetaState) {
        let this = self.clone();
        let work = move || {
            let hash = state.state_hash() ^ u64::from(this.tampered);
            this.record(index, hash);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(work)),
            Err(_) => work(),
        }
    }

    fn record(&self, index: u64, hash: u64) {
        let mut recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Hashes may finish out of order; keep them sorted by index.
        let at = recent.partition_point(|(i, _)| *i < index);
        if recent.get(at).is_some_and(|(i, _)| *i == index) {
            return;
        }
        recent.insert(at, (index, hash));
        while recent.len() > CHECKPOINTS_KEPT {
            recent.pop_front();
        }
    }

    /// The recent checkpoints, (applied index, state hash), oldest first.
    pub fn recent(&self) -> Vec<(u64, u64)> {
        self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_fall_on_multiples_and_the_last_ones_are_kept_in_order() {
        let c = Checkpoints::new(4, false);
        assert!(!c.due(0) && !c.due(3) && c.due(4) && c.due(8));
        assert!(!Checkpoints::new(0, false).due(4), "0 turns them off");
        for i in (1..=20u64).rev() {
            c.record(i * 4, i);
        }
        c.record(80, 99);
        let recent = c.recent();
        assert_eq!(recent.len(), CHECKPOINTS_KEPT);
        assert_eq!(recent.first(), Some(&(20, 5)));
        assert_eq!(recent.last(), Some(&(80, 20)), "a second hash of an index is ignored");
    }
}
