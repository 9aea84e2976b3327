//! The mooncake-rs client library: [`Client`] (put/get with replicas,
//! checksums and replica fallback; optionally serving a segment of this
//! process's memory), [`MasterClient`] for the master quorum (leader
//! discovery, redirects, retries), and the pieces of the `mooncake` CLI.
//!
//! Depends on `proto`, `segment` and `transfer`; never on `master`.

pub mod config;
mod copier;
mod error;
mod heartbeat;
pub mod local_cluster;
mod local_segment;
mod master_api;
mod master_client;
mod store_client;

pub use config::{ClientConfig, parse_size};
pub use error::ClientError;
pub use local_cluster::{LocalCluster, LocalClusterBuilder, Role};
pub use local_segment::LocalSegment;
pub use master_client::{Attempted, MasterClient, MasterClientConfig, MasterError, check};
/// The object checksum (CRC-32C) a client computes at put and verifies at get.
pub use mooncake_segment::checksum;
pub use store_client::{Client, ClientStats, PutOptions, PutOutcome, remote};
