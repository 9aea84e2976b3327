//! The disk checker of `disk-stores` (`disk_objects`): no data loss across
//! store node restarts. A value the tier reader saw in an answer that
//! listed a disk replica (`tier_reader.rs`) and that no remove or RemoveAll
//! may have followed must, at the end — every store node back, every disk
//! attached again — still be the key's value (the final read), still have
//! a disk replica (register objects are hard-pinned: disk eviction never
//! takes them, and the disk replica grace outlasts the run), and EVERY
//! disk replica must read back raw (no fallback to memory or another
//! replica) with exactly that value's bytes.
//!
//! [`disk_backed_survivors`] and [`judge`] are pure; [`read_disk_replicas`]
//! does the reads.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use mooncake_client::{Client, remote};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::Tier;
use serde::Serialize;

use crate::history::{History, OpKind, Outcome};
use crate::tier_reader::TierRead;
use crate::workload::{OBJECT_BYTES, decode_value};

/// Reads of one disk replica before it counts as unreadable.
const READ_ATTEMPTS_MAX: u32 = 5;
/// Pause between those attempts.
const READ_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Most problems listed (the rest are counted).
const PROBLEMS_MAX: usize = 30;

/// A value seen on a disk that must still be there at the end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiskBacked {
    pub key: String,
    pub value: u64,
    /// The last read that saw it with a disk replica was invoked then.
    pub seen_ns: u64,
}

/// The values seen with a disk replica that no remove or RemoveAll of their
/// key may have followed (any that did not fail and could take effect at or
/// after the last read that saw the value): one per key and value.
pub fn disk_backed_survivors(history: &History, reads: &[TierRead]) -> Vec<DiskBacked> {
    let mut last_seen: BTreeMap<(&str, u64), u64> = BTreeMap::new();
    for r in reads.iter().filter(|r| r.listed_disk && !r.lease) {
        if let Some(value) = r.value {
            let seen = last_seen.entry((r.key.as_str(), value)).or_insert(r.invoke_ns);
            *seen = (*seen).max(r.invoke_ns);
        }
    }
    let keys = history.by_key();
    last_seen
        .into_iter()
        .filter(|((key, _), seen_ns)| {
            let ops = keys.get(key).map(Vec::as_slice).unwrap_or_default();
            !ops.iter().any(|(_, op)| {
                matches!(op.op, OpKind::Remove | OpKind::RemoveAll)
                    && op.outcome != Outcome::Fail
                    && op.effect_deadline_ns().is_none_or(|deadline| deadline >= *seen_ns)
            })
        })
        .map(|((key, value), seen_ns)| DiskBacked { key: key.to_string(), value, seen_ns })
        .collect()
}

/// One disk replica read at the end: the value its bytes carry, or why
/// none (`Ok(None)`: bytes of no put).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskReplicaRead {
    pub segment_id: u64,
    pub endpoint: String,
    pub read: Result<Option<u64>, String>,
}

/// What the disk checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiskObjectsVerdict {
    /// Disk-backed values checked.
    pub checked: usize,
    /// Disk replicas read back equal.
    pub disk_replicas_ok: usize,
    pub problems: Vec<String>,
    /// Problems beyond [`PROBLEMS_MAX`].
    pub more_problems: usize,
}

impl DiskObjectsVerdict {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(&mut self, p: String) {
        if self.problems.len() < PROBLEMS_MAX {
            self.problems.push(p);
        } else {
            self.more_problems += 1;
        }
    }
}

/// Judges every survivor against the final reads (`None`: absent) and
/// its disk replicas read at the end.
pub fn judge(
    survivors: &[DiskBacked],
    final_reads: &BTreeMap<String, Option<u64>>,
    disk_reads: &BTreeMap<String, Vec<DiskReplicaRead>>,
) -> DiskObjectsVerdict {
    let mut v = DiskObjectsVerdict::default();
    for s in survivors {
        v.checked += 1;
        let seen = format!("{:?} value {} (seen on disk at {:.1} s)", s.key, s.value, s.seen_ns as f64 / 1e9);
        let found = final_reads.get(&s.key).copied().flatten();
        if found != Some(s.value) {
            let found = found.map_or("nothing".to_string(), |f| format!("value {f}"));
            v.problem(format!("disk-backed {seen} was never removed, but the final read found {found}"));
            continue;
        }
        let replicas = disk_reads.get(&s.key).map(Vec::as_slice).unwrap_or_default();
        if replicas.is_empty() {
            v.problem(format!("disk-backed {seen} is still there but on no disk segment any more"));
        }
        for r in replicas {
            match &r.read {
                Ok(Some(value)) if *value == s.value => v.disk_replicas_ok += 1,
                other => v.problem(format!(
                    "disk-backed {seen}: its disk replica on segment {} ({}) {}",
                    r.segment_id,
                    r.endpoint,
                    match other {
                        Ok(Some(value)) => format!("holds value {value}"),
                        Ok(None) => "holds bytes of no put".to_string(),
                        Err(e) => format!("could not be read: {e}"),
                    }
                )),
            }
        }
    }
    v
}

