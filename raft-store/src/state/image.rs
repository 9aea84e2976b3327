//! The state image: the serialisable form of [`MetaState`] that snapshots
//! and snapshot files carry, its older schema versions and their upgrades,
//! and the state hash.
//!
//! Its encoding is pinned (`tests/t05_formats.rs`): a field is only ever
//! added in a new schema version (`SNAPSHOT_SCHEMA_VERSION`), with the old
//! layout kept here as `StateImageV<n>` and upgraded on decode.

use std::collections::BTreeMap;

use mooncake_segment::{ClientId, RangeAllocator, SegmentId};
use openraft::{BasicNode, StoredMembership};
use serde::{Deserialize, Serialize};

use super::requests::RequestMemory;
use super::{ClientEntry, DetachedDisk, DiscardedPut, MetaState, ObjectMeta, RetiredObject, SegmentEntry};
use crate::command::*;
use crate::error::StoreError;
use crate::type_config::{LogId, NodeId};

/// The serialisable form of [`MetaState`] (schema version 5); allocators are
/// rebuilt from the ranges of objects and discarded puts (the free set is
/// canonical, so the rebuilt allocator behaves exactly like the evolved one).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateImage {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    pub now_ms: u64,
    pub next_version: u64,
    pub segments: Vec<(SegmentSpec, ClientId)>,
    pub objects: Vec<ObjectMeta>,
    pub clients: Vec<ClientEntry>,
    pub discarded: Vec<DiscardedPut>,
    /// Remembered request ids: (id, age in request-clock ms, answer). Ages,
    /// not readings: the request clock's origin is not replicated
    /// (`requests.rs`). Schema version 2 stored the `now_ms` of each.
    pub requests: Vec<(u64, u64, Response)>,
    pub arenas: Vec<Arena>,
    pub next_arena: u64,
    pub retired: Vec<RetiredObject>,
    /// The leader timestamp the request clock's next advance is measured
    /// from (added in schema version 3).
    pub request_anchor_ts_ms: u64,
    /// The credential hash of each client that registered with one (added
    /// in schema version 4; clients of older images have none).
    pub client_credentials: Vec<(ClientId, CredentialHash)>,
    /// The detached disk segments (added in schema version 5; older images
    /// have none: no segment could be detached).
    pub detached: Vec<(SegmentId, DetachedDisk)>,
}

/// The image of schema version 4 (before detached disk segments), read by
/// [`StateImage::from_v4`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateImageV4 {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    pub now_ms: u64,
    pub next_version: u64,
    pub segments: Vec<(SegmentSpec, ClientId)>,
    pub objects: Vec<ObjectMeta>,
    pub clients: Vec<ClientEntry>,
    pub discarded: Vec<DiscardedPut>,
    pub requests: Vec<(u64, u64, Response)>,
    pub arenas: Vec<Arena>,
    pub next_arena: u64,
    pub retired: Vec<RetiredObject>,
    pub request_anchor_ts_ms: u64,
    pub client_credentials: Vec<(ClientId, CredentialHash)>,
}

/// The image of schema version 3 (before client credentials), read by
/// [`StateImage::from_v3`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateImageV3 {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    pub now_ms: u64,
    pub next_version: u64,
    pub segments: Vec<(SegmentSpec, ClientId)>,
    pub objects: Vec<ObjectMeta>,
    pub clients: Vec<ClientEntry>,
    pub discarded: Vec<DiscardedPut>,
    pub requests: Vec<(u64, u64, Response)>,
    pub arenas: Vec<Arena>,
    pub next_arena: u64,
    pub retired: Vec<RetiredObject>,
    pub request_anchor_ts_ms: u64,
}

/// The image of schema version 2 (request ids aged on `now_ms`, the largest
/// leader timestamp), read by [`StateImage::from_v2`]. Also the layout the
/// state hash is computed on, so hashes stay comparable across versions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateImageV2 {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    pub now_ms: u64,
    pub next_version: u64,
    pub segments: Vec<(SegmentSpec, ClientId)>,
    pub objects: Vec<ObjectMeta>,
    pub clients: Vec<ClientEntry>,
    pub discarded: Vec<DiscardedPut>,
    /// Remembered request ids: (id, `now_ms` it was applied at, answer).
    pub requests: Vec<(u64, u64, Response)>,
    pub arenas: Vec<Arena>,
    pub next_arena: u64,
    pub retired: Vec<RetiredObject>,
}

/// The image of schema version 1 (before arenas and upserts), read by
/// [`StateImage::from_v1`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StateImageV1 {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    pub now_ms: u64,
    pub next_version: u64,
    pub segments: Vec<(SegmentSpec, ClientId)>,
    pub objects: Vec<ObjectMeta>,
    pub clients: Vec<ClientEntry>,
    pub discarded: Vec<DiscardedPut>,
    pub requests: Vec<(u64, u64, Response)>,
}

