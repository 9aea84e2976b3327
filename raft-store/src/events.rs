//! Object events: what each applied log entry did to the objects, for
//! watchers (routers that keep a view of what is cached where).
//!
//! Apply is deterministic, so every master derives the same events from the
//! same entry: an event's *revision* is the log index of the entry that made
//! it, and a watcher may move between masters and resume from a revision
//! with no gap and no duplicate. Only committed entries are applied, so no
//! event describes an uncommitted change.
//!
//! [`EventHistory`] keeps the events of the most recent revisions in memory
//! (bounded: [`HISTORY_EVENTS_MAX`]) and wakes the watchers as entries are
//! applied. History is not replicated state and is not kept across restarts:
//! it starts after whatever the master last installed from a snapshot
//! (a restart replays the log after its snapshot, so the revisions after the
//! snapshot are known again). A watcher asking for a revision the history no
//! longer holds is told so ([`Since::Compacted`]) and resyncs from a listing.

use std::collections::VecDeque;
use std::sync::Mutex;

use mooncake_segment::SegmentId;
use tokio::sync::watch;

use crate::command::{ObjectVersion, Tier};

/// Why an object or one of its replicas changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// A put stored it.
    Put,
    /// A client removed it (`Remove`, `RemoveAll`).
    Remove,
    /// Eviction removed it, or dropped its replicas on a tier.
    Evict,
    /// An upsert replaced this version with a new one.
    Upsert,
    /// Its writer or its segments' owner expired (missed heartbeats).
    Expiry,
    /// A segment holding replicas was unmounted (or a detached disk
    /// segment was dropped).
    Unmount,
    /// A store node found the replica's bytes corrupt.
    Corrupt,
    /// A tier copy added a replica (offload to disk, promotion to memory).
    Copy,
}

impl Cause {
    /// The name watchers see.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Put => "put",
            Cause::Remove => "remove",
            Cause::Evict => "evict",
            Cause::Upsert => "upsert",
            Cause::Expiry => "expiry",
            Cause::Unmount => "unmount",
            Cause::Corrupt => "corrupt",
            Cause::Copy => "copy",
        }
    }
}

/// Where one replica of an object lies, as a watcher needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventReplica {
    pub segment: SegmentId,
    pub tier: Tier,
    /// The host of the store node holding the segment.
    pub host: String,
    /// Its failure domain (the segment's zone; "" when not set).
    pub zone: String,
}

/// One change to one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectEvent {
    /// A new version of `key` is readable (a put or an upsert).
    Stored { key: String, version: ObjectVersion, size_bytes: u64, replicas: Vec<EventReplica> },
    /// The version is gone.
    Removed { key: String, version: ObjectVersion, cause: Cause },
    /// The version's replicas changed (a tier copy added one; eviction,
    /// unmount or corruption dropped some): `replicas` is the new list.
    Replicas { key: String, version: ObjectVersion, replicas: Vec<EventReplica>, cause: Cause },
}

impl ObjectEvent {
    pub fn key(&self) -> &str {
        match self {
            ObjectEvent::Stored { key, .. } | ObjectEvent::Removed { key, .. } | ObjectEvent::Replicas { key, .. } => {
                key
            }
        }
    }
}

/// The events of one applied entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Revision {
    /// The log index of the entry.
    pub revision: u64,
    pub events: Vec<ObjectEvent>,
}

/// Events kept in memory for watchers that resume; older revisions are
/// compacted away (a watcher that needs them resyncs from a listing).
/// About 450 bytes of the master's memory each (measured: `bench scale`),
/// so the default holds ~30 MB: a minute of history at 1,000 puts/s.
pub const HISTORY_EVENTS_MAX: usize = 65_536;

/// What [`EventHistory::since`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Since {
    /// The revisions with events after the one asked, in order, up to the
    /// count asked; every revision up to `through` is covered (those not
    /// listed had no events).
    Events { revisions: Vec<Revision>, through: u64 },
    /// The history no longer holds (or never held, on this master) what
    /// follows `after`: it holds everything from `known_from` on only.
    /// The watcher lists the keys and watches from the listing's revision.
    Compacted { known_from: u64 },
}

#[derive(Debug, Default)]
struct Ring {
    /// Revisions with events, oldest first.
    revisions: VecDeque<Revision>,
    events: usize,
    /// Every revision from this one on is known (those without events have
    /// none). 0 until the first entry is applied.
    known_from: u64,
    /// The last revision applied (or installed).
    last: u64,
}

/// The recent events of this master, and a signal for every applied entry.
#[derive(Debug)]
pub struct EventHistory {
    ring: Mutex<Ring>,
    max_events: usize,
    applied: watch::Sender<u64>,
}

impl Default for EventHistory {
    fn default() -> Self {
        EventHistory::with_capacity(HISTORY_EVENTS_MAX)
    }
}

