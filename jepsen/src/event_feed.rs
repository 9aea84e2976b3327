//! The `events` checker: the object events a watcher saw during the run
//! (`event_watcher.rs` records them), replayed in order, must rebuild
//! exactly the objects the masters list at the end — same keys, versions
//! and replica segments at the listing's revision — with no step that
//! contradicts what came before (a version stored twice, a removal or
//! replica change of a version the watcher never saw stored), revisions
//! that never go back, and the watcher caught up to that revision. A gap
//! (a missing event) or a duplicate breaks one of these; an event of a
//! change that was never committed leaves an object the listing lacks.
//!
//! Pure: works on the recorded log and the final listing.

use std::collections::BTreeMap;

use serde::Serialize;

/// What an event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum EventKind {
    Stored,
    Removed,
    Replicas,
}

/// One event as the watcher saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SeenEvent {
    pub revision: u64,
    pub kind: EventKind,
    pub key: String,
    pub version: u64,
    /// The replica segments after the event (Stored, Replicas).
    pub segments: Vec<u64>,
}

/// An object as a listing has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Listed {
    pub key: String,
    pub version: u64,
    pub segments: Vec<u64>,
}

/// What the watcher recorded, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum FeedEntry {
    Event(SeenEvent),
    /// The history the watcher needed was gone: it listed the objects (at
    /// `revision`) and went on from there.
    Resync {
        revision: u64,
        objects: Vec<Listed>,
    },
}

/// The watcher's record of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FeedLog {
    pub entries: Vec<FeedEntry>,
    /// Every revision up to this one was delivered.
    pub through: u64,
    /// Times no master took the watch for the client's deadline.
    pub outages: u64,
}

/// Counts for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FeedCounts {
    pub events: u64,
    pub stored: u64,
    pub removed: u64,
    pub replicas: u64,
    pub resyncs: u64,
    pub outages: u64,
    /// The revision the final listing was read at, and how far the watcher got.
    pub final_revision: u64,
    pub through: u64,
}

/// The checker's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeedVerdict {
    pub counts: FeedCounts,
    pub problems: Vec<String>,
}

type View = BTreeMap<String, (u64, Vec<u64>)>;

fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

/// Checks `log` against the objects listed at `revision` at the end.
pub fn check_event_feed(log: &FeedLog, listing: &[Listed], revision: u64) -> FeedVerdict {
    let mut v = FeedVerdict::default();
    let mut view = View::new();
    let mut last = 0u64;
    let mut after_resync = false;
    for entry in &log.entries {
        match entry {
            FeedEntry::Resync { revision: at, objects } => {
                v.counts.resyncs += 1;
                if *at < last {
                    v.problems.push(format!("a resync at revision {at} went back from revision {last}"));
                }
                view = objects.iter().map(|o| (o.key.clone(), (o.version, sorted(o.segments.clone())))).collect();
                (last, after_resync) = (*at, true);
            }
            FeedEntry::Event(e) if e.revision > revision => break,
            FeedEntry::Event(e) => {
                v.counts.events += 1;
                if e.revision < last || (after_resync && e.revision == last) {
                    v.problems.push(format!("revision {} came after revision {last}: a duplicate", e.revision));
                }
                (last, after_resync) = (e.revision, false);
                if let Some(p) = replay(&mut view, e, &mut v.counts) {
                    v.problems.push(p);
                }
            }
        }
    }
    v.counts.outages = log.outages;
    v.counts.final_revision = revision;
    v.counts.through = log.through;
    if log.through < revision {
        v.problems.push(format!(
            "the watcher never got past revision {} (the final listing is at {revision}): the feed stalled",
            log.through
        ));
        return v;
    }
    let listed: View = listing.iter().map(|o| (o.key.clone(), (o.version, sorted(o.segments.clone())))).collect();
    for (key, want) in &listed {
        match view.get(key) {
            None => v.problems.push(format!("{key} v{} is listed, but no event stored it", want.0)),
            Some(got) if got != want => v.problems.push(format!(
                "{key}: the events leave v{} on segments {:?}, the listing has v{} on {:?}",
                got.0, got.1, want.0, want.1
            )),
            Some(_) => {}
        }
    }
    for (key, got) in &view {
        if !listed.contains_key(key) {
            v.problems.push(format!("{key} v{}: the events leave it stored, the listing does not have it", got.0));
        }
    }
    v
}

