//! Which masters this master has had a Raft exchange with, kept in its data
//! dir: masters whose vote or log answers it received, and leaders and
//! candidates whose requests it received. A master whose data dir was wiped
//! asks its peers at start (the `HeardFrom` RPC): if one of them heard from
//! its id before, it has lost votes and log entries it promised, and coming
//! back blank under the same id could break Raft's safety (it could vote
//! twice in a term). It refuses to start and says how to replace it.
//!
//! The file (`peers-heard`, one id per line) changes only the first time a
//! peer is heard from, so its fsync is rare.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mooncake_raft_store::NodeId;

const FILE: &str = "peers-heard";

/// The set, in memory and on disk.
pub struct PeersHeard {
    path: PathBuf,
    heard: Mutex<BTreeSet<NodeId>>,
}

impl PeersHeard {
    /// Loads the set kept in `data_dir` (empty when there is none).
    pub fn load(data_dir: &Path) -> std::io::Result<Self> {
        let path = data_dir.join(FILE);
        let heard = match std::fs::read_to_string(&path) {
            Ok(text) => text.lines().filter_map(|l| l.trim().parse().ok()).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(e),
        };
        Ok(PeersHeard { path, heard: Mutex::new(heard) })
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.heard.lock().unwrap_or_else(|p| p.into_inner()).contains(&id)
    }

    /// Records `id` (durably, the first time). A failure to write is logged:
    /// the record protects a later restart of that peer, not this node.
    pub fn record(&self, id: NodeId) {
        let mut heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        if !heard.insert(id) {
            return;
        }
        let text: String = heard.iter().map(|id| format!("{id}\n")).collect();
        if let Err(e) = mooncake_raft_store::write_file_durably(&self.path, text.as_bytes()) {
            tracing::warn!(peer = id, error = %e, path = %self.path.display(), "cannot record a peer heard from");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_heard_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let p = PeersHeard::load(dir.path()).unwrap();
        assert!(!p.contains(2));
        p.record(2);
        p.record(3);
        p.record(2);
        let again = PeersHeard::load(dir.path()).unwrap();
        assert!(again.contains(2) && again.contains(3) && !again.contains(1));
    }
}
