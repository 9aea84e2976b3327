//! Tenants (docs/TENANTS.md) with real processes: the same key in two
//! tenants is two objects, each tenant sees, lists, watches, removes and
//! `remove_all`s only its own; a client certificate bound to a tenant acts
//! in that tenant only (mutual TLS); bad names and NUL keys are refused.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use mooncake_client::{
    Client, ClientConfig, ClientError, MasterClient, MasterClientConfig, PutOptions, PutOutcome, WatchItem, Watcher,
};
use mooncake_proto::ErrorCode;
use mooncake_segment::tenant::Tenant;
use mooncake_testkit::Cluster;
use mooncake_tls::{Role, TlsFiles};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
const T: Duration = Duration::from_secs(30);

fn tenant(name: &str) -> Tenant {
    Tenant::parse(name).unwrap()
}

async fn client_in(cluster: &Cluster, name: &str) -> Client {
    let mut cfg = ClientConfig::new(cluster.addrs());
    cfg.tenant = tenant(name);
    Client::connect(cfg).await.expect("client")
}

fn master_in(cluster: &Cluster, name: &str) -> MasterClient {
    MasterClient::new(MasterClientConfig { tenant: tenant(name), ..MasterClientConfig::new(cluster.addrs()) })
        .expect("master client")
}

/// One master (KV leases of 1 ms: removes and evictions right after reads
/// are not refused) and one store node with a 64 MiB segment.
async fn one_store_cluster() -> Cluster {
    let cluster = Cluster::builder()
        .masters(1)
        .stores(1)
        .segment_size("64MiB")
        .arg("--default_kv_lease_ttl=1")
        .binary(BIN)
        .start();
    cluster.wait_for_segments(1, T).await;
    cluster
}

async fn listed(master: &MasterClient) -> Vec<String> {
    master.list_objects("", 1000).await.expect("list").into_iter().map(|o| o.key).collect()
}

