//! A ZMQ PUB socket of our own: ZMTP 3.0 over TCP with the NULL security
//! mechanism (RFC 23/ZMTP), what upstream's subscribers (pyzmq, libzmq,
//! Dynamo's router) connect to. Ours rather than a ZMQ library's because a
//! PUB socket must never wait for a subscriber: every subscriber has its
//! own queue of at most [`SUBSCRIBER_QUEUE_BYTES`], written by its own
//! task, and one that stops reading until its queue is full is
//! disconnected (it may connect again; PUB/SUB drops what it missed, and
//! the sequence frame shows the gap). Publishing only queues, so one stalled
//! subscriber never holds back the feed or the others.
//!
//! What a connection goes through: both sides send a 64-byte greeting
//! (signature, version 3.0, mechanism `NULL`), then a `READY` command
//! (`Socket-Type`: ours `PUB`, theirs `SUB` or `XSUB`), then the subscriber
//! sends subscriptions (a one-frame message `0x01 topic`, or `0x00 topic`
//! to cancel; ZMTP 3.1's `SUBSCRIBE`/`CANCEL` commands are taken too) and
//! we send messages whose first frame starts with one of its topics. A peer
//! that does not complete the handshake within [`HANDSHAKE_TIMEOUT`], or
//! sends frames larger than [`INBOUND_FRAME_MAX_BYTES`], is closed.
//!
//! No CURVE: this publisher cannot encrypt or authenticate subscribers, so
//! the bridge binds a non-loopback address only when told it is insecure
//! (`mooncake events --insecure`, docs/EVENTS.md).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Bytes queued for one subscriber at most; past it, it is disconnected.
pub const SUBSCRIBER_QUEUE_BYTES: usize = 64 << 20;
/// Subscribers connected at once at most; more are closed at once.
pub const SUBSCRIBERS_MAX: usize = 1024;
/// A peer must have sent its greeting and READY within this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest frame a subscriber may send (a subscription or a command).
pub const INBOUND_FRAME_MAX_BYTES: u64 = 64 << 10;
/// Topics one subscriber may hold at most.
const TOPICS_MAX: usize = 1024;

const GREETING_BYTES: usize = 64;
const FLAG_MORE: u8 = 0x01;
const FLAG_LONG: u8 = 0x02;
const FLAG_COMMAND: u8 = 0x04;

/// Why the publisher could not start.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("{0:?} is not a ZMQ TCP endpoint: use tcp://HOST:PORT (HOST an address, a name, or * for every address)")]
    Endpoint(String),
    #[error("cannot bind {endpoint}: {source}")]
    Io { endpoint: String, source: std::io::Error },
}

/// Where a `tcp://HOST:PORT` endpoint binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpEndpoint {
    pub host: String,
    pub port: u16,
}

impl TcpEndpoint {
    /// Parses `tcp://HOST:PORT`; `*` binds every address (as ZMQ's).
    pub fn parse(endpoint: &str) -> Result<TcpEndpoint, BindError> {
        let bad = || BindError::Endpoint(endpoint.to_string());
        let rest = endpoint.strip_prefix("tcp://").ok_or_else(bad)?;
        let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad());
        }
        let host = if host == "*" { "0.0.0.0" } else { host };
        Ok(TcpEndpoint { host: host.to_string(), port })
    }

    /// The addresses it names.
    pub async fn addrs(&self) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((self.host.as_str(), self.port)).await?.collect())
    }

    /// Whether every address it names is a loopback one (only this host
    /// can connect).
    pub async fn is_loopback(&self) -> bool {
        match self.addrs().await {
            Ok(addrs) => !addrs.is_empty() && addrs.iter().all(|a| is_loopback(a.ip())),
            Err(_) => false,
        }
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// What one publish did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivery {
    /// Subscribers the message was queued for.
    pub queued: usize,
    /// Subscribers disconnected because their queue was full.
    pub dropped: usize,
}

/// One connected subscriber, as the publisher sees it.
struct Subscriber {
    peer: SocketAddr,
    topics: Arc<Mutex<Vec<Vec<u8>>>>,
    queue: mpsc::UnboundedSender<Bytes>,
    queued_bytes: Arc<AtomicUsize>,
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        // Each task holds one half of the socket: both ended, it closes
        // (a writer stuck on a peer that stopped reading included).
        self.writer.abort();
        self.reader.abort();
    }
}

type Subscribers = Arc<Mutex<HashMap<u64, Subscriber>>>;

