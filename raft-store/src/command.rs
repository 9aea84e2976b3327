//! The replicated command vocabulary: what a log entry may ask of the state
//! machine ([`Request`], [`Command`] and the values inside them) and what it
//! answers ([`Response`]).
//!
//! Every type here is persisted (in log entries, and in snapshots through the
//! state image and the remembered answers of `Once`) as postcard, which
//! encodes enum variants by position and struct fields in order; the bytes
//! are pinned by `tests/t05_formats.rs` (docs/STATE_MACHINE.md, *Changing
//! the formats*).
//!
//! Each [`Command`] variant says what a second application does when a
//! client or leader retries it after losing the answer: only `Once`
//! deduplicates by request id; the others are idempotent by themselves,
//! pinned to an object version, or say what a repeat does.

use mooncake_segment::{ClientId, Range, SegmentId};
use serde::{Deserialize, Serialize};

use crate::error::MetaError;

/// One proposal: a command stamped with the proposing leader's wall clock.
/// The state machine never reads a clock; it takes time from here (and never
/// lets it go backwards).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Leader's wall-clock time in ms since the Unix epoch when it proposed.
    pub ts_ms: u64,
    pub cmd: Command,
}

/// Storage tier a segment lives on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Tier {
    /// Memory (DRAM, shareable through /dev/shm): where puts land.
    #[default]
    Dram,
    /// A disk segment (a file on a local SSD, direct I/O): holds copies
    /// offloaded from memory (docs/TIERS.md).
    Ssd,
}

/// Disk segments are read and written with direct I/O in whole blocks: every
/// range on them starts and ends on this boundary (equal to
/// `mooncake_segment::disk::DISK_BLOCK_BYTES`).
pub const DISK_ALIGN_BYTES: u64 = 4096;

impl Tier {
    /// The allocation unit of ranges on a segment of this tier: offsets and
    /// lengths are multiples of it.
    pub fn align_bytes(self) -> u64 {
        match self {
            Tier::Dram => mooncake_segment::ALLOC_ALIGN_BYTES,
            Tier::Ssd => DISK_ALIGN_BYTES,
        }
    }

    /// The length of the range an object of `size_bytes` takes on this tier
    /// (`None` when it overflows, i.e. larger than any segment).
    pub fn range_len(self, size_bytes: u64) -> Option<u64> {
        size_bytes.checked_next_multiple_of(self.align_bytes())
    }

    /// The name operators see ("memory", "disk").
    pub fn name(self) -> &'static str {
        match self {
            Tier::Dram => "memory",
            Tier::Ssd => "disk",
        }
    }
}

/// How an object resists eviction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Pin {
    /// Evicted in age order once its lease has expired.
    #[default]
    None,
    /// Evicted only after every unpinned candidate.
    Soft,
    /// Never evicted.
    Hard,
    /// Soft-pinned for `ttl_ms` (1..=[`SOFT_PIN_TTL_MAX_MS`]) after the
    /// object became readable (its `committed_ms`), then evicted in its
    /// turn like an unpinned object. The deadline is state time plus the
    /// TTL, so every leader sees the same one (up to clock skew).
    SoftFor { ttl_ms: u64 },
}

/// Longest soft-pin TTL a put may ask for (a day, as upstream's default
/// `max_kv_soft_pin_ttl`).
pub const SOFT_PIN_TTL_MAX_MS: u64 = 86_400_000;

impl Pin {
    /// Whether eviction passes the object over for unpinned ones at
    /// `now_ms` (wall-clock ms), given when it became readable.
    pub fn soft_at(self, committed_ms: u64, now_ms: u64) -> bool {
        match self {
            Pin::Soft => true,
            Pin::SoftFor { ttl_ms } => now_ms < committed_ms.saturating_add(ttl_ms),
            Pin::None | Pin::Hard => false,
        }
    }
}

