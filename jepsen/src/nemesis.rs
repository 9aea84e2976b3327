//! The nemesis: every few seconds it draws a fault of the scenario from the
//! seeded RNG, injects it for a while, and heals; every action goes to the
//! fault log with its time. Runs on a thread inside the client namespace.
//!
//! A kill under stall ([`Fault::KillUnderStall`]) is a cycle of its own,
//! timed so that a new leader that wrongly reclaims a deposed leader's
//! arenas grants its first arena exactly over the stalled ranges:
//!
//! 1. The workloads' puts are held ([`Shared::puts_held`]); the stall
//!    writers are continued, end their last round and start the next one:
//!    their reservations are the last in the leader's open arena, followed
//!    only by its untouched tail.
//! 2. Once they have stopped themselves, the leader is SIGKILLed; when
//!    another master leads a newer term it is restarted (at once, openraft
//!    would restore it as leader of its old term).
//! 3. When one leader has led one term for [`RECLAIM_SWEEP_WAIT`] (it has
//!    had its first reclaim sweep; a restarted master often forces one more
//!    election first), puts go on: the new leader's first arena is granted
//!    from the smallest hole that fits — with the old arenas wrongly
//!    returned, the one that starts at the stalled ranges.
//! 4. After [`STALL_HOLD`] of puts on it, step 1 again: the writers' second
//!    halves land on whatever the new leader placed over their ranges.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mooncake_client::MasterClient;
use serde::Serialize;
use tokio::sync::Mutex;

use crate::access::Access;
use crate::chaos_cluster::{CLIENT_TTL, ChaosCluster, PUT_START_DISCARD_TIMEOUT, Target, master_host};
use crate::leader_stability::FollowerWindow;
use crate::net::Network;
use crate::rng::Rng;
use crate::scenario::Fault;
use crate::stall_process::StallWriters;
use crate::workload::Shared;

/// How long a fault lasts before it is healed.
pub(crate) const FAULT_HOLD: Duration = Duration::from_secs(3);
/// Quiet time between faults.
pub(crate) const FAULT_GAP: Duration = Duration::from_secs(3);
/// A kill under stall: how long the workloads put on the new leader (once
/// it has had a reclaim sweep) before the writers continue. Enough to place
/// several hundred KiB of objects in its first arena, over the stalled
/// ranges when it wrongly reclaimed them. The whole stall (election,
/// [`RECLAIM_SWEEP_WAIT`], this) must stay below the masters'
/// `--client_ttl` (5 s; a new leader counts every client alive for one TTL
/// from its election) and far below `--put_start_discard_timeout_sec`.
pub const STALL_HOLD: Duration = Duration::from_millis(1_200);
/// Puts stay held until one leader has led one term this long: its reclaim
/// duty runs every second and returns what it reclaims in its first sweep,
/// so its first arena is granted after that, where the old arenas were if
/// it returned them.
const RECLAIM_SWEEP_WAIT: Duration = Duration::from_millis(1_300);
/// Puts are held this long before the writers continue: puts already past
/// the hold finish, so the writers' next reservations are the last ones in
/// the leader's arena, followed only by its untouched tail.
const HOLD_SETTLE: Duration = Duration::from_millis(200);
/// Longest wait for the writers to stop (a PutStart may wait for a leader
/// within the client's 15 s deadline).
pub const STALL_WAIT_MAX: Duration = Duration::from_secs(20);
/// Kills under stall per run, at most. In the real build each strands the
/// dead leader's first arena (4 MiB) on each 64 MiB segment until the
/// release timeout; twelve leave room for the workloads. Later cycles stall
/// and continue the writers without a kill (long `soak` runs).
const STALL_KILLS_MAX: u32 = 12;
/// The longest stall: the election after a kill, a restarted master's extra
/// election, the reclaim wait, the hold. Below the client TTL (a leader
/// counts every client alive for one TTL from its election), and far below
/// the discard timeout (a stalled put must not expire).
const STALL_MAX: Duration = Duration::from_millis(
    2 * ELECTION_BOUND.as_millis() as u64 + RECLAIM_SWEEP_WAIT.as_millis() as u64 + STALL_HOLD.as_millis() as u64,
);
/// An election, generously (the masters' timeout is 120–240 ms).
const ELECTION_BOUND: Duration = Duration::from_millis(500);
const _: () = assert!(STALL_MAX.as_millis() < CLIENT_TTL.as_millis());
const _: () = assert!(4 * STALL_MAX.as_millis() < PUT_START_DISCARD_TIMEOUT.as_millis());
/// How often the leader is asked for while waiting for one.
pub(crate) const LEADER_POLL: Duration = Duration::from_millis(20);
/// Longest wait for a leader of a newer term after a kill.
const NEW_LEADER_WAIT_MAX: Duration = Duration::from_secs(20);