/// Why: one cluster serves several models or teams; a tenant must never
/// read, overwrite, list or remove another's KV cache, however the keys
/// collide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_in_two_tenants_is_two_objects_and_each_tenant_sees_only_its_own() {
    let cluster = one_store_cluster().await;
    let (a, b, d) =
        (client_in(&cluster, "team-a").await, client_in(&cluster, "team-b").await, client_in(&cluster, "").await);
    let opts = PutOptions { replicas: 1, ..Default::default() };

    // A watcher of tenant a hears of a's keys only, as a knows them.
    let mut watcher = Watcher::new(Arc::new(master_in(&cluster, "team-a")), "", 0);
    match tokio::time::timeout(T, watcher.next()).await.unwrap().unwrap() {
        WatchItem::Progress { .. } => {}
        other => panic!("a fresh watch starts with its position: {other:?}"),
    }

    // Phase 1: the same key, three tenants, three objects.
    for (client, bytes) in [(&a, b"bytes of a".as_slice()), (&b, b"bytes of b, longer"), (&d, b"default's")] {
        assert_eq!(client.put("k", bytes, &opts).await.expect("put"), PutOutcome::Stored, "no tenant sees another's k");
    }
    a.put("only-a", b"a alone", &opts).await.unwrap();
    assert_eq!(a.get("k").await.unwrap(), b"bytes of a");
    assert_eq!(b.get("k").await.unwrap(), b"bytes of b, longer");
    assert_eq!(d.get("k").await.unwrap(), b"default's");
    assert_eq!(b.get_size("k").await.unwrap(), 18);
    assert!(matches!(b.get("only-a").await, Err(ClientError::NotFound(_))), "b cannot read a's key");
    assert!(!d.exists("only-a").await.unwrap());
    let batch: Vec<bool> = b.batch_exists(&["k", "only-a"]).await.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(batch, [true, false]);
    let got = a.get_batch(&["k", "only-a"]).await;
    assert_eq!(got[0].as_deref().unwrap(), b"bytes of a");
    assert_eq!(got[1].as_deref().unwrap(), b"a alone");
    // A put of an existing key keeps the tenant's own object only.
    assert_eq!(b.put("only-a", b"b's own", &opts).await.unwrap(), PutOutcome::Stored);

    // Phase 2: listings are per tenant, keys as the tenant knows them.
    let (ma, mb, md) = (master_in(&cluster, "team-a"), master_in(&cluster, "team-b"), master_in(&cluster, ""));
    assert_eq!(listed(&ma).await, ["k", "only-a"]);
    assert_eq!(listed(&mb).await, ["k", "only-a"]);
    assert_eq!(listed(&md).await, ["k"], "the default tenant lists none of the named tenants' keys");
    let page = ma.list_objects("only", 10).await.unwrap();
    assert_eq!(page.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["only-a"]);

    // Phase 3: removes reach the caller's tenant only.
    a.remove("k", false).await.expect("a removes its k");
    assert!(!a.exists("k").await.unwrap());
    assert_eq!(b.get("k").await.unwrap(), b"bytes of b, longer", "b's k survives a's remove");
    // That read leased b's k for the cluster's 1 ms KV lease: a RemoveAll
    // within it keeps k (as it must), so let the lease run out first (a
    // RemoveAll in the same millisecond removed 1 of 2, 1 run in 5).
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(b.remove_all(false).await.expect("b's remove_all"), 2);
    assert!(!b.exists("only-a").await.unwrap());
    assert_eq!(a.get("only-a").await.unwrap(), b"a alone", "a's objects survive b's remove_all");
    assert_eq!(d.get("k").await.unwrap(), b"default's");
    assert_eq!(listed(&mb).await, Vec::<String>::new());

    // The watcher of a saw a's three changes and nothing of b's or d's.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        if let WatchItem::Revision { events, .. } = tokio::time::timeout(T, watcher.next()).await.unwrap().unwrap() {
            seen.extend(events.into_iter().map(|e| e.key));
        }
    }
    assert_eq!(seen, ["k", "only-a", "k"]);

    // Phase 4: bad input changes nothing and says why.
    for client in [&a, &d] {
        let e = client.put("\0team-b\0k", b"x", &opts).await.unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::InvalidParams), "{e}");
        assert!(e.to_string().contains("NUL"), "{e}");
    }
    assert_eq!(listed(&mb).await, Vec::<String>::new(), "b is empty still");
    assert_eq!(d.get("k").await.unwrap(), b"default's");
    // A tenant name that cannot be one (a raw gRPC call: our clients
    // refuse it before sending).
    let mut req = tonic::Request::new(mooncake_proto::master::ExistKeyRequest { key: "k".into() });
    req.metadata_mut().insert(mooncake_segment::tenant::TENANT_HEADER, "no/slashes".parse().unwrap());
    let url = format!("http://{}", cluster.addrs()[0]);
    let mut raw = mooncake_proto::master::master_service_client::MasterServiceClient::connect(url).await.unwrap();
    let answer = raw.exist_key(req).await.unwrap().into_inner();
    let status = answer.status.unwrap();
    assert_eq!(status.error_code(), ErrorCode::InvalidParams);
    assert!(status.message.contains("use ASCII letters"), "{}", status.message);
}

/// Why: with security on, naming a tenant is not enough: a certificate
/// bound to a tenant must not reach another's objects by naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_bound_to_a_tenant_acts_in_that_tenant_only() {
    let cluster = Cluster::builder().masters(1).stores(1).segment_size("64MiB").binary(BIN).tls().start();
    cluster.wait_for_segments(1, T).await;
    let bound = |name: &str| TlsFiles::for_tenant(cluster.tls_dir(), name).load().expect("tenant certificate");
    let connect = async |tls, name: &str| {
        let mut cfg = ClientConfig::new(cluster.addrs());
        cfg.tls = Some(tls);
        cfg.tenant = tenant(name);
        Client::connect(cfg).await
    };
    let opts = PutOptions { replicas: 1, ..Default::default() };
    // team-a's certificate, naming no tenant, acts in team-a.
    let a = connect(bound("team-a"), "").await.expect("team-a client");
    a.put("k", b"a's", &opts).await.expect("put as team-a");
    let named = connect(bound("team-a"), "team-a").await.expect("naming its own tenant");
    assert_eq!(named.get("k").await.unwrap(), b"a's");
    // The shared client certificate is bound to no tenant: it names one.
    let gateway = connect(cluster.tls_config(Role::Client).unwrap(), "team-a").await.expect("gateway");
    assert_eq!(gateway.get("k").await.unwrap(), b"a's");
    // team-b's certificate naming team-a is refused, and changes nothing.
    let crossing = match connect(bound("team-b"), "team-a").await {
        Ok(c) => c.put("k", b"b's", &opts).await.map(|_| ()).unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(crossing.code(), Some(ErrorCode::PermissionDenied), "{crossing}");
    assert!(crossing.to_string().contains("bound to tenant \"team-b\""), "{crossing}");
    assert_eq!(a.get("k").await.unwrap(), b"a's");
    let b = connect(bound("team-b"), "").await.expect("team-b client");
    assert!(matches!(b.get("k").await, Err(ClientError::NotFound(_))), "team-b sees none of team-a's keys");
}

