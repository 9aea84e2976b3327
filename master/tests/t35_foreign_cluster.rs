//! A wrong address must not merge two clusters: when cluster B is told to
//! replicate to a master of cluster A, A refuses B's Raft messages (they
//! carry B's cluster id) and keeps serving its own cluster unharmed.

use std::time::Duration;

use mooncake_proto::admin::AddLearnerRequest;
use mooncake_proto::admin::admin_service_client::AdminServiceClient;
use mooncake_proto::master::PutStartRequest;
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const T: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_master_refuses_raft_messages_from_another_cluster() {
    let a = Cluster::builder().masters(1).master_bin(BIN).start();
    let b = Cluster::builder().masters(1).master_bin(BIN).start();
    let (_, term_a) = a.wait_for_leader(T).await;
    b.wait_for_leader(T).await;
    let before = a.info(1).await.expect("info of A");

    // B is (wrongly) told that A's master is its new learner.
    let a_addr = a.addrs()[0].clone();
    let mut admin = AdminServiceClient::connect(format!("http://{}", b.addrs()[0])).await.expect("admin of B");
    let mut req = tonic::Request::new(AddLearnerRequest { node_id: 2, addr: a_addr, blocking: false });
    let token = b.inner.admin_token().as_str().parse().expect("ascii token");
    req.metadata_mut().insert(mooncake_auth::admin::ADMIN_TOKEN_HEADER, token);
    let answer = admin.add_learner(req).await.expect("add learner rpc").into_inner();
    assert_eq!(answer.status.map(|s| s.code), Some(0), "B's admin added the learner");

    let log = a.inner.node(mooncake_testkit::Role::Master, 1).expect("master of A").log.clone();
    wait_until("A to refuse B's raft messages", T, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        // Refused for its MAC (each one-master cluster made its own secret)
        // or, were the secret shared, for its cluster id.
        text.contains("refused a raft").then_some(())
    })
    .await;

    // A is unharmed: same leader and term, same state, still taking writes.
    let after = a.info(1).await.expect("A still answers");
    assert_eq!(after.leader_id, 1);
    assert_eq!(after.term, term_a);
    assert_eq!(after.state_hash, before.state_hash);
    let req = PutStartRequest { client_id: 1, key: "still-mine".into(), size: 1, replica_num: 1, ..Default::default() };
    let err = a.client().put_start(req).await.expect_err("no segments: NO_AVAILABLE_HANDLE, not a dead master");
    assert_eq!(err.code(), Some(mooncake_proto::ErrorCode::NoAvailableHandle));
}