/// One line of the fault log.
#[derive(Clone, Debug, Serialize)]
pub struct FaultEvent {
    pub t_ns: u64,
    /// "start" or "heal".
    pub phase: &'static str,
    pub fault: String,
    pub detail: String,
}

pub struct Nemesis {
    pub net: Arc<Network>,
    /// How its queries reach the masters (the run's client certificate).
    pub access: Access,
    pub cluster: Arc<Mutex<ChaosCluster>>,
    pub shared: Arc<Shared>,
    pub faults: &'static [Fault],
    pub rng: Rng,
    pub log: Vec<FaultEvent>,
    pub membership_done: bool,
    /// The stall writers (scenarios with [`Fault::KillUnderStall`]).
    pub stall: Option<StallWriters>,
    /// Kills under stall so far (at most [`STALL_KILLS_MAX`]).
    pub stall_kills: u32,
    /// [`Fault::FollowerBursts`]: when (since the workload started) the
    /// leader is killed once, between two series of bursts.
    pub leader_kill_at: Option<Duration>,
    pub leader_killed: bool,
    /// [`Fault::FollowerBursts`]: the series of bursts so far, for the
    /// leader-stability checker.
    pub windows: Vec<FollowerWindow>,
    /// [`Fault::DiskFull`]: how each master whose disk filled ended.
    pub disk_full: Vec<DiskFullOutcome>,
    /// [`Fault::WipeReplace`]: whether the wiped master refused to start
    /// under its old id (`None` until tried), and the line that said so.
    pub wipe_refused: Option<(bool, String)>,
    /// [`Fault::StorePause`]: seconds until the resumed store node's segment
    /// was mounted again (`None`: not within [`STORE_REMOUNT_MAX`]).
    pub store_remounts: Vec<Option<f64>>,
    /// [`Fault::StoreKill`]: every round, killed or not (`store_kill.rs`).
    pub store_kills: Vec<crate::store_kill::StoreKill>,
    /// [`Fault::StoreKill`]: where the next round is in the pattern of
    /// victims and comebacks (`None`: drawn from the seed at the first).
    pub store_kill_next: Option<u64>,
    /// [`Fault::QuorumPause`]: the leader when the masters were stopped;
    /// it is resumed first ([`QUORUM_RESUME_STAGGER`] before the others).
    pub quorum_paused_leader: Option<u64>,
    /// [`Fault::FdFlood`]: the flood running against the leader.
    pub flood: Option<Flood>,
    /// [`Fault::ZoneLoss`]: every loss of the zone (`zone_loss.rs`).
    pub zone_outages: Vec<crate::zone_loss::ZoneOutage>,
    /// [`Fault::RollingRestart`]: every restart (`rolling_restart.rs`).
    pub store_restarts: Vec<crate::rolling_restart::StoreRestart>,
}

/// [`Fault::FdFlood`]: descriptors the flooded leader is left with.
const FLOOD_FD_LIMIT: u64 = 1_024;
/// Silent connections held against it at once: more than its descriptors.
const FLOOD_CONNECTIONS: usize = 3_000;
/// New connections per round of the flood, and the pause between rounds.
const FLOOD_BURST: usize = 300;
const FLOOD_ROUND: Duration = Duration::from_millis(100);
/// A connect the master's full backlog leaves hanging is given up after this.
const FLOOD_CONNECT_MAX: Duration = Duration::from_millis(200);

/// A flood of silent connections against one master ([`Fault::FdFlood`]).
pub struct Flood {
    master: u64,
    /// Its soft descriptor limit before the fault, put back when it heals.
    old_limit: u64,
    stop: Arc<AtomicBool>,
    /// Ends with the most connections it held at once.
    task: tokio::task::JoinHandle<usize>,
}

