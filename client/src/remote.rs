//! The transfer engine's view of a replica a master handed out.

use mooncake_auth::capability::Capability;
use mooncake_proto::master::Replica;
use mooncake_segment::SegmentId;
use mooncake_transfer::RemoteSegment;

/// Where a replica lives, for the transfer engine, with the capability the
/// master granted for its range (a malformed one is sent as none: the store
/// node refuses it either way, and says so).
pub fn remote(r: &Replica) -> RemoteSegment {
    RemoteSegment {
        id: SegmentId(r.segment_id),
        endpoint: r.endpoint.clone(),
        host_id: r.host_id.clone(),
        shm_path: r.shm_path.clone(),
        size_bytes: r.segment_size,
        capability: Capability::decode(&r.capability).ok(),
    }
}
