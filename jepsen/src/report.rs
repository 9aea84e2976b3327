//! The report of a run, in its results directory: `summary.txt` (seed,
//! command to replay, verdict per checker, what the lease workload, the
//! committed-bytes checker and the stall writers did),
//! `verdict.json`, `history.jsonl`, `lease-history.jsonl`,
//! `stall-history.jsonl` (scenarios with stall writers), `tier-reads.jsonl`
//! (scenarios with disks), `faults.jsonl`,
//! and `timeline.html` — a self-contained page with an SVG of every
//! register operation per client over time, fault bands and a throughput line.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::checkers::{CheckResult, NodeReport};
use crate::committed_bytes::{CommittedBytesCounts, CommittedBytesVerdict, StallPutsVerdict};
use crate::history::{History, OpKind, Outcome};
use crate::leader_stability::{FollowerWindow, LeaderStabilityVerdict};
use crate::lease::{LeaseCounts, LeaseRecord, LeaseVerdict};
use crate::linearizability::Verdict;
use crate::nemesis::FaultEvent;
use crate::preload::PreloadReport;
use crate::scenario::Scenario;
use crate::stall_process::StallCounts;
use crate::workload::PutFailures;

/// `cause ×count (first: message)`, the most frequent cause first; `none`
/// when no put failed.
pub fn describe_put_failures(failures: &BTreeMap<String, PutFailures>) -> String {
    let mut by_count: Vec<(&String, &PutFailures)> = failures.iter().collect();
    by_count.sort_by_key(|(_, f)| std::cmp::Reverse(f.count));
    let parts: Vec<String> =
        by_count.iter().map(|(cause, f)| format!("{cause} x{} (first: {})", f.count, f.first)).collect();
    if parts.is_empty() { "none".into() } else { parts.join("; ") }
}

/// One checker's answer, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct CheckerVerdict {
    pub checker: String,
    pub valid: bool,
    pub checked: usize,
    /// Human-readable problems (at most a few dozen).
    pub problems: Vec<String>,
}

/// Most problems listed per checker (the rest are counted).
const PROBLEMS_MAX: usize = 30;

impl CheckerVerdict {
    pub fn from_linearizability(v: &Verdict) -> Self {
        let mut problems: Vec<String> = v.failures.iter().map(|f| format!("key {}: {}", f.key, f.reason)).collect();
        problems
            .extend(v.timed_out_keys.iter().map(|t| format!("key {}: search budget exhausted ({} ops)", t.key, t.ops)));
        problems.truncate(PROBLEMS_MAX);
        CheckerVerdict { checker: "linearizable".into(), valid: v.valid, checked: v.ops_checked, problems }
    }

    pub fn from_check(c: &CheckResult) -> Self {
        let mut problems: Vec<String> = c.violations.iter().map(|v| format!("{v:?}")).collect();
        problems.truncate(PROBLEMS_MAX);
        CheckerVerdict { checker: c.checker.to_string(), valid: c.is_valid(), checked: c.checked, problems }
    }

    /// The KV lease checker; `checked` is the leases (reads found) it judged.
    pub fn from_leases(v: &LeaseVerdict) -> Self {
        let mut problems: Vec<String> = v.violations.iter().map(|v| v.to_string()).collect();
        if problems.len() > PROBLEMS_MAX {
            let more = problems.len() - PROBLEMS_MAX;
            problems.truncate(PROBLEMS_MAX);
            problems.push(format!("... and {more} more"));
        }
        CheckerVerdict { checker: "kv_leases".into(), valid: v.is_valid(), checked: v.counts.reads_found, problems }
    }

    /// The committed-bytes checker; `checked` is the replicas it read.
    pub fn from_committed_bytes(v: &CommittedBytesVerdict) -> Self {
        CheckerVerdict {
            checker: "committed_bytes".into(),
            valid: v.is_valid(),
            checked: v.counts.replicas,
            problems: v.problems(),
        }
    }

    /// The stall writers' acknowledged puts read back at the end.
    pub fn from_stall_puts(v: &StallPutsVerdict) -> Self {
        CheckerVerdict {
            checker: "stall_puts".into(),
            valid: v.is_valid(),
            checked: v.checked,
            problems: v.problems.clone(),
        }
    }

