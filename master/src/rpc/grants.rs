//! Replicas handed to callers, on the wire, with the capabilities to use
//! them: the ranges a PutStart or ReserveChunk reserved (WRITE), and the
//! copies a store node is given (READ of the sources, WRITE of the
//! target). The leader decides what (`objects/`); this is how it is said.

use mooncake_auth::capability::Access;
use mooncake_proto::master as pb;
use mooncake_raft_store::{MetaState, PlacedReplica, ReplicaPlacement};

use crate::leader::tiering::Copy;
use crate::rpc::convert::{self, ReplicaState};
use crate::shared::Shared;

/// A placed replica with everything the writer needs to reach it (its
/// arena named; no capability yet).
fn placed_pb(s: &MetaState, r: &PlacedReplica) -> pb::Replica {
    let placement = ReplicaPlacement { segment: r.segment, range: r.range };
    pb::Replica { arena_id: r.arena.0, ..convert::replica_pb(s, &placement, ReplicaState::Processing) }
}

/// The ranges reserved for a writer, each with its WRITE capability.
pub fn writable(shared: &Shared, placed: &[PlacedReplica]) -> Vec<pb::Replica> {
    shared.reader.read(|s| {
        let mut replicas: Vec<pb::Replica> = placed.iter().map(|r| placed_pb(s, r)).collect();
        shared.auth.capabilities.grant(s, &mut replicas, Access::Write);
        replicas
    })
}

/// The copies handed to their executor, with what it needs to read the
/// sources and write the target.
pub fn copy_tasks(shared: &Shared, copies: &[Copy]) -> Vec<pb::CopyTask> {
    if copies.is_empty() {
        return Vec::new();
    }
    shared.reader.read(|s| {
        copies
            .iter()
            .map(|c| {
                let mut sources: Vec<pb::Replica> =
                    c.sources.iter().map(|r| convert::replica_pb(s, r, ReplicaState::Complete)).collect();
                shared.auth.capabilities.grant(s, &mut sources, Access::Read);
                let mut target = vec![placed_pb(s, &c.target)];
                shared.auth.capabilities.grant(s, &mut target, Access::Write);
                pb::CopyTask {
                    task_id: c.id,
                    key: c.key.clone(),
                    size: c.size_bytes,
                    checksum: c.checksum,
                    sources,
                    target: target.pop(),
                }
            })
            .collect()
    })
}