/// Applies `e` to `view`; a contradiction is returned (and the view fixed
/// up to the event, so one gap is reported once).
fn replay(view: &mut View, e: &SeenEvent, counts: &mut FeedCounts) -> Option<String> {
    let at = e.revision;
    match e.kind {
        EventKind::Stored => {
            counts.stored += 1;
            let held = view.insert(e.key.clone(), (e.version, sorted(e.segments.clone())));
            held.map(|(old, _)| {
                format!("revision {at}: {} v{} stored while v{old} was never removed", e.key, e.version)
            })
        }
        EventKind::Removed => {
            counts.removed += 1;
            match view.remove(&e.key) {
                Some((v, _)) if v == e.version => None,
                Some((v, _)) => Some(format!("revision {at}: {} v{} removed, but v{v} was held", e.key, e.version)),
                None => Some(format!("revision {at}: {} v{} removed, but no event stored it", e.key, e.version)),
            }
        }
        EventKind::Replicas => {
            counts.replicas += 1;
            let problem = match view.get(&e.key) {
                Some((v, _)) if *v == e.version => None,
                Some((v, _)) => Some(format!("revision {at}: replicas of {} v{}, but v{v} was held", e.key, e.version)),
                None => Some(format!("revision {at}: replicas of {} v{}, but no event stored it", e.key, e.version)),
            };
            view.insert(e.key.clone(), (e.version, sorted(e.segments.clone())));
            problem
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(revision: u64, kind: EventKind, key: &str, version: u64, segments: &[u64]) -> FeedEntry {
        FeedEntry::Event(SeenEvent { revision, kind, key: key.into(), version, segments: segments.to_vec() })
    }

    fn listed(key: &str, version: u64, segments: &[u64]) -> Listed {
        Listed { key: key.into(), version, segments: segments.to_vec() }
    }

    fn log(entries: Vec<FeedEntry>, through: u64) -> FeedLog {
        FeedLog { entries, through, outages: 0 }
    }

    #[test]
    fn a_complete_feed_rebuilds_the_listing() {
        let l = log(
            vec![
                ev(3, EventKind::Stored, "a", 1, &[7]),
                ev(3, EventKind::Stored, "b", 2, &[7]),
                ev(5, EventKind::Removed, "a", 1, &[]),
                ev(6, EventKind::Replicas, "b", 2, &[8, 7]),
                ev(9, EventKind::Stored, "c", 3, &[7]),
            ],
            9,
        );
        let v = check_event_feed(&l, &[listed("b", 2, &[7, 8])], 6);
        assert!(v.problems.is_empty(), "{:?}", v.problems);
        assert_eq!((v.counts.events, v.counts.stored, v.counts.removed, v.counts.replicas), (4, 2, 1, 1));
    }

    #[test]
    fn a_gap_a_duplicate_a_stall_and_a_phantom_are_each_reported() {
        let full = vec![ev(3, EventKind::Stored, "a", 1, &[7]), ev(5, EventKind::Removed, "a", 1, &[])];
        // The store of `a` is missing: its removal names nothing held.
        let gap = check_event_feed(&log(full[1..].to_vec(), 5), &[], 5);
        assert!(gap.problems[0].contains("no event stored it"), "{:?}", gap.problems);
        // The store of `a` twice (a resumed watch that re-sent it).
        let dup = check_event_feed(&log(vec![full[0].clone(), full[0].clone()], 3), &[listed("a", 1, &[7])], 3);
        assert!(dup.problems.iter().any(|p| p.contains("never removed")), "{:?}", dup.problems);
        // A revision that went back.
        let back = check_event_feed(&log(vec![full[1].clone(), full[0].clone()], 5), &[], 5);
        assert!(back.problems.iter().any(|p| p.contains("came after")), "{:?}", back.problems);
        // The watcher stopped short of the listing.
        let stalled = check_event_feed(&log(full.clone(), 4), &[], 5);
        assert!(stalled.problems[0].contains("stalled"), "{:?}", stalled.problems);
        // A removal the feed never carried leaves an object the listing lacks.
        let phantom = check_event_feed(&log(full[..1].to_vec(), 5), &[], 5);
        assert!(phantom.problems[0].contains("the listing does not have it"), "{:?}", phantom.problems);
        // And the other way: a listed object no event stored.
        let missing = check_event_feed(&log(vec![], 5), &[listed("z", 4, &[1])], 5);
        assert!(missing.problems[0].contains("no event stored it"), "{:?}", missing.problems);
    }

    #[test]
    fn a_resync_restarts_the_view_from_its_listing() {
        let l = log(
            vec![
                ev(3, EventKind::Stored, "a", 1, &[7]),
                FeedEntry::Resync { revision: 10, objects: vec![listed("b", 2, &[7])] },
                ev(11, EventKind::Removed, "b", 2, &[]),
                ev(12, EventKind::Stored, "c", 4, &[7]),
            ],
            12,
        );
        let v = check_event_feed(&l, &[listed("c", 4, &[7])], 12);
        assert!(v.problems.is_empty(), "{:?}", v.problems);
        assert_eq!(v.counts.resyncs, 1);
        let replayed = log(
            vec![
                FeedEntry::Resync { revision: 10, objects: vec![listed("b", 2, &[7])] },
                ev(10, EventKind::Removed, "b", 2, &[]),
            ],
            10,
        );
        let v = check_event_feed(&replayed, &[], 10);
        assert!(v.problems.iter().any(|p| p.contains("duplicate")), "an event the listing included: {:?}", v.problems);
    }
}
