//! [`Watcher`]: the object events of the masters (`Watch`, docs/EVENTS.md),
//! followed across master failures. Any master answers a watch from what it
//! applied; when the one streaming goes (killed, stopped, cut off), the
//! watcher asks the next one for the revision after the last it delivered,
//! so the caller sees every revision once, in order, with no gap. When no
//! master holds that revision any more (each was asked: one restarted
//! knows less than the others), [`WatchError::Compacted`] says so:
//! the caller lists the keys (ListObjects gives its revision) and watches
//! again from the listing's revision + 1.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_proto::master::master_service_client::MasterServiceClient;
use mooncake_proto::master::{ObjectEvent, WatchRequest, WatchResponse};
use tonic::Streaming;

use crate::master_client::MasterClient;

/// What the watch delivers, in revision order.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchItem {
    /// The events of one revision for the watched prefix.
    Revision { revision: u64, events: Vec<ObjectEvent> },
    /// Every revision up to `through` was delivered (those not delivered
    /// had no events for the prefix).
    Progress { through: u64 },
}

/// Why a watch ended.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WatchError {
    #[error(
        "the masters no longer hold the events from revision {from} (they hold them from {first_known} on): list \
         the keys, then watch from the listing's revision + 1"
    )]
    Compacted { from: u64, first_known: u64 },
    #[error("no master took the watch for {waited:?}: {last_error}")]
    Unavailable { waited: Duration, last_error: String },
}

/// A watch of the keys under a prefix, over whichever master answers.
pub struct Watcher {
    master: Arc<MasterClient>,
    prefix: String,
    /// The revision to ask for on (re)connecting; 0: the next applied.
    next_from: u64,
    stream: Option<(usize, Streaming<WatchResponse>)>,
    /// The master to try next, by position in the configured list.
    next_master: usize,
    pending: VecDeque<WatchItem>,
    /// Masters (by position) that no longer hold `next_from`, and the
    /// first revision each holds: the watch is compacted only once every
    /// master says so (a restarted one knows less than the others).
    compacted_on: std::collections::BTreeMap<usize, u64>,
}

impl Watcher {
    /// Watches keys under `prefix` (empty: all) from `from_revision` (0:
    /// from the next revision applied).
    pub fn new(master: Arc<MasterClient>, prefix: impl Into<String>, from_revision: u64) -> Self {
        Watcher {
            master,
            prefix: prefix.into(),
            next_from: from_revision,
            stream: None,
            next_master: 0,
            pending: VecDeque::new(),
            compacted_on: std::collections::BTreeMap::new(),
        }
    }

    /// For a watch from "now" (revision 0): asks a master where now is, so
    /// that every change after this call is seen, however long the caller
    /// waits before its first [`next`](Self::next). Does nothing for a
    /// watch from a given revision.
    pub async fn pin_start(&mut self) -> Result<(), WatchError> {
        while self.next_from == 0 {
            if let WatchItem::Revision { revision, events } = self.next().await? {
                self.pending.push_front(WatchItem::Revision { revision, events });
                self.next_from = revision;
            }
        }
        Ok(())
    }

    /// The revision a watch resuming now would start at (0 before the
    /// first master answered a watch from "now").
    pub fn next_revision(&self) -> u64 {
        self.next_from
    }

    /// The next item; waits for one. Moves to another master when the one
    /// streaming fails, for up to the client's call deadline per outage.
    pub async fn next(&mut self) -> Result<WatchItem, WatchError> {
        let mut outage: Option<(Instant, String)> = None;
        loop {
            if let Some(item) = self.pending.pop_front() {
                self.compacted_on.clear();
                self.next_from = match &item {
                    WatchItem::Revision { revision, .. } => revision + 1,
                    WatchItem::Progress { through } => through + 1,
                };
                return Ok(item);
            }
            let failed = match &mut self.stream {
                None => self.connect().await.err(),
                Some((idx, stream)) => match (*idx, stream.message().await) {
                    (idx, Ok(Some(message))) => self.take(message, idx)?.err(),
                    (_, Ok(None)) => Some("the master ended the watch (stopping)".to_string()),
                    (_, Err(status)) => Some(format!("{}: {}", status.code(), status.message())),
                },
            };
            let Some(error) = failed else { continue };
            if let Some((idx, _)) = self.stream.take() {
                self.next_master = idx + 1;
            }
            let (since, _) = outage.get_or_insert_with(|| (Instant::now(), String::new()));
            let waited = since.elapsed();
            if waited > self.master.config().deadline {
                return Err(WatchError::Unavailable { waited, last_error: error });
            }
            tracing::debug!(error = %error, "watch interrupted; asking another master");
            tokio::time::sleep(self.master.config().backoff_max).await;
        }
    }

    /// Opens a stream on the next master in turn.
    async fn connect(&mut self) -> Result<(), String> {
        let masters = &self.master.config().masters;
        let idx = self.next_master % masters.len().max(1);
        let addr = masters.get(idx).cloned().ok_or("no master address")?;
        self.next_master = idx + 1;
        let channel = self.master.channel(&addr).map_err(|e| e.to_string())?;
        let mut rpc = MasterServiceClient::with_interceptor(channel, self.master.credentials());
        let req = WatchRequest { prefix: self.prefix.clone(), from_revision: self.next_from };
        let opened = tokio::time::timeout(self.master.config().rpc_timeout, rpc.watch(req)).await;
        match opened {
            Ok(Ok(stream)) => {
                self.stream = Some((idx, stream.into_inner()));
                self.next_master = idx;
                Ok(())
            }
            Ok(Err(status)) => Err(format!("{addr}: {}: {}", status.code(), status.message())),
            Err(_) => Err(format!("{addr}: no answer within {:?}", self.master.config().rpc_timeout)),
        }
    }

    /// Queues what `message` carries; `Ok(Err)` when the master refused.
    fn take(&mut self, message: WatchResponse, idx: usize) -> Result<Result<(), String>, WatchError> {
        if let Some(status) = message.status.as_ref().filter(|s| s.code != 0) {
            return Ok(Err(format!("master {}: {}", message.master_id, status.message)));
        }
        if message.compacted {
            self.compacted_on.insert(idx, message.first_known_revision);
            if self.compacted_on.len() < self.master.config().masters.len() {
                return Ok(Err(format!("master {} no longer holds revision {}", message.master_id, self.next_from)));
            }
            let first_known = self.compacted_on.values().copied().min().unwrap_or(message.first_known_revision);
            return Err(WatchError::Compacted { from: self.next_from, first_known });
        }
        // Read only once the queue is empty: everything before `next_from`
        // was delivered.
        let mut queued_through = self.next_from.saturating_sub(1);
        for r in message.revisions {
            if r.revision <= queued_through {
                continue; // delivered already (never sent twice; kept safe)
            }
            queued_through = r.revision;
            self.pending.push_back(WatchItem::Revision { revision: r.revision, events: r.events });
        }
        if message.through_revision > queued_through {
            self.pending.push_back(WatchItem::Progress { through: message.through_revision });
        }
        Ok(Ok(()))
    }
}
