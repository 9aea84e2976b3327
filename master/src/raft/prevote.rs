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
//!   with a leader for a leader lease itself, and the candidate's last log
//!   id (term, then index: what the real vote compares) is not behind its
//!   own. Nothing is written by a pre-vote: no term moves. A voter that
//!   says yes waits a full election wait before it tries itself, so the
//!   candidate it backed is not met by a rival of the same term;
//! - with a majority of yeses (its own included; in each configuration of
//!   a joint membership) it calls openraft's
//!   `trigger().elect()`, which runs the real, durable vote.
//!
//! A dead leader is replaced as fast as before (one extra round trip); a
//! node that merely lost touch asks, is told "we have a leader", and waits
//! for the leader's next heartbeat instead of bumping the term.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mooncake_raft_store::{LogStore, NodeId, Raft};
use openraft::network::RaftNetworkFactory;
use openraft::{BasicNode, ServerState};
use rand::Rng;
use tokio::sync::watch;

use crate::duties::book::{self, DutyBook};
use crate::raft::network::{NetworkFactory, PeerClient, PreVoteRequest, PreVoteResponse};

/// When this master last heard from a leader (or granted a vote), and
/// when it last said yes to a pre-vote.
#[derive(Debug)]
pub struct LeaderContact {
    last: Mutex<Instant>,
    pre_vote_granted: Mutex<Option<Instant>>,
}

