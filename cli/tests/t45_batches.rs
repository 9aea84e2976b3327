//! Batch puts and gets: one batch RPC per phase, one result per item, and an
//! item's failure (key exists, key missing) touches no other item.

use std::time::Duration;

use mooncake_client::{Client, ClientConfig, ClientError, PutOptions, PutOutcome};
use mooncake_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_items_succeed_and_fail_independently() {
    let cluster = Cluster::builder().masters(1).stores(2).segment_size("64MiB").binary(BIN).start();
    cluster.wait_for_segments(2, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    client.put("b/taken", b"first", &PutOptions::default()).await.expect("put");

    // Phase 1: 40 puts in one batch, one of them on a key that exists (as in
    // Mooncake, that put succeeds and keeps the existing object).
    let values: Vec<(String, Vec<u8>)> = (0..40).map(|i| (format!("b/{i}"), vec![i as u8; 4096 + i])).collect();
    let mut items: Vec<(&str, &[u8])> = values.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
    items.push(("b/taken", b"second"));
    let results = client.put_batch(&items, &PutOptions { replicas: 2, ..Default::default() }).await;
    assert_eq!(results.len(), 41);
    assert!(
        results[..40].iter().all(|r| matches!(r, Ok(PutOutcome::Stored))),
        "{:?}",
        results.iter().filter(|r| r.is_err()).collect::<Vec<_>>()
    );
    assert!(matches!(results[40], Ok(PutOutcome::KeptExisting)), "{:?}", results[40]);

    // Phase 2: one batch get, with a missing key in the middle.
    let mut keys: Vec<&str> = values.iter().map(|(k, _)| k.as_str()).collect();
    keys.insert(20, "b/missing");
    keys.push("b/taken");
    let got = client.get_batch(&keys).await;
    assert_eq!(got.len(), 42);
    assert!(matches!(got[20], Err(ClientError::NotFound(_))));
    for (i, (_, v)) in values.iter().enumerate() {
        let at = if i < 20 { i } else { i + 1 };
        assert_eq!(got[at].as_ref().expect("batch get"), v, "item {i}");
    }
    assert_eq!(got[41].as_ref().expect("the existing object is untouched"), b"first");
    let listed = client.master().list_objects("b/", 100).await.expect("list");
    assert_eq!(listed.len(), 41, "no half-written object is left behind");
    assert!(listed.iter().all(|o| o.status == 1), "every object is complete");
    client.close().await;
}
