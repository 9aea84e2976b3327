//! The arena fence of one served segment: which arenas a WRITE may still
//! name, and which fence this node can tell the masters it enforces.
//!
//! A WRITE capability names the arena its range was handed out in
//! (`mooncake_auth::capability`). The masters hand a range out once in an
//! arena's life and again only in a newer arena, after the old arena is
//! *returned*. Before returning an arena they *revoke* it: the leader sends
//! the segment's owner a new [`Fence`] that no longer lets it through, and
//! returns the arena only once the node *acknowledges* that fence. The
//! node acknowledges a fence only when no WRITE it admitted under an arena
//! the fence excludes is still moving bytes ([`FenceState::ackable`]). So
//! once a range can go to a new writer, no older grant can write into it,
//! however long that grant still has to live.
//!
//! A fence lists the segment's live arenas as the leader knew them and the
//! first arena id not yet granted (`next`): a WRITE may name an arena in
//! `live`, or one granted since (`>= next`). Fences only move forward
//! (`version`, the leader's term in the high 32 bits); an older one is
//! ignored. Until the mount's answer brings the first fence, the segment
//! has no key either, and every request is refused.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

/// Which arenas of one segment a WRITE may name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fence {
    /// Orders fences: a node keeps the highest it was sent.
    pub version: u64,
    /// Arenas granted before the fence and not revoked.
    pub live: BTreeSet<u64>,
    /// Arenas from this id on were granted after the fence was made.
    pub next: u64,
}

impl Fence {
    /// Whether a WRITE in `arena` may land.
    pub fn admits(&self, arena: u64) -> bool {
        arena >= self.next || self.live.contains(&arena)
    }
}

/// A segment's fence, the WRITEs in flight under it, and what was acknowledged.
#[derive(Debug, Default)]
pub struct FenceState {
    fence: Fence,
    /// WRITEs admitted and still moving bytes, by arena.
    writing: HashMap<u64, u32>,
}

impl FenceState {
    /// Installs `fence` if it is newer than the one held; whether it was.
    pub fn install(&mut self, fence: Fence) -> bool {
        if fence.version <= self.fence.version {
            return false;
        }
        self.fence = fence;
        true
    }

    /// The fence version this node may acknowledge: the one it holds, once
    /// no WRITE under an arena it excludes is still in flight; `None` until
    /// then.
    pub fn ackable(&self) -> Option<u64> {
        self.writing.keys().all(|arena| self.fence.admits(*arena)).then_some(self.fence.version)
    }

    /// The fence held.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }
}

/// One segment's fence, shared by its server's connections.
#[derive(Clone, Debug, Default)]
pub struct SharedFence(Arc<Mutex<FenceState>>);

/// A WRITE under an arena the segment's fence excludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the WRITE's arena {arena} was taken back by the masters (its range may belong to a newer put): the put \
     outlived its grant; put it again"
)]
pub struct Revoked {
    pub arena: u64,
}

impl SharedFence {
    fn lock(&self) -> std::sync::MutexGuard<'_, FenceState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a WRITE in `arena`: counted as in flight until the guard drops.
    pub fn begin_write(&self, arena: u64) -> Result<Writing, Revoked> {
        let mut state = self.lock();
        if !state.fence.admits(arena) {
            return Err(Revoked { arena });
        }
        *state.writing.entry(arena).or_insert(0) += 1;
        Ok(Writing { fence: self.clone(), arena })
    }

    /// Installs `fence` if newer; whether it was.
    pub fn install(&self, fence: Fence) -> bool {
        self.lock().install(fence)
    }

    /// See [`FenceState::ackable`].
    pub fn ackable(&self) -> Option<u64> {
        self.lock().ackable()
    }

    /// The fence held.
    pub fn fence(&self) -> Fence {
        self.lock().fence().clone()
    }
}

/// A WRITE admitted under the fence; dropping it ends the WRITE.
#[derive(Debug)]
pub struct Writing {
    fence: SharedFence,
    arena: u64,
}

impl Drop for Writing {
    fn drop(&mut self) {
        let mut state = self.fence.lock();
        if let Some(count) = state.writing.get_mut(&self.arena) {
            *count -= 1;
            if *count == 0 {
                state.writing.remove(&self.arena);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(version: u64, live: &[u64], next: u64) -> Fence {
        Fence { version, live: live.iter().copied().collect(), next }
    }

    #[test]
    fn a_fence_admits_live_and_newer_arenas_only() {
        let f = fence(1, &[3, 7], 10);
        assert!(f.admits(3) && f.admits(7) && f.admits(10) && f.admits(11));
        assert!(!f.admits(4) && !f.admits(9) && !f.admits(0));
        assert!(Fence::default().admits(0), "before the first fence nothing is excluded (no key either)");
    }

    #[test]
    fn only_newer_fences_install() {
        let shared = SharedFence::default();
        assert!(shared.install(fence(5, &[1], 4)));
        assert!(!shared.install(fence(4, &[1, 2], 4)), "an older leader's fence is ignored");
        assert!(!shared.install(fence(5, &[1, 2], 4)));
        assert!(shared.install(fence(6, &[], 4)));
        assert_eq!(shared.fence(), fence(6, &[], 4));
    }

    #[test]
    fn a_revoked_arena_is_refused_and_acknowledged_only_once_its_writes_end() {
        let shared = SharedFence::default();
        shared.install(fence(1, &[2], 3));
        let old = shared.begin_write(2).expect("arena 2 is live");
        let newer = shared.begin_write(5).expect("arena 5 was granted after the fence");
        assert_eq!(shared.ackable(), Some(1));
        shared.install(fence(2, &[], 3));
        assert_eq!(shared.begin_write(2).map(drop), Err(Revoked { arena: 2 }));
        assert_eq!(shared.ackable(), None, "a WRITE under arena 2 is still moving bytes");
        drop(old);
        assert_eq!(shared.ackable(), Some(2));
        drop(newer);
        assert_eq!(shared.ackable(), Some(2));
    }
}
