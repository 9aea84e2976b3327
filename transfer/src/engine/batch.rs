//! Batched reads: [`TransferEngine::read_batch_checksummed`] reads many
//! objects at once, each by the cheapest route. This process's own segments
//! take the local route; with a UCX route, every other segment whose node
//! is not known to lack UCX is read one-sided, each item on its own; other
//! same-host targets are copied over shared memory; small reads from one store node share a pipeline on one
//! connection ([`TcpTransport::read_pipelined`](crate::TcpTransport::read_pipelined));
//! every other read (larger than the split size, or out of range) takes the
//! path of a single read.

use std::collections::HashMap;

use futures::future::join_all;

use super::TransferEngine;
use crate::error::TransferError;
use crate::stats::TransportKind;
use crate::tcp::{ReadItem, check_target_range};
use crate::transport::RemoteSegment;

/// One read of a batch: `buf.len()` bytes from `offset` of `target`.
#[derive(Debug)]
pub struct BatchRead<'a> {
    pub target: &'a RemoteSegment,
    pub offset: u64,
    pub buf: &'a mut [u8],
}

impl TransferEngine {
    /// Reads every item and returns, in order, the crc32c of each item's
    /// bytes or why that item failed. Items fail alone: one unknown segment
    /// or dead store node does not fail the others.
    pub async fn read_batch_checksummed(&self, items: Vec<BatchRead<'_>>) -> Vec<Result<u32, TransferError>> {
        let mut results: Vec<Option<Result<u32, TransferError>>> = items.iter().map(|_| None).collect();
        let split_bytes = self.tcp.config().split_bytes;
        let mut pipelined: HashMap<&str, Vec<(usize, ReadItem<'_>)>> = HashMap::new();
        let mut singles = Vec::new();
        for (index, BatchRead { target, offset, buf }) in items.into_iter().enumerate() {
            if self.local_route(target).is_some() || self.reads_over_ucx(target) {
                singles.push((index, target, offset, buf));
            } else if let Some(memory) = self.shm_route(target) {
                results[index] = Some(self.read_shm_checksummed(&memory, target, offset, buf));
            } else if buf.len() as u64 <= split_bytes && check_target_range(target, offset, buf.len()).is_ok() {
                let item = ReadItem { segment: target.id, capability: target.capability, offset, buf };
                pipelined.entry(target.endpoint.as_str()).or_default().push((index, item));
            } else {
                // Large (chunked over lanes) or refused before any byte moves.
                singles.push((index, target, offset, buf));
            }
        }
        let pipelines = pipelined.into_iter().map(|(endpoint, batch)| async move {
            let (indices, mut items): (Vec<usize>, Vec<ReadItem<'_>>) = batch.into_iter().unzip();
            let outcome = self.tcp.read_pipelined(endpoint, &mut items).await;
            for (item, result) in items.iter().zip(&outcome) {
                self.stats.record(TransportKind::Tcp, endpoint, false, item.buf.len() as u64, result.is_ok());
            }
            indices.into_iter().zip(outcome).collect::<Vec<_>>()
        });
        let singles = singles.into_iter().map(|(index, target, offset, buf)| async move {
            (index, self.read_checksummed(target, offset, buf).await)
        });
        let (pipelined, singles) = tokio::join!(join_all(pipelines), join_all(singles));
        for (index, result) in pipelined.into_iter().flatten().chain(singles) {
            results[index] = Some(result);
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(TransferError::InvalidConfig("batch read lost an item (a bug)".to_owned())))
            })
            .collect()
    }
}
