//! A client that registers long after the leader was elected is alive from
//! its registration on: the leader must not expire it (unmounting its
//! segments and discarding its puts) before its first heartbeat arrives.
//! Found by `mooncake bench data`: the last of several new clients lost its
//! first put with OBJECT_NOT_FOUND at PutEnd.

use std::time::Duration;

use mooncake_proto::master::{PutStartRequest, Segment};
use mooncake_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");

#[tokio::test]
async fn a_client_registered_late_in_a_term_is_not_expired_before_its_first_ping() {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).arg("--client_ttl=1").start();
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    // Let the term grow older than the TTL, so "not heard from since the
    // election" would already count as expired.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let seg =
        Segment { id: 1, size: 1 << 20, endpoint: "127.0.0.1:1".into(), host_id: "h1".into(), ..Default::default() };
    client.remount_segments(7, vec![seg]).await.expect("register");
    // Several leader duty rounds (100 ms) pass, well within one TTL of the
    // registration, and no Ping is sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let req = PutStartRequest { client_id: 7, key: "k".into(), size: 64, replica_num: 1, ..Default::default() };
    let replicas = client.put_start(req).await.expect("the client and its segment must still be registered");
    assert_eq!(replicas.len(), 1);
    client.put_end(7, "k", 0).await.expect("put end");
}
