//! Conversions between wire messages and domain types, in one place, as
//! `From`/`TryFrom` impls. An enum value this version does not know (a newer
//! client's tier or pin) is refused with INVALID_PARAMS naming the field and
//! the value, never read as some default.
//!
//! The generated types (`mooncake_proto`) and the domain types
//! (`mooncake_raft_store`) are both foreign to this crate, so Rust's orphan
//! rule allows the std traits between them only through a type of ours:
//! [`Wire`] marks the wire side, as in `Tier::try_from(Wire(segment.tier))`
//! and `pb::Segment::from(Wire(&spec))`.

use mooncake_proto::master as pb;
use mooncake_raft_store::state::{ObjectMeta, PutSpec, validate_put};
use mooncake_raft_store::{ArenaId, MetaError, MetaState, Pin, PlacedReplica, ReplicaPlacement, SegmentSpec, Tier};
use mooncake_segment::{ClientId, SegmentId};

use crate::leader::reservations::PutAsk;
use crate::objects::put_end::EndAsk;

/// A wire value (a generated message, or the `i32` of an enum field) on its
/// way into or out of the domain.
pub struct Wire<T>(pub T);

/// The refusal of enum `field`'s value `value`, with the values it may take.
fn unknown(field: &str, value: i32, known: &str) -> MetaError {
    MetaError::InvalidParams(format!("{field} {value} is unknown; use {known}"))
}

/// `TryFrom<Wire<i32>>` (refusing a number `$wire` does not name) and
/// `From<Wire<_>> for i32` of a domain enum, from one table of its variants
/// and theirs; both matches stay exhaustive, so a variant added on either
/// side fails to compile until it is mapped.
macro_rules! wire_enum {
    ($domain:ident <=> pb::$wire:ident, $field:literal, $known:literal, { $($d:ident <=> $w:ident),+ $(,)? }) => {
        impl TryFrom<Wire<i32>> for $domain {
            type Error = MetaError;

            fn try_from(Wire(v): Wire<i32>) -> Result<Self, MetaError> {
                match pb::$wire::try_from(v) {
                    $(Ok(pb::$wire::$w) => Ok($domain::$d),)+
                    Err(_) => Err(unknown($field, v, $known)),
                }
            }
        }

        impl From<Wire<$domain>> for i32 {
            fn from(Wire(v): Wire<$domain>) -> i32 {
                match v {
                    $($domain::$d => pb::$wire::$w as i32,)+
                }
            }
        }
    };
}

wire_enum!(Tier <=> pb::Tier, "tier", "DRAM (0) or SSD (1)", { Dram <=> Dram, Ssd <=> Ssd });
/// A pin from the wire: its value and the soft-pin TTL beside it (0: none).
impl TryFrom<Wire<(i32, u64)>> for Pin {
    type Error = MetaError;

    fn try_from(Wire((v, ttl_ms)): Wire<(i32, u64)>) -> Result<Self, MetaError> {
        let pin = match pb::Pin::try_from(v) {
            Ok(pb::Pin::None) => Pin::None,
            Ok(pb::Pin::Soft) => Pin::Soft,
            Ok(pb::Pin::Hard) => Pin::Hard,
            Err(_) => return Err(unknown("pin", v, "NONE (0), SOFT (1) or HARD (2)")),
        };
        let pin = match (pin, ttl_ms) {
            (pin, 0) => pin,
            (Pin::Soft, ttl_ms) => Pin::SoftFor { ttl_ms },
            (other, ttl_ms) => {
                return Err(MetaError::InvalidParams(format!(
                    "soft_pin_ttl_ms {ttl_ms} with pin {other:?}: a soft-pin TTL needs pin SOFT"
                )));
            }
        };
        mooncake_raft_store::state::validate_pin(pin)?;
        Ok(pin)
    }
}

/// A pin on the wire: its value and its soft-pin TTL (0: none).
impl From<Wire<Pin>> for (i32, u64) {
    fn from(Wire(p): Wire<Pin>) -> (i32, u64) {
        match p {
            Pin::None => (pb::Pin::None as i32, 0),
            Pin::Soft => (pb::Pin::Soft as i32, 0),
            Pin::Hard => (pb::Pin::Hard as i32, 0),
            Pin::SoftFor { ttl_ms } => (pb::Pin::Soft as i32, ttl_ms),
        }
    }
}
/// What a replica on the wire (`ReplicaStatus`) says of its bytes: being
/// written (a put's reservation, a copy being made) or readable. The state
/// machine records only written objects; the leader's reservations are the
/// rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaState {
    Processing,
    Complete,
}

