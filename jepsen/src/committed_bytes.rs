//! End-of-run checks of stored bytes, run in every scenario after healing
//! and before teardown, with the workloads stopped:
//!
//! - **committed bytes** ([`check_committed_bytes`]): every object the
//!   masters list as complete, EVERY replica read raw from its store node
//!   (no fallback to another replica, as a get would), its CRC-32C compared
//!   with the object's recorded checksum. A mismatch means the bytes of a
//!   committed object changed after its commit: a range was written by
//!   someone it was not granted to (a stalled writer of a range a new
//!   leader handed out again), or two objects share bytes.
//! - **stall puts** ([`check_stall_puts`]): every put the stall writers
//!   had acknowledged reads back with its value, unless a RemoveAll may
//!   have removed it (stall writer keys are hard-pinned, so eviction never
//!   does, and nothing else removes them).
//!
//! An object may still vanish between the listing and the read (eviction
//! on the leader's duty, which runs on after the workloads stop): before a
//! failed or mismatching read counts, the object is looked up again, and
//! one no longer listed with that replica and checksum is skipped.

use std::time::Duration;

use mooncake_client::{Client, ClientError, remote};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{ObjectInfo, Replica, ReplicaStatus};
use serde::Serialize;

use crate::stall_process::StallPut;
use crate::stall_writer::StallOutcome;
use crate::workload::{RemoveAllCall, decode_sized};

/// Objects asked of one ListObjects: the master's own cap. The chaos
/// segments (two of 4 MiB, objects of at least 4 KiB) hold about 2,000
/// objects at most, so a listing this long means it was cut.
pub const LIST_OBJECTS_MAX: u32 = 100_000;
/// Largest object read back: the size comes from the master, and a buffer
/// that big is allocated for it. The chaos segments are 4 MiB.
const OBJECT_READ_MAX_BYTES: u64 = 64 << 20;
/// Reads of one replica (and lookups of its object) before it counts as
/// unreadable: a store node restarted at the end remounts within a second
/// or two, after which its old segment's replicas are dropped.
const READ_ATTEMPTS_MAX: u32 = 5;
/// Pause between those attempts.
const READ_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Gets of one acknowledged stall put before it counts as unreadable.
const GET_ATTEMPTS_MAX: u32 = 10;
/// Most problems kept per checker (the rest are counted).
const PROBLEMS_MAX: usize = 30;

/// What the committed-bytes checker looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CommittedBytesCounts {
    /// Complete objects listed.
    pub objects: usize,
    /// Replicas read and compared.
    pub replicas: usize,
    /// Replicas whose object went (or moved) between the listing and the read.
    pub vanished: usize,
    /// Replicas still listed that could not be read (not counted as corrupt).
    pub unreadable: usize,
    /// Replicas whose bytes do not match their object's checksum.
    pub corrupt: usize,
    /// Objects with at least one corrupt replica.
    pub corrupt_objects: usize,
}

/// The bytes of one replica of a committed object changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CorruptReplica {
    pub key: String,
    pub segment_id: u64,
    pub offset: u64,
    pub endpoint: String,
    pub expected_crc: u32,
    pub found_crc: u32,
}

/// The committed-bytes checker's answer.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CommittedBytesVerdict {
    pub counts: CommittedBytesCounts,
    pub corrupt: Vec<CorruptReplica>,
    /// The listing may have been cut: not every object was checked.
    pub truncated: bool,
    /// Replicas that could not be read, with why (at most [`PROBLEMS_MAX`]).
    pub unreadable: Vec<String>,
}

impl CommittedBytesVerdict {
    pub fn is_valid(&self) -> bool {
        self.corrupt.is_empty() && !self.truncated
    }

    /// Human-readable problems: corrupt replicas first, then unreadable ones
    /// (noted, not violations).
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self.corrupt.iter().map(|c| c.to_string()).collect();
        if self.truncated {
            out.push(format!("ListObjects answered {LIST_OBJECTS_MAX} objects: the listing may be cut"));
        }
        out.extend(self.unreadable.iter().map(|u| format!("(not a violation) {u}")));
        if out.len() > PROBLEMS_MAX {
            let more = out.len() - PROBLEMS_MAX;
            out.truncate(PROBLEMS_MAX);
            out.push(format!("... and {more} more"));
        }
        out
    }
}

