//! [`ObjectIndex`]: the objects of the state, ordered by key, each stored
//! once. A `BTreeMap<String, ObjectMeta>` kept every key twice (the map's
//! key and the record's), 46 of the ~320 bytes an object cost at 20-byte
//! keys; here the record is its own key (`ByKey` orders and looks up by
//! `ObjectMeta::key`).
//!
//! The set is a persistent B+tree (`imbl::OrdSet`): cloning the index
//! shares every node and costs O(1), and a change then copies only the
//! nodes on its path. A snapshot copies the state under its lock and
//! encodes the copy after letting go, so applies wait microseconds instead
//! of the hundreds of ms a full copy of a million objects took.
//!
//! While recording is on ([`ObjectIndex::record`]), every change is noted
//! ([`IndexChange`]): what apply turns into object events (`events.rs`).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdSet;
use mooncake_segment::tenant::tenant_of;

use super::ObjectMeta;
use super::tenants::TenantUsage;
use crate::command::ObjectVersion;

/// An object ordered, compared and looked up by its key alone. Behind an
/// `Arc`: a tree node holds 8 bytes per object rather than the 112-byte
/// record (nodes are about half full), and copying a node a snapshot shares
/// copies pointers, not records.
#[derive(Clone, Debug)]
struct ByKey(Arc<ObjectMeta>);

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ByKey {}

impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.key.cmp(&other.0.key)
    }
}

impl ByKey {
    /// The record, copied only if a clone of the index still shares it.
    fn into_inner(self) -> ObjectMeta {
        Arc::try_unwrap(self.0).unwrap_or_else(|shared| (*shared).clone())
    }
}

impl Borrow<str> for ByKey {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

/// The objects by key, and what each tenant's take (derived: kept as the
/// objects change, rebuilt with them, never stored).
#[derive(Clone, Debug, Default)]
pub struct ObjectIndex {
    set: OrdSet<ByKey>,
    journal: Journal,
    usage: BTreeMap<String, TenantUsage>,
}

/// One change to the index.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexChange {
    /// A new object (a put; an upsert removes the old version first).
    Stored(Arc<ObjectMeta>),
    /// The object is gone.
    Removed { key: String, version: ObjectVersion },
    /// The object's replicas changed: the object as it is now.
    Replicas(Arc<ObjectMeta>),
}

/// The changes noted while recording is on. Not part of the state: a copy
/// of the index (a snapshot's) records nothing and starts empty.
#[derive(Debug, Default)]
struct Journal {
    on: bool,
    changes: Vec<IndexChange>,
}

impl Clone for Journal {
    fn clone(&self) -> Self {
        Journal::default()
    }
}

impl Journal {
    fn note(&mut self, change: impl FnOnce() -> IndexChange) {
        if self.on {
            self.changes.push(change());
        }
    }
}

