//! The one error type of the transfer engine, [`TransferError`], and which of
//! its cases are worth retrying.

use std::io;
use std::path::PathBuf;

use mooncake_segment::{DiskError, MemoryError, SegmentId};

use crate::frame::Status;

/// Why a transfer (or a registry/config operation) failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The request did not finish within the configured timeout.
    #[error("transfer to {endpoint} timed out after {after_ms} ms; the store node is overloaded or unreachable")]
    Timeout {
        /// The peer, as `host:port`.
        endpoint: String,
        /// The timeout that expired, in milliseconds.
        after_ms: u64,
    },
    /// The connection could not be made or broke (refused, reset, EOF).
    #[error("store node {endpoint} is gone: {source}")]
    PeerGone {
        /// The peer, as `host:port`.
        endpoint: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The store node is alive but at its connection limit (in total or
    /// for this client's address) and closed the new connection unserved.
    #[error(
        "store node {endpoint} is alive but at its transfer connection limit and refused a new connection; \
         retry later, or lower the lanes/clients per host, or raise its limits \
         (--transfer-connections-max, --transfer-peer-connections-max)"
    )]
    Busy {
        /// The peer, as `host:port`.
        endpoint: String,
    },
    /// The server refused the request.
    #[error("store node {endpoint} answered {status}")]
    Remote {
        /// The status it answered (never `Ok`).
        status: Status,
        /// The peer, as `host:port`.
        endpoint: String,
    },
    /// The store node's disk copy of the range failed checksum verification
    /// (it answered CORRUPT): that replica is lost, another may be intact.
    #[error(
        "store node {endpoint} answered CORRUPT: its disk copy of the range failed checksum verification; read \
         another replica (retrying this one cannot help)"
    )]
    Corrupt {
        /// The peer, as `host:port`.
        endpoint: String,
    },
    /// The peer broke the protocol (bad header, wrong request id or length).
    #[error("store node {endpoint} broke the transfer protocol: {reason}")]
    Protocol {
        /// The peer, as `host:port`.
        endpoint: String,
        /// What was wrong.
        reason: String,
    },
    /// The TLS handshake with the store node failed: one side's certificate
    /// was refused (another CA, a name it does not carry, expired), or the
    /// node does not speak TLS. A configuration problem, not worth a retry.
    #[error(
        "TLS handshake with store node {endpoint} failed: {reason}; check that both sides use certificates of the \
         same CA (--tls-ca) and that TLS is on for both"
    )]
    Tls {
        /// The peer, as `host:port`.
        endpoint: String,
        /// What rustls said.
        reason: String,
    },
    /// A local bounds or memory error (shared-memory transfers).
    #[error("segment memory error: {0}")]
    Memory(#[from] MemoryError),
    /// A local disk segment error (registering or renewing a disk segment).
    #[error("disk segment error: {0}")]
    Disk(#[from] DiskError),
    /// The target's shm file cannot be mapped (not on this host, gone, or re-created).
    #[error("cannot map shm segment {}: {reason}", .path.display())]
    ShmUnavailable {
        /// The segment file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A segment id is registered already.
    #[error("segment {id} is registered already; unregister it first")]
    DuplicateSegment {
        /// The id.
        id: SegmentId,
    },
    /// No segment with this id is registered on this node.
    #[error("segment {id} is not registered on this node")]
    UnknownSegment {
        /// The id.
        id: SegmentId,
    },
    /// The registry is full.
    #[error("cannot register more than {max} segments on one node; mount fewer, larger segments")]
    TooManySegments {
        /// The limit.
        max: usize,
    },
    /// Another live process holds this store node's identity lock: a store
    /// node with the same identity (client id) already runs on this host.
    #[error(
        "another live process holds {}: a store node with the same identity (client id) already runs on this host; \
         stop it first, or give each store node on a host its own --client-id",
        .lock_path.display()
    )]
    ShmOwnerBusy {
        /// The lock file.
        lock_path: PathBuf,
    },
    /// A file operation on the store node's shared-memory files failed.
    #[error(
        "{op} of {} failed on this store node's shared-memory files: {source}; \
         check that the directory exists and this user may create, rename and remove files in it",
        .path.display()
    )]
    ShmOwnerIo {
        /// The operation (`open`, `lock`, `list`, `remove`, `rename`).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A configuration value is invalid.
    #[error("invalid transfer config: {0}")]
    InvalidConfig(String),
}

impl TransferError {
    /// Whether the same request may succeed if sent again (possibly after a
    /// reconnect). Exhaustive on purpose: a new case must decide.
    pub fn is_retryable(&self) -> bool {
        match self {
            TransferError::Timeout { .. } | TransferError::PeerGone { .. } | TransferError::Busy { .. } => true,
            TransferError::Remote { status, .. } => status_is_retryable(*status),
            TransferError::Corrupt { .. }
            | TransferError::Protocol { .. }
            | TransferError::Tls { .. }
            | TransferError::Memory(_)
            | TransferError::Disk(_)
            | TransferError::ShmUnavailable { .. }
            | TransferError::DuplicateSegment { .. }
            | TransferError::UnknownSegment { .. }
            | TransferError::TooManySegments { .. }
            | TransferError::ShmOwnerBusy { .. }
            | TransferError::ShmOwnerIo { .. }
            | TransferError::InvalidConfig(_) => false,
        }
    }
}

fn status_is_retryable(status: Status) -> bool {
    match status {
        Status::Internal | Status::Busy => true,
        // UNAUTHORIZED: the same capability is refused again; a fresh one
        // comes with a new replica list (or PutStart) from the master.
        // CORRUPT: the bytes on the node's disk are bad; another replica,
        // not another try, can help.
        Status::Ok
        | Status::Corrupt
        | Status::UnknownSegment
        | Status::OutOfRange
        | Status::BadFrame
        | Status::TooLarge
        | Status::Unsupported
        | Status::Unauthorized => false,
    }
}
