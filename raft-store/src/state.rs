//! The replicated metadata state machine: segments, objects, clients and the
//! per-segment allocators, and the deterministic `apply` of each [`Command`].
//!
//! Determinism is the contract: `apply` reads no clock, no randomness and no
//! I/O, iterates only ordered maps, and takes time from the request
//! (`now_ms` never moves backwards). Replicas that apply the same log reach
//! byte-identical state and snapshots.
//!
//! Consistency is checked as apply goes: every free and allocation of
//! segment bytes in every build, the whole state after every entry in debug
//! builds and tests (`invariants`). A broken invariant ends the process
//! rather than letting the state be read or replicated.
//!
//! Submodules: `arenas` (the one-commit put), `objects` (the object index),
//! `requests` (deduplication of retried requests and the request clock that
//! ages them without trusting leader wall time), `image` (the snapshot form
//! and its older versions), `invariants` (what the state promises, and the
//! checks).

use std::collections::{BTreeMap, BTreeSet};

use mooncake_segment::{ClientId, RangeAllocator, SegmentId};
use openraft::{BasicNode, StoredMembership};
use serde::{Deserialize, Serialize};

use crate::error::MetaError;
use crate::fatal;
use crate::types::*;

mod arenas;
mod image;
mod invariants;
mod objects;
mod requests;
mod tiers;

pub use arenas::{ARENA_EXTENTS_MAX, validate_new_object};
pub use image::{StateImage, StateImageV1, StateImageV2, StateImageV3, StateImageV4};
use invariants::HeldBy;
pub use invariants::{InvariantViolation, Record, SCAN_EVERY_ENTRY_RECORDS_MAX, SCAN_RECORDS_PER_ENTRY};
use objects::ObjectIndex;
use requests::RequestMemory;
pub use requests::{
    REQUEST_CLOCK_REORDER_MAX_MS, REQUEST_CLOCK_STEP_MAX_MS, REQUEST_DEDUP_MAX, REQUEST_DEDUP_WINDOW_MS, RequestClock,
};

/// Longest key accepted: keys are hashes of token prefixes, 4 KiB is ample
/// and bounds the memory one entry can pin.
pub const KEY_MAX_BYTES: usize = 4096;
/// Most replicas one object may ask for.
pub const REPLICA_NUM_MAX: u32 = 16;
/// Most commands in one batch (one log entry): bounds entry size and apply latency.
pub const BATCH_MAX: usize = 4096;
/// Largest segment accepted (16 TiB).
pub const SEGMENT_SIZE_MAX_BYTES: u64 = 1 << 44;
/// Segment sizes are whole pages: a segment is mapped (shared memory) or
/// opened for direct I/O (SSD), and both want page-sized extents. A segment
/// starts at offset 0 of its own mapping, so its base is page-aligned too.
pub const SEGMENT_ALIGN_BYTES: u64 = 4096;
/// Longest endpoint, host id, zone label or shm path.
pub const LABEL_MAX_BYTES: usize = 512;

/// Whether an object can be read yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObjectStatus {
    /// PutStart committed, bytes being written; not readable.
    Processing,
    /// PutEnd committed: readable.
    Complete,
}

/// One object incarnation and where its replicas live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    pub key: String,
    pub version: ObjectVersion,
    pub size_bytes: u64,
    /// crc32c of the bytes, set by PutEnd.
    pub checksum: Option<u32>,
    pub writer: ClientId,
    pub replicas: Vec<ReplicaPlacement>,
    pub status: ObjectStatus,
    pub pin: Pin,
    pub created_ms: u64,
    pub completed_ms: Option<u64>,
}

/// A mounted segment: its declaration, its owner and its free space.
#[derive(Clone, Debug)]
pub struct SegmentEntry {
    pub spec: SegmentSpec,
    pub owner: ClientId,
    alloc: RangeAllocator,
    /// A disk segment whose store node expired (`ExpireClientKeepDisk`):
    /// kept with its objects, neither read nor placed on, until its owner
    /// mounts it again or the grace ends it (docs/TIERS.md).
    detached: Option<DetachedDisk>,
}

/// Why and since when a disk segment is detached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachedDisk {
    /// State time when its owner expired.
    pub since_ms: u64,
    /// The credential its owner was registered with: only a caller holding
    /// the same may mount it again (none for an owner registered without).
    pub credential: Option<CredentialHash>,
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
}

/// A registered client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientEntry {
    pub id: ClientId,
    pub registered_ms: u64,
}