impl StateImage {
    /// Upgrades a version-1 image: no arenas, nothing retired, request ids
    /// as in [`StateImage::from_v2`].
    pub fn from_v1(v1: StateImageV1) -> StateImage {
        StateImage::from_v2(StateImageV2 {
            last_applied: v1.last_applied,
            last_membership: v1.last_membership,
            now_ms: v1.now_ms,
            next_version: v1.next_version,
            segments: v1.segments,
            objects: v1.objects,
            clients: v1.clients,
            discarded: v1.discarded,
            requests: v1.requests,
            arenas: Vec::new(),
            next_arena: 0,
            retired: Vec::new(),
        })
    }

    /// Upgrades a version-2 image. Its request ids were stamped with
    /// `now_ms`: each keeps the age it had there, and the request clock is
    /// anchored at `now_ms`. No client has a credential.
    pub fn from_v2(v2: StateImageV2) -> StateImage {
        let ages = v2.requests.into_iter().map(|(id, ms, answer)| (id, v2.now_ms.saturating_sub(ms), answer));
        StateImage::from_v3(StateImageV3 {
            requests: ages.collect(),
            request_anchor_ts_ms: v2.now_ms,
            last_applied: v2.last_applied,
            last_membership: v2.last_membership,
            now_ms: v2.now_ms,
            next_version: v2.next_version,
            segments: v2.segments,
            objects: v2.objects,
            clients: v2.clients,
            discarded: v2.discarded,
            arenas: v2.arenas,
            next_arena: v2.next_arena,
            retired: v2.retired,
        })
    }

    /// Upgrades a version-3 image: no client has a credential (each adopts
    /// the one it next mounts with).
    pub fn from_v3(v3: StateImageV3) -> StateImage {
        StateImage {
            last_applied: v3.last_applied,
            last_membership: v3.last_membership,
            now_ms: v3.now_ms,
            next_version: v3.next_version,
            segments: v3.segments,
            objects: v3.objects,
            clients: v3.clients,
            discarded: v3.discarded,
            requests: v3.requests,
            arenas: v3.arenas,
            next_arena: v3.next_arena,
            retired: v3.retired,
            request_anchor_ts_ms: v3.request_anchor_ts_ms,
            client_credentials: Vec::new(),
            detached: Vec::new(),
        }
    }

    /// Upgrades a version-4 image: no disk segment is detached.
    pub fn from_v4(v4: StateImageV4) -> StateImage {
        StateImage {
            last_applied: v4.last_applied,
            last_membership: v4.last_membership,
            now_ms: v4.now_ms,
            next_version: v4.next_version,
            segments: v4.segments,
            objects: v4.objects,
            clients: v4.clients,
            discarded: v4.discarded,
            requests: v4.requests,
            arenas: v4.arenas,
            next_arena: v4.next_arena,
            retired: v4.retired,
            request_anchor_ts_ms: v4.request_anchor_ts_ms,
            client_credentials: v4.client_credentials,
            detached: Vec::new(),
        }
    }

