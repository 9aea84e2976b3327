//! The state image: the serialisable form of [`MetaState`] that snapshots
//! and snapshot files carry (format v1), and the state hash.
//!
//! Its encoding is pinned (`tests/t05_formats.rs`): from format v1 on, a
//! field is only ever added in a new schema version
//! (`SNAPSHOT_SCHEMA_VERSION`), with the old layout kept here and upgraded
//! on decode.

use std::collections::BTreeMap;

use mooncake_segment::{ClientId, RangeAllocator, SegmentId};
use openraft::{BasicNode, StoredMembership};
use serde::{Deserialize, Serialize};

use super::requests::RequestMemory;
use super::{ClientEntry, DetachedDisk, MetaState, ObjectMeta, RetiredObject, SegmentEntry};
use crate::command::*;
use crate::error::StoreError;
use crate::type_config::{LogId, NodeId};

/// The serialisable form of [`MetaState`] (schema 3: format v1, the
/// tenants' quotas and the dedicated segments); allocators are rebuilt from the ranges of objects and
/// retired objects (the free set is canonical, so the rebuilt allocator
/// behaves exactly like the evolved one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateImage {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    pub now_ms: u64,
    pub next_version: u64,
    pub segments: Vec<(SegmentSpec, ClientId)>,
    pub objects: Vec<ObjectMeta>,
    pub clients: Vec<ClientEntry>,
    /// Remembered request ids: (id, age in request-clock ms, answer). Ages,
    /// not readings: the request clock's origin is not replicated
    /// (`requests.rs`).
    pub requests: Vec<(u64, u64, Response)>,
    /// The leader timestamp the request clock's next advance is measured
    /// from.
    pub request_anchor_ts_ms: u64,
    pub arenas: Vec<Arena>,
    pub next_arena: u64,
    pub retired: Vec<RetiredObject>,
    /// The detached disk segments.
    pub detached: Vec<(SegmentId, DetachedDisk)>,
    /// Each tenant's quota in bytes, by name (schema 2).
    pub tenant_quotas: Vec<(String, u64)>,
    /// The tenant each dedicated segment serves, by segment (schema 3).
    pub segment_tenants: Vec<(SegmentId, String)>,
}

/// What schema 2 and 3 add to schema 1, in their order: the quotas, then
/// the dedicated segments (schema 3 only).
pub type ImageExtensions = (Vec<(String, u64)>, Vec<(SegmentId, String)>);

/// The image of schema 1 (format v1, before tenants' quotas): decoded from
/// snapshots written then, and what the state hash covers (the quotas are
/// hashed after it, only when there are any, so a state without quotas
/// hashes as it did under schema 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateImageV1 {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    pub now_ms: u64,
    pub next_version: u64,
    pub segments: Vec<(SegmentSpec, ClientId)>,
    pub objects: Vec<ObjectMeta>,
    pub clients: Vec<ClientEntry>,
    /// Remembered request ids: (id, age in request-clock ms, answer). Ages,
    /// not readings: the request clock's origin is not replicated
    /// (`requests.rs`).
    pub requests: Vec<(u64, u64, Response)>,
    /// The leader timestamp the request clock's next advance is measured
    /// from.
    pub request_anchor_ts_ms: u64,
    pub arenas: Vec<Arena>,
    pub next_arena: u64,
    pub retired: Vec<RetiredObject>,
    /// The detached disk segments.
    pub detached: Vec<(SegmentId, DetachedDisk)>,
}

impl StateImage {
    /// The schema-1 part and what later schemas add.
    pub fn split(self) -> (StateImageV1, ImageExtensions) {
        let StateImage {
            last_applied,
            last_membership,
            now_ms,
            next_version,
            segments,
            objects,
            clients,
            requests,
            request_anchor_ts_ms,
            arenas,
            next_arena,
            retired,
            detached,
            tenant_quotas,
            segment_tenants,
        } = self;
        let v1 = StateImageV1 {
            last_applied,
            last_membership,
            now_ms,
            next_version,
            segments,
            objects,
            clients,
            requests,
            request_anchor_ts_ms,
            arenas,
            next_arena,
            retired,
            detached,
        };
        (v1, (tenant_quotas, segment_tenants))
    }

