//! Reads under the leader lease, against real masters: with every follower
//! acknowledging heartbeats the leader answers reads without a quorum round;
//! once a follower is gone its acknowledgements age out and every read takes
//! a quorum round again (still answered, never from the lease); when it is
//! back the lease returns. `--leader-lease-ms=0` turns lease reads off.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_client::MasterClient;
use mooncake_proto::master::{PutStartRequest, Segment};
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");
const LEASE_READS: &str = "mooncake_leader_lease_reads_total";
const QUORUM_ROUNDS: &str = "mooncake_read_barrier_batch_count";
const CLIENT: u64 = 7;

/// Registers a segment and stores `key` (metadata only; no bytes move).
async fn put_object(client: &MasterClient, key: &str) {
    let seg =
        Segment { id: 1, size: 1 << 20, endpoint: "127.0.0.1:1".into(), host_id: "h1".into(), ..Default::default() };
    client.remount_segments(CLIENT, vec![seg]).await.expect("register");
    let req = PutStartRequest { client_id: CLIENT, key: key.into(), size: 64, replica_num: 1, ..Default::default() };
    client.put_start(req).await.expect("put start");
    client.put_end(CLIENT, key, 0xfeed).await.expect("put end");
}

/// `n` reads of `key`, each of which must see the object.
async fn read_n(client: &MasterClient, key: &str, n: usize) {
    for _ in 0..n {
        let list = client.get_replica_list(CLIENT, key).await.expect("read");
        assert_eq!(list.checksum, 0xfeed, "read saw another object");
    }
}

#[tokio::test]
async fn reads_use_the_lease_only_while_every_needed_follower_acknowledges() {
    let mut cluster = Cluster::builder().masters(3).master_bin(BIN).start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    put_object(&client, "k").await;

    let before = cluster.metric(leader, LEASE_READS);
    read_n(&client, "k", 100).await;
    let leased = cluster.metric(leader, LEASE_READS) - before;
    assert!(leased >= 50.0, "only {leased} of 100 reads were served under the lease");

    // Without one of the two followers, no majority of the *other* voters
    // can acknowledge: once its last ack is older than the window, every
    // read needs a quorum round.
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    cluster.kill(follower);
    wait_until("reads to stop using the lease", Duration::from_secs(5), || async {
        let lease = cluster.metric(leader, LEASE_READS);
        read_n(&client, "k", 20).await;
        (cluster.metric(leader, LEASE_READS) == lease).then_some(())
    })
    .await;
    let (lease, rounds) = (cluster.metric(leader, LEASE_READS), cluster.metric(leader, QUORUM_ROUNDS));
    read_n(&client, "k", 50).await;
    assert_eq!(cluster.metric(leader, LEASE_READS), lease, "a read used the lease with a follower down");
    assert!(cluster.metric(leader, QUORUM_ROUNDS) > rounds, "reads were answered without any quorum round");

    cluster.restart(follower);
    wait_until("lease reads to resume", Duration::from_secs(10), || async {
        let lease = cluster.metric(leader, LEASE_READS);
        read_n(&client, "k", 10).await;
        (cluster.metric(leader, LEASE_READS) > lease).then_some(())
    })
    .await;
}

#[tokio::test]
async fn leader_lease_zero_sends_every_read_through_a_quorum_round() {
    let cluster = Cluster::builder().masters(3).master_bin(BIN).arg("--leader-lease-ms=0").start();
    let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    put_object(&client, "k").await;
    let rounds = cluster.metric(leader, QUORUM_ROUNDS);
    read_n(&client, "k", 30).await;
    assert_eq!(cluster.metric(leader, LEASE_READS), 0.0);
    assert!(cluster.metric(leader, QUORUM_ROUNDS) >= rounds + 30.0, "one quorum round per sequential read");
}
