//! What a `disk-stores` run did, and its end: once the workloads stopped,
//! every store node must serve its memory and its disk again
//! ([`wait_disks_attached`]) before anything is read back; then the disk
//! checker (`disk_objects.rs`) reads the disk replicas of every value seen
//! on a disk, and the store kills are judged (`disk_remounted`: every
//! killed node came back with its disk attached under the same id).

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, MasterClient};
use serde::Serialize;

use crate::access::Access;
use crate::chaos_cluster::STORE_CLIENT_ID;
use crate::disk_objects::{self, DiskObjectsVerdict};
use crate::history::{History, OpKind, Outcome};
use crate::report::CheckerVerdict;
use crate::store_kill::{Comeback, MasterFault, StoreKill, store_segments};
use crate::tier_reader::TierRead;

/// Store nodes of a run (each with a memory and a disk segment).
const STORES: u64 = 2;
/// Longest wait at the end for every store node's memory and disk.
const ATTACH_WAIT_MAX: Duration = Duration::from_secs(45);
/// How often the masters' segments are looked at meanwhile.
const ATTACH_POLL: Duration = Duration::from_millis(200);

/// The counts of a `disk-stores` run (summary line and `verdict.json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct DiskStoresReport {
    /// Rounds of the nemesis, and of those the store nodes killed.
    pub rounds: usize,
    pub kills: usize,
    pub immediate: usize,
    pub past_ttl: usize,
    /// Rounds with a master fault next to the kill.
    pub master_faults: usize,
    /// Tries that waited because an object lived in the victim's memory alone.
    pub deferrals: u32,
    /// Past-TTL kills whose disk the masters showed detached.
    pub detached_seen: usize,
    /// Killed nodes back with their disk attached under the same id.
    pub disks_back: usize,
    pub remount_max_s: f64,
    /// Register puts acknowledged, and register reads answered (the
    /// workload's gets and the tier reader's).
    pub puts_acked: usize,
    pub reads_ok: usize,
    /// The tier reader's reads of register keys that read bytes, and of
    /// those: answers that listed a disk replica, that listed disk replicas
    /// only, and bytes served by a disk replica.
    pub tier_reads: usize,
    pub listed_disk: usize,
    pub disk_only: usize,
    pub served_from_disk: usize,
    /// The same of its reads of lease objects stored a while ago.
    pub lease_tier_reads: usize,
    pub lease_disk_only: usize,
    pub lease_served_from_disk: usize,
    /// The lease workload's own reads answered with disk replicas only.
    pub lease_workload_disk_only: u64,
    /// Disk-backed values checked at the end, and disk replicas read equal.
    pub disk_backed: usize,
    pub disk_replicas_ok: usize,
    /// Every round, as it went.
    pub rounds_detail: Vec<StoreKill>,
}

impl DiskStoresReport {
    pub fn new(kills: &[StoreKill], reads: &[TierRead], history: &History, lease_workload_disk_only: u64) -> Self {
        let killed: Vec<&StoreKill> = kills.iter().filter(|k| k.killed).collect();
        let count = |lease: bool, want: fn(&TierRead) -> bool| {
            reads.iter().filter(|r| r.lease == lease && r.value.is_some() && want(r)).count()
        };
        let ok =
            |want: fn(&OpKind, &Outcome) -> bool| history.records().iter().filter(|r| want(&r.op, &r.outcome)).count();
        DiskStoresReport {
            rounds: kills.len(),
            kills: killed.len(),
            immediate: killed.iter().filter(|k| k.comeback == Comeback::Immediate).count(),
            past_ttl: killed.iter().filter(|k| k.comeback == Comeback::PastTtl).count(),
            master_faults: kills.iter().filter(|k| k.master_fault != MasterFault::None).count(),
            deferrals: kills.iter().map(|k| k.deferred).sum(),
            detached_seen: killed.iter().filter(|k| k.detached_after_s.is_some()).count(),
            disks_back: killed.iter().filter(|k| k.disk_back()).count(),
            remount_max_s: killed.iter().filter_map(|k| k.remounted_after_s).fold(0.0, f64::max),
            puts_acked: ok(|op, outcome| matches!(op, OpKind::Put { .. }) && *outcome == Outcome::Ok),
            reads_ok: ok(|op, outcome| *op == OpKind::Get && matches!(outcome, Outcome::GetOk { .. })),
            tier_reads: count(false, |_| true),
            listed_disk: count(false, |r| r.listed_disk),
            disk_only: count(false, |r| r.disk_only),
            served_from_disk: count(false, |r| r.served_from_disk),
            lease_tier_reads: count(true, |_| true),
            lease_disk_only: count(true, |r| r.disk_only),
            lease_served_from_disk: count(true, |r| r.served_from_disk),
            lease_workload_disk_only,
            disk_backed: 0,
            disk_replicas_ok: 0,
            rounds_detail: kills.to_vec(),
        }
    }
}