/// Opens connections to `addr` that never send a byte, [`FLOOD_BURST`]
/// every [`FLOOD_ROUND`], holding the newest [`FLOOD_CONNECTIONS`], until
/// `stop`; returns the most it held at once.
async fn flood(addr: String, stop: Arc<AtomicBool>) -> usize {
    let mut held = std::collections::VecDeque::new();
    let mut most = 0;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..FLOOD_BURST {
            if let Ok(Ok(s)) = tokio::time::timeout(FLOOD_CONNECT_MAX, tokio::net::TcpStream::connect(&addr)).await {
                held.push_back(s);
            }
        }
        while held.len() > FLOOD_CONNECTIONS {
            held.pop_front();
        }
        most = most.max(held.len());
        tokio::time::sleep(FLOOD_ROUND).await;
    }
    most
}

/// How long a master restarted on a wiped data dir may take to refuse
/// (it asks its peers before it starts Raft).
const WIPED_REFUSAL_MAX: Duration = Duration::from_secs(15);
/// What the refusal of a master on a wiped data dir says (`node.rs`).
const WIPED_REFUSAL: &str = "must not rejoin under id";
/// [`Fault::QuorumPause`]: the paused leader runs alone this long before the
/// followers resume, as when a host comes back before its peers. It is
/// still the leader then (nobody could elect another), so a leader that
/// expires the clients it could not hear proposes it at once, and the
/// followers commit it unless they elect a new leader first (their
/// election timers and its queued messages race on resume): the planted
/// bug (`--dev-unsafe-expire-after-stall`) then loses objects in most runs,
/// not all (`cli/tests/t80_nothing_lost.rs` proves it on one master).
const QUORUM_RESUME_STAGGER: Duration = Duration::from_secs(1);
/// How far past the client TTL the store node stays paused.
const STORE_PAUSE_PAST_TTL: Duration = Duration::from_secs(3);
/// How long a resumed store node may take to mount its segment again: its
/// heartbeat notices within a few pings (`client/src/heartbeat.rs`).
const STORE_REMOUNT_MAX: Duration = Duration::from_secs(15);
/// Store segments mounted when every store node serves (the faulted one and
/// the steady one).
const STORE_SEGMENTS: u64 = 2;

/// What a master did when its disk filled up.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DiskFullOutcome {
    pub master: u64,
    pub was_leader: bool,
    /// Its exit code once it ended by itself (`None`: still running when
    /// the wait ended, or killed by a signal — see `signal`).
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub ended: bool,
    /// It raised its NOSPACE alarm (`mooncake_data_dir_nospace_alarm`)
    /// before it ended: still durable (sled writes into space it holds),
    /// not ready and not leading, until a write fails or space returns.
    pub alarmed: bool,
    /// Seconds from the disk full to the exit or the alarm (or to the end
    /// of the wait).
    pub after_s: f64,
    /// The line of its log that says why it ended (`master_exit_line`).
    pub last_line: String,
}

/// How long a master whose disk is full may take to end itself or raise its
/// NOSPACE alarm. The alarm comes within a check (500 ms) of the fill; an
/// exit needs a failed write, and sled writes into space it already holds
/// first (exits came 9-14 s after the disk filled, or never on an idle
/// follower): whichever comes first.
const DISK_FULL_EXIT_MAX: Duration = Duration::from_secs(30);

/// The leader most masters report.
pub async fn find_leader(access: &Access, addrs: &[String]) -> Option<u64> {
    leader_and_term(access, addrs).await.map(|(id, _)| id)
}

/// The (leader, term) most masters report.
pub(crate) async fn leader_and_term(access: &Access, addrs: &[String]) -> Option<(u64, u64)> {
    let mut votes = std::collections::BTreeMap::new();
    for a in addrs {
        let Ok(c) = MasterClient::new(access.master(vec![a.clone()])) else { continue };
        if let Ok(Ok(info)) = tokio::time::timeout(Duration::from_secs(1), c.cluster_info_of(a)).await
            && info.leader_id != 0
        {
            *votes.entry((info.leader_id, info.term)).or_insert(0) += 1;
        }
    }
    votes.into_iter().max_by_key(|(_, n)| *n).map(|(lt, _)| lt)
}

