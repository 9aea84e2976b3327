//! Why a UCX operation failed: [`UcxError`], shared by the worker, the
//! store node's exports and the client's route.

use super::ffi;
use super::worker::UCX_BLOB_MAX_BYTES;

/// Why a UCX operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UcxError {
    /// UCX returned an error status.
    #[error("UCX {what} failed: {message} (status {status})")]
    Status {
        /// The call.
        what: &'static str,
        /// The UCS status code.
        status: i32,
        /// UCS's words for it.
        message: String,
    },
    /// The endpoint to the peer failed (unreachable, reset, timed out) or
    /// was closed because a caller gave up on it.
    #[error("UCX endpoint to the peer failed: {message} (status {status})")]
    PeerFailed {
        /// The UCS status code.
        status: i32,
        /// UCS's words for it.
        message: String,
    },
    /// A peer's worker address or remote key is empty or too large.
    #[error("UCX {what} from the peer is {len} bytes; expected 1 to {UCX_BLOB_MAX_BYTES}")]
    BadBlob {
        /// Which blob.
        what: &'static str,
        /// Its size.
        len: usize,
    },
    /// This node has exported as many segments as it may in its life.
    #[error("this node has exported {max} segments over UCX, its limit; restart it to export more")]
    TooManyExports {
        /// The limit.
        max: usize,
    },
    /// The worker thread has stopped.
    #[error("the UCX worker thread has stopped")]
    WorkerGone,
}

impl UcxError {
    pub(super) fn status(what: &'static str, status: i32) -> Self {
        UcxError::Status { what, status, message: ffi::status_string(status) }
    }

    pub(super) fn peer(status: i32) -> Self {
        UcxError::PeerFailed { status, message: ffi::status_string(status) }
    }
}
