//! The tier reader of `disk-stores`: one more client, reading as a get
//! does — GetReplicaList, then the replicas in the order the master lists
//! them (memory before disk), the first whose bytes match the object's
//! checksum — and recording which tiers the answer listed and which one
//! served the bytes. It reads, in turn:
//!
//! - a register key (every key that came into play, retired ones too: they
//!   keep their last value to the end, and lose their memory replicas when
//!   both store nodes were killed since their put). These reads join the
//!   register history as gets of one more process, so the linearizability
//!   checker judges reads served from disk too, and they tell the disk
//!   checker (`disk_objects.rs`) which values were seen on a disk;
//! - a lease object stored at least [`LEASE_READ_AGE`] ago: unpinned, so by
//!   then copied to disk and, memory being past its watermark, usually
//!   dropped from memory. Put once, so its bytes must carry the value it
//!   was stored with (else a corrupt read for `bytes-verified`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mooncake_client::{Client, MasterError, remote};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{Replica, Tier};
use serde::Serialize;

use crate::access::Access;
use crate::history::{OpKind, OpRecord, Outcome, ProcessId};
use crate::lease_workload::LEASE_OBJECT_BYTES;
use crate::rng::Rng;
use crate::workload::{OBJECT_BYTES, OP_TIMEOUT, Shared, connect_with_retry, decode_sized};

/// One read every this often: about 600 in a 30 s run, next to the
/// register workload's 200 ops/s.
const READ_INTERVAL: Duration = Duration::from_millis(50);
/// Reads kept for the checker at most (a 5 min soak run makes 6,000).
const TIER_READS_MAX: usize = 100_000;
/// Lease objects are read once stored this long: copied (within a Ping or
/// two) and evicted from memory (the watermark duty runs every second).
const LEASE_READ_AGE: Duration = Duration::from_secs(3);
/// Keeps the tier reader's draws apart from the workloads'.
const SEED_SALT: u64 = 0x7153_d15c_0000_0001;

/// What the tier reader needs.
#[derive(Clone, Debug)]
pub struct TierReaderOptions {
    pub access: Access,
    pub masters: Vec<String>,
    pub local_hostname: String,
    pub seed: u64,
    /// Its process in the register history.
    pub process: ProcessId,
}

/// One read and the tiers behind it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TierRead {
    pub key: String,
    /// A lease object (else a register key).
    pub lease: bool,
    pub invoke_ns: u64,
    pub complete_ns: u64,
    /// The value its bytes carried (`None`: not found, or no bytes read).
    pub value: Option<u64>,
    /// The answer listed a replica on a disk segment.
    pub listed_disk: bool,
    /// The answer listed disk replicas only: the object was on disk alone.
    pub disk_only: bool,
    /// The bytes came from a disk replica.
    pub served_from_disk: bool,
}

impl TierRead {
    /// The record of a read of `key` that found `(value, listed, from_disk)`.
    fn of(key: String, lease: bool, invoke_ns: u64, complete_ns: u64, found: (Option<u64>, Listed, bool)) -> Self {
        let (value, listed, served_from_disk) = found;
        TierRead {
            key,
            lease,
            invoke_ns,
            complete_ns,
            value,
            listed_disk: listed.disk,
            disk_only: listed.disk_only,
            served_from_disk,
        }
    }
}

/// What one read found.
enum Answer {
    NotFound,
    /// REPLICA_IS_NOT_READY on the only attempt: the object's only
    /// replicas are on a disk whose node is down (or it is being written).
    NotReady,
    /// Bytes matching the checksum: the value they carry (`None`: bytes of
    /// no put), from which tier, with what the answer listed.
    Bytes {
        value: Option<u64>,
        listed: Listed,
        from_disk: bool,
    },
    /// The answer listed replicas but none served matching bytes.
    Unreadable(Listed),
    Unknown,
}

/// The tiers an answer listed.
#[derive(Clone, Copy, Default)]
struct Listed {
    disk: bool,
    disk_only: bool,
}

/// Whether `replicas` are all on disk segments (and there is one).
pub fn disk_only(replicas: &[Replica]) -> bool {
    !replicas.is_empty() && replicas.iter().all(|r| r.tier == Tier::Ssd as i32)
}

/// What one read is of.
struct Target {
    key: String,
    /// A lease object and the value it was stored with (else a register key).
    lease: Option<u64>,
}

/// Reads until `shared.stop` is set; returns its reads.
pub async fn run(opts: TierReaderOptions, shared: Arc<Shared>) -> anyhow::Result<Vec<TierRead>> {
    let mut cfg = opts.access.client(opts.masters.clone());
    cfg.local_hostname = opts.local_hostname.clone();
    cfg.tcp.request_timeout = OP_TIMEOUT;
    let client = connect_with_retry(cfg).await?;
    let mut rng = Rng::new(opts.seed ^ SEED_SALT);
    let mut tick = tokio::time::interval(READ_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reads = Vec::new();
    let mut turn = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        tick.tick().await;
        turn += 1;
        let target = match turn % 2 {
            0 => old_lease(&shared, &mut rng).await,
            _ => rng.pick(&shared.all_keys().await).map(|key| Target { key: key.clone(), lease: None }),
        };
        let Some(Target { key, lease }) = target else { continue };
        let invoke_ns = shared.now_ns();
        let size = if lease.is_some() { LEASE_OBJECT_BYTES } else { OBJECT_BYTES };
        let answer = tokio::time::timeout(OP_TIMEOUT, read(&client, &key, size)).await.unwrap_or(Answer::Unknown);
        let complete_ns = shared.now_ns();
        if let Some(stored) = lease {
            if let Some(found) = judge_lease(&shared, &key, stored, answer)
                && reads.len() < TIER_READS_MAX
            {
                reads.push(TierRead::of(key, true, invoke_ns, complete_ns, found));
            }
            continue;
        }
        let (outcome, read) = judge(&shared, answer);
        let record = OpRecord {
            process: opts.process,
            key: key.clone(),
            op: OpKind::Get,
            invoke_ns,
            complete_ns: Some(complete_ns),
            outcome,
        };
        shared.records.lock().await.push(record);
        if let Some(found) = read
            && reads.len() < TIER_READS_MAX
        {
            reads.push(TierRead::of(key, false, invoke_ns, complete_ns, found));
        }
    }
    client.close().await;
    Ok(reads)
}