impl fmt::Display for DiskStoresReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store kills {} of {} rounds (at once {}, past TTL {}; detached seen {}; {} deferrals), \
             with a master fault {}; disks back {}/{} (max {:.1} s); register puts acked {}, reads {}; \
             register tier reads {} (listed a disk {}, disk only {}, served from disk {}); \
             old lease objects read {} (disk only {}, served from disk {}); lease workload reads disk only {}; \
             disk-backed values checked {} ({} disk replicas equal)",
            self.kills,
            self.rounds,
            self.immediate,
            self.past_ttl,
            self.detached_seen,
            self.deferrals,
            self.master_faults,
            self.disks_back,
            self.kills,
            self.remount_max_s,
            self.puts_acked,
            self.reads_ok,
            self.tier_reads,
            self.listed_disk,
            self.disk_only,
            self.served_from_disk,
            self.lease_tier_reads,
            self.lease_disk_only,
            self.lease_served_from_disk,
            self.lease_workload_disk_only,
            self.disk_backed,
            self.disk_replicas_ok
        )
    }
}

/// Waits until every store node's memory segment and disk segment are
/// attached (leader's view); returns whether they were within the wait.
pub async fn wait_disks_attached(access: &Access, addrs: &[String]) -> bool {
    let Ok(client) = MasterClient::new(access.master(addrs.to_vec())) else { return false };
    let deadline = Instant::now() + ATTACH_WAIT_MAX;
    while Instant::now() < deadline {
        if let Ok(info) = client.cluster_info().await {
            let all = (1..=STORES).all(|n| {
                let s = store_segments(&info, STORE_CLIENT_ID + n);
                s.memory.is_some() && matches!(s.disk, Some((_, false)))
            });
            if all {
                return true;
            }
        }
        tokio::time::sleep(ATTACH_POLL).await;
    }
    false
}

/// The disk checker: the survivors' disk replicas read raw, judged against
/// the final reads.
pub async fn check_disk_objects(
    access: &Access,
    addrs: &[String],
    history: &History,
    reads: &[TierRead],
    final_reads: &BTreeMap<String, Option<u64>>,
) -> anyhow::Result<DiskObjectsVerdict> {
    let survivors = disk_objects::disk_backed_survivors(history, reads);
    let client = Client::connect(access.client(addrs.to_vec())).await.context("disk checker client")?;
    let mut disk_reads = BTreeMap::new();
    for s in &survivors {
        if disk_reads.contains_key(&s.key) {
            continue;
        }
        let read = disk_objects::read_disk_replicas(&client, &s.key).await;
        let read = read.unwrap_or_else(|e| {
            vec![disk_objects::DiskReplicaRead { segment_id: 0, endpoint: "?".into(), read: Err(e) }]
        });
        disk_reads.insert(s.key.clone(), read);
    }
    client.close().await;
    Ok(disk_objects::judge(&survivors, final_reads, &disk_reads))
}

impl CheckerVerdict {
    /// Values seen on a disk are there at the end, on a disk, intact.
    pub fn from_disk_objects(v: &DiskObjectsVerdict, all_attached: bool) -> Self {
        let mut problems = v.problems.clone();
        if v.more_problems > 0 {
            problems.push(format!("... and {} more", v.more_problems));
        }
        if !all_attached {
            problems
                .push("(not a violation by itself) a store node's memory or disk was not attached at the end".into());
        }
        CheckerVerdict { checker: "disk_objects".into(), valid: v.is_valid(), checked: v.checked, problems }
    }

    /// Every killed store node came back with its disk attached under the
    /// same id; a run whose rounds all gave their kill up checked nothing.
    pub fn disk_remounted(kills: &[StoreKill]) -> Self {
        let mut problems: Vec<String> = kills
            .iter()
            .enumerate()
            .filter(|(_, k)| k.killed && !k.disk_back())
            .map(|(i, k)| match k.remounted_after_s {
                None => format!("round {}: store node {} was not attached again after its restart", i + 1, k.store),
                Some(_) => format!(
                    "round {}: store node {} came back with disk segment {:?}, had {:?} (its disk objects dropped)",
                    i + 1,
                    k.store,
                    k.disk_after,
                    k.disk_before
                ),
            })
            .collect();
        let killed = kills.iter().filter(|k| k.killed).count();
        if killed == 0 && !kills.is_empty() {
            problems.push(format!(
                "no store node was killed in {} rounds: each try found objects only in the victim's memory",
                kills.len()
            ));
        }
        CheckerVerdict { checker: "disk_remounted".into(), valid: problems.is_empty(), checked: killed, problems }
    }
}
