//! Object events (`mooncake_raft_store::events`): replaying the events of a
//! log rebuilds exactly the objects the state holds (key, version, replica
//! segments) after every request, so a watcher that saw every event knows
//! what is stored where; every replica has an event for how it came and
//! went; the events are the same on every replica that applies the log;
//! a copy of the state (a snapshot's) records nothing.

mod common;

use std::collections::BTreeMap;

use common::*;

use mooncake_raft_store::events::{Cause, ObjectEvent};
use mooncake_raft_store::testing::apply_next;
use mooncake_raft_store::{Command, MetaState, ObjectVersion, Pin, Request};
use mooncake_segment::SegmentId;

type View = BTreeMap<String, (ObjectVersion, Vec<SegmentId>)>;

/// What a watcher knows after `events`.
fn replay(view: &mut View, events: &[ObjectEvent]) {
    for e in events {
        match e {
            ObjectEvent::Stored { key, version, replicas, .. } => {
                let prev = view.insert(key.clone(), (*version, replicas.iter().map(|r| r.segment).collect()));
                assert!(prev.is_none(), "{key} stored over a version nobody removed: {prev:?}");
            }
            ObjectEvent::Removed { key, version, .. } => {
                let prev = view.remove(key);
                assert_eq!(prev.map(|p| p.0), Some(*version), "{key}: removed a version the watcher did not hold");
            }
            ObjectEvent::Replicas { key, version, replicas, .. } => {
                let held = view.get_mut(key).unwrap_or_else(|| panic!("{key}: replicas of an unknown object"));
                assert_eq!(held.0, *version, "{key}: replicas of another version");
                held.1 = replicas.iter().map(|r| r.segment).collect();
            }
        }
    }
}

fn state_view(s: &MetaState) -> View {
    s.objects().map(|o| (o.key.clone(), (o.version, o.replicas.iter().map(|r| r.segment).collect()))).collect()
}

#[test]
fn replaying_the_events_rebuilds_the_objects_after_every_request() {
    for seed in 0..6u64 {
        let mut rng = Rng(seed);
        let mut s = MetaState::default();
        s.record_events(true);
        let mut view = View::new();
        let mut causes = std::collections::BTreeSet::new();
        let mut ts = 1_700_000_000_000u64;
        for i in 0..4_000 {
            ts += rng.below(20);
            let req = Request { ts_ms: ts, cmd: random_command(&mut rng, &s) };
            s.apply(&req);
            let events = s.take_events();
            for e in &events {
                causes.insert(match e {
                    ObjectEvent::Stored { .. } => "stored",
                    ObjectEvent::Removed { cause, .. } | ObjectEvent::Replicas { cause, .. } => cause.name(),
                });
            }
            replay(&mut view, &events);
            assert_eq!(view, state_view(&s), "seed {seed}, request {i}: {:?}", req.cmd);
        }
        assert!(causes.len() >= 6, "seed {seed}: only {causes:?} seen");
    }
}

#[test]
fn every_replica_derives_the_same_events_and_a_copy_records_nothing() {
    let mut rng = Rng(42);
    let mut a = MetaState::default();
    let mut b = MetaState::default();
    a.record_events(true);
    b.record_events(true);
    let mut all = Vec::new();
    for _ in 0..2_000 {
        let req = Request { ts_ms: 1, cmd: random_command(&mut rng, &a) };
        a.apply(&req);
        b.apply(&req);
        let (ea, eb) = (a.take_events(), b.take_events());
        assert_eq!(ea, eb);
        all.extend(ea);
    }
    assert!(all.len() > 500, "{} events", all.len());
    let mut copy = a.clone();
    apply_next(&mut copy, mount_cmd(NODE_A, segment(1, 1 << 20, "host-a")));
    apply_next(&mut copy, Command::ExpireClient { client: NODE_A });
    assert!(copy.take_events().is_empty(), "a copy of the state records nothing");
    let mut off = MetaState::default();
    apply_next(&mut off, Command::Noop);
    assert!(off.take_events().is_empty());
}

#[test]
fn a_removal_says_why() {
    let mut s = MetaState::default();
    s.record_events(true);
    apply_next(&mut s, mount_cmd(NODE_A, segment(1, 1 << 20, "host-a")));
    put_object(&mut s, W1, "k", 100, 1, Pin::None, false);
    let stored = s.take_events();
    let [ObjectEvent::Stored { key, replicas, .. }] = stored.as_slice() else { panic!("{stored:?}") };
    assert_eq!((key.as_str(), replicas[0].host.as_str()), ("k", "host-a"));
    let version = s.object("k").map(|o| o.version).expect("stored");
    apply_next(&mut s, Command::RemoveVersion { key: "k".into(), version });
    assert_eq!(s.take_events(), [ObjectEvent::Removed { key: "k".into(), version, cause: Cause::Remove }]);
    put_object(&mut s, W1, "k2", 100, 1, Pin::None, false);
    s.take_events();
    apply_next(&mut s, Command::ExpireClient { client: NODE_A });
    let gone = s.take_events();
    assert!(matches!(gone.as_slice(), [ObjectEvent::Removed { cause: Cause::Expiry, .. }]), "{gone:?}");
}
