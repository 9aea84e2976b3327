//! The state audit: masters compare their state checkpoints
//! (`mooncake_raft_store::Checkpoints`: the state hash at every K-th
//! applied index, the same on every replica that applied the same entries)
//! and a master whose state differs from a majority's at the same index
//! exits (crash-only, status 70) with a line that says so. Every
//! [`AUDIT_EVERY`] each master asks the other members for their recent
//! checkpoints over the Raft service (`StateCheckpoints`, MACed with the
//! cluster secret like every Raft request). Where a majority of the voters
//! agree on a hash at an index and this master's differs, this master is
//! the one that diverged: it ends itself rather than serve, and is replaced
//! (a fresh data dir under a new id). A tie, or too few answers, decides
//! nothing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mooncake_auth::MacKey;
use mooncake_proto::raft::StateCheckpointsRequest;
use mooncake_proto::raft::raft_service_client::RaftServiceClient;
use mooncake_raft_store::{Checkpoints, NodeId, Raft};

use crate::duties::book::{self, DutyBook};
use crate::duties::runner::{Duty, Record, Tick};

/// How often a master compares its checkpoints with its peers'.
pub const AUDIT_EVERY: Duration = Duration::from_secs(5);

/// How long one peer may take to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The MAC a StateCheckpoints request from `from` carries.
pub fn checkpoints_mac(key: &MacKey, from: NodeId) -> Vec<u8> {
    key.sign(&[b"state_checkpoints", &from.to_le_bytes()])
}

/// A divergence this master found in itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diverged {
    pub index: u64,
    pub ours: u64,
    pub theirs: u64,
    pub agreeing: usize,
}

/// Whether `ours` differs from what a majority of `voters` (this master
/// included) hold at the same index, given `peers`' checkpoints.
pub fn find_divergence(ours: &[(u64, u64)], peers: &[Vec<(u64, u64)>], voters: usize) -> Option<Diverged> {
    let majority = voters / 2 + 1;
    for &(index, mine) in ours {
        let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
        for peer in peers {
            if let Some((_, h)) = peer.iter().find(|(i, _)| *i == index) {
                *counts.entry(*h).or_insert(0) += 1;
            }
        }
        if let Some((&theirs, &agreeing)) = counts.iter().find(|(h, n)| **h != mine && **n >= majority) {
            return Some(Diverged { index, ours: mine, theirs, agreeing });
        }
    }
    None
}

/// What the state audit of one master needs.
pub struct StateAudit {
    pub id: NodeId,
    pub raft: Raft,
    pub checkpoints: Arc<Checkpoints>,
    pub raft_key: MacKey,
    pub tls: Option<mooncake_tls::TlsConfig>,
    pub duties: Arc<DutyBook>,
}

/// Compares this master's checkpoints with its peers' every [`AUDIT_EVERY`],
/// on every master; exits the process on a divergence. A round with no
/// checkpoint of its own yet is not recorded; a peer that gave no
/// checkpoints fails it.
impl Duty for StateAudit {
    fn name(&self) -> &'static str {
        book::STATE_AUDIT
    }

    fn tick(&self) -> Duration {
        AUDIT_EVERY
    }

    fn leader_only(&self) -> bool {
        false
    }

    async fn round(&mut self, _: Tick) -> Record {
        let ours = self.checkpoints.recent();
        if ours.is_empty() {
            return Record::Skip;
        }
        self.compare(&ours).await;
        Record::Round
    }
}

impl StateAudit {
    /// Asks every peer for its checkpoints and compares them with `ours`.
    async fn compare(&self, ours: &[(u64, u64)]) {
        let id = self.id;
        let (voters, peers): (usize, Vec<(NodeId, String)>) = {
            let m = self.raft.metrics();
            let m = m.borrow();
            let membership = m.membership_config.membership();
            let voters = membership.voter_ids().count();
            let peers =
                membership.nodes().filter(|(n, _)| **n != id).map(|(n, node)| (*n, node.addr.clone())).collect();
            (voters, peers)
        };
        let mut answers = Vec::new();
        for (peer, addr) in peers {
            let asked = async {
                let mut c = RaftServiceClient::new(
                    mooncake_tls::grpc::endpoint(&addr, self.tls.as_ref()).ok()?.connect().await.ok()?,
                );
                let req = StateCheckpointsRequest { from: id, mac: checkpoints_mac(&self.raft_key, id) };
                c.state_checkpoints(req).await.ok().map(|r| r.into_inner())
            };
            match tokio::time::timeout(ASK_TIMEOUT, asked).await {
                Ok(Some(answer)) => {
                    answers.push(answer.checkpoints.iter().map(|c| (c.applied_index, c.state_hash)).collect())
                }
                _ => {
                    tracing::debug!(peer, "no state checkpoints from a peer this round");
                    let why = format!("no state checkpoints from master {peer} ({addr})");
                    self.duties.failed(book::STATE_AUDIT, crate::raft::proposer::now_ms(), why);
                }
            }
        }
        if let Some(d) = find_divergence(ours, &answers, voters) {
            mooncake_raft_store::fatal::invariant_broken(&format!(
                "its state diverged from the other masters': at applied index {} its state hash is {:016x}, {} \
                 other masters (a majority of {voters}) hold {:016x} (it applied an entry the others did not, or its \
                 memory or disk changed it). Replace this master: a fresh data dir under a new id with --join, \
                 `mooncake member add`, `mooncake member remove {id}` (docs/OPERATIONS.md, Membership)",
                d.index, d.ours, d.agreeing, d.theirs
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_outvoted_at_an_index_has_diverged_and_a_tie_decides_nothing() {
        let ours = vec![(64, 7), (128, 8)];
        // Both peers hold 9 at 128: this master is the odd one out.
        let peers = vec![vec![(64, 7), (128, 9)], vec![(128, 9)]];
        let d = find_divergence(&ours, &peers, 3).unwrap();
        assert_eq!(d, Diverged { index: 128, ours: 8, theirs: 9, agreeing: 2 });
        // One peer differs, the other agrees (or has no checkpoint there).
        assert_eq!(find_divergence(&ours, &[vec![(128, 9)], vec![(128, 8)]], 3), None);
        assert_eq!(find_divergence(&ours, &[vec![(128, 9)], vec![]], 3), None);
        // Equal everywhere.
        assert_eq!(find_divergence(&ours, &[ours.clone(), ours.clone()], 3), None);
    }
}
