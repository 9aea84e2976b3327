//! One copy the leader plans ([`Plan`]): what the copy duty (`copies/`)
//! hands a store node to run, whatever asked for it (the tiers, repair, hot
//! keys, a user's task in `user_tasks.rs`).

use mooncake_raft_store::state::{ObjectMeta, SegmentEntry};
use mooncake_raft_store::{ObjectVersion, ReplicaPlacement, Tier};
use mooncake_segment::ClientId;

use crate::leader::reservations::Candidate;
use crate::leader::user_tasks::TaskId;

/// One copy to make, as planned from the state.
pub(crate) struct Plan {
    /// A repair's target replica count (0 for the other purposes).
    pub wanted: usize,
    pub key: String,
    pub version: ObjectVersion,
    pub size_bytes: u64,
    pub checksum: u32,
    pub sources: Vec<ReplicaPlacement>,
    pub target: Candidate,
    pub tier: Tier,
    pub executor: ClientId,
    /// The user's task it is part of (`Purpose::User`).
    pub task: Option<TaskId>,
}

impl Plan {
    /// A copy of `o` from `sources` to `target` (as a `tier` replica), run
    /// by the store node that owns the target.
    pub(crate) fn of(
        o: &ObjectMeta,
        sources: Vec<ReplicaPlacement>,
        target: &SegmentEntry,
        tier: Tier,
        task: Option<TaskId>,
    ) -> Plan {
        Plan {
            wanted: 0,
            key: o.key.clone(),
            version: o.version,
            size_bytes: o.size_bytes,
            checksum: o.checksum,
            sources,
            target: Candidate::of(target, true),
            tier,
            executor: target.owner,
            task,
        }
    }
}