fn lock(subscribers: &Subscribers) -> std::sync::MutexGuard<'_, HashMap<u64, Subscriber>> {
    subscribers.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A bound PUB socket; accepting subscribers until dropped.
pub struct Publisher {
    local: SocketAddr,
    subscribers: Subscribers,
    accept: JoinHandle<()>,
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.accept.abort();
        lock(&self.subscribers).clear();
    }
}

impl Publisher {
    /// Binds `endpoint` and starts accepting subscribers.
    pub async fn bind(endpoint: &TcpEndpoint) -> Result<Publisher, BindError> {
        let shown = format!("tcp://{}:{}", endpoint.host, endpoint.port);
        let io = |source| BindError::Io { endpoint: shown.clone(), source };
        let listener = TcpListener::bind((endpoint.host.as_str(), endpoint.port)).await.map_err(io)?;
        let local = listener.local_addr().map_err(io)?;
        let subscribers: Subscribers = Arc::default();
        let accept = tokio::spawn(accept_loop(listener, subscribers.clone()));
        Ok(Publisher { local, subscribers, accept })
    }

    /// The address bound (its port, when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Subscribers connected now.
    pub fn subscribers(&self) -> usize {
        lock(&self.subscribers).len()
    }

    /// Queues the message of `frames` for every subscriber with a topic its
    /// first frame starts with; never waits. A subscriber whose queue would
    /// pass [`SUBSCRIBER_QUEUE_BYTES`] is disconnected instead.
    pub fn publish(&self, frames: &[Bytes]) -> Delivery {
        let Some(first) = frames.first() else { return Delivery::default() };
        let encoded = encode_message(frames);
        let mut delivery = Delivery::default();
        let mut subscribers = lock(&self.subscribers);
        subscribers.retain(|_, s| {
            let wanted = s.topics.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|t| first.starts_with(t));
            if !wanted {
                return !s.queue.is_closed();
            }
            let queued = s.queued_bytes.fetch_add(encoded.len(), Ordering::AcqRel) + encoded.len();
            if queued > SUBSCRIBER_QUEUE_BYTES {
                tracing::warn!(peer = %s.peer, queued_bytes = queued,
                    "a ZMQ subscriber stopped reading: disconnected (it may connect again; it missed what it did not read)");
                delivery.dropped += 1;
                return false;
            }
            match s.queue.send(encoded.clone()) {
                Ok(()) => {
                    delivery.queued += 1;
                    true
                }
                Err(_) => false, // its connection ended
            }
        });
        delivery
    }
}

async fn accept_loop(listener: TcpListener, subscribers: Subscribers) {
    let next_id = AtomicU64::new(1);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a ZMQ subscriber failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if lock(&subscribers).len() >= SUBSCRIBERS_MAX {
            tracing::warn!(%peer, max = SUBSCRIBERS_MAX, "too many ZMQ subscribers; closing the new one");
            continue;
        }
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let subscribers = subscribers.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake(stream)).await {
                Ok(Ok((read, write))) => attach(id, peer, read, write, &subscribers),
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "a ZMQ peer failed the handshake"),
                Err(_) => tracing::debug!(%peer, "a ZMQ peer did not complete the handshake in time"),
            }
        });
    }
}

/// Registers a subscriber that completed the handshake: its writer drains
/// its queue, its reader takes its subscriptions.
fn attach(id: u64, peer: SocketAddr, read: OwnedReadHalf, write: OwnedWriteHalf, subscribers: &Subscribers) {
    let (queue, rx) = mpsc::unbounded_channel();
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    let topics: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let writer = tokio::spawn(write_loop(write, rx, queued_bytes.clone()));
    let reader = tokio::spawn(read_loop(id, read, topics.clone(), subscribers.clone()));
    lock(subscribers).insert(id, Subscriber { peer, topics, queue, queued_bytes, writer, reader });
    tracing::debug!(%peer, "ZMQ subscriber connected");
}

async fn write_loop(mut write: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Bytes>, queued: Arc<AtomicUsize>) {
    while let Some(message) = rx.recv().await {
        if write.write_all(&message).await.is_err() {
            return;
        }
        queued.fetch_sub(message.len(), Ordering::AcqRel);
    }
}

