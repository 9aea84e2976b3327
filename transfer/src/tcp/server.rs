//! The store-node side of the data path: [`TransferServer`] accepts TCP
//! connections and serves READ/WRITE requests (see [`crate::frame`]) against
//! the segments of a [`SegmentRegistry`].
//!
//! Bytes move between the socket and the mapped segment directly: a WRITE
//! payload is read straight into the segment's memory, a READ is written
//! straight from it. Every request is checked against the registered segment
//! before a byte moves; a refused WRITE closes the connection instead of
//! reading its payload, so nothing of it lands anywhere. Disk segments
//! ([`crate::Backing::Disk`]) move their bytes in chunks through the
//! segment's aligned buffers instead, verified on read ([`disk`]).
//!
//! This module owns the accept loop and the server's limits: at most
//! [`ServerConfig::connections_max`] connections at once and
//! [`ServerConfig::peer_connections_max`] from one IP address
//! ([`admission`]); a connection beyond them takes the place of a waiting
//! one (silent, or idle between requests), or, when every place is serving,
//! is answered BUSY and closed, so the client reports a busy store node
//! rather than a dead one. Each
//! connection's deadlines (header, idle, payload) live in [`connection`].
//!
//! With [`ServerConfig::tls`] every connection is mutual TLS (tokio-rustls):
//! the handshake runs in the connection's own task under the header
//! timeout, and a peer without a certificate signed by the cluster's CA is
//! closed before it can send a request. Without it the connection is the
//! plain socket, with no wrapper in between.

mod admission;
mod connection;
mod disk;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mooncake_tls::TlsConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use self::admission::{Admission, Refusal, SharedAdmission, Slot};
use self::connection::{Buffered, Connection, Deadlines};
use crate::error::TransferError;
use crate::frame::{self, RESPONSE_HEADER_BYTES, ResponseHeader, Status};
use crate::registry::SegmentRegistry;
use crate::sockopt;

/// Default of [`ServerConfig::connections_max`]. Each client keeps `lanes`
/// connections per store node (4 by default), so this covers 256 clients.
/// A connection costs a task, a socket and up to 72 KiB of buffers, so the
/// default bounds that memory near 74 MiB.
pub const SERVER_CONNECTIONS_DEFAULT: usize = 1024;

/// Largest [`ServerConfig::connections_max`] accepted: 16,384 connections
/// hold up to 1.2 GiB of buffers and as many file descriptors; a node that
/// needs more should run more store nodes.
pub const SERVER_CONNECTIONS_MAX: usize = 16 * 1024;

/// Default of [`ServerConfig::peer_connections_max`]: 32 client processes on
/// one host at the default 4 lanes, or two at the largest lane count (64).
/// One address can then take at most an eighth of the default total.
pub const SERVER_PEER_CONNECTIONS_DEFAULT: usize = 128;

/// Default of [`ServerConfig::header_timeout`]: a 104-byte header takes
/// microseconds on any network this runs on; 10 s tolerates a stalled host
/// and still frees a trickling peer's place soon.
pub const SERVER_HEADER_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Default of [`ServerConfig::idle_timeout`]: a client's pooled lanes
/// survive two minutes without a transfer; after that a reconnect (well
/// under a millisecond on a LAN) is cheaper than holding the place.
pub const SERVER_IDLE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(120);

/// Most refused connections lingering after their BUSY answer at once. A
/// refusal holds its socket for up to [`REFUSAL_LINGER`]; beyond this many,
/// a new plain connection over the limits is answered BUSY at once and
/// closed without the linger (a TLS one, which would need a handshake, is
/// closed unanswered), so a flood cannot grow refusal tasks without bound.
pub const SERVER_REFUSALS_MAX: usize = 64;

/// How long a refused connection is kept open after its BUSY answer, reading
/// and discarding what the client had already sent: closing a socket with
/// unread bytes resets it, and a reset can destroy the answer before the
/// client reads it.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Most bytes a refused connection reads and discards while it lingers (a
/// client stops sending once it reads the BUSY answer).
const REFUSAL_DRAIN_MAX_BYTES: usize = 1 << 20;