    /// The leader stayed the leader while only a follower was paused.
    pub fn from_leader_stability(v: &LeaderStabilityVerdict) -> Self {
        let mut problems = v.problems.clone();
        problems.truncate(PROBLEMS_MAX);
        CheckerVerdict { checker: "leader_stable".into(), valid: v.is_valid(), checked: v.windows, problems }
    }

    /// Every preloaded key still exists at the end (`objects` loaded,
    /// `missing` gone).
    /// Every master whose disk filled either raised its NOSPACE alarm (not
    /// ready, not leading; still durable while sled writes into space it
    /// holds) or ended itself with a non-zero exit status and a last line
    /// naming the cause (crash-only) — never stayed up saying nothing.
    pub fn crash_only(outcomes: &[crate::nemesis::DiskFullOutcome]) -> Self {
        let problems: Vec<String> = outcomes
            .iter()
            .filter_map(|o| match (o.ended, o.exit_code) {
                (false, _) if o.alarmed => None,
                (false, _) => Some(format!(
                    "master {} kept running {:.0} s on a full disk without its NOSPACE alarm",
                    o.master, o.after_s
                )),
                (true, Some(code)) if code != 0 && o.last_line.contains("fatal:") => None,
                (true, code) => Some(format!(
                    "master {} ended (code {code:?}, signal {:?}) without a clear fatal line; last line: {}",
                    o.master, o.signal, o.last_line
                )),
            })
            .collect();
        CheckerVerdict { checker: "crash_only".into(), valid: problems.is_empty(), checked: outcomes.len(), problems }
    }

    /// The run made progress: some put (of either workload) was
    /// acknowledged. A run whose every put failed has nothing durable to
    /// check, so its other checkers pass vacuously; this one says why the
    /// puts failed.
    pub fn puts_acknowledged(acked: usize, failures: &BTreeMap<String, PutFailures>) -> Self {
        let problems = match acked {
            0 => vec![format!(
                "no put was acknowledged, so nothing durable was checked; put failures: {}",
                describe_put_failures(failures)
            )],
            _ => Vec::new(),
        };
        CheckerVerdict { checker: "puts_acknowledged".into(), valid: acked > 0, checked: acked, problems }
    }

    /// No answer of the tenant probe crossed tenants (`tenant_probe.rs`),
    /// and some answers were judged.
    pub fn tenant_isolation(probe: &crate::tenant_probe::TenantProbeReport) -> Self {
        let mut problems: Vec<String> = probe.crossings.iter().take(PROBLEMS_MAX).cloned().collect();
        if probe.checked == 0 {
            problems.push(format!(
                "the tenant probe got no definite answer in {} rounds: nothing was judged",
                probe.rounds
            ));
        }
        CheckerVerdict {
            checker: "tenant_isolation".into(),
            valid: problems.is_empty(),
            checked: probe.checked as usize,
            problems,
        }
    }

    /// `zone-loss`: the zone was lost at least once, the masters expired
    /// it each time, and every read made while it was down was answered
    /// (what the answers said is the linearizability checker's to judge).
    /// `rolling-restart`: every store node restarted came back, within
    /// its bound, serving the memory segment it had (re-attached).
    pub fn store_restarts(restarts: &[crate::rolling_restart::StoreRestart]) -> Self {
        let mut problems = Vec::new();
        if restarts.is_empty() {
            problems.push("no store node was restarted: nothing was checked (a run too short)".to_string());
        }
        for (i, r) in restarts.iter().enumerate().filter(|(_, r)| !r.reattached()) {
            problems.push(format!(
                "restart {} ({:?} of store node {}): back after {:?} s, memory segment {:?}, was {:?}: its memory \
                 was not re-attached",
                i + 1,
                r.stop,
                r.store,
                r.back_after_s,
                r.memory_after,
                r.memory_before
            ));
        }
        let checker = "store_restarts_reattach".into();
        CheckerVerdict { checker, valid: problems.is_empty(), checked: restarts.len(), problems }
    }

