//! The TCP backend of the client side: [`TcpTransport`] keeps a pool of
//! connections ("lanes") per store node and moves bytes with the
//! [`crate::frame`] protocol, straight between the caller's buffer and the
//! socket.
//!
//! A lane carries one request at a time, or one pipeline of small READs
//! ([`TcpTransport::read_pipelined`]). A transfer larger than
//! [`TcpConfig::split_bytes`] is cut into chunks that run at once on
//! different lanes. A lane whose request failed drops its connection (the
//! stream may be mid-frame) and connects afresh on its next use; a request
//! that fails on a reused connection because the peer closed it is tried once
//! more on a new one, as READ and WRITE are idempotent.
//!
//! With [`TcpConfig::tls`] every lane is mutual TLS: the handshake is part of
//! the connect (under the request timeout), the store node's certificate is
//! verified against the CA and this client's certificate is presented.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::try_join_all;
use mooncake_auth::capability::{CAPABILITY_BYTES, Capability};
use mooncake_segment::{DISK_BLOCK_BYTES, MemoryError, SegmentId};
use mooncake_tls::TlsConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::error::TransferError;
use crate::frame::{self, FRAME_PAYLOAD_MAX_BYTES, Op, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES, RequestHeader};
use crate::sockopt;
use crate::transport::{RemoteSegment, Transport};

mod pipeline;
mod stream;
pub use pipeline::{ItemResult, PIPELINE_ITEMS_MAX, ReadItem};
use stream::Stream;

/// Most lanes per endpoint: beyond a few dozen, more connections only add
/// context switches (the data path is bound by memory bandwidth).
pub const TCP_LANES_MAX: usize = 64;

/// Most endpoints with a cached pool. A client talks to every store node, so
/// this is the cluster size it serves without reconnecting (100-node target,
/// with room); when full, one pool is dropped and its lanes close once idle.
pub const TCP_ENDPOINTS_MAX: usize = 4096;

/// Smallest `split_bytes`: below a page, chunking costs more round trips
/// than it gains.
const SPLIT_MIN_BYTES: u64 = 4096;

/// Largest WRITE payload copied next to its header to leave in one send.
const COALESCE_MAX_BYTES: usize = 64 * 1024;

/// Configuration of [`TcpTransport`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// Connections per endpoint, each carrying one request at a time.
    /// More lanes let chunks and concurrent transfers overlap, at one socket
    /// and its buffers each. Default 4; 1..=[`TCP_LANES_MAX`].
    pub lanes: usize,
    /// A transfer longer than this is split into chunks (of at least this
    /// size, at most one per lane) sent in parallel. Default 1 MiB, so a
    /// 4 MiB object goes out as four 1 MiB chunks on four lanes.
    pub split_bytes: u64,
    /// Deadline of one request (lane wait, connect, header, payload,
    /// response); expiry gives [`TransferError::Timeout`]. Default 10 s.
    pub request_timeout: Duration,
    /// Congestion control set per socket (`TCP_CONGESTION`), e.g. "reno" or
    /// "cubic"; `None` keeps the system default. Default `Some("reno")`:
    /// twice bbr's loopback throughput on this machine kind.
    pub congestion: Option<String>,
    /// Mutual TLS to every store node: its certificate is verified against
    /// the CA (and the config's server name), this client's is presented.
    /// Costs a handshake per new lane and the encryption of every byte.
    /// Default `None`: plain TCP (docs/SECURITY.md).
    pub tls: Option<TlsConfig>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            lanes: 4,
            split_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            congestion: Some("reno".to_owned()),
            tls: None,
        }
    }
}

impl TcpConfig {
    /// Checks every field, naming the bad value.
    pub fn validate(&self) -> Result<(), TransferError> {
        let bad = |msg: String| Err(TransferError::InvalidConfig(msg));
        if self.lanes == 0 || self.lanes > TCP_LANES_MAX {
            return bad(format!("lanes = {} must be in 1..={TCP_LANES_MAX}", self.lanes));
        }
        if !(SPLIT_MIN_BYTES..=FRAME_PAYLOAD_MAX_BYTES).contains(&self.split_bytes) {
            return bad(format!(
                "split_bytes = {} must be in {SPLIT_MIN_BYTES}..={FRAME_PAYLOAD_MAX_BYTES}",
                self.split_bytes
            ));
        }
        if self.request_timeout.is_zero() {
            return bad("request_timeout must be positive".to_owned());
        }
        match &self.congestion {
            Some(name) => sockopt::validate_congestion(name).or_else(bad),
            None => Ok(()),
        }
    }
}

