//! Roles: the probes of issue 14 against the admin operations. Without the
//! admin token (derived from the cluster secret), membership changes,
//! client eviction, snapshots and forced RemoveAll are refused with
//! PERMISSION_DENIED — on the leader and on followers — and change nothing;
//! with it they work. Ordinary client operations need no token.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_client::{MasterClient, MasterClientConfig};
use mooncake_proto::ErrorCode;
use mooncake_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const T: Duration = Duration::from_secs(15);

fn denied<T: std::fmt::Debug>(what: &str, r: Result<T, mooncake_client::MasterError>) {
    let e = r.expect_err(what);
    assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{what}: {e}");
    assert!(e.to_string().contains("--admin-token-file"), "{what}: the message says what to do: {e}");
}

#[tokio::test]
async fn admin_operations_need_the_admin_token() {
    let cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    let (leader, term) = cluster.wait_for_leader(T).await;
    let before = cluster.info(leader).await.expect("info");
    let anyone = MasterClient::new(MasterClientConfig::new(cluster.addrs())).expect("client");
    let admin = cluster.client();

    // A registered client that an attacker would like to evict.
    anyone.remount_segments(77, vec![]).await.expect("an ordinary client registers without a token");

    denied("AddLearner", anyone.add_learner(9, "127.0.0.1:9").await);
    denied("ChangeMembership", anyone.change_membership(vec![leader], false).await);
    denied("RemoveLearner", anyone.remove_learner(9).await);
    denied("EvictClient", anyone.evict_client(77).await);
    denied("TriggerSnapshot", anyone.trigger_snapshot().await);
    denied("RemoveAll with force", anyone.remove_all(true).await);
    denied("ExportSnapshot", anyone.export_snapshot().await);
    // A wrong token is no token.
    let mut forged = MasterClientConfig::new(cluster.addrs());
    let other = tempfile::tempdir().expect("tmp");
    let (secret, _) = mooncake_auth::ClusterSecret::load(other.path(), None, true).expect("another secret");
    forged.admin_token = Some(mooncake_auth::admin::admin_token(&secret));
    let forged = MasterClient::new(forged).expect("client");
    denied("EvictClient with another cluster's token", forged.evict_client(77).await);
    // A follower refuses too (it does not forward an anonymous caller).
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("follower");
    let addr = cluster.addrs()[(follower - 1) as usize].clone();
    let at_follower = MasterClient::new(MasterClientConfig::new(vec![addr])).expect("client");
    denied("EvictClient at a follower", at_follower.evict_client(77).await);

    // Nothing changed.
    let after = cluster.info(leader).await.expect("info");
    assert_eq!((after.leader_id, after.term), (leader, term));
    assert_eq!(after.members.len(), before.members.len(), "no member added or removed");
    assert_eq!(after.client_count, before.client_count + 1, "client 77 is still registered");

    // Plain RemoveAll (leases and pins respected) is an ordinary client's.
    anyone.remove_all(false).await.expect("RemoveAll without force");
    // The admin may.
    admin.evict_client(77).await.expect("the admin evicts");
    admin.trigger_snapshot().await.expect("the admin snapshots");
    admin.remove_all(true).await.expect("the admin forces RemoveAll");
    assert_eq!(cluster.info(leader).await.expect("info").client_count, before.client_count);
}