/// Ranges of an abandoned put, held until its writer can no longer be writing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscardedPut {
    pub version: ObjectVersion,
    pub key: String,
    pub replicas: Vec<ReplicaPlacement>,
    pub discarded_ms: u64,
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

/// The whole replicated state.
#[derive(Clone, Debug, Default)]
pub struct MetaState {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    now_ms: u64,
    next_version: u64,
    segments: BTreeMap<SegmentId, SegmentEntry>,
    objects: ObjectIndex,
    clients: BTreeMap<ClientId, ClientEntry>,
    /// The credential each client registered with; a client registered by
    /// an older log (legacy commands) has none until it mounts again.
    credentials: BTreeMap<ClientId, CredentialHash>,
    discarded: BTreeMap<ObjectVersion, DiscardedPut>,
    /// Answers of `Command::Once` by request id, aged on the request clock.
    requests: RequestMemory,
    arenas: BTreeMap<ArenaId, Arena>,
    /// Arenas of each segment by offset (they never overlap).
    arenas_by_offset: BTreeMap<(SegmentId, u64), ArenaId>,
    next_arena: u64,
    retired: BTreeMap<ObjectVersion, RetiredObject>,
    /// Debug builds: records the full invariant scan may cover before it
    /// runs again (`invariants.rs`). Local bookkeeping, not replicated.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    scan_credit_records: u64,
}

// ---------------------------------------------------------------- reads

impl MetaState {
    /// Time of the state machine (max leader timestamp applied so far).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }
    pub fn object(&self, key: &str) -> Option<&ObjectMeta> {
        self.objects.get(key)
    }
    pub fn objects(&self) -> impl Iterator<Item = &ObjectMeta> {
        self.objects.values()
    }
    pub fn objects_with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a ObjectMeta> + 'a {
        self.objects.with_prefix(prefix)
    }
    /// The objects whose key sorts after `key`, in key order.
    pub fn objects_after<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a ObjectMeta> + 'a {
        self.objects.after(key)
    }
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }
    pub fn segment(&self, id: SegmentId) -> Option<&SegmentEntry> {
        self.segments.get(&id)
    }
    pub fn segments(&self) -> impl Iterator<Item = &SegmentEntry> {
        self.segments.values()
    }
    pub fn client(&self, id: ClientId) -> Option<&ClientEntry> {
        self.clients.get(&id)
    }
    pub fn clients(&self) -> impl Iterator<Item = &ClientEntry> {
        self.clients.values()
    }
    /// The hash of the credential `id` registered with, if it has one.
    pub fn client_credential(&self, id: ClientId) -> Option<&CredentialHash> {
        self.credentials.get(&id)
    }
    /// Whether a caller holding `credential` may act as `client`: yes unless
    /// `client` is registered under another credential. Checked by apply and,
    /// to answer early, by the leader before it proposes (or answers a Ping).
    /// Whether `client` registered with a credential (its calls must then
    /// present it).
    pub fn has_credential(&self, client: ClientId) -> bool {
        self.credentials.contains_key(&client)
    }
    pub fn check_credential(&self, client: ClientId, credential: &CredentialHash) -> Result<(), MetaError> {
        match self.credentials.get(&client) {
            Some(held) if held != credential => Err(MetaError::PermissionDenied(format!(
                "{client} is registered by another process (another credential); a client may act only as \
                 itself. If this is that client restarted without its credential file, wait for the old \
                 registration to expire (client_ttl) or for an admin to evict it"
            ))),
            _ => Ok(()),
        }
    }
    pub fn client_segments(&self, id: ClientId) -> impl Iterator<Item = &SegmentEntry> {
        self.segments.values().filter(move |s| s.owner == id)
    }
    pub fn discarded(&self) -> impl Iterator<Item = &DiscardedPut> {
        self.discarded.values()
    }
    pub fn arenas(&self) -> impl Iterator<Item = &Arena> {
        self.arenas.values()
    }
    pub fn arena(&self, id: ArenaId) -> Option<&Arena> {
        self.arenas.get(&id)
    }
    /// Objects replaced by upserts whose ranges are still held.
    pub fn retired(&self) -> impl Iterator<Item = &RetiredObject> {
        self.retired.values()
    }
    /// The first answer of `request_id` if a `Once` command with it was
    /// applied within the deduplication window.
    pub fn request_answer(&self, request_id: u64) -> Option<Response> {
        self.requests.answer(request_id)
    }
    /// The clock that ages remembered request ids (`requests.rs`). Only
    /// differences of its readings mean anything: a state restored from an
    /// image reads from another origin.
    pub fn request_clock(&self) -> RequestClock {
        self.requests.clock()
    }
    pub fn capacity_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.capacity_bytes()).sum()
    }
    pub fn used_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.used_bytes()).sum()
    }
    /// Capacity of the attached segments of `tier` (what its watermark counts).
    pub fn tier_capacity_bytes(&self, tier: Tier) -> u64 {
        self.attached(tier).map(|s| s.capacity_bytes()).sum()
    }
    /// Bytes used on the attached segments of `tier`.
    pub fn tier_used_bytes(&self, tier: Tier) -> u64 {
        self.attached(tier).map(|s| s.used_bytes()).sum()
    }
    /// The attached segments of `tier`.
    pub fn attached(&self, tier: Tier) -> impl Iterator<Item = &SegmentEntry> {
        self.segments.values().filter(move |s| s.tier() == tier && s.is_attached())
    }
    /// The tier of the segment a replica is on (`None`: unknown segment).
    pub fn replica_tier(&self, replica: &ReplicaPlacement) -> Option<Tier> {
        self.segments.get(&replica.segment).map(SegmentEntry::tier)
    }
    /// Whether a replica's segment is mounted and attached (it can be read).
    pub fn is_readable(&self, replica: &ReplicaPlacement) -> bool {
        self.segments.get(&replica.segment).is_some_and(SegmentEntry::is_attached)
    }
}

