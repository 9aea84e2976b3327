//! The nemesis: every few seconds it draws a fault of the scenario from the
//! seeded RNG, injects it for a while, and heals; every action goes to the
//! fault log with its time. Runs on a thread inside the client namespace.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mooncake_client::{MasterClient, MasterClientConfig};
use serde::Serialize;
use tokio::sync::Mutex;

use crate::chaos_cluster::{ChaosCluster, Target, master_host};
use crate::net::Network;
use crate::rng::Rng;
use crate::scenario::Fault;
use crate::workload::Shared;

/// How long a fault lasts before it is healed.
const FAULT_HOLD: Duration = Duration::from_secs(3);
/// Quiet time between faults.
const FAULT_GAP: Duration = Duration::from_secs(3);

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
    pub cluster: Arc<Mutex<ChaosCluster>>,
    pub shared: Arc<Shared>,
    pub faults: &'static [Fault],
    pub rng: Rng,
    pub log: Vec<FaultEvent>,
    pub membership_done: bool,
}

/// The leader most masters report, and the other voters.
pub async fn find_leader(addrs: &[String]) -> Option<u64> {
    let mut votes = std::collections::BTreeMap::new();
    for a in addrs {
        let Ok(c) = MasterClient::new(MasterClientConfig::new(vec![a.clone()])) else { continue };
        if let Ok(info) = tokio::time::timeout(Duration::from_secs(1), c.cluster_info_of(a))
            .await
            .unwrap_or(Err(mooncake_client::MasterError::Config("timeout".into())))
            && info.leader_id != 0
        {
            *votes.entry(info.leader_id).or_insert(0) += 1;
        }
    }
    votes.into_iter().max_by_key(|(_, n)| *n).map(|(id, _)| id)
}

impl Nemesis {
    fn record(&mut self, phase: &'static str, fault: Fault, detail: String) {
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
            tokio::time::sleep(FAULT_GAP).await;
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let Some(&fault) = self.rng.pick(self.faults) else { break };
            let detail = self.inject(fault).await?;
            self.record("start", fault, detail);
            tokio::time::sleep(FAULT_HOLD).await;
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
        Ok((voters, find_leader(&addrs).await))
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
            Fault::PowerLoss => {
                let victim = *self.rng.pick(&voters).unwrap_or(&leader);
                self.cluster.lock().await.power_cut(victim)?;
                Ok(format!("power cut of master {victim} (unflushed writes dropped), restarted"))
            }
            Fault::Membership => self.swap_member(leader, &others).await,
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
        let (spare_addr, addrs) = {
            let mut c = self.cluster.lock().await;
            c.start_spare(4)?;
            (crate::chaos_cluster::master_addr(&self.net, 4)?, c.master_addrs()?)
        };
        let client = MasterClient::new(MasterClientConfig::new(addrs))?;
        client.add_learner(4, &spare_addr).await?;
        let mut voters: Vec<u64> = vec![leader];
        voters.extend(others.iter().copied().filter(|o| *o != out));
        voters.push(4);
        client.change_membership(voters.clone(), false).await?;
        {
            let mut c = self.cluster.lock().await;
            c.voters = voters.clone();
            c.kill(Target::Master(out))?;
        }
        self.membership_done = true;
        Ok(format!("master 4 added, master {out} removed; voters {voters:?}"))
    }

    async fn heal(&mut self, fault: Fault) -> anyhow::Result<String> {
        self.net.heal()?;
        self.cluster.lock().await.heal()?;
        Ok(match fault {
            Fault::Membership => "new membership kept".into(),
            _ => "healed".into(),
        })
    }

    /// Ends every fault (also after an error).
    pub async fn heal_all(&mut self) -> anyhow::Result<()> {
        self.net.heal()?;
        self.cluster.lock().await.heal()
    }
}
