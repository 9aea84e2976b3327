//! The mooncake-rs client library: [`Client`] (put/get with replicas,
//! checksums and replica fallback; optionally serving a segment of this
//! process's memory), [`MasterClient`] for the master quorum (leader
//! discovery, redirects, retries), and the store-node role of a process
//! that serves segments (module `store_node`: its segments, heartbeat,
//! copies).
//!
//! Depends on `proto`, `segment` and `transfer`; never on `master`. Spawns
//! and signals no process: local clusters of child processes live in
//! `mooncake-local-cluster`, above this crate.

pub mod config;
mod error;
mod master_api;
mod master_client;
pub mod planted;
mod remote;
mod store_client;
mod store_node;
mod watch;

pub use config::{ClientConfig, DEFAULT_PUT_CHUNK_BYTES, parse_size};
pub use error::ClientError;
pub use master_client::{Attempted, MasterClient, MasterClientConfig, MasterError, check};
/// The object checksum (CRC-32C) a client computes at put and verifies at get.
pub use mooncake_segment::checksum;
/// The tenant a client acts in (`ClientConfig::tenant`, docs/TENANTS.md).
pub use mooncake_segment::tenant::Tenant;
/// The transports a client can ask for (`ClientConfig::protocol`), and
/// those its engine counts moves under (`Client::engine().stats()`).
pub use mooncake_transfer::{Protocol, TransportKind};
pub use remote::remote;
pub use store_client::{Client, ClientStats, GetSession, Pin, PutOptions, PutOutcome, PutSession, SessionReads};
pub use store_node::{LocalSegment, StoreNode};
pub use watch::{WatchError, WatchItem, Watcher};
