//! One accepted connection of a [`super::TransferServer`]: reads request
//! headers one at a time, in order, and serves each against the registry.
//!
//! It owns the connection's deadlines: the first request header must arrive
//! whole within `header_timeout` of the accept; after a request, the next
//! one's first byte must come within `idle_timeout` and the rest of its
//! header within `header_timeout` of that byte; a payload must move within
//! `payload_timeout`. A connection that misses one is closed and counted, so
//! idle or trickling peers cannot hold a place for ever.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mooncake_auth::capability::Access;
use mooncake_segment::SegmentMemory;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::time::Instant;

use super::Counters;
use super::admission::Slot;
use crate::access::{self, Asked};
use crate::frame::{self, Op, REQUEST_HEADER_BYTES, RequestHeader, ResponseHeader, Status};
use crate::registry::{Backing, SegmentRegistry};

/// A connection's socket (a `TcpStream`, or a TLS stream over one),
/// buffered both ways. Responses are flushed when no further whole request
/// is already buffered, so a pipeline of small READs is answered with a few
/// sends instead of one per request.
pub(super) type Buffered<S> = BufReader<BufWriter<S>>;

/// The deadlines of one connection (see the module doc).
#[derive(Clone, Copy, Debug)]
pub(super) struct Deadlines {
    pub(super) header: Duration,
    pub(super) idle: Duration,
    pub(super) payload: Duration,
}

/// Why no request header was read.
enum NoHeader {
    /// The peer closed the connection at a frame boundary.
    Closed,
    /// No request began within the idle timeout.
    Idle,
    /// A header began (or the connection opened) but did not arrive whole in time.
    Slow,
    /// The socket failed, or the peer closed it mid-header.
    Io(io::Error),
    /// It waited, and a newcomer at a connection limit took its place.
    Replaced,
}

/// What to do with a connection after a request.
pub(super) enum After {
    KeepOpen,
    Close,
}

/// One accepted connection: requests one at a time, in order. Generic over
/// the stream so the plain path stays a bare socket.
pub(super) struct Connection<S> {
    pub(super) stream: Buffered<S>,
    pub(super) peer: SocketAddr,
    pub(super) registry: Arc<SegmentRegistry>,
    pub(super) counters: Arc<Counters>,
    pub(super) deadlines: Deadlines,
    /// This connection's place in the server's limits, given back on drop.
    pub(super) slot: Slot,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    pub(super) async fn run(mut self) {
        let mut first = true;
        loop {
            let mut raw = [0u8; REQUEST_HEADER_BYTES];
            if let Err(why) = self.read_header(&mut raw, first).await {
                self.closed(why);
                return;
            }
            first = false;
            self.counters.ops.fetch_add(1, Ordering::Relaxed);
            let after = self.serve(&raw).await;
            let flushed = match after {
                Ok(After::KeepOpen) if self.stream.buffer().len() >= REQUEST_HEADER_BYTES => Ok(()),
                Ok(_) => with_timeout(self.deadlines.payload, self.stream.flush()).await,
                Err(_) => Ok(()),
            };
            match after.and_then(|after| flushed.map(|()| after)) {
                Ok(After::KeepOpen) => {}
                Ok(After::Close) => return,
                Err(err) => {
                    self.counters.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(peer = %self.peer, "transfer request failed, closing: {err}");
                    return;
                }
            }
        }
    }

