//! Real tests of the host and fault primitives: network namespaces and nft
//! partitions ([`Network`]), process faults, power loss on a loop-mounted XFS
//! ([`LoopFs`]) and clock skew ([`FakeClock`]).
//!
//! They need root and the tools of `safety::check_tools` (iproute2, nftables,
//! xfsprogs, mount); without them each test prints why and passes as skipped,
//! except where `MOONCAKE_CHAOS_REQUIRED` is set (CI), where it fails.
//! Every probe runs in a thread that entered a host namespace: nothing is
//! ever sent from the root namespace to the harness subnet.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mooncake_jepsen::clock::FakeClock;
use mooncake_jepsen::host::{self, HostError};
use mooncake_jepsen::net::{self, Network};
use mooncake_jepsen::power::{DEFAULT_IMAGE_BYTES, LoopFs};
use mooncake_jepsen::{faults, safety};

const ECHO_PORT: u16 = 7000;
const UDP_PORT: u16 = 7001;
/// A dropped SYN makes connect wait for this long before the probe says "unreachable".
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Expected-success probes retry, as ARP may need a moment after a heal.
const OK_ATTEMPTS: usize = 3;
/// The signal number `ExitStatus::signal` reports for `kill -9`.
const SIGKILL: i32 = 9;

fn skip_reason() -> Option<String> {
    safety::require_root().and_then(|()| safety::check_tools()).err().map(|e| e.to_string())
}

macro_rules! require_host {
    () => {
        if let Some(reason) = skip_reason() {
            common::skip_or_fail("host primitives", reason);
            return;
        }
    };
}

/// A prefix unique to this test process and test, ≤ 15 bytes with any host name used here.
fn prefix(tag: &str) -> String {
    format!("mcjt{}{tag}", std::process::id() % 10_000)
}

/// A TCP echo server running in a thread inside a host's namespace; stopped on drop.
struct EchoServer {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<(), HostError>>>,
}

impl EchoServer {
    fn start(net: &Network, host: &str) -> EchoServer {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let handle = net
            .spawn_in(host, move || {
                let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, ECHO_PORT)).expect("bind echo port");
                listener.set_nonblocking(true).expect("nonblocking listener");
                ready_tx.send(()).expect("signal ready");
                while !flag.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            stream.set_nonblocking(false).expect("blocking stream");
                            stream.set_read_timeout(Some(CONNECT_TIMEOUT)).expect("read timeout");
                            let mut buf = [0u8; 64];
                            if let Ok(n) = stream.read(&mut buf) {
                                let _ = stream.write_all(&buf[..n]);
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(5)),
                        Err(e) => panic!("accept: {e}"),
                    }
                }
            })
            .expect("spawn echo server");
        ready_rx.recv_timeout(Duration::from_secs(5)).expect("echo server ready");
        EchoServer { stop, handle: Some(handle) }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// One TCP round trip from `from`'s namespace to `to`'s echo server.
fn tcp_once(net: &Network, from: &str, to: &str) -> bool {
    let addr = SocketAddr::V4(SocketAddrV4::new(net.host_ip(to).expect("ip"), ECHO_PORT));
    let probe = net
        .spawn_in(from, move || -> std::io::Result<bool> {
            let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
            stream.set_read_timeout(Some(CONNECT_TIMEOUT))?;
            stream.write_all(b"ping")?;
            let mut buf = [0u8; 4];
            stream.read_exact(&mut buf)?;
            Ok(&buf == b"ping")
        })
        .expect("spawn probe");
    matches!(probe.join().expect("probe thread").expect("enter namespace"), Ok(true))
}

fn reachable(net: &Network, from: &str, to: &str) -> bool {
    (0..OK_ATTEMPTS).any(|_| tcp_once(net, from, to))
}

fn assert_reachable(net: &Network, from: &str, to: &str) {
    assert!(reachable(net, from, to), "{from} -> {to} should work\n{}", net.ruleset().unwrap_or_default());
}

fn assert_cut(net: &Network, from: &str, to: &str) {
    let started = Instant::now();
    assert!(!tcp_once(net, from, to), "{from} -> {to} should be cut\n{}", net.ruleset().unwrap_or_default());
    println!("{from} -> {to}: cut (probe gave up after {:?})", started.elapsed());
}