// ---------------------------------------------------------------- validation

fn invalid(msg: impl Into<String>) -> MetaError {
    MetaError::InvalidParams(msg.into())
}

/// Checks a key; shared by the master edge (fail fast) and apply (authoritative).
pub fn validate_key(key: &str) -> Result<(), MetaError> {
    if key.is_empty() {
        return Err(invalid("key is empty"));
    }
    if key.len() > KEY_MAX_BYTES {
        return Err(invalid(format!("key is {} bytes; the limit is {KEY_MAX_BYTES}", key.len())));
    }
    Ok(())
}

/// Checks a segment declaration on its own (not against other segments).
pub fn validate_segment(spec: &SegmentSpec) -> Result<(), MetaError> {
    if spec.id.0 == 0 {
        return Err(invalid("segment id 0 is reserved; use a random non-zero id"));
    }
    if spec.size_bytes < SEGMENT_ALIGN_BYTES || spec.size_bytes > SEGMENT_SIZE_MAX_BYTES {
        return Err(invalid(format!(
            "segment {} size {} bytes is outside {SEGMENT_ALIGN_BYTES}..={SEGMENT_SIZE_MAX_BYTES}",
            spec.id, spec.size_bytes,
        )));
    }
    if !spec.size_bytes.is_multiple_of(SEGMENT_ALIGN_BYTES) {
        return Err(invalid(format!(
            "segment {} size {} bytes is not a multiple of {SEGMENT_ALIGN_BYTES} (a page); round it down to {}",
            spec.id,
            spec.size_bytes,
            spec.size_bytes / SEGMENT_ALIGN_BYTES * SEGMENT_ALIGN_BYTES
        )));
    }
    if spec.endpoint.is_empty() {
        return Err(invalid(format!("segment {} has no transfer endpoint", spec.id)));
    }
    let labels = [&spec.endpoint, &spec.host_id, &spec.zone, &spec.shm_path];
    if labels.iter().any(|l| l.len() > LABEL_MAX_BYTES) {
        return Err(invalid(format!("segment {} has a label longer than {LABEL_MAX_BYTES} bytes", spec.id)));
    }
    Ok(())
}

/// Whether `client` (holding `credential`) may mount `spec` over `existing`,
/// the segment already mounted under its id: only its owner, with the same
/// size and tier, and for a detached disk segment the credential its owner
/// was registered with.
fn check_remount(
    existing: &SegmentEntry,
    client: ClientId,
    spec: &SegmentSpec,
    credential: Option<&CredentialHash>,
) -> Result<(), MetaError> {
    if existing.owner != client || existing.spec.size_bytes != spec.size_bytes || existing.tier() != spec.tier {
        return Err(MetaError::SegmentAlreadyExists(format!(
            "{} is mounted by {} with {} bytes of {}",
            spec.id,
            existing.owner,
            existing.spec.size_bytes,
            existing.tier().name()
        )));
    }
    if let Some(held) = existing.detached.as_ref().and_then(|d| d.credential.as_ref())
        && Some(held) != credential
    {
        return Err(MetaError::PermissionDenied(format!(
            "disk segment {} belongs to {client} as registered by another process (another credential); \
             restart the store node with its --credential-file to mount its disk again",
            spec.id
        )));
    }
    Ok(())
}

