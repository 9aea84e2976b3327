//! Mooncake's error codes (the negative integers its Python API returns) and
//! the one mapping from our errors to them. Every code a binding returns
//! comes from here.

use mooncake_client::{ClientError, MasterError};
use mooncake_proto::ErrorCode;

/// A Mooncake return code: 0 success, negative an error.
pub type Code = i64;

pub const OK: Code = 0;
/// Mooncake `INTERNAL_ERROR`.
pub const INTERNAL_ERROR: Code = -1;
/// Mooncake `SEGMENT_NOT_FOUND`.
pub const SEGMENT_NOT_FOUND: Code = -101;
/// Mooncake `SEGMENT_ALREADY_EXISTS`.
pub const SEGMENT_ALREADY_EXISTS: Code = -102;
/// Mooncake `NO_AVAILABLE_HANDLE`: no segment has room for the object.
pub const NO_AVAILABLE_HANDLE: Code = -200;
/// Mooncake `INVALID_PARAMS`: bad arguments, unregistered or too small
/// buffers, calls before `setup` or after `close`.
pub const INVALID_PARAMS: Code = -600;
/// Mooncake `ILLEGAL_CLIENT`.
pub const ILLEGAL_CLIENT: Code = -601;
/// Mooncake `REPLICA_IS_NOT_READY`.
pub const REPLICA_IS_NOT_READY: Code = -703;
/// Mooncake `OBJECT_NOT_FOUND`.
pub const OBJECT_NOT_FOUND: Code = -704;
/// Mooncake `OBJECT_ALREADY_EXISTS`.
pub const OBJECT_ALREADY_EXISTS: Code = -705;
/// Mooncake `OBJECT_HAS_LEASE`: a reader may still hold a KV lease.
pub const OBJECT_HAS_LEASE: Code = -706;
/// Mooncake `LEASE_EXPIRED`: a get session's KV lease ended before or
/// while it read; start a new session.
pub const LEASE_EXPIRED: Code = -707;
/// Mooncake `TRANSFER_FAIL`: no replica could be read or written.
pub const TRANSFER_FAIL: Code = -800;
/// Mooncake `RPC_FAIL`: no master answered within the client's deadline.
pub const RPC_FAIL: Code = -900;
/// Mooncake `UNAVAILABLE_IN_CURRENT_STATUS`: a segment named for a copy
/// exists but cannot take it.
pub const UNAVAILABLE_IN_CURRENT_STATUS: Code = -1010;
/// Mooncake `TASK_NOT_FOUND`: `query_task` of an id the leader does not know.
pub const TASK_NOT_FOUND: Code = -1400;
/// Mooncake `TASK_PENDING_LIMIT_EXCEEDED`: too many tasks not finished.
pub const TASK_PENDING_LIMIT_EXCEEDED: Code = -1401;

/// The Mooncake code of a failed client call.
pub fn of_client(e: &ClientError) -> Code {
    match e {
        ClientError::Master(m) => of_master(m),
        ClientError::NotFound(_) => OBJECT_NOT_FOUND,
        ClientError::PutRevoked(inner) => of_client(inner),
        ClientError::Config(_)
        | ClientError::BufferTooSmall { .. }
        | ClientError::RangeOutsideObject { .. }
        | ClientError::InvalidSession(_) => INVALID_PARAMS,
        ClientError::LeaseExpired { .. } => LEASE_EXPIRED,
        ClientError::Transfer(_) | ClientError::AllReplicasFailed { .. } => TRANSFER_FAIL,
        ClientError::Memory(_) | ClientError::Io(_) => INTERNAL_ERROR,
    }
}

/// The Mooncake code of a failed master call.
pub fn of_master(e: &MasterError) -> Code {
    match e {
        MasterError::Config(_) => INVALID_PARAMS,
        MasterError::Unavailable { .. } | MasterError::NotCaughtUp { .. } => RPC_FAIL,
        MasterError::Rejected { code, .. } => of_error_code(*code),
        MasterError::PutExpired { .. } => of_error_code(ErrorCode::ObjectNotFound),
    }
}

/// Our master's stable codes in Mooncake's numbering. `NOT_LEADER` and
/// `UNAVAILABLE` reach a caller only when every retry failed: `RPC_FAIL`.
pub fn of_error_code(code: ErrorCode) -> Code {
    match code {
        ErrorCode::Ok => OK,
        ErrorCode::InternalError | ErrorCode::NeedRemount => INTERNAL_ERROR,
        ErrorCode::InvalidParams => INVALID_PARAMS,
        ErrorCode::NotLeader | ErrorCode::Unavailable => RPC_FAIL,
        ErrorCode::ObjectNotFound => OBJECT_NOT_FOUND,
        ErrorCode::ObjectAlreadyExists => OBJECT_ALREADY_EXISTS,
        ErrorCode::ObjectHasLease => OBJECT_HAS_LEASE,
        ErrorCode::ReplicaIsNotReady => REPLICA_IS_NOT_READY,
        ErrorCode::IllegalClient | ErrorCode::PermissionDenied => ILLEGAL_CLIENT,
        // Upstream has no quota code: its frameworks treat "no space" as a
        // cache miss to skip, which is what a full tenant is to them.
        ErrorCode::NoAvailableHandle | ErrorCode::TenantQuotaExceeded => NO_AVAILABLE_HANDLE,
        ErrorCode::SegmentNotFound => SEGMENT_NOT_FOUND,
        ErrorCode::SegmentAlreadyExists => SEGMENT_ALREADY_EXISTS,
        ErrorCode::UnavailableInCurrentStatus => UNAVAILABLE_IN_CURRENT_STATUS,
        ErrorCode::TaskNotFound => TASK_NOT_FOUND,
        ErrorCode::TaskPendingLimitExceeded => TASK_PENDING_LIMIT_EXCEEDED,
    }
}

/// A call's result as a code: `ok` on success.
pub fn of_result<T>(r: &Result<T, ClientError>, ok: impl FnOnce(&T) -> Code) -> Code {
    match r {
        Ok(v) => ok(v),
        Err(e) => of_client(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_errors_get_mooncakes_numbers() {
        assert_eq!(of_client(&ClientError::NotFound("k".into())), -704);
        let rejected = |code| ClientError::Master(MasterError::Rejected { code, message: String::new(), attempts: 1 });
        assert_eq!(of_client(&rejected(ErrorCode::ObjectHasLease)), -706);
        assert_eq!(of_client(&rejected(ErrorCode::NoAvailableHandle)), -200);
        assert_eq!(of_client(&rejected(ErrorCode::ReplicaIsNotReady)), -703);
        assert_eq!(of_client(&rejected(ErrorCode::UnavailableInCurrentStatus)), -1010);
        assert_eq!(of_client(&rejected(ErrorCode::TaskNotFound)), -1400);
        assert_eq!(of_client(&rejected(ErrorCode::TaskPendingLimitExceeded)), -1401);
        assert_eq!(of_client(&ClientError::PutRevoked(Box::new(rejected(ErrorCode::ObjectAlreadyExists)))), -705);
        let small = ClientError::BufferTooSmall { key: "k".into(), size: 2, buf: 1 };
        assert_eq!(of_client(&small), INVALID_PARAMS);
        let down = MasterError::Unavailable { deadline: std::time::Duration::ZERO, attempts: 3, last: String::new() };
        assert_eq!(of_master(&down), RPC_FAIL);
        assert_eq!(of_result(&Ok::<u64, ClientError>(7), |n| *n as Code), 7);
    }
}