/// Waits until the same leader has led the same term for `steady` (a
/// restarted master may force one more election soon after it rejoins);
/// gives up after `within`.
pub(crate) async fn stable_leader(
    access: &Access,
    addrs: &[String],
    steady: Duration,
    within: Duration,
) -> Option<(u64, u64)> {
    let deadline = tokio::time::Instant::now() + within;
    let mut seen: Option<((u64, u64), tokio::time::Instant)> = None;
    loop {
        let now = tokio::time::Instant::now();
        match (leader_and_term(access, addrs).await, seen) {
            (Some(lt), Some((prev, since))) if lt == prev => {
                if now.duration_since(since) >= steady {
                    return Some(lt);
                }
            }
            (Some(lt), _) => seen = Some((lt, now)),
            (None, _) => seen = None,
        }
        if now >= deadline {
            return None;
        }
        tokio::time::sleep(LEADER_POLL).await;
    }
}

/// Gaps before and holds of each fault.
fn timing(fault: Fault) -> (Duration, Duration) {
    match fault {
        // The writers' round is the gap: the cycle waits for them to stop.
        Fault::KillUnderStall => (Duration::ZERO, STALL_HOLD),
        // A round paces its own bursts.
        Fault::FollowerBursts => (FAULT_GAP, Duration::ZERO),
        // A round paces itself: its hold depends on how the node comes back.
        Fault::StoreKill | Fault::ZoneLoss | Fault::RollingRestart => (FAULT_GAP, Duration::ZERO),
        // Past the client TTL, so the masters expire the paused store node.
        Fault::StorePause => (FAULT_GAP, CLIENT_TTL + STORE_PAUSE_PAST_TTL),
        // Past the client TTL, as the masters' clocks see it when they resume.
        Fault::QuorumPause => (FAULT_GAP, CLIENT_TTL + STORE_PAUSE_PAST_TTL),
        // Past the client TTL: a leader that cannot hear the store nodes
        // through the flood would expire them.
        Fault::FdFlood => (FAULT_GAP, CLIENT_TTL + STORE_PAUSE_PAST_TTL),
        _ => (FAULT_GAP, FAULT_HOLD),
    }
}

impl Nemesis {
    pub(crate) fn record(&mut self, phase: &'static str, fault: Fault, detail: String) {
        let ev = FaultEvent { t_ns: self.shared.now_ns(), phase, fault: format!("{fault:?}"), detail };
        tracing::info!(phase = ev.phase, fault = %ev.fault, detail = %ev.detail, "nemesis");
        self.log.push(ev);
    }

    /// Runs until `stop`; leaves everything healed.
    pub async fn run(&mut self, stop: Arc<AtomicBool>) -> anyhow::Result<()> {
        if self.faults.is_empty() {
            return Ok(());
        }
        while !stop.load(Ordering::Relaxed) {
            let Some(&fault) = self.rng.pick(self.faults) else { break };
            let (gap, hold) = timing(fault);
            tokio::time::sleep(gap).await;
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if fault == Fault::FollowerBursts {
                self.follower_round(&stop).await?;
                continue;
            }
            if fault == Fault::StoreKill {
                self.store_kill_round().await?;
                continue;
            }
            if fault == Fault::ZoneLoss {
                self.zone_loss_round().await?;
                continue;
            }
            if fault == Fault::RollingRestart {
                self.rolling_restart_round().await?;
                continue;
            }
            let detail = self.inject(fault).await?;
            self.record("start", fault, detail);
            tokio::time::sleep(hold).await;
            let healed = self.heal(fault).await?;
            self.record("heal", fault, healed);
        }
        Ok(())
    }

    async fn voters_and_leader(&self) -> anyhow::Result<(Vec<u64>, Option<u64>)> {
        let (voters, addrs) = {
            let c = self.cluster.lock().await;
            (c.voters.clone(), c.master_addrs()?)
        };
        Ok((voters, find_leader(&self.access, &addrs).await))
    }

