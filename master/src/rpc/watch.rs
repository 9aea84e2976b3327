//! `Watch`: the object events this master applied, streamed in commit order
//! from a revision on (docs/EVENTS.md). Any master answers from its own
//! history (`mooncake_raft_store::events`): a follower's events are those
//! of committed entries, like the leader's, only as late as its apply.
//!
//! The stream reads the history as the caller takes messages, so a slow
//! watcher holds no buffer and never slows apply: it falls behind, and once
//! the history no longer holds what it needs it is told so (`compacted`)
//! and the stream ends. A caught-up watcher hears the revision it is
//! through every [`PROGRESS_EVERY`], so it resumes from there, not from its
//! last event. At most `--max-watchers` streams per master, and at most
//! `--max-watchers-per-peer` from one peer address (so one client cannot
//! lock every other out); a start past the master's head is refused (it
//! would wait for revisions that may never come, holding a slot). Each
//! stream ends when the master stops.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::Stream;
use mooncake_proto::master::{EventReplica, ObjectEvent, WatchRequest, WatchResponse, WatchRevision, object_event};
use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::events::{self as ev, EventHistory, Since};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::rpc::tenancy::KeySpace;

/// What `Watch` answers.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, tonic::Status>> + Send>>;

/// Most revisions in one message.
pub const REVISIONS_PER_MESSAGE: usize = 256;
/// How often a caught-up watcher hears how far it is through, when the
/// entries applied meanwhile had no events for it.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Default of `--max-watchers`.
pub const DEFAULT_MAX_WATCHERS: usize = 256;
/// Default of `--max-watchers-per-peer`.
pub const DEFAULT_MAX_WATCHERS_PER_PEER: usize = 16;
/// A start this many revisions past a master's head cannot be one a
/// lagging master has yet to apply: it is refused as invalid, not as
/// unavailable.
const REVISIONS_AHEAD_MAX: u64 = 1 << 32;

/// The open watches of this master, against its cap.
#[derive(Debug)]
pub struct Watchers {
    open: AtomicUsize,
    max: usize,
    /// Streams per peer address, against `per_peer`. A leaf lock.
    by_peer: Mutex<HashMap<IpAddr, usize>>,
    per_peer: usize,
    /// `--dev-unsafe-skip-events`: leave out the first event of every 7th
    /// revision (the planted gap the chaos harness must catch).
    skip_events: bool,
}

impl Watchers {
    pub fn new(max: usize, per_peer: usize, skip_events: bool) -> Self {
        let per_peer = per_peer.min(max);
        Watchers { open: AtomicUsize::new(0), max, by_peer: Mutex::new(HashMap::new()), per_peer, skip_events }
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.by_peer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for one more stream from `peer`, or why not.
    fn take(self: &Arc<Self>, peer: Option<IpAddr>) -> Result<Slot, Status> {
        if let Some(ip) = peer {
            let mut peers = self.peers();
            let n = peers.entry(ip).or_insert(0);
            if *n >= self.per_peer {
                return Err(Status::with(
                    ErrorCode::Unavailable,
                    format!(
                        "{ip} holds {} watches on this master already (--max-watchers-per-peer); end one, or \
                         watch through another master",
                        self.per_peer
                    ),
                ));
            }
            *n += 1;
        }
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1));
        let slot = Slot { watchers: self.clone(), peer, counted: taken.is_ok() };
        match taken {
            Ok(_) => Ok(slot),
            Err(_) => Err(Status::with(
                ErrorCode::Unavailable,
                format!(
                    "this master serves {} watches already (--max-watchers); watch through another master or raise \
                     the cap",
                    self.max
                ),
            )),
        }
    }
}

/// One open stream; given back when the stream is dropped.
struct Slot {
    watchers: Arc<Watchers>,
    peer: Option<IpAddr>,
    /// Counted against the total (a slot refused by it is not).
    counted: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.counted {
            self.watchers.open.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(ip) = self.peer {
            let mut peers = self.watchers.peers();
            if let Some(n) = peers.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    peers.remove(&ip);
                }
            }
        }
    }
}

