//! The master's side of data-path capabilities (`mooncake_auth::capability`):
//! the segment keys it hands to store nodes in mount answers, the
//! capability for every replica it hands to a client (WRITE in PutStart
//! answers, READ in GetReplicaList answers; the edge puts them in the
//! replicas, `rpc/grants.rs`), and the check of a WRITE capability a
//! PutEnd echoes back.
//!
//! Keys are derived from the cluster secret, so every master derives the
//! same key for a segment and nothing is stored or replicated; derived keys
//! are cached (bounded) because a batch answer signs up to thousands of
//! replicas.
//!
//! A WRITE capability names the arena of its range; the arena fences that
//! store nodes enforce over those names (`leader/arena_fences.rs`) travel
//! to them and come back through `objects/arenas.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mooncake_auth::capability::{self, Access, Requested, SEGMENT_KEY_BYTES, SegmentKey};
use mooncake_auth::{ClusterSecret, MacKey};
use mooncake_raft_store::{ArenaId, MetaState, PlacedReplica};
use mooncake_segment::{ClientId, Range, SegmentId};

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

    /// The capability with `access` to `range` of `segment` (a WRITE
    /// naming `arena`), for the segment's owner in `state`, valid for this
    /// issuer's TTL; none for a segment `state` does not know (its store
    /// node would refuse it anyway). The edge puts it in the replicas it
    /// hands out (`rpc/grants.rs`).
    pub fn issue(
        &self,
        state: &MetaState,
        segment: SegmentId,
        range: Range,
        arena: ArenaId,
        access: Access,
    ) -> Option<Vec<u8>> {
        let owner = state.segment(segment).map(|s| s.owner)?;
        let expires_unix_ms = unix_ms_now().saturating_add(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX));
        let requested = Requested { segment_id: segment.0, offset: range.offset, len: range.len, access };
        let arena = match access {
            Access::Write => arena.0,
            Access::Read => 0,
        };
        let cap = capability::issue_in_arena(&self.key(segment, owner), &requested, arena, expires_unix_ms);
        Some(cap.encode().to_vec())
    }

    /// Checks that `capability` (echoed back in a PutEnd with `replica`)
    /// is a WRITE capability this cluster issued for the replica's segment
    /// (as owned in `state`), its arena and a range covering its own, still
    /// valid on this master's clock: the proof that the sender was handed
    /// that range. Why not, when it is not.
    pub fn check_write(&self, state: &MetaState, replica: &PlacedReplica, capability: &[u8]) -> Result<(), String> {
        let segment = replica.segment;
        let Some(owner) = state.segment(segment).map(|s| s.owner) else {
            return Err(format!("segment {} is not mounted", segment.0));
        };
        let requested = Requested {
            segment_id: segment.0,
            offset: replica.range.offset,
            len: replica.range.len,
            access: Access::Write,
        };
        let cap = capability::verify(&self.key(segment, owner), capability, &requested, unix_ms_now())
            .map_err(|e| format!("its WRITE capability for segment {}: {e}", segment.0))?;
        if cap.arena != replica.arena.0 {
            return Err(format!(
                "its WRITE capability is for arena {}, the replica names arena {}",
                cap.arena, replica.arena.0
            ));
        }
        Ok(())
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

/// This master's wall clock in unix ms (capability expiries are wall-clock
/// times: store nodes compare them with their own clocks).
fn unix_ms_now() -> u64 {
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}