fn same_memory_error(spec: &SegmentSpec, other: &SegmentEntry) -> MetaError {
    MetaError::SegmentAlreadyExists(format!(
        "segment {} would map {} on {}, which is already segment {} (owned by {}); one memory region is one segment",
        spec.id, spec.shm_path, spec.host_id, other.spec.id, other.owner
    ))
}

/// Checks the shape of a PutStart (not whether there is room).
pub fn validate_put_start(put: &PutStart) -> Result<(), MetaError> {
    validate_key(&put.key)?;
    if put.size_bytes == 0 {
        return Err(invalid(format!("object {:?} has size 0", put.key)));
    }
    if put.replica_num == 0 || put.replica_num > REPLICA_NUM_MAX {
        return Err(invalid(format!("replica_num {} is outside 1..={REPLICA_NUM_MAX}", put.replica_num)));
    }
    if put.preferred.len() > REPLICA_NUM_MAX as usize {
        return Err(invalid(format!("more than {REPLICA_NUM_MAX} preferred segments")));
    }
    Ok(())
}

// ---------------------------------------------------------------- apply

/// The outcome of a command that broke no invariant: its answer.
type Applied = Result<Response, InvariantViolation>;

/// Why a command stopped: refused (its answer), or it found the state
/// broken (the node must stop).
enum Stop {
    Refused(MetaError),
    Broken(InvariantViolation),
}

impl From<MetaError> for Stop {
    fn from(e: MetaError) -> Stop {
        Stop::Refused(e)
    }
}

impl From<InvariantViolation> for Stop {
    fn from(v: InvariantViolation) -> Stop {
        Stop::Broken(v)
    }
}

/// The answer of a command that stopped or finished.
fn answer(result: Result<(), Stop>) -> Applied {
    match result {
        Ok(()) => Ok(Response::Ok),
        Err(Stop::Refused(e)) => Ok(Response::Err(e)),
        Err(Stop::Broken(v)) => Err(v),
    }
}

impl MetaState {
    /// Applies one request. Never fails as a whole: refusals are responses.
    /// A broken invariant ends the process (`fatal::invariant_broken`): a
    /// restart rebuilds the state from the last snapshot and the log.
    pub fn apply(&mut self, req: &Request) -> Response {
        match self.try_apply(req) {
            Ok(response) => response,
            Err(broken) => {
                let at = self.last_applied.map(|l| format!(" (applying log index {})", l.index)).unwrap_or_default();
                fatal::invariant_broken(&format!("{broken}{at}"))
            }
        }
    }

    /// [`apply`](Self::apply), returning a broken invariant instead of
    /// ending the process; the state is then unusable. Debug builds also
    /// run [`check_invariants`](Self::check_invariants) after the request
    /// (after every one on states of up to [`SCAN_EVERY_ENTRY_RECORDS_MAX`]
    /// records, amortised on larger ones; see `invariants.rs`).
    pub fn try_apply(&mut self, req: &Request) -> Result<Response, InvariantViolation> {
        self.now_ms = self.now_ms.max(req.ts_ms);
        self.requests.tick(req.ts_ms);
        let response = self.apply_cmd(&req.cmd)?;
        #[cfg(debug_assertions)]
        self.scan_if_due()?;
        Ok(response)
    }