    pub fn zone_loss(outages: &[crate::zone_loss::ZoneOutage]) -> Self {
        let mut problems = Vec::new();
        if outages.is_empty() {
            problems.push("the zone was never lost: nothing was checked (a run too short)".to_string());
        }
        for (i, o) in outages.iter().enumerate() {
            match o.expired_after_s {
                None => problems.push(format!("loss {}: the masters never expired the lost zone", i + 1)),
                Some(_) if o.reads == 0 => problems.push(format!("loss {}: no key was read while it was down", i + 1)),
                Some(_) if o.failed > 0 => problems.push(format!(
                    "loss {}: {} of {} reads failed while the zone was down (the other zone holds every object); \
                     first: {}",
                    i + 1,
                    o.failed,
                    o.reads,
                    o.first_error.as_deref().unwrap_or("?")
                )),
                Some(_) => {}
            }
            if o.remounted_after_s.is_none() {
                problems.push(format!("loss {}: the zone's store node did not mount its segment again", i + 1));
            } else if o.repaired_after_s.is_none() {
                problems.push(format!(
                    "loss {}: {} keys still had one replica {} s after the zone came back ({} when it did): \
                     repair did not bring back what the zone lost",
                    i + 1,
                    o.single_at_end,
                    crate::zone_loss::REPAIR_MAX.as_secs(),
                    o.single_at_remount
                ));
            }
        }
        let checked = outages.iter().map(|o| o.reads as usize).sum();
        CheckerVerdict { checker: "zone_loss_reads".into(), valid: problems.is_empty(), checked, problems }
    }

    /// `quorum-pause`, `fd-flood`: no store node was expired during the run
    /// — each one registered before it (`before`: id → registration time)
    /// is still registered at the end, since the same time. Store nodes are
    /// never faulted there, so an expiry is a leader expiring nodes it could
    /// not hear (paused, or out of descriptors). `pauses`: such faults that ran.
    pub fn store_nodes_kept(
        before: &std::collections::BTreeMap<u64, u64>,
        after: &std::collections::BTreeMap<u64, u64>,
        pauses: usize,
    ) -> Self {
        let mut problems: Vec<String> = before
            .iter()
            .filter(|(id, since)| after.get(id) != Some(since))
            .map(|(id, since)| match after.get(id) {
                Some(again) => {
                    format!("store node {id} was expired during the run: registered at {since} ms, again at {again} ms")
                }
                None => format!("store node {id} (registered at {since} ms) is no longer registered"),
            })
            .collect();
        if pauses == 0 {
            problems
                .push("no whole-quorum pause or descriptor flood ran: nothing was checked (a run too short)".into());
        }
        if before.is_empty() {
            problems.push("no store node was registered before the run".into());
        }
        CheckerVerdict {
            checker: "store_nodes_kept".into(),
            valid: problems.is_empty(),
            checked: before.len(),
            problems,
        }
    }

