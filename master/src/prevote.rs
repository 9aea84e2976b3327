//! PreVote: a master starts an election only after a majority of the voters
//! (itself included) say that they, too, have not heard from a leader for
//! longer than a leader lease.
//!
//! openraft 0.9 has no PreVote: a follower whose timer fires bumps its term
//! and asks for votes. A master that was paused (GC, SIGSTOP, an overloaded
//! host), cut off for a while, or restarted would do so while the others
//! still follow a healthy leader; its higher term then reaches the leader in
//! the next AppendEntries answer and deposes it: an election nobody needed,
//! and at scale a storm of them. So openraft's own election timer is off
//! (`enable_elect = false`) and [`ElectionDriver`] decides when to elect:
//!
//! - it waits as openraft would: a leader lease (`election-timeout-max`)
//!   plus a random election timeout after the last contact with a leader
//!   (an accepted AppendEntries or snapshot, a granted vote) or after its
//!   own last attempt;
//! - then it asks every other voter [`PreVoteRequest`]: "would you vote for
//!   me?" A voter says yes only if it is not the leader, has had no contact
//!   with a leader for a leader lease itself, and the candidate's log is not
//!   shorter than its own. Nothing is written by a pre-vote: no term moves;
//! - with a majority of yeses (its own included) it calls openraft's
//!   `trigger().elect()`, which runs the real, durable vote.
//!
//! A dead leader is replaced as fast as before (one extra round trip); a
//! node that merely lost touch asks, is told "we have a leader", and waits
//! for the leader's next heartbeat instead of bumping the term.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mooncake_proto::raft::RaftMessage;
use mooncake_proto::raft::raft_service_client::RaftServiceClient;
use mooncake_raft_store::{NodeId, Raft, codec};
use openraft::ServerState;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use crate::cluster_id::ClusterId;

/// When this master last heard from a leader (or granted a vote).
#[derive(Debug)]
pub struct LeaderContact {
    last: Mutex<Instant>,
}

impl Default for LeaderContact {
    fn default() -> Self {
        LeaderContact { last: Mutex::new(Instant::now()) }
    }
}

impl LeaderContact {
    /// A leader's message was accepted, or a vote granted: now.
    pub fn heard(&self) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    /// The instant of the last contact.
    pub fn last(&self) -> Instant {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// "Would you vote for me?" (encoded by the raft-store codec).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PreVoteRequest {
    pub candidate: NodeId,
    /// The candidate's last log index.
    pub last_log_index: Option<u64>,
}

/// The answer, with the reason of a refusal (logged by the candidate).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PreVoteResponse {
    pub granted: bool,
    pub reason: String,
}

/// Answers a pre-vote from this master's Raft state. `quiet` is how long
/// without a leader's contact this master needs before it says yes.
pub fn answer(raft: &Raft, contact: &LeaderContact, quiet: Duration, req: &PreVoteRequest) -> PreVoteResponse {
    let (state, leader, last_log_index) = {
        let m = raft.metrics();
        let m = m.borrow();
        (m.state, m.current_leader, m.last_log_index)
    };
    let refuse = |reason: String| PreVoteResponse { granted: false, reason };
    if state == ServerState::Leader {
        return refuse("I am the leader".into());
    }
    let since = contact.last().elapsed();
    if since < quiet {
        return refuse(format!("heard from leader {leader:?} {} ms ago", since.as_millis()));
    }
    if req.last_log_index < last_log_index {
        return refuse(format!("your last log index {:?} is behind mine {last_log_index:?}", req.last_log_index));
    }
    PreVoteResponse { granted: true, reason: String::new() }
}

/// Timing of [`ElectionDriver`], from the master's election flags.
#[derive(Clone, Copy, Debug)]
pub struct ElectionTiming {
    /// How long a voter must have had no leader before it elects or grants
    /// a pre-vote (openraft's leader lease: `election-timeout-max`).
    pub quiet: Duration,
    pub timeout_min: Duration,
    pub timeout_max: Duration,
}

impl ElectionTiming {
    /// The wait after a contact before a pre-vote: `quiet` plus a random
    /// election timeout (what openraft's own timer waits).
    fn next_wait(&self) -> Duration {
        let (lo, hi) = (self.timeout_min.as_millis() as u64, self.timeout_max.as_millis() as u64);
        self.quiet + Duration::from_millis(rand::thread_rng().gen_range(lo..hi.max(lo + 1)))
    }
}

/// Starts elections for one master (see the module doc).
pub struct ElectionDriver {
    pub id: NodeId,
    pub raft: Raft,
    pub contact: Arc<LeaderContact>,
    pub cluster: Arc<ClusterId>,
    pub timing: ElectionTiming,
    pub elections: prometheus::IntCounterVec,
}