    fn apply_cmd(&mut self, cmd: &Command) -> Applied {
        let result: Result<(), Stop> = match cmd {
            Command::MountSegment { client, segment } => self.mount(*client, segment, None).map_err(Stop::from),
            Command::UnmountSegment { client, segment } => self.unmount(*client, *segment).map_err(Stop::from),
            Command::RemountSegments { client, segments } => self.remount(*client, segments, None).map_err(Stop::from),
            Command::PutStart(put) => return self.put_start(put),
            Command::PutEnd { client, key, checksum } => self.put_end(*client, key, *checksum).map_err(Stop::from),
            Command::PutRevoke { client, key } => self.put_revoke(*client, key),
            Command::Remove { key } => self.remove(key),
            Command::RemoveObjects { victims, .. } => return self.remove_objects(victims),
            Command::ExpireClient { client } => self.expire_client(*client, false).map_err(Stop::from),
            Command::DiscardPuts { victims } => return Ok(self.discard_puts(victims)),
            Command::ReleaseDiscarded { versions } => return self.release_discarded(versions),
            Command::Batch(cmds) => return self.apply_batch(cmds),
            Command::Once { request_id, cmd } => return self.apply_once(*request_id, cmd),
            Command::Noop => Ok(()),
            Command::RemoveVersion { key, version } => self.remove_version(key, *version),
            Command::ArenaGrant { segment, len_bytes, unit_bytes, term } => {
                return self.grant_arena(*segment, *len_bytes, *unit_bytes, *term);
            }
            Command::ArenaTrim { arena, keep_bytes } => self.trim_arena(*arena, *keep_bytes).map_err(Stop::from),
            Command::ArenaReturn { arenas } => return Ok(self.return_arenas(arenas)),
            Command::PutCommit(new) => return self.put_commit(new),
            Command::ReleaseRetired { versions } => return self.release_retired(versions),
            Command::MountSegmentAs { client, credential, segment } => {
                self.as_client(*client, credential, |s| s.mount(*client, segment, Some(credential))).map_err(Stop::from)
            }
            Command::UnmountSegmentAs { client, credential, segment } => self
                .check_credential(*client, credential)
                .and_then(|()| self.unmount(*client, *segment))
                .map_err(Stop::from),
            Command::RemountSegmentsAs { client, credential, segments } => self
                .as_client(*client, credential, |s| s.remount(*client, segments, Some(credential)))
                .map_err(Stop::from),
            Command::AddReplica { key, version, replica } => return self.add_replica(key, *version, replica),
            Command::DropTierReplicas { victims, tier } => return self.drop_tier_replicas(victims, *tier),
            Command::ExpireClientKeepDisk { client } => self.expire_client(*client, true).map_err(Stop::from),
            Command::DropDetached { segments } => return Ok(self.drop_detached(segments)),
            Command::DropCorrupt { client, credential, segment, ranges } => {
                return self.drop_corrupt(*client, credential, *segment, ranges);
            }
        };
        answer(result)
    }

    fn apply_batch(&mut self, cmds: &[Command]) -> Applied {
        if cmds.len() > BATCH_MAX {
            return Ok(Response::Err(invalid(format!("batch of {} commands; the limit is {BATCH_MAX}", cmds.len()))));
        }
        if cmds.iter().any(|c| matches!(c, Command::Batch(_))) {
            return Ok(Response::Err(invalid("nested batch")));
        }
        let answers: Result<Vec<Response>, InvariantViolation> = cmds.iter().map(|c| self.apply_cmd(c)).collect();
        Ok(Response::Batch(answers?))
    }

    /// Applies `cmd` unless `request_id` was applied already, in which case
    /// the first answer is returned and nothing changes.
    fn apply_once(&mut self, request_id: u64, cmd: &Command) -> Applied {
        if matches!(cmd, Command::Batch(_) | Command::Once { .. }) {
            return Ok(Response::Err(invalid("Once wraps a single command")));
        }
        if let Some(answer) = self.requests.answer(request_id) {
            return Ok(answer);
        }
        let answer = self.apply_cmd(cmd)?;
        self.requests.remember(request_id, answer.clone())?;
        Ok(answer)
    }

    /// Runs `register` (a mount or remount, which registers `client`) for a
    /// caller holding `credential`, if it may act as `client`; on success the
    /// client is registered under `credential` (a client an older log
    /// registered without one adopts it). A refusal changes nothing.
    fn as_client(
        &mut self,
        client: ClientId,
        credential: &CredentialHash,
        register: impl FnOnce(&mut Self) -> Result<(), MetaError>,
    ) -> Result<(), MetaError> {
        self.check_credential(client, credential)?;
        register(self)?;
        self.credentials.insert(client, *credential);
        Ok(())
    }

    fn register_client(&mut self, client: ClientId) {
        let now = self.now_ms;
        self.clients.entry(client).or_insert(ClientEntry { id: client, registered_ms: now });
    }

    /// The segment (other than `spec.id` and those `ignore` accepts) that
    /// already maps the same shared memory as `spec`: same host, same file.
    fn same_memory(&self, spec: &SegmentSpec, ignore: impl Fn(&SegmentEntry) -> bool) -> Option<&SegmentEntry> {
        if spec.shm_path.is_empty() {
            return None; // private memory of its store node: nothing to share
        }
        self.segments.values().find(|s| {
            s.spec.id != spec.id && s.spec.host_id == spec.host_id && s.spec.shm_path == spec.shm_path && !ignore(s)
        })
    }

