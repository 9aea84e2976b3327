//! Histories no correct store can produce: each must check invalid, with a
//! reason that names the op at fault and what the store should have said.

mod common;

use common::*;
use mooncake_jepsen::{LinearizabilityConfig, check_linearizable};

#[test]
fn stale_read_after_remove_and_put() {
    // Why: after remove(1) and put(2) completed, reading 1 is a stale read.
    let verdict = check(vec![
        put_ok(1, "k", 1, 0, 10),
        remove(1, "k", true, 20, 30),
        put_ok(1, "k", 2, 40, 50),
        get(2, "k", Some(1), 60, 70),
    ]);
    let reason = only_reason(&verdict);
    assert!(reason.contains("record 3 (get by process 2"), "{reason}");
    assert!(reason.contains("leaves the key value 2"), "{reason}");
    assert!(reason.contains("would have answered value 2"), "{reason}");
    assert_eq!(verdict.failures[0].key, "k");
}

#[test]
fn read_after_completed_remove() {
    // Why: a completed remove hides the value from every later read.
    let reason =
        only_reason(&check(vec![put_ok(1, "k", 1, 0, 10), remove(1, "k", true, 20, 30), get(2, "k", Some(1), 40, 50)]));
    assert!(reason.contains("record 2 (get"), "{reason}");
    assert!(reason.contains("leaves the key absent"), "{reason}");
    let reason =
        only_reason(&check(vec![put_ok(1, "k", 1, 0, 10), remove(1, "k", true, 20, 30), exists(2, "k", true, 40, 50)]));
    assert!(reason.contains("would have answered not found"), "{reason}");
}

#[test]
fn lost_write() {
    // Why: an acked put is followed, with no remove, by a read that misses it.
    let reason = only_reason(&check(vec![put_ok(1, "k", 1, 0, 10), get(2, "k", None, 20, 30)]));
    assert!(reason.contains("record 1 (get by process 2 [invoke_ns 20, complete_ns 30] -> not found)"), "{reason}");
    assert!(reason.contains("would have answered value 1"), "{reason}");
}

#[test]
fn read_of_a_value_never_written() {
    // Why: a value that no put wrote can only be corruption or a mixed-up key.
    let reason = only_reason(&check(vec![put_ok(1, "k", 1, 0, 10), get(2, "k", Some(99), 20, 30)]));
    assert!(reason.contains("returned value 99, which no put on key \"k\" wrote"), "{reason}");
}

#[test]
fn read_of_a_failed_put() {
    // Why: Fail means definitely not applied.
    let reason = only_reason(&check(vec![put_fail(1, "k", 1, 0, 10), get(2, "k", Some(1), 20, 30)]));
    assert!(reason.contains("which failed (not applied)"), "{reason}");
}

#[test]
fn read_from_the_future() {
    let reason = only_reason(&check(vec![get(2, "k", Some(1), 0, 10), put_ok(1, "k", 1, 20, 30)]));
    assert!(reason.contains("before record 1"), "{reason}");
}

#[test]
fn two_acked_puts_on_an_absent_key() {
    // Why: a put on a present key fails, so two acked puts need a remove between.
    let reason = only_reason(&check(vec![put_ok(1, "k", 1, 0, 10), put_ok(2, "k", 2, 20, 30)]));
    assert!(reason.contains("record 1 (put(2)"), "{reason}");
    assert!(reason.contains("OBJECT_ALREADY_EXISTS"), "{reason}");
    // Concurrent, too: whichever goes second must fail.
    let reason = only_reason(&check(vec![put_ok(1, "k", 1, 0, 10), put_ok(2, "k", 2, 5, 15)]));
    assert!(reason.contains("OBJECT_ALREADY_EXISTS"), "{reason}");
}

#[test]
fn remove_of_a_key_never_put() {
    let reason = only_reason(&check(vec![remove(1, "k", true, 0, 10)]));
    assert!(reason.contains("would have answered OBJECT_NOT_FOUND"), "{reason}");
}

#[test]
fn not_found_remove_of_a_present_key_when_removes_are_not_retried() {
    let records = vec![put_ok(1, "k", 1, 0, 10), remove(2, "k", false, 20, 30), get(3, "k", Some(1), 40, 50)];
    let reason = only_reason(&check_strict(records));
    assert!(reason.contains("record 1 (remove"), "{reason}");
    assert!(reason.contains("would have answered removed"), "{reason}");
}

#[test]
fn unknown_put_cannot_take_effect_before_it_was_invoked() {
    // Why: open-ended completion is not open-ended start.
    let reason = only_reason(&check(vec![get(1, "k", Some(5), 0, 10), put_unknown(2, "k", 5, 20)]));
    assert!(reason.contains("before record 1"), "{reason}");
}

#[test]
fn only_the_bad_key_fails() {
    let verdict = check(vec![
        put_ok(1, "good", 1, 0, 10),
        get(1, "good", Some(1), 20, 30),
        put_ok(1, "bad", 2, 0, 10),
        get(1, "bad", None, 20, 30),
    ]);
    assert_eq!(verdict.keys_checked, 2);
    let keys: Vec<&str> = verdict.failures.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(keys, ["bad"]);
    assert_eq!(verdict.failures[0].ops, 2);
    let report = verdict.to_string();
    assert!(report.starts_with("NOT linearizable"), "{report}");
}

#[test]
fn a_search_over_budget_is_unknown_not_valid() {
    // Why: many concurrent unknown puts explode the search; with a tiny
    // budget the key must come back unknown rather than valid or hung.
    let mut records: Vec<_> = (0..12).map(|value| put_unknown(value, "k", value, 0)).collect();
    records.push(get(99, "k", Some(3), 100, 110));
    records.push(remove(99, "k", true, 120, 130));
    records.push(get(99, "k", Some(7), 140, 150));
    let config = LinearizabilityConfig { max_states_per_key: 10, ..Default::default() };
    let verdict = check_linearizable(&history(records), &config);
    assert!(!verdict.valid, "{verdict}");
    assert!(verdict.failures.is_empty(), "{verdict}");
    assert_eq!(verdict.timed_out_keys.len(), 1, "{verdict}");
    assert!(verdict.to_string().contains("unknown (search budget exhausted"), "{verdict}");
}

#[test]
fn a_time_budget_also_stops_the_search() {
    // Why: the wall-clock limit is looked at every 1024 states; a zero limit
    // stops a search that needs more than that.
    let mut records: Vec<_> = (0..16).map(|value| put_unknown(value, "k", value, 0)).collect();
    records.push(get(99, "k", Some(3), 100, 110));
    records.push(remove(99, "k", true, 120, 130));
    records.push(get(99, "k", Some(7), 140, 150));
    let config = LinearizabilityConfig { max_duration_per_key: Some(std::time::Duration::ZERO), ..Default::default() };
    let verdict = check_linearizable(&history(records), &config);
    assert_eq!(verdict.timed_out_keys.len(), 1, "{verdict}");
    assert!(verdict.timed_out_keys[0].states_explored >= 1024, "{verdict}");
}