    /// The replicated data of the image in the version-2 layout (what the
    /// state hash covers): request ids stamped with `now_ms` less their age,
    /// which for an upgraded version-2 image gives back the stamps it had;
    /// and the client credentials and detached segments, which no older
    /// image has.
    #[allow(clippy::type_complexity)]
    fn hashed_part(self) -> (StateImageV2, Vec<(ClientId, CredentialHash)>, Vec<(SegmentId, DetachedDisk)>) {
        let now_ms = self.now_ms;
        let stamped = self.requests.into_iter().map(|(id, age_ms, answer)| (id, now_ms.saturating_sub(age_ms), answer));
        let v2 = StateImageV2 {
            last_applied: self.last_applied,
            last_membership: self.last_membership,
            now_ms: self.now_ms,
            next_version: self.next_version,
            segments: self.segments,
            objects: self.objects,
            clients: self.clients,
            discarded: self.discarded,
            requests: stamped.collect(),
            arenas: self.arenas,
            next_arena: self.next_arena,
            retired: self.retired,
        };
        (v2, self.client_credentials, self.detached)
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
#[serde(bound(serialize = "Seq<O>: Serialize, Seq<C>: Serialize, Seq<D>: Serialize, Seq<Q>: Serialize, \
                           Seq<A>: Serialize, Seq<R>: Serialize, Seq<K>: Serialize"))]
struct StateImageRef<'a, O, C, D, Q, A, R, K> {
    last_applied: Option<LogId>,
    last_membership: &'a StoredMembership<NodeId, BasicNode>,
    now_ms: u64,
    next_version: u64,
    segments: Vec<(SegmentSpec, ClientId)>,
    objects: Seq<O>,
    clients: Seq<C>,
    discarded: Seq<D>,
    requests: Seq<Q>,
    arenas: Seq<A>,
    next_arena: u64,
    retired: Seq<R>,
    request_anchor_ts_ms: u64,
    client_credentials: Seq<K>,
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
            discarded: Seq(self.discarded.len(), || self.discarded.values()),
            requests: Seq(self.requests.count(), || self.requests.image_iter()),
            arenas: Seq(self.arenas.len(), || self.arenas.values()),
            next_arena: self.next_arena,
            retired: Seq(self.retired.len(), || self.retired.values()),
            request_anchor_ts_ms: self.requests.clock().anchor_ts_ms,
            client_credentials: Seq(self.credentials.len(), || self.credentials.iter().map(|(id, h)| (*id, *h))),
            detached: self.segments.values().filter_map(|s| Some((s.spec.id, s.detached.clone()?))).collect(),
        };
        postcard::to_extend(&image, buf)
            .map_err(|e| StoreError::Encode { what: "state image".into(), message: e.to_string() })
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
            discarded: self.discarded.values().cloned().collect(),
            requests: self.requests.image(),
            arenas: self.arenas.values().cloned().collect(),
            next_arena: self.next_arena,
            retired: self.retired.values().cloned().collect(),
            request_anchor_ts_ms: self.requests.clock().anchor_ts_ms,
            client_credentials: self.credentials.iter().map(|(id, h)| (*id, *h)).collect(),
            detached: self.segments.values().filter_map(|s| Some((s.spec.id, s.detached.clone()?))).collect(),
        }
    }

    /// Rebuilds the state (and every allocator) from an image.
    pub fn from_image(image: StateImage) -> Result<Self, StoreError> {
        let corrupt = |message: String| StoreError::Decode { what: "state image".into(), message };
        let mut used: BTreeMap<SegmentId, Vec<mooncake_segment::Range>> = BTreeMap::new();
        let placed = image.objects.iter().flat_map(|o| o.replicas.iter());
        let held = image.discarded.iter().flat_map(|d| d.replicas.iter());
        for r in placed.chain(held).chain(image.retired.iter().flat_map(|d| d.replicas.iter())) {
            used.entry(r.segment).or_default().push(r.range);
        }
        let mut detached: BTreeMap<SegmentId, DetachedDisk> = image.detached.into_iter().collect();
        let mut segments = BTreeMap::new();
        for (spec, owner) in image.segments {
            let ranges = used.remove(&spec.id).unwrap_or_default();
            let alloc = RangeAllocator::with_allocated(spec.size_bytes, ranges)
                .map_err(|e| corrupt(format!("segment {}: {e}", spec.id)))?;
            let detached = detached.remove(&spec.id);
            segments.insert(spec.id, SegmentEntry { spec, owner, alloc, detached });
        }
        if let Some(seg) = detached.keys().next() {
            return Err(corrupt(format!("unknown segment {seg} is detached")));
        }
        if let Some(seg) = used.keys().next() {
            return Err(corrupt(format!("replica on unknown segment {seg}")));
        }
        let clients: BTreeMap<ClientId, ClientEntry> = image.clients.into_iter().map(|c| (c.id, c)).collect();
        if let Some((id, _)) = image.client_credentials.iter().find(|(id, _)| !clients.contains_key(id)) {
            return Err(corrupt(format!("a credential for {id}, which is not registered")));
        }
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
            credentials: image.client_credentials.into_iter().collect(),
            discarded: image.discarded.into_iter().map(|d| (d.version, d)).collect(),
            requests: RequestMemory::from_image(image.requests, image.request_anchor_ts_ms),
            arenas: image.arenas.into_iter().map(|a| (a.id, a)).collect(),
            arenas_by_offset,
            next_arena: image.next_arena,
            scan_credit_records: 0,
            retired: image.retired.into_iter().map(|r| (r.version, r)).collect(),
        })
    }

    /// A deterministic 64-bit hash (FNV-1a) of the replicated data (segments,
    /// objects, clients, discarded puts, request ids, version counter), equal on replicas
    /// that applied the same log. Raft bookkeeping (applied log id, membership) and the
    /// clocks are left out, so a cluster restored from a snapshot hashes like its source
    /// (request ids count with `now_ms` less their age: steady time leaves that alone).
    /// It is computed on the version-2 layout, followed by the client credentials when
    /// there are any: a state read from an older image (or snapshot file) hashes as it
    /// did when it was written.
    pub fn state_hash(&self) -> u64 {
        let (mut image, credentials, detached) = self.to_image().hashed_part();
        image.last_applied = None;
        image.last_membership = StoredMembership::default();
        // The clocks advance with every entry, refused ones included; they
        // are not data a refused command may be said to change.
        image.now_ms = 0;
        let mut bytes = crate::codec::encode("state image", &image).unwrap_or_default();
        if !credentials.is_empty() {
            bytes.extend(crate::codec::encode("client credentials", &credentials).unwrap_or_default());
        }
        if !detached.is_empty() {
            bytes.extend(crate::codec::encode("detached segments", &detached).unwrap_or_default());
        }
        bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
    }
}
