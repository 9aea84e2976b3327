//! What a run knows that the availability checker (`availability.rs`)
//! needs: the room of the cluster it started, what its workloads and tenant
//! probe can keep from eviction, when its nemesis may have taken a store
//! node's segment away, and the leader changes the term watch saw
//! (`term_watch.rs`).

use std::time::Duration;

use crate::availability::{
    AvailabilityConfig, AvailabilityVerdict, Disruption, DisruptionKind, Hold, PutRefusal, check_availability,
    leased_holds, pinned_holds,
};
use crate::chaos_cluster::{KV_LEASE_TTL, STORE_SEGMENT_BYTES};
use crate::history::History;
use crate::lease::LeaseRecord;
use crate::lease_workload::LEASE_OBJECT_BYTES;
use crate::nemesis::FaultEvent;
use crate::term_watch::{TermSample, leader_changes};
use crate::workload::OBJECT_BYTES;

/// The masters' arenas are at most 1/this of their segment
/// (`ARENA_SHARE_DIVISOR` in `master/src/leader/reservations/arenas.rs`); a
/// writer chunk is at most one arena (`objects/chunks.rs`).
pub const ARENA_SHARE_DIVISOR: u64 = 64;
/// Writer chunks of one segment a leader may hold apart beyond one per
/// putting client (each holds one chunk per replica count, and a writer
/// that puts one object at a time returns a full chunk as it retires it):
/// the lease workload's client puts four at once, so it may hold a retired
/// chunk until their answers.
const CHUNKS_BEYOND_ONE_PER_WRITER: u64 = 1;
/// Arenas of one segment a leader may hold apart besides its writers'
/// chunks: the open arena of puts placed the usual way, a sealed one that
/// a put in flight still writes into, and returned ones waiting for their
/// store node's fence acknowledgement and their `ArenaReturn` commit.
const ARENAS_APART: u64 = 4;
/// Putting clients of every run besides the register workload's writers:
/// the lease workload's client and the tenant probe's two.
const OTHER_WRITERS: u64 = 3;
/// Objects the tenant probe creates per round (its shared key in both
/// tenants, and tenant b's own key), and the shortest time between rounds
/// (`tenant_probe::ROUND_INTERVAL`): it keeps at most the objects of the
/// rounds of one lease TTL, plus the round in progress, leased.
const PROBE_OBJECTS_PER_ROUND: u64 = 3;
const PROBE_ROUND_INTERVAL: Duration = crate::tenant_probe::ROUND_INTERVAL;
/// After the killed store node is restarted, its segment may take this long
/// to be mounted again (`nemesis::STORE_REMOUNT_MAX`): until then it does
/// not count.
const STORE_REMOUNT_MAX: Duration = Duration::from_secs(15);
/// Slack of the judgement's times (scheduling of the harness and masters).
const MARGIN: Duration = Duration::from_millis(50);

/// The allocation unit of the store nodes' segments (`ALLOC_ALIGN_BYTES`).
const ALLOC_ALIGN_BYTES: u64 = 64;

fn aligned(bytes: u64) -> u64 {
    bytes.next_multiple_of(ALLOC_ALIGN_BYTES)
}

/// The checker's view of a run with `register_writers` register clients
/// on the usual store nodes: two (`runner::STORE_NODES`), a 4 MiB memory
/// segment each.
pub fn config(register_writers: usize) -> AvailabilityConfig {
    let arena_bytes = STORE_SEGMENT_BYTES / ARENA_SHARE_DIVISOR;
    let writers = register_writers as u64 + OTHER_WRITERS;
    let held_apart_bytes = (writers + CHUNKS_BEYOND_ONE_PER_WRITER + ARENAS_APART) * arena_bytes;
    let probe_rounds = (KV_LEASE_TTL.as_nanos() / PROBE_ROUND_INTERVAL.as_nanos()) as u64 + 2;
    let probe_bytes = probe_rounds * PROBE_OBJECTS_PER_ROUND * aligned(OBJECT_BYTES as u64);
    AvailabilityConfig {
        segments: 2,
        segment_bytes: STORE_SEGMENT_BYTES,
        reserved_bytes: held_apart_bytes + probe_bytes,
        stranded_bytes_per_leader_change: held_apart_bytes,
        lease_ttl_ns: KV_LEASE_TTL.as_nanos() as u64,
        margin_ns: MARGIN.as_nanos() as u64,
    }
}

