//! The end-of-run checkers: no acknowledged put lost, and a converged quorum.

mod common;

use std::collections::BTreeMap;

use common::*;
use mooncake_jepsen::{NodeId, NodeReport, Violation, cluster_health, no_lost_acked_puts};

fn reads(pairs: &[(&str, Option<u64>)]) -> BTreeMap<String, Option<u64>> {
    pairs.iter().map(|(key, value)| (key.to_string(), *value)).collect()
}

#[test]
fn acked_puts_present_at_the_end_pass() {
    let h = history(vec![put_ok(1, "a", 1, 0, 10), put_ok(1, "b", 2, 0, 10), put_fail(2, "b", 3, 0, 10)]);
    let result = no_lost_acked_puts(&h, &reads(&[("a", Some(1)), ("b", Some(2))]));
    assert!(result.is_valid(), "{result}");
    assert_eq!(result.checked, 2);
}

#[test]
fn a_missing_acked_put_is_reported_with_key_expected_and_found() {
    let h = history(vec![put_ok(1, "a", 1, 0, 10)]);
    let result = no_lost_acked_puts(&h, &reads(&[("a", None)]));
    assert_eq!(result.violations, [Violation::LostPut { key: "a".into(), record_index: 0, expected: 1, found: None }]);
    let text = result.to_string();
    assert!(text.contains("key \"a\": acknowledged put(1) (record 0)"), "{text}");
    assert!(text.contains("found nothing"), "{text}");
}

#[test]
fn a_later_put_does_not_excuse_a_lost_one() {
    // Why: puts never overwrite, so value 2 can only be there if 1 was removed.
    let h = history(vec![put_ok(1, "a", 1, 0, 10), put_unknown(2, "a", 2, 20)]);
    let result = no_lost_acked_puts(&h, &reads(&[("a", Some(2))]));
    assert!(matches!(result.violations[..], [Violation::LostPut { expected: 1, found: Some(2), .. }]), "{result}");
}

#[test]
fn a_remove_that_may_follow_excuses_the_put() {
    for later_remove in [remove(2, "a", true, 20, 30), remove_unknown(2, "a", 5), remove(2, "a", false, 5, 30)] {
        let h = history(vec![put_ok(1, "a", 1, 10, 20), later_remove]);
        let result = no_lost_acked_puts(&h, &reads(&[("a", None)]));
        assert!(result.is_valid(), "{result}");
        assert_eq!(result.checked, 0);
    }
}

#[test]
fn a_remove_all_may_have_removed_a_key_after_it_but_not_one_put_later() {
    // Why: the lease workload's RemoveAll reaches the register keys; it
    // excuses an absence only for puts it may have followed.
    let h = history(vec![put_ok(1, "a", 1, 10, 20), remove_all(9, "a", 30, 40)]);
    assert!(no_lost_acked_puts(&h, &reads(&[("a", None)])).is_valid());
    let h = history(vec![remove_all(9, "a", 0, 5), put_ok(1, "a", 1, 10, 20)]);
    let result = no_lost_acked_puts(&h, &reads(&[("a", None)]));
    assert!(matches!(result.violations[..], [Violation::LostPut { expected: 1, .. }]), "{result}");
}

#[test]
fn a_remove_that_completed_before_the_put_does_not_excuse_it() {
    let h = history(vec![remove(2, "a", true, 0, 5), put_ok(1, "a", 1, 10, 20), put_ok(1, "a", 2, 0, 1)]);
    let result = no_lost_acked_puts(&h, &reads(&[("a", None)]));
    assert!(matches!(result.violations[..], [Violation::LostPut { expected: 1, .. }]), "{result}");
}

#[test]
fn unread_keys_and_unwritten_values_are_reported() {
    let h = history(vec![put_ok(1, "a", 1, 0, 10), put_ok(1, "b", 2, 0, 10), remove(1, "b", true, 20, 30)]);
    let result = no_lost_acked_puts(&h, &reads(&[("b", Some(7)), ("c", Some(8)), ("d", None)]));
    assert_eq!(
        result.violations,
        [
            Violation::MissingFinalRead { key: "a".into(), expected: vec![1] },
            Violation::FinalValueNeverWritten { key: "b".into(), found: 7 },
            Violation::FinalValueNeverWritten { key: "c".into(), found: 8 },
        ]
    );
}

