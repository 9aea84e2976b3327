//! Pipelined READs: many small reads from one store node on one connection.
//!
//! A batch of small objects (`get_batch` of 4 KiB values) would otherwise pay
//! one round trip, and one wake-up of each side, per object. Here every
//! request header of the batch leaves in one send and the server, which
//! serves a connection's requests in order, answers them back to back; the
//! client reads the responses as they come, checksumming each payload while
//! the next one is still in flight. Writing and reading run at once, so a
//! batch larger than the socket buffers cannot deadlock.
//!
//! Each item has its own outcome. A refused READ (unknown segment, range) is
//! that item's error and the stream stays usable; an I/O or protocol error
//! fails every item not yet read and drops the connection.

use std::io;
use std::sync::atomic::Ordering;

use futures::future::join_all;
use mooncake_auth::capability::Capability;
use mooncake_segment::{MemoryError, SegmentId};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::stream::Stream;
use super::{Pool, TcpTransport, check_response, encoded, peer_gone, protocol_error};
use crate::error::TransferError;
use crate::frame::{self, FRAME_PAYLOAD_MAX_BYTES, Op, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES, RequestHeader};

/// Most requests in flight on one connection. A larger batch is cut into
/// pipelines of this many items that run at once on different lanes.
pub const PIPELINE_ITEMS_MAX: usize = 64;

/// One read of a pipelined batch: `buf.len()` bytes from `offset` of
/// `segment`, under `capability` (a READ grant covering the range).
#[derive(Debug)]
pub struct ReadItem<'a> {
    pub segment: SegmentId,
    pub capability: Option<Capability>,
    pub offset: u64,
    pub buf: &'a mut [u8],
}

/// The outcome of one item: the crc32c of the bytes read.
pub type ItemResult = Result<u32, TransferError>;

