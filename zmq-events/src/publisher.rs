//! The bridge: a [`Watcher`] of the masters' object events, translated to
//! upstream's per-medium events (`translate.rs`) and published on a ZMQ PUB
//! socket in upstream's wire format (`format.rs`), one message per
//! revision. Because the feed comes from the watch, it has no gap across
//! master failovers, and a bridge restarted with `--from-revision` goes on
//! where it stopped. Publishing never waits for a subscriber (`zmtp.rs`:
//! each has its own bounded queue, and one that stops reading is
//! disconnected), so the bridge only ever waits for the watch; if it falls
//! behind the masters' history it resyncs: one message with a "cleared"
//! event, then the listed objects as stored. A non-loopback endpoint needs
//! `insecure` (no CURVE here: anyone who reaches the port reads the feed).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use mooncake_client::{MasterClient, WatchError, WatchItem, Watcher};

use crate::format::{FeedEvent, FeedOptions, encode_batch};
use crate::translate::Translator;
use crate::zmtp::{BindError, Publisher, TcpEndpoint};

/// Objects per page of a resync's listing (read at one revision).
const RESYNC_PAGE: u32 = 10_000;

/// What the sequence frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sequence {
    /// The revision (log index) of the entry the message is about: rises,
    /// never repeats, survives a bridge restart and a master failover;
    /// revisions without events for the feed are skipped.
    Revision,
    /// 1, 2, 3, ... per message of this bridge process (upstream's own
    /// numbering, for subscribers that require `previous + 1`).
    Contiguous,
}

/// Why the bridge stopped.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("cannot publish on the ZMQ endpoint: {0}")]
    Bind(#[from] BindError),
    #[error(
        "{endpoint} is reachable from other hosts, and this feed has no encryption or authentication (no ZMQ \
         CURVE): every key of the tenant it watches would reach anyone who connects. Bind a loopback address \
         (tcp://127.0.0.1:PORT) and reach it through a tunnel, or pass --insecure on a network only trusted \
         hosts reach"
    )]
    Insecure { endpoint: String },
}

/// What the bridge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub messages: u64,
    pub events: u64,
    pub resyncs: u64,
    /// Subscribers disconnected because they stopped reading.
    pub dropped_subscribers: u64,
    /// The revision to resume from.
    pub next_revision: u64,
}

/// What to watch and how to publish.
#[derive(Clone, Debug)]
pub struct BridgeConfig {
    pub endpoint: String,
    pub prefix: String,
    pub from_revision: u64,
    pub sequence: Sequence,
    pub options: FeedOptions,
    /// Bind a non-loopback endpoint although nothing protects the feed.
    pub insecure: bool,
    /// A planted bug for the test that proves its checker catches it
    /// (`cli/tests/t87_zmq_bridge.rs`): a resync publishes the listing
    /// without the "cleared" event first, so subscribers keep keys removed
    /// while the bridge was behind. Reachable from this library only: no
    /// flag of `mooncake events` sets it.
    pub planted_resync_without_clear: bool,
}

struct Bridge {
    socket: Publisher,
    cfg: BridgeConfig,
    translator: Translator,
    published: Published,
    next_event_id: u64,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Bridge {
    fn publish(&mut self, revision: u64, events: &[FeedEvent]) {
        if events.is_empty() {
            return;
        }
        let seq = match self.cfg.sequence {
            Sequence::Revision => revision,
            Sequence::Contiguous => self.published.messages + 1,
        };
        let payload = encode_batch(now_ms(), self.next_event_id, events, &self.cfg.options);
        // Frames: the (empty) topic, the sequence, the payload.
        let frames = [Bytes::new(), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::from(payload)];
        let delivery = self.socket.publish(&frames);
        self.published.dropped_subscribers += delivery.dropped as u64;
        self.next_event_id += events.len() as u64;
        self.published.messages += 1;
        self.published.events += events.len() as u64;
    }

    /// The history is gone: "cleared", then every listed object as stored.
    async fn resync(&mut self, master: &MasterClient) -> Option<u64> {
        let (objects, revision) = match master.list_all_at(&self.cfg.prefix, RESYNC_PAGE).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(error = %e, "resync listing failed; trying again");
                return None;
            }
        };
        self.translator = Translator::default();
        let mut events = match self.cfg.planted_resync_without_clear {
            true => Vec::new(),
            false => vec![FeedEvent::cleared()],
        };
        for o in &objects {
            let stored = mooncake_proto::master::ObjectEvent {
                kind: mooncake_proto::master::object_event::Kind::Stored.into(),
                key: o.key.clone(),
                version: o.version,
                size: o.size,
                replicas: o
                    .replicas
                    .iter()
                    .map(|r| mooncake_proto::master::EventReplica {
                        segment_id: r.segment_id,
                        tier: tier_name(r).into(),
                        host: r.host_id.clone(),
                        zone: r.zone.clone(),
                    })
                    .collect(),
                cause: "put".into(),
            };
            events.extend(self.translator.translate(&stored));
        }
        self.publish(revision, &events);
        self.published.resyncs += 1;
        Some(revision)
    }
}

/// The tier of a listed replica, as events name it.
fn tier_name(r: &mooncake_proto::master::Replica) -> &'static str {
    match mooncake_proto::master::Tier::try_from(r.tier) {
        Ok(mooncake_proto::master::Tier::Ssd) => "disk",
        _ => "memory",
    }
}

/// Publishes until `stop` resolves; returns what it did.
pub async fn run(
    master: Arc<MasterClient>,
    cfg: BridgeConfig,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Published, FeedError> {
    let endpoint = TcpEndpoint::parse(&cfg.endpoint)?;
    if !endpoint.is_loopback().await {
        match cfg.insecure {
            false => return Err(FeedError::Insecure { endpoint: cfg.endpoint.clone() }),
            true => tracing::warn!(endpoint = %cfg.endpoint,
                "publishing KV events unencrypted and unauthenticated to anyone who reaches this port (--insecure)"),
        }
    }
    let socket = Publisher::bind(&endpoint).await?;
    let mut watcher = Watcher::new(master.clone(), cfg.prefix.clone(), cfg.from_revision);
    let mut bridge =
        Bridge { socket, cfg, translator: Translator::default(), published: Published::default(), next_event_id: 1 };
    tokio::pin!(stop);
    loop {
        let item = tokio::select! {
            _ = &mut stop => break,
            item = watcher.next() => item,
        };
        match item {
            Ok(WatchItem::Revision { revision, events }) => {
                let feed: Vec<FeedEvent> = events.iter().flat_map(|e| bridge.translator.translate(e)).collect();
                bridge.publish(revision, &feed);
            }
            Ok(WatchItem::Progress { .. }) => {}
            Err(WatchError::Compacted { .. }) => {
                let resynced = tokio::select! {
                    _ = &mut stop => break,
                    resynced = bridge.resync(&master) => resynced,
                };
                if let Some(revision) = resynced {
                    watcher = Watcher::new(master.clone(), bridge.cfg.prefix.clone(), revision + 1);
                } else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            Err(e @ WatchError::Unavailable { .. }) => {
                tracing::warn!(error = %e, "no master takes the watch; asking again");
                let from = watcher.next_revision();
                watcher = Watcher::new(master.clone(), bridge.cfg.prefix.clone(), from);
            }
        }
    }
    bridge.published.next_revision = watcher.next_revision();
    Ok(bridge.published)
}
