//! openraft storage on sled for the mooncake master quorum: the durable log
//! and vote ([`LogStore`]), the replicated metadata state machine
//! ([`MetaState`], applied deterministically from log entries), and its
//! snapshots ([`StateMachineStore`]).
//!
//! Depends on `segment` (ids, the offset allocator) and never on the network,
//! the gRPC types or the clock: time arrives inside each [`Request`].
//!
//! Its parts: `log/` (the Raft log and vote, group commit, purges),
//! `state_machine.rs` (openraft's state machine over [`MetaState`]),
//! `state/` (the state and its deterministic apply), `snapshot/` (the Raft
//! snapshot file and the export file), `data_dir/` (opening the data dir,
//! durable writes, the durable watermark), `codec.rs` (the one encoding),
//! `checkpoints.rs` (state hashes the masters compare).
//!
//! The command vocabulary (`command.rs`) and the openraft type configuration
//! (`type_config.rs`) are re-exported here; the state machine's own items
//! are reached through [`state`]. The `testing` feature adds `testing`:
//! builders of command values for tests, examples and benches.

mod checkpoints;
pub mod codec;
mod command;
mod data_dir;
mod error;
pub mod events;
pub mod fatal;
mod log;
mod observer;
mod snapshot;
pub mod state;
mod state_machine;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod type_config;

pub use checkpoints::{CHECKPOINTS_KEPT, Checkpoints};
pub use command::*;
pub use data_dir::durable::{DataSync, write_file_durably};
pub use data_dir::{DATA_DIR_FORMAT_VERSION, StoreOptions, open_store};
pub use error::{MetaError, StoreError};
pub use log::LogStore;
pub use log::flushed::FlushedLog;
pub use observer::{NoopObserver, StoreObserver};
pub use snapshot::export_file::{SnapshotFileInfo, decode_snapshot_file, encode_snapshot_file, load_snapshot_file};
pub use state::{MetaState, TenantUsage};
pub use state_machine::{
    SNAPSHOT_SCHEMA_VERSION, StateMachineStore, StateReader, decode_image, encode_image, in_state_read,
};
pub use type_config::*;