impl EventHistory {
    /// A history of at most `max_events` events (at least one revision's).
    pub fn with_capacity(max_events: usize) -> Self {
        EventHistory { ring: Mutex::new(Ring::default()), max_events, applied: watch::channel(0).0 }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Entry `revision` was applied with `events` (maybe none).
    pub fn applied(&self, revision: u64, events: Vec<ObjectEvent>) {
        {
            let mut ring = self.ring();
            if ring.known_from == 0 || revision != ring.last + 1 {
                // The first entry this master applies, or one after a jump:
                // nothing before it is known.
                ring.revisions.clear();
                ring.events = 0;
                ring.known_from = revision;
            }
            ring.last = revision;
            if !events.is_empty() {
                ring.events += events.len();
                ring.revisions.push_back(Revision { revision, events });
                while ring.events > self.max_events && ring.revisions.len() > 1 {
                    if let Some(old) = ring.revisions.pop_front() {
                        ring.events -= old.events.len();
                        ring.known_from = old.revision + 1;
                    }
                }
            }
        }
        self.applied.send_replace(revision);
    }

    /// A snapshot up to `revision` was installed: what came between is not
    /// known here.
    pub fn installed(&self, revision: u64) {
        {
            let mut ring = self.ring();
            ring.revisions.clear();
            ring.events = 0;
            ring.known_from = revision + 1;
            ring.last = revision;
        }
        self.applied.send_replace(revision);
    }

    /// The last revision applied here.
    pub fn last(&self) -> u64 {
        self.ring().last
    }

    /// The revisions with events after `after` (exclusive), at most `max`.
    pub fn since(&self, after: u64, max: usize) -> Since {
        let ring = self.ring();
        if ring.known_from == 0 {
            // Nothing applied here yet (a master starting): what comes
            // next is not known to be compacted; wait for it.
            return Since::Events { revisions: Vec::new(), through: after };
        }
        if after + 1 < ring.known_from {
            return Since::Compacted { known_from: ring.known_from };
        }
        let start = ring.revisions.partition_point(|r| r.revision <= after);
        let revisions: Vec<Revision> = ring.revisions.iter().skip(start).take(max).cloned().collect();
        let through = match revisions.last() {
            Some(last) if revisions.len() == max => last.revision,
            _ => after.max(ring.last),
        };
        Since::Events { revisions, through }
    }

    /// Changes with every applied entry (to its revision).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(key: &str) -> ObjectEvent {
        ObjectEvent::Stored { key: key.into(), version: ObjectVersion(1), size_bytes: 1, replicas: vec![] }
    }

    #[test]
    fn a_watcher_resumes_after_any_revision_the_history_holds() {
        let h = EventHistory::with_capacity(3);
        let waiting = Since::Events { revisions: vec![], through: 4 };
        assert_eq!(h.since(4, 10), waiting, "nothing applied yet: wait, nothing is known compacted");
        h.applied(5, vec![stored("a")]);
        h.applied(6, vec![]);
        h.applied(7, vec![stored("b"), stored("c")]);
        let revs = |s: Since| match s {
            Since::Events { revisions, .. } => revisions.iter().map(|r| r.revision).collect::<Vec<_>>(),
            Since::Compacted { known_from } => vec![u64::MAX, known_from],
        };
        let through = |s: Since| match s {
            Since::Events { through, .. } => through,
            Since::Compacted { .. } => u64::MAX,
        };
        assert_eq!(through(h.since(4, 10)), 7, "everything applied");
        assert_eq!(through(h.since(4, 1)), 5, "up to the last one listed");
        assert_eq!(through(h.since(9, 10)), 9, "a watcher ahead of this master");
        assert_eq!(revs(h.since(4, 10)), [5, 7]);
        assert_eq!(revs(h.since(5, 10)), [7], "after 5");
        assert_eq!(revs(h.since(7, 10)), Vec::<u64>::new(), "caught up");
        assert_eq!(revs(h.since(3, 10)), [u64::MAX, 5], "before the first entry applied here");
        assert_eq!(revs(h.since(4, 1)), [5], "at most max");
        // A fourth event pushes revision 5 out: 6 and later stay known.
        h.applied(8, vec![stored("d")]);
        assert_eq!(revs(h.since(4, 10)), [u64::MAX, 6]);
        assert_eq!(revs(h.since(5, 10)), [7, 8]);
        assert_eq!(h.last(), 8);
    }

    #[test]
    fn a_jump_or_a_snapshot_forgets_what_came_before() {
        let h = EventHistory::default();
        h.applied(1, vec![stored("a")]);
        h.applied(5, vec![stored("b")]);
        assert_eq!(h.since(0, 10), Since::Compacted { known_from: 5 });
        h.installed(20);
        assert_eq!(h.since(5, 10), Since::Compacted { known_from: 21 });
        assert_eq!(h.since(20, 10), Since::Events { revisions: vec![], through: 20 });
        let mut rx = h.subscribe();
        h.applied(21, vec![]);
        assert_eq!(*rx.borrow_and_update(), 21);
    }
}
