//! Mutual TLS with real processes (masters and a store node from the
//! `mooncake` binary, a PKI from `mooncake certs init`): a put/get round
//! trip over TLS through the library and the CLI; clients without a
//! certificate of the cluster's CA refused by the masters' gRPC port and
//! the store node's transfer port; the loopback rule (a reachable address
//! without TLS is refused, allowed with --insecure); a partial flag set refused.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, MasterClient, MasterClientConfig, MasterError, PutOptions};
use mooncake_testkit::{Cluster, free_port, wait_until};
use mooncake_tls::{Role, TlsConfig, TlsFiles};
use mooncake_transfer::testing::pattern;
use mooncake_transfer::{TcpConfig, TcpTransport, TransferError};

const BIN: &str = env!("CARGO_BIN_EXE_mooncake");
/// Bound on one waited-for event.
const WAIT: Duration = Duration::from_secs(30);

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("RUST_LOG", "warn").output().expect("run mooncake")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A master client that gives up after a short deadline (refusals are not retried for long).
fn impatient(addrs: Vec<String>, tls: Option<TlsConfig>) -> MasterClient {
    let cfg = MasterClientConfig { tls, deadline: Duration::from_secs(2), ..MasterClientConfig::new(addrs) };
    MasterClient::new(cfg).expect("master client")
}

/// A certificate the cluster never issued, from a CA of the attacker's own,
/// with the cluster's CA certificate (no secret) as its trust root.
fn stranger(cluster_pki: &Path, own: &Path) -> TlsConfig {
    mooncake_tls::generate(own, 1, &[]).expect("a foreign PKI");
    TlsFiles { ca: cluster_pki.join("ca.pem"), ..TlsFiles::in_dir(own, Role::Client) }.load().expect("stranger")
}

/// Why: TLS must change nothing a client sees, and a peer outside the
/// cluster's PKI must reach neither the metadata nor the bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_its_clients_and_refuses_everyone_else() {
    let cluster = Cluster::builder().masters(3).stores(1).segment_size("64MiB").binary(BIN).tls().start();
    cluster.wait_for_segments(1, WAIT).await;
    let pki = cluster.tls_dir().to_owned();

    // Phase 1: the client library with the client certificate: a 4 MiB put
    // and get, over TLS to the masters and to the store node.
    let mut cfg = ClientConfig::new(cluster.addrs());
    cfg.tls = cluster.tls_config(Role::Client);
    let client = Client::connect(cfg).await.expect("TLS client");
    let data = pattern(7, 4 << 20);
    client.put("tls/big", &data, &PutOptions::default()).await.expect("put over TLS");
    assert!(client.get("tls/big").await.expect("get over TLS") == data, "bytes differ over TLS");

    // Phase 2: the CLI, with the same three flags every command takes.
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("in"), dir.path().join("out"));
    std::fs::write(&src, pattern(8, 100_000)).unwrap();
    let masters = format!("--masters={}", cluster.addrs().join(","));
    let flags = TlsFiles::in_dir(&pki, Role::Client).to_args();
    let tls: Vec<&str> = flags.iter().map(String::as_str).collect();
    let put = run(&[&["put", "tls/cli", src.to_str().unwrap(), &masters][..], &tls].concat());
    assert!(put.status.success(), "mooncake put over TLS: {}", text(&put));
    let get = run(&[&["get", "tls/cli", dst.to_str().unwrap(), &masters][..], &tls].concat());
    assert!(get.status.success(), "mooncake get over TLS: {}", text(&get));
    assert_eq!(std::fs::read(&dst).unwrap(), std::fs::read(&src).unwrap());

    // Phase 3: the gRPC port refuses a client without a certificate (plain
    // HTTP/2) and one whose certificate another CA signed.
    let foreign = tempfile::tempdir().unwrap();
    let stranger = stranger(&pki, foreign.path());
    for (who, tls) in [("no certificate", None), ("another CA", Some(stranger.clone()))] {
        let err = impatient(cluster.addrs(), tls).list_objects("", 10).await.unwrap_err();
        assert!(matches!(err, MasterError::Unavailable { .. }), "{who}: {err}");
    }
    let ls = run(&["ls", &masters]);
    assert!(!ls.status.success(), "mooncake ls without TLS must fail: {}", text(&ls));

    // Phase 4: the transfer port refuses them too: neither reads nor
    // overwrites the object's bytes.
    let objects = client.master().list_objects("tls/big", 1).await.expect("list");
    let replica = objects[0].replicas[0].clone();
    let segment = mooncake_segment::SegmentId(replica.segment_id);
    for (who, tls) in [("no certificate", None), ("another CA", Some(stranger))] {
        let tcp = TcpTransport::new(TcpConfig { tls, request_timeout: Duration::from_secs(5), ..TcpConfig::default() })
            .expect("transport");
        let mut buf = vec![0u8; 4096];
        // No capability: without TLS that would be refused UNAUTHORIZED
        // (`Remote`); here the handshake refuses first.
        let err = tcp.read_from(&replica.endpoint, segment, None, replica.offset, &mut buf).await.unwrap_err();
        assert!(matches!(err, TransferError::PeerGone { .. } | TransferError::Tls { .. }), "{who} read: {err}");
        let err = tcp.write_to(&replica.endpoint, segment, None, replica.offset, &[0xEE; 4096]).await.unwrap_err();
        assert!(matches!(err, TransferError::PeerGone { .. } | TransferError::Tls { .. }), "{who} write: {err}");
    }
    assert!(client.get("tls/big").await.expect("get after the attempts") == data, "the refused writes changed bytes");
    client.close().await;
}

