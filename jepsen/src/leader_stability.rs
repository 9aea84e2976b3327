//! Leader stability under a lagging follower: while only a follower is
//! being paused, the leader must stay the leader. PreVote exists for this
//! (a follower that wakes after a SIGSTOP must not bump the term and depose
//! a healthy leader), so the `large-state` scenario checks it.
//!
//! The nemesis records one [`FollowerWindow`] per burst series: every
//! voter's term, leader and `mooncake_elections_total{outcome="started"}`
//! just before the first SIGSTOP and again a settle time after the last
//! SIGCONT (time for a woken follower's election timer to fire and its
//! election, if any, to finish). No other fault runs inside a window and no
//! master restarts in one, so the counters are comparable. The verdict
//! ([`check_leader_stability`]) is pure.

use std::time::Duration;

use serde::Serialize;

/// How long a master's `/metrics` may take to answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(1);
/// Largest `/metrics` body read (the masters' is a few tens of KiB).
const SCRAPE_MAX_BYTES: usize = 1 << 20;
/// The counter of elections a master started (its pre-vote won).
pub const ELECTIONS_STARTED: &str = "mooncake_elections_total{outcome=\"started\"}";

/// What one master said about itself at one instant (`None`: no answer).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MasterSample {
    pub id: u64,
    pub term: Option<u64>,
    pub leader_id: Option<u64>,
    pub elections_started: Option<u64>,
}

/// One series of SIGSTOP bursts of one follower.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FollowerWindow {
    /// The paused follower.
    pub victim: u64,
    /// The leader when the window began, and its term.
    pub leader: u64,
    pub term: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub bursts: u32,
    /// Total time the victim was stopped.
    pub stopped_ms: u64,
    pub before: Vec<MasterSample>,
    pub after: Vec<MasterSample>,
}

/// The leader-stability checker's answer.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LeaderStabilityVerdict {
    /// Windows with at least one burst.
    pub windows: usize,
    pub bursts: u32,
    pub problems: Vec<String>,
}

impl LeaderStabilityVerdict {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Every window with a burst must end with the same leader in the same
/// term, confirmed by a majority of the voters, and no master may have
/// started an election in it. A run in which no follower was ever paused
/// checked nothing, and fails.
pub fn check_leader_stability(windows: &[FollowerWindow]) -> LeaderStabilityVerdict {
    let mut v = LeaderStabilityVerdict::default();
    for w in windows.iter().filter(|w| w.bursts > 0) {
        v.windows += 1;
        v.bursts += w.bursts;
        let at = format!(
            "window at {:.1}–{:.1} s (follower {} paused {} times, {} ms; leader {} term {})",
            w.start_ns as f64 / 1e9,
            w.end_ns as f64 / 1e9,
            w.victim,
            w.bursts,
            w.stopped_ms,
            w.leader,
            w.term
        );
        for a in &w.after {
            if let Some(t) = a.term.filter(|t| *t != w.term) {
                v.problems.push(format!("{at}: master {} is in term {t}", a.id));
            }
            if let Some(l) = a.leader_id.filter(|l| *l != w.leader) {
                v.problems.push(format!("{at}: master {} follows leader {l}", a.id));
            }
            let before = w.before.iter().find(|b| b.id == a.id).and_then(|b| b.elections_started);
            if let (Some(b), Some(n)) = (before, a.elections_started)
                && n != b
            {
                v.problems.push(format!("{at}: master {} started {} election(s)", a.id, n.saturating_sub(b)));
            }
        }
        let confirming = w.after.iter().filter(|a| a.term == Some(w.term) && a.leader_id == Some(w.leader)).count();
        if confirming * 2 <= w.after.len().max(1) {
            v.problems
                .push(format!("{at}: only {confirming} of {} masters confirm the leader afterwards", w.after.len()));
        }
    }
    if v.windows == 0 {
        v.problems.push("no follower was paused: leader stability was not checked".into());
    }
    v
}

/// `mooncake_elections_total{outcome="started"}` in a Prometheus text body
/// (0 when the series is absent: the counter appears with its first use).
pub fn elections_started(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(ELECTIONS_STARTED))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .next()
        .unwrap_or(0)
}