wire_enum!(ReplicaState <=> pb::ReplicaStatus, "status", "PROCESSING (0) or COMPLETE (1)", {
    Processing <=> Processing,
    Complete <=> Complete,
});

impl TryFrom<Wire<&pb::Segment>> for SegmentSpec {
    type Error = MetaError;

    fn try_from(Wire(s): Wire<&pb::Segment>) -> Result<Self, MetaError> {
        Ok(SegmentSpec {
            id: SegmentId(s.id),
            size_bytes: s.size,
            endpoint: s.endpoint.clone(),
            host_id: s.host_id.clone(),
            zone: s.zone.clone(),
            tier: Tier::try_from(Wire(s.tier))?,
            shm_path: s.shm_path.clone(),
        })
    }
}

impl From<Wire<&SegmentSpec>> for pb::Segment {
    fn from(Wire(s): Wire<&SegmentSpec>) -> pb::Segment {
        pb::Segment {
            id: s.id.0,
            size: s.size_bytes,
            endpoint: s.endpoint.clone(),
            host_id: s.host_id.clone(),
            zone: s.zone.clone(),
            tier: Wire(s.tier).into(),
            shm_path: s.shm_path.clone(),
        }
    }
}

impl TryFrom<Wire<&pb::PutStartRequest>> for PutSpec {
    type Error = MetaError;

    fn try_from(Wire(r): Wire<&pb::PutStartRequest>) -> Result<Self, MetaError> {
        Ok(PutSpec {
            client: ClientId(r.client_id),
            key: r.key.clone(),
            size_bytes: r.size,
            replica_num: r.replica_num,
            preferred: r.preferred_segments.iter().map(|s| SegmentId(*s)).collect(),
            pin: Pin::try_from(Wire((r.pin, r.soft_pin_ttl_ms)))?,
        })
    }
}

/// Refuses a PutEnd carrying an enum value this version does not know. The
/// leader holding the put's reservation reads none of them (its reservation
/// has the pin and the replicas), but an unknown value is refused all the
/// same: a request is refused or taken whole.
/// The pin it asks for, read.
pub fn check_put_end(r: &pb::PutEndRequest) -> Result<Pin, MetaError> {
    let pin = Pin::try_from(Wire((r.pin, r.soft_pin_ttl_ms)))?;
    for (i, replica) in r.replicas.iter().enumerate() {
        let known = Tier::try_from(Wire(replica.tier)).and_then(|_| ReplicaState::try_from(Wire(replica.status)));
        known.map_err(|e| match e {
            MetaError::InvalidParams(m) => MetaError::InvalidParams(format!("replicas[{i}]: {m}")),
            other => other,
        })?;
    }
    Ok(pin)
}

/// A PutEnd as the leader plans it (`pin`: as [`check_put_end`] read it):
/// the echoed ranges apart from the grants that prove them.
pub fn end_ask(r: &pb::PutEndRequest, pin: Pin) -> EndAsk<'_> {
    EndAsk {
        key: &r.key,
        client: ClientId(r.client_id),
        size: r.size,
        checksum: r.checksum,
        upsert: r.upsert,
        request_id: r.request_id,
        chunk_id: r.chunk_id,
        pin,
        echoed: r
            .replicas
            .iter()
            .map(|p| PlacedReplica {
                segment: SegmentId(p.segment_id),
                arena: ArenaId(p.arena_id),
                range: mooncake_segment::Range::new(p.offset, p.len),
            })
            .collect(),
        grants: r.replicas.iter().map(|p| p.capability.as_slice()).collect(),
    }
}

