//! `zone-loss`: every store node of one zone dies at once. The chaos
//! cluster's store nodes are in two zones (`s1` in [`LOST_ZONE`], `s2` in
//! the other), and every register put asks for two replicas, so placement
//! (docs/OPERATIONS.md, "Failure domains") puts one in each zone. A round:
//!
//! 1. SIGKILL every store node of [`LOST_ZONE`];
//! 2. wait until the masters expired it (its segment is gone from the
//!    cluster): from then on only the other zone's replicas are listed;
//! 3. read every register key ever in play, as one more process of the
//!    register history, so the linearizability checker judges each read
//!    (an acknowledged object that is not found is a violation, bytes are
//!    verified as every get's);
//! 4. restart the zone's store node and wait until its segment is mounted;
//! 5. wait until every register key has two replicas again: the objects
//!    that lost their replica with the zone had nowhere to go while it was
//!    down (one segment per zone), so repair must bring them back once the
//!    zone's segment joins (docs/OPERATIONS.md, "Lost replicas").
//!
//! The `zone_loss_reads` checker ([`crate::report::CheckerVerdict::zone_loss`])
//! requires that the zone was lost and its reads answered: a read that
//! errs while the other zone holds the object means a replica was not
//! where placement said, or a reader did not fail over; and requires that
//! every object was whole again within [`REPAIR_MAX`] of the remount.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mooncake_client::{ClientError, MasterClient};
use serde::Serialize;

use crate::chaos_cluster::{CLIENT_TTL, Target};
use crate::history::{OpKind, OpRecord, Outcome, ProcessId};
use crate::nemesis::{LEADER_POLL, Nemesis};
use crate::scenario::Fault;
use crate::workload::{OP_TIMEOUT, connect_with_retry, decode_value};

/// The zone that is lost: store node 1's (`--zone`).
pub const LOST_ZONE: &str = "zone-a";
/// The zone that stays: store node 2's.
pub const KEPT_ZONE: &str = "zone-b";
/// The register history's process for the outage reads.
pub const ZONE_READER: ProcessId = ProcessId(1_000);
/// How long past the client TTL the masters may take to expire the zone.
const EXPIRY_MARGIN: Duration = Duration::from_secs(10);
/// How long the zone's store node may take to mount its segment again.
const REMOUNT_MAX: Duration = Duration::from_secs(20);
/// How long after the remount every object may take to have its two
/// replicas again (the copy duty plans every 250 ms, 64 copies at once).
pub const REPAIR_MAX: Duration = Duration::from_secs(20);
/// Segments of the cluster with both zones up.
const SEGMENTS: u64 = 2;

/// The zone of store node `n`.
pub fn zone_of_store(n: u64) -> &'static str {
    if n == 1 { LOST_ZONE } else { KEPT_ZONE }
}

/// One loss of the zone.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ZoneOutage {
    /// Seconds from the kill until the masters no longer listed the zone's
    /// segment (`None`: not within the client TTL and a margin).
    pub expired_after_s: Option<f64>,
    /// Keys read while the zone was down.
    pub reads: u64,
    /// Reads answered: the value, or not found.
    pub answered: u64,
    /// Reads that erred or timed out, with the first error.
    pub failed: u64,
    pub first_error: Option<String>,
    /// Seconds from the restart until its segment was mounted again.
    pub remounted_after_s: Option<f64>,
    /// Keys with one replica when the segment was mounted again.
    pub single_at_remount: u64,
    /// Seconds from the remount until every key had two replicas again
    /// (`None`: not within [`REPAIR_MAX`]).
    pub repaired_after_s: Option<f64>,
    /// Keys still with one replica at the last look.
    pub single_at_end: u64,
}

/// How many segments the masters list now, if one answers.
async fn segment_count(master: &MasterClient) -> Option<u64> {
    master.cluster_info().await.ok().map(|i| i.segment_count)
}

/// How many of `keys` have fewer than two replicas now (not found: none);
/// `None` when a look failed.
async fn single_replica_keys(master: &MasterClient, keys: &[String]) -> Option<u64> {
    let mut single = 0;
    for key in keys {
        match master.get_replica_list(0, key).await {
            Ok(r) if r.replicas.len() < SEGMENTS as usize => single += 1,
            Ok(_) => {}
            Err(e) if e.code() == Some(mooncake_proto::ErrorCode::ObjectNotFound) => {}
            Err(_) => return None,
        }
    }
    Some(single)
}

