//! Group commit of log appends. `append` writes entries into sled (readable
//! at once) and hands openraft's completion callback to the flusher thread;
//! the thread makes everything written so far durable with one sync and then
//! completes every callback that was waiting, in order; appends that arrive
//! during a sync share the next one. The thread keeps the blocking sync off
//! the runtime's workers, so RPCs and reads go on while it runs. openraft
//! 0.9's core itself waits for the callback before it replicates
//! (`append_to_log` awaits it), so the leader's own sync stays on the commit
//! path; syncing inline in `append` instead measured no faster
//! (`mooncake bench meta`, 2026-11-30).

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use openraft::storage::LogFlushed;

use crate::durable::DataSync;
use crate::types::TypeConfig;

/// Appends waiting for a sync. openraft bounds its own in-flight appends far
/// below this; the bound only keeps a stalled disk from growing memory.
const FLUSH_QUEUE_MAX: usize = 4_096;

type Callback = LogFlushed<TypeConfig>;

/// The flusher thread of one log store; dropping it drains and joins.
pub(crate) struct Flusher {
    tx: Option<SyncSender<Callback>>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    pub(crate) fn start(sync: DataSync) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(FLUSH_QUEUE_MAX);
        let thread = std::thread::Builder::new().name("raft-log-flusher".into()).spawn(move || run(&sync, &rx))?;
        Ok(Flusher { tx: Some(tx), thread: Some(thread) })
    }

    /// Completes `callback` once everything written before this call is durable.
    pub(crate) fn submit(&self, callback: Callback) -> Result<(), std::io::Error> {
        let gone = || std::io::Error::other("log flusher thread has stopped");
        let tx = self.tx.as_ref().ok_or_else(gone)?;
        tx.send(callback).map_err(|returned| {
            returned.0.log_io_completed(Err(gone()));
            gone()
        })
    }
}

fn run(sync: &DataSync, rx: &Receiver<Callback>) {
    while let Ok(first) = rx.recv() {
        let mut waiting = vec![first];
        waiting.extend(rx.try_iter());
        let result = sync.sync();
        if let Err(e) = &result {
            tracing::error!(error = %e, waiting = waiting.len(), "log sync failed");
        }
        for cb in waiting {
            cb.log_io_completed(result.as_ref().map(|_| ()).map_err(|e| std::io::Error::other(e.to_string())));
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        // Closing the channel ends the thread after it completes what waits;
        // joining releases its database handle before anyone reopens the store.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
