//! Every transport passes the same conformance suite (`testing::run_all`):
//! TCP, shared memory, and the engine with each protocol choice.

mod common;

use common::{HOST_ID, Node};
use mooncake_transfer::testing::{self, SUITE_SEGMENT_MIN_BYTES};
use mooncake_transfer::{Protocol, ShmTransport, TcpConfig, TcpTransport, TransferEngine};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_transport_conforms() {
    let node = Node::anonymous(SUITE_SEGMENT_MIN_BYTES).await;
    let transport = TcpTransport::new(TcpConfig::default()).unwrap();
    let fixture = node.fixture(&transport);
    testing::run_all(&fixture).await;
    assert!(node.server.stats().written_bytes > 0, "bytes went through the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shm_transport_conforms() {
    let node = Node::shm("shm-conf", SUITE_SEGMENT_MIN_BYTES).await;
    let transport = ShmTransport::new();
    let fixture = node.fixture(&transport);
    testing::run_all(&fixture).await;
    assert_eq!(transport.mapped_count(), 1, "one mapping, reused");
    assert_eq!(node.server.stats().ops, 0, "no byte went through TCP");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_on_the_same_host_uses_shm_and_conforms() {
    let node = Node::shm("engine-auto", SUITE_SEGMENT_MIN_BYTES).await;
    let engine = TransferEngine::new(HOST_ID.to_owned(), Protocol::Auto, TcpConfig::default()).unwrap();
    let fixture = node.fixture(&engine);
    testing::run_all(&fixture).await;
    // Only the unknown segment (no shm file) fell back to TCP, and was refused.
    assert_eq!(node.server.stats().written_bytes, 0);
    assert_eq!(node.server.stats().read_bytes, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_with_tcp_rdma_or_another_host_uses_tcp_and_conforms() {
    for (host, protocol) in [(HOST_ID, Protocol::Tcp), (HOST_ID, Protocol::Rdma), ("other-host", Protocol::Auto)] {
        let node = Node::shm("engine-tcp", SUITE_SEGMENT_MIN_BYTES).await;
        let engine = TransferEngine::new(host.to_owned(), protocol, TcpConfig::default()).unwrap();
        let fixture = node.fixture(&engine);
        testing::run_all(&fixture).await;
        assert!(node.server.stats().written_bytes > 0, "{protocol} from {host} must go through TCP");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_falls_back_to_tcp_when_the_shm_file_is_gone() {
    let node = Node::anonymous(1 << 20).await;
    let engine = TransferEngine::new(HOST_ID.to_owned(), Protocol::Shm, TcpConfig::default()).unwrap();
    let vanished = "/dev/shm/mooncake-transfer-test-vanished".to_owned();
    let (mut writer, mut reader) = (node.writer(), node.reader());
    (writer.shm_path, reader.shm_path) = (vanished.clone(), vanished);
    let data = testing::pattern(3, 10_000);
    engine.write(&writer, 100, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    engine.read(&reader, 100, &mut back).await.unwrap();
    assert_eq!(back, data);
    assert_eq!(node.server.stats().written_bytes, data.len() as u64);
}
