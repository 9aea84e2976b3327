//! Tenants in the replicated state (docs/TENANTS.md): quotas set and
//! removed by `SetTenantQuota` (a bad name refused, nothing changed), and
//! each tenant's usage kept as its objects come and go, equal to what its
//! objects make after any mix of puts, upserts, removals and a snapshot
//! round trip; segments dedicated to one tenant (`MountTenantSegment`)
//! hold that tenant's objects only.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use mooncake_raft_store::{
    Command, MetaError, MetaState, NewObject, RemoveReason, Response, TenantUsage, VersionedKey, decode_image,
    encode_image,
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

/// Issue 38, finding 2: one batch of 8 hard-pinned 1 MiB puts into a 1 MiB
/// quota committed all 8 (each checked alone against the applied usage,
/// by the leader). `PutCommitInQuota` checks at apply, each commit of a
/// batch seeing the ones before it: the tenant ends at its quota, hard
/// pins included, and every refusal changes nothing. A retry of a commit
/// that was applied still answers its version; an upsert counts only what
/// it adds; a tenant without a quota and plain `PutCommit` are unbounded.
#[test]
fn commits_in_quota_never_take_a_tenant_past_it_even_in_one_batch() {
    const MB: u64 = 1 << 20;
    let mut s = three_node_cluster(64 << 20);
    ok(&mut s, Command::SetTenantQuota { tenant: "team-a".into(), bytes: MB });
    let arena = grant_pieces(&mut s, 1, 16 * MB, 4096, 1);
    let hard = |i: u64| NewObject {
        pin: mooncake_raft_store::Pin::Hard,
        ..new_object(W1, &stored("team-a", &format!("k{i}")), MB, &[(&arena, i * MB)])
    };
    let batch = Command::Batch((0..8).map(|i| Command::PutCommitInQuota(hard(i))).collect());
    let Response::Batch(answers) = apply(&mut s, batch) else { panic!("a batch answers a batch") };
    let committed = answers.iter().filter(|a| matches!(a, Response::Committed { .. })).count();
    assert_eq!(committed, 1, "{answers:?}");
    assert!(answers[1..].iter().all(|a| matches!(a, Response::Err(MetaError::QuotaExceeded(_)))), "{answers:?}");
    assert_eq!(usage(&s, "team-a"), (1, MB));
    // Refused, it changed nothing; a retry of the applied one answers it.
    let e = refused(&mut s, Command::PutCommitInQuota(hard(1)));
    assert!(e.to_string().contains("team-a") && e.to_string().contains("quota"), "{e}");
    assert!(matches!(apply(&mut s, Command::PutCommitInQuota(hard(0))), Response::Committed { .. }));
    // An upsert of the one object by one of the same size fits.
    let again = NewObject { upsert: true, ..new_object(W1, &stored("team-a", "k0"), MB, &[(&arena, 9 * MB)]) };
    assert!(matches!(apply(&mut s, Command::PutCommitInQuota(again)), Response::Committed { .. }));
    assert_eq!(usage(&s, "team-a").1, MB);
    // Other tenants, and plain PutCommit, are not bounded by it.
    let other = new_object(W1, &stored("team-b", "k"), 2 * MB, &[(&arena, 10 * MB)]);
    assert!(matches!(apply(&mut s, Command::PutCommitInQuota(other)), Response::Committed { .. }));
}

/// `MountTenantSegment` of `spec` by `client`, for `tenant`.
fn mount_for(client: mooncake_segment::ClientId, spec: mooncake_raft_store::SegmentSpec, tenant: &str) -> Command {
    let credential = credential_of(client);
    Command::MountTenantSegment { client, credential, segment: spec, tenant: tenant.into() }
}

#[test]
fn a_dedicated_segment_holds_its_tenants_objects_only_on_every_path() {
    use mooncake_raft_store::PlacedReplica;
    let mut s = MetaState::default();
    ok(&mut s, mount_for(NODE_A, segment(1, 1 << 20, "host-a"), "team-a"));
    mount(&mut s, NODE_B, segment(2, 1 << 20, "host-b"));
    assert_eq!(s.segment(mooncake_segment::SegmentId(1)).unwrap().tenant(), Some("team-a"));
    // A put of another tenant (the default one included) on it is refused,
    // whichever commit carries it, and changes nothing.
    let a = grant_pieces(&mut s, 1, 64 << 10, 4096, 1);
    for key in [stored("team-b", "k"), "k".to_string()] {
        let new = new_object(W1, &key, 4096, &[(&a, 0)]);
        for cmd in [Command::PutCommit(new.clone()), Command::PutCommitInQuota(new)] {
            let e = refused(&mut s, cmd);
            assert!(matches!(e, MetaError::PermissionDenied(_)) && e.to_string().contains("team-a"), "{e}");
        }
    }
    // Its own tenant's put commits; so does any tenant's on the shared segment.
    commit(&mut s, new_object(W1, &stored("team-a", "k"), 4096, &[(&a, 0)]));
    let b = grant_pieces(&mut s, 2, 64 << 10, 4096, 1);
    commit(&mut s, new_object(W1, &stored("team-b", "k"), 4096, &[(&b, 0)]));
    // A copy of another tenant's object onto it is refused too.
    let copy = PlacedReplica {
        segment: a.segment,
        arena: a.id,
        range: mooncake_segment::Range::new(a.extents[0].offset + 8192, 4096),
    };
    let version = s.object(&stored("team-b", "k")).unwrap().version;
    let e = refused(&mut s, Command::AddReplica { key: stored("team-b", "k"), version, replica: copy });
    assert!(matches!(e, MetaError::PermissionDenied(_)), "{e}");
    // The dedication cannot change under its objects: a plain mount, a
    // mount for another tenant or a remount without one are refused.
    let spec = segment(1, 1 << 20, "host-a");
    for cmd in [
        mount_cmd(NODE_A, spec.clone()),
        mount_for(NODE_A, spec.clone(), "team-b"),
        remount_cmd(NODE_A, vec![spec.clone()]),
    ] {
        let e = refused(&mut s, cmd);
        assert!(matches!(e, MetaError::SegmentAlreadyExists(_)) && e.to_string().contains("--segment-tenant"), "{e}");
    }
    // A retried mount with the same dedication is a retry; so is the remount.
    ok(&mut s, mount_for(NODE_A, spec.clone(), "team-a"));
    let remount = Command::RemountTenantSegments {
        client: NODE_A,
        credential: credential_of(NODE_A),
        segments: vec![spec.clone()],
        tenant: "team-a".into(),
    };
    ok(&mut s, remount);
    assert!(s.object(&stored("team-a", "k")).is_some(), "the remount kept the segment's objects");
    // A bad tenant name is refused before anything changes.
    let e = refused(&mut s, mount_for(NODE_C, segment(3, 1 << 20, "host-c"), "bad name"));
    assert!(is_invalid(&e), "{e}");
    // The dedication survives a snapshot (schema 3), counts in the state
    // hash, and ends with its segment.
    assert_eq!(s.image_schema(), 3);
    let back = decode_image(&encode_image(&s).unwrap()).unwrap();
    assert_eq!(back.segment(mooncake_segment::SegmentId(1)).unwrap().tenant(), Some("team-a"));
    assert_eq!(back.state_hash(), s.state_hash());
    s.check_invariants().unwrap();
    ok(&mut s, Command::UnmountSegment { client: NODE_A, credential: credential_of(NODE_A), segment: spec.id });
    assert_eq!(s.image_schema(), 1, "no segment is dedicated any more");
    mount(&mut s, NODE_A, spec);
}