/// One connection slot; `None` until first use and after an error.
type Lane = tokio::sync::Mutex<Option<Stream>>;

/// The lanes to one endpoint.
#[derive(Debug)]
struct Pool {
    endpoint: String,
    lanes: Vec<Lane>,
    /// Round-robin start lane of the next transfer.
    next_lane: AtomicUsize,
}

/// The segment of a transfer and the capability every chunk carries.
#[derive(Clone, Copy)]
struct Grant<'a> {
    segment_id: SegmentId,
    capability: &'a [u8; CAPABILITY_BYTES],
}

/// The caller's side of one request's payload.
enum Payload<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
    /// A UCX_KEY request for `len` bytes of the segment; the key lands in `reply`.
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    Key {
        len: u64,
        reply: &'a mut Vec<u8>,
    },
}

/// Client side of the TCP data path. Cheap to share (`Arc`) between tasks.
#[derive(Debug)]
pub struct TcpTransport {
    config: TcpConfig,
    pools: Mutex<HashMap<String, Arc<Pool>>>,
    next_request_id: AtomicU64,
}

impl TcpTransport {
    /// A transport with no connections yet (they open on first use).
    pub fn new(config: TcpConfig) -> Result<Self, TransferError> {
        config.validate()?;
        Ok(Self { config, pools: Mutex::new(HashMap::new()), next_request_id: AtomicU64::new(1) })
    }

    /// The configuration in force.
    pub fn config(&self) -> &TcpConfig {
        &self.config
    }

    /// Writes `data` to `[offset, offset + data.len())` of segment `segment`
    /// served at `endpoint` (`host:port`), under `capability` (a WRITE grant
    /// covering the range; without one the store node refuses). An empty
    /// `data` sends nothing.
    pub async fn write_to(
        &self,
        endpoint: &str,
        segment: SegmentId,
        capability: Option<&Capability>,
        offset: u64,
        data: &[u8],
    ) -> Result<(), TransferError> {
        let capability = encoded(capability);
        let grant = Grant { segment_id: segment, capability: &capability };
        let pool = self.pool(endpoint);
        let chunk = self.chunk_bytes(data.len());
        let offsets = chunk_offsets(offset, data.len(), chunk)?;
        let start = pool.next_lane.fetch_add(1, Ordering::Relaxed);
        let requests = data.chunks(chunk).zip(offsets).enumerate().map(|(index, (part, part_offset))| {
            let lane = &pool.lanes[(start + index) % pool.lanes.len()];
            self.request(&pool, lane, Op::Write, grant, part_offset, Payload::Write(part))
        });
        try_join_all(requests).await.map(drop)
    }

    /// Reads `buf.len()` bytes from `offset` of segment `segment` served at
    /// `endpoint` straight into `buf`, under `capability` (a READ grant
    /// covering the range). An empty `buf` sends nothing.
    pub async fn read_from(
        &self,
        endpoint: &str,
        segment: SegmentId,
        capability: Option<&Capability>,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), TransferError> {
        self.read_chunks(endpoint, segment, capability, offset, buf, false).await.map(drop)
    }

