//! The mooncake master: one member of the replicated metadata quorum. It
//! serves the client API (object and segment metadata), the Raft transport
//! and the admin API over gRPC, health and metrics over HTTP, and runs the
//! leader's duties (client expiry, eviction, reclaim of abandoned puts) as
//! proposed commands.
//!
//! Two leases live here and are never called by each other's name: the
//! *KV lease* (`kv_lease`) is Mooncake's per-object promise to a reader that
//! the object stays until it expires; the *leader lease* (`leader_lease`)
//! lets the Raft leader answer reads without a quorum round.
//!
//! Depends on `raft-store` (state machine and storage), `proto` and
//! `segment`; nothing but tests and tools depends on this crate.

mod admin_service;
pub mod arena_cuts;
pub mod arena_fences;
mod capabilities;
mod client_service;
mod cluster_id;
mod cluster_info;
pub mod config;
mod convert;
mod copies;
pub mod decisions;
pub mod disk_space;
mod errors;
pub mod eviction;
mod http;
mod instrumented;
pub mod kv_lease;
pub mod leader;
pub mod leader_lease;
pub mod metrics;
mod network;
mod node;
pub mod peer;
mod peers_heard;
pub mod ports;
pub mod prevote;
mod proposer;
mod puts;
mod raft_service;
mod read_barrier;
pub mod removal;
pub mod reservations;
mod roles;
mod run;
mod shared;
pub mod state_audit;
pub mod tiering;
mod workers;

pub use cluster_id::founding_id;
pub use config::MasterConfig;
pub use network::raft_mac;
pub use node::MasterNode;
pub use run::{run, wait_for_signal};
