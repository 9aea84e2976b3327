//! Reads of the state: the accessors the leader, the master's services and
//! the tests use (objects, segments, clients, arenas, capacity per tier,
//! remembered answers). Nothing here changes the state.

use mooncake_segment::{ClientId, Range, SegmentId};

use super::{ClientEntry, MetaState, ObjectMeta, RequestClock, RetiredObject, SegmentEntry};
use crate::command::{Arena, ArenaId, CredentialHash, ObjectVersion, ReplicaPlacement, Response, Tier};
use crate::error::MetaError;

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
    /// The hash of the credential `id` registered with (`None`: `id` is not
    /// registered).
    pub fn client_credential(&self, id: ClientId) -> Option<&CredentialHash> {
        self.clients.get(&id).map(|c| &c.credential)
    }
    /// Whether a caller holding `credential` may act as `client`: yes unless
    /// `client` is registered under another credential. Checked by apply and,
    /// to answer early, by the leader before it proposes (or answers a Ping).
    pub fn check_credential(&self, client: ClientId, credential: &CredentialHash) -> Result<(), MetaError> {
        match self.client_credential(client) {
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
    pub fn arenas(&self) -> impl Iterator<Item = &Arena> {
        self.arenas.values()
    }
    pub fn arena(&self, id: ArenaId) -> Option<&Arena> {
        self.arenas.get(&id)
    }
    /// The arena whose extents hold `range` of `segment`, if any.
    pub fn arena_holding(&self, segment: SegmentId, range: Range) -> Option<&Arena> {
        let (_, id) = self.arenas_by_offset.range(..=(segment, range.offset)).next_back()?;
        self.arenas.get(id).filter(|a| a.segment == segment && a.holds(range))
    }
    /// The version the next object committed will get (versions only grow).
    pub fn next_object_version(&self) -> ObjectVersion {
        ObjectVersion(self.next_version)
    }
    /// The term of the last applied entry: once it is a leader's own term,
    /// everything earlier leaders committed is applied.
    pub fn applied_term(&self) -> Option<u64> {
        self.last_applied.map(|l| l.leader_id.term)
    }
    /// The id the next arena granted will get (ids only grow).
    pub fn next_arena_id(&self) -> ArenaId {
        ArenaId(self.next_arena)
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