/// Whether UDP datagrams from `from` reach `to` (tests one-way partitions, which TCP cannot show).
fn udp_delivered(net: &Network, from: &str, to: &str) -> bool {
    let (ready_tx, ready_rx) = mpsc::channel();
    let receiver = net
        .spawn_in(to, move || {
            let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, UDP_PORT)).expect("bind udp");
            socket.set_read_timeout(Some(CONNECT_TIMEOUT)).expect("udp timeout");
            ready_tx.send(()).expect("signal ready");
            let mut buf = [0u8; 16];
            matches!(socket.recv(&mut buf), Ok(n) if &buf[..n] == b"hello")
        })
        .expect("spawn receiver");
    ready_rx.recv_timeout(Duration::from_secs(5)).expect("receiver ready");
    let target = SocketAddr::V4(SocketAddrV4::new(net.host_ip(to).expect("ip"), UDP_PORT));
    let sender = net
        .spawn_in(from, move || {
            let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).expect("bind sender");
            for _ in 0..5 {
                let _ = socket.send_to(b"hello", target);
                thread::sleep(Duration::from_millis(50));
            }
        })
        .expect("spawn sender");
    sender.join().expect("sender thread").expect("enter namespace");
    receiver.join().expect("receiver thread").expect("enter namespace")
}

fn root_links() -> String {
    host::run_args("ip", ["-o", "link", "show"]).expect("ip link")
}

fn other_hubs_exist() -> bool {
    net::list_netns().expect("list netns").iter().any(|n| n.ends_with("-hub"))
}

