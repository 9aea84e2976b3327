//! Apply of the legacy two-commit put (`PutStart`, `PutEnd`, `PutRevoke`,
//! never proposed any more but replayed from older logs) and of abandoned
//! puts: discarded (key free, ranges held) and later released.
//! The one-commit put of this version is in `arenas.rs`.

use std::collections::BTreeSet;

use mooncake_segment::{ClientId, SegmentId};

use super::apply::{Applied, Stop};
use super::invariants::HeldBy;
use super::validation::{invalid, validate_put_start};
use super::{DiscardedPut, MetaState, ObjectMeta, ObjectStatus, SegmentEntry};
use crate::command::{ObjectVersion, PutStart, ReplicaPlacement, Response, Tier, VersionedKey};
use crate::error::MetaError;

impl MetaState {
    pub(super) fn put_start(&mut self, put: &PutStart) -> Applied {
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

    pub(super) fn put_end(&mut self, client: ClientId, key: &str, checksum: u32) -> Result<(), MetaError> {
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

    pub(super) fn put_revoke(&mut self, client: ClientId, key: &str) -> Result<(), Stop> {
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

    pub(super) fn discard_puts(&mut self, victims: &[VersionedKey]) -> Response {
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

    pub(super) fn release_discarded(&mut self, versions: &[ObjectVersion]) -> Applied {
        let mut count = 0;
        for v in versions {
            if let Some(put) = self.discarded.remove(v) {
                self.free_replicas(HeldBy::Discarded(*v), &put.replicas)?;
                count += 1;
            }
        }
        Ok(Response::Removed { count })
    }
}
