//! Who may do what in mooncake-rs, below every other crate so masters,
//! store nodes and clients share one definition:
//!
//! - [`secret`]: the cluster secret every master holds, and the keys derived
//!   from it (Raft message MACs, admin tokens).
//! - [`admin`]: the admin token, and how a request carries it.
//! - [`capability`]: data-path capabilities, the per-replica grants a store
//!   node checks before it serves a TCP READ or WRITE.
//! - [`credential`]: a client's credential, with which it proves it is the
//!   client id it registered as.
//! - [`key_file`]: the 0600 files of 64 hex digits that hold the secret and
//!   credentials.

pub mod admin;
pub mod capability;
pub mod credential;
pub mod key_file;
pub mod secret;

pub use credential::{Credential, CredentialError};
pub use secret::{ClusterSecret, MAC_BYTES, MacKey, Origin, SecretError};
