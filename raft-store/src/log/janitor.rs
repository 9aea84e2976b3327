//! Deleting purged log entries off the Raft core: the janitor thread of one
//! log store takes "everything up to index N is purged" and deletes those
//! entries in batches, by key arithmetic (nothing is read: entries can be
//! large). Deletions are not synced: purged entries are invisible already
//! (`log/mod.rs`), and a crash only means the next open deletes them.
//! Dropping the janitor finishes what was asked and joins the thread, so
//! the database handle it holds is released before anyone reopens the store.

use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

/// Entries deleted per batch. Small: sled applies a batch under its
/// store-wide write lock, so a batch of 4,096 entries (400 MB of a 10 M
/// object load's log) held up the log's own appends and the leader's
/// heartbeats long enough for an election right after a snapshot.
const BATCH: u64 = 64;
/// Pause between two batches: the log's appends get the lock in between.
const PAUSE: std::time::Duration = std::time::Duration::from_millis(1);

pub(crate) struct Janitor {
    tx: Option<Sender<u64>>,
    thread: Option<JoinHandle<()>>,
}

impl Janitor {
    pub(crate) fn start(log: sled::Tree) -> std::io::Result<Self> {
        let (tx, rx) = channel::<u64>();
        let thread = std::thread::Builder::new().name("raft-log-janitor".into()).spawn(move || {
            while let Ok(upto) = rx.recv() {
                // Only the highest mark waiting matters.
                let upto = rx.try_iter().fold(upto, u64::max);
                if let Err(e) = delete_upto(&log, upto) {
                    tracing::warn!(error = %e, upto, "deleting purged log entries (retried at the next start)");
                }
            }
        })?;
        Ok(Janitor { tx: Some(tx), thread: Some(thread) })
    }

    /// Entries up to `upto` are purged: delete them.
    pub(crate) fn purged(&self, upto: u64) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(upto);
        }
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Deletes every entry with index <= `upto`, in batches, from the first.
pub(crate) fn delete_upto(log: &sled::Tree, upto: u64) -> sled::Result<()> {
    let Some((first, _)) = log.first()? else { return Ok(()) };
    let Ok(first) = <[u8; 8]>::try_from(first.as_ref()) else { return Ok(()) };
    let mut from = u64::from_be_bytes(first);
    while from <= upto {
        let to = upto.min(from.saturating_add(BATCH - 1));
        let mut batch = sled::Batch::default();
        for i in from..=to {
            batch.remove(&i.to_be_bytes());
        }
        log.apply_batch(batch)?;
        if to == u64::MAX {
            break;
        }
        from = to + 1;
        if from <= upto {
            std::thread::sleep(PAUSE);
        }
    }
    Ok(())
}