    async fn inject(&mut self, fault: Fault) -> anyhow::Result<String> {
        let (voters, leader) = self.voters_and_leader().await?;
        let leader = leader.unwrap_or(voters[0]);
        let others: Vec<u64> = voters.iter().copied().filter(|v| *v != leader).collect();
        let hosts = |ids: &[u64]| ids.iter().map(|i| master_host(*i)).collect::<Vec<_>>();
        match fault {
            Fault::IsolateLeader => {
                let l = master_host(leader);
                let drops: Vec<(String, String)> =
                    hosts(&others).into_iter().flat_map(|o| [(l.clone(), o.clone()), (o, l.clone())]).collect();
                self.partition(&drops)?;
                Ok(format!("master {leader} cut off from masters {others:?}"))
            }
            Fault::Halves => {
                let mut shuffled = voters.clone();
                let k = self.rng.below(shuffled.len() as u64) as usize;
                shuffled.rotate_left(k);
                let (minority, majority) = shuffled.split_at(shuffled.len() / 2);
                let drops: Vec<(String, String)> = hosts(minority)
                    .into_iter()
                    .flat_map(|a| {
                        hosts(majority).into_iter().flat_map(move |b| [(a.clone(), b.clone()), (b, a.clone())])
                    })
                    .collect();
                self.partition(&drops)?;
                Ok(format!("minority {minority:?} | majority {majority:?}"))
            }
            Fault::Ring => {
                let (a, b) = (voters[0], voters[voters.len() - 1]);
                self.partition(&[(master_host(a), master_host(b)), (master_host(b), master_host(a))])?;
                Ok(format!("ring: {a} and {b} cut, both still see a majority"))
            }
            Fault::OneWay => {
                let l = master_host(leader);
                let drops: Vec<(String, String)> = hosts(&others).into_iter().map(|o| (l.clone(), o)).collect();
                self.partition(&drops)?;
                Ok(format!("messages from leader {leader} to {others:?} dropped"))
            }
            Fault::Kill => {
                let t = if self.rng.below(4) == 0 {
                    Target::Store
                } else {
                    Target::Master(*self.rng.pick(&voters).unwrap_or(&leader))
                };
                self.cluster.lock().await.kill(t)?;
                Ok(format!("SIGKILL {t:?}"))
            }
            Fault::Pause => {
                let victim = *self.rng.pick(&voters).unwrap_or(&leader);
                self.cluster.lock().await.pause(Target::Master(victim))?;
                Ok(format!("SIGSTOP master {victim}{}", if victim == leader { " (leader)" } else { "" }))
            }
            Fault::QuorumPause => {
                self.shared.ops_held.store(true, Ordering::Relaxed);
                self.quorum_paused_leader = Some(leader);
                let mut cluster = self.cluster.lock().await;
                for id in &voters {
                    cluster.pause(Target::Master(*id))?;
                }
                Ok(format!("SIGSTOP every master {voters:?} past the client TTL ({} s)", CLIENT_TTL.as_secs()))
            }
            Fault::FdFlood => {
                let old_limit = self.cluster.lock().await.set_fd_soft_limit(leader, FLOOD_FD_LIMIT)?;
                let addr = crate::chaos_cluster::master_addr(&self.net, leader)?;
                let stop = Arc::new(AtomicBool::new(false));
                let task = tokio::spawn(flood(addr, stop.clone()));
                self.flood = Some(Flood { master: leader, old_limit, stop, task });
                Ok(format!(
                    "leader {leader} limited to {FLOOD_FD_LIMIT} descriptors; up to {FLOOD_CONNECTIONS} silent \
                     connections to its gRPC port"
                ))
            }
            Fault::PowerLoss => {
                let victim = *self.rng.pick(&voters).unwrap_or(&leader);
                self.cluster.lock().await.power_cut(victim)?;
                Ok(format!("power cut of master {victim} (unflushed writes dropped), restarted"))
            }
            Fault::StorePause => {
                self.cluster.lock().await.pause(Target::Store)?;
                Ok(format!("SIGSTOP the store node past the client TTL ({} s)", CLIENT_TTL.as_secs()))
            }
            Fault::DiskFull => {
                let victim = *self.rng.pick(&voters).unwrap_or(&leader);
                self.fill_disk(victim, leader).await
            }
            Fault::Membership => self.swap_member(leader, &others).await,
            Fault::WipeReplace => self.wipe_and_replace(leader, &others).await,
            Fault::KillUnderStall => self.kill_under_stall().await,
            // Run by `follower_round`, never injected as one fault.
            Fault::FollowerBursts => Ok("follower bursts run in rounds of their own".into()),
            Fault::StoreKill => Ok("store kills run in rounds of their own".into()),
            Fault::ZoneLoss => Ok("zone losses run in rounds of their own".into()),
            Fault::RollingRestart => Ok("rolling restarts run in rounds of their own".into()),
            Fault::Loss => {
                self.net.loss(20)?;
                Ok("20 % packet loss on the bridge".into())
            }
            Fault::ClockSkew => {
                let victim = *self.rng.pick(&voters).unwrap_or(&leader);
                let secs = if self.rng.below(2) == 0 { 30 } else { -30 };
                self.cluster.lock().await.skew_clock(victim, secs)?;
                Ok(format!("master {victim} wall clock {secs:+} s"))
            }
        }
    }

