//! A subscriber of the ZMQ KV-event feed for tests (`mooncake events`,
//! docs/EVENTS.md): a SUB peer that speaks ZMTP 3.0 as libzmq's SUB sockets
//! do, written byte by byte, and a reader of the feed's MessagePack payload
//! that keeps what a router folds (event type, object key).
//!
//! Test support: a peer that misbehaves fails the test with a panic.
// The panics are the test failing (the workspace denies them in libraries).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connected SUB peer subscribed to every topic.
pub struct FeedSubscriber {
    stream: TcpStream,
}

/// One message of the feed: its sequence frame and its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedMessage {
    pub sequence: u64,
    pub events: Vec<FeedItem>,
}

/// What a router keeps of an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedItem {
    Stored(String),
    Removed(String),
    /// Everything before is void (the feed resynced).
    Cleared,
}

impl FeedSubscriber {
    /// Connects, greets (NULL mechanism, READY as a SUB) and subscribes to
    /// every topic.
    pub async fn connect(addr: SocketAddr) -> FeedSubscriber {
        let mut s = TcpStream::connect(addr).await.expect("connect to the feed");
        let mut greeting = [0u8; 64];
        greeting[0] = 0xFF;
        greeting[9] = 0x7F;
        greeting[10] = 3;
        greeting[12..16].copy_from_slice(b"NULL");
        s.write_all(&greeting).await.expect("greeting");
        let body: Vec<u8> = [&[5u8][..], b"READY", &[11], b"Socket-Type", &3u32.to_be_bytes(), b"SUB"].concat();
        let mut ready = vec![0x04, body.len() as u8];
        ready.extend_from_slice(&body);
        s.write_all(&ready).await.expect("ready");
        s.write_all(&[0x00, 1, 0x01]).await.expect("subscribe to every topic");
        let mut theirs = [0u8; 64];
        s.read_exact(&mut theirs).await.expect("the publisher's greeting");
        assert_eq!((theirs[0], theirs[10], &theirs[12..16]), (0xFF, 3, &b"NULL"[..]));
        assert_eq!(s.read_u8().await.expect("the publisher's READY"), 0x04, "a command");
        let len = s.read_u8().await.expect("its length");
        let mut body = vec![0u8; usize::from(len)];
        s.read_exact(&mut body).await.expect("its body");
        assert!(body.windows(3).any(|w| w == b"PUB"), "READY names PUB");
        FeedSubscriber { stream: s }
    }

    /// The frames of the next message.
    pub async fn frames(&mut self) -> Vec<Vec<u8>> {
        let s = &mut self.stream;
        let mut frames = Vec::new();
        loop {
            let flags = s.read_u8().await.expect("flags");
            let len = match flags & 0x02 {
                0 => u64::from(s.read_u8().await.expect("short size")),
                _ => s.read_u64().await.expect("long size"),
            };
            let mut body = vec![0u8; len as usize];
            s.read_exact(&mut body).await.expect("body");
            frames.push(body);
            if flags & 0x01 == 0 {
                return frames;
            }
        }
    }

    /// Whether the publisher closes the connection within `wait`.
    pub async fn closed_within(&mut self, wait: Duration) -> bool {
        closed_within(&mut self.stream, wait).await
    }

    /// The connection, to send what a misbehaving peer would.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// The next message, decoded; `None` if none came within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<FeedMessage> {
        let frames = tokio::time::timeout(wait, self.frames()).await.ok()?;
        assert_eq!(frames.len(), 3, "topic, sequence, payload");
        let sequence = u64::from_be_bytes(frames[1].as_slice().try_into().expect("an 8-byte sequence"));
        Some(FeedMessage { sequence, events: decode_events(&frames[2]) })
    }
}