/// Starts `mooncake master` as a one-master cluster on `listen` with `extra` flags.
fn master(listen: &str, dir: &Path, extra: &[&str]) -> Child {
    let port = listen.rsplit(':').next().unwrap_or_default();
    Command::new(BIN)
        .args(["master", "--id=1", &format!("--listen={listen}"), &format!("--initial-cluster=1=127.0.0.1:{port}")])
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("master.log")).unwrap())
        .spawn()
        .expect("start master")
}

/// Waits for `child` to exit by itself; its status and log.
fn exited(mut child: Child, log: &Path) -> (std::process::ExitStatus, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, std::fs::read_to_string(log).unwrap_or_default());
        }
        if started.elapsed() > WAIT {
            let _ = child.kill();
            panic!("still running: {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why: plain TCP on a reachable address hands every API and every byte to
/// the network; it must be a decision (--insecure), never a default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reachable_address_without_tls_needs_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let any = format!("0.0.0.0:{port}");

    // Phase 1: refused at start, saying how to turn TLS on.
    let (status, log) = exited(master(&any, dir.path(), &[]), &dir.path().join("master.log"));
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.contains("--listen 0.0.0.0") && log.contains("mooncake certs init") && log.contains("--insecure"),
        "{log}"
    );
    let store = run(&["store", "--masters=127.0.0.1:1", "--listen=0.0.0.0:0", "--local-hostname=127.0.0.1"]);
    assert!(!store.status.success(), "{}", text(&store));
    assert!(text(&store).contains("not a loopback address"), "{}", text(&store));

    // Phase 2: --insecure starts it, with one warning.
    let mut child = master(&any, dir.path(), &["--insecure"]);
    let mc = impatient(vec![format!("127.0.0.1:{port}")], None);
    wait_until("the --insecure master to lead", WAIT, || async {
        (mc.cluster_info_of(&format!("127.0.0.1:{port}")).await.ok()?.leader_id == 1).then_some(())
    })
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.path().join("master.log")).unwrap();
    assert_eq!(log.matches("--insecure: serving plain TCP").count(), 1, "{log}");
}

/// Why: two of three flags is a typo, not a choice: silently running without
/// TLS (or failing later) would hide it.
#[test]
fn a_partial_tls_flag_set_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port().unwrap());
    let (status, log) = exited(master(&listen, dir.path(), &["--tls-cert=c.pem"]), &dir.path().join("master.log"));
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(log.contains("missing: --tls-key, --tls-ca"), "{log}");
    for args in [
        &["store", "--masters=127.0.0.1:1", "--tls-key=k.pem", "--tls-ca=ca.pem"][..],
        &["ls", "--masters=127.0.0.1:1", "--tls-ca=ca.pem"][..],
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("missing: --tls-cert"), "{args:?}: {}", text(&out));
    }
}

#[test]
fn certs_init_writes_a_pki_and_says_how_to_use_it() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let out = run(&["certs", "init", pki.to_str().unwrap(), "--masters", "2", "--host", "10.0.0.7"]);
    assert!(out.status.success(), "{}", text(&out));
    let summary = text(&out);
    for needle in ["ca.pem", "master-2.pem", "mooncake-admin", "10.0.0.7", "--tls-cert=", "MOONCAKE_TLS_CERT"] {
        assert!(summary.contains(needle), "{needle} missing from:\n{summary}");
    }
    assert_eq!(TlsFiles::in_dir(&pki, Role::Master { id: 2 }).load().unwrap().own_role(), Some(Role::Master { id: 2 }));
    // Never over a deployed PKI.
    let again = run(&["certs", "init", pki.to_str().unwrap()]);
    assert!(!again.status.success() && text(&again).contains("exists already"), "{}", text(&again));
}