/// Every disk replica of `key` read raw (with the READ capability
/// GetReplicaList grants), each decoded; empty when the master lists none.
pub async fn read_disk_replicas(client: &Client, key: &str) -> Result<Vec<DiskReplicaRead>, String> {
    let mut last = String::new();
    for attempt in 0..READ_ATTEMPTS_MAX {
        if attempt > 0 {
            tokio::time::sleep(READ_RETRY_PAUSE).await;
        }
        let list = match client.master().get_replica_list(client.client_id(), key).await {
            Ok(list) => list,
            Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => return Ok(Vec::new()),
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let mut out = Vec::new();
        let mut failed = false;
        for r in list.replicas.iter().filter(|r| r.tier == Tier::Ssd as i32) {
            let mut buf = vec![0u8; OBJECT_BYTES];
            let read = match client.engine().read_checksummed(&remote(r), r.offset, &mut buf).await {
                Ok(_) if list.size == OBJECT_BYTES as u64 => Ok(decode_value(&buf)),
                Ok(_) => Ok(None),
                Err(e) => {
                    failed = true;
                    Err(e.to_string())
                }
            };
            out.push(DiskReplicaRead { segment_id: r.segment_id, endpoint: r.endpoint.clone(), read });
        }
        if !failed || attempt + 1 == READ_ATTEMPTS_MAX {
            return Ok(out);
        }
    }
    Err(last)
}

impl fmt::Display for DiskBacked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} = {} (seen on disk at {} ns)", self.key, self.value, self.seen_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{OpRecord, ProcessId};

    fn seen(key: &str, value: Option<u64>, at: u64, listed_disk: bool) -> TierRead {
        TierRead {
            key: key.into(),
            lease: false,
            invoke_ns: at,
            complete_ns: at + 10,
            value,
            listed_disk,
            disk_only: listed_disk,
            served_from_disk: listed_disk,
        }
    }

    fn remove(key: &str, invoke_ns: u64, complete_ns: u64, outcome: Outcome) -> OpRecord {
        OpRecord {
            process: ProcessId(0),
            key: key.into(),
            op: OpKind::Remove,
            invoke_ns,
            complete_ns: Some(complete_ns),
            outcome,
        }
    }

    #[test]
    fn values_seen_on_disk_survive_unless_a_remove_may_follow_their_last_sighting() {
        let history = History::new(vec![
            remove("a", 50, 60, Outcome::RemoveOk { existed: true }),
            remove("b", 150, 160, Outcome::RemoveOk { existed: true }),
            remove("c", 150, 160, Outcome::Fail),
            remove("d", 10, 20, Outcome::Unknown),
        ])
        .expect("well formed");
        let reads = vec![
            seen("a", Some(1), 100, true),
            seen("a", Some(1), 300, true),
            seen("b", Some(2), 100, true),
            seen("c", Some(3), 100, true),
            seen("d", Some(4), 100, true),
            seen("e", Some(5), 100, false),
            seen("f", None, 100, true),
            TierRead { lease: true, ..seen("g", Some(6), 100, true) },
        ];
        let survivors = disk_backed_survivors(&history, &reads);
        let got: Vec<(&str, u64, u64)> = survivors.iter().map(|s| (s.key.as_str(), s.value, s.seen_ns)).collect();
        // a: the remove ended before; b: a remove followed; c: it failed;
        // d: unknown, may take effect any time; e: never seen on disk; f: no
        // value; g: a lease object (no register history to judge it by).
        assert_eq!(got, vec![("a", 1, 300), ("c", 3, 100)]);
    }

    #[test]
    fn a_survivor_must_be_the_final_value_and_every_disk_replica_must_hold_it() {
        let survivors: Vec<DiskBacked> = [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)]
            .iter()
            .map(|(k, v)| DiskBacked { key: k.to_string(), value: *v, seen_ns: 1_000_000_000 })
            .collect();
        let finals: BTreeMap<String, Option<u64>> =
            [("a", Some(1)), ("b", None), ("c", Some(3)), ("d", Some(4)), ("e", Some(5))]
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect();
        let replica = |read| DiskReplicaRead { segment_id: 9, endpoint: "s1:7000".into(), read };
        let disks: BTreeMap<String, Vec<DiskReplicaRead>> = [
            ("a", vec![replica(Ok(Some(1)))]),
            ("c", vec![replica(Ok(Some(7)))]),
            ("d", vec![]),
            ("e", vec![replica(Err("refused".into()))]),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let v = judge(&survivors, &finals, &disks);
        assert_eq!(v.checked, 5);
        assert_eq!(v.disk_replicas_ok, 1);
        assert_eq!(v.problems.len(), 4, "{:#?}", v.problems);
        assert!(v.problems[0].contains("\"b\"") && v.problems[0].contains("found nothing"), "{}", v.problems[0]);
        assert!(v.problems[1].contains("holds value 7"), "{}", v.problems[1]);
        assert!(v.problems[2].contains("on no disk segment"), "{}", v.problems[2]);
        assert!(v.problems[3].contains("could not be read: refused"), "{}", v.problems[3]);
        assert!(!v.is_valid());
        assert!(judge(&survivors[..1], &finals, &disks).is_valid());
    }
}
