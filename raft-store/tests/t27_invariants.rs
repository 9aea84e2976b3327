//! The state's invariants (`MetaState::check_invariants`) hold under every
//! command stream, and the checks on the apply path never change an
//! answer: random streams from the crate's generator
//! (`testing::random_command`, which emits every command variant: mounts
//! with good and bad credentials, remounts, client expiry, arenas, commits
//! and upserts, removals, tier commands, deduplicated retries and batches)
//! are applied with `try_apply` (which reports a broken invariant instead
//! of ending the process), and the whole state is scanned after every
//! entry. The scan is explicit here, so it also runs in release test
//! builds, where `apply` leaves it out.

mod common;

use common::*;
use mooncake_raft_store::{Command, MetaState, Request, Response, Tier};
use mooncake_segment::ClientId;

const UNIT: u64 = 4096;
/// Steps of one random run, and runs (seeds) per test.
const STEPS: u64 = 600;
const SEEDS: u64 = 24;

/// Four memory segments and a disk segment, mounted by the store nodes the
/// generator mounts them as (node `100 + id % 3`, on `host-{id % 3}`).
fn start() -> MetaState {
    let mut s = MetaState::default();
    for id in 1..=4 {
        mount(&mut s, ClientId(100 + id % 3), segment(id, 16 * UNIT, &format!("host-{}", id % 3)));
    }
    mount(&mut s, ClientId(100 + 7 % 3), segment(7, 8 * UNIT, "host-1").ssd());
    s
}

#[test]
fn random_streams_keep_every_invariant_and_the_checks_change_no_answer() {
    let mut answered = [0u64; 3]; // ok, refused, other
    for seed in 0..SEEDS {
        let mut rng = Rng(seed);
        let mut s = start();
        for step in 0..STEPS {
            let cmd = random_command(&mut rng, &s);
            let req = Request { ts_ms: s.now_ms() + 1 + rng.below(3), cmd };
            let mut unchecked = s.clone();
            let response = match s.try_apply(&req) {
                Ok(r) => r,
                Err(v) => panic!("seed {seed} step {step}: {v}\n{req:?}"),
            };
            if let Err(v) = s.check_invariants() {
                panic!("seed {seed} step {step}: {v}\n{req:?}");
            }
            assert_eq!(unchecked.apply(&req), response, "seed {seed} step {step}: apply and try_apply differ");
            assert_eq!(unchecked.state_hash(), s.state_hash(), "seed {seed} step {step}");
            answered[match response {
                Response::Ok => 0,
                Response::Err(_) => 1,
                _ => 2,
            }] += 1;
            assert_no_shared_bytes(&s);
        }
        let rebuilt = MetaState::from_image(s.to_image()).expect("rebuild");
        assert_eq!(rebuilt.check_invariants(), Ok(()), "seed {seed}: the rebuilt state");
    }
    // Guards the generator: the runs must reach both answers and effects.
    assert!(answered.iter().all(|n| *n > 500), "answers (ok, refused, other): {answered:?}");
}

#[test]
fn the_runs_reach_objects_in_arenas_retired_bytes_disk_copies_and_detached_disks() {
    // Guards the generator further: the scan is only as good as the states
    // it sees.
    let (mut committed, mut retired, mut fragmented, mut cut, mut on_disk, mut detached) = (0, 0, 0, 0, 0, 0);
    for seed in 0..SEEDS {
        let mut rng = Rng(seed);
        let mut s = start();
        for _ in 0..STEPS {
            let req = Request { ts_ms: s.now_ms() + 1, cmd: random_command(&mut rng, &s) };
            let (_, ran) = apply_traced(&mut s, &req);
            for (cmd, answer) in &ran {
                match (cmd, answer) {
                    (_, Response::Committed { .. }) => committed += 1,
                    (Command::ArenaCut { .. }, Response::Removed { count }) if *count > 0 => cut += 1,
                    _ => {}
                }
            }
            retired += u64::from(s.retired().next().is_some());
            fragmented += u64::from(s.arenas().any(|a| a.extents.len() > 1));
            let disk_copy = |r| s.replica_tier(r) == Some(Tier::Ssd);
            on_disk += u64::from(s.objects().any(|o| o.replicas.iter().any(disk_copy)));
            detached += u64::from(s.segments().any(|g| !g.is_attached()));
        }
    }
    // (The seeds are fixed: each count was several times its bound when
    // this was written.)
    assert!(committed > 1000 && retired > 2000, "{committed} commits; {retired} states with retired bytes");
    assert!(fragmented > 1000, "only {fragmented} states with an arena of several extents");
    assert!(cut > 200, "only {cut} arena cuts took effect");
    assert!(on_disk > 2000 && detached > 500, "{on_disk} states with disk copies; {detached} with a detached disk");
}
