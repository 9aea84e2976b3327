//! Who gets a connection to the master's ports (gRPC and HTTP), so that
//! no peer, however many sockets it opens, can use up the descriptors the
//! master needs for Raft and its data dir, or keep the store nodes'
//! heartbeats out.
//!
//! Every port admits at most `total_max` connections and `peer_max` from
//! one IP address (`mooncake_admission::Table`, shared with the store
//! nodes' transfer port). An accepted connection is *pending* until its first
//! bytes arrive (the HTTP/2 preface, a TLS ClientHello, an HTTP request:
//! real clients send them at once); one that sends nothing within
//! `first_bytes_timeout` is closed. A connection beyond a limit takes the
//! place of the oldest pending one (of its own address, for the per-peer
//! limit), so a flood of silent sockets never keeps a real client out; only
//! when every place is held by connections that spoke is it refused
//! (closed at once, counted, logged at most once a second).
//!
//! A refused connection may be a store node's heartbeat, so every refusal
//! and every failed `accept` (out of file descriptors) tells the leader it
//! could not hear everyone (`on_deaf`), which restarts every client's TTL
//! (docs/GUARANTEES.md, "Client liveness").
//!
//! The limits are bounded by the process's file descriptor budget
//! ([`fd_budget`]): the soft `RLIMIT_NOFILE`, raised to the hard limit at
//! start, less [`FD_RESERVE`] for everything else the master opens. The
//! accept loop reads the limit again before each admission, so a limit
//! lowered while the master runs (`prlimit`, the `fd-flood` chaos fault)
//! lowers the caps with it instead of letting the port take the
//! descriptors its data dir needs.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use mooncake_admission::{Admit, ConnId, Limits, Refusal, Table};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};

/// Descriptors kept out of the ports' limits: Raft channels to every peer
/// (a few each), sled's files, snapshot files being built or sent, the
/// watermark's rewrites, the HTTP port and the runtime's own. A master with
/// fewer descriptors than this plus a useful number of connections warns at
/// start.
pub const FD_RESERVE: u64 = 512;

/// How long a new connection may stay silent. Real clients send their first
/// bytes with the connect; 5 s also covers a TLS client on a slow host.
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections admitted but not yet served, waiting in the queue to the
/// server. Beyond it the accept loop waits (the kernel's backlog holds the rest).
const ADMITTED_QUEUE_MAX: usize = 256;

/// Pause after a failed `accept` (out of file descriptors): the loop must
/// not spin while the process has none.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Shortest time between two warnings about refused connections.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// The limits of one port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortLimits {
    pub total_max: usize,
    pub peer_max: usize,
    pub first_bytes_timeout: Duration,
    /// Descriptors of the budget the master's other port may hold: this
    /// port's total stays within the rest.
    pub budget_others: usize,
}

impl PortLimits {
    /// The total this port may hold with `budget` descriptors to share.
    fn total_within(&self, budget: usize) -> usize {
        self.total_max.min(budget.saturating_sub(self.budget_others)).max(1)
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the
/// descriptors the ports may use: the soft limit less [`FD_RESERVE`].
pub fn fd_budget() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024u64.saturating_sub(FD_RESERVE);
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
        // SAFETY: setrlimit reads the struct it is given; raising the soft
        // limit up to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    lim.rlim_cur.saturating_sub(FD_RESERVE)
}

/// The descriptors the ports may use now: the soft `RLIMIT_NOFILE` less
/// [`FD_RESERVE`] (`usize::MAX` when it cannot be read).
fn fd_budget_now() -> usize {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return usize::MAX;
    }
    usize::try_from(lim.rlim_cur.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX)
}

/// What a port tells the rest of the master.
pub struct PortEvents {
    /// The port could not take a connection (refused, or `accept` failed):
    /// a client may not have been heard.
    pub on_deaf: Box<dyn Fn() + Send + Sync>,
    /// Counts refused connections and failed accepts (by reason).
    pub on_refused: Box<dyn Fn(&'static str) + Send + Sync>,
}

struct Shared {
    name: &'static str,
    table: Mutex<Table>,
    /// Wakes pending connections to check whether they were evicted.
    evictions: Notify,
    events: PortEvents,
    last_warning: Mutex<Option<Instant>>,
}

impl Shared {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn refused(&self, reason: &'static str, peer: Option<SocketAddr>) {
        (self.events.on_refused)(reason);
        (self.events.on_deaf)();
        let mut last = self.last_warning.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if last.is_none_or(|t| now.duration_since(t) >= REFUSAL_LOG_INTERVAL) {
            *last = Some(now);
            let (open, pending) = {
                let t = self.table();
                (t.open(), t.waiting())
            };
            tracing::warn!(
                port = self.name,
                reason,
                ?peer,
                open,
                pending,
                "refusing a connection: client TTLs restart (no heartbeat may have got in); \
                 if the clients are legitimate raise the port's connection limits or `ulimit -n`"
            );
        }
    }
}

/// A served connection: the socket and its place in the port's table,
/// given back when it is dropped.
pub struct Guarded {
    stream: TcpStream,
    peer: SocketAddr,
    id: ConnId,
    shared: Arc<Shared>,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.shared.table().close(self.id);
    }
}

impl Guarded {
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
}

