//! [`free_port`]: loopback ports for the nodes of local clusters.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

/// Most attempts [`free_port`] makes to find a port it has not handed out.
const FREE_PORT_ATTEMPTS: usize = 1_000;

/// The lowest port handed out: above the well-known and most registered
/// service ports a developer machine runs.
const LOWEST_PORT: u16 = 10_000;

/// Where the kernel's ephemeral ports begin when `ip_local_port_range`
/// cannot be read (Linux's default).
const EPHEMERAL_FIRST_DEFAULT: u16 = 32_768;

/// A port that was free a moment ago on 127.0.0.1 and that this process has
/// not handed out before, for a child process to bind a moment later.
///
/// It is taken from below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`): a port of that range can be
/// given to any process's outgoing connection between this check and the
/// child's bind, and the child then fails to start (a store node "gone,
/// connection refused" in a test). Ports below it are only ever taken by an
/// explicit bind. Where that range leaves no room below it, the kernel picks
/// (port 0), as before. The memory of ports handed out keeps two clusters
/// started at once in one process (parallel tests) from being given the
/// same port before either child binds it, and one cluster's masters from
/// talking Raft to the other's.
pub fn free_port() -> std::io::Result<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let take = |port: u16| HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner).insert(port);
    if let Some((low, high)) = below_ephemeral() {
        for port in candidates(low, high).take(FREE_PORT_ATTEMPTS) {
            if TcpListener::bind(("127.0.0.1", port)).is_ok() && take(port) {
                return Ok(port);
            }
        }
    }
    for _ in 0..FREE_PORT_ATTEMPTS {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if take(port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no port in {FREE_PORT_ATTEMPTS} tries that this process has not handed out already"),
    ))
}

/// `[LOWEST_PORT, first port of the kernel's ephemeral range)`, or `None`
/// when that range leaves fewer than 1,000 ports below it.
fn below_ephemeral() -> Option<(u16, u16)> {
    let first = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(EPHEMERAL_FIRST_DEFAULT);
    (first > LOWEST_PORT + 1_000).then_some((LOWEST_PORT, first))
}

/// Ports of `[low, high)` in the order this process tries them: from a
/// start that differs between processes (so test processes started at once
/// do not probe the same ports in the same order), continuing where the
/// previous call of this process stopped.
fn candidates(low: u16, high: u16) -> impl Iterator<Item = u16> {
    static CURSOR: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(high - low);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let seed = std::process::id().wrapping_mul(2_654_435_761) ^ nanos;
    // The first call of the process sets the start; later calls go on from it.
    let _ = CURSOR.compare_exchange(u32::MAX, seed % span, Ordering::Relaxed, Ordering::Relaxed);
    std::iter::from_fn(move || {
        let at = CURSOR.fetch_add(1, Ordering::Relaxed) % span;
        // `at < span` and `span` fits u16 with `low`, so this cannot overflow.
        u16::try_from(at).ok().map(|at| low + at)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports come from below the ephemeral range, are free, and are never
    /// handed out twice by one process.
    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let range = below_ephemeral();
        let ports: Vec<u16> = (0..50).map(|_| free_port().unwrap()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice: {ports:?}");
        for p in &ports {
            if let Some((low, high)) = range {
                assert!((low..high).contains(p), "port {p} is outside [{low}, {high})");
            }
            TcpListener::bind(("127.0.0.1", *p)).unwrap_or_else(|e| panic!("port {p} is not free: {e}"));
        }
    }
}