/// Polls until `done` holds of the segment count, at most `max`; the
/// seconds it took.
async fn wait_segments(master: &MasterClient, max: Duration, done: impl Fn(u64) -> bool) -> Option<f64> {
    let start = Instant::now();
    while start.elapsed() < max {
        if segment_count(master).await.is_some_and(&done) {
            return Some(start.elapsed().as_secs_f64());
        }
        tokio::time::sleep(LEADER_POLL).await;
    }
    None
}

impl Nemesis {
    /// One round of `zone-loss` (see the module doc).
    pub(crate) async fn zone_loss_round(&mut self) -> anyhow::Result<()> {
        let addrs = self.cluster.lock().await.master_addrs()?;
        let master = MasterClient::new(self.access.master(addrs.clone()))?;
        let mut outage = ZoneOutage::default();
        self.cluster.lock().await.kill(Target::Store)?;
        self.record("start", Fault::ZoneLoss, format!("SIGKILL every store node of {LOST_ZONE} (s1)"));
        outage.expired_after_s = wait_segments(&master, CLIENT_TTL + EXPIRY_MARGIN, |n| n < SEGMENTS).await;
        if outage.expired_after_s.is_some() {
            let mut cfg = self.access.client(addrs);
            cfg.tcp.request_timeout = OP_TIMEOUT;
            let reader = connect_with_retry(cfg).await?;
            for key in self.shared.all_keys().await {
                let invoke_ns = self.shared.now_ns();
                let got = tokio::time::timeout(OP_TIMEOUT, reader.get(&key)).await;
                let outcome = match got {
                    Ok(Ok(bytes)) => match decode_value(&bytes) {
                        Some(v) => {
                            self.shared.verified_reads.fetch_add(1, Ordering::Relaxed);
                            Outcome::GetOk { value: Some(v) }
                        }
                        None => {
                            self.shared.corrupt_reads.fetch_add(1, Ordering::Relaxed);
                            Outcome::Unknown
                        }
                    },
                    Ok(Err(ClientError::NotFound(_))) => Outcome::GetOk { value: None },
                    Ok(Err(e)) => {
                        outage.first_error.get_or_insert_with(|| format!("{key}: {e}"));
                        Outcome::Unknown
                    }
                    Err(_) => {
                        outage.first_error.get_or_insert_with(|| format!("{key}: no answer in {OP_TIMEOUT:?}"));
                        Outcome::Unknown
                    }
                };
                outage.reads += 1;
                match outcome {
                    Outcome::Unknown => outage.failed += 1,
                    _ => outage.answered += 1,
                }
                let complete_ns = Some(self.shared.now_ns());
                let record = OpRecord { process: ZONE_READER, key, op: OpKind::Get, invoke_ns, complete_ns, outcome };
                self.shared.records.lock().await.push(record);
            }
            reader.close().await;
        }
        self.cluster.lock().await.heal()?;
        outage.remounted_after_s = wait_segments(&master, REMOUNT_MAX, |n| n >= SEGMENTS).await;
        if outage.remounted_after_s.is_some() {
            let keys = self.shared.all_keys().await;
            let start = Instant::now();
            let mut first = true;
            while start.elapsed() < REPAIR_MAX {
                if let Some(single) = single_replica_keys(&master, &keys).await {
                    if first {
                        outage.single_at_remount = single;
                        first = false;
                    }
                    outage.single_at_end = single;
                    if single == 0 {
                        outage.repaired_after_s = Some(start.elapsed().as_secs_f64());
                        break;
                    }
                }
                tokio::time::sleep(LEADER_POLL).await;
            }
        }
        let detail = format!(
            "{LOST_ZONE} back; expired after {:?} s, {} of {} reads answered while it was down, mounted again after \
             {:?} s, {} keys with one replica then, every key whole again after {:?} s",
            outage.expired_after_s,
            outage.answered,
            outage.reads,
            outage.remounted_after_s,
            outage.single_at_remount,
            outage.repaired_after_s
        );
        self.record("heal", Fault::ZoneLoss, detail);
        self.zone_outages.push(outage);
        Ok(())
    }
}
