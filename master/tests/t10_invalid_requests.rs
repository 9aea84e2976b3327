//! Bad input gets a clear error and changes nothing: malformed or impossible
//! requests sent to a real one-node cluster answer INVALID_PARAMS with a
//! message, and the state-machine hash is unchanged; an impossible
//! configuration stops the binary with a message naming the bad value.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use mooncake_client::MasterClient;
use mooncake_proto::ErrorCode;
use mooncake_proto::master::master_service_client::MasterServiceClient;
use mooncake_proto::master::*;
use mooncake_testkit::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_mooncake-master");

fn seg(id: u64, size: u64, endpoint: &str) -> Segment {
    Segment { id, size, endpoint: endpoint.into(), host_id: "h1".into(), ..Default::default() }
}

/// A raw PutStart by a writer that never registered (a registered one's
/// puts must carry its credential, which these raw calls do not send).
fn put(key: &str, size: u64, replica_num: u32) -> PutStartRequest {
    PutStartRequest { client_id: 10, key: key.into(), size, replica_num, ..Default::default() }
}

async fn hash(client: &MasterClient, addr: &str) -> u64 {
    client.cluster_info_with_hash_of(addr).await.expect("cluster info").state_hash
}

fn code(s: &Option<mooncake_proto::Status>) -> ErrorCode {
    s.as_ref().map(|s| s.error_code()).unwrap_or(ErrorCode::Ok)
}

/// A one-master cluster with one segment mounted by client 9.
async fn one_master_with_a_segment() -> (Cluster, MasterClient, String) {
    let cluster = Cluster::builder().masters(1).master_bin(BIN).start();
    cluster.wait_for_leader(Duration::from_secs(10)).await;
    let client = cluster.client();
    let addr = cluster.addrs()[0].clone();
    client.mount_segment(9, seg(1, 1 << 20, "127.0.0.1:1")).await.expect("mount");
    (cluster, client, addr)
}