/// Why: one busy model must not take every byte; past its quota a tenant
/// gives up its own objects first, and is refused, with a code that says
/// so, only when none of its own can go. Other tenants' objects never go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_at_its_quota_evicts_only_its_own_objects_and_is_refused_when_none_can_go() {
    let cluster = one_store_cluster().await;
    let admin = cluster.client();
    const OBJECT: usize = 10 << 10;
    admin.set_tenant_quota("team-a", 4 * OBJECT as u64).await.expect("quota of team-a");
    admin.set_tenant_quota("team-c", 2 * OBJECT as u64).await.expect("quota of team-c");
    // Not an admin: refused.
    let e = master_in(&cluster, "team-a").set_tenant_quota("team-a", 1 << 40).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{e}");
    let (a, b, c) =
        (client_in(&cluster, "team-a").await, client_in(&cluster, "team-b").await, client_in(&cluster, "team-c").await);
    let opts = PutOptions { replicas: 1, ..Default::default() };
    let bytes = |i: u8| vec![i; OBJECT];
    for i in 0..3 {
        b.put(&format!("k{i}"), &bytes(100 + i), &opts).await.expect("team-b has no quota");
    }
    for i in 0..4 {
        assert_eq!(a.put(&format!("k{i}"), &bytes(i), &opts).await.unwrap(), PutOutcome::Stored);
    }
    // At the quota: the next put evicts team-a's oldest object, only it.
    assert_eq!(a.put("k4", &bytes(4), &opts).await.expect("a put past the quota"), PutOutcome::Stored);
    assert!(!a.exists("k0").await.unwrap(), "team-a's oldest object made room");
    for i in 1..5 {
        assert_eq!(a.get(&format!("k{i}")).await.unwrap(), bytes(i));
    }
    for i in 0..3 {
        assert_eq!(b.get(&format!("k{i}")).await.unwrap(), bytes(100 + i), "team-b's objects never go for team-a");
    }
    let tenants = admin.list_tenants().await.unwrap();
    let row = |name: &str| tenants.iter().find(|t| t.name == name).map(|t| (t.objects, t.used_bytes, t.quota_bytes));
    assert_eq!(row("team-a"), Some((4, 4 * OBJECT as u64, 4 * OBJECT as u64)));
    assert_eq!(row("team-b"), Some((3, 3 * OBJECT as u64, 0)));
    assert_eq!(row("team-c"), Some((0, 0, 2 * OBJECT as u64)), "a tenant with a quota and no object is listed");
    let metrics = cluster.metrics(1);
    let metric = |name: &str, tenant: &str| mooncake_testkit::sample_value(&metrics, name, &[("tenant", tenant)]);
    assert_eq!(metric("mooncake_tenant_used_bytes", "team-a"), Some(4.0 * OBJECT as f64));
    assert_eq!(metric("mooncake_tenant_objects", "team-b"), Some(3.0));
    assert_eq!(metric("mooncake_tenant_quota_bytes", "team-c"), Some(2.0 * OBJECT as f64));
    // Issue 38: a client that is not the admin lists its own tenant only.
    let own = master_in(&cluster, "team-b").list_tenants().await.expect("a tenant lists itself");
    let names: Vec<&str> = own.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["team-b"], "another tenant's name, usage or quota was shown");
    // A bad name is refused before anything is proposed (no log entry).
    let index = cluster.info(1).await.expect("info").last_log_index;
    let e = admin.set_tenant_quota("no spaces", 1).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidParams), "{e}");
    assert_eq!(cluster.info(1).await.expect("info").last_log_index, index, "the refusal was committed");

    // Hard-pinned objects never go: past its quota team-c is refused.
    let pinned = PutOptions { replicas: 1, pin: mooncake_client::Pin::Hard, ..Default::default() };
    c.put("h0", &bytes(0), &pinned).await.unwrap();
    c.put("h1", &bytes(1), &pinned).await.unwrap();
    let e = c.put("h2", &bytes(2), &opts).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::TenantQuotaExceeded), "{e}");
    assert!(e.to_string().contains("nothing of its own is left to evict"), "{e}");
    assert!(!c.exists("h2").await.unwrap() && c.exists("h0").await.unwrap() && c.exists("h1").await.unwrap());
    // An object larger than the whole quota is refused at once.
    let e = c.put("huge", &vec![7u8; 3 * OBJECT], &opts).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::TenantQuotaExceeded), "{e}");
    // Without its quota the tenant puts again.
    admin.set_tenant_quota("team-c", 0).await.unwrap();
    c.put("h2", &bytes(2), &opts).await.expect("no quota any more");

    // A client holding a writer chunk from before its tenant's quota: its
    // chunk puts evict nothing, so past the quota they are refused; the
    // tenant never goes past it.
    let d = client_in(&cluster, "team-d").await;
    d.put("c0", &bytes(0), &opts).await.expect("a small put, in a writer chunk");
    assert!(d.stats().puts_in_chunks.load(std::sync::atomic::Ordering::Relaxed) > 0, "the chunk path ran");
    admin.set_tenant_quota("team-d", 2 * OBJECT as u64).await.unwrap();
    d.put("c1", &bytes(1), &opts).await.expect("within the quota");
    let e = d.put("c2", &bytes(2), &opts).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::TenantQuotaExceeded), "{e}");
    let used = admin.list_tenants().await.unwrap().into_iter().find(|t| t.name == "team-d").map(|t| t.used_bytes);
    assert_eq!(used, Some(2 * OBJECT as u64));
}