#[test]
fn simulated_runs_lose_nothing() {
    // Why: the final state of a correct register holds every surviving acked put.
    for seed in seeds(0..50) {
        let h = simulate(seed, &SimConfig::default());
        let final_reads = final_state(&h);
        let result = no_lost_acked_puts(&h, &final_reads);
        assert!(result.is_valid(), "seed {seed}: {result}");
    }
}

/// A final read that agrees with every acked put not possibly removed: the
/// last value of each key in a sequential replay of completed ops is not
/// available, so read it back from the latest get or put per key.
fn final_state(h: &mooncake_jepsen::History) -> BTreeMap<String, Option<u64>> {
    let verdict = mooncake_jepsen::check_linearizable(h, &Default::default());
    assert!(verdict.valid, "{verdict}");
    let mut state = BTreeMap::new();
    for (key, ops) in h.by_key() {
        let survivors: Vec<u64> = ops
            .iter()
            .filter_map(|(_, r)| match (r.op, r.outcome) {
                (mooncake_jepsen::OpKind::Put { value }, mooncake_jepsen::Outcome::Ok) => Some(value),
                _ => None,
            })
            .filter(|value| !removed_after(&ops, *value))
            .collect();
        state.insert(key.to_string(), survivors.last().copied());
    }
    state
}

fn removed_after(ops: &mooncake_jepsen::KeyOps<'_>, value: u64) -> bool {
    let Some((_, put)) = ops.iter().find(|(_, r)| r.op == mooncake_jepsen::OpKind::Put { value }) else {
        return false;
    };
    ops.iter().any(|(_, r)| {
        r.op == mooncake_jepsen::OpKind::Remove
            && r.outcome != mooncake_jepsen::Outcome::Fail
            && r.effect_deadline_ns().is_none_or(|ns| ns >= put.invoke_ns)
    })
}

fn node(id: u64, leader: Option<u64>, commit_index: u64, applied_index: u64, hash: &str) -> NodeReport {
    NodeReport { id: NodeId(id), leader_id: leader.map(NodeId), commit_index, applied_index, state_hash: hash.into() }
}

#[test]
fn a_converged_quorum_is_healthy() {
    let nodes = [node(1, Some(2), 40, 40, "ab"), node(2, Some(2), 40, 40, "ab"), node(3, Some(2), 40, 40, "ab")];
    let result = cluster_health(&nodes);
    assert!(result.is_valid(), "{result}");
    assert_eq!(result.checked, 3);
}

#[test]
fn leader_problems_are_reported() {
    let split = [node(1, Some(1), 40, 40, "ab"), node(2, Some(2), 40, 40, "ab"), node(3, None, 40, 40, "ab")];
    let result = cluster_health(&split);
    assert!(result.violations.contains(&Violation::NoLeader { node: NodeId(3) }), "{result}");
    assert!(result.violations.iter().any(|v| matches!(v, Violation::LeaderDisagreement { .. })), "{result}");
    let absent = [node(1, Some(9), 40, 40, "ab"), node(2, Some(9), 40, 40, "ab")];
    let result = cluster_health(&absent);
    assert_eq!(result.violations, [Violation::LeaderNotReporting { leader: NodeId(9) }]);
    assert_eq!(cluster_health(&[]).violations, [Violation::NoReports]);
    let twice = [node(1, Some(1), 40, 40, "ab"), node(1, Some(1), 40, 40, "ab")];
    assert_eq!(cluster_health(&twice).violations, [Violation::DuplicateNode { node: NodeId(1) }]);
}

#[test]
fn diverged_indexes_and_state_are_reported() {
    let nodes = [node(1, Some(1), 40, 40, "ab"), node(2, Some(1), 41, 39, "cd")];
    let result = cluster_health(&nodes);
    let text = result.to_string();
    assert!(text.contains("commit indexes differ"), "{text}");
    assert!(text.contains("applied indexes differ"), "{text}");
    assert!(text.contains("node 2 applied_index 39 != commit_index 41"), "{text}");
    assert!(text.contains("state hashes differ"), "{text}");
    assert_eq!(result.violations.len(), 4, "{text}");
}
