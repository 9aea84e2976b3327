//! From the masters' object events (docs/EVENTS.md) to upstream's
//! per-medium events: a store is "stored" on each medium it has a replica
//! on; a removal is "removed" on each medium it was on; a replica change
//! stores the media it gained and removes those it lost. What each object
//! is on is tracked from the events themselves (a removal of a key never
//! seen stored — a bridge started mid-stream — is "removed" on "cpu").

use std::collections::{BTreeSet, HashMap};

use mooncake_proto::master::ObjectEvent;
use mooncake_proto::master::object_event::Kind;

use crate::format::{EventType, FeedEvent, Medium};

/// The media of every object seen stored and not removed yet.
#[derive(Debug, Default)]
pub struct Translator {
    media: HashMap<String, BTreeSet<Medium>>,
}

fn media_of(e: &ObjectEvent) -> BTreeSet<Medium> {
    e.replicas.iter().map(|r| Medium::of_tier(&r.tier)).collect()
}

fn feed(event_type: EventType, medium: Medium, key: &str) -> FeedEvent {
    FeedEvent { event_type, medium, object_key: key.to_string() }
}

impl Translator {
    /// Upstream's events for `e`, in order.
    pub fn translate(&mut self, e: &ObjectEvent) -> Vec<FeedEvent> {
        match Kind::try_from(e.kind) {
            Ok(Kind::Stored) => {
                let now = media_of(e);
                let out = now.iter().map(|m| feed(EventType::Stored, *m, &e.key)).collect();
                self.media.insert(e.key.clone(), now);
                out
            }
            Ok(Kind::Removed) => {
                let was = self.media.remove(&e.key).unwrap_or_else(|| BTreeSet::from([Medium::Cpu]));
                was.iter().map(|m| feed(EventType::Removed, *m, &e.key)).collect()
            }
            Ok(Kind::Replicas) | Err(_) => {
                let now = media_of(e);
                let was = self.media.insert(e.key.clone(), now.clone()).unwrap_or_default();
                let gained = now.difference(&was).map(|m| feed(EventType::Stored, *m, &e.key));
                let lost = was.difference(&now).map(|m| feed(EventType::Removed, *m, &e.key));
                gained.chain(lost).collect()
            }
        }
    }

    /// Objects tracked.
    pub fn len(&self) -> usize {
        self.media.len()
    }

    pub fn is_empty(&self) -> bool {
        self.media.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mooncake_proto::master::EventReplica;

    fn event(kind: Kind, key: &str, tiers: &[&str]) -> ObjectEvent {
        ObjectEvent {
            kind: kind.into(),
            key: key.into(),
            replicas: tiers
                .iter()
                .map(|t| EventReplica { segment_id: 1, tier: (*t).into(), host: "h".into(), zone: String::new() })
                .collect(),
            ..Default::default()
        }
    }

    fn short(events: Vec<FeedEvent>) -> Vec<(EventType, &'static str)> {
        events.into_iter().map(|e| (e.event_type, e.medium.name())).collect()
    }

    #[test]
    fn each_medium_is_stored_and_removed_once() {
        let mut t = Translator::default();
        let s = t.translate(&event(Kind::Stored, "k", &["memory", "memory"]));
        assert_eq!(short(s), [(EventType::Stored, "cpu")], "two memory replicas: one medium");
        let copied = t.translate(&event(Kind::Replicas, "k", &["memory", "disk"]));
        assert_eq!(short(copied), [(EventType::Stored, "disk")], "offloaded: stored on disk");
        let dropped = t.translate(&event(Kind::Replicas, "k", &["disk"]));
        assert_eq!(short(dropped), [(EventType::Removed, "cpu")], "evicted from memory");
        let gone = t.translate(&event(Kind::Removed, "k", &[]));
        assert_eq!(short(gone), [(EventType::Removed, "disk")]);
        assert!(t.is_empty());
        let unknown = t.translate(&event(Kind::Removed, "never-seen", &[]));
        assert_eq!(short(unknown), [(EventType::Removed, "cpu")]);
    }
}