/// The put a PutStart asks for, and its preferred segments; refused when
/// malformed or asking for more `min_replicas` than replicas.
pub fn put_ask(req: &pb::PutStartRequest) -> Result<(PutAsk, Vec<SegmentId>), MetaError> {
    let spec = PutSpec::try_from(Wire(req))?;
    validate_put(&spec)?;
    if req.min_replicas > spec.replica_num {
        return Err(MetaError::InvalidParams(format!(
            "min_replicas {} exceeds replica_num {} for {:?}: ask for at least as many replicas as the put must have",
            req.min_replicas, spec.replica_num, spec.key
        )));
    }
    let ask = PutAsk {
        key: spec.key,
        client: spec.client,
        size_bytes: spec.size_bytes,
        replica_num: spec.replica_num as usize,
        min_replicas: req.min_replicas.max(1) as usize,
        pin: spec.pin,
        upsert: req.upsert,
    };
    Ok((ask, spec.preferred))
}

/// `pb::Segment::from(Wire(s))`, by the name cluster_info.rs calls it.
pub fn segment_pb(s: &SegmentSpec) -> pb::Segment {
    pb::Segment::from(Wire(s))
}

/// A replica with everything a client needs to reach it.
pub fn replica_pb(state: &MetaState, r: &ReplicaPlacement, status: ReplicaState) -> pb::Replica {
    let spec = state.segment(r.segment).map(|s| &s.spec);
    pb::Replica {
        segment_id: r.segment.0,
        offset: r.range.offset,
        len: r.range.len,
        status: Wire(status).into(),
        endpoint: spec.map(|s| s.endpoint.clone()).unwrap_or_default(),
        host_id: spec.map(|s| s.host_id.clone()).unwrap_or_default(),
        zone: spec.map(|s| s.zone.clone()).unwrap_or_default(),
        shm_path: spec.map(|s| s.shm_path.clone()).unwrap_or_default(),
        segment_size: spec.map(|s| s.size_bytes).unwrap_or_default(),
        arena_id: 0,
        // Filled by the answers that hand out access (capabilities.rs).
        capability: Vec::new(),
        // A replica whose segment is gone is listed as in memory.
        tier: Wire(state.segment(r.segment).map_or(Tier::Dram, |s| s.tier())).into(),
    }
}

