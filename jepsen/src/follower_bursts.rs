//! The nemesis's [`Fault::FollowerBursts`] rounds (`large-state`): a series
//! of SIGSTOP bursts of one follower, judged afterwards for leader
//! stability (`leader_stability.rs`); and, once, half way through the run,
//! a SIGKILL of the leader, restarted when another master leads, between
//! two series. A series only starts once one leader has led one term for
//! [`WINDOW_STEADY`] and every voter has caught up, so that nothing but the
//! paused follower can move the term inside it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mooncake_client::MasterClient;

use crate::access::Access;
use crate::chaos_cluster::{MASTER_HTTP_PORT, Target, master_addr, master_host};
use crate::leader_stability::{FollowerWindow, MasterSample, elections_started, scrape_metrics};
use crate::nemesis::{Nemesis, leader_and_term, stable_leader};
use crate::scenario::Fault;

/// How long one series of bursts lasts (the last burst may end later).
const WINDOW: Duration = Duration::from_secs(8);
/// A burst: the follower is stopped this long (ms, inclusive range) ...
const STOPPED_MS: (u64, u64) = (1_000, 3_000);
/// ... then runs this long before the next one.
const RUNNING_MS: (u64, u64) = (500, 2_000);
/// After the last SIGCONT, before the masters are asked again: a woken
/// follower's election (a leader lease, a random timeout of at most
/// 240 ms, a pre-vote and a vote round) is over well within this.
const WINDOW_SETTLE: Duration = Duration::from_millis(1_500);
/// A series starts only after one leader has led one term this long.
const WINDOW_STEADY: Duration = Duration::from_secs(1);
/// Longest wait for a steady leader, or for a restarted master to catch up.
const SETTLE_MAX: Duration = Duration::from_secs(30);
/// How long one master may take to answer GetClusterInfo.
const INFO_TIMEOUT: Duration = Duration::from_secs(1);
/// A restarted master has caught up when it has applied what the leader
/// had committed when asked.
const CATCH_UP_POLL: Duration = Duration::from_millis(200);

impl Nemesis {
    /// One round of [`Fault::FollowerBursts`]: the leader kill once it is
    /// due, a series of bursts otherwise.
    pub(crate) async fn follower_round(&mut self, stop: &AtomicBool) -> anyhow::Result<()> {
        let due = self.leader_kill_at.is_some_and(|at| self.shared.now_ns() >= at.as_nanos() as u64);
        if due && !self.leader_killed {
            self.leader_killed = true;
            return self.kill_leader_once().await;
        }
        self.follower_window(stop).await
    }

    async fn voters_and_addrs(&self) -> anyhow::Result<(Vec<u64>, Vec<String>)> {
        let voters = self.cluster.lock().await.voters.clone();
        let addrs = voters.iter().map(|id| master_addr(&self.net, *id)).collect::<anyhow::Result<Vec<_>>>()?;
        Ok((voters, addrs))
    }

    /// Bursts of one follower for [`WINDOW`], with every voter's term,
    /// leader and elections-started counter before and after.
    async fn follower_window(&mut self, stop: &AtomicBool) -> anyhow::Result<()> {
        let (voters, addrs) = self.voters_and_addrs().await?;
        let Some((leader, term)) = stable_leader(&self.access, &addrs, WINDOW_STEADY, SETTLE_MAX).await else {
            tracing::warn!("no steady leader: no follower window this round");
            return Ok(());
        };
        let before = self.sample(&voters).await?;
        if before.iter().any(|s| s.term != Some(term) || s.leader_id != Some(leader)) {
            tracing::warn!(?before, leader, term, "the masters disagree before the window: no window this round");
            return Ok(());
        }
        let followers: Vec<u64> = voters.iter().copied().filter(|v| *v != leader).collect();
        let Some(&victim) = self.rng.pick(&followers) else { return Ok(()) };
        let mut w =
            FollowerWindow { victim, leader, term, start_ns: self.shared.now_ns(), before, ..Default::default() };
        let end = tokio::time::Instant::now() + WINDOW;
        while tokio::time::Instant::now() < end && !stop.load(Ordering::Relaxed) {
            let stopped = Duration::from_millis(self.draw(STOPPED_MS));
            let running = Duration::from_millis(self.draw(RUNNING_MS));
            self.cluster.lock().await.pause(Target::Master(victim))?;
            let detail =
                format!("SIGSTOP follower {victim} for {} ms (leader {leader}, term {term})", stopped.as_millis());
            self.record("start", Fault::FollowerBursts, detail);
            tokio::time::sleep(stopped).await;
            self.cluster.lock().await.resume(Target::Master(victim))?;
            self.record("heal", Fault::FollowerBursts, format!("SIGCONT follower {victim}"));
            w.bursts += 1;
            w.stopped_ms += stopped.as_millis() as u64;
            tokio::time::sleep(running).await;
        }
        tokio::time::sleep(WINDOW_SETTLE).await;
        w.after = self.sample(&voters).await?;
        w.end_ns = self.shared.now_ns();
        tracing::info!(victim, leader, term, bursts = w.bursts, after = ?w.after, "follower window done");
        self.windows.push(w);
        Ok(())
    }

