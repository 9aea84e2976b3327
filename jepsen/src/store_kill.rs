//! The rounds of `disk-stores` ([`Fault::StoreKill`]): store nodes with a
//! disk segment are SIGKILLed and restarted while the masters copy objects
//! to their disks, and a master fault runs alongside. Each round:
//!
//! 1. Draws the victim and how it comes back from a fixed pattern (store
//!    node 1 then 2, at once or past its client TTL, so a run of three
//!    rounds has both nodes and both comebacks) entered at a seeded place,
//!    and the master fault from the seed: none, a SIGKILL of the leader, or
//!    the leader cut off from the other masters.
//! 2. Kills the victim only once nothing lives in its memory alone: puts
//!    of both workloads are held, those in flight end, and the masters'
//!    listing must show no object whose every replica is in the victim's
//!    memory; else puts go on and the kill is tried again a little later
//!    (then given up). With the puts still held until the SIGKILL, no
//!    acknowledged object can be lost with the victim's memory: each one
//!    has a replica in the other node's memory or on a disk, which survives
//!    a kill. The register checkers stay exact (`no_lost_acked_puts` needs
//!    every acknowledged put that was not removed), and a disk object that
//!    is missing after its node came back is a loss, not bad luck.
//! 3. At once: restarts the victim (its disk keeps its segment id, now at
//!    the new process). Past the TTL: waits until the masters show its disk
//!    detached (ExpireClientKeepDisk), then restarts it (the disk must be
//!    attached again, same id, its objects readable).
//! 4. Holds the master fault [`FAULT_HOLD`], heals it, and waits until the
//!    victim's new memory segment and its old disk segment are attached.
//!
//! Rounds never overlap, and each ends with both store nodes serving, so
//! only one store node is ever down.

use std::time::{Duration, Instant};

use mooncake_client::MasterClient;
use mooncake_proto::master::{GetClusterInfoResponse, ObjectInfo, Replica, Tier};
use serde::Serialize;

use crate::chaos_cluster::{CLIENT_TTL, STORE_CLIENT_ID, Target, master_host, store_host};
use crate::committed_bytes::LIST_OBJECTS_MAX;
use crate::nemesis::{FAULT_HOLD, LEADER_POLL, Nemesis, find_leader};
use crate::scenario::Fault;
use crate::workload::OP_TIMEOUT;

/// Victims and comebacks, in order; each run enters it at a seeded place.
const PATTERN: [(u64, Comeback); 4] =
    [(1, Comeback::Immediate), (2, Comeback::PastTtl), (1, Comeback::PastTtl), (2, Comeback::Immediate)];
/// Master faults a round draws from.
const MASTER_FAULTS: [MasterFault; 3] = [MasterFault::None, MasterFault::KillLeader, MasterFault::IsolateLeader];
/// Tries to find the victim's memory holding nothing alone before the
/// round gives its kill up: objects put while the other node was down
/// stay there alone until their disk copy is recorded (a second or two).
const SAFE_KILL_TRIES: u32 = 10;
/// Pause between those tries (puts go on meanwhile).
const SAFE_KILL_RETRY: Duration = Duration::from_millis(400);
/// Longest wait for the puts in flight to end once puts are held: each
/// one ends within the workloads' op timeout.
const PUTS_DRAIN_MAX: Duration = Duration::from_millis(OP_TIMEOUT.as_millis() as u64 + 1_000);
/// Longest wait for a node killed past its TTL to show its disk detached:
/// a new leader (the master fault) counts every client alive for one TTL
/// from its election.
const DETACH_WAIT_MAX: Duration = Duration::from_secs(3 * CLIENT_TTL.as_secs());
/// How long the node stays down once its disk is detached: reads of its
/// disk-only objects meet REPLICA_IS_NOT_READY meanwhile.
const DOWN_PAST_DETACH: Duration = Duration::from_secs(1);
/// Longest wait for a restarted node's memory and disk to be attached (it
/// scrubs its disk first: 64 MiB).
const REMOUNT_MAX: Duration = Duration::from_secs(20);
/// How often the masters' segments are looked at while waiting.
const SEGMENTS_POLL: Duration = Duration::from_millis(100);

/// How a killed store node comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Comeback {
    /// Restarted right after the kill: the masters never expire it.
    Immediate,
    /// Restarted once the masters expired it and detached its disk.
    PastTtl,
}

/// The master fault held together with a store kill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MasterFault {
    None,
    KillLeader,
    IsolateLeader,
}