/// GET `http://{addr}/metrics` (HTTP/1.0, no client library needed).
pub async fn scrape_metrics(addr: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await.ok()?;
        let mut body = Vec::new();
        s.take(SCRAPE_MAX_BYTES as u64).read_to_end(&mut body).await.ok()?;
        let text = String::from_utf8_lossy(&body).into_owned();
        let (head, rest) = text.split_once("\r\n\r\n")?;
        let status = head.lines().next()?;
        (status.split_whitespace().nth(1) == Some("200")).then(|| rest.to_string())
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, fetch).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: u64, term: u64, leader: u64, started: u64) -> MasterSample {
        MasterSample { id, term: Some(term), leader_id: Some(leader), elections_started: Some(started) }
    }

    fn window(after: Vec<MasterSample>) -> FollowerWindow {
        FollowerWindow {
            victim: 2,
            leader: 1,
            term: 3,
            bursts: 3,
            stopped_ms: 5_000,
            before: vec![sample(1, 3, 1, 1), sample(2, 3, 1, 0), sample(3, 3, 1, 0)],
            after,
            ..FollowerWindow::default()
        }
    }

    #[test]
    fn a_steady_leader_passes() {
        let w = window(vec![sample(1, 3, 1, 1), sample(2, 3, 1, 0), sample(3, 3, 1, 0)]);
        let v = check_leader_stability(&[w]);
        assert!(v.is_valid(), "{:?}", v.problems);
        assert_eq!((v.windows, v.bursts), (1, 3));
    }

    #[test]
    fn a_woken_follower_that_deposes_the_leader_fails() {
        // Follower 2 woke, won an election in term 4: everyone moved on.
        let w = window(vec![sample(1, 4, 2, 1), sample(2, 4, 2, 1), sample(3, 4, 2, 0)]);
        let v = check_leader_stability(&[w]);
        assert!(!v.is_valid());
        let all = v.problems.join("\n");
        assert!(all.contains("master 2 started 1 election(s)"), "{all}");
        assert!(all.contains("is in term 4") && all.contains("follows leader 2"), "{all}");
        assert!(all.contains("only 0 of 3 masters confirm"), "{all}");
    }

    #[test]
    fn an_election_that_lost_still_counts() {
        // Same term and leader at the end, but master 3 started an election
        // (it bumped the term and lost, or the leader was re-elected).
        let w = window(vec![sample(1, 3, 1, 1), sample(2, 3, 1, 0), sample(3, 3, 1, 2)]);
        let v = check_leader_stability(&[w]);
        assert!(!v.is_valid());
        assert!(v.problems[0].contains("master 3 started 2 election(s)"), "{:?}", v.problems);
    }

    #[test]
    fn silent_masters_afterwards_fail_and_no_window_fails() {
        let silent = MasterSample { id: 1, ..MasterSample::default() };
        let w = window(vec![silent.clone(), MasterSample { id: 2, ..silent.clone() }, sample(3, 3, 1, 0)]);
        assert!(!check_leader_stability(&[w]).is_valid());
        let idle = FollowerWindow { bursts: 0, ..window(vec![]) };
        let v = check_leader_stability(&[idle]);
        assert!(!v.is_valid() && v.problems[0].contains("no follower was paused"));
    }

    #[test]
    fn the_started_counter_is_read_from_prometheus_text() {
        let body = "# HELP mooncake_elections_total Elections\n# TYPE mooncake_elections_total counter\n\
                    mooncake_elections_total{outcome=\"refused_by_pre_vote\"} 7\n\
                    mooncake_elections_total{outcome=\"started\"} 2\n";
        assert_eq!(elections_started(body), 2);
        assert_eq!(elections_started("mooncake_rpc_requests_total 3\n"), 0);
    }
}