/// What one stream reads and where it is.
struct Cursor {
    history: Arc<EventHistory>,
    applied: watch::Receiver<u64>,
    stop: watch::Receiver<bool>,
    /// The watcher's tenant: it hears of that tenant's keys only, as the
    /// client knows them.
    space: KeySpace,
    /// The client's prefix (within its tenant).
    prefix: String,
    master_id: u64,
    skip_events: bool,
    /// Everything up to here was looked at.
    after: u64,
    /// The `through_revision` of the last message sent.
    sent_through: u64,
    /// When a caught-up watcher hears its progress next.
    progress_at: Instant,
    /// The first message (the starting point) is not sent yet.
    greeting: bool,
    done: bool,
    _slot: Slot,
}

/// The stream for `req` from `peer` on this master (`master_id`), until `stop`.
pub fn open(
    history: Arc<EventHistory>,
    watchers: &Arc<Watchers>,
    master_id: u64,
    space: Result<KeySpace, Status>,
    (req, peer): (WatchRequest, Option<IpAddr>),
    stop: watch::Receiver<bool>,
) -> WatchStream {
    let refused = |status: Status| {
        let refused = WatchResponse { status: Some(status), master_id, ..Default::default() };
        Box::pin(futures::stream::iter([Ok(refused)]))
    };
    let space = match space.and_then(|space| space.stored_prefix(&req.prefix).map(|_| space)) {
        Ok(space) => space,
        Err(status) => return refused(status),
    };
    let head = history.last();
    if let Err(status) = check_start(req.from_revision, head) {
        return refused(status);
    }
    let slot = match watchers.take(peer) {
        Ok(slot) => slot,
        Err(status) => return refused(status),
    };
    let after = match req.from_revision {
        0 => head,
        from => from - 1,
    };
    let cursor = Cursor {
        applied: history.subscribe(),
        history,
        stop,
        space,
        prefix: req.prefix,
        master_id,
        skip_events: watchers.skip_events,
        after,
        sent_through: after,
        progress_at: Instant::now() + PROGRESS_EVERY,
        greeting: true,
        done: false,
        _slot: slot,
    };
    Box::pin(futures::stream::unfold(cursor, |mut c| async move {
        let message = c.next().await?;
        Some((Ok(message), c))
    }))
}

/// A start at `from` (0: now) on a master whose head is `head`: at most
/// the next revision. A little past it, this master may lag the one the
/// watcher heard from (UNAVAILABLE: retry, or another master); far past
/// it, no master has it (INVALID_PARAMS).
fn check_start(from: u64, head: u64) -> Result<(), Status> {
    let next = head.saturating_add(1);
    if from <= next {
        return Ok(());
    }
    let (code, what) = match from - next > REVISIONS_AHEAD_MAX {
        true => (ErrorCode::InvalidParams, "no master has it; watch from 0 (now) or a revision you were sent"),
        false => (ErrorCode::Unavailable, "this master may lag: retry, or watch through another master"),
    };
    Err(Status::with(code, format!("from_revision {from} is past this master's head ({head}): {what}")))
}

impl Cursor {
    fn message(&self, revisions: Vec<WatchRevision>, through: u64) -> WatchResponse {
        WatchResponse {
            status: Some(Status::ok()),
            revisions,
            through_revision: through,
            master_id: self.master_id,
            ..Default::default()
        }
    }

    /// The next message; `None` ends the stream.
    async fn next(&mut self) -> Option<WatchResponse> {
        if self.done || *self.stop.borrow() {
            return None;
        }
        loop {
            self.applied.borrow_and_update();
            match self.history.since(self.after, REVISIONS_PER_MESSAGE) {
                Since::Compacted { known_from } => {
                    self.done = true;
                    return Some(WatchResponse {
                        compacted: true,
                        first_known_revision: known_from,
                        ..self.message(vec![], self.after)
                    });
                }
                Since::Events { revisions, through } => {
                    let full = revisions.len() == REVISIONS_PER_MESSAGE;
                    self.after = through;
                    let matching: Vec<WatchRevision> = revisions
                        .into_iter()
                        .filter_map(|r| revision_pb(r, &self.space, &self.prefix, self.skip_events))
                        .collect();
                    if !matching.is_empty() || self.greeting {
                        self.greeting = false;
                        return Some(self.sent(matching));
                    }
                    if full {
                        continue;
                    }
                }
            }
            if self.after > self.sent_through && Instant::now() >= self.progress_at {
                return Some(self.sent(vec![]));
            }
            let wake_at = self.progress_at.max(Instant::now());
            tokio::select! {
                changed = self.applied.changed() => if changed.is_err() { return None },
                _ = self.stop.changed() => return None,
                _ = tokio::time::sleep_until(wake_at), if self.after > self.sent_through => {}
            }
        }
    }

