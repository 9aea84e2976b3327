//! The store node's side of the tiers (docs/TIERS.md): the copies the
//! leader hands it in Ping answers. A copy reads the object from a source
//! replica (READ capability), checks its crc32c, writes it into the target
//! range of one of this node's own segments (WRITE capability; a disk
//! write is durable when it is answered), and reports the outcome
//! (`ReportCopy`), whatever it is: the masters hold the target range until
//! then. A few copies run at once; the rest wait.
//!
//! Both moves go through the transfer engine, like any client's. A segment
//! of this node's own (the target always, a source often) takes the
//! engine's local route: no socket, and the checks its transfer server
//! would make (the capability, the alignment of a disk write, the block
//! checksums of a disk read).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mooncake_proto::master::{CopyTask, Replica};
use mooncake_transfer::TransferEngine;
use tokio::sync::{Notify, Semaphore, watch};

use super::local_segment::LocalSegment;
use crate::master_client::MasterClient;
use crate::remote::remote;

/// Copies one store node makes at once.
pub const COPIES_IN_PARALLEL: usize = 4;
/// Largest object a copy takes (it is held in memory once while copied).
pub const COPY_MAX_BYTES: u64 = 1 << 30;
/// How long one TakeCopies call may be held by the leader (at most half
/// the RPC timeout: `MasterClient::take_copies`).
pub const TAKE_COPIES_WAIT: Duration = Duration::from_secs(1);

/// Makes the copies the leader asks of this node.
pub(crate) struct Copier {
    master: Arc<MasterClient>,
    engine: Arc<TransferEngine>,
    /// The segments this node serves: their arena fences ride on TakeCopies.
    local: Arc<LocalSegment>,
    client_id: u64,
    running: Arc<Semaphore>,
    /// Copies handed to this node and not yet reported.
    pending: AtomicUsize,
    /// `planted.unwritten_copies()`: copies are reported made, unwritten.
    unwritten: bool,
    /// Notified when a copy is reported and fewer than
    /// [`COPIES_IN_PARALLEL`] remain ([`Copier::room`]).
    room: Notify,
}

impl Copier {
    pub(crate) fn new(
        master: Arc<MasterClient>,
        engine: Arc<TransferEngine>,
        local: Arc<LocalSegment>,
        client_id: u64,
        unwritten: bool,
    ) -> Arc<Self> {
        if unwritten {
            tracing::warn!(
                "DEVELOPMENT ONLY: --dev-unsafe-unwritten-copies is on; this store node reports copies it never \
                 writes, and objects will be lost"
            );
        }
        Arc::new(Copier {
            unwritten,
            master,
            engine,
            local,
            client_id,
            running: Arc::new(Semaphore::new(COPIES_IN_PARALLEL)),
            pending: AtomicUsize::new(0),
            room: Notify::new(),
        })
    }

    /// Resolves once fewer than [`COPIES_IN_PARALLEL`] copies are pending:
    /// a copy slot is free with none waiting for it.
    pub(crate) async fn room(&self) {
        loop {
            let freed = self.room.notified();
            if self.pending.load(Ordering::Acquire) < COPIES_IN_PARALLEL {
                return;
            }
            freed.await;
        }
    }

