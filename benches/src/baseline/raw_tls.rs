//! The data-path baseline over TLS: the request/response loop of
//! [`raw_tcp`](super::raw_tcp) — the same 9-byte header, the same reused
//! pre-faulted buffers on both ends, one connection and one thread per
//! client, the engine's socket options — over one mutual-TLS connection.
//! The session is tokio-rustls, as between the transfer engine and a store
//! node, configured through mooncake-tls (ring, TLS 1.3 only, AES-128-GCM
//! preferred) from the certificates of the TLS cluster of the same run: the
//! server presents the store node's certificate, the client the client's,
//! and each verifies the other against the cluster's CA.
//!
//! What it adds over raw TCP is TLS itself: AES-GCM over every byte on both
//! ends (the sender seals, the receiver opens), rustls' copies between its
//! record buffers and ours, and records of at most 16 KiB. No framing,
//! checksum or metadata of ours. Each end runs a single-threaded tokio
//! runtime on a thread of its own (the handshake is not timed), so, as in
//! the raw TCP baseline, nothing crosses threads except through the socket.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::Context;
use mooncake_tls::{HANDSHAKE_TIMEOUT, TlsConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::baseline::raw_tcp::{Dir, HEADER_BYTES, OBJECT_MAX_BYTES, OP_GET, OP_PUT, decode_len, encode_header};
use crate::baseline::raw_tcp::{prefaulted, tune};
use crate::stats::{Budget, Samples};

/// The TLS baseline server on 127.0.0.1; stopped and joined on drop.
pub struct TlsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl TlsServer {
    /// Listens on a free loopback port with `tls`'s server config (a client
    /// certificate is required); `congestion` as in the engine's `TcpConfig`.
    pub fn start(tls: &TlsConfig, congestion: Option<String>) -> anyhow::Result<TlsServer> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the raw TLS baseline server")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let acceptor = TlsAcceptor::from(tls.server_config());
        let accept = std::thread::Builder::new()
            .name("raw-tls-accept".into())
            .spawn(move || accept_loop(listener, flag, acceptor, congestion))
            .context("starting the raw TLS baseline server")?;
        Ok(TlsServer { addr, stop, accept: Some(accept) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so it sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: TcpListener, stop: Arc<AtomicBool>, acceptor: TlsAcceptor, congestion: Option<String>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else { continue };
        let (acceptor, congestion) = (acceptor.clone(), congestion.clone());
        // Connection threads end when their client closes (EOF).
        let _ = std::thread::Builder::new().name("raw-tls-conn".into()).spawn(move || {
            tune(&stream, congestion.as_deref());
            match block_on(serve(acceptor, stream)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!("raw TLS baseline connection: {e}"),
                Err(e) => tracing::warn!("raw TLS baseline connection: {e:#}"),
            }
        });
    }
}

/// Runs `fut` on a new single-threaded runtime on this thread.
fn block_on<F: Future>(fut: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building a runtime for the raw TLS baseline")?;
    Ok(rt.block_on(fut))
}

async fn serve(acceptor: TlsAcceptor, stream: std::net::TcpStream) -> std::io::Result<()> {
    stream.set_nonblocking(true)?;
    let stream = TcpStream::from_std(stream)?;
    let mut stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    let mut buf: Vec<u8> = Vec::new();
    let mut header = [0u8; HEADER_BYTES];
    loop {
        match stream.read_exact(&mut header).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let len = decode_len(&header)?;
        if buf.len() < len {
            buf = prefaulted(len);
        }
        match header[0] {
            OP_GET => stream.write_all(&buf[..len]).await?,
            OP_PUT => {
                stream.read_exact(&mut buf[..len]).await?;
                stream.write_all(&[1]).await?;
            }
            op => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unknown op {op}"))),
        }
        // rustls may hold the last record back until flushed.
        stream.flush().await?;
    }
}

/// What [`measure`] measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub samples: Samples,
    /// Protocol version and cipher suite the connections negotiated
    /// (e.g. `TLSv1_3 TLS13_AES_128_GCM_SHA256`).
    pub session: String,
}

/// Runs `clients` concurrent connections to `addr`, each authenticated with
/// `tls`'s client config, doing `dir` requests of `size` bytes until
/// `budget` ends. Blocking: call from `spawn_blocking`.
pub fn measure(
    addr: SocketAddr,
    tls: &TlsConfig,
    congestion: Option<&str>,
    dir: Dir,
    size: usize,
    clients: usize,
    budget: Budget,
) -> anyhow::Result<Measured> {
    anyhow::ensure!(size <= OBJECT_MAX_BYTES, "object size {size} is over the baseline's {OBJECT_MAX_BYTES}");
    let start = Instant::now();
    let results: Vec<anyhow::Result<Measured>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            (0..clients).map(|_| s.spawn(|| one_client(addr, tls, congestion, dir, size, budget))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("client thread panicked"))))
            .collect()
    });
    let mut total = Measured::default();
    for r in results {
        let one = r?;
        total.samples.merge(one.samples);
        total.session = one.session;
    }
    total.samples.wall = start.elapsed();
    Ok(total)
}

