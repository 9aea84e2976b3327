//! Group commit of log appends. `append` writes entries into sled (readable
//! at once) and hands a job to the flusher thread: openraft's completion
//! callback (followers' appends), or just the entries' last log id (the
//! leader's own appends, completed at once — see `flushed.rs`). The thread
//! makes everything written so far durable with one sync, records the synced
//! prefix in [`FlushedLog`], then completes every callback that was waiting,
//! in order; appends that arrive during a sync share the next one. The
//! thread keeps the leader's blocking sync off the runtime's workers, so
//! RPCs and reads go on while it runs. A follower's append submitted while
//! nothing waits for the thread is synced by its caller instead
//! ([`Flusher::submit`] says why).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use openraft::storage::LogFlushed;

use crate::data_dir::durable::DataSync;
use crate::log::flushed::FlushedLog;
use crate::type_config::{LogId, TypeConfig};

/// Appends waiting for a sync. openraft bounds its own in-flight appends far
/// below this; the bound only keeps a stalled disk from growing memory.
const FLUSH_QUEUE_MAX: usize = 4_096;

type Callback = LogFlushed<TypeConfig>;

/// What waits for the next sync.
pub(crate) struct Job {
    /// Completed after the sync (None: completed already).
    pub callback: Option<Callback>,
    /// The last entry written before the job was submitted.
    pub last: LogId,
    /// [`FlushedLog::cuts`] when it was written.
    pub cuts: u64,
}

/// The flusher thread of one log store; dropping it drains and joins.
pub(crate) struct Flusher {
    tx: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
    /// Jobs submitted whose callbacks have not all run yet.
    pending: Arc<AtomicUsize>,
    /// What the thread syncs and records, for a job synced by its caller.
    sync: DataSync,
    flushed: FlushedLog,
}

impl Flusher {
    pub(crate) fn start(sync: DataSync, flushed: FlushedLog) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(FLUSH_QUEUE_MAX);
        let pending = Arc::new(AtomicUsize::new(0));
        let counted = pending.clone();
        let (thread_sync, thread_flushed) = (sync.clone(), flushed.clone());
        let thread = std::thread::Builder::new()
            .name("raft-log-flusher".into())
            .spawn(move || run(&thread_sync, &thread_flushed, &rx, &counted))?;
        Ok(Flusher { tx: Some(tx), thread: Some(thread), pending, sync, flushed })
    }

    /// Syncs everything written before this call, then records `job.last`
    /// as flushed and completes its callback.
    ///
    /// A job with a callback (a follower's append) submitted while nothing
    /// waits for the thread is synced right here, on the caller's task, and
    /// completed at once: followers receive one AppendEntries at a time,
    /// each carrying all the leader batched, so there is nothing to group,
    /// and handing the job to the thread and back costs two thread
    /// wake-ups (slow on an idle VM) on every commit's critical path. With
    /// jobs queued it goes to the thread, behind them, so completions stay
    /// in order. Jobs without a callback (the leader's own entries, which
    /// replicate while they sync) always go to the thread.
    pub(crate) fn submit(&self, job: Job) -> Result<(), std::io::Error> {
        if job.callback.is_some() && self.pending.load(Ordering::Acquire) == 0 {
            sync_and_complete(&self.sync, &self.flushed, vec![job]);
            return Ok(());
        }
        let gone = || std::io::Error::other("log flusher thread has stopped");
        let tx = self.tx.as_ref().ok_or_else(gone)?;
        self.pending.fetch_add(1, Ordering::AcqRel);
        tx.send(job).map_err(|returned| {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            if let Some(cb) = returned.0.callback {
                cb.log_io_completed(Err(gone()));
            }
            gone()
        })
    }
}

fn run(sync: &DataSync, flushed: &FlushedLog, rx: &Receiver<Job>, pending: &AtomicUsize) {
    while let Ok(first) = rx.recv() {
        let mut waiting = vec![first];
        waiting.extend(rx.try_iter());
        let done = waiting.len();
        sync_and_complete(sync, flushed, waiting);
        pending.fetch_sub(done, Ordering::AcqRel);
    }
}

/// One sync covering every job in `jobs` (all written before it), then
/// each job's last entry recorded as synced and its callback completed, in
/// order.
fn sync_and_complete(sync: &DataSync, flushed: &FlushedLog, jobs: Vec<Job>) {
    // A failed sync ends the process (crash-only, `fatal.rs`): the leader's
    // own entries were reported appended before their sync, so there is
    // nobody to hand this error to that could undo that.
    if let Err(e) = sync.sync() {
        crate::fatal::storage_failed("sync of the Raft log", &e);
    }
    for job in &jobs {
        flushed.advance_written(job.cuts, job.last);
    }
    for job in jobs {
        if let Some(cb) = job.callback {
            cb.log_io_completed(Ok(()));
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