/// The history outcome of an answer, and what the tier record keeps.
fn judge(shared: &Shared, answer: Answer) -> (Outcome, Option<(Option<u64>, Listed, bool)>) {
    match answer {
        Answer::NotFound => (Outcome::GetOk { value: None }, None),
        Answer::NotReady => (Outcome::Fail, None),
        Answer::Bytes { value: Some(v), listed, from_disk } => {
            shared.verified_reads.fetch_add(1, Ordering::Relaxed);
            (Outcome::GetOk { value: Some(v) }, Some((Some(v), listed, from_disk)))
        }
        Answer::Bytes { value: None, .. } => {
            shared.corrupt_reads.fetch_add(1, Ordering::Relaxed);
            (Outcome::Unknown, None)
        }
        Answer::Unreadable(listed) => (Outcome::Unknown, Some((None, listed, false))),
        Answer::Unknown => (Outcome::Unknown, None),
    }
}

/// A lease object stored at least [`LEASE_READ_AGE`] ago, drawn uniformly.
async fn old_lease(shared: &Shared, rng: &mut Rng) -> Option<Target> {
    let before_ns = shared.now_ns().checked_sub(LEASE_READ_AGE.as_nanos() as u64)?;
    let stored = shared.lease_stored.lock().await;
    // Noted in about the order stored (concurrent puts of a round may swap).
    let old = stored.partition_point(|s| s.stored_ns <= before_ns);
    let s = stored.get(rng.below(old as u64) as usize).filter(|_| old > 0)?;
    Some(Target { key: s.key.clone(), lease: Some(s.value) })
}

/// What a read of a lease object stored with `stored` keeps; bytes of
/// another value (or of none) are a corrupt read.
fn judge_lease(shared: &Shared, key: &str, stored: u64, answer: Answer) -> Option<(Option<u64>, Listed, bool)> {
    match answer {
        Answer::Bytes { value, listed, from_disk } => {
            if value == Some(stored) {
                shared.verified_reads.fetch_add(1, Ordering::Relaxed);
            } else {
                shared.corrupt_reads.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(key, stored, read = ?value, from_disk, "tier read: a lease object's bytes are not its value");
            }
            Some((value, listed, from_disk))
        }
        Answer::Unreadable(listed) => Some((None, listed, false)),
        Answer::NotFound | Answer::NotReady | Answer::Unknown => None,
    }
}

async fn read(client: &Client, key: &str, size: usize) -> Answer {
    let list = match client.master().get_replica_list(client.client_id(), key).await {
        Ok(list) => list,
        Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => return Answer::NotFound,
        Err(e) if not_ready(&e) => return Answer::NotReady,
        Err(_) => return Answer::Unknown,
    };
    let listed =
        Listed { disk: list.replicas.iter().any(|r| r.tier == Tier::Ssd as i32), disk_only: disk_only(&list.replicas) };
    // The size comes from the master: bytes of another size are no put's
    // of this key, and are never allocated.
    if list.size != size as u64 {
        return Answer::Bytes { value: None, listed, from_disk: false };
    }
    let mut buf = vec![0u8; size];
    for r in &list.replicas {
        match client.engine().read_checksummed(&remote(r), r.offset, &mut buf).await {
            Ok(crc) if crc == list.checksum => {
                let from_disk = r.tier == Tier::Ssd as i32;
                return Answer::Bytes { value: decode_sized(&buf, size), listed, from_disk };
            }
            Ok(_) => tracing::debug!(key, endpoint = %r.endpoint, "tier read: bytes fail the checksum; next replica"),
            Err(e) => tracing::debug!(key, endpoint = %r.endpoint, error = %e, "tier read: replica read failed"),
        }
    }
    Answer::Unreadable(listed)
}

/// REPLICA_IS_NOT_READY answered to the only attempt (a retried read may
/// see it for another reason, but a read has no effect either way).
fn not_ready(e: &MasterError) -> bool {
    e.is_definite() && e.code() == Some(ErrorCode::ReplicaIsNotReady)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_only_means_every_replica_on_disk() {
        let on = |tier: Tier| Replica { tier: tier as i32, ..Replica::default() };
        assert!(disk_only(&[on(Tier::Ssd)]));
        assert!(disk_only(&[on(Tier::Ssd), on(Tier::Ssd)]));
        assert!(!disk_only(&[on(Tier::Dram), on(Tier::Ssd)]));
        assert!(!disk_only(&[]));
    }
}