#[tokio::test]
async fn malformed_requests_are_refused_and_change_nothing() {
    let (_cluster, client, addr) = one_master_with_a_segment().await;
    let before = hash(&client, &addr).await;
    let mut raw = MasterServiceClient::connect(format!("http://{addr}")).await.expect("connect");

    let puts = [
        ("size 0", put("k", 0, 1)),
        ("replica_num 0", put("k", 10, 0)),
        ("replica_num 17", put("k", 10, 17)),
        ("empty key", put("", 10, 1)),
        ("4097-byte key", put(&"k".repeat(4097), 10, 1)),
        ("oversize", put("k", 2 << 20, 1)),
        // Sizes whose rounding to the allocation unit would wrap to 0.
        ("size 2^64-1", put("k", u64::MAX, 1)),
        ("size 2^64-64", put("k", u64::MAX - 63, 1)),
        ("size above any segment", put("k", (1 << 44) + 1, 1)),
        // An enum value this version does not know is refused, not read as a default.
        ("unknown pin", PutStartRequest { pin: 9, ..put("k", 10, 1) }),
        ("min_replicas above replica_num", PutStartRequest { min_replicas: 2, ..put("k", 10, 1) }),
    ];
    for (what, req) in puts {
        let r = raw.put_start(req).await.expect("rpc").into_inner();
        assert_eq!(code(&r.status), ErrorCode::InvalidParams, "{what}: {:?}", r.status);
        assert!(!r.status.as_ref().map(|s| s.message.clone()).unwrap_or_default().is_empty(), "{what}: no message");
        assert!(r.replicas.is_empty(), "{what}: got replicas");
    }
    let credential = client.credential().as_bytes().to_vec();
    let mount = |segment: Option<Segment>| MountSegmentRequest {
        client_id: 9,
        segment,
        credential: credential.clone(),
        tenant: String::new(),
    };
    let mounts = [
        ("segment missing", mount(None)),
        ("segment size 0", mount(Some(seg(2, 0, "127.0.0.1:1")))),
        ("no endpoint", mount(Some(seg(2, 1 << 20, "")))),
        // Every call that acts as a client id proves it is that client.
        ("no credential", MountSegmentRequest { credential: vec![], ..mount(Some(seg(2, 1 << 20, "127.0.0.1:1"))) }),
        ("short credential", MountSegmentRequest { credential: vec![1; 31], ..mount(Some(seg(2, 1 << 20, "h:1"))) }),
        // A forged mount must not point same-host clients at any file.
        (
            "shm_path outside the segment directory",
            mount(Some(Segment { shm_path: "/etc/passwd".into(), ..seg(3, 1 << 20, "127.0.0.1:1") })),
        ),
        (
            "shm_path escaping the segment directory",
            mount(Some(Segment { shm_path: "/dev/shm/../etc/shadow".into(), ..seg(3, 1 << 20, "127.0.0.1:1") })),
        ),
        // Another spelling of a store node's file would mount a second
        // segment over its memory (the one-region rule compares text).
        (
            "shm_path with a doubled slash",
            mount(Some(Segment { shm_path: "/dev/shm//mooncake-a".into(), ..seg(3, 1 << 20, "127.0.0.1:1") })),
        ),
        (
            "shm_path with a '.' component",
            mount(Some(Segment { shm_path: "/dev/shm/./mooncake-a".into(), ..seg(3, 1 << 20, "127.0.0.1:1") })),
        ),
        (
            "shm_path with a trailing slash",
            mount(Some(Segment { shm_path: "/dev/shm/mooncake-a/".into(), ..seg(3, 1 << 20, "127.0.0.1:1") })),
        ),
        ("unknown tier", mount(Some(Segment { tier: 7, ..seg(4, 1 << 20, "127.0.0.1:1") }))),
        (
            "a disk segment naming a shared-memory file",
            mount(Some(Segment {
                tier: Tier::Ssd as i32,
                shm_path: "/dev/shm/mooncake-0000000000000009-0000000000000005".into(),
                ..seg(5, 1 << 20, "127.0.0.1:1")
            })),
        ),
    ];
    for (what, req) in mounts {
        let r = raw.mount_segment(req).await.expect("rpc").into_inner();
        assert_eq!(code(&r.status), ErrorCode::InvalidParams, "{what}: {:?}", r.status);
        assert!(r.segment_keys.is_empty(), "{what}: a refused mount carries no key");
    }
    let r = raw.ping(PingRequest { client_id: 9, credential: vec![], fence_acks: vec![] }).await.unwrap().into_inner();
    assert_eq!(code(&r.status), ErrorCode::InvalidParams, "ping without a credential");
    let r = raw.remount_segment(RemountSegmentRequest { client_id: 9, ..Default::default() }).await.unwrap();
    assert_eq!(code(&r.into_inner().status), ErrorCode::InvalidParams, "remount without a credential");
    let r = raw.get_replica_list(GetReplicaListRequest { key: String::new(), client_id: 9 }).await.unwrap();
    assert_eq!(code(&r.into_inner().status), ErrorCode::InvalidParams, "get with empty key");
    let r = raw.remove(RemoveRequest { key: String::new(), force: false, request_id: 0 }).await.unwrap();
    assert_eq!(code(&r.into_inner().status), ErrorCode::InvalidParams, "remove with empty key");
    let r = raw.remove(RemoveRequest { key: "k".into(), force: true, request_id: 0 }).await.unwrap();
    assert_eq!(code(&r.into_inner().status), ErrorCode::PermissionDenied, "forced remove without the admin token");
    let too_many = BatchPutStartRequest { requests: vec![put("k", 10, 1); 1025] };
    let r = raw.batch_put_start(too_many).await.unwrap().into_inner();
    assert_eq!(code(&r.status), ErrorCode::InvalidParams, "oversized batch");

    // Unknown keys and segments get their own codes.
    let r = raw.get_replica_list(GetReplicaListRequest { key: "nope".into(), client_id: 9 }).await.unwrap();
    assert_eq!(code(&r.into_inner().status), ErrorCode::ObjectNotFound);
    // Unmount is idempotent, as Mooncake's: an unknown segment is OK, and nothing changes.
    let unmount = UnmountSegmentRequest { client_id: 9, segment_id: 12345, credential: credential.clone() };
    let r = raw.unmount_segment(unmount).await.unwrap();
    assert_eq!(code(&r.into_inner().status), ErrorCode::Ok);
    let r = raw.unmount_segment(UnmountSegmentRequest { client_id: 9, segment_id: 1, credential: vec![] }).await;
    assert_eq!(code(&r.unwrap().into_inner().status), ErrorCode::InvalidParams, "unmount without a credential");

    assert_eq!(hash(&client, &addr).await, before, "a refused request changed the state");
    assert_eq!(client.list_objects("", 10).await.expect("list").len(), 0);
}