impl ObjectIndex {
    pub fn get(&self, key: &str) -> Option<&ObjectMeta> {
        self.set.get(key).map(|o| &*o.0)
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// In key order.
    pub fn values(&self) -> impl Iterator<Item = &ObjectMeta> {
        self.set.iter().map(|o| &*o.0)
    }

    /// The objects whose key starts with `prefix`, in key order.
    pub fn with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a ObjectMeta> + 'a {
        self.set
            .range::<_, str>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |o| o.0.key.starts_with(prefix))
            .map(|o| &*o.0)
    }

    /// The objects whose key sorts after `key`, in key order (a cursor for
    /// scans done a slice at a time).
    pub fn after<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a ObjectMeta> + 'a {
        self.set.range::<_, str>((Bound::Excluded(key), Bound::Unbounded)).map(|o| &*o.0)
    }

    /// What tenant `name`'s objects take.
    pub fn usage(&self, name: &str) -> TenantUsage {
        self.usage.get(name).copied().unwrap_or_default()
    }

    /// The usage of every tenant that has objects.
    pub fn usages(&self) -> impl Iterator<Item = (&str, TenantUsage)> {
        self.usage.iter().map(|(t, u)| (t.as_str(), *u))
    }

    fn count_in(&mut self, o: &ObjectMeta) {
        let tenant = tenant_of(&o.key);
        match self.usage.get_mut(tenant) {
            Some(u) => u.add(o.size_bytes),
            None => {
                let mut u = TenantUsage::default();
                u.add(o.size_bytes);
                self.usage.insert(tenant.to_string(), u);
            }
        }
    }

    fn count_out(usage: &mut BTreeMap<String, TenantUsage>, o: &ObjectMeta) {
        Self::count_out_of(usage, &o.key, o.size_bytes);
    }

    fn count_out_of(usage: &mut BTreeMap<String, TenantUsage>, key: &str, size_bytes: u64) {
        let tenant = tenant_of(key);
        if let Some(u) = usage.get_mut(tenant) {
            u.take(size_bytes);
            if u.is_empty() {
                usage.remove(tenant);
            }
        }
    }

    /// Stores `object` under its key, returning the one it replaced.
    pub fn insert(&mut self, object: ObjectMeta) -> Option<ObjectMeta> {
        self.count_in(&object);
        let object = Arc::new(object);
        let noted = self.journal.on.then(|| object.clone());
        let replaced = self.set.insert(ByKey(object)).map(ByKey::into_inner);
        if let Some(old) = &replaced {
            Self::count_out(&mut self.usage, old);
            self.journal.note(|| IndexChange::Removed { key: old.key.clone(), version: old.version });
        }
        if let Some(object) = noted {
            self.journal.note(|| IndexChange::Stored(object));
        }
        replaced
    }

    pub fn remove(&mut self, key: &str) -> Option<ObjectMeta> {
        let removed = self.set.remove(key).map(ByKey::into_inner);
        if let Some(o) = &removed {
            Self::count_out(&mut self.usage, o);
            self.journal.note(|| IndexChange::Removed { key: o.key.clone(), version: o.version });
        }
        removed
    }

    /// Changes the object `key` in place (its key must stay); `None` when
    /// there is none.
    pub fn update<T>(&mut self, key: &str, f: impl FnOnce(&mut ObjectMeta) -> T) -> Option<T> {
        let mut object = self.set.remove(key)?;
        let replicas_before = self.journal.on.then(|| object.0.replicas.clone());
        let out = f(Arc::make_mut(&mut object.0));
        debug_assert_eq!(object.0.key, key, "an update must not change the key");
        if replicas_before.is_some_and(|before| before != object.0.replicas) {
            self.journal.note(|| IndexChange::Replicas(object.0.clone()));
        }
        self.set.insert(object);
        Some(out)
    }

    /// Keeps the objects for which `f` (which may drop their replicas, and
    /// change nothing else) returns true.
    pub fn retain_mut(&mut self, mut f: impl FnMut(&mut ObjectMeta) -> bool) {
        let set = std::mem::take(&mut self.set);
        let journal = &mut self.journal;
        let usage = &mut self.usage;
        self.set = set
            .into_iter()
            .filter_map(|mut o| {
                let before = o.0.replicas.len();
                // Counted out at the size it was counted in (`f` keeps the key).
                let size = o.0.size_bytes;
                let keep = f(Arc::make_mut(&mut o.0));
                match keep {
                    false => {
                        Self::count_out_of(usage, &o.0.key, size);
                        journal.note(|| IndexChange::Removed { key: o.0.key.clone(), version: o.0.version })
                    }
                    true if o.0.replicas.len() != before => journal.note(|| IndexChange::Replicas(o.0.clone())),
                    true => {}
                }
                keep.then_some(o)
            })
            .collect();
    }

    /// Turns the noting of changes on or off.
    pub fn record(&mut self, on: bool) {
        self.journal.on = on;
    }

    /// The changes noted since the last call, in order.
    pub fn take_changes(&mut self) -> Vec<IndexChange> {
        std::mem::take(&mut self.journal.changes)
    }
}

impl FromIterator<ObjectMeta> for ObjectIndex {
    fn from_iter<I: IntoIterator<Item = ObjectMeta>>(iter: I) -> Self {
        let mut index = ObjectIndex::default();
        for o in iter {
            index.count_in(&o);
            index.set.insert(ByKey(Arc::new(o)));
        }
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{ObjectVersion, Pin};
    use mooncake_segment::ClientId;

    fn object(key: &str, version: u64) -> ObjectMeta {
        ObjectMeta {
            key: key.into(),
            version: ObjectVersion(version),
            size_bytes: 1,
            checksum: 0,
            writer: ClientId(1),
            replicas: vec![],
            pin: Pin::None,
            committed_ms: 0,
        }
    }

    #[test]
    fn objects_are_found_changed_and_removed_by_key() {
        let mut idx: ObjectIndex = [object("b", 1), object("a", 2), object("ab", 3)].into_iter().collect();
        assert_eq!(idx.values().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["a", "ab", "b"]);
        assert_eq!(idx.with_prefix("a").map(|o| o.version.0).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(idx.after("a").map(|o| o.key.as_str()).collect::<Vec<_>>(), ["ab", "b"], "a cursor");
        assert_eq!(idx.after("aa").map(|o| o.key.as_str()).collect::<Vec<_>>(), ["ab", "b"], "between keys");
        assert_eq!(idx.after("b").count(), 0);
        assert_eq!(idx.insert(object("a", 4)).map(|o| o.version.0), Some(2), "replaced");
        assert_eq!(idx.update("b", |o| o.size_bytes = 9), Some(()));
        assert_eq!(idx.get("b").map(|o| o.size_bytes), Some(9));
        assert_eq!(idx.update("zz", |_| ()), None);
        idx.retain_mut(|o| {
            o.size_bytes += 1;
            o.key != "ab"
        });
        assert_eq!(idx.values().map(|o| (o.key.as_str(), o.size_bytes)).collect::<Vec<_>>(), [("a", 2), ("b", 10)]);
        assert_eq!(idx.remove("a").map(|o| o.version.0), Some(4));
        assert_eq!((idx.len(), idx.get("a").is_none()), (1, true));
    }
}