/// What a store node declares about a segment it contributes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentSpec {
    pub id: SegmentId,
    pub size_bytes: u64,
    /// Transfer endpoint of the store node serving this segment ("host:port").
    pub endpoint: String,
    pub host_id: String,
    pub zone: String,
    pub tier: Tier,
    /// Shared-memory file of the segment on `host_id` ("" when not shareable).
    pub shm_path: String,
}

/// An object named together with the version it had when a leader chose it,
/// so a decision taken on a stale view (eviction, reclaim) cannot hit a newer
/// object that reused the key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VersionedKey {
    pub key: String,
    pub version: ObjectVersion,
}

/// Why a set of objects is removed by the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoveReason {
    /// `RemoveAll` from a client.
    RemoveAll,
    /// High-watermark eviction.
    Evict,
}

/// Unique, increasing version of one object incarnation (assigned at apply).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectVersion(pub u64);

/// Unique id of one allocation arena (assigned at apply, never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ArenaId(pub u64);

impl std::fmt::Display for ArenaId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "arena-{}", self.0)
    }
}

/// Ranges of a segment that one leader (of `term`) granted itself through
/// the log: it places new objects inside its own arenas without a Raft
/// round, and a later leader never reuses another term's arena until that
/// term's writers can no longer be writing. Usually one range; on a
/// fragmented segment, several holes (sorted by offset, disjoint).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arena {
    pub id: ArenaId,
    pub segment: SegmentId,
    pub extents: Vec<Range>,
    /// The term of the leader that granted it.
    pub term: u64,
}

impl Arena {
    /// Bytes the arena covers.
    pub fn len_bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.len).sum()
    }

    /// Its extents cut to the first `keep_bytes`, counted across them in order.
    pub fn trimmed_extents(&self, keep_bytes: u64) -> Vec<Range> {
        let mut left = keep_bytes;
        let mut kept = Vec::new();
        for e in &self.extents {
            if left == 0 {
                break;
            }
            kept.push(Range::new(e.offset, e.len.min(left)));
            left -= e.len.min(left);
        }
        kept
    }

    /// Whether `range` lies inside one of its extents.
    pub fn holds(&self, range: Range) -> bool {
        let i = self.extents.partition_point(|e| e.end() <= range.offset);
        self.extents.get(i).is_some_and(|e| e.offset <= range.offset && range.end() <= e.end())
    }
}

/// One replica of a new object: where its writer wrote it, inside which arena.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedReplica {
    pub segment: SegmentId,
    pub arena: ArenaId,
    pub range: Range,
}

/// A written object to record as complete: the one replicated command of a
/// put (its ranges were reserved on the leader, outside the log).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewObject {
    pub client: ClientId,
    pub key: String,
    pub size_bytes: u64,
    /// crc32c of the bytes.
    pub checksum: u32,
    pub pin: Pin,
    pub replicas: Vec<PlacedReplica>,
    /// Replace an existing object (its ranges are held, not freed, until the
    /// KV leases on it may have expired); otherwise an existing key refuses.
    pub upsert: bool,
}

/// SHA-256 of a client's credential (`mooncake_auth::credential`): what the
/// masters keep to tell the process that registered a client id from any
/// other caller naming it. The credential itself never enters the log.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CredentialHash(pub [u8; 32]);

impl std::fmt::Debug for CredentialHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head: String = self.0[..4].iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "CredentialHash({head}..)")
    }
}

