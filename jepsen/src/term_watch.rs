//! Leader terms through a run, for the availability checker: a task asks
//! every master its Raft term ([`TERM_POLL`] apart, each master its own
//! view) and keeps the highest term any answered. A leader change needs a
//! new term, so the terms gained between two samples bound the leader
//! changes between them from above (a term without a leader counts too),
//! whatever fault caused them — and a fault that changed no leader (a
//! follower paused or killed) counts as none. The leader's answer also
//! says how many bytes of each memory segment its objects use (arenas not
//! counted): not trusted by the checker, shown next to a violation.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mooncake_client::MasterClient;

use crate::access::Access;
use crate::availability::{Disruption, DisruptionKind};
use crate::workload::Shared;

/// How often the masters are asked: short against a lease TTL (2 s), so a
/// leader change is placed to within a fraction of the grace after it.
pub const TERM_POLL: Duration = Duration::from_millis(250);
/// One master's answer is waited for at most this (a paused one never answers).
const ANSWER_MAX: Duration = Duration::from_millis(500);
/// Samples kept at most (a 10 min run takes about 2,400).
const SAMPLES_MAX: usize = 100_000;

/// The highest term any master answered, and when it was asked and answered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TermSample {
    pub invoke_ns: u64,
    pub complete_ns: u64,
    pub term: u64,
    /// Host and bytes used by objects of each memory segment, as a master
    /// that led when it answered counts them (empty: none did).
    pub used_bytes: Vec<(String, u64)>,
}

/// One master's answer: its term, and its segments' usage if it led.
type Answer = (u64, Option<Vec<(String, u64)>>);

fn answer(info: &mooncake_proto::master::GetClusterInfoResponse) -> Answer {
    let memory = mooncake_proto::master::Tier::Dram as i32;
    let used = info.leader_view.then(|| {
        info.segments
            .iter()
            .filter_map(|u| u.segment.as_ref().filter(|g| g.tier == memory).map(|g| (g.host_id.clone(), u.used_bytes)))
            .collect()
    });
    (info.term, used)
}

/// Samples the masters' terms until `shared.stop` is set.
pub async fn run(access: Access, addrs: Vec<String>, shared: Arc<Shared>) -> Vec<TermSample> {
    // One client per master, kept: its channel is reused by every ask.
    let masters: Vec<(String, Arc<MasterClient>)> = addrs
        .into_iter()
        .filter_map(|addr| Some((addr.clone(), Arc::new(MasterClient::new(access.master(vec![addr])).ok()?))))
        .collect();
    let mut samples = Vec::new();
    while !shared.stop.load(Ordering::Relaxed) && samples.len() < SAMPLES_MAX {
        let invoke_ns = shared.now_ns();
        let mut asks = tokio::task::JoinSet::new();
        for (addr, c) in &masters {
            let (addr, c) = (addr.clone(), c.clone());
            asks.spawn(async move {
                match tokio::time::timeout(ANSWER_MAX, c.cluster_info_of(&addr)).await {
                    Ok(Ok(info)) => Some(answer(&info)),
                    _ => None,
                }
            });
        }
        let answers: Vec<Answer> = asks.join_all().await.into_iter().flatten().collect();
        if let Some(term) = answers.iter().map(|(term, _)| *term).max() {
            let used_bytes = answers.into_iter().find_map(|(_, used)| used).unwrap_or_default();
            samples.push(TermSample { invoke_ns, complete_ns: shared.now_ns(), term, used_bytes });
        }
        tokio::time::sleep(TERM_POLL).await;
    }
    samples
}

/// One [`DisruptionKind::LeaderChange`] per term gained, spanning from the
/// ask of the last sample before it to the answer of the first after it.
pub fn leader_changes(samples: &[TermSample]) -> Vec<Disruption> {
    let mut out = Vec::new();
    let Some(first) = samples.first() else { return out };
    let (mut term, mut since_ns) = (first.term, first.invoke_ns);
    for s in &samples[1..] {
        for _ in term..s.term {
            out.push(Disruption { from_ns: since_ns, until_ns: s.complete_ns, kind: DisruptionKind::LeaderChange });
        }
        term = term.max(s.term);
        since_ns = s.invoke_ns;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_term_gained_is_a_leader_change_between_the_samples_around_it() {
        let s = |invoke_ns, term| TermSample { invoke_ns, complete_ns: invoke_ns + 5, term, used_bytes: Vec::new() };
        let samples = [s(0, 3), s(100, 3), s(200, 5), s(300, 4), s(400, 5), s(500, 6)];
        let changes = leader_changes(&samples);
        let spans: Vec<(u64, u64)> = changes.iter().map(|d| (d.from_ns, d.until_ns)).collect();
        // 3 → 5 between the 2nd and 3rd samples (two terms); a master
        // lagging at 4 changes nothing; 5 → 6 at the end.
        assert_eq!(spans, vec![(100, 205), (100, 205), (400, 505)]);
        assert!(changes.iter().all(|d| d.kind == DisruptionKind::LeaderChange));
        assert!(leader_changes(&[]).is_empty());
    }
}
