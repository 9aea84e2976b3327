//! The mooncake-rs client library: [`MasterClient`] for the master quorum
//! (leader discovery, redirects, retries), and the pieces of the `mooncake`
//! CLI (`status`). The data path (transfers, store node) arrives with the
//! transfer engine.
//!
//! Depends on `proto`, `segment` and `transfer`; never on `master`.

mod master_api;
mod master_client;
pub mod status;

pub use master_client::{MasterClient, MasterClientConfig, MasterError, check};
