//! Calls that move bytes between the store and memory the caller owns (what
//! the Python bindings build on): gather puts, scatter gets, one buffer per
//! key of a batch, byte ranges, a buffer chosen once the size is known, and
//! batch existence. Each item's failure stays its own.

use std::time::Duration;

use mooncake_client::{Client, ClientConfig, ClientError, PutOptions, PutOutcome, checksum};
use mooncake_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_move_between_the_store_and_callers_buffers() {
    let cluster = Cluster::builder().masters(1).stores(2).segment_size("64MiB").binary(BIN).start();
    cluster.wait_for_segments(2, Duration::from_secs(20)).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let two = PutOptions { replicas: 2, ..Default::default() };

    // Phase 1: a gather put is stored as the concatenation, checksum and all.
    let (head, tail) = (bytes(3000, 1), bytes(2 << 20, 2));
    let whole = [head.as_slice(), tail.as_slice()].concat();
    let parts: [&[u8]; 3] = [&head, &[], &tail];
    assert_eq!(client.put_parts("c/gather", &parts, &two).await.expect("put_parts"), PutOutcome::Stored);
    assert_eq!(client.get("c/gather").await.expect("get"), whole);
    let listed = client.master().list_objects("c/gather", 1).await.expect("list");
    assert_eq!(listed[0].checksum, checksum::crc32c(&whole), "the combined checksum is the object's");

    // Phase 2: a scatter get fills the parts in order; too little room changes nothing.
    let (mut a, mut b, mut c) = (vec![0u8; 100], vec![0u8; 1 << 20], vec![0u8; 2 << 20]);
    let n = client.get_into_parts("c/gather", &mut [&mut a, &mut b, &mut c]).await.expect("scatter");
    assert_eq!(n, whole.len());
    let rest = whole.len() - a.len() - b.len();
    assert_eq!([&a[..], &b[..], &c[..rest]].concat(), whole);
    let mut small = vec![7u8; 10];
    let refused = client.get_into_parts("c/gather", &mut [&mut small]).await;
    assert!(matches!(refused, Err(ClientError::BufferTooSmall { .. })), "{refused:?}");
    assert_eq!(small, vec![7u8; 10]);

    // Phase 3: batches into the caller's buffers, a missing key and a small buffer among them.
    let items: Vec<(String, Vec<u8>)> = (0..6).map(|i| (format!("c/b/{i}"), bytes(4096 + i, i as u8))).collect();
    let gathered: Vec<[&[u8]; 2]> = items.iter().map(|(_, v)| [&v[..10], &v[10..]]).collect();
    let batch: Vec<(&str, &[&[u8]])> = items.iter().zip(&gathered).map(|((k, _), p)| (k.as_str(), &p[..])).collect();
    let stored = client.put_batch_parts(&batch, &PutOptions::default()).await;
    assert!(stored.iter().all(|r| matches!(r, Ok(PutOutcome::Stored))), "{stored:?}");
    let keys = ["c/b/0", "c/missing", "c/b/2", "c/b/3"];
    let mut bufs = [vec![0u8; 8192], vec![0u8; 10], vec![0u8; 8192], vec![0u8; 100]];
    let got = client.get_batch_into(&keys, bufs.iter_mut().map(|b| b.as_mut_slice()).collect()).await;
    assert_eq!(got[0].as_ref().ok(), Some(&4096));
    assert!(matches!(got[1], Err(ClientError::NotFound(_))));
    assert_eq!(got[2].as_ref().ok(), Some(&4098));
    assert!(matches!(got[3], Err(ClientError::BufferTooSmall { .. })));
    assert_eq!(&bufs[0][..4096], items[0].1.as_slice());
    assert_eq!(&bufs[2][..4098], items[2].1.as_slice());
    let (mut x, mut y, mut z) = (vec![0u8; 4000], vec![0u8; 200], vec![0u8; 8]);
    let mut per_key = vec![vec![&mut x[..], &mut y[..]], vec![&mut z[..]]];
    let got = client.get_batch_into_parts(&["c/b/4", "c/missing"], &mut per_key).await;
    assert_eq!(got[0].as_ref().ok(), Some(&4100));
    assert!(matches!(got[1], Err(ClientError::NotFound(_))));
    assert_eq!([&x[..], &y[..100]].concat(), items[4].1);

    // Phase 4: byte ranges; one past the end is refused alone.
    let (mut r1, mut r2, mut r3) = (vec![0u8; 16], vec![0u8; 5], vec![0u8; 8]);
    let mut ranges = vec![vec![(1000, &mut r1[..]), (4100, &mut r2[..])], vec![(0, &mut r3[..])]];
    let got = client.get_ranges_batch(&["c/b/5", "c/missing"], &mut ranges).await;
    assert_eq!(got[0][0].as_ref().ok(), Some(&16));
    assert!(matches!(got[0][1], Err(ClientError::RangeOutsideObject { size: 4101, .. })), "{:?}", got[0][1]);
    assert!(matches!(got[1][0], Err(ClientError::NotFound(_))));
    assert_eq!(r1, items[5].1[1000..1016]);

    // Phase 5: a buffer chosen once the size is known, and batch existence.
    let (buf, size) = client.get_with("c/b/1", |n| Ok(vec![0u8; n as usize + 3])).await.expect("get_with");
    assert_eq!((&buf[..size], buf.len()), (items[1].1.as_slice(), size + 3));
    let found = client.batch_exists(&["c/b/1", "c/missing", "c/gather"]).await;
    assert_eq!(found.into_iter().map(|r| r.expect("exists")).collect::<Vec<_>>(), [true, false, true]);
    client.close().await;
}
