//! Batches in the state machine: one answer per command in order (later
//! commands see earlier ones), nested batches and batches over the limit
//! refused without effect.

mod common;

use common::*;

use mooncake_raft_store::state::BATCH_MAX;
use mooncake_raft_store::{Command, MetaError, ObjectVersion, Request, Response};
use mooncake_segment::SegmentId;

// ================================================================ batch

#[test]
fn a_batch_answers_one_response_per_command_in_order_and_applies_each() {
    let mut s = three_node_cluster(1 << 20);
    let on_1 = grant_pieces(&mut s, 1, 1 << 16, 1 << 16, 1);
    let on_2 = grant_pieces(&mut s, 2, 1 << 16, 1 << 16, 1);
    let on_3 = grant_pieces(&mut s, 3, 1 << 16, 1 << 16, 1);
    let cmds = vec![
        Command::PutCommit(new_object(W1, "a", 1000, &[(&on_1, 0)])),
        // The key taken by the command before: later commands see earlier ones.
        Command::PutCommit(new_object(W1, "a", 1000, &[(&on_1, aligned(1000))])),
        Command::RemoveVersion { key: "ghost".into(), version: ObjectVersion(1) },
        Command::PutCommit(new_object(W1, "", 1000, &[(&on_1, 2 * aligned(1000))])),
        Command::Noop,
        Command::PutCommit(new_object(W1, "b", 1000, &[(&on_2, 0), (&on_3, 0)])),
        Command::ArenaReturn { arenas: vec![on_1.id] },
        // Its arena returned by the command before: nothing can commit there.
        Command::PutCommit(new_object(W1, "c", 1000, &[(&on_1, 3 * aligned(1000))])),
    ];
    let mut one_by_one = s.clone();
    let ts = s.now_ms() + 1;
    let Response::Batch(answers) = s.apply(&Request { ts_ms: ts, cmd: Command::Batch(cmds.clone()) }) else {
        panic!("not a batch answer")
    };
    assert_eq!(answers.len(), cmds.len());
    let Response::Committed { version: va } = answers[0] else { panic!("{:?}", answers[0]) };
    assert_eq!(answers[1], Response::Err(MetaError::ObjectAlreadyExists("a".into())));
    assert_eq!(answers[2], Response::Err(MetaError::ObjectNotFound("ghost".into())));
    assert!(answers[3].err().is_some_and(is_invalid), "{:?}", answers[3]);
    assert_eq!(answers[4], Response::Ok);
    let Response::Committed { version: vb } = answers[5] else { panic!("{:?}", answers[5]) };
    assert_eq!(answers[6], Response::Removed { count: 1 });
    assert!(matches!(answers[7], Response::Err(MetaError::PutExpired(_))), "{:?}", answers[7]);
    let a = s.object("a").expect("a committed");
    assert_eq!((a.version, a.replicas.len(), a.replicas[0].range.offset), (va, 1, on_1.extents[0].offset));
    let b = s.object("b").expect("b committed");
    assert_eq!(b.version, vb);
    assert_eq!(b.replicas.iter().map(|r| r.segment).collect::<Vec<_>>(), vec![SegmentId(2), SegmentId(3)]);
    assert!(s.object("c").is_none() && s.arena(on_1.id).is_none());
    assert_eq!(s.object_count(), 2);
    assert_no_shared_bytes(&s);
    // The same commands one by one answer the same and reach the same state.
    let singly: Vec<Response> = cmds.into_iter().map(|cmd| one_by_one.apply(&Request { ts_ms: ts, cmd })).collect();
    assert_eq!(singly, answers);
    assert_eq!(one_by_one.state_hash(), s.state_hash());
}

#[test]
fn a_nested_batch_is_refused_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let arena = grant_pieces(&mut s, 1, 1 << 16, 1 << 16, 1);
    let inner = Command::Batch(vec![Command::PutCommit(new_object(W1, "b", 1000, &[(&arena, aligned(1000))]))]);
    let nested = Command::Batch(vec![Command::PutCommit(new_object(W1, "a", 1000, &[(&arena, 0)])), inner]);
    let e = refused(&mut s, nested);
    assert!(is_invalid(&e), "{e:?}");
    assert_eq!(s.object_count(), 0);
}

#[test]
fn a_batch_over_the_limit_is_refused_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let arena = grant_pieces(&mut s, 1, 1 << 20, 1 << 20, 1);
    let put = |i: u64| Command::PutCommit(new_object(W1, &format!("k{i}"), 64, &[(&arena, i * aligned(64))]));
    // Each command would commit on its own: the limit alone refuses the batch.
    let at_limit: Vec<Command> = (0..BATCH_MAX as u64).map(put).collect();
    let mut control = s.clone();
    let Response::Batch(answers) = apply(&mut control, Command::Batch(at_limit)) else { panic!("not a batch answer") };
    assert!(answers.iter().all(|r| matches!(r, Response::Committed { .. })), "a batch at the limit applies");
    let over: Vec<Command> = (0..=BATCH_MAX as u64).map(put).collect();
    let e = refused(&mut s, Command::Batch(over));
    assert!(is_invalid(&e), "{e:?}");
    assert_eq!(s.object_count(), 0);
    let empty = apply(&mut s, Command::Batch(vec![]));
    assert_eq!(empty, Response::Batch(vec![]));
}