    /// Asks the leader for copies whenever a slot is free, each call held by
    /// the leader until copies are planned ([`TAKE_COPIES_WAIT`]): copies
    /// start as soon as the leader plans them, not at the next heartbeat,
    /// and a backlog moves at the speed of the copies. Ping answers still
    /// carry copies too (what this loop has not taken). A call answered at
    /// once with nothing (a master without TakeCopies, no leader, this node
    /// not registered) or failing is tried again after `interval` (the
    /// heartbeat's). Returns when `stop` changes.
    pub(crate) async fn take_copies(self: Arc<Self>, interval: Duration, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = self.room() => {}
                _ = stop.changed() => return,
            }
            let asked = Instant::now();
            let acks = self.local.fence_acks();
            let taken = tokio::select! {
                taken = self.master.take_copies_fenced(self.client_id, TAKE_COPIES_WAIT, acks) => taken,
                _ = stop.changed() => return,
            };
            // Fences first: a copy's target may be in a newer arena.
            let taken = taken.map(|reply| (reply.copy_tasks, self.local.install_fences(&reply.fences)));
            match taken {
                // Copies to make, or a new fence to acknowledge: ask again at once.
                Ok((copies, fenced)) if fenced || !copies.is_empty() => {
                    if !copies.is_empty() {
                        self.start(copies);
                    }
                }
                Ok(_) if asked.elapsed() >= TAKE_COPIES_WAIT / 4 => {}
                outcome => {
                    if let Err(e) = outcome {
                        tracing::debug!(error = %e, "asking for copies failed; the heartbeat still brings them");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(interval) => {}
                        _ = stop.changed() => return,
                    }
                }
            }
        }
    }

    /// Starts `tasks`; each reports its own outcome when done.
    pub(crate) fn start(self: &Arc<Self>, tasks: Vec<CopyTask>) {
        self.pending.fetch_add(tasks.len(), Ordering::AcqRel);
        for task in tasks {
            let copier = self.clone();
            tokio::spawn(async move {
                let _reported = Reported(&copier);
                // The slot is held while the bytes move, not while the
                // report commits: the next copy's reads overlap it.
                let outcome = {
                    let Ok(_permit) = copier.running.clone().acquire_owned().await else { return };
                    copier.copy(&task).await
                };
                if let Err(why) = &outcome {
                    tracing::warn!(key = %task.key, task = task.task_id, error = %why, "copy failed");
                }
                let error = outcome.err().unwrap_or_default();
                match copier.master.report_copy(copier.client_id, task.task_id, &error).await {
                    Ok(()) => {}
                    // The object was removed or replaced while it was copied,
                    // or the copy was given up (too late, or an earlier
                    // leader's): the copy is simply never referenced.
                    Err(e) if e.code() == Some(mooncake_proto::ErrorCode::ObjectNotFound) => {
                        tracing::debug!(key = %task.key, task = task.task_id, error = %e, "copy not recorded");
                    }
                    Err(e) => tracing::warn!(key = %task.key, task = task.task_id, error = %e,
                        "copy report failed; the masters give the copy up after the put discard timeout"),
                }
            });
        }
    }

    /// Reads the object from the first source that gives its bytes, and
    /// writes them to the target. The error says why, for the report.
    async fn copy(&self, task: &CopyTask) -> Result<(), String> {
        let target = task.target.as_ref().ok_or("the task names no target")?;
        if task.size == 0 || task.size > COPY_MAX_BYTES || task.size > target.len {
            return Err(format!("size {} does not fit the target of {} bytes", task.size, target.len));
        }
        let mut buf = vec![0u8; task.size as usize];
        let mut last = String::from("no source");
        let mut read = false;
        for source in &task.sources {
            match self.read(source, &mut buf).await {
                Ok(crc) if crc == task.checksum => {
                    read = true;
                    break;
                }
                Ok(crc) => {
                    last = format!("source on {} has crc32c {crc:#x}, not {:#x}", source.endpoint, task.checksum)
                }
                Err(e) => last = format!("source on {}: {e}", source.endpoint),
            }
        }
        if !read {
            return Err(format!("no source gave the object's bytes ({last})"));
        }
        if self.unwritten {
            return Ok(());
        }
        self.engine.write(&remote(target), target.offset, &buf).await.map_err(|e| format!("writing the copy: {e}"))
    }

    async fn read(&self, source: &Replica, buf: &mut [u8]) -> Result<u32, mooncake_transfer::TransferError> {
        self.engine.read_checksummed(&remote(source), source.offset, buf).await
    }
}

/// Counts one copy as done when dropped (reported, or its task ended any
/// other way), waking the heartbeat when a slot falls free.
struct Reported<'a>(&'a Copier);

impl Drop for Reported<'_> {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::AcqRel) <= COPIES_IN_PARALLEL {
            self.0.room.notify_one();
        }
    }
}
