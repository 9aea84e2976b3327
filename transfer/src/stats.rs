//! Transfer counters of an engine, per transport and peer: bytes moved,
//! operations and errors, for metrics.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

/// Most peers tracked; beyond this, counts go to the `other` peer (bounded memory).
pub const STATS_PEERS_MAX: usize = 1024;

/// Which backend moved the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TransportKind {
    Tcp,
    Shm,
    /// A segment this process serves itself (the local route).
    Local,
    /// One-sided reads over UCX (feature `ucx`).
    Ucx,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Shm => "shm",
            TransportKind::Local => "local",
            TransportKind::Ucx => "ucx",
        }
    }
}

/// Counters of one (transport, peer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub reads: u64,
    pub writes: u64,
    pub errors: u64,
}

/// All counters of an engine.
#[derive(Debug, Default)]
pub struct EngineStats {
    peers: Mutex<BTreeMap<(TransportKind, String), PeerStats>>,
}

impl EngineStats {
    /// Records one transfer of `bytes` to/from `peer`.
    pub fn record(&self, kind: TransportKind, peer: &str, write: bool, bytes: u64, ok: bool) {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (kind, peer.to_string());
        let key =
            if peers.len() >= STATS_PEERS_MAX && !peers.contains_key(&key) { (kind, "other".into()) } else { key };
        let s = peers.entry(key).or_default();
        match (ok, write) {
            (false, _) => s.errors += 1,
            (true, true) => {
                s.writes += 1;
                s.written_bytes += bytes;
            }
            (true, false) => {
                s.reads += 1;
                s.read_bytes += bytes;
            }
        }
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> Vec<(TransportKind, String, PeerStats)> {
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.iter().map(|((k, p), s)| (*k, p.clone(), s.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_per_transport_and_peer() {
        let s = EngineStats::default();
        s.record(TransportKind::Tcp, "a:1", true, 10, true);
        s.record(TransportKind::Tcp, "a:1", false, 4, true);
        s.record(TransportKind::Tcp, "a:1", false, 4, false);
        s.record(TransportKind::Shm, "a:1", false, 7, true);
        let snap = s.snapshot();
        assert_eq!(snap.len(), 2);
        let tcp = &snap.iter().find(|(k, _, _)| *k == TransportKind::Tcp).unwrap().2;
        assert_eq!((tcp.writes, tcp.written_bytes, tcp.reads, tcp.read_bytes, tcp.errors), (1, 10, 1, 4, 1));
    }
}
