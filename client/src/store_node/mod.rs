//! The store-node role of a client: what a process that contributes memory
//! (`global_segment_size` > 0) or a disk segment does besides its own puts
//! and gets, as one type, [`StoreNode`], that a [`Client`](crate::Client)
//! owns. [`LocalSegment`] serves its segments (the transfer server and the
//! registry behind it, the shm files, the disk file and its scrub); `copier`
//! makes the copies between tiers the leader asks of it (docs/TIERS.md);
//! `heartbeat` keeps the client registered, and a store node's segments
//! mounted, with the masters.
//!
//! A plain client (no segment) has no store node and uses only the
//! heartbeat's registration.

pub(crate) mod copier;
pub(crate) mod heartbeat;
mod local_segment;

use std::sync::Arc;
use std::time::Duration;

use mooncake_transfer::{ServerConfig, TransferEngine};

use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::master_client::MasterClient;
use copier::Copier;
pub use local_segment::LocalSegment;

/// How long stopping tries to unmount the memory segment before giving up.
const STOP_UNMOUNT_TIMEOUT: Duration = Duration::from_secs(3);

/// The store-node role of this process: its segments, served, and the copier
/// that makes the copies between tiers the leader asks of it. Clones share
/// them (the heartbeat holds one).
#[derive(Clone)]
pub struct StoreNode {
    local: Arc<LocalSegment>,
    copier: Arc<Copier>,
    /// Stopping hands the memory segment over to a successor instead of
    /// unmounting it (`ClientConfig::hand_over_on_close`, with a stable
    /// identity).
    hand_over: bool,
}

impl StoreNode {
    /// Creates and serves this process's segments (`size` bytes of memory,
    /// and the disk segment if `cfg` names one). Nothing is mounted yet: the
    /// client registers them (`heartbeat::register`).
    pub(crate) async fn start(
        cfg: &ClientConfig,
        client_id: u64,
        size: u64,
        server: ServerConfig,
        master: &Arc<MasterClient>,
        engine: &Arc<TransferEngine>,
    ) -> Result<StoreNode, ClientError> {
        let local = Arc::new(LocalSegment::start(cfg, client_id, size, server).await?);
        // This process's own segments are reached without a socket (a store
        // node's copies to its own disk, a client reading what it serves).
        engine.route_locally(local.registry().clone());
        let copier =
            Copier::new(master.clone(), engine.clone(), local.clone(), client_id, cfg.planted.unwritten_copies());
        let hand_over = cfg.hand_over_on_close && LocalSegment::keeps_identity(cfg);
        Ok(StoreNode { local, copier, hand_over })
    }

    /// The segments it serves.
    pub fn segment(&self) -> &LocalSegment {
        &self.local
    }

    pub(crate) fn local(&self) -> &Arc<LocalSegment> {
        &self.local
    }

    pub(crate) fn copier(&self) -> &Arc<Copier> {
        &self.copier
    }

    /// Scrubs the disk segment found at start (if any) in the background;
    /// its reads are verified either way.
    pub(crate) fn scrub_in_background(&self) {
        let local = self.local.clone();
        tokio::spawn(async move {
            if let Err(e) = local.scrub_disk().await {
                tracing::error!(error = %e, "scrubbing the disk segment failed; its reads are still verified");
            }
        });
    }

    /// Unmounts the memory segment and stops serving. Bounded: a stopping
    /// node must not hang on unreachable masters (its segment then expires
    /// after client_ttl). A disk segment stays mounted: once the
    /// registration expires the masters keep it, detached, for the disk
    /// replica grace (docs/TIERS.md).
    /// A node that hands over (`hand_over_on_close`) leaves the segment
    /// mounted and its memory in /dev/shm for its successor instead.
    pub(crate) async fn stop(self, master: &MasterClient, client_id: u64) {
        if self.hand_over && self.local.hand_over() {
            tracing::info!(
                client = format!("{client_id:016x}"),
                segment = format!("{:016x}", self.local.spec().id),
                "stopping: the segment stays mounted and its memory in place for the next store node of this \
                 client id (it keeps the objects if it starts within client_ttl)"
            );
            self.local.stop().await;
            return;
        }
        let unmount = master.unmount_segment(client_id, self.local.spec().id);
        match tokio::time::timeout(STOP_UNMOUNT_TIMEOUT, unmount).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "unmount on close"),
            Err(_) => tracing::warn!("unmount on close: no master answered; the segment will expire"),
        }
        self.local.stop().await;
    }
}