impl std::fmt::Display for CorruptReplica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the bytes of a committed object changed: key {:?}, segment {} ({}) offset {}: crc32c {:08x}, recorded {:08x}",
            self.key, self.segment_id, self.endpoint, self.offset, self.found_crc, self.expected_crc
        )
    }
}

impl std::fmt::Display for CommittedBytesCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "objects {}  replicas {}  vanished {}  unreadable {}  corrupt replicas {} (of {} objects)",
            self.objects, self.replicas, self.vanished, self.unreadable, self.corrupt, self.corrupt_objects
        )
    }
}

/// What a replica turned out to hold.
enum ReplicaCheck {
    Intact,
    Corrupt(u32),
    Vanished,
    Unreadable(String),
}

/// Lists every object under `prefixes` (`[""]`: every object; disjoint
/// prefixes, or an object is read twice) and reads every replica of each
/// complete one.
pub async fn check_committed_bytes(client: &Client, prefixes: &[&str]) -> anyhow::Result<CommittedBytesVerdict> {
    let mut objects = Vec::new();
    let mut truncated = false;
    for prefix in prefixes {
        let listed = client.master().list_objects(prefix, LIST_OBJECTS_MAX).await?;
        truncated |= listed.len() >= LIST_OBJECTS_MAX as usize;
        objects.extend(listed);
    }
    let mut v = CommittedBytesVerdict { truncated, ..CommittedBytesVerdict::default() };
    for object in objects.iter().filter(|o| o.status == ReplicaStatus::Complete as i32) {
        v.counts.objects += 1;
        let mut object_corrupt = false;
        for replica in &object.replicas {
            v.counts.replicas += 1;
            match check_replica(client, object, replica).await {
                ReplicaCheck::Intact => {}
                ReplicaCheck::Vanished => v.counts.vanished += 1,
                ReplicaCheck::Unreadable(why) => {
                    v.counts.unreadable += 1;
                    if v.unreadable.len() < PROBLEMS_MAX {
                        v.unreadable.push(why);
                    }
                }
                ReplicaCheck::Corrupt(found_crc) => {
                    v.counts.corrupt += 1;
                    object_corrupt = true;
                    v.corrupt.push(CorruptReplica {
                        key: object.key.clone(),
                        segment_id: replica.segment_id,
                        offset: replica.offset,
                        endpoint: replica.endpoint.clone(),
                        expected_crc: object.checksum,
                        found_crc,
                    });
                }
            }
        }
        v.counts.corrupt_objects += usize::from(object_corrupt);
    }
    Ok(v)
}

/// Reads one replica raw; a failed or mismatching read counts only while
/// the object is still listed with that replica and checksum.
async fn check_replica(client: &Client, object: &ObjectInfo, replica: &Replica) -> ReplicaCheck {
    if object.size == 0 || object.size > replica.len || object.size > OBJECT_READ_MAX_BYTES {
        return ReplicaCheck::Unreadable(format!(
            "key {:?}: size {} does not fit its replica of {} bytes on segment {}",
            object.key, object.size, replica.len, replica.segment_id
        ));
    }
    let mut buf = vec![0u8; object.size as usize];
    let mut last = String::new();
    // The listing's replicas carry no capability: a store node serves a read
    // only under the READ capability GetReplicaList grants with the replica.
    let mut granted: Option<Replica> = None;
    for attempt in 0..READ_ATTEMPTS_MAX {
        if attempt > 0 {
            tokio::time::sleep(READ_RETRY_PAUSE).await;
        }
        let target = match granted.take() {
            Some(r) => r,
            None => match still_listed(client, object, replica).await {
                Listed::No => return ReplicaCheck::Vanished,
                Listed::Yes(r) => r,
                Listed::Unknown(why) => {
                    last = why;
                    continue;
                }
            },
        };
        let read = client.engine().read_checksummed(&remote(&target), target.offset, &mut buf).await;
        if matches!(read, Ok(crc) if crc == object.checksum) {
            return ReplicaCheck::Intact;
        }
        match still_listed(client, object, replica).await {
            Listed::No => return ReplicaCheck::Vanished,
            Listed::Yes(r) => granted = Some(r),
            Listed::Unknown(why) => {
                last = why;
                continue;
            }
        }
        match read {
            Ok(crc) => return ReplicaCheck::Corrupt(crc),
            Err(e) => last = e.to_string(),
        }
    }
    ReplicaCheck::Unreadable(format!(
        "key {:?}: replica on segment {} ({}) offset {}: {last}",
        object.key, replica.segment_id, replica.endpoint, replica.offset
    ))
}

