//! A partition of the Raft network, for tests that run masters in one
//! process (testkit's `InProcessCluster`): the masters of a cluster share
//! one [`RaftPartition`], and a master sends no Raft message to a peer the
//! partition cuts it from (the peer is `Unreachable`, as behind a dropped
//! link). Clients still reach every master. A master started from the
//! command line has none: `MasterConfig::raft_partition` is not a flag.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use mooncake_raft_store::NodeId;

/// Links cut between masters, both ways.
#[derive(Debug, Default)]
pub struct RaftPartition {
    cut: Mutex<BTreeSet<(NodeId, NodeId)>>,
}

impl RaftPartition {
    /// Cuts `node` from each of `peers`, both ways.
    pub fn isolate(&self, node: NodeId, peers: &[NodeId]) {
        let mut cut = self.cut.lock().unwrap_or_else(PoisonError::into_inner);
        for &p in peers.iter().filter(|p| **p != node) {
            cut.insert((node, p));
            cut.insert((p, node));
        }
    }

    /// Every link back.
    pub fn heal(&self) {
        self.cut.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// Whether `from` may not send to `to`.
    pub fn cuts(&self, from: NodeId, to: NodeId) -> bool {
        self.cut.lock().unwrap_or_else(PoisonError::into_inner).contains(&(from, to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_isolated_node_is_cut_both_ways_from_its_peers_until_healed() {
        let p = RaftPartition::default();
        p.isolate(1, &[1, 2, 3]);
        assert!(p.cuts(1, 2) && p.cuts(2, 1) && p.cuts(1, 3) && p.cuts(3, 1));
        assert!(!p.cuts(2, 3) && !p.cuts(1, 1));
        p.heal();
        assert!(!p.cuts(1, 2));
    }
}