    fn draw(&mut self, (lo, hi): (u64, u64)) -> u64 {
        lo + self.rng.below(hi - lo + 1)
    }

    /// Every voter's own view and its elections-started counter.
    async fn sample(&self, voters: &[u64]) -> anyhow::Result<Vec<MasterSample>> {
        let mut out = Vec::new();
        for id in voters {
            let addr = master_addr(&self.net, *id)?;
            let http = format!("{}:{MASTER_HTTP_PORT}", self.net.host_ip(&master_host(*id))?);
            let client = MasterClient::new(self.access.master(vec![addr.clone()]))?;
            let info =
                tokio::time::timeout(INFO_TIMEOUT, client.cluster_info_of(&addr)).await.ok().and_then(Result::ok);
            out.push(MasterSample {
                id: *id,
                term: info.as_ref().map(|i| i.term),
                leader_id: info.as_ref().map(|i| i.leader_id).filter(|l| *l != 0),
                elections_started: scrape_metrics(&http).await.map(|body| elections_started(&body)),
            });
        }
        Ok(out)
    }

    /// SIGKILLs the leader, restarts it once another master leads a newer
    /// term, and waits until it has caught up and one leader is steady.
    async fn kill_leader_once(&mut self) -> anyhow::Result<()> {
        let (_, addrs) = self.voters_and_addrs().await?;
        let Some((leader, term)) = leader_and_term(&self.access, &addrs).await else {
            tracing::warn!("no leader to kill");
            return Ok(());
        };
        self.cluster.lock().await.kill(Target::Master(leader))?;
        self.record("start", Fault::Kill, format!("SIGKILL leader {leader} (term {term}), half way through the run"));
        let deadline = tokio::time::Instant::now() + SETTLE_MAX;
        let new = loop {
            match leader_and_term(&self.access, &addrs).await {
                Some((id, t)) if t > term && id != leader => break format!("master {id} leads term {t}"),
                _ if tokio::time::Instant::now() >= deadline => break "no new leader".to_string(),
                _ => tokio::time::sleep(CATCH_UP_POLL).await,
            }
        };
        self.cluster.lock().await.restart(Target::Master(leader))?;
        let caught_up = self.caught_up(leader).await?;
        let steady = stable_leader(&self.access, &addrs, WINDOW_STEADY, SETTLE_MAX).await;
        let steady = steady.map_or("no steady leader".to_string(), |(id, t)| format!("master {id} steady in term {t}"));
        self.record("heal", Fault::Kill, format!("{new}; {leader} restarted, caught up: {caught_up}; {steady}"));
        Ok(())
    }

    /// Waits until master `id` has applied what the leader had committed.
    async fn caught_up(&self, id: u64) -> anyhow::Result<bool> {
        let (voters, addrs) = self.voters_and_addrs().await?;
        let addr = master_addr(&self.net, id)?;
        let deadline = tokio::time::Instant::now() + SETTLE_MAX;
        while tokio::time::Instant::now() < deadline {
            if let Some((leader, _)) = leader_and_term(&self.access, &addrs).await
                && let Some(pos) = voters.iter().position(|v| *v == leader)
                && let (Some(l), Some(me)) = (info(&self.access, &addrs[pos]).await, info(&self.access, &addr).await)
                && me.applied_index >= l.commit_index
            {
                return Ok(true);
            }
            tokio::time::sleep(CATCH_UP_POLL).await;
        }
        Ok(false)
    }
}

async fn info(access: &Access, addr: &str) -> Option<mooncake_proto::master::GetClusterInfoResponse> {
    let client = MasterClient::new(access.master(vec![addr.to_string()])).ok()?;
    tokio::time::timeout(INFO_TIMEOUT, client.cluster_info_of(addr)).await.ok()?.ok()
}
