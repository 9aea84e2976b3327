//! Batched reads: [`TransferEngine::read_batch_checksummed`] reads many
//! objects at once, each by the cheapest route. Same-host targets are copied
//! over shared memory; small reads from one store node share a pipeline on
//! one connection ([`TcpTransport::read_pipelined`]); reads larger than the
//! split size keep the chunked, multi-lane path of a single read.

use std::collections::HashMap;

use futures::future::join_all;

use super::{RemoteSegment, TransferEngine};
use crate::error::TransferError;
use crate::stats::TransportKind;
use crate::tcp::{ReadItem, check_target_range};

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
        let mut large = Vec::new();
        for (index, BatchRead { target, offset, buf }) in items.into_iter().enumerate() {
            if let Some(memory) = self.shm_route(target) {
                let result = memory
                    .read_at(offset, buf)
                    .map(|()| mooncake_segment::checksum::crc32c(buf))
                    .map_err(TransferError::from);
                self.stats.record(TransportKind::Shm, &target.endpoint, false, buf.len() as u64, result.is_ok());
                results[index] = Some(result);
            } else if let Err(err) = check_target_range(target, offset, buf.len()) {
                self.stats.record(TransportKind::Tcp, &target.endpoint, false, buf.len() as u64, false);
                results[index] = Some(Err(err));
            } else if buf.len() as u64 > split_bytes {
                large.push((index, target, offset, buf));
            } else {
                let item = ReadItem { segment: target.id, offset, buf };
                pipelined.entry(target.endpoint.as_str()).or_default().push((index, item));
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
        let singles = large.into_iter().map(|(index, target, offset, buf)| async move {
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
