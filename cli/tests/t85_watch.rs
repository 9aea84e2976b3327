//! Watch (docs/EVENTS.md): a watcher sees every change of its keys once, in
//! commit order, across a kill of the master it streams from; one too far
//! behind is told to resync and can, from a listing's revision; a master
//! serves at most `--max-watchers` streams and says so.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use mooncake_client::{
    Client, ClientConfig, MasterClient, MasterClientConfig, PutOptions, WatchError, WatchItem, Watcher,
};
use mooncake_proto::master::WatchRequest;
use mooncake_proto::master::master_service_client::MasterServiceClient;
use mooncake_proto::master::object_event::Kind;
use mooncake_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const T: Duration = Duration::from_secs(30);

/// One master with `arg` and one store node, and a client of it.
async fn one_master(arg: &str) -> (Cluster, Client) {
    let cluster = Cluster::builder().masters(1).stores(1).segment_size("64MiB").arg(arg).binary(BIN).start();
    cluster.wait_for_segments(1, T).await;
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    (cluster, client)
}

/// (revision, kind, key, version) of each event, until `n` were seen.
async fn collect(mut w: Watcher, n: usize) -> Vec<(u64, Kind, String, u64)> {
    let mut seen = Vec::new();
    while seen.len() < n {
        match tokio::time::timeout(T, w.next()).await.expect("an event within 30 s").expect("the watch goes on") {
            WatchItem::Revision { revision, events } => {
                for e in events {
                    seen.push((revision, Kind::try_from(e.kind).unwrap(), e.key, e.version));
                }
            }
            WatchItem::Progress { .. } => {}
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_every_change_once_in_order_across_a_kill_of_its_master() {
    // KV leases of 1 ms: a remove right after a put is not refused for the
    // lease the put's existence check took.
    let mut cluster = Cluster::builder()
        .masters(3)
        .stores(1)
        .segment_size("64MiB")
        .arg("--default_kv_lease_ttl=1")
        .binary(BIN)
        .start();
    let (leader, _) = cluster.wait_for_leader(T).await;
    cluster.wait_for_segments(1, T).await;
    // The watcher streams from the leader first: killing it ends both the
    // stream and the leadership.
    let addrs = cluster.addrs();
    let first = addrs[(leader - 1) as usize].clone();
    let mut order: Vec<String> = vec![first.clone()];
    order.extend(addrs.iter().filter(|a| **a != first).cloned());
    let master = Arc::new(MasterClient::new(MasterClientConfig::new(order)).unwrap());
    // The first item pins the start: changes from here on are all seen.
    let mut watcher = Watcher::new(master, "w/", 0);
    let start = match tokio::time::timeout(T, watcher.next()).await.unwrap().unwrap() {
        WatchItem::Progress { through } => through,
        other => panic!("a fresh watch starts with its position: {other:?}"),
    };
    let expected = 10 + 5 + 10 + 5;
    let seen = tokio::spawn(collect(watcher, expected));
    let client = Client::connect(ClientConfig::new(cluster.addrs())).await.expect("client");
    let opts = PutOptions { replicas: 1, ..Default::default() };
    let mut ops: Vec<(Kind, String)> = Vec::new();
    let mut step = async |put: bool, key: String| {
        if put {
            client.put(&key, key.as_bytes(), &opts).await.expect("put");
        } else {
            client.remove(&key, false).await.expect("remove");
        }
        client.put(&format!("other/{key}"), b"not watched", &opts).await.ok();
        ops.push((if put { Kind::Stored } else { Kind::Removed }, key));
    };
    for i in 0..10 {
        step(true, format!("w/{i}")).await;
    }
    for i in 0..5 {
        step(false, format!("w/{i}")).await;
    }
    cluster.kill(leader);
    for i in 10..20 {
        step(true, format!("w/{i}")).await;
    }
    for i in 5..10 {
        step(false, format!("w/{i}")).await;
    }
    let seen = seen.await.unwrap();
    let kinds: Vec<(Kind, String)> = seen.iter().map(|(_, k, key, _)| (*k, key.clone())).collect();
    assert_eq!(kinds, ops, "every change of w/ once, in order, and nothing else");
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "revisions rise: {seen:?}");
    assert!(seen[0].0 > start, "after the start");
    for (_, kind, key, version) in seen.iter().filter(|e| e.1 == Kind::Removed) {
        let stored = seen.iter().find(|e| e.1 == Kind::Stored && &e.2 == key).unwrap();
        assert_eq!((stored.3, *kind), (*version, Kind::Removed), "{key}: the removal names the stored version");
    }
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_too_far_behind_resyncs_from_a_listing() {
    let (cluster, client) = one_master("--watch-history-events=4").await;
    let opts = PutOptions { replicas: 1, ..Default::default() };
    for i in 0..10 {
        client.put(&format!("r/{i}"), b"v", &opts).await.expect("put");
    }
    let master = Arc::new(MasterClient::new(MasterClientConfig::new(cluster.addrs())).unwrap());
    let mut behind = Watcher::new(master.clone(), "r/", 1);
    let err = tokio::time::timeout(T, behind.next()).await.unwrap().expect_err("revision 1 is gone");
    let WatchError::Compacted { from, first_known } = err else { panic!("{err}") };
    assert!(from == 1 && first_known > 1, "{from} {first_known}");
    assert!(err.to_string().contains("list the keys"), "{err}");
    // Resync: the listing, then everything after its revision.
    let (listed, revision) = master.list_objects_at("r/", 100).await.unwrap();
    assert_eq!(listed.len(), 10);
    let again = Watcher::new(master, "r/", revision + 1);
    client.put("r/new", b"v", &opts).await.expect("put");
    let seen = collect(again, 1).await;
    assert_eq!((seen[0].1, seen[0].2.as_str()), (Kind::Stored, "r/new"), "the first change after the listing");
    assert!(seen[0].0 > revision);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_serves_at_most_max_watchers_streams() {
    let cluster = Cluster::builder().masters(1).arg("--max-watchers=1").binary(BIN).start();
    cluster.wait_for_leader(T).await;
    let addr = format!("http://{}", cluster.addrs()[0]);
    let mut rpc = MasterServiceClient::connect(addr).await.unwrap();
    let mut first = rpc.watch(WatchRequest::default()).await.unwrap().into_inner();
    let hello = first.message().await.unwrap().unwrap();
    assert_eq!(hello.status.unwrap().code, 0);
    let mut second = rpc.watch(WatchRequest::default()).await.unwrap().into_inner();
    let refused = second.message().await.unwrap().unwrap().status.unwrap();
    assert_ne!(refused.code, 0);
    assert!(refused.message.contains("--max-watchers"), "{}", refused.message);
    assert!(second.message().await.unwrap().is_none(), "the refused stream ends");
    drop(first);
    let opened = tokio::time::timeout(T, async {
        loop {
            let mut s = rpc.watch(WatchRequest::default()).await.unwrap().into_inner();
            if s.message().await.unwrap().unwrap().status.unwrap().code == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(opened.is_ok(), "the slot of a closed stream is given back");
}

/// `mooncake watch --json`, run beside puts and a removal, prints each
/// change once, in order, one JSON object a line, and says where to resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mooncake_watch_prints_each_change_once_in_order() {
    let (cluster, client) = one_master("--default_kv_lease_ttl=1").await;
    let master = MasterClient::new(MasterClientConfig::new(cluster.addrs())).unwrap();
    let (_, now) = master.list_objects_at("", 1).await.unwrap();
    let watch = std::process::Command::new(BIN)
        .args(["watch", "--json", "--count", "3", "--prefix", "cli/"])
        .args(["--masters", &cluster.addrs().join(","), "--from-revision", &(now + 1).to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let opts = PutOptions { replicas: 1, ..Default::default() };
    client.put("cli/a", b"aaaa", &opts).await.unwrap();
    client.put("other/x", b"not watched", &opts).await.unwrap();
    client.put("cli/b", b"bb", &opts).await.unwrap();
    client.remove("cli/a", false).await.unwrap();
    let out = tokio::task::spawn_blocking(move || watch.wait_with_output()).await.unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let seen: Vec<(&str, &str)> =
        lines.iter().map(|l| (l["kind"].as_str().unwrap(), l["key"].as_str().unwrap())).collect();
    assert_eq!(seen, [("stored", "cli/a"), ("stored", "cli/b"), ("removed", "cli/a")]);
    let revisions: Vec<u64> = lines.iter().map(|l| l["revision"].as_u64().unwrap()).collect();
    assert!(revisions.windows(2).all(|w| w[0] < w[1]) && revisions[0] > now, "{revisions:?}");
    assert_eq!((lines[0]["size"].as_u64(), lines[2]["cause"].as_str()), (Some(4), Some("remove")));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("resume with --from-revision {}", revisions[2] + 1)), "{stderr}");
    client.close().await;
}

/// A listing read a page at a time comes from one state (its first page's
/// revision), however the objects change between its pages; a fresh
/// listing sees the changes; a revision no longer kept is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_of_a_listing_are_read_at_its_first_pages_revision() {
    let (cluster, client) = one_master("--default_kv_lease_ttl=1").await;
    let opts = PutOptions { replicas: 1, ..Default::default() };
    for i in 0..10 {
        client.put(&format!("p/{i}"), b"v", &opts).await.unwrap();
    }
    let mut rpc = MasterServiceClient::connect(format!("http://{}", cluster.addrs()[0])).await.unwrap();
    let page = |start_after: &str, at_revision: u64| mooncake_proto::master::ListObjectsRequest {
        prefix: "p/".into(),
        limit: 4,
        start_after: start_after.into(),
        at_revision,
    };
    let first = rpc.list_objects(page("", 0)).await.unwrap().into_inner();
    assert!(first.more && first.objects.len() == 4, "{first:?}");
    // Between the pages: one new key inside the range still to read, one
    // listed key removed.
    client.put("p/5a", b"new", &opts).await.unwrap();
    client.remove("p/7", false).await.unwrap();
    let mut keys: Vec<String> = first.objects.iter().map(|o| o.key.clone()).collect();
    let mut more = first.more;
    while more {
        let next = rpc.list_objects(page(keys.last().unwrap(), first.revision)).await.unwrap().into_inner();
        assert_eq!((next.status.unwrap().code, next.revision), (0, first.revision));
        keys.extend(next.objects.iter().map(|o| o.key.clone()));
        more = next.more;
    }
    let original: Vec<String> = (0..10).map(|i| format!("p/{i}")).collect();
    assert_eq!(keys, original, "every page at the first page's revision");
    let (now, _) = client.master().list_all_at("p/", 3).await.unwrap();
    let now: Vec<&str> = now.iter().map(|o| o.key.as_str()).collect();
    assert!(now.contains(&"p/5a") && !now.contains(&"p/7") && now.len() == 10, "{now:?}");
    let gone = rpc.list_objects(page("p/3", first.revision + 1_000)).await.unwrap().into_inner();
    let refused = gone.status.unwrap();
    assert!(refused.code != 0 && refused.message.contains("list again"), "{}", refused.message);
    client.close().await;
}