/// Largest READ payload that is copied next to its header to leave in one
/// send (64 KiB): below it a second packet costs more than the copy. It is
/// the size of a connection's send buffer, which also gathers the responses
/// of pipelined requests into one send.
const COALESCE_MAX_BYTES: usize = 64 * 1024;

/// A connection's receive buffer: room for the headers of a whole pipeline
/// of READs (104 bytes each; 64 of them take 6.5 KiB), read with one call.
const RECEIVE_BUFFER_BYTES: usize = 8 * 1024;

/// Pause after a failed `accept` (e.g. out of file descriptors) so the loop
/// does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Shortest time between two warnings about refused connections; the ones in
/// between are counted and reported with the next warning, so a flood of
/// connections cannot flood the log.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// How the server treats its connections. [`ServerConfig::validate`] checks
/// it; [`TransferServer::bind_with_config`] refuses an invalid one.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Most connections served at once, from every peer together. A
    /// connection beyond it is answered BUSY and closed. Higher serves more
    /// clients' lanes at once, at one task, one descriptor and up to 72 KiB
    /// of buffers each. Default [`SERVER_CONNECTIONS_DEFAULT`] (1024);
    /// 1..=[`SERVER_CONNECTIONS_MAX`].
    pub connections_max: usize,
    /// Most connections from one IP address at once (all client processes
    /// of a host count together). A connection beyond it is answered BUSY and
    /// closed, so one misbehaving host cannot take every place. Lower
    /// protects other hosts better; it must cover the lanes of every client
    /// process on the busiest host. Default
    /// [`SERVER_PEER_CONNECTIONS_DEFAULT`] (128); 1..=`connections_max`.
    pub peer_connections_max: usize,
    /// Longest time a request header may take to arrive: the first request
    /// of a connection must arrive whole within this of the accept, a later
    /// one within this of its first byte. A client sends its header at once
    /// (104 bytes), so only a broken or hostile peer is ever this slow; the
    /// connection is closed. Default [`SERVER_HEADER_TIMEOUT_DEFAULT`] (10 s).
    pub header_timeout: Duration,
    /// Longest time a connection may wait for its next request; then it is
    /// closed. Clients keep pooled lanes open between transfers and
    /// reconnect on the next one (one connect, well under a millisecond on a
    /// LAN), so lower frees idle places sooner at a reconnect each. Default
    /// [`SERVER_IDLE_TIMEOUT_DEFAULT`] (120 s).
    pub idle_timeout: Duration,
    /// Mutual TLS: every connection must complete a TLS handshake with a
    /// client certificate signed by the configured CA before it may send a
    /// request. Costs a handshake per connection (lanes are pooled) and the
    /// encryption of every byte. Default `None`: plain TCP, for loopback or
    /// a network only the cluster can reach (docs/SECURITY.md).
    pub tls: Option<TlsConfig>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            congestion: Some("reno".to_owned()),
            payload_timeout: Duration::from_secs(30),
            connections_max: SERVER_CONNECTIONS_DEFAULT,
            peer_connections_max: SERVER_PEER_CONNECTIONS_DEFAULT,
            header_timeout: SERVER_HEADER_TIMEOUT_DEFAULT,
            idle_timeout: SERVER_IDLE_TIMEOUT_DEFAULT,
            tls: None,
        }
    }
}

