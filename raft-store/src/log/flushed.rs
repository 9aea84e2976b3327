//! How far this node's log is on stable storage, and waiting for it.
//!
//! openraft 0.9 waits for the leader's own log flush before it replicates,
//! which puts two fsyncs (leader, then follower) end to end on every commit.
//! Like etcd's Raft, we let the leader replicate while its own fsync runs:
//! the log store completes the append of the leader's *own* entries at once
//! (`log/mod.rs`) and syncs them in the background, recording the synced
//! prefix here. openraft may then count the leader towards a commit before
//! the leader's copy is durable; nothing of such an entry leaves the leader
//! until it is: clients are answered, reads are answered from the state, the
//! commit index is told to followers or saved, and snapshots are stored only
//! up to the flushed prefix. Every acknowledged write is still on a quorum's
//! disks (the follower that acked it, and the leader).
//!
//! On followers (and for entries not written by this node as leader) the
//! append completes only after the sync, as before, so their acks stay true.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use crate::type_config::LogId;

/// The last log id whose entry (and every one before it) is synced.
#[derive(Clone)]
pub struct FlushedLog {
    tx: Arc<watch::Sender<Option<LogId>>>,
    /// Bumped by every [`cut_back`](Self::cut_back): a sync of entries
    /// written before a cut must not mark the entries that replaced them.
    cuts: Arc<AtomicU64>,
}

impl FlushedLog {
    /// Starts at `initial`: what the log held when it was opened is on disk.
    pub fn new(initial: Option<LogId>) -> Self {
        FlushedLog { tx: Arc::new(watch::Sender::new(initial)), cuts: Arc::new(AtomicU64::new(0)) }
    }

    /// The last synced log id.
    pub fn get(&self) -> Option<LogId> {
        *self.tx.borrow()
    }

    /// The index of the last synced entry (0 when none).
    pub fn index(&self) -> u64 {
        self.get().map(|l| l.index).unwrap_or(0)
    }

    /// How many times the log was cut back so far (stamp writes with it).
    pub(crate) fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::Acquire)
    }

    /// Everything up to `to` is on disk (covered by a purge or a snapshot).
    pub(crate) fn advance(&self, to: LogId) {
        self.advance_written(self.cuts(), to);
    }

    /// A sync covered entries up to `to`, written when [`cuts`](Self::cuts)
    /// was `cuts`; ignored if the log was cut back since (those entries may
    /// be gone, and others written at their indexes not synced yet).
    pub(crate) fn advance_written(&self, cuts: u64, to: LogId) {
        self.tx.send_if_modified(|cur| {
            // Checked under the watch's lock, which cut_back also holds.
            let newer = self.cuts.load(Ordering::Acquire) == cuts && cur.is_none_or(|c| c.index < to.index);
            if newer {
                *cur = Some(to);
            }
            newer
        });
    }

    /// The log was cut after `to` (a follower truncating conflicting entries).
    pub(crate) fn cut_back(&self, to: Option<LogId>) {
        self.tx.send_if_modified(|cur| {
            self.cuts.fetch_add(1, Ordering::AcqRel);
            let older = to.map(|t| t.index) < cur.map(|c| c.index);
            if older {
                *cur = to;
            }
            older
        });
    }

    /// Waits until the entry at `index` (and all before it) is synced.
    pub async fn wait_for(&self, index: u64) {
        if index == 0 || self.get().is_some_and(|c| c.index >= index) {
            return; // the common case: no subscription
        }
        let mut rx = self.tx.subscribe();
        // The sender lives as long as any FlushedLog clone; ours is one.
        let _ = rx.wait_for(|cur| cur.is_some_and(|c| c.index >= index) || index == 0).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    #[tokio::test]
    async fn waiters_wake_when_the_prefix_they_need_is_synced() {
        let f = FlushedLog::new(Some(id(1, 3)));
        f.wait_for(3).await;
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.wait_for(5).await })
        };
        tokio::task::yield_now().await;
        f.advance(id(1, 4));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        f.advance(id(2, 6));
        waiter.await.unwrap();
        f.advance(id(1, 5)); // an older completion never moves it back
        assert_eq!(f.index(), 6);
        f.cut_back(Some(id(2, 4)));
        assert_eq!(f.index(), 4);
        f.cut_back(Some(id(2, 5))); // not a cut
        assert_eq!(f.index(), 4);
    }

    #[test]
    fn a_sync_of_entries_written_before_a_cut_marks_nothing() {
        let f = FlushedLog::new(Some(id(1, 3)));
        let stamp = f.cuts();
        // Entries 4..=6 of term 1 written; before their sync completes the
        // follower truncates from 5 (a new leader's log differs there).
        f.cut_back(Some(id(1, 4)));
        f.advance_written(stamp, id(1, 6));
        assert_eq!(f.index(), 3, "entries 5 and 6 were replaced; their old sync proves nothing");
        f.advance_written(f.cuts(), id(2, 6));
        assert_eq!(f.index(), 6);
    }
}
