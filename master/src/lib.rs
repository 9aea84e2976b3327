//! The mooncake master: one member of the replicated metadata quorum. It
//! serves the client API (object and segment metadata), the Raft transport
//! and the admin API over gRPC, health and metrics over HTTP, and runs the
//! leader's duties (client expiry, eviction, reclaim of expired puts and
//! returned arenas) as proposed commands.
//!
//! Its folders, by job: `rpc` (the edge: services and conversions), `raft`
//! (consensus plumbing), `leader` (leader-local soft state and the pure
//! decisions over it), `objects` (what the leader does to objects and
//! their bytes), `duties` (background loops), `node` (wiring one master).
//!
//! Two leases live here and are never called by each other's name: the
//! *KV lease* (`leader::kv_lease`) is Mooncake's per-object promise to a reader that
//! the object stays until it expires; the *leader lease* (`raft::leader_lease`)
//! lets the Raft leader answer reads without a quorum round.
//!
//! Depends on `raft-store` (state machine and storage), `proto` and
//! `segment`; nothing but tests and tools depends on this crate.

pub mod duties;
pub mod leader;
pub mod metrics;
pub mod node;
pub mod objects;
pub mod raft;
pub mod refusal;
pub mod rpc;
mod shared;

pub use node::MasterNode;
pub use node::config::MasterConfig;
pub use node::run::{run, wait_for_signal};
pub use raft::cluster_id::founding_id;
pub use raft::network::raft_mac;
