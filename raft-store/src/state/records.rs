//! The records the state keeps: objects ([`ObjectMeta`]), mounted segments
//! ([`SegmentEntry`], with their allocators and detached disks), registered
//! clients, and the ranges of replaced objects held until they can be
//! freed.

use mooncake_segment::{ClientId, Range, RangeAllocator};
use serde::{Deserialize, Serialize};

use crate::command::{CredentialHash, ObjectVersion, Pin, ReplicaPlacement, SegmentSpec, Tier};

/// One object incarnation and where its replicas live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub key: String,
    pub version: ObjectVersion,
    pub size_bytes: u64,
    /// crc32c of the bytes.
    pub checksum: u32,
    pub writer: ClientId,
    pub replicas: Vec<ReplicaPlacement>,
    pub pin: Pin,
    /// State time of the `PutCommit` that recorded it (when it became
    /// readable).
    pub committed_ms: u64,
}

/// A mounted segment: its declaration, its owner and its free space.
#[derive(Clone, Debug)]
pub struct SegmentEntry {
    pub spec: SegmentSpec,
    pub owner: ClientId,
    pub(super) alloc: RangeAllocator,
    /// A disk segment whose store node expired (`ExpireClientKeepDisk`):
    /// kept with its objects, neither read nor placed on, until its owner
    /// mounts it again or the grace ends it (docs/TIERS.md).
    pub(super) detached: Option<DetachedDisk>,
    /// The one tenant whose objects it holds (`MountTenantSegment`, schema
    /// 3): a store node dedicates its memory to a tenant, and UCX keys to a
    /// dedicated segment reach that tenant's bytes only (docs/TENANTS.md).
    /// `None`: every tenant's objects may be placed on it.
    pub(super) tenant: Option<String>,
}

/// Why and since when a disk segment is detached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachedDisk {
    /// State time when its owner expired.
    pub since_ms: u64,
    /// The credential its owner was registered with: only a caller holding
    /// the same may mount it again.
    pub credential: CredentialHash,
}

impl SegmentEntry {
    /// The tier of the segment.
    pub fn tier(&self) -> Tier {
        self.spec.tier
    }
    /// Whether it is served: not a detached disk segment.
    pub fn is_attached(&self) -> bool {
        self.detached.is_none()
    }
    pub fn detached(&self) -> Option<&DetachedDisk> {
        self.detached.as_ref()
    }
    pub fn used_bytes(&self) -> u64 {
        self.alloc.used_bytes()
    }
    pub fn free_bytes(&self) -> u64 {
        self.alloc.free_bytes()
    }
    pub fn capacity_bytes(&self) -> u64 {
        self.alloc.capacity_bytes()
    }
    /// The tenant the segment is dedicated to, if any.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
    /// Whether objects of tenant `name` may be placed on it: it is
    /// dedicated to none, or to that one.
    pub fn serves(&self, name: &str) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == name)
    }
    /// Whether every byte of `range` is free (no object or retired bytes).
    pub fn is_free(&self, range: Range) -> bool {
        self.alloc.is_free(range)
    }
}

/// A registered client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientEntry {
    pub id: ClientId,
    pub registered_ms: u64,
    /// The hash of the credential it registered with: only a caller
    /// holding the same may act as it.
    pub credential: CredentialHash,
}

/// Ranges of an object replaced by an upsert, held until no KV lease on the
/// old bytes can be left (the leader then releases them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredObject {
    pub version: ObjectVersion,
    pub key: String,
    pub replicas: Vec<ReplicaPlacement>,
    pub retired_ms: u64,
}
