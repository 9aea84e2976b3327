//! The store-node side of the data path: [`TransferServer`] accepts TCP
//! connections and serves READ/WRITE requests (see [`crate::frame`]) against
//! the segments of a [`SegmentRegistry`].
//!
//! Bytes move between the socket and the mapped segment directly: a WRITE
//! payload is read straight into the segment's memory, a READ is written
//! straight from it. Every request is checked against the registered segment
//! before a byte moves; a refused WRITE closes the connection instead of
//! reading its payload, so nothing of it lands anywhere.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mooncake_segment::SegmentMemory;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::frame::{self, Op, REQUEST_HEADER_BYTES, RESPONSE_HEADER_BYTES, RequestHeader, ResponseHeader, Status};
use crate::registry::SegmentRegistry;
use crate::sockopt;

/// Most connections served at once. Each client keeps `lanes` connections
/// per store node (4 by default), so this covers 250 clients; a further
/// connection is closed at once rather than growing tasks without bound.
pub const SERVER_CONNECTIONS_MAX: usize = 1024;

/// Largest READ payload that is copied next to its header to leave in one
/// send (64 KiB): below it a second packet costs more than the copy. It is
/// the size of a connection's send buffer, which also gathers the responses
/// of pipelined requests into one send.
const COALESCE_MAX_BYTES: usize = 64 * 1024;

/// A connection's receive buffer: room for the headers of a whole pipeline
/// of READs (40 bytes each), read with one call.
const RECEIVE_BUFFER_BYTES: usize = 8 * 1024;

/// A connection's socket, buffered both ways. Responses are flushed when no
/// further whole request is already buffered, so a pipeline of small READs
/// is answered with a few sends instead of one per request.
type Buffered = BufReader<BufWriter<TcpStream>>;

/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop
/// does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How the server treats its connections.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Congestion control set on every accepted socket (`TCP_CONGESTION`).
    /// The server is the sender of every READ, so this is where it matters
    /// most for gets. Default `Some("reno")`: twice bbr's loopback throughput
    /// on this machine kind. `None` keeps the system default.
    pub congestion: Option<String>,
    /// Longest time one payload may take to arrive or leave once its header
    /// was read; a peer that stalls mid-frame loses its connection instead of
    /// holding it forever. Default 30 s.
    pub payload_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self { congestion: Some("reno".to_owned()), payload_timeout: Duration::from_secs(30) }
    }
}

/// Counters of a running server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Payload bytes sent to clients by READ requests.
    pub read_bytes: u64,
    /// Payload bytes written into segments by WRITE requests.
    pub written_bytes: u64,
    /// Requests received (including refused ones).
    pub ops: u64,
    /// Requests refused, and connections that failed mid-request.
    pub errors: u64,
    /// Connections accepted.
    pub connections: u64,
}

#[derive(Debug, Default)]
struct Counters {
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    ops: AtomicU64,
    errors: AtomicU64,
    connections: AtomicU64,
}

/// Serves segments over TCP until shut down or dropped. Dropping it stops
/// accepting and closes every connection, like a store node that died.
#[derive(Debug)]
pub struct TransferServer {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    accept_task: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl TransferServer {
    /// Binds `addr` (port 0 picks one, see [`Self::local_addr`]) and serves
    /// `registry` with the default [`ServerConfig`]. Must run inside a tokio
    /// runtime.
    pub async fn bind(addr: SocketAddr, registry: Arc<SegmentRegistry>) -> io::Result<TransferServer> {
        Self::bind_with_config(addr, registry, ServerConfig::default()).await
    }

    /// As [`Self::bind`], with an explicit config.
    pub async fn bind_with_config(
        addr: SocketAddr,
        registry: Arc<SegmentRegistry>,
        config: ServerConfig,
    ) -> io::Result<TransferServer> {
        if let Some(name) = &config.congestion {
            sockopt::validate_congestion(name).map_err(|msg| io::Error::new(io::ErrorKind::InvalidInput, msg))?;
        }
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let acceptor = Acceptor { listener, registry, config: Arc::new(config), counters: counters.clone() };
        let accept_task = tokio::spawn(acceptor.run(stop_rx));
        tracing::info!(%local_addr, "transfer server listening");
        Ok(TransferServer { local_addr, stop, accept_task: Some(accept_task), counters })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        ServerStats {
            read_bytes: c.read_bytes.load(Ordering::Relaxed),
            written_bytes: c.written_bytes.load(Ordering::Relaxed),
            ops: c.ops.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            connections: c.connections.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, closes every connection (requests in flight are cut
    /// off) and waits until all of it is done.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.accept_task.take()
            && let Err(err) = task.await
        {
            tracing::warn!(local_addr = %self.local_addr, "transfer server accept task failed: {err}");
        }
    }
}

impl Drop for TransferServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.accept_task.take() {
            task.abort();
        }
    }
}

/// The accept loop; owns every connection task, so ending it ends them all.
struct Acceptor {
    listener: TcpListener,
    registry: Arc<SegmentRegistry>,
    config: Arc<ServerConfig>,
    counters: Arc<Counters>,
}

impl Acceptor {
    async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                // Err means the server handle is gone: stop as well.
                () = stopped(&mut stop) => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => self.admit(&mut connections, stream, peer),
                    Err(err) => {
                        tracing::warn!("transfer server accept failed: {err}");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
        // Dropping the listener and aborting the tasks closes every socket.
        drop(self.listener);
        connections.shutdown().await;
    }