async fn read_loop(id: u64, mut read: OwnedReadHalf, topics: Arc<Mutex<Vec<Vec<u8>>>>, subscribers: Subscribers) {
    while let Ok(frame) = read_frame(&mut read).await {
        subscription(&frame, &topics);
    }
    // Gone (closed, or broke the protocol): forget it. Dropping the entry
    // aborts this task, so nothing runs after.
    let gone = lock(&subscribers).remove(&id);
    drop(gone);
}

/// Applies one frame a subscriber sent: a (un)subscription message, or a
/// ZMTP 3.1 SUBSCRIBE/CANCEL command; anything else is ignored.
fn subscription(frame: &Frame, topics: &Mutex<Vec<Vec<u8>>>) {
    let (subscribe, topic) = match (frame.command, frame.body.first()) {
        (false, Some(1)) => (true, &frame.body[1..]),
        (false, Some(0)) => (false, &frame.body[1..]),
        (true, _) => match command_name(&frame.body) {
            Some((b"SUBSCRIBE", rest)) => (true, rest),
            Some((b"CANCEL", rest)) => (false, rest),
            _ => return,
        },
        _ => return,
    };
    let mut topics = topics.lock().unwrap_or_else(PoisonError::into_inner);
    match subscribe {
        true if topics.len() < TOPICS_MAX => topics.push(topic.to_vec()),
        true => {}
        false => {
            if let Some(i) = topics.iter().position(|t| t == topic) {
                topics.remove(i);
            }
        }
    }
}

/// A command's name and the rest of its body.
fn command_name(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = usize::from(*body.first()?);
    let name = body.get(1..1 + len)?;
    Some((name, &body[1 + len..]))
}

/// Our greeting and READY, then the peer's, checked: a SUB or XSUB peer
/// speaking ZMTP 3 with the NULL mechanism.
async fn handshake(mut stream: TcpStream) -> std::io::Result<(OwnedReadHalf, OwnedWriteHalf)> {
    let _ = stream.set_nodelay(true);
    let mut out = BytesMut::with_capacity(GREETING_BYTES + 64);
    out.put_slice(&greeting());
    out.put_slice(&ready_command(b"PUB"));
    stream.write_all(&out).await?;
    let mut theirs = [0u8; GREETING_BYTES];
    stream.read_exact(&mut theirs).await?;
    check_greeting(&theirs)?;
    let (mut read, write) = stream.into_split();
    let ready = read_frame(&mut read).await?;
    let socket_type = ready_socket_type(&ready)?;
    if socket_type != b"SUB" && socket_type != b"XSUB" {
        return Err(protocol(format!(
            "a {} socket connected; this publisher serves SUB and XSUB sockets",
            String::from_utf8_lossy(&socket_type)
        )));
    }
    Ok((read, write))
}

