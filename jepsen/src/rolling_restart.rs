//! `rolling-restart`: every store node restarted in turn, under load, as an
//! operator rolls an upgrade (issue 39; docs/OPERATIONS.md, "Restarting a
//! store node"). The store nodes keep their memory in /dev/shm files
//! (`ClusterOptions::shm_stores`) and keep their client ids and
//! credentials. A round, for store node 1 then 2:
//!
//! 1. stop it: SIGTERM (a clean stop hands the segment over) or, every
//!    other round, SIGKILL (a crash);
//! 2. start it again at once with the same flags;
//! 3. wait until it serves again: the masters list its memory segment and
//!    its transfer port answers; only then is the next node restarted.
//!
//! Every register put asks for a replica on each store node, so a restart
//! that did not bring its memory back would leave each object one replica,
//! and the second node's restart would lose it: `no_lost_acked_puts`
//! catches that. The `store_restarts_reattach` checker
//! ([`crate::report::CheckerVerdict::store_restarts`]) also requires each
//! node to have come back under the segment id it had (its memory
//! re-attached, not a new empty segment) within [`BACK_MAX`].

use std::time::{Duration, Instant};

use mooncake_client::MasterClient;
use serde::Serialize;

use crate::chaos_cluster::{STORE_CLIENT_ID, STORE_PORT, Target, store_host};
use crate::nemesis::{LEADER_POLL, Nemesis};
use crate::scenario::Fault;
use crate::store_kill::store_segments;

/// How long a restarted node may take to serve again.
const BACK_MAX: Duration = Duration::from_secs(20);
/// How long a SIGTERMed node may take to exit.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// The pause between one node serving again and the next node's stop.
const BETWEEN_NODES: Duration = Duration::from_secs(1);

/// How a node was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    Sigterm,
    Sigkill,
}

/// One restart of one store node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoreRestart {
    pub store: u64,
    pub stop: Stop,
    /// Its memory segment before the stop and once it served again.
    pub memory_before: Option<u64>,
    pub memory_after: Option<u64>,
    /// Seconds from the restart until it served again (`None`: not within
    /// [`BACK_MAX`]).
    pub back_after_s: Option<f64>,
}

impl StoreRestart {
    /// The node came back serving the memory it had (the same segment).
    pub fn reattached(&self) -> bool {
        self.back_after_s.is_some() && self.memory_before.is_some() && self.memory_after == self.memory_before
    }
}

/// The memory segment the masters list for store node `n`, if one answers.
async fn memory_of(master: &MasterClient, n: u64) -> Option<u64> {
    let info = master.cluster_info().await.ok()?;
    store_segments(&info, STORE_CLIENT_ID + n).memory
}

impl Nemesis {
    /// One round of `rolling-restart` (see the module doc).
    pub(crate) async fn rolling_restart_round(&mut self) -> anyhow::Result<()> {
        let addrs = self.cluster.lock().await.master_addrs()?;
        let master = MasterClient::new(self.access.master(addrs))?;
        let stop = match self.store_restarts.len() % 4 {
            0 | 1 => Stop::Sigterm,
            _ => Stop::Sigkill,
        };
        for n in 1..=2u64 {
            let target = Target::store(n);
            let memory_before = memory_of(&master, n).await;
            {
                let mut cluster = self.cluster.lock().await;
                match stop {
                    Stop::Sigterm => cluster.stop(target, STOP_GRACE)?,
                    Stop::Sigkill => cluster.kill(target)?,
                }
                cluster.restart(target)?;
            }
            self.record("start", Fault::RollingRestart, format!("{stop:?} store node {n}, restarted at once"));
            let started = Instant::now();
            let addr = format!("{}:{STORE_PORT}", self.net.host_ip(&store_host(n))?);
            let mut restart = StoreRestart { store: n, stop, memory_before, memory_after: None, back_after_s: None };
            while started.elapsed() < BACK_MAX {
                let serving = tokio::net::TcpStream::connect(&addr).await.is_ok();
                if serving && memory_of(&master, n).await.is_some() {
                    restart.back_after_s = Some(started.elapsed().as_secs_f64());
                    break;
                }
                tokio::time::sleep(LEADER_POLL).await;
            }
            // Its registration follows its bind within milliseconds; a node
            // that could not re-attach renames its memory to a new segment
            // then. What the masters list a moment later is what it serves.
            tokio::time::sleep(BETWEEN_NODES).await;
            restart.memory_after = memory_of(&master, n).await;
            let detail = format!(
                "store node {n} back after {}, memory segment {} (was {})",
                restart.back_after_s.map_or("never".into(), |t| format!("{t:.1} s")),
                restart.memory_after.map_or("none".into(), |m| format!("{m:016x}")),
                restart.memory_before.map_or("none".into(), |m| format!("{m:016x}")),
            );
            self.record("heal", Fault::RollingRestart, detail);
            self.store_restarts.push(restart);
        }
        Ok(())
    }
}