    /// Every store node paused past the client TTL (and so expired by the
    /// masters) mounted its segment again by itself once resumed.
    pub fn store_remounted(remounts: &[Option<f64>]) -> Self {
        let problems: Vec<String> = remounts
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_none())
            .map(|(i, _)| format!("after pause {}: the resumed store node's segment was not mounted again", i + 1))
            .collect();
        CheckerVerdict {
            checker: "store_remounted".into(),
            valid: problems.is_empty(),
            checked: remounts.len(),
            problems,
        }
    }

    /// `ucx-stores`: every final read (every key, after healing) of an
    /// object with a memory replica crossed UCX (`over_ucx` of
    /// `memory_backed`; a disk-only object is served over TCP by design),
    /// and none failed over UCX. A run with no such read proves nothing of
    /// the route and fails too.
    pub fn ucx_reads(memory_backed: u64, over_ucx: u64, ucx_errors: u64) -> Self {
        let mut problems = Vec::new();
        if memory_backed == 0 {
            problems.push("no final read was of an object in memory: nothing showed the UCX route".into());
        }
        if over_ucx < memory_backed {
            problems.push(format!(
                "{} of the {memory_backed} final reads of objects in memory did not cross UCX (a TCP fallback?)",
                memory_backed - over_ucx
            ));
        }
        if ucx_errors > 0 {
            problems.push(format!("{ucx_errors} final reads failed over UCX with every store node up"));
        }
        let checked = memory_backed as usize;
        CheckerVerdict { checker: "ucx_reads".into(), valid: problems.is_empty(), checked, problems }
    }

    /// The master restarted on a wiped data dir under its old id refused to
    /// start, saying why (`None`: the fault never ran, a run too short).
    pub fn wipe_refused(outcome: Option<&(bool, String)>) -> Self {
        let problems = match outcome {
            Some((false, line)) => {
                vec![format!("a master with a wiped data dir did not refuse to start; last line: {line}")]
            }
            _ => vec![],
        };
        CheckerVerdict {
            checker: "wipe_refused".into(),
            valid: problems.is_empty(),
            checked: usize::from(outcome.is_some()),
            problems,
        }
    }

    pub fn preload_intact(objects: u64, missing: u64) -> Self {
        let problems = match missing {
            0 => vec![],
            n => vec![format!("{n} of {objects} preloaded (hard-pinned) keys are gone")],
        };
        CheckerVerdict {
            checker: "preload_intact".into(),
            valid: missing == 0,
            checked: usize::try_from(objects).unwrap_or(usize::MAX),
            problems,
        }
    }

    /// The `events` checker: what the run's watcher saw rebuilds the final
    /// listing (`event_feed.rs`).
    pub fn from_event_feed(v: &crate::event_feed::FeedVerdict) -> Self {
        let mut problems = v.problems.clone();
        let more = problems.len().saturating_sub(PROBLEMS_MAX);
        problems.truncate(PROBLEMS_MAX);
        if more > 0 {
            problems.push(format!("... and {more} more"));
        }
        CheckerVerdict {
            checker: "events".into(),
            valid: v.problems.is_empty(),
            checked: usize::try_from(v.counts.events).unwrap_or(usize::MAX),
            problems,
        }
    }

    /// The availability checker: no put refused for room while the live
    /// segments had room for it by the bound (`availability.rs`);
    /// `checked` is the refusals it judged.
    pub fn from_availability(v: &crate::availability::AvailabilityVerdict) -> Self {
        let mut problems: Vec<String> = v.violations.iter().take(PROBLEMS_MAX).map(|v| v.to_string()).collect();
        if v.counts.violations > problems.len() {
            problems.push(format!("... and {} more", v.counts.violations - problems.len()));
        }
        CheckerVerdict { checker: "availability".into(), valid: v.is_valid(), checked: v.counts.judged, problems }
    }

    /// `verified` reads returned bytes some put wrote; `corrupt_reads` did not.
    pub fn data_integrity(corrupt_reads: u64, verified: u64) -> Self {
        let problems = if corrupt_reads == 0 {
            vec![]
        } else {
            vec![format!("{corrupt_reads} reads returned bytes no put wrote")]
        };
        CheckerVerdict {
            checker: "bytes-verified".into(),
            valid: corrupt_reads == 0,
            checked: usize::try_from(verified + corrupt_reads).unwrap_or(usize::MAX),
            problems,
        }
    }
}

/// What the lease workload did (so a pass is seen not to be vacuous).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct LeaseReport {
    pub counts: LeaseCounts,
    /// Objects the leaders evicted (from their logs; all key spaces).
    pub evicted_objects: u64,
    /// Broken leases found (at most one of each kind per key).
    pub violations: usize,
    /// Memory replicas the leaders added to hot keys, and dropped again
    /// (from their logs; scenarios that replicate hot keys).
    pub hot_replicas_added: u64,
    pub hot_replicas_dropped: u64,
}

