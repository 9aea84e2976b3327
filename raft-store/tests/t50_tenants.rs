//! Tenants in the replicated state (docs/TENANTS.md): quotas set and
//! removed by `SetTenantQuota` (a bad name refused, nothing changed), and
//! each tenant's usage kept as its objects come and go, equal to what its
//! objects make after any mix of puts, upserts, removals and a snapshot
//! round trip.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use mooncake_raft_store::{
    Command, MetaState, RemoveReason, Response, TenantUsage, VersionedKey, decode_image, encode_image,
};
use mooncake_segment::tenant::Tenant;

fn stored(tenant: &str, key: &str) -> String {
    Tenant::parse(tenant).unwrap().scope(key)
}

/// Removes the object `key` (its current version), as `reason`.
fn remove(s: &mut MetaState, key: &str, reason: RemoveReason) {
    let version = s.object(key).unwrap().version;
    let removed = apply(s, Command::RemoveObjects { victims: vec![VersionedKey { key: key.into(), version }], reason });
    assert_eq!(removed, Response::Removed { count: 1 });
}

fn usage(s: &MetaState, tenant: &str) -> (u64, u64) {
    let u = s.tenant_usage(tenant);
    (u.objects, u.bytes)
}

#[test]
fn quotas_are_set_replaced_and_removed_and_a_bad_name_changes_nothing() {
    let mut s = MetaState::default();
    ok(&mut s, Command::SetTenantQuota { tenant: "team-a".into(), bytes: 1 << 20 });
    ok(&mut s, Command::SetTenantQuota { tenant: "team-b".into(), bytes: 4096 });
    ok(&mut s, Command::SetTenantQuota { tenant: "team-a".into(), bytes: 2 << 20 });
    assert_eq!(s.tenant_quota("team-a"), Some(2 << 20));
    assert_eq!(s.tenant_quotas().collect::<Vec<_>>(), [("team-a", 2 << 20), ("team-b", 4096)]);
    ok(&mut s, Command::SetTenantQuota { tenant: "team-b".into(), bytes: 0 });
    assert_eq!(s.tenant_quota("team-b"), None, "0 removes the quota");
    let e = refused(&mut s, Command::SetTenantQuota { tenant: "no spaces".into(), bytes: 1 });
    assert!(is_invalid(&e) && e.to_string().contains("use ASCII letters"), "{e}");
    // Quotas survive a snapshot (schema 2) and count in the state hash.
    let back = decode_image(&encode_image(&s).unwrap()).unwrap();
    assert_eq!(back.tenant_quota("team-a"), Some(2 << 20));
    assert_eq!(back.state_hash(), s.state_hash());
    ok(&mut s, Command::SetTenantQuota { tenant: "team-a".into(), bytes: 3 << 20 });
    assert_ne!(back.state_hash(), s.state_hash());
}

#[test]
fn each_tenants_usage_follows_its_objects_through_puts_upserts_removals_and_snapshots() {
    let mut s = three_node_cluster(64 << 20);
    put_complete(&mut s, W1, &stored("team-a", "k1"), 1000, 2);
    put_complete(&mut s, W1, &stored("team-a", "k2"), 3000, 1);
    put_complete(&mut s, W1, &stored("team-b", "k1"), 500, 1);
    put_complete(&mut s, W1, "k1", 700, 1);
    assert_eq!(usage(&s, "team-a"), (2, 4000), "each object once, at its size, whatever its replicas");
    assert_eq!(usage(&s, "team-b"), (1, 500));
    assert_eq!(usage(&s, "default"), (1, 700));
    assert_eq!(s.tenant_usage("nobody"), TenantUsage::default());

    // An upsert replaces the object: its old size leaves, the new one counts.
    mooncake_raft_store::testing::put_object(
        &mut s,
        W1,
        &stored("team-a", "k2"),
        5000,
        1,
        mooncake_raft_store::Pin::None,
        true,
    );
    assert_eq!(usage(&s, "team-a"), (2, 6000));
    // A removal takes the object out of its tenant only.
    remove(&mut s, &stored("team-a", "k1"), RemoveReason::RemoveAll);
    assert_eq!(usage(&s, "team-a"), (1, 5000));
    assert_eq!(usage(&s, "team-b"), (1, 500));
    // A tenant whose last object goes has no usage left.
    remove(&mut s, &stored("team-b", "k1"), RemoveReason::Evict);
    assert_eq!(s.tenant_usages().map(|(t, _)| t.to_string()).collect::<Vec<_>>(), ["default", "team-a"]);
    // A restored state derives the same usage from its objects.
    let back = decode_image(&encode_image(&s).unwrap()).unwrap();
    assert_eq!(back.tenant_usages().collect::<Vec<_>>(), s.tenant_usages().collect::<Vec<_>>());
    s.check_invariants().unwrap();
}
