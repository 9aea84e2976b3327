//! Apply of the removals of objects, by version (`RemoveVersion`,
//! `RemoveObjects`: a newer incarnation is never touched), and freeing a
//! removed object's ranges.

use super::MetaState;
use super::apply::{Applied, Stop};
use super::invariants::{HeldBy, InvariantViolation};
use crate::command::{ObjectVersion, Response, VersionedKey};
use crate::error::MetaError;

impl MetaState {
    pub(super) fn remove_version(&mut self, key: &str, version: ObjectVersion) -> Result<(), Stop> {
        match self.objects.get(key) {
            Some(o) if o.version == version => self.free_object(key).map_err(Stop::from),
            // The incarnation the leader checked is gone (removed, evicted,
            // or lost with its segments); a newer one is not ours to remove.
            _ => Err(MetaError::ObjectNotFound(key.to_string()).into()),
        }
    }

    pub(super) fn remove_objects(&mut self, victims: &[VersionedKey]) -> Applied {
        let mut count = 0;
        for v in victims {
            let current = self.objects.get(&v.key);
            if current.is_some_and(|o| o.version == v.version) {
                self.free_object(&v.key)?;
                count += 1;
            }
        }
        Ok(Response::Removed { count })
    }

    pub(super) fn free_object(&mut self, key: &str) -> Result<(), InvariantViolation> {
        match self.objects.remove(key) {
            Some(obj) => self.free_replicas(HeldBy::Object(key), &obj.replicas),
            None => Ok(()),
        }
    }
}