    /// The image of schema 1 with what later schemas add.
    pub fn join(v1: StateImageV1, (tenant_quotas, segment_tenants): ImageExtensions) -> Self {
        StateImage { tenant_quotas, segment_tenants, ..StateImage::from(v1) }
    }
}

impl From<StateImageV1> for StateImage {
    fn from(v1: StateImageV1) -> Self {
        let StateImageV1 {
            last_applied,
            last_membership,
            now_ms,
            next_version,
            segments,
            objects,
            clients,
            requests,
            request_anchor_ts_ms,
            arenas,
            next_arena,
            retired,
            detached,
        } = v1;
        StateImage {
            last_applied,
            last_membership,
            now_ms,
            next_version,
            segments,
            objects,
            clients,
            requests,
            request_anchor_ts_ms,
            arenas,
            next_arena,
            retired,
            detached,
            tenant_quotas: Vec::new(),
            segment_tenants: Vec::new(),
        }
    }
}

/// A sequence serialised from an iterator of known length, as a `Vec` of
/// its items would be: the image of a state without copying its records.
struct Seq<F>(usize, F);

impl<F, I> Serialize for Seq<F>
where
    F: Fn() -> I,
    I: Iterator,
    I::Item: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0))?;
        let mut n = 0;
        for item in (self.1)() {
            seq.serialize_element(&item)?;
            n += 1;
        }
        if n != self.0 {
            return Err(serde::ser::Error::custom(format!("{n} items where {} were announced", self.0)));
        }
        seq.end()
    }
}

/// [`StateImage`] borrowed from a state: the same fields in the same order,
/// so it encodes to the same bytes. A snapshot of 10 M objects encodes from
/// here without first cloning every record into an image (~1.5 GB of small
/// allocations, freed right after).
#[derive(Serialize)]
#[serde(bound(serialize = "Seq<O>: Serialize, Seq<C>: Serialize, Seq<Q>: Serialize, Seq<A>: Serialize, \
                           Seq<R>: Serialize"))]
struct StateImageRef<'a, O, C, Q, A, R> {
    last_applied: Option<LogId>,
    last_membership: &'a StoredMembership<NodeId, BasicNode>,
    now_ms: u64,
    next_version: u64,
    segments: Vec<(SegmentSpec, ClientId)>,
    objects: Seq<O>,
    clients: Seq<C>,
    requests: Seq<Q>,
    request_anchor_ts_ms: u64,
    arenas: Seq<A>,
    next_arena: u64,
    retired: Seq<R>,
    detached: Vec<(SegmentId, DetachedDisk)>,
}

impl MetaState {
    /// The encoding of [`MetaState::to_image`], made from the state in place.
    pub fn encode_image(&self, buf: Vec<u8>) -> Result<Vec<u8>, StoreError> {
        let image = StateImageRef {
            last_applied: self.last_applied,
            last_membership: &self.last_membership,
            now_ms: self.now_ms,
            next_version: self.next_version,
            segments: self.segments.values().map(|s| (s.spec.clone(), s.owner)).collect(),
            objects: Seq(self.objects.len(), || self.objects.values()),
            clients: Seq(self.clients.len(), || self.clients.values()),
            requests: Seq(self.requests.count(), || self.requests.image_iter()),
            request_anchor_ts_ms: self.requests.clock().anchor_ts_ms,
            arenas: Seq(self.arenas.len(), || self.arenas.values()),
            next_arena: self.next_arena,
            retired: Seq(self.retired.len(), || self.retired.values()),
            detached: self.segments.values().filter_map(|s| Some((s.spec.id, s.detached.clone()?))).collect(),
        };
        let encode_err = |e: postcard::Error| StoreError::Encode { what: "state image".into(), message: e.to_string() };
        let buf = postcard::to_extend(&image, buf).map_err(encode_err)?;
        // Schema 2 is schema 1's fields, then the quotas; schema 3 adds the
        // dedicated segments (postcard frames no struct): a state without
        // either encodes as schema 1 did.
        match self.image_schema() {
            1 => Ok(buf),
            2 => postcard::to_extend(&self.tenant_quotas, buf).map_err(encode_err),
            _ => {
                let buf = postcard::to_extend(&self.tenant_quotas, buf).map_err(encode_err)?;
                postcard::to_extend(&self.segment_tenants(), buf).map_err(encode_err)
            }
        }
    }

