//! Leader lease for reads. A read may be served from the leader's applied
//! state without a quorum round when, at the moment after the state was
//! read, a majority of the voters *other than the leader* acknowledged an
//! AppendEntries (heartbeat or entries) of the leader's current vote that was
//! *sent* less than the lease window ago.
//!
//! Why that is safe with openraft 0.9: a follower that accepts an
//! AppendEntries of a committed vote refuses every vote request for
//! `election_timeout_max` (openraft's `leader_lease`) after it received it,
//! and does not campaign itself for `leader_lease + election_timeout`; a
//! restarted master starts with the same lease (openraft stamps the loaded
//! vote with the start time). Any new leader needs votes from a majority,
//! which includes one of the acknowledging followers, so no other leader can
//! exist — and no write can be acknowledged elsewhere — until the oldest
//! counted acknowledgement's send time plus `leader_lease`. The window is a
//! fraction of that (a third by default) so clocks may run at different
//! rates by that much. The leader itself is deliberately not counted: openraft
//! does not refresh a leader's own vote time, so a partitioned leader can
//! grant a vote to a newer candidate; with the leader excluded that cannot
//! help anyone win within the lease.
//!
//! The ack times are recorded by the Raft network client
//! ([`crate::raft::network`]), which sees every AppendEntries and its answer.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mooncake_raft_store::NodeId;
use openraft::Vote;

/// The latest acknowledged AppendEntries per peer: the vote it carried and
/// when it was sent.
#[derive(Default)]
pub struct AckClock {
    acks: Mutex<HashMap<NodeId, (Vote<NodeId>, Instant)>>,
}

impl AckClock {
    /// `target` accepted an AppendEntries carrying `vote` that was sent at `sent`.
    pub fn record(&self, target: NodeId, vote: &Vote<NodeId>, sent: Instant) {
        let mut acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        match acks.get_mut(&target) {
            Some((v, at)) if v == vote => {
                if sent > *at {
                    *at = sent;
                }
            }
            _ => {
                acks.insert(target, (*vote, sent));
            }
        }
    }

    /// Whether the leader described by `q` holds the lease.
    pub fn holds(&self, q: &LeaseQuery<'_>) -> bool {
        let acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        quorum_acked(&acks, q)
    }
}

/// A leader asking whether it holds the lease.
pub struct LeaseQuery<'a> {
    /// This master.
    pub me: NodeId,
    /// The vote it leads with.
    pub vote: &'a Vote<NodeId>,
    /// The voters of its (uniform, not joint) membership.
    pub voters: &'a BTreeSet<NodeId>,
    pub now: Instant,
    pub window: Duration,
}

/// True when a majority of `voters` other than `me` acknowledged `vote` with
/// a message sent within `window` before `now`. A single-voter group (`me`
/// alone) always holds it: no other node can be elected without a
/// membership change committed through `me`.
pub fn quorum_acked(acks: &HashMap<NodeId, (Vote<NodeId>, Instant)>, q: &LeaseQuery<'_>) -> bool {
    let LeaseQuery { me, vote, voters, now, window } = *q;
    if !voters.contains(&me) {
        return false;
    }
    if voters.len() == 1 {
        return true;
    }
    let fresh = voters
        .iter()
        .filter(|id| **id != me)
        .filter_map(|id| acks.get(id))
        .filter(|(v, sent)| v == vote && now.saturating_duration_since(*sent) < window)
        .count();
    fresh > voters.len() / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(term: u64, node: NodeId) -> Vote<NodeId> {
        Vote::new_committed(term, node)
    }

    fn voters(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    const W: Duration = Duration::from_millis(100);

    fn holds(clock: &AckClock, me: NodeId, vote: &Vote<NodeId>, voters: &BTreeSet<NodeId>, now: Instant) -> bool {
        clock.holds(&LeaseQuery { me, vote, voters, now, window: W })
    }

    #[test]
    fn three_voters_need_both_followers() {
        let t0 = Instant::now();
        let clock = AckClock::default();
        let v = vote(3, 1);
        let now = t0 + Duration::from_millis(50);
        assert!(!holds(&clock, 1, &v, &voters(&[1, 2, 3]), now), "no acks yet");
        clock.record(2, &v, t0);
        assert!(!holds(&clock, 1, &v, &voters(&[1, 2, 3]), now), "the leader itself does not count");
        clock.record(3, &v, t0);
        assert!(holds(&clock, 1, &v, &voters(&[1, 2, 3]), now));
        assert!(!holds(&clock, 1, &v, &voters(&[1, 2, 3]), t0 + W), "the window is exclusive");
    }

    #[test]
    fn five_voters_need_three_followers() {
        let t0 = Instant::now();
        let clock = AckClock::default();
        let v = vote(7, 1);
        let all = voters(&[1, 2, 3, 4, 5]);
        clock.record(2, &v, t0);
        clock.record(3, &v, t0);
        assert!(!holds(&clock, 1, &v, &all, t0));
        clock.record(5, &v, t0);
        assert!(holds(&clock, 1, &v, &all, t0));
    }

    #[test]
    fn acks_of_another_vote_do_not_count() {
        let t0 = Instant::now();
        let clock = AckClock::default();
        clock.record(2, &vote(3, 1), t0);
        clock.record(3, &vote(3, 1), t0);
        assert!(!holds(&clock, 1, &vote(4, 1), &voters(&[1, 2, 3]), t0), "a new term starts without a lease");
        clock.record(2, &vote(4, 1), t0);
        assert!(!holds(&clock, 1, &vote(4, 1), &voters(&[1, 2, 3]), t0));
    }

    #[test]
    fn an_older_send_never_moves_the_ack_back() {
        let t0 = Instant::now();
        let clock = AckClock::default();
        let v = vote(3, 1);
        clock.record(2, &v, t0 + Duration::from_millis(90));
        clock.record(2, &v, t0); // a slow answer to an earlier heartbeat
        clock.record(3, &v, t0 + Duration::from_millis(90));
        assert!(holds(&clock, 1, &v, &voters(&[1, 2, 3]), t0 + Duration::from_millis(150)));
    }

    #[test]
    fn single_voter_and_non_voter() {
        let t0 = Instant::now();
        let clock = AckClock::default();
        assert!(holds(&clock, 1, &vote(1, 1), &voters(&[1]), t0));
        assert!(!holds(&clock, 4, &vote(1, 4), &voters(&[1, 2, 3]), t0), "a leader outside the voters");
        assert!(!holds(&clock, 1, &vote(1, 1), &voters(&[2]), t0));
    }
}
