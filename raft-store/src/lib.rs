//! openraft storage on sled for the mooncake master quorum: the durable log
//! and vote ([`LogStore`]), the replicated metadata state machine
//! ([`MetaState`], applied deterministically from log entries), and its
//! snapshots ([`StateMachineStore`]).
//!
//! Depends on `segment` (ids, the offset allocator) and never on the network,
//! the gRPC types or the clock: time arrives inside each [`Request`].
//!
//! The command vocabulary (`command.rs`) and the openraft type configuration
//! (`type_config.rs`) are re-exported here; the state machine's own items
//! are reached through [`state`]. The `testing` feature adds `testing`:
//! builders of command values for tests, examples and benches.

mod checkpoints;
pub mod codec;
mod command;
mod current_snapshot;
mod durable;
mod error;
pub mod fatal;
mod flushed;
mod flusher;
mod janitor;
mod log_store;
mod observer;
mod sm_store;
mod snapshot_file;
pub mod state;
mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod type_config;
mod watermark;

pub use checkpoints::{CHECKPOINTS_KEPT, Checkpoints};
pub use command::*;
pub use durable::{DataSync, write_file_durably};
pub use error::{MetaError, StoreError};
pub use flushed::FlushedLog;
pub use log_store::LogStore;
pub use observer::{NoopObserver, StoreObserver};
pub use sm_store::{
    SNAPSHOT_SCHEMA_VERSION, StateMachineStore, StateReader, decode_image, encode_image, in_state_read,
};
pub use snapshot_file::{SnapshotFileInfo, decode_snapshot_file, encode_snapshot_file, load_snapshot_file};
pub use state::MetaState;
pub use store::{DATA_DIR_FORMAT_VERSION, StoreOptions, open_store};
pub use type_config::*;
