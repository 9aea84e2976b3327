//! [`free_port`]: loopback ports for the nodes of local clusters.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::{Mutex, PoisonError};

/// Most attempts [`free_port`] makes to find a port it has not handed out.
const FREE_PORT_ATTEMPTS: usize = 1_000;

/// A port that was free a moment ago on 127.0.0.1 and that this process has
/// not handed out before. The kernel may give a just-released port to the
/// next bind, so without the memory two clusters started at once in one
/// process (parallel tests) could be given the same port before either
/// child binds it, and one cluster's masters would talk Raft to the other's.
pub fn free_port() -> std::io::Result<u16> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..FREE_PORT_ATTEMPTS {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner).insert(port) {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no port in {FREE_PORT_ATTEMPTS} tries that this process has not handed out already"),
    ))
}