/// Issue 38, finding 2: quotas did not bound. One batch of 8 hard-pinned
/// 1 MiB objects into a 1 MiB quota stored all 8 (each item was checked
/// alone against the applied usage), and the small puts of one batch
/// placed in a writer chunk all passed their check at once. Now the leader
/// counts the tenant's puts in flight at PutStart and the state machine
/// refuses any commit past the quota: the tenant ends at its quota, hard
/// pins included, and every other item is refused TENANT_QUOTA_EXCEEDED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_never_takes_a_tenant_past_its_quota_on_any_path() {
    let cluster = one_store_cluster().await;
    let admin = cluster.client();
    const MB: usize = 1 << 20;
    admin.set_tenant_quota("team-e", MB as u64).await.expect("quota");
    let e = client_in(&cluster, "team-e").await;
    let pinned = PutOptions { replicas: 1, pin: mooncake_client::Pin::Hard, ..Default::default() };
    let values: Vec<(String, Vec<u8>)> = (0..8u8).map(|i| (format!("k{i}"), vec![i; MB])).collect();
    let items: Vec<(&str, &[u8])> = values.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
    let results = e.put_batch(&items, &pinned).await;
    let stored = results.iter().filter(|r| matches!(r, Ok(PutOutcome::Stored))).count();
    assert_eq!(stored, 1, "{results:?}");
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(r.code(), Some(ErrorCode::TenantQuotaExceeded), "{r}");
    }
    assert_eq!(admin_used(&cluster, "team-e").await, Some(MB as u64));

    // Small puts in a writer chunk the client held before its tenant got a
    // quota: one batch of 6 into room for 2 more.
    const SMALL: usize = 10 << 10;
    let f = client_in(&cluster, "team-f").await;
    let opts = PutOptions { replicas: 1, ..Default::default() };
    f.put("c0", &vec![0u8; SMALL], &opts).await.expect("a small put, in a writer chunk");
    admin.set_tenant_quota("team-f", 3 * SMALL as u64).await.expect("quota");
    let values: Vec<(String, Vec<u8>)> = (1..7u8).map(|i| (format!("c{i}"), vec![i; SMALL])).collect();
    let items: Vec<(&str, &[u8])> = values.iter().map(|(k, v)| (k.as_str(), v.as_slice())).collect();
    let results = f.put_batch(&items, &opts).await;
    assert!(f.stats().puts_in_chunks.load(std::sync::atomic::Ordering::Relaxed) > 1, "the chunk path ran");
    let stored = results.iter().filter(|r| matches!(r, Ok(PutOutcome::Stored))).count();
    assert!(stored <= 2, "{stored} of 6 stored into room for 2: {results:?}");
    let used = admin_used(&cluster, "team-f").await;
    assert!(used.is_some_and(|u| u <= 3 * SMALL as u64), "team-f past its quota: {used:?}");
}