fn assert_all_gone(prefix: &str, hosts: &[&str]) {
    let left: Vec<String> =
        net::list_netns().expect("list netns").into_iter().filter(|n| n.starts_with(&format!("{prefix}-"))).collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    let links = root_links();
    for host in hosts {
        assert!(!links.contains(&format!(" v-{host}")), "veth v-{host} in the root namespace:\n{links}");
    }
    // The route is shared: it goes with the last harness network. Tests running in parallel
    // may still be tearing theirs down, so wait briefly while none is left.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !other_hubs_exist() && net::blackhole_route_present().expect("route") {
        assert!(Instant::now() < deadline, "blackhole route left behind");
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn namespaces_partitions_loss_and_cleanup() {
    require_host!();
    let prefix = prefix("n");
    let hosts = ["a", "b", "c"];
    let started = Instant::now();
    let mut network = Network::create(&prefix, &hosts).expect("create network");
    println!("network of {} hosts created in {:?}", hosts.len(), started.elapsed());
    let net = &network;
    assert!(net::blackhole_route_present().expect("route"), "blackhole route must be installed");
    assert_eq!(net.host_ip("a").expect("ip"), Ipv4Addr::new(10, 213, 47, 10));
    assert_eq!(net.host_ip("c").expect("ip"), Ipv4Addr::new(10, 213, 47, 12));
    assert!(matches!(net.host_ip("zz"), Err(HostError::UnknownHost(_))));
    let addr = net.run_in("b", "ip", &["-o", "-4", "addr", "show", "dev", "eth0"]).expect("ip addr in b");
    assert!(addr.contains("10.213.47.11/24"), "{addr}");

    let servers: Vec<EchoServer> = hosts.iter().map(|h| EchoServer::start(net, h)).collect();
    for (from, to) in [("a", "b"), ("b", "a"), ("a", "c"), ("c", "b")] {
        assert_reachable(net, from, to);
    }

    let started = Instant::now();
    net.isolate("b").expect("isolate b");
    println!("isolate applied in {:?}", started.elapsed());
    assert_cut(net, "a", "b");
    assert_cut(net, "c", "b");
    assert_cut(net, "b", "a");
    assert_reachable(net, "a", "c");
    assert_reachable(net, "c", "a");

    net.heal().expect("heal");
    assert_reachable(net, "a", "b");
    assert_reachable(net, "b", "c");

    net.halves(&["a"], &["b", "c"]).expect("halves");
    assert_cut(net, "a", "b");
    assert_cut(net, "c", "a");
    assert_reachable(net, "b", "c");
    // A new partition replaces the previous one.
    net.partition(&[("a", "b")]).expect("one-way partition");
    assert_reachable(net, "a", "c");
    assert!(!udp_delivered(net, "a", "b"), "a -> b must be dropped");
    assert!(udp_delivered(net, "b", "a"), "b -> a must still be delivered");

    net.heal().expect("heal");
    assert_reachable(net, "a", "b");
    net.loss(30).expect("loss 30");
    assert!(net.ruleset().expect("ruleset").contains("numgen random mod 100 < 30 drop"));
    net.loss(100).expect("loss 100");
    let rules = net.ruleset().expect("ruleset");
    assert!(!rules.contains("numgen"), "loss replaces the previous loss rule:\n{rules}");
    assert_cut(net, "a", "c");
    assert_cut(net, "b", "a");
    net.heal().expect("heal after loss");
    assert!(!net.ruleset().expect("ruleset").contains("drop"));
    assert_reachable(net, "a", "c");
    assert!(net.loss(101).is_err());

    drop(servers);
    let started = Instant::now();
    network.destroy().expect("destroy");
    println!("network destroyed in {:?}", started.elapsed());
    network.destroy().expect("destroy is idempotent");
    assert_all_gone(&prefix, &hosts);
    drop(network);
}

#[test]
fn process_faults_on_a_program_in_a_namespace() {
    require_host!();
    let prefix = prefix("f");
    let mut net = Network::create(&prefix, &["m1", "m2"]).expect("create network");
    let mut child = net.command("m1", "sleep").expect("command").arg("30").spawn().expect("spawn sleep");
    let pid = child.id();
    // `ip netns exec` execs the program: the child's pid becomes `sleep` in m1's namespace.
    let deadline = Instant::now() + Duration::from_secs(5);
    while fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim() != "sleep" {
        assert!(Instant::now() < deadline, "pid {pid} never became `sleep`");
        thread::sleep(Duration::from_millis(5));
    }
    let proc_ns = fs::metadata(format!("/proc/{pid}/ns/net")).expect("proc ns").ino();
    let named_ns = fs::metadata(format!("/var/run/netns/{}", net.ns_name("m1").expect("ns"))).expect("netns").ino();
    assert_eq!(proc_ns, named_ns, "the program runs in m1's namespace");

    faults::pause(pid).expect("SIGSTOP");
    wait_for_state(pid, 'T');
    faults::resume(pid).expect("SIGCONT");
    wait_for_state(pid, 'S');
    let status = faults::kill9_and_reap(&mut child).expect("kill -9");
    assert_eq!(status.signal(), Some(SIGKILL));
    let gone = faults::kill9(pid).expect_err("signal to a reaped pid");
    assert!(faults::is_no_such_process(&gone), "{gone}");
    assert!(faults::kill9(0).is_err(), "pid 0 (process group) is refused");

    // destroy() kills what is still running in the namespaces.
    let mut leftover = net.command("m2", "sleep").expect("command").arg("30").spawn().expect("spawn sleep");
    let deadline = Instant::now() + Duration::from_secs(5);
    while fs::read_to_string(format!("/proc/{}/comm", leftover.id())).unwrap_or_default().trim() != "sleep" {
        assert!(Instant::now() < deadline, "leftover never became `sleep`");
        thread::sleep(Duration::from_millis(5));
    }
    net.destroy().expect("destroy");
    assert_eq!(leftover.wait().expect("reap leftover").signal(), Some(SIGKILL));
    assert_all_gone(&prefix, &["m1", "m2"]);
}

fn wait_for_state(pid: u32, state: char) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        // The state follows the parenthesised command name.
        let current = stat.rsplit(") ").next().and_then(|rest| rest.chars().next());
        if current == Some(state) {
            return;
        }
        assert!(Instant::now() < deadline, "pid {pid} stuck in state {current:?}, wanted {state}");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn leftovers_of_a_crashed_run_are_cleaned() {
    require_host!();
    let prefix = prefix("l");
    let hosts = ["x", "y"];
    // A "crash": the network is never destroyed.
    std::mem::forget(Network::create(&prefix, &hosts).expect("first network"));
    assert_eq!(net::list_netns().expect("list").iter().filter(|n| n.starts_with(&format!("{prefix}-"))).count(), 3);
    // The next run with the same prefix starts cleanly over the leftovers…
    let second = Network::create(&prefix, &hosts).expect("second network over leftovers");
    let echo = EchoServer::start(&second, "y");
    assert_reachable(&second, "x", "y");
    drop(echo);
    std::mem::forget(second);
    // …and a Ctrl-C handler can remove everything.
    net::cleanup_leftovers(&prefix).expect("cleanup leftovers");
    assert_all_gone(&prefix, &hosts);
    net::cleanup_leftovers(&prefix).expect("cleanup is idempotent");
}

#[test]
fn drop_removes_the_network_and_bad_names_are_refused() {
    require_host!();
    let prefix = prefix("d");
    {
        let _net = Network::create(&prefix, &["p", "q"]).expect("create network");
    }
    assert_all_gone(&prefix, &["p", "q"]);
    assert!(Network::create("bad-prefix", &["a"]).is_err());
    assert!(Network::create(&prefix, &["waytoolongname"]).is_err());
    assert!(Network::create(&prefix, &["hub"]).is_err());
    assert_all_gone(&prefix, &[]);
}

/// Removes a scratch directory (after the LoopFs inside it was dropped).
struct ScratchDir(PathBuf);

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn write_file(path: &Path, content: &[u8], fsync: bool) {
    let mut file = File::create(path).expect("create file");
    file.write_all(content).expect("write");
    if fsync {
        file.sync_all().expect("fsync");
    }
}

fn describe_file(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => format!("present, {} bytes: {:?}", bytes.len(), String::from_utf8_lossy(&bytes)),
        Err(e) => format!("absent ({e})"),
    }
}