/// The spans in which the faulted store node (`s1`, store 0) may not serve
/// its segment: from its kill until its remount may have ended.
pub fn store_outages(faults: &[FaultEvent]) -> Vec<Disruption> {
    let mut out = Vec::new();
    let mut down_since: Option<u64> = None;
    for f in faults {
        let store = f.detail.contains("Store") || f.fault == "StorePause" || f.fault == "ZoneLoss";
        match (f.phase, down_since) {
            ("start", _) if store => down_since = Some(f.t_ns),
            ("heal", Some(from_ns)) => {
                let until_ns = f.t_ns.saturating_add(STORE_REMOUNT_MAX.as_nanos() as u64);
                out.push(Disruption { from_ns, until_ns, kind: DisruptionKind::StoreDown { store: 0 } });
                down_since = None;
            }
            _ => {}
        }
    }
    if let Some(from_ns) = down_since {
        out.push(Disruption { from_ns, until_ns: u64::MAX, kind: DisruptionKind::StoreDown { store: 0 } });
    }
    out
}

/// Every refusal of the run judged (see `availability.rs`).
pub fn check_run(
    refusals: &[PutRefusal],
    history: &History,
    lease_records: &[LeaseRecord],
    faults: &[FaultEvent],
    terms: &[TermSample],
    register_writers: usize,
) -> AvailabilityVerdict {
    let config = config(register_writers);
    let mut holds: Vec<Hold> = pinned_holds(history, aligned(OBJECT_BYTES as u64));
    holds.extend(leased_holds(lease_records, aligned(LEASE_OBJECT_BYTES as u64), config.lease_ttl_ns));
    let mut disruptions = store_outages(faults);
    disruptions.extend(leader_changes(terms));
    let mut verdict = check_availability(refusals, &holds, &disruptions, &config);
    for v in &mut verdict.violations {
        let seen = terms.iter().rev().find(|t| t.complete_ns <= v.refusal.complete_ns && !t.used_bytes.is_empty());
        v.leader_used_bytes = seen.map(|t| t.used_bytes.clone()).unwrap_or_default();
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(t_s: u64, phase: &'static str, fault: &str, detail: &str) -> FaultEvent {
        FaultEvent { t_ns: t_s * 1_000_000_000, phase, fault: fault.into(), detail: detail.into() }
    }

    #[test]
    fn a_store_node_kill_takes_its_segment_away_until_it_may_have_mounted_again() {
        let faults = [
            event(3, "start", "Kill", "SIGKILL Master(2)"),
            event(6, "heal", "Kill", "restarted"),
            event(9, "start", "Kill", "SIGKILL Store"),
            event(12, "heal", "Kill", "restarted"),
            event(15, "start", "Pause", "SIGSTOP master 1"),
            event(18, "heal", "Pause", "SIGCONT"),
            event(21, "start", "Kill", "SIGKILL Store"),
        ];
        let spans: Vec<(u64, u64)> =
            store_outages(&faults).iter().map(|d| (d.from_ns / 1_000_000_000, d.until_ns)).collect();
        assert_eq!(spans, vec![(9, 27_000_000_000), (21, u64::MAX)]);
    }

    #[test]
    fn the_usual_cluster_leaves_room_beyond_what_it_holds_apart() {
        let c = config(8);
        // 4 MiB segments, 64 KiB arenas: 11 writers' chunks and the
        // leader's other arenas, the probe's leased objects.
        assert_eq!(c.stranded_bytes_per_leader_change, 16 * 64 * 1024);
        assert!(c.reserved_bytes < c.segment_bytes / 2, "{c:?}");
    }
}