    /// [`read_from`](Self::read_from) that also returns the crc32c of the
    /// bytes read. Each chunk is checksummed as soon as it has landed, while
    /// the other chunks are still on the wire, and the parts are combined.
    pub async fn read_from_checksummed(
        &self,
        endpoint: &str,
        segment: SegmentId,
        capability: Option<&Capability>,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<u32, TransferError> {
        self.read_chunks(endpoint, segment, capability, offset, buf, true).await
    }

    /// The UCX key of `target`'s segment (`crate::frame::UcxKey`, encoded),
    /// asked under its READ grant for `[offset, offset + len)`; `None` when
    /// the node does not serve the segment over UCX (it answered UNSUPPORTED,
    /// or BAD_FRAME: a node older than the request).
    #[cfg_attr(not(feature = "ucx"), allow(dead_code))]
    pub(crate) async fn ucx_key(
        &self,
        target: &RemoteSegment,
        offset: u64,
        len: u64,
    ) -> Result<Option<Vec<u8>>, TransferError> {
        let capability = encoded(target.capability.as_ref());
        let grant = Grant { segment_id: target.id, capability: &capability };
        let pool = self.pool(&target.endpoint);
        let lane = &pool.lanes[pool.next_lane.fetch_add(1, Ordering::Relaxed) % pool.lanes.len()];
        let mut reply = Vec::new();
        match self.request(&pool, lane, Op::UcxKey, grant, offset, Payload::Key { len, reply: &mut reply }).await {
            Ok(()) => Ok(Some(reply)),
            Err(TransferError::Remote { status: frame::Status::Unsupported | frame::Status::BadFrame, .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    async fn read_chunks(
        &self,
        endpoint: &str,
        segment: SegmentId,
        capability: Option<&Capability>,
        offset: u64,
        buf: &mut [u8],
        checksum: bool,
    ) -> Result<u32, TransferError> {
        let capability = encoded(capability);
        let grant = Grant { segment_id: segment, capability: &capability };
        let pool = self.pool(endpoint);
        let chunk = self.chunk_bytes(buf.len());
        let offsets = chunk_offsets(offset, buf.len(), chunk)?;
        let start = pool.next_lane.fetch_add(1, Ordering::Relaxed);
        let pool = &pool;
        let requests = buf.chunks_mut(chunk).zip(offsets).enumerate().map(|(index, (part, part_offset))| {
            let lane = &pool.lanes[(start + index) % pool.lanes.len()];
            async move {
                let payload = Payload::Read(&mut *part);
                self.request(pool, lane, Op::Read, grant, part_offset, payload).await?;
                Ok::<_, TransferError>(if checksum {
                    (mooncake_segment::checksum::crc32c(part), part.len())
                } else {
                    (0, part.len())
                })
            }
        });
        let parts = try_join_all(requests).await?;
        Ok(parts
            .into_iter()
            .fold(0, |crc, (part_crc, len)| mooncake_segment::checksum::crc32c_combine(crc, part_crc, len)))
    }

    /// Chunk size for a transfer of `total` bytes: spread over the lanes,
    /// never below `split_bytes` (so small transfers stay whole) nor above
    /// the frame limit, and a whole number of disk blocks, so the chunks of
    /// a block-aligned write to a disk segment all start on a block (the
    /// store node refuses unaligned disk WRITEs).
    fn chunk_bytes(&self, total: usize) -> usize {
        let per_lane = (total as u64).div_ceil(self.config.lanes as u64);
        let chunk =
            per_lane.max(self.config.split_bytes).next_multiple_of(DISK_BLOCK_BYTES).min(FRAME_PAYLOAD_MAX_BYTES);
        usize::try_from(chunk).unwrap_or(usize::MAX).max(1)
    }

    /// The pool for `endpoint`, made on first use.
    fn pool(&self, endpoint: &str) -> Arc<Pool> {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = pools.get(endpoint) {
            return pool.clone();
        }
        if pools.len() >= TCP_ENDPOINTS_MAX
            && let Some(victim) = pools.keys().next().cloned()
        {
            pools.remove(&victim);
        }
        let lanes = (0..self.config.lanes).map(|_| Lane::new(None)).collect();
        let pool = Arc::new(Pool { endpoint: endpoint.to_owned(), lanes, next_lane: AtomicUsize::new(0) });
        pools.insert(endpoint.to_owned(), pool.clone());
        pool
    }

    /// One request on one lane, under the request timeout.
    async fn request(
        &self,
        pool: &Pool,
        lane: &Lane,
        op: Op,
        grant: Grant<'_>,
        offset: u64,
        mut payload: Payload<'_>,
    ) -> Result<(), TransferError> {
        let Grant { segment_id, capability } = grant;
        let length = match &payload {
            Payload::Read(buf) => buf.len() as u64,
            Payload::Write(data) => data.len() as u64,
            Payload::Key { len, .. } => *len,
        };
        let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
        let header = RequestHeader { op, request_id, segment_id, offset, length, capability: *capability };
        let limit = self.config.request_timeout;
        let attempt = self.request_on_lane(pool, lane, &header, &mut payload);
        match tokio::time::timeout(limit, attempt).await {
            Ok(result) => result,
            Err(_) => Err(TransferError::Timeout {
                endpoint: pool.endpoint.clone(),
                after_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            }),
        }
    }

    /// Takes the lane's connection (or connects), runs the exchange, and puts
    /// the connection back only if it is at a frame boundary. Taking it out
    /// first means a cancelled request (timeout, a sibling chunk failing)
    /// drops a connection that may be mid-frame instead of reusing it.
    async fn request_on_lane(
        &self,
        pool: &Pool,
        lane: &Lane,
        header: &RequestHeader,
        payload: &mut Payload<'_>,
    ) -> Result<(), TransferError> {
        let mut slot = lane.lock().await;
        let (mut stream, reused) = match slot.take() {
            Some(stream) => (stream, true),
            None => (self.connect(&pool.endpoint).await?, false),
        };
        let mut result = exchange(&mut stream, &pool.endpoint, header, payload).await;
        if reused && matches!(result, Err(TransferError::PeerGone { .. })) {
            // The pooled connection may have been closed by a restarted or
            // idle-reaping server; one fresh try tells that from a dead peer.
            stream = self.connect(&pool.endpoint).await?;
            result = exchange(&mut stream, &pool.endpoint, header, payload).await;
        }
        if keeps_connection(header.op, &result) {
            *slot = Some(stream);
        }
        result
    }

    async fn connect(&self, endpoint: &str) -> Result<Stream, TransferError> {
        let stream = TcpStream::connect(endpoint).await.map_err(|source| peer_gone(endpoint, source))?;
        sockopt::tune(&stream, self.config.congestion.as_deref());
        let Some(tls) = &self.config.tls else {
            return Ok(Stream::Plain(stream));
        };
        match TlsConnector::from(tls.client_config()).connect(tls.server_name().clone(), stream).await {
            Ok(stream) => Ok(Stream::Tls(Box::new(stream))),
            // A refused certificate (ours or theirs) is a configuration
            // problem; anything else broke the connection.
            Err(err) if err.kind() == io::ErrorKind::InvalidData => {
                Err(TransferError::Tls { endpoint: endpoint.to_owned(), reason: err.to_string() })
            }
            Err(err) => Err(peer_gone(endpoint, err)),
        }
    }
}

/// Checks the whole transfer against the segment's size before any chunk
/// leaves: the server checks each chunk on its own, so a transfer that
/// crosses the end would otherwise land its leading chunks.
pub(crate) fn check_target_range(target: &RemoteSegment, offset: u64, len: usize) -> Result<(), TransferError> {
    let len = len as u64;
    match offset.checked_add(len) {
        Some(end) if end <= target.size_bytes => Ok(()),
        _ => Err(TransferError::Memory(MemoryError::OutOfRange { offset, len, size: target.size_bytes })),
    }
}

impl Transport for TcpTransport {
    async fn write(&self, target: &RemoteSegment, offset: u64, data: &[u8]) -> Result<(), TransferError> {
        check_target_range(target, offset, data.len())?;
        self.write_to(&target.endpoint, target.id, target.capability.as_ref(), offset, data).await
    }

    async fn read(&self, target: &RemoteSegment, offset: u64, buf: &mut [u8]) -> Result<(), TransferError> {
        check_target_range(target, offset, buf.len())?;
        self.read_from(&target.endpoint, target.id, target.capability.as_ref(), offset, buf).await
    }
}

impl TcpTransport {
    /// [`Transport::read`] that also returns the crc32c of the bytes read.
    pub async fn read_checksummed(
        &self,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<u32, TransferError> {
        check_target_range(target, offset, buf.len())?;
        self.read_from_checksummed(&target.endpoint, target.id, target.capability.as_ref(), offset, buf).await
    }
}

/// The wire form of `capability` ([`frame::NO_CAPABILITY`] for none).
pub(crate) fn encoded(capability: Option<&Capability>) -> [u8; CAPABILITY_BYTES] {
    capability.map_or(frame::NO_CAPABILITY, Capability::encode)
}

/// Whether the connection is still at a frame boundary after `result`: after
/// success, or a refused READ (the server keeps those connections open; a
/// CORRUPT answer is a refused READ too).
fn keeps_connection(op: Op, result: &Result<(), TransferError>) -> bool {
    match result {
        Ok(()) => true,
        // A BAD_FRAME answer is followed by the server closing the connection.
        Err(TransferError::Remote { status: frame::Status::BadFrame, .. }) => false,
        Err(TransferError::Remote { .. } | TransferError::Corrupt { .. }) => matches!(op, Op::Read | Op::UcxKey),
        Err(_) => false,
    }
}

/// The segment offset of each chunk, checked against overflow up front.
fn chunk_offsets(offset: u64, total: usize, chunk: usize) -> Result<impl Iterator<Item = u64>, TransferError> {
    let len = total as u64;
    if offset.checked_add(len).is_none() {
        return Err(TransferError::Memory(MemoryError::OutOfRange { offset, len, size: u64::MAX }));
    }
    Ok((0..total).step_by(chunk).map(move |start| offset + start as u64))
}

fn peer_gone(endpoint: &str, source: io::Error) -> TransferError {
    TransferError::PeerGone { endpoint: endpoint.to_owned(), source }
}

fn protocol_error(endpoint: &str, reason: impl Into<String>) -> TransferError {
    TransferError::Protocol { endpoint: endpoint.to_owned(), reason: reason.into() }
}

/// One request/response on a connection.
async fn exchange(
    stream: &mut Stream,
    endpoint: &str,
    header: &RequestHeader,
    payload: &mut Payload<'_>,
) -> Result<(), TransferError> {
    let raw = frame::encode_request(header);
    let id = header.request_id;
    match (stream, payload) {
        (Stream::Plain(s), Payload::Read(buf)) => exchange_read(s, endpoint, &raw, id, buf).await,
        (Stream::Tls(s), Payload::Read(buf)) => exchange_read(&mut **s, endpoint, &raw, id, buf).await,
        (Stream::Plain(s), Payload::Write(data)) => {
            let (reader, writer) = s.split();
            exchange_write(reader, writer, endpoint, &raw, id, data).await
        }
        (Stream::Tls(s), Payload::Write(data)) => {
            let (reader, writer) = tokio::io::split(&mut **s);
            exchange_write(reader, writer, endpoint, &raw, id, data).await
        }
        (Stream::Plain(s), Payload::Key { reply, .. }) => exchange_key(s, endpoint, &raw, id, reply).await,
        (Stream::Tls(s), Payload::Key { reply, .. }) => exchange_key(&mut **s, endpoint, &raw, id, reply).await,
    }
}

/// Sends a request without payload and reads its answer's header: the
/// length it announces.
async fn ask<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    endpoint: &str,
    raw: &[u8; REQUEST_HEADER_BYTES],
    request_id: u64,
) -> Result<u64, TransferError> {
    stream.write_all(raw).await.map_err(|e| peer_gone(endpoint, e))?;
    // A no-op on a socket; a TLS session may hold the record back until flushed.
    stream.flush().await.map_err(|e| peer_gone(endpoint, e))?;
    let mut response = [0u8; RESPONSE_HEADER_BYTES];
    stream.read_exact(&mut response).await.map_err(|e| peer_gone(endpoint, e))?;
    check_response(endpoint, &response, request_id)
}

/// A UCX_KEY request: the answer's payload (at most
/// [`frame::UCX_KEY_MAX_BYTES`]) lands in `reply`.
async fn exchange_key<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    endpoint: &str,
    raw: &[u8; REQUEST_HEADER_BYTES],
    request_id: u64,
    reply: &mut Vec<u8>,
) -> Result<(), TransferError> {
    let length = ask(stream, endpoint, raw, request_id).await?;
    if length == 0 || length > frame::UCX_KEY_MAX_BYTES {
        return Err(protocol_error(
            endpoint,
            format!("UCX_KEY answered {length} bytes; expected 1 to {}", frame::UCX_KEY_MAX_BYTES),
        ));
    }
    reply.resize(usize::try_from(length).unwrap_or(0), 0);
    stream.read_exact(reply).await.map_err(|e| peer_gone(endpoint, e))?;
    Ok(())
}

async fn exchange_read<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    endpoint: &str,
    raw: &[u8; REQUEST_HEADER_BYTES],
    request_id: u64,
    buf: &mut [u8],
) -> Result<(), TransferError> {
    let length = ask(stream, endpoint, raw, request_id).await?;
    if length != buf.len() as u64 {
        return Err(protocol_error(endpoint, format!("READ answered {length} bytes, asked for {}", buf.len())));
    }
    stream.read_exact(buf).await.map_err(|e| peer_gone(endpoint, e))?;
    Ok(())
}

/// Sends a WRITE while watching for the response: a server that refuses the
/// request answers at once and closes without reading the payload, and that
/// answer (not the broken pipe that follows) is the error to report.
async fn exchange_write<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut reader: R,
    mut writer: W,
    endpoint: &str,
    raw: &[u8; REQUEST_HEADER_BYTES],
    request_id: u64,
    data: &[u8],
) -> Result<(), TransferError> {
    let mut response = [0u8; RESPONSE_HEADER_BYTES];
    let send = async {
        if data.len() <= COALESCE_MAX_BYTES {
            let mut out = Vec::with_capacity(raw.len() + data.len());
            out.extend_from_slice(raw);
            out.extend_from_slice(data);
            writer.write_all(&out).await?;
        } else {
            writer.write_all(raw).await?;
            writer.write_all(data).await?;
        }
        // A no-op on a socket; a TLS session may hold the last record back.
        writer.flush().await
    };
    let recv = reader.read_exact(&mut response);
    tokio::pin!(send, recv);
    let (sent, received) = tokio::select! {
        biased;
        received = &mut recv => (None, received),
        sent = &mut send => (Some(sent), (&mut recv).await),
    };
    match (sent, received) {
        (Some(Ok(())), Ok(_)) => match check_response(endpoint, &response, request_id)? {
            length if length == data.len() as u64 => Ok(()),
            length => Err(protocol_error(endpoint, format!("WRITE of {} bytes acked {length}", data.len()))),
        },
        // Answered before the whole payload was sent: a refusal, or a broken server.
        (None | Some(Err(_)), Ok(_)) => {
            check_response(endpoint, &response, request_id)?;
            Err(protocol_error(endpoint, "WRITE acknowledged before its payload was sent"))
        }
        (Some(Err(send_err)), Err(_)) => Err(peer_gone(endpoint, send_err)),
        (_, Err(recv_err)) => Err(peer_gone(endpoint, recv_err)),
    }
}

/// Decodes a response header, checks its id and status, and returns its length.
fn check_response(endpoint: &str, raw: &[u8; RESPONSE_HEADER_BYTES], request_id: u64) -> Result<u64, TransferError> {
    let response = frame::decode_response(raw).map_err(|e| protocol_error(endpoint, e.to_string()))?;
    // BUSY answers the connection, not a request: it names request 0.
    if response.status == frame::Status::Busy {
        return Err(TransferError::Busy { endpoint: endpoint.to_owned() });
    }
    if response.request_id != request_id {
        return Err(protocol_error(
            endpoint,
            format!("response names request {}, expected {request_id}", response.request_id),
        ));
    }
    if response.status == frame::Status::Corrupt {
        return Err(TransferError::Corrupt { endpoint: endpoint.to_owned() });
    }
    if response.status != frame::Status::Ok {
        return Err(TransferError::Remote { status: response.status, endpoint: endpoint.to_owned() });
    }
    Ok(response.length)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_4_mib_object_is_split_across_the_default_lanes() {
        let tcp = TcpTransport::new(TcpConfig::default()).unwrap();
        let chunk = tcp.chunk_bytes(4 << 20);
        assert_eq!(chunk, 1 << 20);
        assert_eq!(tcp.chunk_bytes(1000), 1 << 20, "small transfers stay whole");
        assert_eq!(tcp.chunk_bytes(64 << 20), 16 << 20, "at most one chunk per lane");
        assert_eq!(tcp.chunk_bytes((6 << 20) + 7), (3 << 19) + 4096, "chunks are whole disk blocks");
        let offsets: Vec<u64> = chunk_offsets(10, 4 << 20, chunk).unwrap().collect();
        assert_eq!(offsets, vec![10, 10 + (1 << 20), 10 + (2 << 20), 10 + (3 << 20)]);
        assert!(chunk_offsets(u64::MAX, 2, chunk).is_err());
    }

    #[test]
    fn bad_configs_are_refused() {
        let base = TcpConfig::default();
        for config in [
            TcpConfig { lanes: 0, ..base.clone() },
            TcpConfig { lanes: TCP_LANES_MAX + 1, ..base.clone() },
            TcpConfig { split_bytes: 1, ..base.clone() },
            TcpConfig { request_timeout: Duration::ZERO, ..base.clone() },
            TcpConfig { congestion: Some("no such algorithm name".into()), ..base.clone() },
        ] {
            assert!(matches!(config.validate(), Err(TransferError::InvalidConfig(_))), "{config:?}");
        }
        assert!(base.validate().is_ok());
    }
}