/// Everything the replicated state machine can be asked to do: what the
/// master proposes (and `Noop`, which stamps time).
///
/// Format v1: variants are encoded by position, so new ones go at the end
/// and none is ever removed or reordered (docs/STATE_MACHINE.md, *Changing
/// the formats*). Each variant's "Retry" paragraph says what applying it a
/// second time does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Mounts `segment` for a caller that proves it is `client`: refused
    /// (`PERMISSION_DENIED`, nothing changes) when `client` is registered
    /// under another credential; otherwise registers `client` under
    /// `credential` if it is not registered.
    ///
    /// Retry: idempotent. Mounting a segment its owner already has (same
    /// size and tier) answers `Ok`; a disk segment takes the new
    /// declaration (endpoint) and is attached again if it was detached.
    MountSegment { client: ClientId, credential: CredentialHash, segment: SegmentSpec },
    /// Unmounts `segment` for a caller that proves it is `client` (refused
    /// as `MountSegment`), dropping every replica on it.
    ///
    /// Retry: idempotent. Unmounting an unknown segment answers `Ok`.
    UnmountSegment { client: ClientId, credential: CredentialHash, segment: SegmentId },
    /// Registers `client` (proving it as `MountSegment`) and makes
    /// `segments` its exact set of segments (all or nothing).
    ///
    /// Retry: idempotent. The same list yields the same set; each segment
    /// mounted already counts as a retried mount.
    RemountSegments { client: ClientId, credential: CredentialHash, segments: Vec<SegmentSpec> },
    /// Remove these exact object versions (RemoveAll or eviction).
    ///
    /// Retry: idempotent (pinned to versions). A repeat skips the versions
    /// already gone and answers a smaller count.
    RemoveObjects { victims: Vec<VersionedKey>, reason: RemoveReason },
    /// The leader saw no heartbeat for `client_ttl`: drop the client and its segments.
    ///
    /// Retry: a repeat is refused (`ILLEGAL_CLIENT`: not registered) and
    /// changes nothing, unless the client registered again in between,
    /// which it then expires again.
    ExpireClient { client: ClientId },
    /// Several commands in one log entry (batch RPCs, group commit).
    ///
    /// Retry: each command inside follows its own rule; a batch as a whole
    /// is never deduplicated (`Once` refuses to wrap one).
    Batch(Vec<Command>),
    /// Apply `cmd` at most once per `request_id`: a client retrying after an
    /// answer was lost (timeout, leader change) gets the first answer back
    /// instead of a second effect (a retried remove must not delete an object
    /// put in between). Ids are kept for `REQUEST_DEDUP_WINDOW_MS` of the
    /// request clock, which no single leader clock jump can fast-forward
    /// (`state/requests.rs`).
    ///
    /// Retry: deduplicated by `request_id` within that window, refusals
    /// included (the first answer is returned, nothing changes). `cmd` must
    /// be a single command: a `Batch` or `Once` inside is refused.
    Once { request_id: u64, cmd: Box<Command> },
    /// Does nothing; used by tests and to stamp time.
    ///
    /// Retry: idempotent (only the state's time moves).
    Noop,
    /// Removes the object `key` only if its current incarnation is
    /// `version` and complete (the leader checked that incarnation's KV
    /// lease and fenced its readers before proposing). A newer incarnation
    /// put in between is never touched: the answer is `OBJECT_NOT_FOUND`.
    ///
    /// Retry: idempotent in effect (pinned to `version`), but a repeat
    /// answers `OBJECT_NOT_FOUND`; the master proposes it inside `Once` when
    /// the client gave a request id, so the retry gets the first answer.
    RemoveVersion { key: String, version: ObjectVersion },
    /// The leader of `term` grants itself an arena of `len_bytes` on
    /// `segment`, from bytes free of objects and of other arenas: the
    /// smallest hole that fits, or else the largest holes of at least
    /// `unit_bytes` (the object the leader must place) until `len_bytes`.
    ///
    /// Retry: not idempotent. Every application grants another arena, with
    /// a new id.
    ArenaGrant { segment: SegmentId, len_bytes: u64, unit_bytes: u64, term: u64 },
    /// Shortens an arena to its first `keep_bytes`, counted across its
    /// extents in order (its leader never handed out the rest); 0 ends it.
    ///
    /// Retry: idempotent. The same trim again keeps the same extents; an
    /// unknown (ended) arena answers `Ok`.
    ArenaTrim { arena: ArenaId, keep_bytes: u64 },
    /// Ends arenas: their leader has no reservation left in them, or (an
    /// older term's) their writers can no longer be writing. Objects inside
    /// stay; the free space returns to the segment.
    ///
    /// Retry: idempotent. Unknown (ended) arenas are skipped; the count
    /// answered says how many ended this time.
    ArenaReturn { arenas: Vec<ArenaId> },
    /// Records a written object as complete (the one commit of a put).
    ///
    /// Retry: a retry with the same writer, checksum and ranges answers the
    /// same version. A retry after the object was removed finds the key
    /// free and, while its arena lives and its ranges are free, commits it
    /// again; the master proposes it inside `Once` when the client gave a
    /// request id.
    PutCommit(NewObject),
    /// Frees the ranges of objects replaced by upserts, once no KV lease on
    /// them can be left.
    ///
    /// Retry: idempotent. Versions no longer retired are skipped.
    ReleaseRetired { versions: Vec<ObjectVersion> },
    /// Adds a copy of the complete object `key` at `version` that a store
    /// node made (offload to a disk segment, or promotion back to memory):
    /// the range lies inside a live arena of the leader that asked for the
    /// copy, on free bytes, on a segment holding no other replica of it.
    /// Refused (nothing changes) when that incarnation is gone: the copy is
    /// then simply never referenced.
    ///
    /// Retry: idempotent in effect. A repeat is refused
    /// (`OBJECT_ALREADY_EXISTS`: the replica is there already) and changes
    /// nothing.
    AddReplica { key: String, version: ObjectVersion, replica: PlacedReplica },
    /// Drops the replicas on `tier` of these exact object versions and frees
    /// their ranges, for each object that keeps a replica on another tier on
    /// an attached segment (the leader checked no KV lease is left on them
    /// and fenced their readers). Others are skipped. Answers `Removed`.
    ///
    /// Retry: idempotent (pinned to versions). A repeat skips objects with
    /// no replica left on `tier`.
    DropTierReplicas { victims: Vec<VersionedKey>, tier: Tier },
    /// `ExpireClient` that keeps the client's disk segments, detached: their
    /// objects stay known (unreadable) until the store node mounts them again
    /// with the same client id and credential, or `DropDetached` ends them.
    ///
    /// Retry: as `ExpireClient`.
    ExpireClientKeepDisk { client: ClientId },
    /// Ends detached disk segments whose grace passed, with every replica on
    /// them (segments since remounted are skipped). Answers `Removed`.
    ///
    /// Retry: idempotent. A repeat skips the segments already ended.
    DropDetached { segments: Vec<SegmentId> },
    /// The owner of `segment` (proving it is `client`) found these ranges
    /// corrupt: every replica overlapping one is dropped; objects left with
    /// no replica are gone. Answers `Removed` (replicas dropped).
    ///
    /// Retry: a repeat drops whatever overlaps the ranges then: nothing,
    /// unless new replicas were placed on those bytes in between.
    DropCorrupt { client: ClientId, credential: CredentialHash, segment: SegmentId, ranges: Vec<Range> },
    /// Cuts `ranges` out of another term's arena: bytes of objects that
    /// were committed there and have since been removed, whose writers
    /// finished and whose WRITE grants have expired (the leader checked
    /// both), so a newer arena may take them before the old one is
    /// returned. Each range lies wholly inside one extent of the arena, on
    /// free bytes; the arena keeps at most `ARENA_EXTENTS_MAX` extents
    /// (otherwise refused, nothing changes); an arena left with no extent
    /// ends. Answers `Removed` (ranges cut).
    ///
    /// Retry: idempotent. A range wholly outside the arena (cut already) is
    /// skipped; an unknown (ended) arena answers `Removed { count: 0 }`.
    ArenaCut { arena: ArenaId, ranges: Vec<Range> },
    /// Sets the quota of `tenant` (docs/TENANTS.md): the bytes of objects
    /// (each counted once, at its size, whatever its replicas) the tenant
    /// may keep; 0 removes the quota. A valid tenant name
    /// (`mooncake_segment::tenant`), else `INVALID_PARAMS` and nothing
    /// changes. The quota binds new puts only: objects already stored stay.
    ///
    /// Retry: idempotent.
    SetTenantQuota { tenant: String, bytes: u64 },
    /// `PutCommit` bounded by the tenant's quota: refused
    /// (`QuotaExceeded`, nothing changes) when the object would take its
    /// tenant's objects past the quota the state holds (an upsert's
    /// replaced object no longer counting), so a tenant never holds more
    /// than its quota, however many puts race (each commit in a batch sees
    /// the ones before it). The leader proposes it for tenants with a
    /// quota, plain `PutCommit` otherwise (masters of the previous release
    /// still decode a log of tenants without quotas).
    ///
    /// Retry: as `PutCommit` (a retry of the same commit answers its
    /// version, whatever the quota says now).
    PutCommitInQuota(NewObject),
    /// `MountSegment` that dedicates `segment` to `tenant` (a valid name,
    /// else `INVALID_PARAMS`): only that tenant's objects are ever placed
    /// or copied on it, so a UCX key to it reaches that tenant's bytes only
    /// (docs/TENANTS.md). Mounting a segment mounted already under another
    /// dedication (or none) is refused (`SEGMENT_ALREADY_EXISTS`, nothing
    /// changes); so is a plain `MountSegment` of a dedicated one. The leader
    /// proposes it for store nodes with a dedication (`--segment-tenant`, `--ucx`), plain
    /// `MountSegment` otherwise (masters of the previous release still
    /// decode a log without dedicated segments).
    ///
    /// Retry: as `MountSegment`.
    MountTenantSegment { client: ClientId, credential: CredentialHash, segment: SegmentSpec, tenant: String },
    /// `RemountSegments` whose segments are all dedicated to `tenant` (as
    /// `MountTenantSegment`).
    ///
    /// Retry: as `RemountSegments`.
    RemountTenantSegments { client: ClientId, credential: CredentialHash, segments: Vec<SegmentSpec>, tenant: String },
    /// `RemountSegments` (dedicated to `tenant` if named, as
    /// `RemountTenantSegments`) of a store node restarted on the memory its
    /// predecessor left (docs/OPERATIONS.md, "Restarting a store node"):
    /// every memory segment listed must be mounted already by `client`,
    /// with the same size, tier and dedication, else it is refused
    /// (`SEGMENT_NOT_FOUND` when the masters forgot one: the node then
    /// starts empty under a new id; nothing changes), so objects are kept
    /// only on the bytes they were written to. Each memory segment takes
    /// the new declaration (endpoint, shm path), as a disk segment does on
    /// any remount.
    ///
    /// Retry: idempotent. The same list again yields the same set.
    ReattachSegments {
        client: ClientId,
        credential: CredentialHash,
        segments: Vec<SegmentSpec>,
        tenant: Option<String>,
    },
    /// Drops the replica on `segment` of this exact object version and
    /// frees its range: a hot key's extra memory replica once the key
    /// cooled (docs/OPERATIONS.md, "Hot keys"; the leader checked no KV
    /// lease is left on it and fenced its readers). Skipped (nothing
    /// changes) unless the object keeps a readable memory replica on
    /// another segment. Answers `Removed` (1 or 0).
    ///
    /// Retry: idempotent (pinned to the version). A repeat finds no
    /// replica there and skips.
    DropReplica { victim: VersionedKey, segment: SegmentId },
}

/// Where one replica of an object lives, as the state machine answers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaPlacement {
    pub segment: SegmentId,
    pub range: Range,
}

/// The state machine's answer to one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Ok,
    /// How many objects a bulk removal removed.
    Removed {
        count: u64,
    },
    /// ArenaGrant: the arena granted.
    ArenaGranted(Arena),
    /// PutCommit: the version the object got.
    Committed {
        version: ObjectVersion,
    },
    Err(MetaError),
    Batch(Vec<Response>),
}

impl Response {
    /// The error of a single (non-batch) response, if any.
    pub fn err(&self) -> Option<&MetaError> {
        match self {
            Response::Err(e) => Some(e),
            _ => None,
        }
    }
}