fn is_mounted(path: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let needle = format!(" {} ", path.display());
    info.lines().any(|l| l.contains(&needle))
}

#[test]
fn power_cut_keeps_fsynced_data_only() {
    require_host!();
    let scratch = ScratchDir(std::env::temp_dir().join(prefix("p")));
    fs::create_dir_all(&scratch.0).expect("scratch dir");
    let image = scratch.0.join("data.img");
    let mountpoint = scratch.0.join("mnt");
    let mut loopfs = LoopFs::create(&image, DEFAULT_IMAGE_BYTES, &mountpoint).expect("create loop fs");
    assert!(is_mounted(&mountpoint));
    let device = loopfs.device().expect("loop device").to_path_buf();
    println!("mounted {} on {}", device.display(), mountpoint.display());

    let (a, b, c) = (mountpoint.join("a"), mountpoint.join("b"), mountpoint.join("c"));
    write_file(&a, b"durable", true);
    write_file(&c, b"base", true);
    File::open(&mountpoint).expect("open dir").sync_all().expect("fsync dir");
    let mut append = OpenOptions::new().append(true).open(&c).expect("open c");
    append.write_all(b"-tail-not-synced").expect("append");
    drop(append);
    write_file(&b, b"volatile", false);

    loopfs.power_cut().expect("power cut");
    assert!(is_mounted(&mountpoint));
    assert_eq!(fs::read(&a).expect("a after power cut"), b"durable", "fsynced data must survive");
    println!("after power cut: a {}", describe_file(&a));
    println!("after power cut: b (never fsynced) {}", describe_file(&b));
    println!("after power cut: c (fsynced \"base\", then appended) {}", describe_file(&c));

    // The recovered filesystem is usable, and survives another cut.
    write_file(&mountpoint.join("d"), b"after", true);
    loopfs.power_cut().expect("second power cut");
    assert_eq!(fs::read(&a).expect("a after second cut"), b"durable");
    assert_eq!(fs::read(mountpoint.join("d")).expect("d after second cut"), b"after");

    loopfs.destroy().expect("destroy loop fs");
    loopfs.destroy().expect("destroy is idempotent");
    assert!(!is_mounted(&mountpoint), "still mounted");
    assert!(!image.exists(), "image left behind");
    assert!(!mountpoint.exists(), "mountpoint left behind");
    let attached = host::run_args("losetup", ["--list", "--noheadings", "--output", "BACK-FILE"]).expect("losetup");
    assert!(!attached.contains(&image.display().to_string()), "loop device left attached:\n{attached}");
}

#[test]
fn loop_fs_rejects_images_too_small_for_xfs() {
    require_host!();
    let scratch = ScratchDir(std::env::temp_dir().join(prefix("s")));
    let result = LoopFs::create(&scratch.0.join("img"), 64 * 1024 * 1024, &scratch.0.join("mnt"));
    assert!(matches!(result, Err(HostError::InvalidArgument(_))), "{result:?}");
}

#[test]
fn fake_clock_skews_the_wall_clock() {
    let scratch = ScratchDir(std::env::temp_dir().join(prefix("c")));
    let clock = match FakeClock::new(&scratch.0) {
        Ok(clock) => clock,
        Err(e @ HostError::FaketimeMissing { .. }) => {
            common::skip_or_fail("clock skew", e);
            return;
        }
        Err(e) => panic!("fake clock: {e}"),
    };
    let skewed_now = || -> i64 {
        let mut cmd = Command::new("date");
        cmd.arg("+%s");
        clock.apply(&mut cmd);
        host::run(&mut cmd).expect("date").trim().parse().expect("epoch seconds")
    };
    let real_now = || SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs() as i64;
    for offset in [3600, -120, 0] {
        clock.set_offset(offset).expect("set offset");
        let skew = skewed_now() - real_now();
        assert!((skew - offset).abs() <= 2, "offset {offset}: program saw skew {skew}");
    }
    let env = clock.env();
    assert!(env.iter().any(|(k, v)| *k == "DONT_FAKE_MONOTONIC" && v == "1"));
}