    /// The schema of this state's image: 1 (format v1) until some tenant
    /// has a quota (2) or some segment is dedicated to a tenant (3), so
    /// masters of earlier releases still read what they can.
    pub fn image_schema(&self) -> u32 {
        match (self.tenant_quotas.is_empty(), self.segments.values().all(|s| s.tenant.is_none())) {
            (true, true) => 1,
            (false, true) => 2,
            (_, false) => 3,
        }
    }

    /// The tenant of each dedicated segment, by segment.
    fn segment_tenants(&self) -> Vec<(SegmentId, String)> {
        self.segments.values().filter_map(|s| Some((s.spec.id, s.tenant.clone()?))).collect()
    }

    /// The serialisable image of the state.
    pub fn to_image(&self) -> StateImage {
        StateImage {
            last_applied: self.last_applied,
            last_membership: self.last_membership.clone(),
            now_ms: self.now_ms,
            next_version: self.next_version,
            segments: self.segments.values().map(|s| (s.spec.clone(), s.owner)).collect(),
            objects: self.objects.values().cloned().collect(),
            clients: self.clients.values().cloned().collect(),
            requests: self.requests.image(),
            request_anchor_ts_ms: self.requests.clock().anchor_ts_ms,
            arenas: self.arenas.values().cloned().collect(),
            next_arena: self.next_arena,
            retired: self.retired.values().cloned().collect(),
            detached: self.segments.values().filter_map(|s| Some((s.spec.id, s.detached.clone()?))).collect(),
            tenant_quotas: self.tenant_quotas.iter().map(|(t, b)| (t.clone(), *b)).collect(),
            segment_tenants: self.segment_tenants(),
        }
    }