/// Counts and verdicts of one run.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    pub scenario: String,
    pub seed: u64,
    pub dir: PathBuf,
    pub ops: usize,
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
    pub faults: Vec<FaultEvent>,
    pub checkers: Vec<CheckerVerdict>,
    pub kv_leases: LeaseReport,
    /// What the committed-bytes checker read.
    pub committed_bytes: CommittedBytesCounts,
    /// What the stall writers did (scenarios that run them).
    pub stall_writers: Option<StallCounts>,
    /// What the run's watcher saw (the `events` checker).
    pub event_feed: crate::event_feed::FeedCounts,
    /// The preloaded state (scenarios that preload).
    pub preload: Option<PreloadReport>,
    /// The series of follower SIGSTOP bursts, with what every master said
    /// before and after each.
    pub follower_windows: Vec<FollowerWindow>,
    /// What the store kills and the tier reader did (scenarios with disks).
    pub disk_stores: Option<crate::disk_stores::DiskStoresReport>,
    pub nodes: Vec<NodeReport>,
    pub elapsed_s: f64,
    pub valid: bool,
    pub commit: String,
    /// Whether every master, store node and client spoke mutual TLS.
    pub tls: bool,
    /// Why puts of either workload were not acknowledged, by cause.
    pub put_failures: BTreeMap<String, PutFailures>,
    /// What the tenant probe did (`tenant_probe.rs`).
    pub tenant_probe: crate::tenant_probe::TenantProbeReport,
    /// `zone-loss`: every loss of the zone (`zone_loss.rs`).
    pub zone_outages: Vec<crate::zone_loss::ZoneOutage>,
    /// `rolling-restart`: every store node restart (`rolling_restart.rs`).
    pub store_restarts: Vec<crate::rolling_restart::StoreRestart>,
    /// What the availability checker judged (scenarios it runs in).
    pub availability: Option<crate::availability::AvailabilityCounts>,
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