fn protocol(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

/// The 64-byte ZMTP 3.0 greeting of a NULL-mechanism peer.
fn greeting() -> [u8; GREETING_BYTES] {
    let mut g = [0u8; GREETING_BYTES];
    g[0] = 0xFF;
    g[9] = 0x7F;
    g[10] = 3; // version 3.0
    g[11] = 0;
    g[12..16].copy_from_slice(b"NULL");
    g
}

fn check_greeting(g: &[u8; GREETING_BYTES]) -> std::io::Result<()> {
    if g[0] != 0xFF || g[9] & 0x01 != 0x01 {
        return Err(protocol("not a ZMTP peer (bad signature)".into()));
    }
    if g[10] < 3 {
        return Err(protocol(format!("ZMTP {}.{}; this publisher speaks 3", g[10], g[11])));
    }
    let mechanism = &g[12..32];
    let name_len = mechanism.iter().position(|b| *b == 0).unwrap_or(mechanism.len());
    if &mechanism[..name_len] != b"NULL" {
        return Err(protocol(format!(
            "security mechanism {}; this publisher has NULL only (no CURVE)",
            String::from_utf8_lossy(&mechanism[..name_len])
        )));
    }
    Ok(())
}

/// A READY command frame with `Socket-Type` = `socket_type`.
fn ready_command(socket_type: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.push(5);
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
    body.extend_from_slice(socket_type);
    let mut frame = vec![FLAG_COMMAND, body.len() as u8];
    frame.extend_from_slice(&body);
    frame
}

/// The `Socket-Type` property of a READY command.
fn ready_socket_type(frame: &Frame) -> std::io::Result<Vec<u8>> {
    let not_ready = || protocol("the peer's first command is not READY".into());
    if !frame.command {
        return Err(not_ready());
    }
    let (name, mut props) = command_name(&frame.body).ok_or_else(not_ready)?;
    if name != b"READY" {
        return Err(not_ready());
    }
    while let Some(len) = props.first().map(|n| usize::from(*n)) {
        let key = props.get(1..1 + len).ok_or_else(not_ready)?;
        let size_at = 1 + len;
        let size = props.get(size_at..size_at + 4).ok_or_else(not_ready)?;
        let size = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
        let value = props.get(size_at + 4..size_at + 4 + size).ok_or_else(not_ready)?;
        if key.eq_ignore_ascii_case(b"Socket-Type") {
            return Ok(value.to_vec());
        }
        props = &props[size_at + 4 + size..];
    }
    Err(protocol("the peer's READY names no Socket-Type".into()))
}

/// One frame a peer sent.
struct Frame {
    command: bool,
    body: Vec<u8>,
}

async fn read_frame(read: &mut OwnedReadHalf) -> std::io::Result<Frame> {
    let flags = read.read_u8().await?;
    let len = match flags & FLAG_LONG {
        0 => u64::from(read.read_u8().await?),
        _ => read.read_u64().await?,
    };
    if len > INBOUND_FRAME_MAX_BYTES {
        return Err(protocol(format!("a frame of {len} bytes from a subscriber (at most {INBOUND_FRAME_MAX_BYTES})")));
    }
    let mut body = vec![0u8; len as usize];
    read.read_exact(&mut body).await?;
    Ok(Frame { command: flags & FLAG_COMMAND != 0, body })
}

/// `frames` as one ZMTP message on the wire.
fn encode_message(frames: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(frames.iter().map(|f| f.len() + 9).sum());
    for (i, frame) in frames.iter().enumerate() {
        let more = if i + 1 < frames.len() { FLAG_MORE } else { 0 };
        match u8::try_from(frame.len()) {
            Ok(short) => {
                out.put_u8(more);
                out.put_u8(short);
            }
            Err(_) => {
                out.put_u8(more | FLAG_LONG);
                out.put_u64(frame.len() as u64);
            }
        }
        out.put_slice(frame);
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_as_zmq_writes_them() {
        let e = TcpEndpoint::parse("tcp://127.0.0.1:5557").expect("v4");
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 5557));
        assert_eq!(TcpEndpoint::parse("tcp://*:1").expect("any").host, "0.0.0.0");
        assert_eq!(TcpEndpoint::parse("tcp://[::1]:2").expect("v6").host, "::1");
        for bad in ["ipc:///tmp/x", "tcp://host", "tcp://:5", "tcp://h:99999", "127.0.0.1:5"] {
            assert!(TcpEndpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn frames_are_short_or_long_and_all_but_the_last_say_more() {
        let long = Bytes::from(vec![7u8; 300]);
        let wire = encode_message(&[Bytes::new(), Bytes::from_static(b"ab"), long]);
        assert_eq!(&wire[..6], &[FLAG_MORE, 0, FLAG_MORE, 2, b'a', b'b']);
        assert_eq!(wire[6], FLAG_LONG);
        assert_eq!(&wire[7..15], &300u64.to_be_bytes());
        assert_eq!(wire.len(), 15 + 300);
    }

    #[test]
    fn a_ready_command_carries_its_socket_type() {
        let wire = ready_command(b"SUB");
        let frame = Frame { command: wire[0] & FLAG_COMMAND != 0, body: wire[2..].to_vec() };
        assert_eq!(ready_socket_type(&frame).expect("socket type"), b"SUB");
        let g = greeting();
        assert!(check_greeting(&g).is_ok());
        let mut curve = g;
        curve[12..17].copy_from_slice(b"CURVE");
        assert!(check_greeting(&curve).is_err_and(|e| e.to_string().contains("no CURVE")));
    }

    #[test]
    fn subscriptions_come_as_messages_or_commands() {
        let topics = Mutex::new(Vec::new());
        subscription(&Frame { command: false, body: b"\x01ab".to_vec() }, &topics);
        subscription(&Frame { command: true, body: b"\x09SUBSCRIBEcd".to_vec() }, &topics);
        assert_eq!(*topics.lock().unwrap_or_else(PoisonError::into_inner), vec![b"ab".to_vec(), b"cd".to_vec()]);
        subscription(&Frame { command: false, body: b"\x00ab".to_vec() }, &topics);
        subscription(&Frame { command: true, body: b"\x06CANCELcd".to_vec() }, &topics);
        assert!(topics.lock().unwrap_or_else(PoisonError::into_inner).is_empty());
    }
}