/// Checks that `s` is INVALID_PARAMS with a message containing `needle`.
fn refused_naming(what: &str, s: &Option<mooncake_proto::Status>, needle: &str) {
    assert_eq!(code(s), ErrorCode::InvalidParams, "{what}: {s:?}");
    let message = s.as_ref().map(|s| s.message.as_str()).unwrap_or_default();
    assert!(message.contains(needle), "{what}: the message does not name {needle:?}: {message}");
}

/// An enum value this version does not know (a newer peer's tier or pin) is
/// refused wherever a request carries one, never read as a default (a tier
/// as DRAM, a pin as none) nor ignored (a PutEnd's echoed pin and replicas).
#[tokio::test]
async fn unknown_enum_values_are_refused_naming_the_field_and_the_value() {
    let (_cluster, client, addr) = one_master_with_a_segment().await;
    let mut raw = MasterServiceClient::connect(format!("http://{addr}")).await.expect("connect");
    // A put in flight: its PutEnd reaches the leader holding its reservation,
    // which reads neither the pin nor the replicas a PutEnd echoes.
    let started = raw.put_start(put("inflight", 10, 1)).await.expect("rpc").into_inner();
    assert_eq!(code(&started.status), ErrorCode::Ok, "{:?}", started.status);
    let end = PutEndRequest {
        client_id: 10,
        key: "inflight".into(),
        checksum: 1,
        size: 10,
        replicas: started.replicas.clone(),
        ..Default::default()
    };
    let before = hash(&client, &addr).await;

    // Puts: a pin past the last one, and a negative one (a corrupt varint).
    for pin in [9, -1] {
        let r = raw.put_start(PutStartRequest { pin, ..put("k", 10, 1) }).await.expect("rpc").into_inner();
        refused_naming("PutStart", &r.status, &format!("pin {pin}"));
        assert!(r.replicas.is_empty(), "a refused PutStart got replicas");
    }
    let batch = BatchPutStartRequest { requests: vec![PutStartRequest { pin: 9, ..put("b", 10, 1) }] };
    let r = raw.batch_put_start(batch).await.expect("rpc").into_inner();
    assert_eq!(code(&r.status), ErrorCode::Ok, "the batch is answered item by item");
    refused_naming("BatchPutStart item", &r.responses[0].status, "pin 9");

    // Segments: a mount, and a remount whose other segment is known.
    let credential = client.credential().as_bytes().to_vec();
    let unknown_tier = Segment { tier: 7, ..seg(6, 1 << 20, "127.0.0.1:1") };
    let mount = MountSegmentRequest {
        client_id: 9,
        segment: Some(unknown_tier.clone()),
        credential: credential.clone(),
        ..Default::default()
    };
    refused_naming("MountSegment", &raw.mount_segment(mount).await.expect("rpc").into_inner().status, "tier 7");
    let segments = vec![seg(1, 1 << 20, "127.0.0.1:1"), unknown_tier];
    let remount = RemountSegmentRequest { client_id: 9, segments, credential, ..Default::default() };
    refused_naming("RemountSegment", &raw.remount_segment(remount).await.expect("rpc").into_inner().status, "tier 7");

    // PutEnds of the put in flight, each echoing one unknown value.
    let bad_replica = |r: &Replica| Replica { tier: 7, ..r.clone() };
    let ends = [
        ("pin", PutEndRequest { pin: 9, ..end.clone() }, "pin 9"),
        (
            "replica tier",
            PutEndRequest { replicas: started.replicas.iter().map(bad_replica).collect(), ..end.clone() },
            "replicas[0]: tier 7",
        ),
    ];
    for (what, req, needle) in ends {
        refused_naming(what, &raw.put_end(req).await.expect("rpc").into_inner().status, needle);
    }
    let batch = BatchPutEndRequest { requests: vec![PutEndRequest { pin: 9, ..end.clone() }] };
    let r = raw.batch_put_end(batch).await.expect("rpc").into_inner();
    assert_eq!(code(&r.status), ErrorCode::Ok, "the batch is answered item by item");
    refused_naming("BatchPutEnd item", &r.responses[0].status, "pin 9");

    assert_eq!(hash(&client, &addr).await, before, "a refused request changed the state");
    // The refusals left the put as it was: its valid PutEnd still commits it.
    let r = raw.put_end(end).await.expect("rpc").into_inner();
    assert_eq!(code(&r.status), ErrorCode::Ok, "{:?}", r.status);
    let keys: Vec<String> = client.list_objects("", 10).await.expect("list").into_iter().map(|o| o.key).collect();
    assert_eq!(keys, ["inflight"]);
}