impl RunReport {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        scenario: Scenario,
        seed: u64,
        dir: &Path,
        history: &History,
        faults: Vec<FaultEvent>,
        checkers: Vec<CheckerVerdict>,
        nodes: Vec<NodeReport>,
        elapsed: Duration,
    ) -> Self {
        let rs = history.records();
        let unknown = rs.iter().filter(|r| r.outcome == Outcome::Unknown).count();
        let failed = rs.iter().filter(|r| r.outcome == Outcome::Fail).count();
        let valid = checkers.iter().all(|c| c.valid);
        RunReport {
            scenario: scenario.name().into(),
            seed,
            dir: dir.to_path_buf(),
            ops: rs.len(),
            ok: rs.len() - unknown - failed,
            failed,
            unknown,
            faults,
            checkers,
            kv_leases: LeaseReport::default(),
            committed_bytes: CommittedBytesCounts::default(),
            stall_writers: None,
            event_feed: Default::default(),
            preload: None,
            follower_windows: Vec::new(),
            disk_stores: None,
            nodes,
            elapsed_s: elapsed.as_secs_f64(),
            valid,
            commit: commit(),
            tls: true,
            put_failures: BTreeMap::new(),
            tenant_probe: Default::default(),
            zone_outages: Vec::new(),
            store_restarts: Vec::new(),
            availability: None,
        }
    }

    /// Writes every report file.
    pub fn write(&self, history: &History) -> anyhow::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(self.dir.join("history.jsonl"))?);
        crate::jsonl::write_jsonl(&mut f, history.records())?;
        let faults: String =
            self.faults.iter().filter_map(|e| serde_json::to_string(e).ok()).map(|l| l + "\n").collect();
        std::fs::write(self.dir.join("faults.jsonl"), faults)?;
        std::fs::write(self.dir.join("verdict.json"), serde_json::to_string_pretty(self)?)?;
        std::fs::write(self.dir.join("summary.txt"), self.summary())?;
        std::fs::write(self.dir.join("timeline.html"), timeline_html(self, history))?;
        Ok(())
    }

    /// The readable summary, with the command that replays the run.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let tls = if self.tls { "mutual TLS" } else { "plain TCP" };
        let _ = writeln!(
            s,
            "scenario {}  seed {}  commit {}  {tls}  ({:.0} s)",
            self.scenario, self.seed, self.commit, self.elapsed_s
        );
        let no_tls = if self.tls { "" } else { " --no-tls" };
        let _ = writeln!(s, "replay:   mooncake-jepsen run --scenario {} --seed {}{no_tls}", self.scenario, self.seed);
        let _ = writeln!(
            s,
            "ops {}  ok {}  failed {}  unknown {}  faults {}",
            self.ops,
            self.ok,
            self.failed,
            self.unknown,
            self.faults.len() / 2
        );
        if !self.put_failures.is_empty() {
            let _ = writeln!(s, "put failures: {}", describe_put_failures(&self.put_failures));
        }
        let p = &self.tenant_probe;
        let _ = writeln!(
            s,
            "tenant probe: {} rounds, {} answers judged, {} crossed tenants",
            p.rounds,
            p.checked,
            p.crossings.len()
        );
        for (i, o) in self.zone_outages.iter().enumerate() {
            let _ = writeln!(
                s,
                "zone loss {}: expired after {}, {} of {} reads answered while down, mounted again after {}, \
                 {} keys with one replica then, whole again after {}",
                i + 1,
                o.expired_after_s.map_or("never".into(), |t| format!("{t:.1} s")),
                o.answered,
                o.reads,
                o.remounted_after_s.map_or("never".into(), |t| format!("{t:.1} s")),
                o.single_at_remount,
                o.repaired_after_s.map_or("never".into(), |t| format!("{t:.1} s")),
            );
        }
        for (i, r) in self.store_restarts.iter().enumerate() {
            let _ = writeln!(
                s,
                "store restart {}: {:?} of store node {}, back after {}, {}",
                i + 1,
                r.stop,
                r.store,
                r.back_after_s.map_or("never".into(), |t| format!("{t:.1} s")),
                if r.reattached() { "its memory re-attached" } else { "its memory NOT re-attached" },
            );
        }
        if let Some(a) = &self.availability {
            let _ = writeln!(s, "availability: {a}");
        }
        let l = &self.kv_leases;
        let _ = write!(s, "kv leases: {}  evicted {}  violations {}", l.counts, l.evicted_objects, l.violations);
        if l.hot_replicas_added + l.hot_replicas_dropped > 0 {
            let _ = write!(s, "  hot-key replicas added {} dropped {}", l.hot_replicas_added, l.hot_replicas_dropped);
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "committed bytes: {}", self.committed_bytes);
        let f = &self.event_feed;
        let _ = writeln!(
            s,
            "event feed: {} events ({} stored, {} removed, {} replicas), through revision {} of {}, {} resyncs, {} \
             outages",
            f.events, f.stored, f.removed, f.replicas, f.through, f.final_revision, f.resyncs, f.outages
        );
        if let Some(stall) = &self.stall_writers {
            let _ = writeln!(s, "stall writers: {stall}");
        }
        if let Some(d) = &self.disk_stores {
            let _ = writeln!(s, "disk stores: {d}");
        }
        if let Some(p) = &self.preload {
            let _ = writeln!(
                s,
                "preload: {} objects in {:.1} s ({:.0}/s), fake segment {}/{} bytes used, {} missing at the end",
                p.objects, p.load_s, p.objects_per_s, p.segment_used_bytes, p.segment_bytes, p.missing_at_end
            );
        }
        for w in &self.follower_windows {
            let terms = |ss: &[crate::leader_stability::MasterSample]| {
                ss.iter()
                    .map(|m| format!("m{}:t{:?}/l{:?}/e{:?}", m.id, m.term, m.leader_id, m.elections_started))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let _ = writeln!(
                s,
                "follower window {:.1}–{:.1} s: follower {} stopped {} times ({} ms), leader {} term {}; before [{}] after [{}]",
                w.start_ns as f64 / 1e9,
                w.end_ns as f64 / 1e9,
                w.victim,
                w.bursts,
                w.stopped_ms,
                w.leader,
                w.term,
                terms(&w.before),
                terms(&w.after)
            );
        }
        for c in &self.checkers {
            let _ = writeln!(
                s,
                "  {:<16} {}  ({} checked)",
                c.checker,
                if c.valid { "ok" } else { "VIOLATION" },
                c.checked
            );
            for p in &c.problems {
                let _ = writeln!(s, "      {p}");
            }
        }
        let _ = writeln!(s, "verdict: {}", if self.valid { "PASS" } else { "FAIL" });
        s
    }
}