impl Default for LeaderContact {
    fn default() -> Self {
        LeaderContact { last: Mutex::new(Instant::now()), pre_vote_granted: Mutex::new(None) }
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

    /// This master said yes to another's pre-vote: it lets that candidate
    /// run its election instead of starting a rival one a moment later (two
    /// candidates of one term split the vote and cost a round).
    fn granted_pre_vote(&self) {
        *self.pre_vote_granted.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// What this master's own election wait counts from: the last contact
    /// or the last pre-vote it granted.
    fn wait_start(&self) -> Instant {
        let granted = *self.pre_vote_granted.lock().unwrap_or_else(PoisonError::into_inner);
        granted.map_or(self.last(), |g| g.max(self.last()))
    }
}

/// Answers a pre-vote from this master's Raft state and log. `quiet` is how
/// long without a leader's contact this master needs before it says yes.
pub fn answer(
    raft: &Raft,
    log: &LogStore,
    contact: &LeaderContact,
    quiet: Duration,
    req: &PreVoteRequest,
) -> PreVoteResponse {
    let (state, leader) = {
        let m = raft.metrics();
        let m = m.borrow();
        (m.state, m.current_leader)
    };
    let refuse = |reason: String| PreVoteResponse { granted: false, reason };
    if state == ServerState::Leader {
        return refuse("I am the leader".into());
    }
    let since = contact.last().elapsed();
    if since < quiet {
        return refuse(format!("heard from leader {leader:?} {} ms ago", since.as_millis()));
    }
    match log.last_log_id() {
        Err(e) => refuse(format!("cannot read my log: {e}")),
        Ok(mine) if req.last_log_id < mine => {
            refuse(format!("your last log id {:?} is behind mine {mine:?}", req.last_log_id))
        }
        Ok(_) => {
            contact.granted_pre_vote();
            PreVoteResponse { granted: true, reason: String::new() }
        }
    }
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

/// Whether `granted` holds a majority of every configuration (one, or two
/// during a joint membership change).
pub fn is_majority(configs: &[BTreeSet<NodeId>], granted: &BTreeSet<NodeId>) -> bool {
    !configs.is_empty() && configs.iter().all(|c| c.iter().filter(|id| granted.contains(id)).count() * 2 > c.len())
}

/// Starts elections for one master (see the module doc).
pub struct ElectionDriver {
    pub id: NodeId,
    pub raft: Raft,
    pub log: LogStore,
    pub contact: Arc<LeaderContact>,
    /// Makes the clients that carry pre-votes (as Raft's own RPCs).
    pub network: NetworkFactory,
    pub timing: ElectionTiming,
    pub elections: prometheus::IntCounterVec,
    /// While its data dir is nearly full a master starts no election
    /// (`disk_space.rs`).
    pub disk_alarm: Arc<crate::raft::disk_space::DiskAlarm>,
    /// Where each attempt is recorded (the `elections` duty).
    pub duties: Arc<DutyBook>,
}

impl ElectionDriver {
    /// Runs until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut peers: BTreeMap<NodeId, (BasicNode, PeerClient)> = BTreeMap::new();
        let mut last_attempt: Option<Instant> = None;
        let mut wait = self.timing.next_wait();
        loop {
            let since = last_attempt.map_or(self.contact.wait_start(), |a| a.max(self.contact.wait_start()));
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
            let (state, configs, nodes) = {
                let m = self.raft.metrics();
                let m = m.borrow();
                let membership = m.membership_config.membership();
                let nodes: BTreeMap<NodeId, BasicNode> = membership.nodes().map(|(id, n)| (*id, n.clone())).collect();
                (m.state, membership.get_joint_config().clone(), nodes)
            };
            let is_voter = configs.iter().any(|c| c.contains(&self.id));
            if matches!(state, ServerState::Leader | ServerState::Learner | ServerState::Shutdown) || !is_voter {
                // A leader is its own contact; a learner never elects.
                self.contact.heard();
                continue;
            }
            last_attempt = Some(Instant::now());
            let duties = self.duties.clone();
            let outcome = duties.round(book::ELECTIONS, self.attempt(&configs, &nodes, &mut peers)).await;
            match outcome {
                Attempt::Elected | Attempt::Refused => {}
                Attempt::RaftStopped => return,
            }
        }
    }

    /// One attempt: the pre-vote round, then the election if it was won.
    /// What keeps this master from electing is noted in its duty record
    /// (the NOSPACE alarm, an unreadable log, the refusals of a lost
    /// pre-vote).
    async fn attempt(
        &mut self,
        configs: &[BTreeSet<NodeId>],
        nodes: &BTreeMap<NodeId, BasicNode>,
        peers: &mut BTreeMap<NodeId, (BasicNode, PeerClient)>,
    ) -> Attempt {
        let duties = self.duties.clone();
        let refused = |why: String| {
            duties.failed(book::ELECTIONS, crate::raft::proposer::now_ms(), why);
            Attempt::Refused
        };
        if self.disk_alarm.is_on() {
            tracing::info!("not starting an election: the data dir is nearly full (NOSPACE alarm)");
            return refused("not electing: the data dir is nearly full (NOSPACE alarm)".into());
        }
        let last_log_id = match self.log.last_log_id() {
            Ok(id) => id,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the log; not starting an election");
                return refused(format!("not electing: cannot read the log: {e}"));
            }
        };
        let req = PreVoteRequest { candidate: self.id, last_log_id };
        let others: BTreeSet<NodeId> = configs.iter().flatten().copied().filter(|id| *id != self.id).collect();
        let mut clients = Vec::new();
        for id in others {
            let Some(node) = nodes.get(&id) else { continue };
            let client = match peers.remove(&id) {
                Some((known, client)) if known == *node => client,
                _ => self.network.new_client(id, node).await,
            };
            clients.push((id, node.clone(), client));
        }
        let timeout = self.timing.timeout_min;
        let round_start = Instant::now();
        let calls = clients.into_iter().map(|(id, node, mut client)| {
            let req = req.clone();
            async move {
                let answer = client.pre_vote(&req, timeout).await;
                (id, node, client, answer)
            }
        });
        let mut granted = BTreeSet::from([self.id]);
        let mut why = Vec::new();
        for (id, node, client, answer) in futures::future::join_all(calls).await {
            match answer {
                Ok(r) if r.granted => {
                    granted.insert(id);
                }
                Ok(r) => why.push(format!("{id}: {}", r.reason)),
                Err(e) => why.push(format!("{id}: {e}")),
            }
            peers.insert(id, (node, client));
        }
        match round_outcome(configs, &granted, self.contact.last(), round_start) {
            PreVoteRound::Won => {}
            PreVoteRound::Lost => {
                self.elections.with_label_values(&["refused_by_pre_vote"]).inc();
                tracing::info!(granted = ?granted, refusals = ?why, "pre-vote lost: not starting an election");
                return refused(format!("pre-vote lost: {}", why.join("; ")));
            }
            PreVoteRound::LeaderHeard => {
                self.elections.with_label_values(&["leader_heard_during_pre_vote"]).inc();
                tracing::info!(
                    granted = ?granted,
                    "pre-vote won, but a leader's message arrived during the round: following it, no election"
                );
                return refused("pre-vote won, but a leader was heard during the round: no election".into());
            }
        }
        tracing::info!(granted = ?granted, "pre-vote won: starting an election");
        self.elections.with_label_values(&["started"]).inc();
        match self.raft.trigger().elect().await {
            Ok(()) => Attempt::Elected,
            Err(e) => {
                tracing::error!(error = %e, "raft stopped; no election");
                Attempt::RaftStopped
            }
        }
    }
}

/// How a pre-vote round ended.
#[derive(Debug, PartialEq, Eq)]
enum PreVoteRound {
    /// A majority of every configuration said yes, and no leader spoke
    /// meanwhile: the real election may start.
    Won,
    /// No majority.
    Lost,
    /// A majority said yes, but a leader's message arrived while the round
    /// ran (as a pre-candidate of etcd's Raft turns follower on an append
    /// of the current term). The yeses describe a moment that has passed:
    /// a voter that was paused answers yes when it wakes, even though the
    /// leader is alive, and electing on it deposes a healthy leader.
    LeaderHeard,
}

/// Judges a pre-vote round that began at `round_start`, given the last
/// contact with a leader.
fn round_outcome(
    configs: &[BTreeSet<NodeId>],
    granted: &BTreeSet<NodeId>,
    last_contact: Instant,
    round_start: Instant,
) -> PreVoteRound {
    if !is_majority(configs, granted) {
        PreVoteRound::Lost
    } else if last_contact >= round_start {
        PreVoteRound::LeaderHeard
    } else {
        PreVoteRound::Won
    }
}

/// How one election attempt ended.
enum Attempt {
    /// The pre-vote was won and the real election started.
    Elected,
    /// Not started (noted in the duty record).
    Refused,
    /// Raft has stopped: the driver ends.
    RaftStopped,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_is_needed_in_every_configuration() {
        let set = |ids: &[NodeId]| ids.iter().copied().collect::<BTreeSet<NodeId>>();
        let one = [set(&[1, 2, 3])];
        assert!(is_majority(&one, &set(&[1, 2])));
        assert!(!is_majority(&one, &set(&[1])));
        let joint = [set(&[1, 2, 3]), set(&[3, 4, 5])];
        assert!(!is_majority(&joint, &set(&[1, 2, 3])), "no majority of the new configuration");
        assert!(is_majority(&joint, &set(&[1, 3, 4])));
        assert!(!is_majority(&[], &set(&[1])));
    }

    #[test]
    fn a_won_pre_vote_is_void_once_a_leader_spoke_during_it() {
        let set = |ids: &[NodeId]| ids.iter().copied().collect::<BTreeSet<NodeId>>();
        let configs = [set(&[1, 2, 3])];
        let round_start = Instant::now();
        let before = round_start - Duration::from_millis(500);
        let during = round_start + Duration::from_millis(10);
        assert_eq!(round_outcome(&configs, &set(&[1, 3]), before, round_start), PreVoteRound::Won);
        assert_eq!(round_outcome(&configs, &set(&[1, 3]), during, round_start), PreVoteRound::LeaderHeard);
        assert_eq!(round_outcome(&configs, &set(&[3]), during, round_start), PreVoteRound::Lost);
        assert_eq!(round_outcome(&configs, &set(&[3]), before, round_start), PreVoteRound::Lost);
    }

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
