//! The openraft type configuration of the master quorum and the aliases of
//! openraft's generic types under it (node ids, log ids, entries, the Raft
//! handle). The command vocabulary it carries lives in `command.rs`.

use std::io::Cursor;

use crate::command::{Request, Response};

openraft::declare_raft_types!(
    /// openraft types of the mooncake master quorum.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A master's id in the Raft group.
pub type NodeId = u64;
/// A log id of this type configuration.
pub type LogId = openraft::LogId<NodeId>;
/// A log entry of this type configuration.
pub type Entry = openraft::Entry<TypeConfig>;
/// The openraft handle of this type configuration.
pub type Raft = openraft::Raft<TypeConfig>;