/// Whether the master still lists the object with this replica and
/// checksum (and if so, the replica as GetReplicaList hands it out: with a
/// READ capability).
enum Listed {
    Yes(Replica),
    No,
    Unknown(String),
}

async fn still_listed(client: &Client, object: &ObjectInfo, replica: &Replica) -> Listed {
    match client.master().get_replica_list(client.client_id(), &object.key).await {
        Ok(list) => {
            let same =
                list.replicas.into_iter().find(|r| r.segment_id == replica.segment_id && r.offset == replica.offset);
            match same {
                Some(r) if list.checksum == object.checksum => Listed::Yes(r),
                _ => Listed::No,
            }
        }
        Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => Listed::No,
        Err(e) => Listed::Unknown(format!("looking it up again: {e}")),
    }
}

/// The stall puts checker's answer.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StallPutsVerdict {
    /// Acknowledged puts that had to be readable.
    pub checked: usize,
    /// Acknowledged puts a RemoveAll may have removed (not checked).
    pub maybe_removed: usize,
    pub problems: Vec<String>,
}

impl StallPutsVerdict {
    pub fn is_valid(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Every acknowledged stall put that no RemoveAll may have removed reads
/// back (through a normal get, checksum verified) with its value.
pub async fn check_stall_puts(
    client: &Client,
    puts: &[StallPut],
    remove_alls: &[RemoveAllCall],
    object_bytes: usize,
) -> StallPutsVerdict {
    let mut v = StallPutsVerdict::default();
    for put in puts.iter().filter(|p| p.outcome == Some(StallOutcome::Ok)) {
        if put.may_be_removed_by(remove_alls) {
            v.maybe_removed += 1;
            continue;
        }
        v.checked += 1;
        let problem = match get_settled(client, &put.key).await {
            Ok(Some(bytes)) => match decode_sized(&bytes, object_bytes) {
                Some(value) if value == put.value => None,
                Some(other) => Some(format!("holds value {other}")),
                None => Some(format!("holds {} bytes of no stall put", bytes.len())),
            },
            Ok(None) => Some("is gone".to_string()),
            Err(e) => Some(format!("could not be read: {e}")),
        };
        if let Some(problem) = problem
            && v.problems.len() < PROBLEMS_MAX
        {
            v.problems.push(format!("acknowledged stall put {:?} of value {} {problem}", put.key, put.value));
        }
    }
    v
}

/// A get, retried while the answer is not final; `None` when not found.
async fn get_settled(client: &Client, key: &str) -> Result<Option<Vec<u8>>, ClientError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match client.get(key).await {
            Ok(bytes) => return Ok(Some(bytes)),
            Err(ClientError::NotFound(_)) => return Ok(None),
            Err(e) if attempt >= GET_ATTEMPTS_MAX => return Err(e),
            Err(_) => tokio::time::sleep(READ_RETRY_PAUSE).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_replicas_are_violations_and_unreadable_ones_are_not() {
        let mut v = CommittedBytesVerdict::default();
        v.unreadable.push("key \"a\": connection refused".into());
        assert!(v.is_valid());
        assert_eq!(v.problems(), vec!["(not a violation) key \"a\": connection refused".to_string()]);
        v.corrupt.push(CorruptReplica {
            key: "jepsen/k3".into(),
            segment_id: 9,
            offset: 4096,
            endpoint: "10.213.47.14:7000".into(),
            expected_crc: 1,
            found_crc: 2,
        });
        assert!(!v.is_valid());
        let first = &v.problems()[0];
        assert!(first.contains("the bytes of a committed object changed"), "{first}");
        assert!(first.contains("jepsen/k3") && first.contains("segment 9") && first.contains("offset 4096"), "{first}");
        let cut = CommittedBytesVerdict { truncated: true, ..CommittedBytesVerdict::default() };
        assert!(!cut.is_valid(), "a cut listing checked less than everything");
    }

    #[test]
    fn problems_are_capped() {
        let v = CommittedBytesVerdict {
            unreadable: (0..PROBLEMS_MAX + 5).map(|i| format!("r{i}")).collect(),
            ..CommittedBytesVerdict::default()
        };
        let problems = v.problems();
        assert_eq!(problems.len(), PROBLEMS_MAX + 1);
        assert_eq!(problems[PROBLEMS_MAX], "... and 5 more");
    }
}
