//! Hot keys on the leader's paths (docs/OPERATIONS.md, "Hot keys"): reads
//! counted as they are answered, and the extra memory replicas of keys
//! that cooled dropped again (`DropReplica`), fenced like an eviction so
//! no reader holds a replica list naming a dropped replica. The copies
//! that add replicas are the copy duty's (`copies/`, `Purpose::Replicate`);
//! what is hot is decided in `leader/hot_keys.rs`.

use std::time::Instant;

use mooncake_raft_store::{Command, ObjectVersion, Tier, VersionedKey};
use mooncake_segment::SegmentId;

use crate::leader::hot_keys::HotKeyMode;
use crate::leader::kv_lease::KeyHash;
use crate::objects::ReadAnswered;
use crate::objects::fenced::{propose_fenced, removed_total};
use crate::shared::Shared;

/// Hot-key copies in flight at most (each copies a whole object between
/// two store nodes: they never crowd out the nodes' own traffic).
pub const REPLICATIONS_IN_FLIGHT_MAX: usize = 16;

/// Cooled keys whose replicas one round drops at most.
const COOLED_PER_ROUND_MAX: usize = 64;

/// Counts the reads answered with a replica list (`--dynamic_replication_mode`
/// observe or enforce); keys that became hot are queued for the copy duty
/// (enforce) or only counted (observe).
pub fn count_reads<'a>(shared: &Shared, reads: impl Iterator<Item = (&'a String, ReadAnswered)>) {
    let policy = shared.tiers.policy.hot_keys;
    if policy.mode == HotKeyMode::Off {
        return;
    }
    let now = Instant::now();
    let admitted = shared
        .leader
        .with(|t| {
            let admitted = reads.filter(|(k, a)| a.found && t.hot.note_read(k, now, &policy)).count();
            if policy.mode == HotKeyMode::Observe {
                t.hot.take_admitted(usize::MAX);
            }
            admitted
        })
        .unwrap_or(0);
    if admitted > 0 {
        shared.metrics.hot_keys_admitted.inc_by(admitted as u64);
        tracing::debug!(keys = admitted, mode = ?policy.mode, "hot keys admitted");
    }
}

/// A cooled key's added replicas still there: key, version, segments.
type CooledReplicas = (String, ObjectVersion, Vec<SegmentId>);

/// One round: the replicas the fan-out added to keys that cooled are
/// dropped, for each key no reader may hold a lease on (the others wait
/// for a later round); keys whose object was replaced or whose added
/// replicas are gone are forgotten.
pub async fn drop_cooled(shared: &Shared) {
    let policy = shared.tiers.policy.hot_keys;
    let now = Instant::now();
    let Some((cooled, fanned)) = shared.leader.with(|t| (t.hot.cooled(now, &policy), t.hot.fanned_count())) else {
        return;
    };
    shared.metrics.hot_keys_fanned.set(fanned as i64);
    if cooled.is_empty() {
        return;
    }
    // The added replicas still there, on the version they were added to.
    let (drops, forgotten): (Vec<CooledReplicas>, Vec<String>) = shared.reader.read(|s| {
        let mut drops = Vec::new();
        let mut forgotten = Vec::new();
        for (key, f) in cooled {
            let there: Vec<SegmentId> = match s.object(&key).filter(|o| o.version == f.version) {
                Some(o) => f.added.iter().copied().filter(|g| o.replicas.iter().any(|r| r.segment == *g)).collect(),
                None => Vec::new(),
            };
            let memory_left = s.object(&key).map_or(0, |o| {
                o.replicas.iter().filter(|r| s.replica_tier(r) == Some(Tier::Dram) && s.is_readable(r)).count()
            });
            if there.is_empty() || memory_left <= 1 {
                forgotten.push(key);
            } else if drops.len() < COOLED_PER_ROUND_MAX {
                drops.push((key, f.version, there));
            }
        }
        (drops, forgotten)
    });
    shared.leader.with(|t| forgotten.iter().for_each(|k| t.hot.forget(k)));
    if drops.is_empty() {
        return;
    }
    let hashes: Vec<(KeyHash, ObjectVersion)> = drops.iter().map(|(k, v, _)| (KeyHash::of(k), *v)).collect();
    let Some(fenced) = shared.leader.fence_removals(&hashes, false) else { return };
    let mut cmds = Vec::new();
    let mut done = Vec::new();
    for ((key, version, segments), refused) in drops.into_iter().zip(&fenced.refused) {
        if *refused {
            continue; // a reader may hold its replica list: a later round
        }
        for segment in segments {
            cmds.push(Command::DropReplica { victim: VersionedKey { key: key.clone(), version }, segment });
        }
        done.push(key);
    }
    if cmds.is_empty() {
        return;
    }
    match propose_fenced(&shared.write_path.proposer, cmds, fenced.guard, |_, _| false).await {
        Ok(answers) => {
            let dropped = removed_total(&answers);
            shared.metrics.hot_replicas_dropped.inc_by(dropped);
            shared.leader.with(|t| done.iter().for_each(|k| t.hot.forget(k)));
            tracing::info!(keys = done.len(), replicas = dropped, "cooled hot keys' extra replicas dropped");
        }
        Err(status) => {
            tracing::debug!(refusal = %status, "dropping cooled hot keys' replicas failed; a later round retries")
        }
    }
}