impl AsyncRead for Guarded {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Guarded {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;
    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

/// A port's listener: admits connections under its limits and hands the
/// ones that spoke to the server, in order.
pub struct GuardedListener {
    admitted: mpsc::Receiver<Guarded>,
    local: SocketAddr,
}

impl GuardedListener {
    /// Starts admitting connections on `listener`; the accept loop ends
    /// with the returned listener.
    pub fn start(
        name: &'static str,
        listener: TcpListener,
        limits: PortLimits,
        events: PortEvents,
    ) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let shared = Arc::new(Shared {
            name,
            table: Mutex::new(Table::new(Limits { total_max: limits.total_max, peer_max: limits.peer_max })),
            evictions: Notify::new(),
            events,
            last_warning: Mutex::new(None),
        });
        let (tx, admitted) = mpsc::channel(ADMITTED_QUEUE_MAX);
        tokio::spawn(accept_loop(listener, shared, limits, tx));
        Ok(GuardedListener { admitted, local })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next connection that spoke; `None` once the accept loop ended.
    pub async fn next(&mut self) -> Option<Guarded> {
        self.admitted.recv().await
    }

    /// The connections as the stream tonic serves.
    pub fn into_stream(self) -> impl futures::Stream<Item = io::Result<Guarded>> {
        futures::stream::unfold(self, |mut l| async move { l.next().await.map(|c| (Ok(c), l)) })
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = Guarded;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Guarded, SocketAddr) {
        match self.next().await {
            Some(c) => {
                let peer = c.peer;
                (c, peer)
            }
            // The accept loop ends only with this listener.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, limits: PortLimits, tx: mpsc::Sender<Guarded>) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors (EMFILE/ENFILE) or a socket error:
                    // nobody could connect meanwhile.
                    shared.refused("accept failed", None);
                    tracing::debug!(port = shared.name, error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = tx.closed() => return,
        };
        let _ = stream.set_nodelay(true);
        let total = limits.total_within(fd_budget_now());
        let admit = {
            let mut table = shared.table();
            if table.limits().total_max != total {
                table.set_total_max(total);
            }
            table.admit(peer.ip())
        };
        let id = match admit {
            Admit::Admitted(id) => id,
            Admit::Replacing { admitted, evicted: _ } => {
                shared.evictions.notify_waiters();
                admitted
            }
            Admit::Refused(r) => {
                drop(stream);
                shared.refused(
                    match r {
                        Refusal::Total { .. } => "port connection limit",
                        Refusal::Peer { .. } => "per-address connection limit",
                    },
                    Some(peer),
                );
                continue;
            }
        };
        let (shared, tx) = (shared.clone(), tx.clone());
        tokio::spawn(async move {
            if await_first_bytes(&stream, &shared, id, limits.first_bytes_timeout).await {
                let conn = Guarded { stream, peer, id, shared: shared.clone() };
                if tx.send(conn).await.is_err() {
                    // The server is gone; `conn` gave its place back on drop.
                }
            } else {
                shared.table().close(id);
            }
        });
    }
}

/// Waits for `stream`'s first bytes (or its close, which the server then
/// reads). True when it spoke and is still admitted (now served); false
/// when it stayed silent past `timeout` or was evicted for a newer one.
async fn await_first_bytes(stream: &TcpStream, shared: &Shared, id: ConnId, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let evicted = shared.evictions.notified();
        tokio::pin!(evicted);
        evicted.as_mut().enable();
        if shared.table().is_evicted(id) {
            return false;
        }
        let mut first = [0u8; 1];
        tokio::select! {
            // `peek` waits for a byte (0: the peer closed) and leaves it for
            // the server; `readable` alone may wake without data.
            peeked = stream.peek(&mut first) => {
                // Handed to the server, which never says when it idles:
                // from here on it is never replaced.
                return matches!(peeked, Ok(n) if n > 0) && shared.table().busy(id);
            }
            () = &mut evicted => continue,
            () = tokio::time::sleep_until(deadline) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_keeps_within_what_the_budget_leaves_it() {
        let grpc = PortLimits { budget_others: 128, ..limits(8192, 2048) };
        assert_eq!(grpc.total_within(usize::MAX), 8192, "the configured cap when descriptors abound");
        assert_eq!(grpc.total_within(1024 - FD_RESERVE as usize), 384, "1,024 descriptors: 512 reserved, 128 for HTTP");
        assert_eq!(grpc.total_within(100), 1, "never zero: one connection still gets in");
    }

    fn limits(total_max: usize, peer_max: usize) -> PortLimits {
        PortLimits { total_max, peer_max, first_bytes_timeout: FIRST_BYTES_TIMEOUT, budget_others: 0 }
    }

    #[tokio::test]
    async fn a_flood_of_silent_sockets_does_not_keep_a_client_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let refusals = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = refusals.clone();
        let events = PortEvents {
            on_deaf: Box::new(|| {}),
            on_refused: Box::new(move |_| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }),
        };
        let mut l = GuardedListener::start("test", listener, limits(8, 8), events).unwrap();
        let addr = l.local_addr();
        // Twenty silent sockets: never more than 8 held, none served.
        let mut silent = Vec::new();
        for _ in 0..20 {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        // A client that speaks at once is served despite them.
        let mut client = TcpStream::connect(addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut client, b"hello").await.unwrap();
        let served = tokio::time::timeout(Duration::from_secs(5), l.next()).await.unwrap().unwrap();
        assert_eq!(served.peer_addr(), client.local_addr().unwrap());
        assert_eq!(refusals.load(std::sync::atomic::Ordering::Relaxed), 0, "places came from silent sockets");
    }
}