    /// Reads the next request header into `raw` under the connection's
    /// deadlines: the first must arrive whole within the header timeout of
    /// the accept (a client sends it right after connecting); a later one
    /// must begin within the idle timeout and end within the header timeout
    /// of its first byte. Bytes already buffered (pipelined requests) count
    /// as arrived.
    async fn read_header(&mut self, raw: &mut [u8; REQUEST_HEADER_BYTES], first: bool) -> Result<(), NoHeader> {
        let now = Instant::now();
        let (begin_by, late) = if first {
            (now + self.deadlines.header, NoHeader::Slow)
        } else {
            (now + self.deadlines.idle, NoHeader::Idle)
        };
        // While it waits, a newcomer at a connection limit may take its place.
        if !first && !self.slot.idle() {
            return Err(NoHeader::Replaced);
        }
        let (stream, slot) = (&mut self.stream, &self.slot);
        let begun = tokio::select! {
            filled = tokio::time::timeout_at(begin_by, stream.fill_buf()) => match filled {
                Err(_) => Err(late),
                Ok(Err(err)) => Err(NoHeader::Io(err)),
                Ok(Ok([])) => Err(NoHeader::Closed),
                Ok(Ok(_)) => Ok(()),
            },
            () = slot.replaced() => Err(NoHeader::Replaced),
        };
        begun?;
        if !self.slot.busy() {
            return Err(NoHeader::Replaced);
        }
        let end_by = if first { begin_by } else { Instant::now() + self.deadlines.header };
        match tokio::time::timeout_at(end_by, self.stream.read_exact(raw)).await {
            Err(_) => Err(NoHeader::Slow),
            Ok(Err(err)) => Err(NoHeader::Io(err)),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// Counts and logs why the connection ends without another request.
    fn closed(&self, why: NoHeader) {
        match why {
            NoHeader::Closed => {}
            NoHeader::Idle => {
                self.counters.idle_closed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %self.peer, idle_timeout = ?self.deadlines.idle,
                    "closing an idle transfer connection");
            }
            NoHeader::Slow => {
                self.counters.header_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %self.peer, header_timeout = ?self.deadlines.header,
                    "closing a transfer connection whose request header did not arrive in time");
            }
            NoHeader::Replaced => {
                self.counters.replaced.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(peer = %self.peer, "closing a waiting transfer connection: a newcomer took its place");
            }
            NoHeader::Io(err) if err.kind() == io::ErrorKind::UnexpectedEof => {}
            NoHeader::Io(err) => tracing::debug!(peer = %self.peer, "transfer connection closed: {err}"),
        }
    }