/// Writes the stall writers' puts as `stall-history.jsonl`, one JSON
/// [`StallPut`](crate::stall_process::StallPut) a line.
pub fn write_stall_history(dir: &Path, puts: &[crate::stall_process::StallPut]) -> anyhow::Result<()> {
    write_json_lines(&dir.join("stall-history.jsonl"), puts)
}

/// Writes the tier reader's reads as `tier-reads.jsonl`, one JSON
/// [`TierRead`](crate::tier_reader::TierRead) a line.
pub fn write_tier_reads(dir: &Path, reads: &[crate::tier_reader::TierRead]) -> anyhow::Result<()> {
    write_json_lines(&dir.join("tier-reads.jsonl"), reads)
}

/// Writes the puts refused for room as `refusals.jsonl` and the masters'
/// terms as `terms.jsonl` (the availability checker's input besides the
/// histories), one JSON object a line.
pub fn write_refusals(
    dir: &Path,
    refusals: &[crate::availability::PutRefusal],
    terms: &[crate::term_watch::TermSample],
) -> anyhow::Result<()> {
    write_json_lines(&dir.join("refusals.jsonl"), refusals)?;
    write_json_lines(&dir.join("terms.jsonl"), terms)
}

/// Writes the lease workload's record as `lease-history.jsonl`, one JSON
/// [`LeaseRecord`] a line.
pub fn write_lease_history(dir: &Path, records: &[LeaseRecord]) -> anyhow::Result<()> {
    write_json_lines(&dir.join("lease-history.jsonl"), records)
}

