//! The two snapshot files, which are not the same thing:
//!
//! - `raft_file`: the current Raft snapshot of this master (`raft-snapshot`
//!   in its data dir): openraft's metadata and the state image, what a
//!   restart starts from and what the leader sends a lagging follower;
//! - `export_file`: the file of `mooncake snapshot save` and
//!   `mooncake-master --restore`: a self-describing, checksummed copy of the
//!   replicated state that a new cluster starts from.

pub(crate) mod export_file;
pub(crate) mod raft_file;
