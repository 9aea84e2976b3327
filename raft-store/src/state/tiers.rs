//! Apply of the tier commands (docs/TIERS.md): copies of complete objects
//! added by store nodes (offload to disk, promotion to memory), replicas
//! dropped from one tier, disk segments detached when their store node
//! expires and ended when their grace passes, and replicas dropped where a
//! store node found its disk corrupt.
//!
//! Ranges on a disk segment are whole blocks ([`DISK_ALIGN_BYTES`]): the
//! store node reads and writes them with direct I/O. Apply refuses any
//! other range there, so the rule holds by construction.

use mooncake_segment::{ClientId, Range, SegmentId};

use super::apply::Applied;
use super::invariants::HeldBy;
use super::validation::invalid;
use super::{DetachedDisk, MetaState, REPLICA_NUM_MAX};
use crate::command::*;
use crate::error::MetaError;

impl MetaState {
    /// Detaches the disk segment `id` of an expired owner: its arenas end
    /// (no leader places anything on it), its objects stay.
    pub(super) fn detach(&mut self, id: SegmentId, credential: CredentialHash) {
        let now = self.now_ms;
        if let Some(seg) = self.segments.get_mut(&id) {
            seg.detached = Some(DetachedDisk { since_ms: now, credential });
        }
        self.drop_arenas_of(id);
    }

    pub(super) fn add_replica(&mut self, key: &str, version: ObjectVersion, replica: &PlacedReplica) -> Applied {
        let Some(obj) = self.objects.get(key).filter(|o| o.version == version) else {
            // Removed, evicted or replaced while the copy was made.
            return Ok(Response::Err(MetaError::ObjectNotFound(format!("{key:?} (version {})", version.0))));
        };
        let expired = |why: String| MetaError::PutExpired(format!("copy of {key:?}: {why}"));
        let Some(seg) = self.segments.get(&replica.segment) else {
            return Ok(Response::Err(expired(format!("segment {} is gone", replica.segment))));
        };
        if !seg.is_attached() {
            return Ok(Response::Err(expired(format!("segment {} is detached", replica.segment))));
        }
        if let Err(e) = super::arenas::check_serves(seg, key) {
            return Ok(Response::Err(e));
        }
        if obj.replicas.iter().any(|r| r.segment == replica.segment) {
            return Ok(Response::Err(MetaError::ObjectAlreadyExists(format!(
                "{key:?} already has a replica on {}",
                replica.segment
            ))));
        }
        if obj.replicas.len() >= REPLICA_NUM_MAX as usize {
            return Ok(Response::Err(invalid(format!("{key:?} has {REPLICA_NUM_MAX} replicas already"))));
        }
        if let Err(e) = check_range_shape(seg.tier(), obj.size_bytes, replica.range) {
            return Ok(Response::Err(e));
        }
        let Some(arena) = self.arenas.get(&replica.arena) else {
            return Ok(Response::Err(expired(format!("{} was returned", replica.arena))));
        };
        if arena.segment != replica.segment || !arena.holds(replica.range) {
            return Ok(Response::Err(invalid(format!(
                "{:?} on {} is not inside {}",
                replica.range, replica.segment, replica.arena
            ))));
        }
        if !seg.alloc.is_free(replica.range) {
            return Ok(Response::Err(expired(format!(
                "{:?} on {} holds another object",
                replica.range, replica.segment
            ))));
        }
        let Some(seg) = self.segments.get_mut(&replica.segment) else { return Ok(Response::Ok) };
        seg.reserve(HeldBy::Object(key), replica.range)?;
        let placement = ReplicaPlacement { segment: replica.segment, range: replica.range };
        self.objects.update(key, |o| o.replicas.push(placement));
        Ok(Response::Ok)
    }

