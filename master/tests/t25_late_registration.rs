//! A client that registers long after the leader was elected is alive from
//! its registration on: the leader must not expire it (unmounting its
//! segments and discarding its puts) before its first heartbeat arrives.
//! Found by `mooncake bench data`: the last of several new clients lost its
//! first put with OBJECT_NOT_FOUND at PutEnd.
//!
//! The test waits on the leader's own events, not on sleeps. Two canary
//! clients that fall silent half a TTL apart are expired by the leader's
//! client expiry duty, and their expiries (seen in ListClients) mark the
//! moments the test needs: the first, that the term is older than one TTL;
//! the second, that an expiry round ran after the late client registered,
//! while the late client was still within one TTL of its registration.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_client::MasterClient;
use mooncake_proto::master::{PutStartRequest, Segment};
use mooncake_testkit::{Cluster, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");

/// The masters' `--client_ttl`.
const TTL_SEC: u64 = 1;
const TTL_MS: u64 = TTL_SEC * 1_000;
/// The client under test: registers late, never pings.
const LATE: u64 = 7;
/// Canary whose expiry shows the term is older than one TTL.
const CANARY_TERM: u64 = 8;
/// Canary whose expiry shows an expiry round ran after `LATE` registered.
/// Its id is above `LATE`'s: one round proposes expiries in id order, so
/// once this canary is gone, an expiry of `LATE` in the same round is too.
const CANARY_ROUND: u64 = 9;
/// Longest wait for any one event: a few TTLs, for a loaded machine.
const WAIT: Duration = Duration::from_secs(10);

fn segment(id: u64) -> Segment {
    Segment { id, size: 1 << 20, endpoint: "127.0.0.1:1".into(), host_id: format!("h{id}"), ..Default::default() }
}

/// Milliseconds since the leader last heard from `id`; `None` once the
/// client is no longer registered (expired).
async fn silent_ms(client: &MasterClient, id: u64) -> Option<u64> {
    let clients = client.list_clients().await.expect("list clients");
    clients.into_iter().find(|c| c.id == id).map(|c| c.last_heartbeat_ms_ago)
}

#[tokio::test]
async fn a_client_registered_late_in_a_term_is_not_expired_before_its_first_ping() {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).arg(format!("--client_ttl={TTL_SEC}")).start();
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();

    // Phase 1: two canaries that fall silent half a TTL apart (on the
    // leader's clock), so their expiries come half a TTL apart.
    client.remount_segments(CANARY_TERM, vec![segment(2)]).await.expect("register the first canary");
    client.remount_segments(CANARY_ROUND, vec![segment(3)]).await.expect("register the second canary");
    wait_until("the first canary silent for half a TTL", WAIT, || async {
        (silent_ms(&client, CANARY_TERM).await? >= TTL_MS / 2).then_some(())
    })
    .await;
    assert!(client.ping(CANARY_ROUND).await.expect("ping the second canary"), "the second canary is registered");

    // Phase 2: once the first canary is expired, the term is older than the
    // TTL, so "not heard from since the election" would already count as
    // expired. Now the late client registers, before the second canary's
    // expiry.
    wait_until("the leader to expire the first canary", WAIT, || async {
        silent_ms(&client, CANARY_TERM).await.is_none().then_some(())
    })
    .await;
    client.remount_segments(LATE, vec![segment(1)]).await.expect("register");
    assert!(
        silent_ms(&client, CANARY_ROUND).await.is_some(),
        "the second canary must outlive the late registration (the test stalled for half a TTL?)"
    );

    // Phase 3: the second canary's expiry is an expiry round after the late
    // registration, about half a TTL into it; no Ping was sent for the late
    // client, which must still be registered and serve a put.
    wait_until("the leader to expire the second canary", WAIT, || async {
        silent_ms(&client, CANARY_ROUND).await.is_none().then_some(())
    })
    .await;
    let silent = silent_ms(&client, LATE).await.expect("the late client must still be registered");
    assert!(silent < TTL_MS, "the late client counts as heard from at its registration, {silent} ms ago");
    let req = PutStartRequest { client_id: LATE, key: "k".into(), size: 64, replica_num: 1, ..Default::default() };
    let replicas = client.put_start(req).await.expect("the client and its segment must still be registered");
    assert_eq!(replicas.len(), 1);
    client.put_end(LATE, "k", 0).await.expect("put end");
}
