//! The store node's side of the tiers (docs/TIERS.md): the copies the
//! leader hands it in Ping answers. A copy reads the object from a source
//! replica (READ capability), checks its crc32c, writes it into the target
//! range of one of this node's own segments (WRITE capability; a disk
//! write is durable when it is answered), and reports the outcome
//! (`ReportCopy`), whatever it is: the masters hold the target range until
//! then. A few copies run at once; the rest wait.
//!
//! Both moves go through the transfer engine, like any client's: the
//! store node's own transfer server checks the capability, the alignment
//! of a disk write and the block checksums of a disk read.

use std::sync::Arc;

use mooncake_proto::master::{CopyTask, Replica};
use mooncake_transfer::TransferEngine;
use tokio::sync::Semaphore;

use crate::master_client::MasterClient;
use crate::store_client::remote;

/// Copies one store node makes at once.
pub const COPIES_IN_PARALLEL: usize = 4;
/// Largest object a copy takes (it is held in memory once while copied).
pub const COPY_MAX_BYTES: u64 = 1 << 30;

/// Makes the copies the leader asks of this node.
pub(crate) struct Copier {
    master: Arc<MasterClient>,
    engine: Arc<TransferEngine>,
    client_id: u64,
    running: Arc<Semaphore>,
}

impl Copier {
    pub(crate) fn new(master: Arc<MasterClient>, engine: Arc<TransferEngine>, client_id: u64) -> Arc<Self> {
        Arc::new(Copier { master, engine, client_id, running: Arc::new(Semaphore::new(COPIES_IN_PARALLEL)) })
    }

    /// Starts `tasks`; each reports its own outcome when done.
    pub(crate) fn start(self: &Arc<Self>, tasks: Vec<CopyTask>) {
        for task in tasks {
            let copier = self.clone();
            tokio::spawn(async move {
                let Ok(_permit) = copier.running.clone().acquire_owned().await else { return };
                let outcome = copier.copy(&task).await;
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
        self.engine.write(&remote(target), target.offset, &buf).await.map_err(|e| format!("writing the copy: {e}"))
    }

    async fn read(&self, source: &Replica, buf: &mut [u8]) -> Result<u32, mooncake_transfer::TransferError> {
        self.engine.read_checksummed(&remote(source), source.offset, buf).await
    }
}