    /// Mounts `spec` for `client` (holding `credential`, `None` for the
    /// legacy commands). Mounting a segment it already has is a retried
    /// mount, except for a disk segment: a restarted store node mounts its
    /// disk file again from a new endpoint, which the segment takes (and a
    /// detached one is attached again, its objects readable again).
    fn mount(
        &mut self,
        client: ClientId,
        spec: &SegmentSpec,
        credential: Option<&CredentialHash>,
    ) -> Result<(), MetaError> {
        validate_segment(spec)?;
        if let Some(other) = self.same_memory(spec, |_| false) {
            return Err(same_memory_error(spec, other));
        }
        if let Some(existing) = self.segments.get(&spec.id) {
            check_remount(existing, client, spec, credential)?;
            self.register_client(client);
            if let Some(existing) = self.segments.get_mut(&spec.id)
                && existing.tier() == Tier::Ssd
            {
                existing.detached = None;
                existing.spec = spec.clone();
            }
            return Ok(()); // a retried mount, or a disk segment's owner back
        }
        self.register_client(client);
        let alloc = RangeAllocator::new(spec.size_bytes);
        self.segments.insert(spec.id, SegmentEntry { spec: spec.clone(), owner: client, alloc, detached: None });
        Ok(())
    }

    fn unmount(&mut self, client: ClientId, id: SegmentId) -> Result<(), MetaError> {
        // Idempotent, as Mooncake's: a client retrying an unmount whose
        // answer it lost (or unmounting twice) is told OK.
        let Some(seg) = self.segments.get(&id) else {
            return Ok(());
        };
        if seg.owner != client {
            return Err(MetaError::IllegalClient(format!("{id} is owned by {}, not {client}", seg.owner)));
        }
        self.drop_segment(id);
        Ok(())
    }

    fn remount(
        &mut self,
        client: ClientId,
        specs: &[SegmentSpec],
        credential: Option<&CredentialHash>,
    ) -> Result<(), MetaError> {
        // Check everything first: a refused remount changes nothing.
        let mut ids = BTreeSet::new();
        let mut memories = BTreeSet::new();
        for spec in specs {
            validate_segment(spec)?;
            if !ids.insert(spec.id) {
                return Err(invalid(format!("segment {} listed twice", spec.id)));
            }
            if !spec.shm_path.is_empty() && !memories.insert((&spec.host_id, &spec.shm_path)) {
                return Err(invalid(format!("two segments map {} on {}", spec.shm_path, spec.host_id)));
            }
        }
        // The client's segments that this remount replaces may share memory
        // with the new ones (a restarted store node reusing its file).
        for spec in specs {
            if let Some(other) = self.same_memory(spec, |s| s.owner == client && !ids.contains(&s.spec.id)) {
                return Err(same_memory_error(spec, other));
            }
            if let Some(existing) = self.segments.get(&spec.id) {
                check_remount(existing, client, spec, credential)?;
            }
        }
        let stale: Vec<SegmentId> =
            self.client_segments(client).map(|s| s.spec.id).filter(|id| !ids.contains(id)).collect();
        for id in stale {
            self.drop_segment(id);
        }
        self.register_client(client);
        for spec in specs {
            self.mount(client, spec, credential)?;
        }
        Ok(())
    }

    /// Removes a segment and every replica on it; objects left with no
    /// replica are gone.
    fn drop_segment(&mut self, id: SegmentId) {
        self.segments.remove(&id);
        self.objects.retain_mut(|o| {
            o.replicas.retain(|r| r.segment != id);
            !o.replicas.is_empty()
        });
        self.discarded.retain(|_, d| {
            d.replicas.retain(|r| r.segment != id);
            !d.replicas.is_empty()
        });
        self.retired.retain(|_, d| {
            d.replicas.retain(|r| r.segment != id);
            !d.replicas.is_empty()
        });
        self.drop_arenas_of(id);
    }