    fn admit(&self, connections: &mut JoinSet<()>, stream: TcpStream, peer: SocketAddr) {
        if connections.len() >= SERVER_CONNECTIONS_MAX {
            tracing::warn!(%peer, max = SERVER_CONNECTIONS_MAX, "too many transfer connections; closing the new one");
            return;
        }
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        sockopt::tune(&stream, self.config.congestion.as_deref());
        let stream = BufReader::with_capacity(
            RECEIVE_BUFFER_BYTES,
            BufWriter::with_capacity(RESPONSE_HEADER_BYTES + COALESCE_MAX_BYTES, stream),
        );
        let connection = Connection {
            stream,
            peer,
            registry: self.registry.clone(),
            counters: self.counters.clone(),
            payload_timeout: self.config.payload_timeout,
        };
        connections.spawn(connection.run());
    }
}

/// Resolves once the server is told to stop or its handle is gone. The
/// guard `wait_for` returns is dropped here, before any other await.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// What to do with a connection after a request.
enum After {
    KeepOpen,
    Close,
}

/// One accepted connection: requests one at a time, in order.
struct Connection {
    stream: Buffered,
    peer: SocketAddr,
    registry: Arc<SegmentRegistry>,
    counters: Arc<Counters>,
    payload_timeout: Duration,
}

impl Connection {
    async fn run(mut self) {
        loop {
            let mut raw = [0u8; REQUEST_HEADER_BYTES];
            if let Err(err) = self.stream.read_exact(&mut raw).await {
                if err.kind() != io::ErrorKind::UnexpectedEof {
                    tracing::debug!(peer = %self.peer, "transfer connection closed: {err}");
                }
                return;
            }
            self.counters.ops.fetch_add(1, Ordering::Relaxed);
            let after = self.serve(&raw).await;
            let flushed = match after {
                Ok(After::KeepOpen) if self.stream.buffer().len() >= REQUEST_HEADER_BYTES => Ok(()),
                Ok(_) => with_timeout(self.payload_timeout, self.stream.flush()).await,
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
        let Some(memory) = self.registry.lookup(request.segment_id) else {
            return self.refuse(&request, Status::UnknownSegment).await;
        };
        if memory.check_range(request.offset, request.length).is_err() {
            return self.refuse(&request, Status::OutOfRange).await;
        }
        match request.op {
            Op::Read => self.serve_read(&request, &memory).await,
            Op::Write => self.serve_write(&request, &memory).await,
        }
    }

    /// Answers an error. A refused WRITE's payload is never read: the
    /// connection closes instead, so the stream needs no resynchronising.
    async fn refuse(&mut self, request: &RequestHeader, status: Status) -> io::Result<After> {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(peer = %self.peer, segment = %request.segment_id, offset = request.offset,
            length = request.length, "refusing transfer request: {status}");
        self.send_header(status, request.request_id, 0).await?;
        Ok(match request.op {
            Op::Read => After::KeepOpen,
            Op::Write => After::Close,
        })
    }

    async fn serve_read(&mut self, request: &RequestHeader, memory: &SegmentMemory) -> io::Result<After> {
        let src = memory.slice(request.offset, request.length).map_err(io::Error::other)?;
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
        with_timeout(self.payload_timeout, send).await?;
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
        with_timeout(self.payload_timeout, self.stream.flush()).await?;
        with_timeout(self.payload_timeout, self.stream.read_exact(dst)).await?;
        self.counters.written_bytes.fetch_add(request.length, Ordering::Relaxed);
        self.send_header(Status::Ok, request.request_id, request.length).await?;
        Ok(After::KeepOpen)
    }

    async fn send_header(&mut self, status: Status, request_id: u64, length: u64) -> io::Result<()> {
        let header = frame::encode_response(&ResponseHeader { status, request_id, length });
        with_timeout(self.payload_timeout, self.stream.write_all(&header)).await
    }
}

/// Runs one I/O step with a deadline; expiry is a `TimedOut` error.
async fn with_timeout<T>(limit: Duration, io: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    match tokio::time::timeout(limit, io).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, format!("peer stalled for {limit:?} mid-frame"))),
    }
}