    fn partition(&self, drops: &[(String, String)]) -> anyhow::Result<()> {
        let refs: Vec<(&str, &str)> = drops.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        self.net.partition(&refs)?;
        Ok(())
    }

    /// Removes a follower and adds the spare master (once per run).
    async fn swap_member(&mut self, leader: u64, others: &[u64]) -> anyhow::Result<String> {
        if self.membership_done {
            return Ok("membership already changed in this run".into());
        }
        let Some(&out) = others.first() else { return Ok("no follower to remove".into()) };
        let voters = self.replace_with_spare(leader, others, out).await?;
        self.membership_done = true;
        Ok(format!("master 4 added, master {out} removed; voters {voters:?}"))
    }

    /// The documented replacement of master `out`: the spare (master 4)
    /// joins as a learner, becomes a voter in `out`'s place, and `out` is
    /// stopped. Returns the new voters.
    async fn replace_with_spare(&mut self, leader: u64, others: &[u64], out: u64) -> anyhow::Result<Vec<u64>> {
        let (spare_addr, admin) = {
            let mut c = self.cluster.lock().await;
            c.start_spare(4)?;
            (crate::chaos_cluster::master_addr(&self.net, 4)?, c.admin_config()?)
        };
        let client = MasterClient::new(admin)?;
        client.add_learner(4, &spare_addr).await?;
        let mut voters: Vec<u64> = vec![leader];
        voters.extend(others.iter().copied().filter(|o| *o != out));
        voters.push(4);
        client.change_membership(voters.clone(), false).await?;
        let mut c = self.cluster.lock().await;
        c.voters = voters.clone();
        c.kill(Target::Master(out))?;
        Ok(voters)
    }

    /// Waits up to `max` until master `id` ends by itself (reaped: its
    /// status) or raises its NOSPACE alarm (`true`).
    async fn wait_exit_or_alarm(&self, id: u64, max: Duration) -> (Option<std::process::ExitStatus>, bool) {
        let start = std::time::Instant::now();
        let http = match self.net.host_ip(&master_host(id)) {
            Ok(ip) => format!("{ip}:{}", crate::chaos_cluster::MASTER_HTTP_PORT),
            Err(_) => String::new(),
        };
        loop {
            if let Some(status) = self.cluster.lock().await.master_exit(id) {
                return (Some(status), false);
            }
            if let Some(body) = crate::leader_stability::scrape_metrics(&http).await
                && body.lines().any(|l| l.trim() == "mooncake_data_dir_nospace_alarm 1")
            {
                return (None, true);
            }
            if start.elapsed() > max {
                return (None, false);
            }
            tokio::time::sleep(LEADER_POLL).await;
        }
    }

