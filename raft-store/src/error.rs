//! Errors of the raft-store crate: `MetaError` is what the state machine
//! answers a command (replicated, part of the response); `StoreError` is a
//! local storage failure (fatal for the node, never replicated).

use serde::{Deserialize, Serialize};

/// A command was refused. Deterministic: every replica refuses the same way.
/// Variants mirror Mooncake's error codes; the master maps them to the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum MetaError {
    #[error("invalid parameters: {0}")]
    InvalidParams(String),
    #[error("object {0:?} not found")]
    ObjectNotFound(String),
    #[error("object {0:?} already exists")]
    ObjectAlreadyExists(String),
    #[error(
        "object {0:?} has a KV lease (a reader may be copying it); retry after the lease expires (default_kv_lease_ttl; an admin may force the removal)"
    )]
    ObjectHasLease(String),
    #[error("client is not allowed to do this: {0}")]
    IllegalClient(String),
    #[error("no segment has room: {0}")]
    NoAvailableHandle(String),
    #[error("segment {0} not found")]
    SegmentNotFound(String),
    #[error("segment already exists: {0}")]
    SegmentAlreadyExists(String),
    /// A put's reservation is gone (its arena returned, its segment lost,
    /// its range taken): nothing was recorded; the writer should put again.
    #[error("put expired: {0}")]
    PutExpired(String),
    /// The caller named a client id registered under another credential.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The put would take its tenant past its quota: nothing was recorded.
    #[error("tenant quota exceeded: {0}")]
    QuotaExceeded(String),
}

/// A local storage failure: what failed and where.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("sled {op}: {source}")]
    Sled {
        op: &'static str,
        #[source]
        source: sled::Error,
    },
    #[error(
        "sled could not open the data dir {dir}: {source}. If its disk is full, free space and start again. If it \
         is not, the files are damaged: keep them for a look, and replace this master under a new id (a fresh \
         data dir with --join, `mooncake member add`, then `mooncake member remove` this id; docs/OPERATIONS.md, \
         Membership)"
    )]
    SledOpen {
        dir: String,
        #[source]
        source: sled::Error,
    },
    #[error("I/O {op} on {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("decode {what}: {message}")]
    Decode { what: String, message: String },
    #[error("encode {what}: {message}")]
    Encode { what: String, message: String },
    #[error(
        "data directory has schema version {found}, this binary reads up to {supported}; \
         upgrade the binary or restore from a snapshot"
    )]
    SchemaVersion { found: u32, supported: u32 },
    /// Data written by a build before format v1 (no release ever wrote it).
    #[error(
        "{what} was written by a pre-release build (before format v1), which this version does not read. Start \
         this master with an empty data dir and --join the cluster, or build a new cluster and put the cache's \
         objects again (docs/STATE_MACHINE.md, Format v1)"
    )]
    PreRelease { what: String },
    #[error(
        "the data dir {dir} went backwards: it holds {holds}, but this master had made durable at least \
         {had} (recorded in {dir}/durable-watermark). The disk lost writes this master acknowledged (corruption, \
         a restored backup or copy, a failing disk); starting from it could break Raft's promises. Replace this \
         master under a new id: start a fresh master with --join, `mooncake member add`, then `mooncake member \
         remove` this id (docs/OPERATIONS.md, Membership)"
    )]
    WentBackwards { dir: String, holds: String, had: String },
    #[error(
        "the data dir {dir} has lost its snapshot: its log starts after index {purged}, but the snapshot \
         ({dir}/raft-snapshot) holds only up to index {applied} (the file was deleted or replaced by an older \
         copy). The entries between are gone from this disk. Replace this master under a new id: start a fresh \
         master with --join, `mooncake member add`, then `mooncake member remove` this id (docs/OPERATIONS.md, \
         Membership)"
    )]
    SnapshotBehindLog { dir: String, purged: u64, applied: u64 },
}

impl StoreError {
    pub(crate) fn sled(op: &'static str) -> impl FnOnce(sled::Error) -> StoreError {
        move |source| StoreError::Sled { op, source }
    }
}
