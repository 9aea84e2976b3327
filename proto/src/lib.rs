//! Wire types of mooncake-rs: the generated prost/tonic code for the client
//! API (`master`), the Raft transport between masters (`raft`) and the
//! operator API (`admin`), plus the shared `common::ErrorCode`.
//!
//! This crate knows nothing of Raft, storage or segments: domain crates
//! convert to and from these types at their edges.

pub mod codec;

#[allow(clippy::all, missing_docs)]
pub mod common {
    tonic::include_proto!("mooncake.common");
}
#[allow(clippy::all, missing_docs)]
pub mod master {
    tonic::include_proto!("mooncake.master");
}
#[allow(clippy::all, missing_docs)]
pub mod raft {
    tonic::include_proto!("mooncake.raft");
}
#[allow(clippy::all, missing_docs)]
pub mod admin {
    tonic::include_proto!("mooncake.admin");
}

pub use common::{ErrorCode, Status, StatusReason};

/// Maximum size of one gRPC message between masters or from clients. Raft
/// snapshot chunks and large batches must fit; 64 MiB bounds a peer's memory.
pub const GRPC_MESSAGE_MAX_BYTES: usize = 64 * 1024 * 1024;

impl Status {
    /// A status with `code` and a human-readable `message`.
    pub fn with(code: ErrorCode, message: impl Into<String>) -> Self {
        Status { code: code as i32, message: message.into(), ..Default::default() }
    }

    /// The OK status.
    pub fn ok() -> Self {
        Status::default()
    }

    /// The decoded code; unknown numbers (a newer peer) read as `InternalError`.
    pub fn error_code(&self) -> ErrorCode {
        ErrorCode::try_from(self.code).unwrap_or(ErrorCode::InternalError)
    }
}

/// Every response message carries a [`Status`]; this reads and sets it
/// uniformly, so callers can retry and redirect without knowing the RPC.
pub trait HasStatus {
    fn status(&self) -> Option<&Status>;
    fn set_status(&mut self, status: Status);
}

macro_rules! impl_has_status {
    ($($path:path),* $(,)?) => {$(
        impl HasStatus for $path {
            fn status(&self) -> Option<&Status> {
                self.status.as_ref()
            }
            fn set_status(&mut self, status: Status) {
                self.status = Some(status);
            }
        }
    )*};
}

impl_has_status!(
    master::PingResponse,
    master::WatchResponse,
    master::GetClusterInfoResponse,
    master::MountSegmentResponse,
    master::UnmountSegmentResponse,
    master::RemountSegmentResponse,
    master::PutStartResponse,
    master::PutEndResponse,
    master::PutRevokeResponse,
    master::ReserveChunkResponse,
    master::ReturnChunkResponse,
    master::GetReplicaListResponse,
    master::ExistKeyResponse,
    master::GetSizeResponse,
    master::RemoveResponse,
    master::RemoveAllResponse,
    master::ListObjectsResponse,
    master::BatchPutStartResponse,
    master::BatchPutEndResponse,
    master::BatchPutRevokeResponse,
    master::BatchGetReplicaListResponse,
    master::BatchExistKeyResponse,
    master::BatchRemoveResponse,
    master::ReportCopyResponse,
    master::TakeCopiesResponse,
    master::ReportCorruptResponse,
    master::CreateTaskResponse,
    master::QueryTaskResponse,
    master::PrefetchToMemoryResponse,
    admin::AdminResponse,
    admin::ClusterStatusResponse,
    admin::ListClientsResponse,
    admin::ListTenantsResponse,
    admin::SnapshotChunk,
);