/// Sends `body` as the raw protobuf of a request to `method`: what a broken
/// or hostile peer can put on the wire.
async fn raw_call(addr: &str, method: &'static str, body: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
    grpc.unary(tonic::Request::new(body), path, RawBytes).await.map(|r| r.into_inner())
}

/// A codec that moves bytes verbatim.
#[derive(Clone, Copy, Default)]
struct RawBytes;

impl tonic::codec::Codec for RawBytes {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawBytes;
    type Decoder = RawBytes;
    fn encoder(&mut self) -> RawBytes {
        RawBytes
    }
    fn decoder(&mut self) -> RawBytes {
        RawBytes
    }
}

impl tonic::codec::Encoder for RawBytes {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawBytes {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

#[tokio::test]
async fn a_malformed_message_or_a_key_that_is_not_utf8_is_invalid_argument_not_internal() {
    let (_cluster, client, addr) = one_master_with_a_segment().await;
    let before = hash(&client, &addr).await;
    let cases: [(&str, &'static str, Vec<u8>); 4] = [
        // field 1 (key), length 2, bytes that are not UTF-8
        ("non-UTF-8 key", "/mooncake.master.MasterService/GetReplicaList", vec![0x0a, 0x02, 0xff, 0xfe]),
        ("non-UTF-8 key in a put", "/mooncake.master.MasterService/PutStart", vec![0x12, 0x02, 0xc3, 0x28]),
        // a length that runs past the end of the message
        ("truncated field", "/mooncake.master.MasterService/Remove", vec![0x0a, 0x10, b'k']),
        // a wire type that does not exist
        ("invalid wire type", "/mooncake.master.MasterService/MountSegment", vec![0x0f, 0x01]),
    ];
    for (what, method, body) in cases {
        let err = raw_call(&addr, method, body).await.expect_err(what);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}: {err:?}");
        assert!(err.message().contains("malformed message"), "{what}: {}", err.message());
    }
    // The same raw path with a valid encoding works: the test is not refusing everything.
    let ok_body = GetReplicaListRequest { key: "absent".into(), client_id: 9 };
    let reply =
        raw_call(&addr, "/mooncake.master.MasterService/GetReplicaList", prost::Message::encode_to_vec(&ok_body))
            .await
            .expect("a valid request is answered");
    let reply: GetReplicaListResponse = prost::Message::decode(reply.as_slice()).expect("decodes");
    assert_eq!(code(&reply.status), ErrorCode::ObjectNotFound);
    assert_eq!(hash(&client, &addr).await, before, "a malformed request changed the state");
}

#[test]
fn impossible_configuration_stops_the_binary_with_the_bad_value() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, needle) in [
        ("--eviction_ratio=1.5", "eviction_ratio 1.5"),
        ("--eviction_high_watermark_ratio=0", "eviction_high_watermark_ratio 0"),
        ("--client_ttl=0", "client_ttl"),
    ] {
        let out = std::process::Command::new(BIN)
            .args(["--id=1", "--initial-cluster=1=127.0.0.1:1", flag])
            .arg(format!("--data-dir={}", dir.path().display()))
            .output()
            .expect("run master");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(stderr.contains(needle), "{flag}: {stderr}");
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "a refused config created files");
}
