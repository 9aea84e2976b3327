//! Upstream Mooncake's KV-event feed, from our masters' `Watch`
//! (docs/EVENTS.md, "The ZMQ feed"): [`format`] writes upstream's wire
//! format (three frames, MessagePack maps in its field order),
//! [`translate`] turns our object events into its per-medium events, and
//! [`publisher`] runs the bridge (`mooncake events --zmq`) that publishes
//! them on a ZMQ PUB socket ([`zmtp`], ours: no subscriber can hold it
//! back), gapless across master failovers.
//!
//! Depends on `client` (the watch) and `proto`; only `cli` depends on it.

pub mod format;
pub mod publisher;
pub mod translate;
pub mod zmtp;

pub use format::{EventType, FeedEvent, FeedOptions, Medium, encode_batch};
pub use publisher::{BridgeConfig, FeedError, Published, Sequence, run};
pub use translate::Translator;
