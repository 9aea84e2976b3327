//! [`EventStream`]: `store.watch(prefix, from_revision)`, the object events
//! of the masters (docs/EVENTS.md) one at a time, for routers written in
//! Python. A [`Watcher`] of the client library underneath follows master
//! failures; each wait is bounded, so the bindings can let Python handle
//! signals between waits. The stream holds the store's state, not its open
//! session: `close` does not wait for a watch, which ends with it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use mooncake_client::{WatchError, WatchItem, Watcher};
use mooncake_proto::master::object_event::Kind;

use crate::session::StoreState;

/// One event, flattened for Python.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub revision: u64,
    /// "stored", "removed" or "replicas".
    pub kind: &'static str,
    pub key: String,
    pub version: u64,
    pub size: u64,
    /// (segment id, tier, host, zone) of each replica.
    pub replicas: Vec<(u64, String, String, String)>,
    pub cause: String,
}

/// Why a watch ended.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("the store is not set up (or closed): setup first")]
    Closed,
    #[error(transparent)]
    Watch(#[from] WatchError),
}

struct Inner {
    watcher: Watcher,
    pending: VecDeque<Event>,
}

/// A watch of one store's masters.
pub struct EventStream {
    state: Arc<StoreState>,
    inner: tokio::sync::Mutex<Inner>,
}

fn event(revision: u64, e: mooncake_proto::master::ObjectEvent) -> Event {
    Event {
        revision,
        kind: match Kind::try_from(e.kind) {
            Ok(Kind::Stored) => "stored",
            Ok(Kind::Removed) => "removed",
            Ok(Kind::Replicas) | Err(_) => "replicas",
        },
        key: e.key,
        version: e.version,
        size: e.size,
        replicas: e.replicas.into_iter().map(|r| (r.segment_id, r.tier, r.host, r.zone)).collect(),
        cause: e.cause,
    }
}

impl EventStream {
    /// A watch of keys under `prefix` from `from_revision` (0: from this
    /// call on: a master is asked where that is before it returns).
    pub fn open(state: Arc<StoreState>, prefix: &str, from_revision: u64) -> Result<EventStream, StreamError> {
        let session = state.session().map_err(|_| StreamError::Closed)?;
        let mut watcher = Watcher::new(session.client().master_handle(), prefix, from_revision);
        session.block_on(watcher.pin_start())?;
        drop(session);
        Ok(EventStream { state, inner: tokio::sync::Mutex::new(Inner { watcher, pending: VecDeque::new() }) })
    }

    /// The next event, waiting at most `wait`: `Ok(None)` when none came.
    pub fn next_event(&self, wait: Duration) -> Result<Option<Event>, StreamError> {
        let session = self.state.session().map_err(|_| StreamError::Closed)?;
        session.block_on(async {
            let mut inner = self.inner.lock().await;
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                if let Some(e) = inner.pending.pop_front() {
                    return Ok(Some(e));
                }
                // Watcher::next may be cut at an await: it keeps its place.
                let item = match tokio::time::timeout_at(deadline, inner.watcher.next()).await {
                    Ok(item) => item?,
                    Err(_) => return Ok(None),
                };
                if let WatchItem::Revision { revision, events } = item {
                    inner.pending.extend(events.into_iter().map(|e| event(revision, e)));
                }
            }
        })
    }

    /// The revision a watch resuming now would start at (the one of the
    /// next event not returned yet, or after the last progress heard).
    pub fn next_revision(&self) -> u64 {
        let inner = self.inner.blocking_lock();
        match inner.pending.front() {
            Some(e) => e.revision,
            None => inner.watcher.next_revision(),
        }
    }
}