impl ElectionDriver {
    /// Runs until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut peers: BTreeMap<NodeId, (String, RaftServiceClient<Channel>)> = BTreeMap::new();
        let mut last_attempt: Option<Instant> = None;
        let mut wait = self.timing.next_wait();
        loop {
            let since = last_attempt.map_or(self.contact.last(), |a| a.max(self.contact.last()));
            let due = since + wait;
            if Instant::now() < due {
                tokio::select! {
                    _ = tokio::time::sleep_until(due.into()) => {}
                    _ = stop.changed() => return,
                }
                continue;
            }
            if *stop.borrow() {
                return;
            }
            wait = self.timing.next_wait();
            let (state, voters, last_log_index) = {
                let m = self.raft.metrics();
                let m = m.borrow();
                let membership = m.membership_config.membership();
                let voters: Vec<(NodeId, String)> = membership
                    .voter_ids()
                    .map(|id| (id, membership.get_node(&id).map(|n| n.addr.clone()).unwrap_or_default()))
                    .collect();
                (m.state, voters, m.last_log_index)
            };
            if matches!(state, ServerState::Leader | ServerState::Learner | ServerState::Shutdown)
                || !voters.iter().any(|(id, _)| *id == self.id)
            {
                // A leader is its own contact; a learner never elects.
                self.contact.heard();
                continue;
            }
            last_attempt = Some(Instant::now());
            let req = PreVoteRequest { candidate: self.id, last_log_index };
            let others: Vec<(NodeId, String)> = voters.iter().filter(|(id, _)| *id != self.id).cloned().collect();
            let calls = others.iter().map(|(id, addr)| {
                let client = peer_client(&mut peers, *id, addr);
                let req = req.clone();
                let cluster_id = self.cluster.get().unwrap_or_default();
                let timeout = self.timing.timeout_min;
                async move { (*id, ask(client, &req, cluster_id, timeout).await) }
            });
            let answers = futures::future::join_all(calls).await;
            let granted = 1 + answers.iter().filter(|(_, a)| matches!(a, Ok(r) if r.granted)).count();
            if granted * 2 > voters.len() {
                tracing::info!(granted, voters = voters.len(), "pre-vote won: starting an election");
                self.elections.with_label_values(&["started"]).inc();
                if let Err(e) = self.raft.trigger().elect().await {
                    tracing::error!(error = %e, "raft stopped; no election");
                    return;
                }
            } else {
                self.elections.with_label_values(&["refused_by_pre_vote"]).inc();
                let why: Vec<String> = answers
                    .iter()
                    .map(|(id, a)| match a {
                        Ok(r) if r.granted => format!("{id}: yes"),
                        Ok(r) => format!("{id}: {}", r.reason),
                        Err(e) => format!("{id}: {e}"),
                    })
                    .collect();
                tracing::info!(granted, voters = voters.len(), answers = ?why, "pre-vote lost: not starting an election");
            }
        }
    }
}

/// The cached client of a peer (a new one when its address changed).
fn peer_client(
    peers: &mut BTreeMap<NodeId, (String, RaftServiceClient<Channel>)>,
    id: NodeId,
    addr: &str,
) -> Option<RaftServiceClient<Channel>> {
    if let Some((known, client)) = peers.get(&id)
        && known == addr
    {
        return Some(client.clone());
    }
    let channel = Endpoint::from_shared(format!("http://{addr}")).ok()?.tcp_nodelay(true).connect_lazy();
    let client = RaftServiceClient::new(channel);
    peers.insert(id, (addr.to_string(), client.clone()));
    Some(client)
}

/// One pre-vote round trip.
async fn ask(
    client: Option<RaftServiceClient<Channel>>,
    req: &PreVoteRequest,
    cluster_id: String,
    timeout: Duration,
) -> Result<PreVoteResponse, String> {
    let mut client = client.ok_or("bad peer address")?;
    let data = codec::encode("pre-vote", req).map_err(|e| e.to_string())?;
    let mut request = tonic::Request::new(RaftMessage { data, error: String::new(), cluster_id });
    request.set_timeout(timeout);
    let reply = client.pre_vote(request).await.map_err(|s| format!("{}: {}", s.code(), s.message()))?.into_inner();
    if !reply.error.is_empty() {
        return Err(reply.error);
    }
    codec::decode("pre-vote answer", &reply.data).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_is_a_lease_plus_a_random_timeout() {
        let t = ElectionTiming {
            quiet: Duration::from_millis(240),
            timeout_min: Duration::from_millis(120),
            timeout_max: Duration::from_millis(240),
        };
        for _ in 0..1000 {
            let w = t.next_wait();
            assert!(w >= Duration::from_millis(360) && w < Duration::from_millis(480), "{w:?}");
        }
    }
}
