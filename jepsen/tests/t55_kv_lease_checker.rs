//! The KV lease checker on hand-made histories of the lease workload: what a
//! correct store produces passes; each way of breaking a lease — a Remove,
//! a silent free (RemoveAll, eviction), bytes reused under a reader — fails
//! with its own violation; answers that prove nothing never fail a run.

use mooncake_jepsen::{LeaseCheckConfig, LeaseOp, LeaseOutcome, LeaseRecord, LeaseViolation, check_kv_leases};

const MS: u64 = 1_000_000;
const CONFIG: LeaseCheckConfig = LeaseCheckConfig { ttl_ns: 2_000 * MS, margin_ns: 50 * MS };

fn rec(key: &str, op: LeaseOp, invoke_ms: u64, complete_ms: u64, outcome: LeaseOutcome) -> LeaseRecord {
    LeaseRecord { key: key.into(), op, invoke_ns: invoke_ms * MS, complete_ns: complete_ms * MS, outcome }
}

fn put(key: &str, value: u64, at_ms: u64) -> LeaseRecord {
    rec(key, LeaseOp::Put { value }, at_ms, at_ms + 2, LeaseOutcome::Stored)
}

/// A GetReplicaList that found the key, with a replica on the steady store node.
fn leased(key: &str, invoke_ms: u64, complete_ms: u64) -> LeaseRecord {
    rec(key, LeaseOp::ReplicaList, invoke_ms, complete_ms, LeaseOutcome::Found { on_steady_store: Some(true) })
}

fn missing(key: &str, invoke_ms: u64, complete_ms: u64) -> LeaseRecord {
    rec(key, LeaseOp::Exists, invoke_ms, complete_ms, LeaseOutcome::Missing)
}

fn remove(key: &str, invoke_ms: u64, complete_ms: u64, outcome: LeaseOutcome) -> LeaseRecord {
    rec(key, LeaseOp::Remove, invoke_ms, complete_ms, outcome)
}

fn copy(key: &str, lease_invoke_ms: u64, at_ms: u64, value: Option<u64>) -> LeaseRecord {
    let op = LeaseOp::Copy { lease_invoke_ns: lease_invoke_ms * MS };
    rec(key, op, at_ms, at_ms + 1, LeaseOutcome::Copied { value })
}

fn violations(records: &[LeaseRecord]) -> Vec<LeaseViolation> {
    let verdict = check_kv_leases(records, &CONFIG);
    for v in &verdict.violations {
        eprintln!("{v}");
    }
    verdict.violations
}

#[test]
fn a_store_that_keeps_its_leases_passes_and_is_counted() {
    // Why: what a correct store does — refuse removes inside a lease, remove
    // after it, keep the bytes for a late copy — must pass, and the counts
    // must show the workload did something.
    let records = vec![
        put("a", 1, 0),
        leased("a", 10, 12),
        rec("a", LeaseOp::Exists, 11, 13, LeaseOutcome::Found { on_steady_store: None }),
        remove("a", 11, 15, LeaseOutcome::HasLease),
        copy("a", 10, 900, Some(1)),
        remove("a", 2_100, 2_105, LeaseOutcome::Removed),
        missing("a", 2_110, 2_112),
        put("b", 2, 0),
        // A remove that won the race: the concurrent read found nothing.
        remove("b", 10, 14, LeaseOutcome::Removed),
        missing("b", 12, 16),
        rec("", LeaseOp::RemoveAll, 20, 30, LeaseOutcome::RemovedCount { count: 7 }),
    ];
    let verdict = check_kv_leases(&records, &CONFIG);
    assert!(verdict.is_valid(), "{:?}", verdict.violations);
    let c = verdict.counts;
    assert_eq!((c.keys_put, c.reads_found, c.reads_missing), (2, 2, 2));
    assert_eq!((c.removes_ok, c.removes_refused), (2, 1));
    assert_eq!((c.remove_alls, c.removed_by_remove_all), (1, 7));
    assert_eq!((c.copies_verified, c.copies_late, c.copies_failed), (1, 0, 0));
    assert_eq!(c.keys_unsteady, 0, "a was seen on the steady node; b was never found");
    assert!(c.to_string().contains("removes ok 2"), "{c}");
}

#[test]
fn a_remove_answered_inside_a_lease_is_caught() {
    // Why: the planted bug — a removal that checked leases, then committed
    // while a reader was leased the object — looks exactly like this.
    let found = violations(&[put("k", 1, 0), leased("k", 100, 104), remove("k", 99, 110, LeaseOutcome::Removed)]);
    assert!(
        matches!(&found[..], [LeaseViolation::RemovedInsideLease { key, read: 1, remove: 2, into_lease_us: 10_000 }] if key == "k"),
        "{found:?}"
    );
    assert!(found[0].to_string().starts_with("removed inside a KV lease"), "{}", found[0]);
}