    fn put_start(&mut self, put: &PutStart) -> Applied {
        if let Err(e) = validate_put_start(put) {
            return Ok(Response::Err(e));
        }
        if let Some(existing) = self.objects.get(&put.key) {
            let retry = existing.status == ObjectStatus::Processing
                && existing.writer == put.client
                && existing.size_bytes == put.size_bytes;
            if retry {
                return Ok(Response::Placed { version: existing.version, replicas: existing.replicas.clone() });
            }
            return Ok(Response::Err(MetaError::ObjectAlreadyExists(put.key.clone())));
        }
        match self.place(put) {
            Ok(replicas) => {
                let version = ObjectVersion(self.next_version);
                self.next_version += 1;
                let object = ObjectMeta {
                    key: put.key.clone(),
                    version,
                    size_bytes: put.size_bytes,
                    checksum: None,
                    writer: put.client,
                    replicas: replicas.clone(),
                    status: ObjectStatus::Processing,
                    pin: put.pin,
                    created_ms: self.now_ms,
                    completed_ms: None,
                };
                self.objects.insert(object);
                Ok(Response::Placed { version, replicas })
            }
            Err(Stop::Refused(e)) => Ok(Response::Err(e)),
            Err(Stop::Broken(v)) => Err(v),
        }
    }

    /// Chooses up to `replica_num` distinct segments with room: preferred
    /// segments first (in the caller's order), then the emptiest segments,
    /// one per host before a host gets a second replica.
    /// Puts are placed in memory: disk segments only receive copies.
    fn place(&mut self, put: &PutStart) -> Result<Vec<ReplicaPlacement>, Stop> {
        let largest = self.attached(Tier::Dram).map(|s| s.capacity_bytes()).max();
        match largest {
            None => return Err(MetaError::NoAvailableHandle("no memory segment is mounted".into()).into()),
            Some(cap) if put.size_bytes > cap => {
                return Err(invalid(format!(
                    "object {:?} of {} bytes is larger than the largest segment ({cap} bytes)",
                    put.key, put.size_bytes
                ))
                .into());
            }
            Some(_) => {}
        }
        if let Some(unknown) = put.preferred.iter().find(|id| !self.segments.contains_key(id)) {
            return Err(invalid(format!("preferred segment {unknown} is not mounted")).into());
        }
        let not_memory = put.preferred.iter().find(|id| self.segments.get(id).is_some_and(|s| s.tier() != Tier::Dram));
        if let Some(disk) = not_memory {
            return Err(
                invalid(format!("preferred segment {disk} is a disk segment; puts are placed in memory")).into()
            );
        }
        let mut order: Vec<(SegmentId, bool)> = Vec::new();
        let mut seen = BTreeSet::new();
        for id in &put.preferred {
            if seen.insert(*id) {
                order.push((*id, true));
            }
        }
        let mut rest: Vec<&SegmentEntry> = self.attached(Tier::Dram).filter(|s| !seen.contains(&s.spec.id)).collect();
        rest.sort_by_key(|s| (std::cmp::Reverse(s.free_bytes()), s.spec.id));
        order.extend(rest.iter().map(|s| (s.spec.id, false)));

        let want = put.replica_num as usize;
        let mut chosen: Vec<ReplicaPlacement> = Vec::with_capacity(want);
        let mut hosts: BTreeSet<String> = BTreeSet::new();
        for distinct_hosts in [true, false] {
            for (id, preferred) in &order {
                if chosen.len() == want {
                    break;
                }
                if chosen.iter().any(|r| r.segment == *id) {
                    continue;
                }
                let Some(seg) = self.segments.get_mut(id) else { continue };
                if distinct_hosts && !preferred && hosts.contains(&seg.spec.host_id) {
                    continue;
                }
                if let Some(range) = seg.allocate(HeldBy::Object(&put.key), put.size_bytes)? {
                    hosts.insert(seg.spec.host_id.clone());
                    chosen.push(ReplicaPlacement { segment: *id, range });
                }
            }
        }
        if chosen.is_empty() {
            return Err(MetaError::NoAvailableHandle(format!(
                "no segment has {} free contiguous bytes for {:?}",
                put.size_bytes, put.key
            ))
            .into());
        }
        Ok(chosen)
    }

    fn put_end(&mut self, client: ClientId, key: &str, checksum: u32) -> Result<(), MetaError> {
        let now = self.now_ms;
        let done = self.objects.update(key, |obj| {
            if obj.writer != client {
                return Err(MetaError::IllegalClient(format!(
                    "{key:?} is being written by {}, not {client}",
                    obj.writer
                )));
            }
            match obj.status {
                ObjectStatus::Complete if obj.checksum == Some(checksum) => Ok(()), // a retried PutEnd
                ObjectStatus::Complete => Err(MetaError::ObjectAlreadyExists(key.to_string())),
                ObjectStatus::Processing => {
                    obj.status = ObjectStatus::Complete;
                    obj.checksum = Some(checksum);
                    obj.completed_ms = Some(now);
                    Ok(())
                }
            }
        });
        done.unwrap_or_else(|| Err(MetaError::ObjectNotFound(key.to_string())))
    }

