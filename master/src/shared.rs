//! What every service of one master shares: the Raft handle, the applied
//! state, the leader-local soft state and the proposer; plus the leadership
//! checks the services use before they act.

use std::sync::Arc;
use std::time::Instant;

use mooncake_proto::Status;
use mooncake_raft_store::{NodeId, Raft, StateMachineStore, StateReader};
use openraft::error::ForwardToLeader;
use tokio::sync::Notify;

use crate::errors::forward_status;
use crate::leader::LeaderState;
use crate::metrics::MasterMetrics;
use crate::proposer::Proposer;

pub struct Shared {
    pub id: NodeId,
    pub raft: Raft,
    pub reader: StateReader,
    /// The state machine (shared with openraft) for consistent exports.
    pub sm: StateMachineStore,
    pub leader: Arc<LeaderState>,
    pub proposer: Proposer,
    pub evict_now: Arc<Notify>,
    pub metrics: Arc<MasterMetrics>,
    /// Linearizable read barriers, one quorum round per batch of reads.
    pub reads: crate::read_barrier::ReadBarrier,
    /// `--dev-unsafe-stale-reads`: reads skip the leadership check.
    pub unsafe_stale_reads: bool,
}

impl Shared {
    /// NOT_LEADER (with the leader's address) or UNAVAILABLE, from this node's view.
    pub fn not_leader(&self) -> Status {
        let m = self.raft.metrics().borrow().clone();
        let forward = match m.current_leader {
            Some(id) if id != self.id => match m.membership_config.membership().get_node(&id) {
                Some(node) => ForwardToLeader::new(id, node.clone()),
                None => ForwardToLeader::empty(),
            },
            _ => ForwardToLeader::empty(),
        };
        forward_status(&forward)
    }

    /// Ok when this node holds leader soft state for its current term. Cheap;
    /// for reads that must be linearizable use [`Shared::linearizable`].
    pub fn require_leader(&self) -> Result<(), Status> {
        match self.leader.with(|_| ()) {
            Some(()) => Ok(()),
            None => Err(self.not_leader()),
        }
    }

    /// Confirms leadership with a quorum and waits until everything committed
    /// before the call is applied: a read after this sees every acknowledged write.
    pub async fn linearizable(&self) -> Result<(), Status> {
        self.reads.wait().await
    }

    pub fn now(&self) -> Instant {
        Instant::now()
    }
}