    /// A message with `revisions`, through everything looked at.
    fn sent(&mut self, revisions: Vec<WatchRevision>) -> WatchResponse {
        self.sent_through = self.after;
        self.progress_at = Instant::now() + PROGRESS_EVERY;
        self.message(revisions, self.after)
    }
}

/// The events of `r` for keys of `space` under `prefix`, with the keys as
/// the client knows them; `None` when there are none. With `skip_events`
/// (planted bug), every 7th revision loses its first.
fn revision_pb(r: ev::Revision, space: &KeySpace, prefix: &str, skip_events: bool) -> Option<WatchRevision> {
    let skip = usize::from(skip_events && r.revision.is_multiple_of(7));
    let events: Vec<ObjectEvent> = r
        .events
        .into_iter()
        .skip(skip)
        .filter_map(|e| {
            let key = space.client_key(e.key()).filter(|k| k.starts_with(prefix))?.to_string();
            Some(ObjectEvent { key, ..event_pb(e) })
        })
        .collect();
    (!events.is_empty()).then_some(WatchRevision { revision: r.revision, events })
}

fn replicas_pb(replicas: Vec<ev::EventReplica>) -> Vec<EventReplica> {
    replicas
        .into_iter()
        .map(|r| EventReplica { segment_id: r.segment.0, tier: r.tier.name().into(), host: r.host, zone: r.zone })
        .collect()
}

fn event_pb(e: ev::ObjectEvent) -> ObjectEvent {
    use object_event::Kind;
    match e {
        ev::ObjectEvent::Stored { key, version, size_bytes, replicas } => ObjectEvent {
            kind: Kind::Stored.into(),
            key,
            version: version.0,
            size: size_bytes,
            replicas: replicas_pb(replicas),
            cause: ev::Cause::Put.name().into(),
        },
        ev::ObjectEvent::Removed { key, version, cause } => ObjectEvent {
            kind: Kind::Removed.into(),
            key,
            version: version.0,
            size: 0,
            replicas: vec![],
            cause: cause.name().into(),
        },
        ev::ObjectEvent::Replicas { key, version, replicas, cause } => ObjectEvent {
            kind: Kind::Replicas.into(),
            key,
            version: version.0,
            size: 0,
            replicas: replicas_pb(replicas),
            cause: cause.name().into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    /// Issue 38: 256 streams from one client locked every other watcher
    /// out. One peer now holds at most its own share; the others still get
    /// theirs, and a stream given back frees its peer's slot.
    #[test]
    fn one_peer_cannot_take_every_watch_slot() {
        let w = Arc::new(Watchers::new(8, 3, false));
        let mine: Vec<Slot> = (0..3).map(|_| w.take(peer(1)).expect("within the peer's share")).collect();
        let e = w.take(peer(1)).err().expect("past the peer's share");
        assert_eq!(e.error_code(), ErrorCode::Unavailable);
        assert!(e.message.contains("--max-watchers-per-peer"), "{}", e.message);
        let others: Vec<Slot> = (2..7).map(|n| w.take(peer(n)).expect("another peer")).collect();
        assert_eq!(w.open(), 8);
        let e = w.take(peer(9)).err().expect("the total is reached");
        assert!(e.message.contains("--max-watchers"), "{}", e.message);
        assert!(w.peers().get(&IpAddr::from([10, 0, 0, 9])).is_none(), "a refused slot holds nothing");
        drop(mine);
        assert_eq!(w.open(), 5);
        assert!(w.take(peer(1)).is_ok(), "given back");
        drop(others);
    }

    /// Issue 38: a watch from u64::MAX answered through u64::MAX - 1 and
    /// then held its slot forever.
    #[test]
    fn a_start_past_the_head_is_refused() {
        assert!(check_start(0, 10).is_ok());
        assert!(check_start(11, 10).is_ok(), "the next revision");
        let lagging = check_start(15, 10).expect_err("a little ahead");
        assert_eq!(lagging.error_code(), ErrorCode::Unavailable, "{}", lagging.message);
        let never = check_start(u64::MAX, 10).expect_err("far ahead");
        assert_eq!(never.error_code(), ErrorCode::InvalidParams, "{}", never.message);
        assert!(never.message.contains("past this master's head (10)"), "{}", never.message);
    }
}
