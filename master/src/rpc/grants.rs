//! Replicas handed to callers, on the wire, with the capabilities to use
//! them: the ranges a PutStart or ReserveChunk reserved (WRITE), and the
//! copies a store node is given (READ of the sources, WRITE of the
//! target). The leader decides what (`objects/`); this is how it is said.

use mooncake_auth::capability::Access;
use mooncake_proto::master as pb;
use mooncake_raft_store::{ArenaId, MetaState, PlacedReplica, ReplicaPlacement};
use mooncake_segment::{Range, SegmentId};

use crate::leader::arena_fences::SegmentFence;
use crate::leader::tiering::Copy;
use crate::rpc::convert::{self, ReplicaState};
use crate::shared::Shared;

/// A placed replica with everything the writer needs to reach it (its
/// arena named; no capability yet).
fn placed_pb(s: &MetaState, r: &PlacedReplica) -> pb::Replica {
    let placement = ReplicaPlacement { segment: r.segment, range: r.range };
    pb::Replica { arena_id: r.arena.0, ..convert::replica_pb(s, &placement, ReplicaState::Processing) }
}

/// Fills each replica's capability: `access` to its range (a WRITE naming
/// its arena), for its segment's owner in `s`; none for a segment `s` does
/// not know.
pub fn sign(shared: &Shared, s: &MetaState, replicas: &mut [pb::Replica], access: Access) {
    for r in replicas {
        let (segment, range, arena) = (SegmentId(r.segment_id), Range::new(r.offset, r.len), ArenaId(r.arena_id));
        if let Some(cap) = shared.auth.capabilities.issue(s, segment, range, arena, access) {
            r.capability = cap;
        }
    }
}

/// The ranges reserved for a writer, each with its WRITE capability.
pub fn writable(shared: &Shared, placed: &[PlacedReplica]) -> Vec<pb::Replica> {
    shared.reader.read(|s| {
        let mut replicas: Vec<pb::Replica> = placed.iter().map(|r| placed_pb(s, r)).collect();
        sign(shared, s, &mut replicas, Access::Write);
        replicas
    })
}

/// Arena fences as a store node is told them (mount, Ping and TakeCopies
/// answers).
pub fn fences(fences: Vec<SegmentFence>) -> Vec<pb::ArenaFence> {
    fences
        .into_iter()
        .map(|f| pb::ArenaFence {
            segment_id: f.segment.0,
            version: f.version,
            live: f.live.into_iter().collect(),
            next: f.next,
        })
        .collect()
}

/// The acknowledgements a store node sends back: (segment, fence version).
pub fn fence_acks(acks: &[pb::FenceAck]) -> Vec<(mooncake_segment::SegmentId, u64)> {
    acks.iter().map(|a| (mooncake_segment::SegmentId(a.segment_id), a.version)).collect()
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
                sign(shared, s, &mut sources, Access::Read);
                let mut target = vec![placed_pb(s, &c.target)];
                sign(shared, s, &mut target, Access::Write);
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