    /// Rebuilds the state (and every allocator) from an image.
    pub fn from_image(image: StateImage) -> Result<Self, StoreError> {
        let corrupt = |message: String| StoreError::Decode { what: "state image".into(), message };
        let mut used: BTreeMap<SegmentId, Vec<mooncake_segment::Range>> = BTreeMap::new();
        let placed = image.objects.iter().flat_map(|o| o.replicas.iter());
        for r in placed.chain(image.retired.iter().flat_map(|d| d.replicas.iter())) {
            used.entry(r.segment).or_default().push(r.range);
        }
        let mut detached: BTreeMap<SegmentId, DetachedDisk> = image.detached.into_iter().collect();
        if image.segment_tenants.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(corrupt("dedicated segments out of order or repeated".into()));
        }
        let mut tenants: BTreeMap<SegmentId, String> = BTreeMap::new();
        for (seg, name) in image.segment_tenants {
            if mooncake_segment::tenant::Tenant::parse(&name).map_or(true, |t| t.name() != name) {
                return Err(corrupt(format!("segment {seg} is dedicated to {name:?}, which cannot be a tenant")));
            }
            tenants.insert(seg, name);
        }
        let mut segments = BTreeMap::new();
        for (spec, owner) in image.segments {
            let ranges = used.remove(&spec.id).unwrap_or_default();
            let alloc = RangeAllocator::with_allocated(spec.size_bytes, ranges)
                .map_err(|e| corrupt(format!("segment {}: {e}", spec.id)))?;
            let detached = detached.remove(&spec.id);
            let tenant = tenants.remove(&spec.id);
            segments.insert(spec.id, SegmentEntry { spec, owner, alloc, detached, tenant });
        }
        if let Some(seg) = detached.keys().next() {
            return Err(corrupt(format!("unknown segment {seg} is detached")));
        }
        if let Some(seg) = tenants.keys().next() {
            return Err(corrupt(format!("unknown segment {seg} is dedicated to a tenant")));
        }
        for (name, bytes) in &image.tenant_quotas {
            if *bytes == 0 || mooncake_segment::tenant::Tenant::parse(name).map_or(true, |t| t.name() != name) {
                return Err(corrupt(format!("tenant quota {name:?} of {bytes} bytes cannot be one")));
            }
        }
        if image.tenant_quotas.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(corrupt("tenant quotas out of order or repeated".into()));
        }
        if let Some(seg) = used.keys().next() {
            return Err(corrupt(format!("replica on unknown segment {seg}")));
        }
        let clients: BTreeMap<ClientId, ClientEntry> = image.clients.into_iter().map(|c| (c.id, c)).collect();
        let mut arenas_by_offset = BTreeMap::new();
        for a in &image.arenas {
            if !segments.contains_key(&a.segment) {
                return Err(corrupt(format!("{} on unknown segment {}", a.id, a.segment)));
            }
            for e in &a.extents {
                arenas_by_offset.insert((a.segment, e.offset), a.id);
            }
        }
        Ok(MetaState {
            last_applied: image.last_applied,
            last_membership: image.last_membership,
            now_ms: image.now_ms,
            next_version: image.next_version,
            segments,
            objects: image.objects.into_iter().collect(),
            clients,
            requests: RequestMemory::from_image(image.requests, image.request_anchor_ts_ms),
            arenas: image.arenas.into_iter().map(|a| (a.id, a)).collect(),
            arenas_by_offset,
            next_arena: image.next_arena,
            scan_credit_records: 0,
            events: Default::default(),
            retired: image.retired.into_iter().map(|r| (r.version, r)).collect(),
            tenant_quotas: image.tenant_quotas.into_iter().collect(),
        })
    }

    /// A deterministic 64-bit hash (FNV-1a) of the replicated data (segments,
    /// objects, clients, request ids, arenas, retired objects, counters),
    /// equal on replicas that applied the same log. Raft bookkeeping
    /// (applied log id, membership) and the clocks are left out, so a
    /// cluster restored from a snapshot hashes like its source: request ids
    /// count with `now_ms` less their age, which steady time leaves alone.
    pub fn state_hash(&self) -> u64 {
        let mut image = self.to_image();
        let now_ms = image.now_ms;
        for (_, age_ms, _) in &mut image.requests {
            *age_ms = now_ms.saturating_sub(*age_ms);
        }
        image.last_applied = None;
        image.last_membership = StoredMembership::default();
        // The clocks advance with every entry, refused ones included; they
        // are not data a refused command may be said to change.
        image.now_ms = 0;
        image.request_anchor_ts_ms = 0;
        let (v1, (quotas, dedicated)) = image.split();
        let fnv =
            |h: u64, bytes: &[u8]| bytes.iter().fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
        let hash = fnv(0xcbf2_9ce4_8422_2325, &crate::codec::encode("state image", &v1).unwrap_or_default());
        // What later schemas add is hashed only where there is any, so a
        // state of an earlier schema hashes as it did then.
        let hash = match quotas.is_empty() {
            true => hash,
            false => fnv(hash, &crate::codec::encode("tenant quotas", &quotas).unwrap_or_default()),
        };
        match dedicated.is_empty() {
            true => hash,
            false => fnv(hash, &crate::codec::encode("dedicated segments", &dedicated).unwrap_or_default()),
        }
    }
}