/// One round: what was done to which store node, and how it came back.
#[derive(Clone, Debug, Serialize)]
pub struct StoreKill {
    pub store: u64,
    pub comeback: Comeback,
    pub master_fault: MasterFault,
    /// Tries at which an object lived in the victim's memory alone (or the
    /// masters could not be asked): puts went on and the kill waited.
    pub deferred: u32,
    /// Objects in the victim's memory alone at the last such try.
    pub only_in_memory: usize,
    /// At the try that killed: objects the masters listed, and of those
    /// the ones with a replica in the victim's memory (each also elsewhere).
    pub objects_listed: usize,
    pub in_its_memory: usize,
    /// Whether the node was killed (else every try was deferred).
    pub killed: bool,
    /// Its disk segment before the kill.
    pub disk_before: Option<u64>,
    /// Seconds from the kill until the masters showed its disk detached
    /// (past-TTL comebacks; `None`: not seen within [`DETACH_WAIT_MAX`]).
    pub detached_after_s: Option<f64>,
    /// Seconds from the restart until its new memory segment and its disk
    /// were attached (`None`: not within [`REMOUNT_MAX`]).
    pub remounted_after_s: Option<f64>,
    /// The disk segment it serves afterwards (the same id, or its objects
    /// were dropped).
    pub disk_after: Option<u64>,
}

impl StoreKill {
    /// The node came back with the disk it had: attached, same segment id.
    pub fn disk_back(&self) -> bool {
        self.remounted_after_s.is_some() && self.disk_before.is_some() && self.disk_after == self.disk_before
    }
}

/// A store node's segments as the leader lists them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreSegments {
    pub memory: Option<u64>,
    /// Its disk segment and whether it is detached.
    pub disk: Option<(u64, bool)>,
}

/// The segments `owner` (a client id) holds in `info`.
pub fn store_segments(info: &GetClusterInfoResponse, owner: u64) -> StoreSegments {
    let mut out = StoreSegments::default();
    for usage in info.segments.iter().filter(|u| u.owner_client_id == owner) {
        let Some(seg) = &usage.segment else { continue };
        if seg.tier == Tier::Ssd as i32 {
            out.disk = Some((seg.id, usage.detached));
        } else {
            out.memory = Some(seg.id);
        }
    }
    out
}

/// How many objects have a replica in the memory of the store node at
/// `host`, and how many have every replica there: a SIGKILL of that node
/// would lose those.
pub fn in_memory_of(objects: &[ObjectInfo], host: &str) -> MemoryCount {
    let in_memory = |r: &Replica| r.tier == Tier::Dram as i32 && r.host_id == host;
    MemoryCount {
        listed: objects.len(),
        with_replica: objects.iter().filter(|o| o.replicas.iter().any(in_memory)).count(),
        alone: objects.iter().filter(|o| !o.replicas.is_empty() && o.replicas.iter().all(in_memory)).count(),
    }
}

/// What [`in_memory_of`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryCount {
    pub listed: usize,
    pub with_replica: usize,
    pub alone: usize,
}

impl Nemesis {
    /// One round (see the module doc). The gap before it is the caller's.
    pub(crate) async fn store_kill_round(&mut self) -> anyhow::Result<()> {
        let next = match self.store_kill_next {
            Some(n) => n,
            None => self.rng.below(PATTERN.len() as u64),
        };
        self.store_kill_next = Some(next + 1);
        let (store, comeback) = PATTERN[(next % PATTERN.len() as u64) as usize];
        let master_fault = *self.rng.pick(&MASTER_FAULTS).unwrap_or(&MasterFault::None);
        let before = self.segments_of(store).await.unwrap_or_default();
        let disk_before = before.disk.map(|(id, _)| id);
        let mut kill = StoreKill {
            store,
            comeback,
            master_fault,
            deferred: 0,
            only_in_memory: 0,
            objects_listed: 0,
            in_its_memory: 0,
            killed: false,
            disk_before,
            detached_after_s: None,
            remounted_after_s: None,
            disk_after: None,
        };
        self.kill_when_safe(&mut kill).await?;
        let killed_at = Instant::now();
        let mut restarted_at = killed_at;
        if kill.killed && comeback == Comeback::Immediate {
            self.cluster.lock().await.restart(Target::store(store))?;
            restarted_at = Instant::now();
        }
        let (master_detail, killed_master) = self.inject_master_fault(master_fault).await?;
        self.record("start", Fault::StoreKill, start_detail(&kill, &master_detail));
        // Restarted at once, the node mounts again under the master fault.
        let hold_end = Instant::now() + FAULT_HOLD;
        if kill.killed && comeback == Comeback::Immediate {
            self.wait_remounted(&mut kill, before.memory, restarted_at, hold_end).await;
        }
        tokio::time::sleep_until(hold_end.into()).await;
        self.net.heal()?;
        if let Some(id) = killed_master {
            self.cluster.lock().await.restart(Target::Master(id))?;
        }
        if kill.killed && comeback == Comeback::PastTtl {
            kill.detached_after_s = self.wait_detached(store, killed_at).await;
            tokio::time::sleep(DOWN_PAST_DETACH).await;
            self.cluster.lock().await.restart(Target::store(store))?;
            restarted_at = Instant::now();
        }
        if kill.killed && kill.remounted_after_s.is_none() {
            self.wait_remounted(&mut kill, before.memory, restarted_at, restarted_at + REMOUNT_MAX).await;
        }
        self.record("heal", Fault::StoreKill, heal_detail(&kill));
        self.store_kills.push(kill);
        Ok(())
    }