fn one_client(
    addr: SocketAddr,
    tls: &TlsConfig,
    congestion: Option<&str>,
    dir: Dir,
    size: usize,
    budget: Budget,
) -> anyhow::Result<Measured> {
    let stream = std::net::TcpStream::connect(addr)
        .with_context(|| format!("connecting to the raw TLS baseline server {addr}"))?;
    tune(&stream, congestion);
    stream.set_nonblocking(true)?;
    block_on(async move {
        let stream = TcpStream::from_std(stream)?;
        let connect = TlsConnector::from(tls.client_config()).connect(tls.server_name().clone(), stream);
        let mut stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, connect)
            .await
            .context("TLS handshake with the raw TLS baseline server timed out")?
            .context("TLS handshake with the raw TLS baseline server")?;
        let conn = stream.get_ref().1;
        let session = format!(
            "{} {}",
            conn.protocol_version().map_or("?".into(), |v| format!("{v:?}")),
            conn.negotiated_cipher_suite().map_or("?".into(), |s| format!("{:?}", s.suite())),
        );
        let mut buf = prefaulted(size);
        let header = encode_header(dir, size);
        let mut samples = Samples::default();
        let bound = budget.start();
        let mut done = 0;
        while bound.go_on(done) {
            let t = Instant::now();
            stream.write_all(&header).await?;
            if dir == Dir::Put {
                stream.write_all(&buf).await?;
            }
            // rustls may hold the last record back until flushed.
            stream.flush().await?;
            if dir == Dir::Get {
                stream.read_exact(&mut buf).await?;
            } else {
                let mut ack = [0u8; 1];
                stream.read_exact(&mut ack).await?;
            }
            samples.ok(t.elapsed(), size as u64, 1);
            done += 1;
        }
        let _ = stream.shutdown().await;
        Ok(Measured { samples, session })
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use mooncake_tls::{Role, TlsFiles};
    use std::time::Duration;

    #[test]
    fn gets_and_puts_move_whole_objects_over_mutual_tls() {
        let dir = tempfile::tempdir().unwrap();
        mooncake_tls::generate(dir.path(), 1, &[]).unwrap();
        let load = |role| TlsFiles::in_dir(dir.path(), role).load().unwrap();
        let server = TlsServer::start(&load(Role::Store), None).unwrap();
        let client = load(Role::Client);
        let budget = Budget { ops_min: 5, ops_max: 5, time: Duration::from_secs(10) };
        for dir in [Dir::Get, Dir::Put] {
            let m = measure(server.addr(), &client, None, dir, 100_000, 2, budget).unwrap();
            let s = &m.samples;
            assert_eq!((s.ops(), s.bytes, s.errors), (10, 1_000_000, 0), "{dir:?}");
            assert_eq!(m.session, "TLSv1_3 TLS13_AES_128_GCM_SHA256");
        }
    }

    #[test]
    fn a_client_without_a_certificate_of_the_ca_is_refused() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        mooncake_tls::generate(a.path(), 1, &[]).unwrap();
        mooncake_tls::generate(b.path(), 1, &[]).unwrap();
        let server = TlsServer::start(&TlsFiles::in_dir(a.path(), Role::Store).load().unwrap(), None).unwrap();
        let stranger = TlsFiles::in_dir(b.path(), Role::Client).load().unwrap();
        let budget = Budget { ops_min: 1, ops_max: 1, time: Duration::from_secs(10) };
        assert!(measure(server.addr(), &stranger, None, Dir::Get, 1000, 1, budget).is_err());
    }
}
