//! The one place where refusals ([`Refusal`], and the state machine's
//! [`MetaError`] inside them) become wire [`Status`]es with our stable
//! error codes. Every match is exhaustive on purpose: a new
//! error variant must be given a code here.

use mooncake_proto::{ErrorCode, Status, StatusReason};
use mooncake_raft_store::{MetaError, NodeId, Response};
use openraft::BasicNode;
use openraft::error::{ClientWriteError, RaftError};

use crate::refusal::Refusal;

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

/// The wire status of a refusal: the one place each [`Refusal`] gets its
/// code. Exhaustive: a new variant must be given one here.
pub fn status(r: &Refusal) -> Status {
    let code = match r {
        Refusal::Meta(e) => return meta_status(e),
        Refusal::NotLeader { leader: Some(l) } => {
            return Status {
                code: ErrorCode::NotLeader as i32,
                message: r.to_string(),
                leader_addr: l.addr.clone(),
                leader_id: l.id,
                reason: StatusReason::Unspecified as i32,
            };
        }
        Refusal::NotLeader { leader: None } | Refusal::Unavailable(_) => ErrorCode::Unavailable,
        Refusal::Internal(_) => ErrorCode::InternalError,
        Refusal::Invalid(_) => ErrorCode::InvalidParams,
        Refusal::NotFound(_) => ErrorCode::ObjectNotFound,
        Refusal::NotReady(_) => ErrorCode::ReplicaIsNotReady,
        Refusal::NotTheWriter(_) => ErrorCode::IllegalClient,
        Refusal::Busy(_) => ErrorCode::UnavailableInCurrentStatus,
        Refusal::TaskNotFound(_) => ErrorCode::TaskNotFound,
        Refusal::TooManyTasks(_) => ErrorCode::TaskPendingLimitExceeded,
        Refusal::QuotaExceeded(_) => ErrorCode::TenantQuotaExceeded,
    };
    Status::with(code, r.to_string())
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Self {
        status(&r)
    }
}

/// OK, or the refusal's status: the answer of a call that returns nothing
/// else.
pub fn answer(r: Result<(), Refusal>) -> Status {
    match r {
        Ok(()) => Status::ok(),
        Err(r) => status(&r),
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
    status(&Refusal::of_write(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    use openraft::error::ForwardToLeader;

    #[test]
    fn forward_carries_the_leader_address() {
        let f = ForwardToLeader::new(2, BasicNode::new("10.0.0.2:50051"));
        let s = status(&Refusal::forward(&f));
        assert_eq!(s.error_code(), ErrorCode::NotLeader);
        assert_eq!(s.leader_addr, "10.0.0.2:50051");
        assert_eq!(s.leader_id, 2);
        let unknown = status(&Refusal::forward(&ForwardToLeader::empty()));
        assert_eq!(unknown.error_code(), ErrorCode::Unavailable);
    }

    /// Each refusal of the leader's own keeps the code Mooncake answers it
    /// with, and its message.
    #[test]
    fn every_refusal_has_its_mooncake_code() {
        let cases = [
            (Refusal::unavailable("u"), ErrorCode::Unavailable),
            (Refusal::internal("i"), ErrorCode::InternalError),
            (Refusal::invalid("v"), ErrorCode::InvalidParams),
            (Refusal::NotFound("n".into()), ErrorCode::ObjectNotFound),
            (Refusal::NotReady("r".into()), ErrorCode::ReplicaIsNotReady),
            (Refusal::NotTheWriter("w".into()), ErrorCode::IllegalClient),
            (Refusal::Busy("b".into()), ErrorCode::UnavailableInCurrentStatus),
            (Refusal::TaskNotFound("t".into()), ErrorCode::TaskNotFound),
            (Refusal::TooManyTasks("m".into()), ErrorCode::TaskPendingLimitExceeded),
            (Refusal::QuotaExceeded("q".into()), ErrorCode::TenantQuotaExceeded),
            (Refusal::Meta(MetaError::ObjectHasLease("k".into())), ErrorCode::ObjectHasLease),
        ];
        for (r, code) in cases {
            let s = status(&r);
            assert_eq!(s.error_code(), code, "{r}");
            assert_eq!(s.message, r.to_string());
        }
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
