//! Batches in the state machine: one answer per command in order, nested
//! batches and batches over the limit refused without effect.

mod common;

use common::*;

use mooncake_raft_store::state::ObjectStatus;
use mooncake_raft_store::{Command, MetaError, Request, Response};

// ================================================================ batch

#[test]
fn a_batch_answers_one_response_per_command_in_order_and_applies_each() {
    let mut s = three_node_cluster(1 << 20);
    let batch = Command::Batch(vec![
        put(W1, "a", 1000, 1),
        put_end(W1, "a", 5),
        Command::Remove { key: "ghost".into() },
        put(W1, "", 1, 1),
        Command::Noop,
        put(W1, "b", 1000, 2),
    ]);
    let Response::Batch(answers) = apply(&mut s, batch) else { panic!("not a batch answer") };
    assert_eq!(answers.len(), 6);
    assert!(matches!(answers[0], Response::Placed { .. }), "{:?}", answers[0]);
    assert_eq!(answers[1], Response::Ok);
    assert_eq!(answers[2], Response::Err(MetaError::ObjectNotFound("ghost".into())));
    assert!(answers[3].err().is_some_and(is_invalid), "{:?}", answers[3]);
    assert_eq!(answers[4], Response::Ok);
    assert!(matches!(&answers[5], Response::Placed { replicas, .. } if replicas.len() == 2));
    assert_eq!(s.object("a").unwrap().status, ObjectStatus::Complete, "later commands see earlier ones");
    assert_eq!(s.object("b").unwrap().status, ObjectStatus::Processing);
    // The same commands one by one reach the same state.
    let mut one_by_one = three_node_cluster(1 << 20);
    let ts = s.now_ms();
    for cmd in [put(W1, "a", 1000, 1), put_end(W1, "a", 5), put(W1, "b", 1000, 2)] {
        one_by_one.apply(&Request { ts_ms: ts, cmd });
    }
    assert_eq!(one_by_one.state_hash(), s.state_hash());
}

#[test]
fn a_nested_batch_is_refused_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let nested = Command::Batch(vec![put(W1, "a", 1000, 1), Command::Batch(vec![put(W1, "b", 1000, 1)])]);
    let e = refused(&mut s, nested);
    assert!(is_invalid(&e), "{e:?}");
    assert_eq!(s.object_count(), 0);
}

#[test]
fn a_batch_over_the_limit_is_refused_and_changes_nothing() {
    let mut s = three_node_cluster(1 << 20);
    let cmds: Vec<Command> = (0..=4096).map(|i| put(W1, &format!("k{i}"), 64, 1)).collect();
    let e = refused(&mut s, Command::Batch(cmds));
    assert!(is_invalid(&e), "{e:?}");
    let empty = apply(&mut s, Command::Batch(vec![]));
    assert_eq!(empty, Response::Batch(vec![]));
}
