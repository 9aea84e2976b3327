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
//! last event. At most `--max-watchers` streams per master; each ends when
//! the master stops.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// The open watches of this master, against its cap.
#[derive(Debug)]
pub struct Watchers {
    open: AtomicUsize,
    max: usize,
    /// `--dev-unsafe-skip-events`: leave out the first event of every 7th
    /// revision (the planted gap the chaos harness must catch).
    skip_events: bool,
}

impl Watchers {
    pub fn new(max: usize, skip_events: bool) -> Self {
        Watchers { open: AtomicUsize::new(0), max, skip_events }
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A slot for one more stream, unless the cap is reached.
    fn take(self: &Arc<Self>) -> Option<Slot> {
        let taken = self.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1));
        taken.is_ok().then(|| Slot(self.clone()))
    }
}

/// One open stream; given back when the stream is dropped.
struct Slot(Arc<Watchers>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
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

/// The stream for `req` on this master (`master_id`), until `stop`.
pub fn open(
    history: Arc<EventHistory>,
    watchers: &Arc<Watchers>,
    master_id: u64,
    space: Result<KeySpace, Status>,
    req: WatchRequest,
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
    let Some(slot) = watchers.take() else {
        return refused(Status::with(
            ErrorCode::Unavailable,
            format!(
                "this master serves {} watches already (--max-watchers); watch through another master or raise the \
                 cap",
                watchers.max
            ),
        ));
    };
    let after = match req.from_revision {
        0 => history.last(),
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
