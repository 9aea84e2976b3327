//! What a master refuses, in its own words: the one error type of the
//! leader's work (`objects/`, `raft/`, [`crate::shared::Shared`]). Each
//! variant says why, not which wire code: the edge gives every variant its
//! code in one exhaustive match (`rpc/errors.rs`), so nothing below `rpc/`
//! knows protobuf's `Status` or Mooncake's numbers.

use mooncake_raft_store::{MetaError, NodeId, Response};
use openraft::BasicNode;
use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};

/// Why a request was not done. Nothing was changed by a refused request
/// unless its variant says otherwise.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The state machine's refusal, or a check of the leader's own that
    /// answers as the state machine would (not found, exists, no room ...).
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// This master does not lead; `leader` is the one that does, when known.
    #[error("{}", not_leader_message(.leader))]
    NotLeader { leader: Option<LeaderAt> },
    /// This master cannot answer now (stopping, without a quorum, its
    /// queues closed): retry, here later or at another master.
    #[error("{0}")]
    Unavailable(String),
    /// Something that should not happen did: a bug, said as precisely as
    /// the caller can use.
    #[error("{0}")]
    Internal(String),
    /// The request is malformed or impossible as asked; the message says
    /// what to change.
    #[error("{0}")]
    Invalid(String),
    /// What the request names is not here (an object, a put in flight);
    /// the message says which.
    #[error("{0}")]
    NotFound(String),
    /// The object's put is in flight: its bytes are being written.
    #[error("{0}")]
    NotReady(String),
    /// The caller is not the client that may do this (another writer's put).
    #[error("{0}")]
    NotTheWriter(String),
    /// The object is in a state that does not allow this now (a replica
    /// being copied, a segment detached); retry later.
    #[error("{0}")]
    Busy(String),
    /// No task has this id (for this tenant).
    #[error("{0}")]
    TaskNotFound(String),
    /// Too many tasks wait already; retry once some are done.
    #[error("{0}")]
    TooManyTasks(String),
    /// The tenant's quota would be exceeded; nothing was recorded.
    #[error("{0}")]
    QuotaExceeded(String),
}

/// A state-machine answer as a result: Ok, or its refusal.
pub fn answered(r: &Response) -> Result<(), Refusal> {
    match r {
        Response::Err(e) => Err(Refusal::Meta(e.clone())),
        _ => Ok(()),
    }
}

/// The master that leads, as a redirect names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderAt {
    pub id: NodeId,
    pub addr: String,
}

fn not_leader_message(leader: &Option<LeaderAt>) -> String {
    match leader {
        Some(l) => format!("not the leader; the leader is master {} at {}", l.id, l.addr),
        None => "no leader is elected right now; retry shortly".into(),
    }
}

/// Shorthands for the variants built most.
impl Refusal {
    pub fn unavailable(message: impl Into<String>) -> Self {
        Refusal::Unavailable(message.into())
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Refusal::Internal(message.into())
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Refusal::Invalid(message.into())
    }

    /// A redirect from openraft's answer.
    pub fn forward(f: &ForwardToLeader<NodeId, BasicNode>) -> Self {
        let leader = match (&f.leader_id, &f.leader_node) {
            (Some(id), Some(node)) => Some(LeaderAt { id: *id, addr: node.addr.clone() }),
            _ => None,
        };
        Refusal::NotLeader { leader }
    }

    /// A proposal openraft refused.
    pub fn of_write(e: &RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> Self {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => Refusal::forward(f),
            RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => {
                Refusal::invalid(format!("membership change refused: {c}"))
            }
            RaftError::Fatal(f) => Refusal::unavailable(format!("this master is shutting down or failed: {f}")),
        }
    }

    /// A leadership confirmation before a read that failed.
    pub fn of_read(e: &RaftError<NodeId, CheckIsLeaderError<NodeId, BasicNode>>) -> Self {
        match e {
            RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => Refusal::forward(f),
            RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q)) => {
                Refusal::unavailable(format!("leader cannot reach a quorum: {q}"))
            }
            RaftError::Fatal(f) => Refusal::unavailable(format!("this master is shutting down or failed: {f}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_names_the_leader_when_known() {
        let known = Refusal::forward(&ForwardToLeader::new(2, BasicNode::new("10.0.0.2:50051")));
        assert_eq!(known, Refusal::NotLeader { leader: Some(LeaderAt { id: 2, addr: "10.0.0.2:50051".into() }) });
        assert_eq!(known.to_string(), "not the leader; the leader is master 2 at 10.0.0.2:50051");
        let unknown = Refusal::forward(&ForwardToLeader::empty());
        assert_eq!(unknown, Refusal::NotLeader { leader: None });
        assert!(unknown.to_string().contains("retry"), "{unknown}");
    }
}
