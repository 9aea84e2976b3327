//! The data-path baseline: the plainest request/response over loopback TCP
//! that moves the same object sizes, with the same socket options as the
//! transfer engine (`TCP_NODELAY`, and `TCP_CONGESTION` from
//! [`TcpConfig::default`](mooncake_transfer::TcpConfig), set through the
//! engine's own [`mooncake_transfer::set_congestion`]).
//!
//! Server: a std thread per connection reads a 9-byte header (op, length)
//! and for GET writes `length` bytes from one reused buffer, for PUT reads
//! `length` bytes into it and answers one byte. Client: one connection and
//! one thread per concurrent client, reused pre-faulted buffers. No
//! framing, checksums, metadata or async runtime: what is left is the
//! kernel's copy cost and loopback wake-ups, the ceiling for the engine.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::Context;

use crate::stats::{Budget, Samples};

/// Largest object the baseline server accepts (bounds its buffer).
pub const OBJECT_MAX_BYTES: usize = 256 << 20;

/// A request: op (1 byte), then the length (u64, little-endian).
pub(crate) const HEADER_BYTES: usize = 9;
pub(crate) const OP_GET: u8 = 1;
pub(crate) const OP_PUT: u8 = 2;

/// Which way the bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Server → client.
    Get,
    /// Client → server.
    Put,
}

/// The baseline server on 127.0.0.1; stopped and joined on drop.
pub struct RawServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl RawServer {
    /// Listens on a free loopback port; `congestion` as in the engine's `TcpConfig`.
    pub fn start(congestion: Option<String>) -> anyhow::Result<RawServer> {
        let listener = TcpListener::bind("127.0.0.1:0").context("binding the raw TCP baseline server")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let accept = std::thread::Builder::new()
            .name("raw-tcp-accept".into())
            .spawn(move || accept_loop(listener, flag, congestion))
            .context("starting the raw TCP baseline server")?;
        Ok(RawServer { addr, stop, accept: Some(accept) })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: TcpListener, stop: Arc<AtomicBool>, congestion: Option<String>) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = conn else { continue };
        let congestion = congestion.clone();
        // Connection threads end when their client closes (EOF).
        let _ = std::thread::Builder::new().name("raw-tcp-conn".into()).spawn(move || {
            tune(&stream, congestion.as_deref());
            if let Err(e) = serve(stream) {
                tracing::debug!("raw TCP baseline connection: {e}");
            }
        });
    }
}

/// `TCP_NODELAY` and the congestion control, exactly as the engine sets them.
pub fn tune(stream: &TcpStream, congestion: Option<&str>) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::warn!("raw TCP baseline: cannot set TCP_NODELAY: {e}");
    }
    if let Some(name) = congestion
        && let Err(e) = mooncake_transfer::set_congestion(stream, name)
    {
        tracing::warn!("raw TCP baseline: cannot set TCP_CONGESTION={name}: {e}");
    }
}

fn serve(mut stream: TcpStream) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut header = [0u8; HEADER_BYTES];
    loop {
        match stream.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let len = decode_len(&header)?;
        if buf.len() < len {
            buf = prefaulted(len);
        }
        match header[0] {
            OP_GET => stream.write_all(&buf[..len])?,
            OP_PUT => {
                stream.read_exact(&mut buf[..len])?;
                stream.write_all(&[1])?;
            }
            op => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unknown op {op}"))),
        }
    }
}

/// The request header of `dir` with `size` bytes.
pub(crate) fn encode_header(dir: Dir, size: usize) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[0] = if dir == Dir::Get { OP_GET } else { OP_PUT };
    header[1..].copy_from_slice(&(size as u64).to_le_bytes());
    header
}

/// The payload length of a request header, at most [`OBJECT_MAX_BYTES`].
pub(crate) fn decode_len(header: &[u8; HEADER_BYTES]) -> std::io::Result<usize> {
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[1..]);
    let len = u64::from_le_bytes(len) as usize;
    if len > OBJECT_MAX_BYTES {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("length {len} over the limit")));
    }
    Ok(len)
}

/// A buffer whose every page is already mapped (written once).
pub fn prefaulted(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v.iter_mut().step_by(4096).for_each(|b| *b = 0xa5);
    v
}

/// Runs `clients` concurrent connections doing `dir` requests of `size`
/// bytes until `budget` ends. Blocking: call from `spawn_blocking`.
pub fn measure(
    addr: SocketAddr,
    congestion: Option<&str>,
    dir: Dir,
    size: usize,
    clients: usize,
    budget: Budget,
) -> anyhow::Result<Samples> {
    anyhow::ensure!(size <= OBJECT_MAX_BYTES, "object size {size} is over the baseline's {OBJECT_MAX_BYTES}");
    let start = Instant::now();
    let results: Vec<anyhow::Result<Samples>> = std::thread::scope(|s| {
        let handles: Vec<_> =
            (0..clients).map(|_| s.spawn(|| one_client(addr, congestion, dir, size, budget))).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("client thread panicked"))))
            .collect()
    });
    let mut total = Samples::default();
    for r in results {
        total.merge(r?);
    }
    total.wall = start.elapsed();
    Ok(total)
}

fn one_client(
    addr: SocketAddr,
    congestion: Option<&str>,
    dir: Dir,
    size: usize,
    budget: Budget,
) -> anyhow::Result<Samples> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting to the baseline server {addr}"))?;
    tune(&stream, congestion);
    let mut buf = prefaulted(size);
    let header = encode_header(dir, size);
    let mut samples = Samples::default();
    let bound = budget.start();
    let mut done = 0;
    while bound.go_on(done) {
        let t = Instant::now();
        stream.write_all(&header)?;
        if dir == Dir::Get {
            stream.read_exact(&mut buf)?;
        } else {
            stream.write_all(&buf)?;
            let mut ack = [0u8; 1];
            stream.read_exact(&mut ack)?;
        }
        samples.ok(t.elapsed(), size as u64, 1);
        done += 1;
    }
    let _ = stream.shutdown(Shutdown::Both);
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn gets_and_puts_move_whole_objects() {
        let server = RawServer::start(None).unwrap();
        let budget = Budget { ops_min: 5, ops_max: 5, time: Duration::from_secs(10) };
        for dir in [Dir::Get, Dir::Put] {
            let s = measure(server.addr(), None, dir, 100_000, 2, budget).unwrap();
            assert_eq!((s.ops(), s.bytes, s.errors), (10, 1_000_000, 0), "{dir:?}");
        }
    }
}