    /// Validates one request header and serves it.
    async fn serve(&mut self, raw: &[u8; REQUEST_HEADER_BYTES]) -> io::Result<After> {
        let request = match frame::decode_request(raw) {
            Ok(request) => request,
            Err(err) => {
                tracing::warn!(peer = %self.peer, "malformed transfer request: {err}");
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                self.send_header(err.status(), frame::request_id_of(raw), 0).await?;
                // The stream cannot be trusted to be at a frame boundary.
                return Ok(After::Close);
            }
        };
        let asked = Asked {
            segment: request.segment_id,
            offset: request.offset,
            len: request.length,
            access: match request.op {
                Op::Read | Op::UcxKey => Access::Read,
                Op::Write => Access::Write,
            },
            capability: &request.capability,
        };
        // `_writing` counts a WRITE as in flight under its arena until its
        // bytes have landed: the segment's fence is acknowledged only after.
        let (backing, _writing) = match access::admit(&self.registry, &asked) {
            Ok(admitted) => (admitted.backing, admitted.writing),
            Err(why) => {
                if why.status() == Status::Unauthorized {
                    self.counters.unauthorized.fetch_add(1, Ordering::Relaxed);
                }
                if why.is_fenced() {
                    self.counters.fenced.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(peer = %self.peer, segment = %request.segment_id, op = ?request.op,
                    offset = request.offset, length = request.length, "transfer request refused: {why}");
                return self.refuse(&request, why.status()).await;
            }
        };
        match (request.op, backing) {
            (Op::Read, Backing::Memory(memory)) => self.serve_read(&request, &memory).await,
            (Op::Write, Backing::Memory(memory)) => self.serve_write(&request, &memory).await,
            (Op::Read, Backing::Disk(disk)) => self.serve_disk_read(&request, &disk).await,
            (Op::Write, Backing::Disk(disk)) => self.serve_disk_write(&request, &disk).await,
            (Op::UcxKey, Backing::Memory(memory)) => self.serve_ucx_key(&request, &memory).await,
            (Op::UcxKey, Backing::Disk(_)) => self.refuse(&request, Status::Unsupported).await,
        }
    }

    /// Answers an error. A refused WRITE's payload is never read: the
    /// connection closes instead, so the stream needs no resynchronising.
    pub(super) async fn refuse(&mut self, request: &RequestHeader, status: Status) -> io::Result<After> {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(peer = %self.peer, segment = %request.segment_id, offset = request.offset,
            length = request.length, "refusing transfer request: {status}");
        self.send_header(status, request.request_id, 0).await?;
        Ok(match request.op {
            Op::Read | Op::UcxKey => After::KeepOpen,
            Op::Write => After::Close,
        })
    }

    async fn serve_read(&mut self, request: &RequestHeader, memory: &SegmentMemory) -> io::Result<After> {
        // SAFETY: the range was checked against the segment. Nobody writes
        // it while it is sent: the master hands a range to one writer, and
        // a reader asks only for an object's range once its PutEnd committed
        // (a range is not reused while a KV lease may be in flight).
        let src = unsafe { memory.slice(request.offset, request.length) }.map_err(io::Error::other)?;
        let header = frame::encode_response(&ResponseHeader {
            status: Status::Ok,
            request_id: request.request_id,
            length: request.length,
        });
        // Up to COALESCE_MAX_BYTES, header and payload are copied into the
        // send buffer together; a larger payload goes from the segment
        // straight to the socket after the buffered bytes.
        let send = async {
            self.stream.write_all(&header).await?;
            self.stream.write_all(src).await
        };
        with_timeout(self.deadlines.payload, send).await?;
        self.counters.read_bytes.fetch_add(request.length, Ordering::Relaxed);
        Ok(After::KeepOpen)
    }

    async fn serve_write(&mut self, request: &RequestHeader, memory: &SegmentMemory) -> io::Result<After> {
        // SAFETY: the range was checked against the segment. The master hands
        // this range to exactly one writer (objects never overlap, and a range
        // is not reused while a KV lease may be in flight), which is the
        // exclusivity `slice_mut` requires.
        let dst = unsafe { memory.slice_mut(request.offset, request.length) }.map_err(io::Error::other)?;
        // Answers held back for pipelined READs leave before the payload is
        // awaited: a client may wait for them before it sends the payload.
        with_timeout(self.deadlines.payload, self.stream.flush()).await?;
        with_timeout(self.deadlines.payload, self.stream.read_exact(dst)).await?;
        self.counters.written_bytes.fetch_add(request.length, Ordering::Relaxed);
        self.send_header(Status::Ok, request.request_id, request.length).await?;
        Ok(After::KeepOpen)
    }

    /// Answers a UCX_KEY request whose READ grant verified with the
    /// segment's key, exporting the segment first if it was not; UNSUPPORTED
    /// where this node serves nothing over UCX.
    async fn serve_ucx_key(&mut self, request: &RequestHeader, memory: &Arc<SegmentMemory>) -> io::Result<After> {
        #[cfg(feature = "ucx")]
        if let Some(exports) = self.registry.ucx() {
            match exports.key(request.segment_id, memory).await {
                Ok(key) => {
                    self.send_header(Status::Ok, request.request_id, key.len() as u64).await?;
                    with_timeout(self.deadlines.payload, self.stream.write_all(&key)).await?;
                    self.counters.ucx_keys.fetch_add(1, Ordering::Relaxed);
                    return Ok(After::KeepOpen);
                }
                Err(err) => {
                    // The client reads this segment over TCP instead.
                    tracing::warn!(segment = %request.segment_id, "cannot export the segment over UCX: {err}");
                    return self.refuse(request, Status::Unsupported).await;
                }
            }
        }
        let _ = memory;
        self.refuse(request, Status::Unsupported).await
    }

    pub(super) async fn send_header(&mut self, status: Status, request_id: u64, length: u64) -> io::Result<()> {
        let header = frame::encode_response(&ResponseHeader { status, request_id, length });
        with_timeout(self.deadlines.payload, self.stream.write_all(&header)).await
    }
}

/// Runs one I/O step with a deadline; expiry is a `TimedOut` error.
pub(super) async fn with_timeout<T>(limit: Duration, io: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    match tokio::time::timeout(limit, io).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("peer stalled for {limit:?} mid-frame"))),
    }
}