    /// Step 2 of the round: SIGKILL the victim once its memory holds
    /// nothing alone, puts held from the look until the kill.
    async fn kill_when_safe(&mut self, kill: &mut StoreKill) -> anyhow::Result<()> {
        let host = self.net.host_ip(&store_host(kill.store))?.to_string();
        for _ in 0..SAFE_KILL_TRIES {
            let count = match self.shared.hold_puts(PUTS_DRAIN_MAX).await {
                true => self.count_in_memory(&host).await,
                false => None,
            };
            if let Some(count @ MemoryCount { alone: 0, .. }) = count {
                let killed = self.cluster.lock().await.kill(Target::store(kill.store));
                self.shared.release_puts();
                killed?;
                kill.killed = true;
                (kill.objects_listed, kill.in_its_memory) = (count.listed, count.with_replica);
                return Ok(());
            }
            self.shared.release_puts();
            kill.deferred += 1;
            kill.only_in_memory = count.map_or(kill.only_in_memory, |c| c.alone);
            tokio::time::sleep(SAFE_KILL_RETRY).await;
        }
        Ok(())
    }

    /// The masters' objects in `host`'s memory (`None`: no answer).
    async fn count_in_memory(&self, host: &str) -> Option<MemoryCount> {
        let client = self.leader_client().await?;
        let listed = tokio::time::timeout(OP_TIMEOUT, client.list_objects("", LIST_OBJECTS_MAX)).await.ok()?.ok()?;
        Some(in_memory_of(&listed, host))
    }

    async fn leader_client(&self) -> Option<MasterClient> {
        let addrs = self.cluster.lock().await.master_addrs().ok()?;
        MasterClient::new(self.access.master(addrs)).ok()
    }

    /// Store node `store`'s segments as the leader lists them.
    async fn segments_of(&self, store: u64) -> Option<StoreSegments> {
        let client = self.leader_client().await?;
        let info = tokio::time::timeout(OP_TIMEOUT, client.cluster_info()).await.ok()?.ok()?;
        Some(store_segments(&info, STORE_CLIENT_ID + store))
    }

    /// Injects the master fault; returns what it did and the master it
    /// killed (to restart at the heal).
    async fn inject_master_fault(&mut self, fault: MasterFault) -> anyhow::Result<(String, Option<u64>)> {
        if fault == MasterFault::None {
            return Ok(("no master fault".into(), None));
        }
        let (voters, addrs) = {
            let c = self.cluster.lock().await;
            (c.voters.clone(), c.master_addrs()?)
        };
        let Some(leader) = find_leader(&self.access, &addrs).await else {
            return Ok(("no leader found: no master fault".into(), None));
        };
        match fault {
            MasterFault::KillLeader => {
                self.cluster.lock().await.kill(Target::Master(leader))?;
                Ok((format!("SIGKILL leader {leader}"), Some(leader)))
            }
            _ => {
                let l = master_host(leader);
                let drops: Vec<(String, String)> = voters
                    .iter()
                    .filter(|v| **v != leader)
                    .flat_map(|o| [(l.clone(), master_host(*o)), (master_host(*o), l.clone())])
                    .collect();
                let refs: Vec<(&str, &str)> = drops.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
                self.net.partition(&refs)?;
                Ok((format!("leader {leader} cut off from the other masters"), None))
            }
        }
    }

    /// Seconds from `since` until the leader lists `store`'s disk detached.
    async fn wait_detached(&self, store: u64, since: Instant) -> Option<f64> {
        while since.elapsed() < DETACH_WAIT_MAX {
            if let Some(StoreSegments { disk: Some((_, true)), .. }) = self.segments_of(store).await {
                return Some(since.elapsed().as_secs_f64());
            }
            tokio::time::sleep(SEGMENTS_POLL.max(LEADER_POLL)).await;
        }
        None
    }

    /// Waits (until `until`) for the node restarted at `start` to have its
    /// new memory segment (not `memory_before`) and a disk segment
    /// attached; records when and which disk.
    async fn wait_remounted(&self, kill: &mut StoreKill, memory_before: Option<u64>, start: Instant, until: Instant) {
        while Instant::now() < until {
            if let Some(seen) = self.segments_of(kill.store).await
                && seen.memory.is_some()
                && seen.memory != memory_before
                && let Some((disk, false)) = seen.disk
            {
                kill.remounted_after_s = Some(start.elapsed().as_secs_f64());
                kill.disk_after = Some(disk);
                return;
            }
            tokio::time::sleep(SEGMENTS_POLL).await;
        }
    }
}

