//! The master's side of data-path capabilities (`mooncake_auth::capability`):
//! the segment keys it hands to store nodes in mount answers, and the
//! capability it puts in every replica it hands to a client (WRITE in
//! PutStart answers, READ in GetReplicaList answers).
//!
//! Keys are derived from the cluster secret, so every master derives the
//! same key for a segment and nothing is stored or replicated; derived keys
//! are cached (bounded) because a batch answer signs up to thousands of
//! replicas.
//!
//! A WRITE capability names the arena of its range; the arena fences that
//! store nodes enforce over those names (`arena_fences.rs`) travel to them
//! through [`fences_of`] and come back through [`take_acks`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mooncake_auth::capability::{self, Access, Requested, SEGMENT_KEY_BYTES, SegmentKey};
use mooncake_auth::{ClusterSecret, MacKey};
use mooncake_proto::master::{ArenaFence, FenceAck, Replica};
use mooncake_raft_store::MetaState;
use mooncake_segment::{ClientId, SegmentId};

use crate::shared::Shared;

/// Most segment keys cached. A cluster of 100 store nodes mounts a few
/// hundred segments; past this many (a churn of remounts) the cache starts
/// over, which costs one key derivation (about a microsecond) per segment.
const ISSUER_KEYS_MAX: usize = 4_096;

/// Signs capabilities and derives segment keys for one master.
pub struct CapabilityIssuer {
    root: MacKey,
    ttl: Duration,
    keys: Mutex<HashMap<(SegmentId, ClientId), Arc<SegmentKey>>>,
}

impl CapabilityIssuer {
    /// An issuer under `secret`'s capability key whose capabilities live `ttl`.
    pub fn new(secret: &ClusterSecret, ttl: Duration) -> Self {
        CapabilityIssuer { root: secret.key("capability"), ttl, keys: Mutex::new(HashMap::new()) }
    }

    /// The key of `segment` as owned by `owner`: for the owner's mount answer.
    pub fn key_bytes(&self, segment: SegmentId, owner: ClientId) -> [u8; SEGMENT_KEY_BYTES] {
        capability::segment_key(&self.root, segment.0, owner.0)
    }

    /// Fills the capability of each replica with `access` to its range, for
    /// the segment's owner in `state`; a WRITE names the replica's arena
    /// (`Replica.arena_id`). A replica of a segment `state` does not know
    /// gets none (the store node would refuse it anyway).
    pub fn grant(&self, state: &MetaState, replicas: &mut [Replica], access: Access) {
        let expires_unix_ms = unix_ms_now().saturating_add(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX));
        for replica in replicas {
            let segment = SegmentId(replica.segment_id);
            let Some(owner) = state.segment(segment).map(|s| s.owner) else { continue };
            let requested = Requested { segment_id: segment.0, offset: replica.offset, len: replica.len, access };
            let arena = match access {
                Access::Write => replica.arena_id,
                Access::Read => 0,
            };
            let cap = capability::issue_in_arena(&self.key(segment, owner), &requested, arena, expires_unix_ms);
            replica.capability = cap.encode().to_vec();
        }
    }

    fn key(&self, segment: SegmentId, owner: ClientId) -> Arc<SegmentKey> {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = keys.get(&(segment, owner)) {
            return key.clone();
        }
        if keys.len() >= ISSUER_KEYS_MAX {
            keys.clear();
        }
        let key = Arc::new(SegmentKey::new(&self.key_bytes(segment, owner)));
        keys.insert((segment, owner), key.clone());
        key
    }
}

/// The arena fences of `client`'s segments, as this leader makes them
/// now: all of them (`only_due` false: a mount answer), or those the client
/// has yet to acknowledge (Ping and TakeCopies answers). Empty when this
/// master does not lead.
pub fn fences_of(shared: &Shared, client: ClientId, segments: Option<&[SegmentId]>, only_due: bool) -> Vec<ArenaFence> {
    // The soft state first, then the state (see `ArenaFences`): an arena
    // returned before the clone is gone from the state read after it.
    let Some(fences) = shared.leader.with(|t| t.fences.clone()) else { return Vec::new() };
    shared.reader.read(|s| {
        let owned: Vec<SegmentId> = match segments {
            Some(ids) => ids.iter().copied().filter(|id| s.segment(*id).is_some_and(|g| g.owner == client)).collect(),
            None => s.client_segments(client).map(|g| g.spec.id).collect(),
        };
        owned
            .into_iter()
            .filter(|id| !only_due || fences.due(*id))
            .map(|id| {
                let in_state = s.arenas().filter(|a| a.segment == id).map(|a| a.id);
                let f = fences.fence(id, in_state, s.next_arena_id());
                ArenaFence {
                    segment_id: f.segment.0,
                    version: f.version,
                    live: f.live.into_iter().collect(),
                    next: f.next,
                }
            })
            .collect()
    })
}

/// Records the fences `client`'s store node says it enforces (only for
/// segments it owns); wakes puts waiting to return arenas when one counts.
pub fn take_acks(shared: &Shared, client: ClientId, acks: &[FenceAck]) {
    if acks.is_empty() {
        return;
    }
    let owned: Vec<(SegmentId, u64)> = shared.reader.read(|s| {
        acks.iter()
            .map(|a| (SegmentId(a.segment_id), a.version))
            .filter(|(id, _)| s.segment(*id).is_some_and(|g| g.owner == client))
            .collect()
    });
    let moved = shared.leader.with(|t| {
        let mut moved = false;
        for (segment, version) in owned {
            let was_due = t.fences.due(segment);
            t.fences.ack(segment, version);
            moved |= was_due && !t.fences.due(segment);
        }
        moved
    });
    if moved == Some(true) {
        shared.auth.fence_wakes.acked.notify_waiters();
    }
}

/// This master's wall clock in unix ms (capability expiries are wall-clock
/// times: store nodes compare them with their own clocks).
fn unix_ms_now() -> u64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}