impl TcpTransport {
    /// Reads every item from the store node at `endpoint`, pipelined, and
    /// returns one result per item (in order): the crc32c of its bytes, or
    /// why it failed. Items that cannot be sent (beyond the frame limit, an
    /// offset that overflows) fail alone without touching the connection.
    pub async fn read_pipelined(&self, endpoint: &str, items: &mut [ReadItem<'_>]) -> Vec<ItemResult> {
        let mut results: Vec<Option<ItemResult>> = items.iter().map(unsendable).collect();
        let mut sendable: Vec<(usize, &mut ReadItem<'_>)> =
            items.iter_mut().enumerate().filter(|(i, _)| results[*i].is_none()).collect();
        let pool = self.pool(endpoint);
        let pipelines = sendable.chunks_mut(PIPELINE_ITEMS_MAX).map(|part| {
            let lane = pool.next_lane.fetch_add(1, Ordering::Relaxed) % pool.lanes.len();
            let pool = &pool;
            async move {
                let mut outcome: Vec<Option<ItemResult>> = part.iter().map(|_| None).collect();
                let run = self.pipeline_on_lane(pool, lane, part, &mut outcome);
                let timed_out = tokio::time::timeout(self.config.request_timeout, run).await.is_err();
                let indices: Vec<usize> = part.iter().map(|(i, _)| *i).collect();
                (indices, outcome, timed_out)
            }
        });
        for (indices, outcome, timed_out) in join_all(pipelines).await {
            for (index, result) in indices.into_iter().zip(outcome) {
                results[index] = Some(result.unwrap_or_else(|| Err(self.unfinished(endpoint, timed_out))));
            }
        }
        results.into_iter().map(|r| r.unwrap_or_else(|| Err(self.unfinished(endpoint, true)))).collect()
    }

    /// The error of an item whose response never came.
    fn unfinished(&self, endpoint: &str, timed_out: bool) -> TransferError {
        if timed_out {
            let after_ms = u64::try_from(self.config.request_timeout.as_millis()).unwrap_or(u64::MAX);
            TransferError::Timeout { endpoint: endpoint.to_owned(), after_ms }
        } else {
            peer_gone(endpoint, io::Error::new(io::ErrorKind::ConnectionAborted, "the pipeline broke before this item"))
        }
    }

    /// Runs one pipeline on lane `lane`, filling `outcome` as responses land.
    /// Like a single request, a reused connection the peer had closed gets one
    /// fresh try, but only if no response arrived on it.
    async fn pipeline_on_lane(
        &self,
        pool: &Pool,
        lane: usize,
        items: &mut [(usize, &mut ReadItem<'_>)],
        outcome: &mut [Option<ItemResult>],
    ) {
        let mut slot = pool.lanes[lane].lock().await;
        let (mut stream, reused) = match slot.take() {
            Some(stream) => (stream, true),
            None => match self.connect(&pool.endpoint).await {
                Ok(stream) => (stream, false),
                Err(err) => return fail_rest(outcome, &pool.endpoint, &err),
            },
        };
        let mut broken = self.exchange_pipeline(&mut stream, &pool.endpoint, items, outcome).await;
        if reused && outcome.iter().all(Option::is_none) && matches!(broken, Some(TransferError::PeerGone { .. })) {
            match self.connect(&pool.endpoint).await {
                Ok(fresh) => {
                    stream = fresh;
                    broken = self.exchange_pipeline(&mut stream, &pool.endpoint, items, outcome).await;
                }
                Err(err) => broken = Some(err),
            }
        }
        match broken {
            None => *slot = Some(stream),
            Some(err) => fail_rest(outcome, &pool.endpoint, &err),
        }
    }

    /// Sends every header and reads every response. Returns the error that
    /// broke the stream, if one did (items after it have no outcome).
    async fn exchange_pipeline(
        &self,
        stream: &mut Stream,
        endpoint: &str,
        items: &mut [(usize, &mut ReadItem<'_>)],
        outcome: &mut [Option<ItemResult>],
    ) -> Option<TransferError> {
        match stream {
            Stream::Plain(s) => {
                let (reader, writer) = s.split();
                self.exchange_pipeline_on(reader, writer, endpoint, items, outcome).await
            }
            Stream::Tls(s) => {
                let (reader, writer) = tokio::io::split(&mut **s);
                self.exchange_pipeline_on(reader, writer, endpoint, items, outcome).await
            }
        }
    }

    async fn exchange_pipeline_on<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
        &self,
        mut reader: R,
        mut writer: W,
        endpoint: &str,
        items: &mut [(usize, &mut ReadItem<'_>)],
        outcome: &mut [Option<ItemResult>],
    ) -> Option<TransferError> {
        let mut headers = Vec::with_capacity(items.len() * REQUEST_HEADER_BYTES);
        let mut ids = Vec::with_capacity(items.len());
        for (_, item) in items.iter() {
            let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
            let header = RequestHeader {
                op: Op::Read,
                request_id,
                segment_id: item.segment,
                offset: item.offset,
                length: item.buf.len() as u64,
                capability: encoded(item.capability.as_ref()),
            };
            headers.extend_from_slice(&frame::encode_request(&header));
            ids.push(request_id);
        }
        let send = async {
            writer.write_all(&headers).await.map_err(|e| peer_gone(endpoint, e))?;
            // A no-op on a socket; a TLS session may hold the last record back.
            writer.flush().await.map_err(|e| peer_gone(endpoint, e))
        };
        let receive = async {
            for (((_, item), id), slot) in items.iter_mut().zip(&ids).zip(outcome.iter_mut()) {
                let mut raw = [0u8; RESPONSE_HEADER_BYTES];
                reader.read_exact(&mut raw).await.map_err(|e| peer_gone(endpoint, e))?;
                let length = match check_response(endpoint, &raw, *id) {
                    Ok(length) => length,
                    Err(refused @ (TransferError::Remote { .. } | TransferError::Corrupt { .. })) => {
                        *slot = Some(Err(refused));
                        continue;
                    }
                    Err(broken) => return Err(broken),
                };
                if length != item.buf.len() as u64 {
                    return Err(protocol_error(
                        endpoint,
                        format!("READ answered {length} bytes, asked for {}", item.buf.len()),
                    ));
                }
                reader.read_exact(item.buf).await.map_err(|e| peer_gone(endpoint, e))?;
                *slot = Some(Ok(mooncake_segment::checksum::crc32c(item.buf)));
            }
            Ok(())
        };
        match tokio::join!(send, receive) {
            (_, Err(err)) | (Err(err), Ok(())) => Some(err),
            (Ok(()), Ok(())) => None,
        }
    }
}

/// Why `item` cannot be sent at all, if it cannot.
fn unsendable(item: &ReadItem<'_>) -> Option<ItemResult> {
    let len = item.buf.len() as u64;
    if len > FRAME_PAYLOAD_MAX_BYTES || item.offset.checked_add(len).is_none() {
        return Some(Err(TransferError::Memory(MemoryError::OutOfRange {
            offset: item.offset,
            len,
            size: FRAME_PAYLOAD_MAX_BYTES,
        })));
    }
    None
}

/// Gives every item without an outcome a copy of `err`.
fn fail_rest(outcome: &mut [Option<ItemResult>], endpoint: &str, err: &TransferError) {
    for slot in outcome.iter_mut().filter(|s| s.is_none()) {
        *slot = Some(Err(copy_of(endpoint, err)));
    }
}

/// A stand-in for `err` (I/O errors are not `Clone`) that keeps its kind and
/// message, so retry decisions see the same class of error.
fn copy_of(endpoint: &str, err: &TransferError) -> TransferError {
    match err {
        TransferError::PeerGone { source, .. } => {
            peer_gone(endpoint, io::Error::new(source.kind(), source.to_string()))
        }
        TransferError::Timeout { after_ms, .. } => {
            TransferError::Timeout { endpoint: endpoint.to_owned(), after_ms: *after_ms }
        }
        TransferError::Busy { .. } => TransferError::Busy { endpoint: endpoint.to_owned() },
        TransferError::Corrupt { .. } => TransferError::Corrupt { endpoint: endpoint.to_owned() },
        TransferError::Remote { status, .. } => {
            TransferError::Remote { status: *status, endpoint: endpoint.to_owned() }
        }
        other => protocol_error(endpoint, other.to_string()),
    }
}