fn write_json_lines<T: Serialize>(path: &Path, items: &[T]) -> anyhow::Result<()> {
    let mut out = String::new();
    for item in items {
        out += &serde_json::to_string(item)?;
        out.push('\n');
    }
    std::fs::write(path, out)?;
    Ok(())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A self-contained HTML page with the SVG timeline.
fn timeline_html(r: &RunReport, h: &History) -> String {
    let rs = h.records();
    let end_ns = rs.iter().filter_map(|o| o.complete_ns).max().unwrap_or(1).max(1);
    let procs: Vec<u64> = {
        let mut p: Vec<u64> = rs.iter().map(|o| o.process.0).collect();
        p.sort_unstable();
        p.dedup();
        p
    };
    let (w, lane, top) = (1200.0_f64, 18.0_f64, 40.0_f64);
    let plot_h = lane * procs.len() as f64;
    let thr_h = 80.0;
    let height = top + plot_h + thr_h + 40.0;
    let x = |ns: u64| 60.0 + (ns as f64 / end_ns as f64) * (w - 80.0);
    let mut svg = format!(
        "<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{height}' font-family='monospace' font-size='10'>"
    );
    // Operations.
    for o in rs {
        let lane_i = procs.iter().position(|p| *p == o.process.0).unwrap_or(0) as f64;
        let color = match (o.op, o.outcome) {
            (_, Outcome::Unknown) => "#f0ad4e",
            (_, Outcome::Fail) => "#d9534f",
            (OpKind::Put { .. }, _) => "#5cb85c",
            (OpKind::Remove | OpKind::RemoveAll, _) => "#8e44ad",
            _ => "#337ab7",
        };
        let x0 = x(o.invoke_ns);
        let x1 = x(o.complete_ns.unwrap_or(end_ns)).max(x0 + 0.8);
        let _ = write!(
            svg,
            "<rect x='{x0:.1}' y='{:.1}' width='{:.1}' height='{:.1}' fill='{color}'><title>{} {:?} {:?}</title></rect>",
            top + lane_i * lane + 2.0,
            x1 - x0,
            lane - 4.0,
            escape(&o.key),
            o.op,
            o.outcome
        );
    }
    // Fault bands on top, translucent, over lanes and throughput.
    let mut open: Option<(u64, String)> = None;
    for e in &r.faults {
        match (e.phase, open.take()) {
            ("start", _) => open = Some((e.t_ns, format!("{}: {}", e.fault, e.detail))),
            ("heal", Some((t0, label))) => {
                let _ = write!(
                    svg,
                    "<rect x='{:.1}' y='{:.1}' width='{:.1}' height='{:.1}' fill='#e83e8c' opacity='0.25'><title>{}</title></rect>\
                     <text x='{:.1}' y='{:.1}' fill='#a01050'>{}</text>",
                    x(t0),
                    top - 12.0,
                    (x(e.t_ns) - x(t0)).max(1.0),
                    plot_h + thr_h + 32.0,
                    escape(&label),
                    x(t0) + 2.0,
                    top - 3.0,
                    escape(label.split(':').next().unwrap_or(""))
                );
            }
            _ => {}
        }
    }
    for (i, p) in procs.iter().enumerate() {
        let _ = write!(svg, "<text x='4' y='{:.1}'>client {p}</text>", top + i as f64 * lane + 12.0);
    }
    throughput(&mut svg, rs.iter().filter_map(|o| o.complete_ns), end_ns, top + plot_h + 20.0, thr_h, &x);
    svg.push_str("</svg>");
    let legend = "green put ok · blue read ok · purple remove · red failed · orange unknown · pink band: fault";
    format!(
        "<!doctype html><html><head><meta charset='utf-8'><title>{} seed {}</title></head><body>\
         <h2>{} — seed {} — {}</h2><pre>{}</pre><p>{legend}</p>{svg}</body></html>",
        r.scenario,
        r.seed,
        r.scenario,
        r.seed,
        if r.valid { "PASS" } else { "FAIL" },
        escape(&r.summary())
    )
}

/// Completed operations per second as a polyline under the lanes.
fn throughput(svg: &mut String, done: impl Iterator<Item = u64>, end_ns: u64, y0: f64, h: f64, x: &dyn Fn(u64) -> f64) {
    let buckets = (end_ns / 1_000_000_000 + 1) as usize;
    let mut counts = vec![0u64; buckets];
    for ns in done {
        counts[(ns / 1_000_000_000) as usize] += 1;
    }
    let max = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let points: Vec<String> = counts
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{:.1},{:.1}", x(i as u64 * 1_000_000_000 + 500_000_000), y0 + h - (*c as f64 / max) * h))
        .collect();
    let _ = write!(
        svg,
        "<polyline fill='none' stroke='#333' points='{}'/><text x='4' y='{:.1}'>ops/s (max {max})</text>",
        points.join(" "),
        y0 + 10.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ucx_reads_fail_a_run_where_any_read_of_memory_did_not_cross_ucx_or_failed_there() {
        assert!(CheckerVerdict::ucx_reads(10, 10, 0).valid, "every read of memory over UCX");
        assert!(!CheckerVerdict::ucx_reads(10, 9, 0).valid, "one read of memory fell back to TCP");
        assert!(!CheckerVerdict::ucx_reads(10, 0, 0).valid, "every read fell back to TCP");
        assert!(!CheckerVerdict::ucx_reads(10, 10, 1).valid, "a read failed over UCX with every node up");
        assert!(!CheckerVerdict::ucx_reads(0, 0, 0).valid, "nothing showed the route");
    }

    #[test]
    fn a_run_without_an_acknowledged_put_fails_and_says_why_its_puts_failed() {
        let mut failures = BTreeMap::new();
        failures.insert("timed out".to_string(), PutFailures { count: 2, first: "no answer in 4s".into() });
        failures.insert("NoAvailableHandle".to_string(), PutFailures { count: 9, first: "only 1 segment".into() });
        let none = CheckerVerdict::puts_acknowledged(0, &failures);
        assert!(!none.valid);
        assert_eq!(
            none.problems,
            ["no put was acknowledged, so nothing durable was checked; put failures: NoAvailableHandle x9 (first: \
              only 1 segment); timed out x2 (first: no answer in 4s)"]
        );
        assert!(CheckerVerdict::puts_acknowledged(1, &failures).valid);
        assert_eq!(describe_put_failures(&BTreeMap::new()), "none");
    }
}