    /// How master `id` ended, once it ends by itself within `max` (reaped).
    async fn wait_master_exit(&self, id: u64, max: Duration) -> Option<std::process::ExitStatus> {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.cluster.lock().await.master_exit(id) {
                return Some(status);
            }
            if start.elapsed() > max {
                return None;
            }
            tokio::time::sleep(LEADER_POLL).await;
        }
    }

    /// A follower's disk is replaced by a blank one: restarted under its
    /// old id it must refuse to start (its peers heard from it); then the
    /// documented procedure replaces it (the spare joins, it leaves).
    async fn wipe_and_replace(&mut self, leader: u64, others: &[u64]) -> anyhow::Result<String> {
        if self.membership_done {
            return Ok("a master was already replaced in this run".into());
        }
        let Some(&out) = others.first() else { return Ok("no follower to wipe".into()) };
        {
            let mut c = self.cluster.lock().await;
            c.kill(Target::Master(out))?;
            c.wipe_data_dir(out)?;
            c.restart(Target::Master(out))?;
        }
        let status = self.wait_master_exit(out, WIPED_REFUSAL_MAX).await;
        let line = self.cluster.lock().await.master_exit_line(out, WIPED_REFUSAL);
        let refused = status.is_some_and(|s| !s.success()) && line.contains(WIPED_REFUSAL);
        self.wipe_refused = Some((refused, line.clone()));
        // Still running blank (the check failed): replace_with_spare stops it.
        let voters = self.replace_with_spare(leader, others, out).await?;
        self.membership_done = true;
        let how = match status {
            Some(s) => format!("it refused to start ({s}): {line}"),
            None => format!("it was still running blank after {} s", WIPED_REFUSAL_MAX.as_secs()),
        };
        Ok(format!(
            "data dir of master {out} wiped and restarted; {how}; master 4 added, {out} removed; voters {voters:?}"
        ))
    }

    /// Kills the leader while the stall writers hold its reservations, and
    /// lets the workloads put on the new leader once it has had a reclaim
    /// sweep. Puts are held from before the writers continued (see
    /// [`heal`](Self::heal)) until then.
    async fn kill_under_stall(&mut self) -> anyhow::Result<String> {
        let Some(stall) = self.stall.as_mut() else { return Ok("no stall writers in this run".into()) };
        let stopped = stall.wait_stopped(STALL_WAIT_MAX).await?;
        let half_written = stall.half_written();
        let addrs = self.cluster.lock().await.master_addrs()?;
        let budget = self.stall_kills < STALL_KILLS_MAX;
        let leader = if stopped && budget { leader_and_term(&self.access, &addrs).await } else { None };
        let Some((leader, term)) = leader else {
            self.shared.puts_held.store(false, Ordering::Relaxed);
            return Ok(format!(
                "{half_written} stall puts half written; writers stopped: {stopped}; kills left: {budget}; no kill"
            ));
        };
        self.stall_kills += 1;
        self.cluster.lock().await.kill(Target::Master(leader))?;
        // Restarted only once another master leads a newer term: restarted
        // at once, openraft would restore it as leader of the same term
        // (its vote is committed), and no other leader would take over.
        let deadline = tokio::time::Instant::now() + NEW_LEADER_WAIT_MAX;
        let new = loop {
            match leader_and_term(&self.access, &addrs).await {
                Some((id, t)) if t > term && id != leader => break format!("master {id} leads term {t}"),
                _ if tokio::time::Instant::now() >= deadline => break "no new leader yet".to_string(),
                _ => tokio::time::sleep(LEADER_POLL).await,
            }
        };
        self.cluster.lock().await.restart(Target::Master(leader))?;
        let settled = stable_leader(&self.access, &addrs, RECLAIM_SWEEP_WAIT, NEW_LEADER_WAIT_MAX).await;
        self.shared.puts_held.store(false, Ordering::Relaxed);
        let settled =
            settled.map_or("no stable leader".to_string(), |(id, t)| format!("master {id} steady in term {t}"));
        Ok(format!(
            "{half_written} stall puts half written; SIGKILL leader {leader} (term {term}); {new}; {leader} restarted; {settled}"
        ))
    }

    /// After a store pause: waits until every store node's segment is
    /// mounted again (the resumed one remounts by itself).
    async fn wait_store_remount(&mut self) -> String {
        let start = std::time::Instant::now();
        let addrs = self.cluster.lock().await.master_addrs().unwrap_or_default();
        let client = MasterClient::new(self.access.master(addrs)).ok();
        while start.elapsed() < STORE_REMOUNT_MAX {
            if let Some(c) = &client
                && let Ok(info) = c.cluster_info().await
                && info.segment_count >= STORE_SEGMENTS
            {
                let s = start.elapsed().as_secs_f64();
                self.store_remounts.push(Some(s));
                return format!("store node resumed; its segment is mounted again after {s:.1} s");
            }
            tokio::time::sleep(LEADER_POLL).await;
        }
        self.store_remounts.push(None);
        format!("store node resumed; its segment was not mounted again within {} s", STORE_REMOUNT_MAX.as_secs())
    }

    /// Fills `victim`'s disk and waits for it to end itself (crash-only).
    async fn fill_disk(&mut self, victim: u64, leader: u64) -> anyhow::Result<String> {
        let bytes = self.cluster.lock().await.fill_disk(victim)?;
        let start = std::time::Instant::now();
        let (status, alarmed) = self.wait_exit_or_alarm(victim, DISK_FULL_EXIT_MAX).await;
        let last_line = self.cluster.lock().await.master_exit_line(victim, "fatal:");
        let after_s = start.elapsed().as_secs_f64();
        use std::os::unix::process::ExitStatusExt;
        let outcome = DiskFullOutcome {
            master: victim,
            was_leader: victim == leader,
            exit_code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            ended: status.is_some(),
            alarmed,
            after_s,
            last_line: last_line.clone(),
        };
        self.disk_full.push(outcome);
        let role = if victim == leader { " (leader)" } else { "" };
        Ok(match (status, alarmed) {
            (Some(s), _) => format!(
                "disk of master {victim}{role} filled ({} MiB); it exited ({s}) after {after_s:.1} s: {last_line}",
                bytes >> 20
            ),
            (None, true) => format!(
                "disk of master {victim}{role} filled ({} MiB); NOSPACE alarm after {after_s:.1} s (not ready, not \
                 leading, exits at its first failed write)",
                bytes >> 20
            ),
            (None, false) => format!("disk of master {victim}{role} filled; still running after {after_s:.0} s"),
        })
    }

    async fn heal(&mut self, fault: Fault) -> anyhow::Result<String> {
        if fault == Fault::DiskFull {
            self.cluster.lock().await.free_disks()?;
        }
        let flooded = self.end_flood().await;
        self.net.heal()?;
        if let Some(leader) = self.quorum_paused_leader.take() {
            self.cluster.lock().await.resume(Target::Master(leader))?;
            tokio::time::sleep(QUORUM_RESUME_STAGGER).await;
        }
        self.cluster.lock().await.heal()?;
        self.shared.ops_held.store(false, Ordering::Relaxed);
        if fault == Fault::KillUnderStall
            && let Some(stall) = self.stall.as_mut()
        {
            self.shared.puts_held.store(true, Ordering::Relaxed);
            tokio::time::sleep(HOLD_SETTLE).await;
            stall.resume()?;
            return Ok("puts held, stall writers continued".into());
        }
        if fault == Fault::StorePause {
            return Ok(self.wait_store_remount().await);
        }
        Ok(match fault {
            Fault::Membership => "new membership kept".into(),
            Fault::FdFlood => flooded.unwrap_or_else(|| "no flood ran".into()),
            _ => "healed".into(),
        })
    }

    /// Stops the flood, if one runs: its connections close, and the
    /// flooded master gets its descriptor limit back — or, if it ended
    /// itself (crash-only), is reaped so the heal restarts it. What happened.
    async fn end_flood(&mut self) -> Option<String> {
        let f = self.flood.take()?;
        f.stop.store(true, Ordering::Relaxed);
        let most = f.task.await.unwrap_or(0);
        let mut cluster = self.cluster.lock().await;
        let how = match cluster.master_exit(f.master) {
            Some(status) => format!("it ended itself ({status}) and is restarted"),
            None => match cluster.set_fd_soft_limit(f.master, f.old_limit) {
                Ok(_) => "it kept running".to_string(),
                Err(e) => format!("it kept running (its limit not restored: {e})"),
            },
        };
        Some(format!("flood over ({most} connections held at most); master {}: {how}", f.master))
    }

    /// Ends every fault (also after an error).
    pub async fn heal_all(&mut self) -> anyhow::Result<()> {
        self.end_flood().await;
        self.shared.puts_held.store(false, Ordering::Relaxed);
        self.shared.ops_held.store(false, Ordering::Relaxed);
        self.net.heal()?;
        let mut cluster = self.cluster.lock().await;
        cluster.free_disks()?;
        for id in cluster.voters.clone() {
            cluster.master_exit(id); // reaped, so heal restarts it
        }
        cluster.heal()
    }
}