/// The bytes `name`'s objects take, as the admin lists tenants.
async fn admin_used(cluster: &Cluster, name: &str) -> Option<u64> {
    let tenants = cluster.client().list_tenants().await.expect("list tenants");
    tenants.into_iter().find(|t| t.name == name).map(|t| t.used_bytes)
}

/// The segments `master`'s tenant's objects have replicas on.
async fn segments_holding(master: &MasterClient) -> Vec<u64> {
    let objects = master.list_objects("", 1000).await.expect("list");
    objects.iter().flat_map(|o| o.replicas.iter().map(|r| r.segment_id)).collect()
}

/// Why: a UCX key reaches its whole segment (issue 38, finding 3), so a
/// segment served over UCX must hold one tenant's objects only: a store
/// node dedicated to a tenant (`--segment-tenant`, and by default any node
/// serving UCX) never receives another tenant's object, even one that asks
/// for it; other tenants' puts go elsewhere or are refused with a clear
/// code, never placed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_dedicated_to_a_tenant_never_holds_another_tenants_object() {
    let cluster = Cluster::builder().masters(1).stores(0).arg("--default_kv_lease_ttl=1").binary(BIN).start();
    let node_in = |size: u64, dedicated: Option<&str>| {
        let mut cfg = ClientConfig::new(cluster.addrs());
        cfg.global_segment_size = size;
        cfg.dedicated_tenant = dedicated.map(tenant);
        Client::connect(cfg)
    };
    let dedicated = node_in(64 << 20, Some("team-a")).await.expect("the dedicated node");
    cluster.wait_for_segments(1, T).await;
    let only = dedicated.local_segment().expect("a segment").spec().id;
    let (a, b) = (client_in(&cluster, "team-a").await, client_in(&cluster, "team-b").await);
    let asked =
        PutOptions { replicas: 1, preferred_segments: vec![mooncake_segment::SegmentId(only)], ..Default::default() };
    let value = vec![7u8; 256 << 10];
    // Nowhere to go: refused, saying why.
    let e = b.put("k0", &value, &asked).await.expect_err("no segment serves team-b");
    assert_eq!(e.code(), Some(ErrorCode::NoAvailableHandle), "{e}");
    assert!(e.to_string().contains("dedicated to another tenant"), "{e}");
    // A shared node (smaller: the dedicated one stays placement's first
    // choice by free bytes) takes every other tenant's objects.
    let _shared = node_in(16 << 20, None).await.expect("the shared node");
    cluster.wait_for_segments(2, T).await;
    for i in 0..8 {
        a.put(&format!("k{i}"), &value, &asked).await.expect("team-a put");
        b.put(&format!("k{i}"), &value, &asked).await.expect("team-b put");
    }
    let on_b = segments_holding(&master_in(&cluster, "team-b")).await;
    assert_eq!(on_b.len(), 8, "{on_b:?}");
    assert!(!on_b.contains(&only), "team-b's objects on team-a's segment: {on_b:?}");
    let on_a = segments_holding(&master_in(&cluster, "team-a")).await;
    assert!(on_a.len() == 8 && on_a.iter().all(|s| *s == only), "team-a's objects: {on_a:?}");
    assert_eq!(b.get("k3").await.expect("team-b reads its own"), value);
}