pub fn object_pb(state: &MetaState, o: &ObjectMeta) -> pb::ObjectInfo {
    let (pin, soft_pin_ttl_ms) = Wire(o.pin).into();
    pb::ObjectInfo {
        key: o.key.clone(),
        size: o.size_bytes,
        checksum: o.checksum,
        status: Wire(ReplicaState::Complete).into(),
        replicas: o.replicas.iter().map(|r| replica_pb(state, r, ReplicaState::Complete)).collect(),
        pin,
        soft_pin_ttl_ms,
        version: o.version.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of an INVALID_PARAMS refusal; panics on anything else.
    fn refusal<T: std::fmt::Debug>(r: Result<T, MetaError>) -> String {
        match r {
            Err(MetaError::InvalidParams(m)) => m,
            other => panic!("expected INVALID_PARAMS, got {other:?}"),
        }
    }

    /// Values no version of the protocol has used: just past the last,
    /// far past it, and negative (a corrupt or hostile varint).
    const UNKNOWN: [i32; 4] = [3, 7, i32::MAX, -1];

    #[test]
    fn every_known_enum_value_round_trips_with_the_protos_numbers() {
        for (tier, wire) in [(Tier::Dram, pb::Tier::Dram), (Tier::Ssd, pb::Tier::Ssd)] {
            assert_eq!(i32::from(Wire(tier)), wire as i32);
            assert_eq!(Tier::try_from(Wire(wire as i32)), Ok(tier));
        }
        let pins = [
            (Pin::None, pb::Pin::None, 0),
            (Pin::Soft, pb::Pin::Soft, 0),
            (Pin::Hard, pb::Pin::Hard, 0),
            (Pin::SoftFor { ttl_ms: 5 }, pb::Pin::Soft, 5),
        ];
        for (pin, wire, ttl_ms) in pins {
            assert_eq!(<(i32, u64)>::from(Wire(pin)), (wire as i32, ttl_ms));
            assert_eq!(Pin::try_from(Wire((wire as i32, ttl_ms))), Ok(pin));
        }
        let statuses = [
            (ReplicaState::Processing, pb::ReplicaStatus::Processing),
            (ReplicaState::Complete, pb::ReplicaStatus::Complete),
        ];
        for (status, wire) in statuses {
            assert_eq!(i32::from(Wire(status)), wire as i32);
            assert_eq!(ReplicaState::try_from(Wire(wire as i32)), Ok(status));
        }
    }

    #[test]
    fn an_unknown_enum_value_is_refused_naming_the_field_and_the_value() {
        for v in UNKNOWN {
            let tier = refusal(Tier::try_from(Wire(v)));
            assert!(tier.starts_with(&format!("tier {v} is unknown")), "{tier}");
            let status = refusal(ReplicaState::try_from(Wire(v)));
            assert!(status.starts_with(&format!("status {v} is unknown")), "{status}");
        }
        // Pin has a third value, so 3 is the first unknown one as well.
        for v in UNKNOWN {
            let pin = refusal(Pin::try_from(Wire((v, 0))));
            assert!(pin.starts_with(&format!("pin {v} is unknown")), "{pin}");
        }
    }

    fn segment(tier: i32) -> pb::Segment {
        pb::Segment {
            id: 5,
            size: 1 << 20,
            endpoint: "h:1".into(),
            host_id: "h".into(),
            zone: "z".into(),
            tier,
            shm_path: String::new(),
        }
    }

    #[test]
    fn a_segment_converts_field_by_field_and_back() {
        let wire = segment(pb::Tier::Ssd as i32);
        let spec = SegmentSpec::try_from(Wire(&wire)).expect("a known tier");
        assert_eq!((spec.id, spec.size_bytes, spec.tier), (SegmentId(5), 1 << 20, Tier::Ssd));
        assert_eq!(pb::Segment::from(Wire(&spec)), wire);
    }

    #[test]
    fn a_segment_of_an_unknown_tier_is_refused_not_read_as_memory() {
        let e = refusal(SegmentSpec::try_from(Wire(&segment(7))));
        assert!(e.contains("tier 7"), "{e}");
    }

    #[test]
    fn a_put_start_of_an_unknown_pin_is_refused_not_read_as_none() {
        let req = pb::PutStartRequest {
            client_id: 1,
            key: "k".into(),
            size: 10,
            replica_num: 1,
            pin: 9,
            ..Default::default()
        };
        let e = refusal(PutSpec::try_from(Wire(&req)));
        assert!(e.contains("pin 9"), "{e}");
        let req = pb::PutStartRequest { pin: pb::Pin::Hard as i32, ..req };
        assert_eq!(PutSpec::try_from(Wire(&req)).map(|p| p.pin), Ok(Pin::Hard));
    }

    #[test]
    fn a_soft_pin_ttl_needs_a_soft_pin_and_a_day_at_most() {
        let soft = pb::Pin::Soft as i32;
        assert_eq!(Pin::try_from(Wire((soft, 86_400_000))), Ok(Pin::SoftFor { ttl_ms: 86_400_000 }));
        let e = refusal(Pin::try_from(Wire((soft, 86_400_001))));
        assert!(e.contains("86400001"), "{e}");
        for other in [pb::Pin::None as i32, pb::Pin::Hard as i32] {
            let e = refusal(Pin::try_from(Wire((other, 1000))));
            assert!(e.contains("needs pin SOFT"), "{e}");
        }
    }

    #[test]
    fn a_put_end_echoing_an_unknown_enum_value_is_refused_naming_where() {
        let replica = pb::Replica { tier: pb::Tier::Ssd as i32, ..Default::default() };
        let req = pb::PutEndRequest { key: "k".into(), pin: 1, replicas: vec![replica.clone()], ..Default::default() };
        assert_eq!(check_put_end(&req), Ok(Pin::Soft));
        let cases = [
            ("pin 9", pb::PutEndRequest { pin: 9, ..req.clone() }),
            (
                "replicas[1]: tier 7",
                pb::PutEndRequest {
                    replicas: vec![replica.clone(), pb::Replica { tier: 7, ..replica.clone() }],
                    ..req.clone()
                },
            ),
            (
                "replicas[0]: status -1",
                pb::PutEndRequest { replicas: vec![pb::Replica { status: -1, ..replica.clone() }], ..req.clone() },
            ),
        ];
        for (needle, bad) in cases {
            let e = refusal(check_put_end(&bad));
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }
}
