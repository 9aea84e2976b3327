//! Histories a correct store can produce: each must check valid, in both
//! readings of a not-found remove.

mod common;

use common::*;

fn assert_valid(records: Vec<mooncake_jepsen::OpRecord>) {
    let lenient = check(records.clone());
    assert!(lenient.valid, "{lenient}");
    let strict = check_strict(records);
    assert!(strict.valid, "{strict}");
}

#[test]
fn sequential_life_of_a_key() {
    // Why: the plain case — every answer follows from the one before.
    assert_valid(vec![
        get(1, "k", None, 0, 10),
        put_ok(1, "k", 1, 20, 30),
        get(1, "k", Some(1), 40, 50),
        exists(1, "k", true, 60, 70),
        put_fail(1, "k", 2, 80, 90), // OBJECT_ALREADY_EXISTS
        remove(1, "k", true, 100, 110),
        get(1, "k", None, 120, 130),
        exists(1, "k", false, 140, 150),
        remove(1, "k", false, 160, 170),
        put_ok(1, "k", 3, 180, 190),
        get(1, "k", Some(3), 200, 210),
    ]);
}

#[test]
fn reads_overlapping_a_put_may_see_either_side() {
    // Why: a read concurrent with a put may linearize before or after it.
    assert_valid(vec![
        put_ok(1, "k", 1, 0, 100),
        get(2, "k", None, 10, 20),
        get(3, "k", Some(1), 30, 40),
        exists(4, "k", true, 50, 60),
        get(2, "k", Some(1), 90, 200),
    ]);
}

#[test]
fn concurrent_puts_one_wins() {
    // Why: two puts race for an absent key; the loser gets ALREADY_EXISTS.
    assert_valid(vec![put_ok(1, "k", 1, 0, 50), put_fail(2, "k", 2, 0, 50), get(3, "k", Some(1), 60, 70)]);
}

#[test]
fn overlapping_reads_in_either_order_around_a_write() {
    // Why: the order in which ops are listed must not matter, only their times.
    assert_valid(vec![get(3, "k", Some(1), 30, 40), get(2, "k", None, 5, 35), put_ok(1, "k", 1, 0, 100)]);
}

#[test]
fn unknown_put_that_took_effect() {
    // Why: a timed-out put may land, even long after the client gave up.
    assert_valid(vec![
        put_unknown(1, "k", 5, 0),
        get(2, "k", None, 10, 20),
        get(2, "k", Some(5), 1_000, 1_010),
        get(2, "k", Some(5), 2_000, 2_010),
    ]);
    assert_valid(vec![put_timed_out(1, "k", 5, 0, 50), get(2, "k", None, 100, 110), get(2, "k", Some(5), 200, 210)]);
}

#[test]
fn unknown_put_that_never_took_effect() {
    // Why: an unknown op may also never happen.
    assert_valid(vec![
        put_unknown(1, "k", 5, 0),
        get(2, "k", None, 10, 20),
        get(2, "k", None, 1_000, 1_010),
        put_ok(2, "k", 6, 1_100, 1_200),
        get(2, "k", Some(6), 1_300, 1_400),
    ]);
}

#[test]
fn unknown_put_can_land_on_a_present_key_without_effect() {
    // Why: a late unknown put on a present key fails quietly (ALREADY_EXISTS).
    assert_valid(vec![put_unknown(1, "k", 5, 0), put_ok(2, "k", 6, 10, 20), get(2, "k", Some(6), 30, 40)]);
}

#[test]
fn remove_races() {
    // Why: of two concurrent removes exactly one finds the key.
    assert_valid(vec![
        put_ok(1, "k", 1, 0, 10),
        remove(1, "k", true, 20, 40),
        remove(2, "k", false, 20, 40),
        get(3, "k", None, 50, 60),
    ]);
    // Why: a put racing a remove of the previous value.
    assert_valid(vec![
        put_ok(1, "k", 1, 0, 10),
        remove(2, "k", true, 20, 30),
        put_ok(3, "k", 2, 25, 40),
        get(1, "k", Some(2), 50, 60),
    ]);
    // Why: an unknown remove may land later than its reader saw the value.
    assert_valid(vec![
        put_ok(1, "k", 1, 0, 10),
        remove_unknown(2, "k", 20),
        get(3, "k", Some(1), 30, 40),
        get(3, "k", None, 50, 60),
        put_ok(3, "k", 2, 70, 80),
        get(3, "k", Some(2), 90, 100),
    ]);
}

#[test]
fn failed_and_unknown_reads_are_ignored() {
    // Why: they constrain nothing; the checker reports them as ignored.
    let verdict = check(vec![
        put_ok(1, "k", 1, 0, 10),
        record(2, "k", mooncake_jepsen::OpKind::Get, 20, None, mooncake_jepsen::Outcome::Unknown),
        record(2, "k", mooncake_jepsen::OpKind::Exists, 30, Some(40), mooncake_jepsen::Outcome::Fail),
        get(3, "k", Some(1), 50, 60),
    ]);
    assert!(verdict.valid, "{verdict}");
    assert_eq!((verdict.ops_checked, verdict.ops_ignored), (2, 2));
}

#[test]
fn keys_are_independent() {
    // Why: P-compositionality — each key is checked on its own.
    let verdict = check(vec![
        put_ok(1, "a", 1, 0, 10),
        put_ok(1, "b", 1, 0, 10),
        get(2, "a", Some(1), 20, 30),
        get(2, "b", Some(1), 20, 30),
        get(2, "c", None, 20, 30),
    ]);
    assert!(verdict.valid, "{verdict}");
    assert_eq!(verdict.keys_checked, 3);
}

#[test]
fn a_retried_remove_may_answer_not_found_after_removing() {
    // Why: docs/GUARANTEES.md — a retried Remove may answer OBJECT_NOT_FOUND
    // when its first attempt succeeded; the default reading allows it.
    let records = vec![put_ok(1, "k", 1, 0, 10), remove(2, "k", false, 20, 30), get(3, "k", None, 40, 50)];
    assert!(check(records.clone()).valid);
    let strict = check_strict(records);
    assert!(!strict.valid, "{strict}");
}