fn start_detail(kill: &StoreKill, master: &str) -> String {
    let how = match kill.comeback {
        Comeback::Immediate => "restarted at once",
        Comeback::PastTtl => "restarted past its client TTL",
    };
    match kill.killed {
        true => format!(
            "SIGKILL store node {} ({how}; {} of {} objects had a replica in its memory, none only there; \
             {} deferral(s) before); {master}",
            kill.store, kill.in_its_memory, kill.objects_listed, kill.deferred
        ),
        false => format!(
            "store node {} NOT killed: {} object(s) still only in its memory after {} tries; {master}",
            kill.store, kill.only_in_memory, kill.deferred
        ),
    }
}

fn heal_detail(kill: &StoreKill) -> String {
    if !kill.killed {
        return "master fault healed".into();
    }
    let detached = match (kill.comeback, kill.detached_after_s) {
        (Comeback::Immediate, _) => String::new(),
        (Comeback::PastTtl, Some(s)) => format!("disk detached {s:.1} s after the kill; "),
        (Comeback::PastTtl, None) => "disk never shown detached; ".into(),
    };
    match (kill.remounted_after_s, kill.disk_back()) {
        (Some(s), true) => {
            format!("{detached}memory and disk {:?} attached {s:.1} s after the restart", kill.disk_after)
        }
        (Some(s), false) => format!(
            "{detached}attached {s:.1} s after the restart but with disk {:?}, was {:?}",
            kill.disk_after, kill.disk_before
        ),
        (None, _) => format!("{detached}NOT attached within {} s of the restart", REMOUNT_MAX.as_secs()),
    }
}

#[cfg(test)]
mod tests {
    use mooncake_proto::master::{Segment, SegmentUsage};

    use super::*;

    fn replica(host: &str, tier: Tier) -> Replica {
        Replica { host_id: host.into(), tier: tier as i32, ..Replica::default() }
    }

    fn object(replicas: Vec<Replica>) -> ObjectInfo {
        ObjectInfo { key: "k".into(), replicas, ..ObjectInfo::default() }
    }

    #[test]
    fn only_objects_wholly_in_the_victims_memory_block_its_kill() {
        let (a, b) = ("10.213.47.14", "10.213.47.15");
        let objects = vec![
            object(vec![replica(a, Tier::Dram)]),
            object(vec![replica(a, Tier::Dram), replica(b, Tier::Dram)]),
            object(vec![replica(a, Tier::Dram), replica(a, Tier::Ssd)]),
            object(vec![replica(a, Tier::Ssd)]),
            object(vec![replica(b, Tier::Dram)]),
            object(vec![]),
        ];
        let on_a = in_memory_of(&objects, a);
        assert_eq!(
            on_a,
            MemoryCount { listed: 6, with_replica: 3, alone: 1 },
            "its disk, the other node's memory survive"
        );
        assert_eq!(in_memory_of(&objects, b).alone, 1);
    }

    #[test]
    fn a_store_nodes_segments_are_its_memory_and_its_disk() {
        let usage = |id, owner, tier: Tier, detached| SegmentUsage {
            segment: Some(Segment { id, tier: tier as i32, ..Segment::default() }),
            owner_client_id: owner,
            detached,
            ..SegmentUsage::default()
        };
        let info = GetClusterInfoResponse {
            segments: vec![
                usage(1, 7, Tier::Dram, false),
                usage(2, 7, Tier::Ssd, true),
                usage(3, 8, Tier::Dram, false),
            ],
            ..GetClusterInfoResponse::default()
        };
        assert_eq!(store_segments(&info, 7), StoreSegments { memory: Some(1), disk: Some((2, true)) });
        assert_eq!(store_segments(&info, 8), StoreSegments { memory: Some(3), disk: None });
        assert_eq!(store_segments(&info, 9), StoreSegments::default());
    }

    #[test]
    fn a_disk_is_back_only_attached_under_its_old_id() {
        let mut kill = StoreKill {
            store: 1,
            comeback: Comeback::PastTtl,
            master_fault: MasterFault::None,
            deferred: 0,
            only_in_memory: 0,
            objects_listed: 0,
            in_its_memory: 0,
            killed: true,
            disk_before: Some(5),
            detached_after_s: Some(5.2),
            remounted_after_s: Some(0.8),
            disk_after: Some(5),
        };
        assert!(kill.disk_back());
        kill.disk_after = Some(6);
        assert!(!kill.disk_back(), "a new disk segment: its objects were dropped");
        kill.disk_after = Some(5);
        kill.remounted_after_s = None;
        assert!(!kill.disk_back());
    }
}
