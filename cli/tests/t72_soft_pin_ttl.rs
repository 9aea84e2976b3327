//! Soft pins with a TTL (upstream's `soft_pin_ttl_ms`): within its TTL a
//! soft-pinned object is evicted only after the unpinned ones; once the TTL
//! has passed (counted from when the object became readable, on the
//! replicated clock) it is evicted in its turn, oldest first, like any
//! other. Real master and store processes; eviction by a put that needs room.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, Pin, PutOptions, PutOutcome};
use mooncake_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const MIB: usize = 1 << 20;
const TTL: Duration = Duration::from_millis(2_000);
const KV_LEASE: Duration = Duration::from_millis(100);

async fn put(client: &Client, key: &str, len: usize, pin: Pin) {
    let opts = PutOptions { replicas: 1, pin, ..Default::default() };
    let stored = client.put(key, &vec![7u8; len], &opts).await;
    assert!(matches!(stored, Ok(PutOutcome::Stored)), "{key}: {stored:?}");
}

/// Which of `keys` still exist, from the master's object list: a listing
/// takes no KV lease and records no read, so it changes no eviction order
/// (an existence check or a get would lease the keys it names).
async fn present(client: &Client, keys: &[String]) -> Vec<String> {
    let listed = client.master().list_objects("", 10_000).await.expect("list objects");
    let names: std::collections::BTreeSet<&str> = listed.iter().map(|o| o.key.as_str()).collect();
    keys.iter().filter(|k| names.contains(k.as_str())).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_pin_protects_until_its_ttl_then_the_object_goes_in_its_turn() {
    let cluster = Cluster::builder()
        .masters(1)
        .stores(1)
        .segment_size("16MiB")
        .binary(BIN)
        .arg(format!("--default_kv_lease_ttl={}", KV_LEASE.as_millis()))
        .start();
    cluster.wait_for_segments(1, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    // 15 of the 16 MiB: the oldest 7 soft-pinned for TTL, the next 8 unpinned.
    let pinned: Vec<String> = (0..7).map(|i| format!("pinned/{i}")).collect();
    let plain: Vec<String> = (0..8).map(|i| format!("plain/{i}")).collect();
    for k in &pinned {
        put(&client, k, MIB, Pin::SoftFor { ttl_ms: TTL.as_millis() as u64 }).await;
    }
    let pinned_at = Instant::now();
    for k in &plain {
        put(&client, k, MIB, Pin::None).await;
    }
    // A KV lease (a writer's, a new leader's) keeps an object from eviction
    // whatever its pin: let every lease on the objects end.
    tokio::time::sleep(KV_LEASE * 3).await;
    // Room for 2 MiB: unpinned objects go, though the pinned are older.
    put(&client, "big", 2 * MIB, Pin::None).await;
    assert!(pinned_at.elapsed() < TTL, "the test ran too slowly to see the pin at work");
    assert_eq!(present(&client, &pinned).await, pinned, "a soft-pinned object went within its TTL");
    let plain_left = present(&client, &plain).await;
    assert!(plain_left.len() < plain.len(), "nothing unpinned was evicted: {plain_left:?}");
    // Past the TTL the pinned objects are ordinary and the oldest: as more
    // puts need room, they go before the newer unpinned ones.
    tokio::time::sleep(TTL.saturating_sub(pinned_at.elapsed())).await;
    for i in 0..16 {
        put(&client, &format!("more/{i}"), MIB, Pin::None).await;
        assert_eq!(present(&client, &plain_left).await, plain_left, "newer unpinned objects went before lapsed pins");
        if present(&client, &pinned).await.len() < pinned.len() {
            client.close().await;
            return;
        }
    }
    panic!("16 more puts of 1 MiB and the lapsed soft pins still protect their objects");
}
