//! The cluster id: which cluster a master's log belongs to. Founding masters
//! derive it from `--cluster-name` and the founding membership; a master that
//! joins later adopts the id of the first Raft message it receives. Every
//! Raft message carries the sender's id and a master refuses messages from
//! another cluster, so a wrong address in a config cannot make two clusters'
//! logs meet (openraft would panic on a foreign leader's log).

use std::collections::BTreeMap;
use std::sync::RwLock;

use mooncake_raft_store::LogStore;

/// This master's cluster id, persisted in its log store.
pub struct ClusterId {
    log: LogStore,
    id: RwLock<Option<String>>,
}

/// Why a Raft message was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClusterIdError {
    #[error(
        "raft message from cluster {theirs:?}, but this master belongs to {ours:?}; check --initial-cluster and member addresses"
    )]
    Foreign { ours: String, theirs: String },
    #[error("raft message without a cluster id (peer too old or misconfigured)")]
    Missing,
    #[error("cannot record the cluster id: {0}")]
    Store(String),
}

/// The id of a cluster founded as `name` by `members`.
pub fn founding_id(name: &str, members: &BTreeMap<u64, String>) -> String {
    let text: String = members.iter().map(|(id, addr)| format!("{id}={addr};")).collect();
    let hash = format!("{name}/{text}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{name}-{hash:016x}")
}

impl ClusterId {
    /// Loads the recorded id, if any.
    pub fn load(log: LogStore) -> Result<Self, ClusterIdError> {
        let id = log.cluster_id().map_err(|e| ClusterIdError::Store(e.to_string()))?;
        Ok(ClusterId { log, id: RwLock::new(id) })
    }

    pub fn get(&self) -> Option<String> {
        self.id.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `id` unless one is recorded already; returns the id in force.
    pub fn adopt(&self, id: &str) -> Result<String, ClusterIdError> {
        let mut guard = self.id.write().unwrap_or_else(|p| p.into_inner());
        if let Some(ours) = guard.as_ref() {
            return Ok(ours.clone());
        }
        self.log.save_cluster_id(id).map_err(|e| ClusterIdError::Store(e.to_string()))?;
        tracing::info!(cluster_id = id, "joined cluster");
        *guard = Some(id.to_string());
        Ok(id.to_string())
    }

    /// Accepts a message from cluster `theirs` (adopting it on a new joiner).
    pub fn check(&self, theirs: &str) -> Result<(), ClusterIdError> {
        if theirs.is_empty() {
            return Err(ClusterIdError::Missing);
        }
        let ours = self.adopt(theirs)?;
        if ours != theirs {
            return Err(ClusterIdError::Foreign { ours, theirs: theirs.to_string() });
        }
        Ok(())
    }
}
