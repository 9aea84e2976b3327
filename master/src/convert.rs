//! Conversions between wire messages and domain types, in one place. An
//! enum value this version does not know (a newer client's tier or pin) is
//! refused with INVALID_PARAMS, never read as some default.

use mooncake_proto::master as pb;
use mooncake_raft_store::state::{ObjectMeta, ObjectStatus};
use mooncake_raft_store::{MetaError, MetaState, Pin, PutStart, ReplicaPlacement, SegmentSpec, Tier};
use mooncake_segment::{ClientId, SegmentId};

/// A wire tier.
pub fn tier(t: i32) -> Result<Tier, MetaError> {
    match pb::Tier::try_from(t) {
        Ok(pb::Tier::Dram) => Ok(Tier::Dram),
        Ok(pb::Tier::Ssd) => Ok(Tier::Ssd),
        Err(_) => Err(MetaError::InvalidParams(format!("tier {t} is unknown; use DRAM (0) or SSD (1)"))),
    }
}

pub fn segment_spec(s: &pb::Segment) -> Result<SegmentSpec, MetaError> {
    Ok(SegmentSpec {
        id: SegmentId(s.id),
        size_bytes: s.size,
        endpoint: s.endpoint.clone(),
        host_id: s.host_id.clone(),
        zone: s.zone.clone(),
        tier: tier(s.tier)?,
        shm_path: s.shm_path.clone(),
    })
}

pub fn segment_pb(s: &SegmentSpec) -> pb::Segment {
    pb::Segment {
        id: s.id.0,
        size: s.size_bytes,
        endpoint: s.endpoint.clone(),
        host_id: s.host_id.clone(),
        zone: s.zone.clone(),
        tier: match s.tier {
            Tier::Dram => pb::Tier::Dram as i32,
            Tier::Ssd => pb::Tier::Ssd as i32,
        },
        shm_path: s.shm_path.clone(),
    }
}

pub fn pin(p: i32) -> Result<Pin, MetaError> {
    match pb::Pin::try_from(p) {
        Ok(pb::Pin::None) => Ok(Pin::None),
        Ok(pb::Pin::Soft) => Ok(Pin::Soft),
        Ok(pb::Pin::Hard) => Ok(Pin::Hard),
        Err(_) => Err(MetaError::InvalidParams(format!("pin {p} is unknown; use NONE (0), SOFT (1) or HARD (2)"))),
    }
}

pub fn pin_pb(p: Pin) -> i32 {
    match p {
        Pin::None => pb::Pin::None as i32,
        Pin::Soft => pb::Pin::Soft as i32,
        Pin::Hard => pb::Pin::Hard as i32,
    }
}

pub fn put_start(r: &pb::PutStartRequest) -> Result<PutStart, MetaError> {
    Ok(PutStart {
        client: ClientId(r.client_id),
        key: r.key.clone(),
        size_bytes: r.size,
        replica_num: r.replica_num,
        preferred: r.preferred_segments.iter().map(|s| SegmentId(*s)).collect(),
        pin: pin(r.pin)?,
    })
}

/// A replica with everything a client needs to reach it.
pub fn replica_pb(state: &MetaState, r: &ReplicaPlacement, status: ObjectStatus) -> pb::Replica {
    let spec = state.segment(r.segment).map(|s| &s.spec);
    pb::Replica {
        segment_id: r.segment.0,
        offset: r.range.offset,
        len: r.range.len,
        status: match status {
            ObjectStatus::Processing => pb::ReplicaStatus::Processing as i32,
            ObjectStatus::Complete => pb::ReplicaStatus::Complete as i32,
        },
        endpoint: spec.map(|s| s.endpoint.clone()).unwrap_or_default(),
        host_id: spec.map(|s| s.host_id.clone()).unwrap_or_default(),
        zone: spec.map(|s| s.zone.clone()).unwrap_or_default(),
        shm_path: spec.map(|s| s.shm_path.clone()).unwrap_or_default(),
        segment_size: spec.map(|s| s.size_bytes).unwrap_or_default(),
        arena_id: 0,
        // Filled by the answers that hand out access (capabilities.rs).
        capability: Vec::new(),
        tier: match state.segment(r.segment).map(|s| s.tier()) {
            Some(Tier::Ssd) => pb::Tier::Ssd as i32,
            _ => pb::Tier::Dram as i32,
        },
    }
}

pub fn object_pb(state: &MetaState, o: &ObjectMeta) -> pb::ObjectInfo {
    pb::ObjectInfo {
        key: o.key.clone(),
        size: o.size_bytes,
        checksum: o.checksum.unwrap_or(0),
        status: match o.status {
            ObjectStatus::Processing => pb::ReplicaStatus::Processing as i32,
            ObjectStatus::Complete => pb::ReplicaStatus::Complete as i32,
        },
        replicas: o.replicas.iter().map(|r| replica_pb(state, r, o.status)).collect(),
        pin: pin_pb(o.pin),
    }
}