/// Whether the peer closes `s` within `wait` (what it sent before is read
/// and thrown away).
pub async fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    let mut sink = vec![0u8; 1 << 20];
    let closed = tokio::time::timeout(wait, async {
        loop {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    closed.await.is_ok()
}

/// The keys a router holds after folding `messages` in order: stored adds,
/// removed takes away, cleared empties.
pub fn fold(messages: &[FeedMessage]) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for item in messages.iter().flat_map(|m| &m.events) {
        match item {
            FeedItem::Stored(k) => {
                keys.insert(k.clone());
            }
            FeedItem::Removed(k) => {
                keys.remove(k);
            }
            FeedItem::Cleared => keys.clear(),
        }
    }
    keys
}

/// The events of one payload (`[ts, [event map, ...], dp_rank]`).
pub fn decode_events(payload: &[u8]) -> Vec<FeedItem> {
    let mut buf = payload;
    let Value::Array(top) = read(&mut buf) else { panic!("the payload is not an array") };
    let Some(Value::Array(events)) = top.get(1) else { panic!("no event array") };
    events
        .iter()
        .map(|e| {
            let Value::Map(fields) = e else { panic!("an event is not a map") };
            let field = |name: &str| fields.iter().find(|(k, _)| *k == Value::Str(name.into())).map(|(_, v)| v);
            let key = match field("object_key") {
                Some(Value::Str(k)) => k.clone(),
                _ => String::new(),
            };
            match field("event_type") {
                Some(Value::Str(t)) if t == "stored" => FeedItem::Stored(key),
                Some(Value::Str(t)) if t == "removed" => FeedItem::Removed(key),
                Some(Value::Str(t)) if t == "cleared" => FeedItem::Cleared,
                other => panic!("unknown event_type {other:?}"),
            }
        })
        .collect()
}

/// The MessagePack values the feed uses (the scalars are compared, not read).
#[derive(Clone, Debug, PartialEq)]
#[allow(dead_code)]
enum Value {
    Nil,
    Bool(bool),
    Int(i128),
    Str(String),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    head
}

fn be(buf: &mut &[u8], n: usize) -> u64 {
    take(buf, n).iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

fn read(buf: &mut &[u8]) -> Value {
    let m = take(buf, 1)[0];
    let string = |buf: &mut &[u8], n: usize| Value::Str(String::from_utf8(take(buf, n).to_vec()).expect("utf-8"));
    let array = |buf: &mut &[u8], n: u64| Value::Array((0..n).map(|_| read(buf)).collect());
    let map = |buf: &mut &[u8], n: u64| Value::Map((0..n).map(|_| (read(buf), read(buf))).collect());
    match m {
        0x00..=0x7f => Value::Int(i128::from(m)),
        0x80..=0x8f => map(buf, u64::from(m & 0x0f)),
        0x90..=0x9f => array(buf, u64::from(m & 0x0f)),
        0xa0..=0xbf => string(buf, usize::from(m & 0x1f)),
        0xc0 => Value::Nil,
        0xc2 => Value::Bool(false),
        0xc3 => Value::Bool(true),
        0xcc => Value::Int(i128::from(be(buf, 1))),
        0xcd => Value::Int(i128::from(be(buf, 2))),
        0xce => Value::Int(i128::from(be(buf, 4))),
        0xcf => Value::Int(i128::from(be(buf, 8))),
        0xd0 => Value::Int(i128::from(be(buf, 1) as u8 as i8)),
        0xd1 => Value::Int(i128::from(be(buf, 2) as u16 as i16)),
        0xd2 => Value::Int(i128::from(be(buf, 4) as u32 as i32)),
        0xd3 => Value::Int(i128::from(be(buf, 8) as i64)),
        // str8/16/32, array16/32, map16/32: a length of 1, 2 or 4 bytes first.
        0xd9..=0xdb => {
            let n = be(buf, 1 << (m - 0xd9)) as usize;
            string(buf, n)
        }
        0xdc | 0xdd => {
            let n = be(buf, 2 << (m - 0xdc));
            array(buf, n)
        }
        0xde | 0xdf => {
            let n = be(buf, 2 << (m - 0xde));
            map(buf, n)
        }
        0xe0..=0xff => Value::Int(i128::from(m as i8)),
        other => panic!("a MessagePack type the feed does not use: {other:#x}"),
    }
}
