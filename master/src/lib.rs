//! The mooncake master: one member of the replicated metadata quorum. It
//! serves the client API (object and segment metadata), the Raft transport
//! and the admin API over gRPC, health and metrics over HTTP, and runs the
//! leader's duties (client expiry, eviction, reclaim of abandoned puts) as
//! proposed commands.
//!
//! Depends on `raft-store` (state machine and storage), `proto` and
//! `segment`; nothing but tests and tools depends on this crate.

mod admin_service;
mod client_service;
mod cluster_id;
mod cluster_info;
pub mod config;
mod convert;
pub mod decisions;
mod errors;
mod http;
mod instrumented;
pub mod leader;
pub mod lease;
pub mod metrics;
mod network;
mod node;
mod proposer;
mod raft_service;
mod read_barrier;
mod run;
mod shared;
mod workers;

pub use config::MasterConfig;
pub use node::MasterNode;
pub use run::{run, wait_for_signal};