    fn put_revoke(&mut self, client: ClientId, key: &str) -> Result<(), Stop> {
        let Some(obj) = self.objects.get(key) else {
            return Err(MetaError::ObjectNotFound(key.to_string()).into());
        };
        if obj.writer != client {
            let e = MetaError::IllegalClient(format!("{key:?} is being written by {}, not {client}", obj.writer));
            return Err(e.into());
        }
        if obj.status == ObjectStatus::Complete {
            return Err(invalid(format!("{key:?} is complete; use Remove")).into());
        }
        self.free_object(key).map_err(Stop::from)
    }

    fn remove(&mut self, key: &str) -> Result<(), Stop> {
        let Some(obj) = self.objects.get(key) else {
            return Err(MetaError::ObjectNotFound(key.to_string()).into());
        };
        if obj.status != ObjectStatus::Complete {
            return Err(MetaError::ReplicaNotReady(key.to_string()).into());
        }
        self.free_object(key).map_err(Stop::from)
    }

    fn remove_version(&mut self, key: &str, version: ObjectVersion) -> Result<(), Stop> {
        match self.objects.get(key) {
            Some(o) if o.version == version && o.status == ObjectStatus::Complete => {
                self.free_object(key).map_err(Stop::from)
            }
            // The incarnation the leader checked is gone (removed, evicted,
            // or lost with its segments); a newer one is not ours to remove.
            _ => Err(MetaError::ObjectNotFound(key.to_string()).into()),
        }
    }

    fn remove_objects(&mut self, victims: &[VersionedKey]) -> Applied {
        let mut count = 0;
        for v in victims {
            let current = self.objects.get(&v.key);
            if current.is_some_and(|o| o.version == v.version && o.status == ObjectStatus::Complete) {
                self.free_object(&v.key)?;
                count += 1;
            }
        }
        Ok(Response::Removed { count })
    }

    /// Drops `client` and its segments; with `keep_disk`, its disk segments
    /// stay, detached, with their objects.
    fn expire_client(&mut self, client: ClientId, keep_disk: bool) -> Result<(), MetaError> {
        if self.clients.remove(&client).is_none() {
            return Err(MetaError::IllegalClient(format!("{client} is not registered")));
        }
        // The id is free: the next credential to mount under it holds it.
        let credential = self.credentials.remove(&client);
        let owned: Vec<(SegmentId, Tier)> = self.client_segments(client).map(|s| (s.spec.id, s.tier())).collect();
        for (id, tier) in owned {
            if keep_disk && tier == Tier::Ssd {
                self.detach(id, credential);
            } else {
                self.drop_segment(id);
            }
        }
        // Its unfinished puts can never complete; hold their ranges until the
        // release timeout in case the writer is alive behind a partition.
        let abandoned: Vec<VersionedKey> = self
            .objects
            .values()
            .filter(|o| o.writer == client && o.status == ObjectStatus::Processing)
            .map(|o| VersionedKey { key: o.key.clone(), version: o.version })
            .collect();
        self.discard_puts(&abandoned);
        Ok(())
    }

    fn discard_puts(&mut self, victims: &[VersionedKey]) -> Response {
        let mut count = 0;
        for v in victims {
            let matches = self
                .objects
                .get(&v.key)
                .is_some_and(|o| o.version == v.version && o.status == ObjectStatus::Processing);
            if !matches {
                continue;
            }
            if let Some(obj) = self.objects.remove(&v.key) {
                let put = DiscardedPut {
                    version: obj.version,
                    key: obj.key,
                    replicas: obj.replicas,
                    discarded_ms: self.now_ms,
                };
                self.discarded.insert(put.version, put);
                count += 1;
            }
        }
        Response::Removed { count }
    }

    fn release_discarded(&mut self, versions: &[ObjectVersion]) -> Applied {
        let mut count = 0;
        for v in versions {
            if let Some(put) = self.discarded.remove(v) {
                self.free_replicas(HeldBy::Discarded(*v), &put.replicas)?;
                count += 1;
            }
        }
        Ok(Response::Removed { count })
    }

    fn free_object(&mut self, key: &str) -> Result<(), InvariantViolation> {
        match self.objects.remove(key) {
            Some(obj) => self.free_replicas(HeldBy::Object(key), &obj.replicas),
            None => Ok(()),
        }
    }
}
