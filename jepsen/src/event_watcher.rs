//! The watcher of a run: one `Watch` of the harness's keys from revision 1,
//! through every fault, recorded for the `events` checker
//! (`event_feed.rs`). It follows master failures as the client library's
//! [`Watcher`] does; when no master holds the revision it needs any more it
//! resyncs from a listing (recorded, so the checker replays from there),
//! and when no master takes the watch for the client's deadline it counts
//! an outage and asks again from where it was.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mooncake_client::{MasterClient, MasterClientConfig, WatchError, WatchItem, Watcher};
use mooncake_proto::master::ObjectInfo;
use mooncake_proto::master::object_event::Kind;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::event_feed::{EventKind, FeedEntry, FeedLog, Listed, SeenEvent};

/// Objects per page of a resync's listing (read at one revision).
pub const LIST_PAGE: u32 = 10_000;

/// A running watcher.
pub struct EventWatcher {
    log: Arc<Mutex<FeedLog>>,
    target: watch::Sender<Option<u64>>,
    task: JoinHandle<()>,
}

/// The objects of a listing, as the checker compares them.
pub fn listed(objects: &[ObjectInfo]) -> Vec<Listed> {
    objects
        .iter()
        .map(|o| Listed {
            key: o.key.clone(),
            version: o.version,
            segments: o.replicas.iter().map(|r| r.segment_id).collect(),
        })
        .collect()
}

impl EventWatcher {
    /// Watches keys under `prefix` from revision 1.
    pub fn start(cfg: MasterClientConfig, prefix: &str) -> anyhow::Result<EventWatcher> {
        let master = Arc::new(MasterClient::new(cfg)?);
        let log = Arc::new(Mutex::new(FeedLog::default()));
        let (target, target_rx) = watch::channel(None);
        let task = tokio::spawn(run(master, prefix.to_string(), log.clone(), target_rx));
        Ok(EventWatcher { log, target, task })
    }

    /// Waits (up to `within`) until the watcher is through `revision`, then
    /// stops it and returns what it recorded.
    pub async fn finish(self, revision: u64, within: Duration) -> FeedLog {
        self.target.send_replace(Some(revision));
        let mut task = self.task;
        if tokio::time::timeout(within, &mut task).await.is_err() {
            task.abort();
        }
        let log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        log.clone()
    }
}

fn lock(log: &Mutex<FeedLog>) -> std::sync::MutexGuard<'_, FeedLog> {
    log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn run(
    master: Arc<MasterClient>,
    prefix: String,
    log: Arc<Mutex<FeedLog>>,
    target: watch::Receiver<Option<u64>>,
) {
    let mut watcher = Watcher::new(master.clone(), prefix.clone(), 1);
    loop {
        let through = lock(&log).through;
        if target.borrow().is_some_and(|t| through >= t) {
            return;
        }
        match watcher.next().await {
            Ok(WatchItem::Revision { revision, events }) => {
                let mut log = lock(&log);
                for e in events {
                    let kind = match Kind::try_from(e.kind) {
                        Ok(Kind::Stored) => EventKind::Stored,
                        Ok(Kind::Removed) => EventKind::Removed,
                        Ok(Kind::Replicas) | Err(_) => EventKind::Replicas,
                    };
                    let segments = e.replicas.iter().map(|r| r.segment_id).collect();
                    log.entries.push(FeedEntry::Event(SeenEvent {
                        revision,
                        kind,
                        key: e.key,
                        version: e.version,
                        segments,
                    }));
                }
                log.through = revision;
            }
            Ok(WatchItem::Progress { through }) => lock(&log).through = through,
            Err(WatchError::Compacted { .. }) => {
                let Some((objects, revision)) = list(&master, &prefix).await else { continue };
                let mut log = lock(&log);
                log.entries.push(FeedEntry::Resync { revision, objects: listed(&objects) });
                log.through = revision;
                watcher = Watcher::new(master.clone(), prefix.clone(), revision + 1);
            }
            Err(WatchError::Unavailable { .. }) => {
                lock(&log).outages += 1;
                let from = watcher.next_revision().max(1);
                watcher = Watcher::new(master.clone(), prefix.clone(), from);
            }
        }
    }
}

async fn list(master: &MasterClient, prefix: &str) -> Option<(Vec<ObjectInfo>, u64)> {
    match master.list_all_at(prefix, LIST_PAGE).await {
        Ok(listed) => Some(listed),
        Err(e) => {
            tracing::warn!(error = %e, "resync listing failed; trying again");
            None
        }
    }
}
