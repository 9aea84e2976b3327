//! The one place where domain and openraft errors become wire [`Status`]es
//! with our stable error codes. Every match is exhaustive on purpose: a new
//! error variant must be given a code here.

use mooncake_proto::{ErrorCode, Status, StatusReason};
use mooncake_raft_store::{MetaError, NodeId, Response};
use openraft::BasicNode;
use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};

/// [`meta_status`] of an owned error (for `map_err`).
pub fn invalid(e: MetaError) -> Status {
    meta_status(&e)
}

/// The wire status of a state-machine answer: OK, or its refusal.
pub fn response_status(r: &Response) -> Status {
    match r {
        Response::Err(e) => meta_status(e),
        _ => Status::ok(),
    }
}

/// The wire status of a state-machine refusal.
pub fn meta_status(e: &MetaError) -> Status {
    let code = match e {
        MetaError::InvalidParams(_) => ErrorCode::InvalidParams,
        MetaError::ObjectNotFound(_) => ErrorCode::ObjectNotFound,
        MetaError::ObjectAlreadyExists(_) => ErrorCode::ObjectAlreadyExists,
        MetaError::ObjectHasLease(_) => ErrorCode::ObjectHasLease,
        MetaError::IllegalClient(_) => ErrorCode::IllegalClient,
        MetaError::NoAvailableHandle(_) => ErrorCode::NoAvailableHandle,
        MetaError::SegmentNotFound(_) => ErrorCode::SegmentNotFound,
        MetaError::SegmentAlreadyExists(_) => ErrorCode::SegmentAlreadyExists,
        // Mooncake answers a PutEnd whose put was discarded OBJECT_NOT_FOUND;
        // the reason (below) tells our clients to put again.
        MetaError::PutExpired(_) => ErrorCode::ObjectNotFound,
        MetaError::PermissionDenied(_) => ErrorCode::PermissionDenied,
        MetaError::QuotaExceeded(_) => ErrorCode::TenantQuotaExceeded,
    };
    let reason = match e {
        MetaError::PutExpired(_) => StatusReason::PutExpired,
        _ => StatusReason::Unspecified,
    };
    Status { reason: reason as i32, ..Status::with(code, e.to_string()) }
}

/// NOT_LEADER with the leader's address, or UNAVAILABLE when none is known.
pub fn forward_status(f: &ForwardToLeader<NodeId, BasicNode>) -> Status {
    match (&f.leader_id, &f.leader_node) {
        (Some(id), Some(node)) => Status {
            code: ErrorCode::NotLeader as i32,
            message: format!("not the leader; the leader is master {id} at {}", node.addr),
            leader_addr: node.addr.clone(),
            leader_id: *id,
            reason: StatusReason::Unspecified as i32,
        },
        _ => unavailable("no leader is elected right now; retry shortly"),
    }
}

pub fn unavailable(message: impl Into<String>) -> Status {
    Status::with(ErrorCode::Unavailable, message)
}

pub fn internal(message: impl Into<String>) -> Status {
    Status::with(ErrorCode::InternalError, message)
}

/// Status of a failed proposal.
pub fn write_error_status(e: &RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> Status {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => forward_status(f),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
            Status::with(ErrorCode::InvalidParams, format!("membership change refused: {c}"))
        }
        RaftError::Fatal(f) => unavailable(format!("this master is shutting down or failed: {f}")),
    }
}

/// Status of a failed leadership confirmation before a read.
pub fn read_error_status(e: &RaftError<NodeId, CheckIsLeaderError<NodeId, BasicNode>>) -> Status {
    match e {
        RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => forward_status(f),
        RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)) => {
            unavailable(format!("leader cannot reach a quorum: {q}"))
        }
        RaftError::Fatal(f) => unavailable(format!("this master is shutting down or failed: {f}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_carries_the_leader_address() {
        let f = ForwardToLeader::new(2, BasicNode::new("10.0.0.2:50051"));
        let s = forward_status(&f);
        assert_eq!(s.error_code(), ErrorCode::NotLeader);
        assert_eq!(s.leader_addr, "10.0.0.2:50051");
        assert_eq!(s.leader_id, 2);
        let unknown = forward_status(&ForwardToLeader::empty());
        assert_eq!(unknown.error_code(), ErrorCode::Unavailable);
    }

    #[test]
    fn every_meta_error_has_its_mooncake_code() {
        let cases = [
            (MetaError::InvalidParams("x".into()), ErrorCode::InvalidParams),
            (MetaError::ObjectNotFound("k".into()), ErrorCode::ObjectNotFound),
            (MetaError::ObjectHasLease("k".into()), ErrorCode::ObjectHasLease),
            (MetaError::NoAvailableHandle("k".into()), ErrorCode::NoAvailableHandle),
            (MetaError::PermissionDenied("c".into()), ErrorCode::PermissionDenied),
        ];
        for (e, code) in cases {
            assert_eq!(meta_status(&e).error_code(), code);
            assert_eq!(meta_status(&e).reason(), StatusReason::Unspecified, "{e}");
        }
    }

    /// A put that expired is Mooncake's OBJECT_NOT_FOUND, with a reason our
    /// clients read (and put again on) instead of the message.
    #[test]
    fn an_expired_put_says_so_in_its_reason() {
        let s = meta_status(&MetaError::PutExpired("\"k\": its arena was returned; retry the put".into()));
        assert_eq!((s.error_code(), s.reason()), (ErrorCode::ObjectNotFound, StatusReason::PutExpired));
    }
}
