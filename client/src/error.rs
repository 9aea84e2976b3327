//! `ClientError`: everything a store client call can fail with, mapped from
//! the master's error codes and the transfer engine's errors.

use mooncake_proto::ErrorCode;
use mooncake_transfer::TransferError;

use crate::master_client::MasterError;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid client configuration: {0}")]
    Config(String),
    #[error("master: {0}")]
    Master(#[from] MasterError),
    #[error("object {0:?} not found")]
    NotFound(String),
    #[error("transfer failed: {0}")]
    Transfer(#[from] TransferError),
    #[error("object {key:?}: every replica failed ({tried} tried); last error: {last}")]
    AllReplicasFailed { key: String, tried: usize, last: String },
    #[error("buffer of {buf} bytes is too small for object {key:?} of {size} bytes")]
    BufferTooSmall { key: String, size: u64, buf: usize },
    /// A range read reaching past the object's end (nothing was read).
    #[error("range [{offset}, {offset} + {len}) is outside object {key:?} of {size} bytes")]
    RangeOutsideObject { key: String, offset: u64, len: u64, size: u64 },
    #[error("segment memory: {0}")]
    Memory(#[from] mooncake_segment::MemoryError),
    #[error("transfer server: {0}")]
    Io(#[from] std::io::Error),
    /// The put failed after PutStart and was revoked: it had no effect.
    #[error("put failed and was revoked (no effect): {0}")]
    PutRevoked(Box<ClientError>),
    /// A session call that cannot be served: a write after the session's
    /// end, or ranges that overlap (nothing was moved).
    #[error("{0}")]
    InvalidSession(String),
    /// A get session's KV lease ended: its replicas may have been removed
    /// and reused, so nothing it read can be trusted. Start a new session.
    #[error("the KV lease of {key:?} expired; start a new get session")]
    LeaseExpired { key: String },
}

impl ClientError {
    /// True when the failed call certainly changed nothing (see
    /// [`MasterError::is_definite`]); transfer errors and timeouts are not.
    pub fn is_definite(&self) -> bool {
        match self {
            ClientError::Master(m) => m.is_definite(),
            ClientError::NotFound(_)
            | ClientError::Config(_)
            | ClientError::BufferTooSmall { .. }
            | ClientError::RangeOutsideObject { .. }
            | ClientError::InvalidSession(_)
            | ClientError::PutRevoked(_) => true,
            ClientError::Transfer(_)
            | ClientError::AllReplicasFailed { .. }
            | ClientError::Memory(_)
            | ClientError::Io(_)
            | ClientError::LeaseExpired { .. } => false,
        }
    }

    /// The master's stable error code, when the master refused the call.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Master(m) => m.code(),
            ClientError::NotFound(_) => Some(ErrorCode::ObjectNotFound),
            ClientError::PutRevoked(inner) => inner.code(),
            _ => None,
        }
    }
}