#[test]
fn the_margin_is_in_the_systems_favour() {
    // Why: a remove right at the end of the lease may be fair (timing of a
    // loaded machine); only one clearly inside it is a violation.
    let at_edge = [put("k", 1, 0), leased("k", 0, 1), remove("k", 1_900, 1_960, LeaseOutcome::Removed)];
    assert!(violations(&at_edge).is_empty());
    let inside = [put("k", 1, 0), leased("k", 0, 1), remove("k", 1_900, 1_940, LeaseOutcome::Removed)];
    assert_eq!(violations(&inside).len(), 1);
    let after = [put("k", 1, 0), leased("k", 0, 1), remove("k", 2_000, 2_010, LeaseOutcome::Removed)];
    assert!(violations(&after).is_empty());
}

#[test]
fn a_key_freed_inside_a_lease_is_caught() {
    // Why: RemoveAll or eviction breaking a lease leaves no remove in the
    // history; the object just is not there for a later read.
    let found = violations(&[put("k", 1, 0), leased("k", 0, 5), missing("k", 600, 602)]);
    assert!(matches!(&found[..], [LeaseViolation::FreedInsideLease { read: 1, missing: 2, .. }]), "{found:?}");
    assert!(found[0].to_string().starts_with("freed inside a KV lease"), "{}", found[0]);
}

#[test]
fn absence_proves_nothing_when_it_may_not_follow_the_lease() {
    // Why: a read concurrent with the leased one may be ordered before it
    // (a remove won), one after the lease is fair, and a key never seen on
    // the never-faulted store node may have died with a killed one.
    let concurrent = [put("k", 1, 0), leased("k", 0, 10), missing("k", 5, 12)];
    assert!(violations(&concurrent).is_empty());
    let after_lease = [put("k", 1, 0), leased("k", 0, 10), missing("k", 1_990, 2_001)];
    assert!(violations(&after_lease).is_empty());
    let unsteady = LeaseOutcome::Found { on_steady_store: Some(false) };
    let only_on_faulted = [put("k", 1, 0), rec("k", LeaseOp::ReplicaList, 0, 5, unsteady), missing("k", 600, 602)];
    let verdict = check_kv_leases(&only_on_faulted, &CONFIG);
    assert!(verdict.is_valid());
    assert_eq!(verdict.counts.keys_unsteady, 1);
    let exists_only = [
        put("k", 1, 0),
        rec("k", LeaseOp::Exists, 0, 5, LeaseOutcome::Found { on_steady_store: None }),
        missing("k", 600, 602),
    ];
    assert!(violations(&exists_only).is_empty());
}

#[test]
fn bytes_copied_under_a_lease_must_be_the_objects() {
    // Why: a range freed and reused while a reader holds its lease shows up
    // as another put's bytes (or none) in a late copy.
    let reused = violations(&[put("k", 1, 0), leased("k", 0, 2), copy("k", 0, 900, Some(77))]);
    assert!(
        matches!(&reused[..], [LeaseViolation::BytesNotTheObjects { expected: Some(1), found: Some(77), .. }]),
        "{reused:?}"
    );
    assert!(reused[0].to_string().starts_with("bytes read were not the object's"), "{}", reused[0]);
    let garbage = violations(&[put("k", 1, 0), leased("k", 0, 2), copy("k", 0, 900, None)]);
    assert_eq!(garbage.len(), 1);
}

#[test]
fn copies_after_the_lease_or_without_bytes_prove_nothing() {
    // Why: once the lease may have run out the range may be reused fairly;
    // a copy no replica served (killed store node) read nothing.
    let late = [put("k", 1, 0), leased("k", 0, 2), copy("k", 0, 1_960, Some(77))];
    let verdict = check_kv_leases(&late, &CONFIG);
    assert!(verdict.is_valid());
    assert_eq!(verdict.counts.copies_late, 1);
    let failed = rec("k", LeaseOp::Copy { lease_invoke_ns: 0 }, 900, 901, LeaseOutcome::Other);
    let verdict = check_kv_leases(&[put("k", 1, 0), leased("k", 0, 2), failed], &CONFIG);
    assert!(verdict.is_valid());
    assert_eq!(verdict.counts.copies_failed, 1);
}

#[test]
fn unknown_outcomes_prove_nothing() {
    // Why: a timed-out remove may or may not have removed the object; a
    // timed-out read was granted no lease the client knows of.
    let records = [
        put("k", 1, 0),
        leased("k", 0, 2),
        remove("k", 10, 4_010, LeaseOutcome::Unknown),
        rec("j", LeaseOp::ReplicaList, 0, 4_000, LeaseOutcome::Unknown),
        remove("j", 10, 20, LeaseOutcome::Removed),
    ];
    let verdict = check_kv_leases(&records, &CONFIG);
    assert!(verdict.is_valid(), "{:?}", verdict.violations);
    assert_eq!(verdict.counts.unknown, 2);
}

#[test]
fn each_kind_is_reported_once_per_key_and_keys_apart() {
    // Why: one broken key must not flood the report, and two broken keys
    // are two violations.
    let records = [
        put("a", 1, 0),
        leased("a", 0, 2),
        leased("a", 3, 4),
        remove("a", 5, 9, LeaseOutcome::Removed),
        put("b", 2, 0),
        leased("b", 0, 2),
        remove("b", 5, 9, LeaseOutcome::Removed),
    ];
    let found = violations(&records);
    assert_eq!(found.len(), 2, "{found:?}");
}