impl ServerConfig {
    /// Checks every field and their relations, naming the bad value.
    pub fn validate(&self) -> Result<(), TransferError> {
        let bad = |msg: String| Err(TransferError::InvalidConfig(msg));
        if let Some(name) = &self.congestion {
            sockopt::validate_congestion(name).or_else(bad)?;
        }
        for (name, value) in [
            ("payload_timeout", self.payload_timeout),
            ("header_timeout", self.header_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if value.is_zero() {
                return bad(format!("transfer server {name} must be positive"));
            }
        }
        if !(1..=SERVER_CONNECTIONS_MAX).contains(&self.connections_max) {
            return bad(format!(
                "transfer server connections_max = {} must be in 1..={SERVER_CONNECTIONS_MAX}",
                self.connections_max
            ));
        }
        if !(1..=self.connections_max).contains(&self.peer_connections_max) {
            return bad(format!(
                "transfer server peer_connections_max = {} must be in 1..=connections_max ({})",
                self.peer_connections_max, self.connections_max
            ));
        }
        Ok(())
    }

    fn deadlines(&self) -> Deadlines {
        Deadlines { header: self.header_timeout, idle: self.idle_timeout, payload: self.payload_timeout }
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
    /// Requests refused UNAUTHORIZED (no valid capability; counted in
    /// `errors` too).
    pub unauthorized: u64,
    /// Of those, WRITEs refused because their arena was fenced: the masters
    /// took it back (a deposed leader's writer, a returned chunk).
    pub fenced: u64,
    /// UCX keys handed out (UCX_KEY answered OK): clients that read this
    /// node's segments one-sided from then on.
    pub ucx_keys: u64,
    /// Connections accepted and served (refused ones are not counted here).
    pub connections: u64,
    /// Connections open now.
    pub connections_open: u64,
    /// Of those, the ones waiting for a request (none sent yet, or idle
    /// between requests): a newcomer at a limit may take their place.
    pub connections_waiting: u64,
    /// Connections refused because the server served `connections_max`.
    pub refused_total_limit: u64,
    /// Connections refused because their address held `peer_connections_max`.
    pub refused_peer_limit: u64,
    /// Connections closed after `idle_timeout` without a request.
    pub idle_closed: u64,
    /// Waiting connections (silent, or idle between requests) closed to
    /// give their place to a newcomer at a connection limit.
    pub replaced: u64,
    /// Connections closed because a request header did not arrive whole
    /// within `header_timeout`.
    pub header_timeouts: u64,
    /// Connections closed because their TLS handshake failed or did not
    /// finish within `header_timeout` (no certificate, another CA, not TLS).
    pub tls_handshake_failures: u64,
}

#[derive(Debug, Default)]
struct Counters {
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    ops: AtomicU64,
    errors: AtomicU64,
    unauthorized: AtomicU64,
    fenced: AtomicU64,
    ucx_keys: AtomicU64,
    connections: AtomicU64,
    refused_total_limit: AtomicU64,
    refused_peer_limit: AtomicU64,
    idle_closed: AtomicU64,
    replaced: AtomicU64,
    header_timeouts: AtomicU64,
    tls_handshake_failures: AtomicU64,
}

/// Serves segments over TCP until shut down or dropped. Dropping it stops
/// accepting and closes every connection, like a store node that died.
#[derive(Debug)]
pub struct TransferServer {
    local_addr: SocketAddr,
    stop: watch::Sender<bool>,
    accept_task: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    admission: SharedAdmission,
}

impl TransferServer {
    /// Binds `addr` (port 0 picks one, see [`Self::local_addr`]) and serves
    /// `registry` with the default [`ServerConfig`]. Must run inside a tokio
    /// runtime.
    pub async fn bind(addr: SocketAddr, registry: Arc<SegmentRegistry>) -> io::Result<TransferServer> {
        Self::bind_with_config(addr, registry, ServerConfig::default()).await
    }

    /// As [`Self::bind`], with an explicit config; an invalid config is an
    /// `InvalidInput` error that names the bad value.
    pub async fn bind_with_config(
        addr: SocketAddr,
        registry: Arc<SegmentRegistry>,
        config: ServerConfig,
    ) -> io::Result<TransferServer> {
        config.validate().map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err.to_string()))?;
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let admission = Admission::new(config.connections_max, config.peer_connections_max);
        let tls = config.tls.as_ref().map(|tls| TlsAcceptor::from(tls.server_config()));
        let tls_on = tls.is_some();
        let acceptor = Acceptor {
            listener,
            tls,
            registry,
            config: Arc::new(config),
            counters: counters.clone(),
            admission: admission.clone(),
            refusal_log: RefusalLog::default(),
        };
        let accept_task = tokio::spawn(acceptor.run(stop_rx));
        tracing::info!(%local_addr, tls = tls_on, "transfer server listening");
        Ok(TransferServer { local_addr, stop, accept_task: Some(accept_task), counters, admission })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> ServerStats {
        let c = &self.counters;
        let (open, waiting) = self.admission.open_and_waiting();
        ServerStats {
            read_bytes: c.read_bytes.load(Ordering::Relaxed),
            written_bytes: c.written_bytes.load(Ordering::Relaxed),
            ops: c.ops.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            unauthorized: c.unauthorized.load(Ordering::Relaxed),
            fenced: c.fenced.load(Ordering::Relaxed),
            ucx_keys: c.ucx_keys.load(Ordering::Relaxed),
            connections: c.connections.load(Ordering::Relaxed),
            connections_open: open as u64,
            connections_waiting: waiting as u64,
            refused_total_limit: c.refused_total_limit.load(Ordering::Relaxed),
            refused_peer_limit: c.refused_peer_limit.load(Ordering::Relaxed),
            idle_closed: c.idle_closed.load(Ordering::Relaxed),
            replaced: c.replaced.load(Ordering::Relaxed),
            header_timeouts: c.header_timeouts.load(Ordering::Relaxed),
            tls_handshake_failures: c.tls_handshake_failures.load(Ordering::Relaxed),
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
    /// Set when connections must be mutual TLS.
    tls: Option<TlsAcceptor>,
    registry: Arc<SegmentRegistry>,
    config: Arc<ServerConfig>,
    counters: Arc<Counters>,
    admission: SharedAdmission,
    refusal_log: RefusalLog,
}

impl Acceptor {
    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut connections = JoinSet::new();
        let mut refusals = JoinSet::new();
        loop {
            tokio::select! {
                // Err means the server handle is gone: stop as well.
                () = stopped(&mut stop) => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                Some(_) = refusals.join_next(), if !refusals.is_empty() => {}
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => self.admit(&mut connections, &mut refusals, stream, peer),
                    Err(err) => {
                        tracing::warn!("transfer server accept failed: {err}");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
        // Dropping the listener and aborting the tasks closes every socket.
        drop(self.listener);
        refusals.shutdown().await;
        connections.shutdown().await;
    }

    fn admit(
        &mut self,
        connections: &mut JoinSet<()>,
        refusals: &mut JoinSet<()>,
        stream: TcpStream,
        peer: SocketAddr,
    ) {
        let slot = match Slot::take(&self.admission, peer.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                self.count_refusal(peer, refusal);
                let _ = stream.set_nodelay(true);
                match self.tls.clone() {
                    None if refusals.len() < SERVER_REFUSALS_MAX => {
                        refusals.spawn(answer_busy(stream));
                    }
                    Some(tls) if refusals.len() < SERVER_REFUSALS_MAX => {
                        refusals.spawn(answer_busy_tls(tls, stream));
                    }
                    // Past SERVER_REFUSALS_MAX (the refusals stay bounded)
                    // a plain connection is still answered, without the
                    // linger; a TLS one, which needs a handshake, is closed.
                    None => answer_busy_now(&stream),
                    Some(_) => {}
                }
                return;
            }
        };
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        sockopt::tune(&stream, self.config.congestion.as_deref());
        let Some(tls) = self.tls.clone() else {
            connections.spawn(self.connection(stream, peer, slot).run());
            return;
        };
        // The handshake runs in the connection's task, under the header
        // timeout: a slow or silent peer never holds up the accept loop.
        let (registry, counters, deadlines) = (self.registry.clone(), self.counters.clone(), self.config.deadlines());
        connections.spawn(async move {
            match tokio::time::timeout(deadlines.header, tls.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let stream = buffered(stream);
                    Connection { stream, peer, registry, counters, deadlines, slot }.run().await;
                }
                failed => {
                    counters.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
                    let why = match failed {
                        Ok(Err(err)) => err.to_string(),
                        _ => "no handshake within the header timeout".to_owned(),
                    };
                    tracing::debug!(%peer, "transfer connection refused: TLS handshake failed: {why}");
                }
            }
        });
    }

    /// A plain connection's state, ready to run.
    fn connection(&self, stream: TcpStream, peer: SocketAddr, slot: Slot) -> Connection<TcpStream> {
        Connection {
            stream: buffered(stream),
            peer,
            registry: self.registry.clone(),
            counters: self.counters.clone(),
            deadlines: self.config.deadlines(),
            slot,
        }
    }

    fn count_refusal(&mut self, peer: SocketAddr, refusal: Refusal) {
        let (counter, limit, max) = match refusal {
            Refusal::Total { max } => (&self.counters.refused_total_limit, "connections_max", max),
            Refusal::Peer { max } => (&self.counters.refused_peer_limit, "peer_connections_max", max),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = self.refusal_log.should_log(Instant::now()) {
            tracing::warn!(%peer, limit, max, suppressed,
                "transfer server at its connection limit: refusing a connection with BUSY \
                 (`suppressed` more were refused since the last warning); \
                 raise the limit if the clients are legitimate");
        }
    }
}

/// A connection's socket (plain or TLS) with its receive and send buffers.
fn buffered<S: AsyncRead + AsyncWrite>(stream: S) -> Buffered<S> {
    BufReader::with_capacity(
        RECEIVE_BUFFER_BYTES,
        BufWriter::with_capacity(RESPONSE_HEADER_BYTES + COALESCE_MAX_BYTES, stream),
    )
}

/// Rate limit of the refusal warning: at most one per [`REFUSAL_LOG_INTERVAL`].
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl RefusalLog {
    /// `Some(refusals suppressed since the last warning)` when a warning is
    /// due now; otherwise counts this one as suppressed.
    fn should_log(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.saturating_duration_since(last) < REFUSAL_LOG_INTERVAL => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// Answers a connection over the limits with a BUSY header and closes it
/// gracefully: send the answer and a FIN, then read and discard what the
/// client sent until it closes (at most [`REFUSAL_LINGER`] and
/// [`REFUSAL_DRAIN_MAX_BYTES`]), so no reset destroys the answer in flight.
async fn answer_busy<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    let linger = async {
        let header = frame::encode_response(&ResponseHeader { status: Status::Busy, request_id: 0, length: 0 });
        stream.write_all(&header).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < REFUSAL_DRAIN_MAX_BYTES {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<(), io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, linger).await;
}

/// [`answer_busy`] without waiting: the BUSY header goes into the fresh
/// socket's empty send buffer, and what the client already sent is read
/// and dropped first, so the close is an orderly one (a close with unread
/// bytes resets the connection, and a reset can destroy the answer).
fn answer_busy_now(stream: &TcpStream) {
    let header = frame::encode_response(&ResponseHeader { status: Status::Busy, request_id: 0, length: 0 });
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < REFUSAL_DRAIN_MAX_BYTES {
        match stream.try_read(&mut sink) {
            Ok(n) if n > 0 => drained += n,
            _ => break,
        }
    }
    let _ = stream.try_write(&header);
}

/// [`answer_busy`] for a TLS server: the client cannot read a plain answer,
/// so the BUSY header goes inside a TLS session. A peer that does not
/// complete the handshake (no valid certificate) within [`REFUSAL_LINGER`]
/// gets nothing. The refusals are bounded by [`SERVER_REFUSALS_MAX`], so
/// neither are these handshakes.
async fn answer_busy_tls(tls: TlsAcceptor, stream: TcpStream) {
    if let Ok(Ok(stream)) = tokio::time::timeout(REFUSAL_LINGER, tls.accept(stream)).await {
        answer_busy(stream).await;
    }
}

/// Resolves once the server is told to stop or its handle is gone. The
/// guard `wait_for` returns is dropped here, before any other await.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_warnings_are_rate_limited_and_count_what_they_skip() {
        let mut log = RefusalLog::default();
        let start = Instant::now();
        assert_eq!(log.should_log(start), Some(0), "the first refusal is reported");
        for _ in 0..5 {
            assert_eq!(log.should_log(start + Duration::from_millis(10)), None);
        }
        assert_eq!(log.should_log(start + REFUSAL_LOG_INTERVAL), Some(5), "the next warning counts the skipped");
        assert_eq!(log.should_log(start + REFUSAL_LOG_INTERVAL), None);
    }

    #[test]
    fn the_default_config_is_valid_and_bad_limits_name_their_value() {
        assert_eq!(ServerConfig::default().validate().map_err(|e| e.to_string()), Ok(()));
        let too_many = ServerConfig { connections_max: SERVER_CONNECTIONS_MAX + 1, ..ServerConfig::default() };
        let err = too_many.validate().unwrap_err().to_string();
        assert!(err.contains(&format!("connections_max = {}", SERVER_CONNECTIONS_MAX + 1)), "{err}");
        let peer = ServerConfig { peer_connections_max: 0, ..ServerConfig::default() };
        assert!(peer.validate().unwrap_err().to_string().contains("peer_connections_max = 0"));
    }
}