    pub(super) fn drop_tier_replicas(&mut self, victims: &[VersionedKey], tier: Tier) -> Applied {
        let mut count = 0;
        for v in victims {
            let Some(obj) = self.objects.get(&v.key) else { continue };
            if obj.version != v.version {
                continue;
            }
            let (dropped, kept): (Vec<ReplicaPlacement>, Vec<ReplicaPlacement>) =
                obj.replicas.iter().cloned().partition(|r| self.replica_tier(r) == Some(tier));
            let readable_elsewhere = kept.iter().any(|r| self.is_readable(r));
            if dropped.is_empty() || !readable_elsewhere {
                continue;
            }
            self.free_replicas(HeldBy::Object(&v.key), &dropped)?;
            self.objects.update(&v.key, |o| o.replicas = kept);
            count += 1;
        }
        Ok(Response::Removed { count })
    }

    /// `DropReplica`: the replica of `victim` on `segment`, when another
    /// readable memory replica stays.
    pub(super) fn drop_replica(&mut self, victim: &VersionedKey, segment: SegmentId) -> Applied {
        let Some(obj) = self.objects.get(&victim.key).filter(|o| o.version == victim.version) else {
            return Ok(Response::Removed { count: 0 });
        };
        let (dropped, kept): (Vec<ReplicaPlacement>, Vec<ReplicaPlacement>) =
            obj.replicas.iter().cloned().partition(|r| r.segment == segment);
        let memory_stays = kept.iter().any(|r| self.is_readable(r) && self.replica_tier(r) == Some(Tier::Dram));
        if dropped.is_empty() || !memory_stays {
            return Ok(Response::Removed { count: 0 });
        }
        self.free_replicas(HeldBy::Object(&victim.key), &dropped)?;
        self.objects.update(&victim.key, |o| o.replicas = kept);
        Ok(Response::Removed { count: 1 })
    }

    pub(super) fn drop_detached(&mut self, ids: &[SegmentId]) -> Response {
        let mut count = 0;
        for id in ids {
            if self.segments.get(id).is_some_and(|s| !s.is_attached()) {
                self.drop_segment(*id);
                count += 1;
            }
        }
        Response::Removed { count }
    }

    pub(super) fn drop_corrupt(
        &mut self,
        client: ClientId,
        credential: &CredentialHash,
        segment: SegmentId,
        ranges: &[Range],
    ) -> Applied {
        if let Err(e) = self.check_credential(client, credential) {
            return Ok(Response::Err(e));
        }
        match self.segments.get(&segment) {
            None => return Ok(Response::Err(MetaError::SegmentNotFound(segment.to_string()))),
            Some(s) if s.owner != client => {
                return Ok(Response::Err(MetaError::IllegalClient(format!(
                    "{segment} is owned by {}, not {client}",
                    s.owner
                ))));
            }
            Some(_) => {}
        }
        if ranges.len() > super::BATCH_MAX {
            return Ok(Response::Err(invalid(format!("{} ranges; the limit is {}", ranges.len(), super::BATCH_MAX))));
        }
        let overlaps = |r: &ReplicaPlacement| {
            r.segment == segment && ranges.iter().any(|c| c.offset < r.range.end() && r.range.offset < c.end())
        };
        let hit: Vec<(String, ReplicaPlacement)> = self
            .objects
            .values()
            .flat_map(|o| o.replicas.iter().filter(|r| overlaps(r)).map(|r| (o.key.clone(), r.clone())))
            .collect();
        for (key, replica) in &hit {
            self.free_replicas(HeldBy::Object(key), std::slice::from_ref(replica))?;
            let left = self.objects.update(key, |o| {
                o.replicas.retain(|r| r != replica);
                o.replicas.len()
            });
            if left == Some(0) {
                self.objects.remove(key);
            }
        }
        Ok(Response::Removed { count: hit.len() as u64 })
    }
}

/// A replica range for an object of `size_bytes` on a segment of `tier`:
/// aligned to the tier's unit and exactly the object's size rounded up to it.
pub(super) fn check_range_shape(tier: Tier, size_bytes: u64, range: Range) -> Result<(), MetaError> {
    let align = tier.align_bytes();
    let Some(len) = tier.range_len(size_bytes) else {
        return Err(invalid(format!("an object of {size_bytes} bytes is larger than any segment")));
    };
    if range.len != len || !range.offset.is_multiple_of(align) {
        return Err(invalid(format!(
            "range {range:?} on a {} segment must start on a {align}-byte boundary and be {len} bytes long",
            tier.name()
        )));
    }
    Ok(())
}
