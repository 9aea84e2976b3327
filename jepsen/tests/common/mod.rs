//! Test support: record builders, a seeded simulator of a linearizable KV
//! register that produces histories, read corruption, and a brute-force
//! linearizability oracle for small histories (independent of the crate's
//! search, so the two can be compared).
#![allow(dead_code)]
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use mooncake_jepsen::{History, LinearizabilityConfig, OpKind, OpRecord, Outcome, ProcessId, Verdict};

// ---------------------------------------------------------------- builders

pub fn record(
    process: u64,
    key: &str,
    op: OpKind,
    invoke_ns: u64,
    complete_ns: Option<u64>,
    outcome: Outcome,
) -> OpRecord {
    OpRecord { process: ProcessId(process), key: key.to_string(), op, invoke_ns, complete_ns, outcome }
}

pub fn put_ok(process: u64, key: &str, value: u64, invoke_ns: u64, complete_ns: u64) -> OpRecord {
    record(process, key, OpKind::Put { value }, invoke_ns, Some(complete_ns), Outcome::Ok)
}

pub fn put_fail(process: u64, key: &str, value: u64, invoke_ns: u64, complete_ns: u64) -> OpRecord {
    record(process, key, OpKind::Put { value }, invoke_ns, Some(complete_ns), Outcome::Fail)
}

/// A put whose client never heard back.
pub fn put_unknown(process: u64, key: &str, value: u64, invoke_ns: u64) -> OpRecord {
    record(process, key, OpKind::Put { value }, invoke_ns, None, Outcome::Unknown)
}

/// A put whose client gave up at `gave_up_ns`; it may still take effect later.
pub fn put_timed_out(process: u64, key: &str, value: u64, invoke_ns: u64, gave_up_ns: u64) -> OpRecord {
    record(process, key, OpKind::Put { value }, invoke_ns, Some(gave_up_ns), Outcome::Unknown)
}

pub fn get(process: u64, key: &str, value: Option<u64>, invoke_ns: u64, complete_ns: u64) -> OpRecord {
    record(process, key, OpKind::Get, invoke_ns, Some(complete_ns), Outcome::GetOk { value })
}

pub fn exists(process: u64, key: &str, exists: bool, invoke_ns: u64, complete_ns: u64) -> OpRecord {
    record(process, key, OpKind::Exists, invoke_ns, Some(complete_ns), Outcome::ExistsOk { exists })
}

pub fn remove(process: u64, key: &str, existed: bool, invoke_ns: u64, complete_ns: u64) -> OpRecord {
    record(process, key, OpKind::Remove, invoke_ns, Some(complete_ns), Outcome::RemoveOk { existed })
}

pub fn remove_unknown(process: u64, key: &str, invoke_ns: u64) -> OpRecord {
    record(process, key, OpKind::Remove, invoke_ns, None, Outcome::Unknown)
}

/// An answered non-force RemoveAll, as one key sees it: removed it or kept it.
pub fn remove_all(process: u64, key: &str, invoke_ns: u64, complete_ns: u64) -> OpRecord {
    record(process, key, OpKind::RemoveAll, invoke_ns, Some(complete_ns), Outcome::Ok)
}

pub fn history(records: Vec<OpRecord>) -> History {
    History::new(records).expect("test history is well formed")
}

pub fn check(records: Vec<OpRecord>) -> Verdict {
    mooncake_jepsen::check_linearizable(&history(records), &LinearizabilityConfig::default())
}

/// Checks reading a not-found remove strictly (the key was absent).
pub fn check_strict(records: Vec<OpRecord>) -> Verdict {
    let config = LinearizabilityConfig { remove_not_found_may_have_removed: false, ..Default::default() };
    mooncake_jepsen::check_linearizable(&history(records), &config)
}

/// The single failure reason of a verdict, asserting it is invalid.
pub fn only_reason(verdict: &Verdict) -> String {
    assert!(!verdict.valid, "expected a violation, got {verdict}");
    assert_eq!(verdict.failures.len(), 1, "{verdict}");
    eprintln!("{verdict}");
    verdict.failures[0].reason.clone()
}

// ---------------------------------------------------------------- seeds

/// The seeds to run: `JEPSEN_SEED=<n>` replays one, `JEPSEN_SEED_COUNT=<n>`
/// runs n seeds from `default.start` (a longer soak), otherwise `default`.
pub fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
    let env = |name: &str| std::env::var(name).ok().and_then(|value| value.parse::<u64>().ok());
    match (env("JEPSEN_SEED"), env("JEPSEN_SEED_COUNT")) {
        (Some(seed), _) => vec![seed],
        (None, Some(count)) => (default.start..default.start + count).collect(),
        (None, None) => default.collect(),
    }
}

/// SplitMix64: small, seeded, and the same on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance_per_mille(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

// ---------------------------------------------------------------- simulator

/// Shape of a simulated workload.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub processes: u64,
    pub keys: u64,
    pub ops: usize,
    /// Ops whose client never learns the outcome (half of them still take effect).
    pub unknown_per_mille: u64,
    /// Ops that definitely fail without effect (NOT_LEADER, lease, …).
    pub fail_per_mille: u64,
    /// Longest op, in ns; ops take 1..=this.
    pub max_op_ns: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self { processes: 6, keys: 3, ops: 300, unknown_per_mille: 30, fail_per_mille: 20, max_op_ns: 100 }
    }
}

/// How a planned op ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    /// Takes effect at `effect_ns` within its interval; the client sees the answer.
    Answered,
    /// Never takes effect; the client sees a failure.
    Failed,
    /// The client never learns; `applies` says whether it took effect.
    Unknown { applies: bool },
}

struct Planned {
    record: OpRecord,
    effect_ns: u64,
    fate: Fate,
}

/// A history of a truly linearizable register with random concurrency and
/// random unknown outcomes: ops are planned with an effect instant inside
/// their interval (or any time after invoke, for unknown ones), then applied
/// in effect order to compute the answers.
pub fn simulate(seed: u64, config: &SimConfig) -> History {
    let mut rng = Rng::new(seed);
    let mut planned = plan(&mut rng, config);
    apply_in_effect_order(&mut planned);
    history(planned.into_iter().map(|p| p.record).collect())
}

fn plan(rng: &mut Rng, config: &SimConfig) -> Vec<Planned> {
    let mut free_at_ns = vec![0u64; config.processes as usize];
    let mut next_value = 1u64;
    let mut planned = Vec::with_capacity(config.ops);
    for _ in 0..config.ops {
        let process = (0..free_at_ns.len()).min_by_key(|&p| (free_at_ns[p], p)).unwrap_or(0);
        let key = format!("k{}", rng.below(config.keys));
        let op = random_kind(rng, &mut next_value);
        let invoke_ns = free_at_ns[process] + rng.below(20);
        let duration_ns = 1 + rng.below(config.max_op_ns);
        let complete_ns = invoke_ns + duration_ns;
        let (fate, effect_ns) = random_fate(rng, config, invoke_ns, duration_ns);
        let recorded_complete_ns = match fate {
            Fate::Unknown { .. } if rng.chance_per_mille(500) => None,
            _ => Some(complete_ns),
        };
        let record = OpRecord {
            process: ProcessId(process as u64),
            key,
            op,
            invoke_ns,
            complete_ns: recorded_complete_ns,
            outcome: Outcome::Unknown,
        };
        planned.push(Planned { record, effect_ns, fate });
        free_at_ns[process] = complete_ns + rng.below(10);
    }
    planned
}

fn random_kind(rng: &mut Rng, next_value: &mut u64) -> OpKind {
    match rng.below(100) {
        0..35 => {
            *next_value += 1;
            OpKind::Put { value: *next_value - 1 }
        }
        35..65 => OpKind::Get,
        65..75 => OpKind::Exists,
        75..94 => OpKind::Remove,
        _ => OpKind::RemoveAll,
    }
}

fn random_fate(rng: &mut Rng, config: &SimConfig, invoke_ns: u64, duration_ns: u64) -> (Fate, u64) {
    let roll = rng.below(1000);
    if roll < config.unknown_per_mille {
        // It may take effect long after the client gave up.
        let effect_ns = invoke_ns + rng.below(duration_ns * 10 + 1);
        (Fate::Unknown { applies: rng.chance_per_mille(500) }, effect_ns)
    } else if roll < config.unknown_per_mille + config.fail_per_mille {
        (Fate::Failed, invoke_ns)
    } else {
        (Fate::Answered, invoke_ns + rng.below(duration_ns + 1))
    }
}

fn apply_in_effect_order(planned: &mut [Planned]) {
    let mut order: Vec<usize> = (0..planned.len()).collect();
    order.sort_by_key(|&i| (planned[i].effect_ns, i));
    let mut registers: BTreeMap<String, Option<u64>> = BTreeMap::new();
    for i in order {
        let p = &mut planned[i];
        let state = registers.entry(p.record.key.clone()).or_default();
        p.record.outcome = match p.fate {
            Fate::Failed => Outcome::Fail,
            Fate::Unknown { applies } => {
                if applies {
                    apply(state, p.record.op, p.effect_ns);
                }
                Outcome::Unknown
            }
            Fate::Answered => apply(state, p.record.op, p.effect_ns),
        };
    }
}

/// Applies `op` at `effect_ns` to a register the way the store does; returns
/// its answer. A RemoveAll keeps a key it finds leased: here, when it takes
/// effect at an odd instant.
pub fn apply(state: &mut Option<u64>, op: OpKind, effect_ns: u64) -> Outcome {
    match op {
        OpKind::Put { value } if state.is_none() => {
            *state = Some(value);
            Outcome::Ok
        }
        // OBJECT_ALREADY_EXISTS: recorded as a failed put.
        OpKind::Put { .. } => Outcome::Fail,
        OpKind::Get => Outcome::GetOk { value: *state },
        OpKind::Exists => Outcome::ExistsOk { exists: state.is_some() },
        OpKind::Remove => Outcome::RemoveOk { existed: state.take().is_some() },
        OpKind::RemoveAll => {
            if effect_ns.is_multiple_of(2) {
                *state = None;
            }
            Outcome::Ok
        }
    }
}

// ---------------------------------------------------------------- corruption

/// How to corrupt one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// Return a value no put ever wrote: always a violation.
    NeverWritten,
    /// Return another value of the same key, or flip found/not-found: usually
    /// a violation, but not always (a concurrent write may explain it).
    Plausible,
}

/// Changes the answer of one random completed get; `None` if no get can be changed.
pub fn corrupt_read(history: &History, rng: &mut Rng, corruption: Corruption) -> Option<(History, usize)> {
    let mut records = history.records().to_vec();
    let gets: Vec<usize> =
        (0..records.len()).filter(|&i| matches!(records[i].outcome, Outcome::GetOk { .. })).collect();
    for _ in 0..gets.len().max(1) * 4 {
        let index = *gets.get(rng.below(gets.len().max(1) as u64) as usize)?;
        let Outcome::GetOk { value } = records[index].outcome else { continue };
        let Some(new_value) = other_value(&records, index, value, rng, corruption) else { continue };
        records[index].outcome = Outcome::GetOk { value: new_value };
        return Some((history_or_panic(records), index));
    }
    None
}

fn other_value(
    records: &[OpRecord],
    index: usize,
    value: Option<u64>,
    rng: &mut Rng,
    corruption: Corruption,
) -> Option<Option<u64>> {
    if corruption == Corruption::NeverWritten {
        return Some(Some((1 << 40) + rng.below(1 << 20)));
    }
    let key = &records[index].key;
    let mut candidates: Vec<Option<u64>> = records
        .iter()
        .filter(|r| &r.key == key && r.outcome != Outcome::Fail)
        .filter_map(|r| match r.op {
            OpKind::Put { value } => Some(Some(value)),
            _ => None,
        })
        .collect();
    candidates.push(None);
    candidates.retain(|candidate| *candidate != value);
    if candidates.is_empty() {
        return None;
    }
    Some(candidates[rng.below(candidates.len() as u64) as usize])
}

fn history_or_panic(records: Vec<OpRecord>) -> History {
    History::new(records).expect("a corrupted read keeps the history well formed")
}

// ---------------------------------------------------------------- oracle

/// One op as the oracle sees it.
#[derive(Clone, Copy, Debug)]
struct OracleOp {
    op: OpKind,
    outcome: Outcome,
    invoke_ns: u64,
    /// `None`: may take effect any time after invoke, or never.
    deadline_ns: Option<u64>,
}

/// Brute-force linearizability: tries every order of every key's ops that
/// respects real time. Only for small histories (≤ ~9 ops per key).
pub fn brute_force_linearizable(history: &History, retried_remove: bool) -> bool {
    let mut keys: BTreeMap<&str, Vec<OracleOp>> = BTreeMap::new();
    for r in history.records() {
        let unknown_read = r.outcome == Outcome::Unknown && matches!(r.op, OpKind::Get | OpKind::Exists);
        if r.outcome == Outcome::Fail || unknown_read {
            continue;
        }
        let deadline_ns = if r.outcome == Outcome::Unknown { None } else { r.complete_ns };
        let op = OracleOp { op: r.op, outcome: r.outcome, invoke_ns: r.invoke_ns, deadline_ns };
        keys.entry(r.key.as_str()).or_default().push(op);
    }
    keys.values().all(|ops| {
        assert!(ops.len() <= 12, "brute force oracle used on {} ops", ops.len());
        orders_exist(ops, &mut vec![false; ops.len()], None, retried_remove)
    })
}

fn orders_exist(ops: &[OracleOp], placed: &mut Vec<bool>, state: Option<u64>, retried_remove: bool) -> bool {
    let all_definite_placed = ops.iter().zip(placed.iter()).all(|(op, &done)| done || op.deadline_ns.is_none());
    if all_definite_placed {
        return true;
    }
    for candidate in 0..ops.len() {
        if placed[candidate] || !may_go_next(ops, placed, candidate) {
            continue;
        }
        for next_state in oracle_steps(ops[candidate], state, retried_remove) {
            placed[candidate] = true;
            let found = orders_exist(ops, placed, next_state, retried_remove);
            placed[candidate] = false;
            if found {
                return true;
            }
        }
    }
    false
}

/// No unplaced op completed strictly before `candidate` was invoked.
fn may_go_next(ops: &[OracleOp], placed: &[bool], candidate: usize) -> bool {
    let invoke_ns = ops[candidate].invoke_ns;
    (0..ops.len())
        .all(|other| placed[other] || other == candidate || ops[other].deadline_ns.is_none_or(|d| d >= invoke_ns))
}

/// Every state `op` may leave in `state` (none: its answer is impossible).
fn oracle_steps(op: OracleOp, state: Option<u64>, retried_remove: bool) -> Vec<Option<u64>> {
    match (op.op, op.outcome) {
        // Removed the key, or kept it (it was leased).
        (OpKind::RemoveAll, Outcome::Ok) => vec![None, state],
        (OpKind::RemoveAll, Outcome::Unknown) => vec![None],
        _ => oracle_step(op, state, retried_remove).into_iter().collect(),
    }
}

fn oracle_step(op: OracleOp, state: Option<u64>, retried_remove: bool) -> Option<Option<u64>> {
    match (op.op, op.outcome) {
        (OpKind::Put { value }, Outcome::Ok) => state.is_none().then_some(Some(value)),
        (OpKind::Put { value }, Outcome::Unknown) => Some(if state.is_none() { Some(value) } else { state }),
        (OpKind::Get, Outcome::GetOk { value }) => (value == state).then_some(state),
        (OpKind::Exists, Outcome::ExistsOk { exists }) => (exists == state.is_some()).then_some(state),
        (OpKind::Remove, Outcome::RemoveOk { existed: true }) => state.is_some().then_some(None),
        (OpKind::Remove, Outcome::RemoveOk { existed: false }) => (retried_remove || state.is_none()).then_some(None),
        (OpKind::Remove, Outcome::Unknown) => Some(None),
        other => panic!("oracle given an op it should have dropped: {other:?}"),
    }
}

// ---------------------------------------------------------------- arbitrary

/// A small history with arbitrary (well-formed) answers, mostly impossible:
/// random kinds, random outcomes fitting each kind, random intervals on one key.
pub fn arbitrary_history(seed: u64, ops: usize) -> History {
    let mut rng = Rng::new(seed);
    let records = (0..ops as u64)
        .map(|i| {
            let op = match rng.below(4) {
                0 => OpKind::Put { value: i + 1 },
                1 => OpKind::Get,
                2 => OpKind::Exists,
                // One remove in three is a RemoveAll (no extra draw).
                _ if i % 3 == 0 => OpKind::RemoveAll,
                _ => OpKind::Remove,
            };
            let outcome = arbitrary_outcome(&mut rng, op, ops as u64);
            let invoke_ns = rng.below(60);
            let complete_ns = match outcome {
                Outcome::Unknown if rng.chance_per_mille(500) => None,
                _ => Some(invoke_ns + rng.below(30)),
            };
            record(i, "k", op, invoke_ns, complete_ns, outcome)
        })
        .collect();
    history(records)
}

fn arbitrary_outcome(rng: &mut Rng, op: OpKind, ops: u64) -> Outcome {
    match (rng.below(10), op) {
        (0, _) => Outcome::Unknown,
        (1, _) => Outcome::Fail,
        (_, OpKind::Put { .. }) => Outcome::Ok,
        (_, OpKind::Get) => Outcome::GetOk { value: rng.chance_per_mille(300).then(|| 1 + rng.below(ops)) },
        (_, OpKind::Exists) => Outcome::ExistsOk { exists: rng.chance_per_mille(500) },
        (_, OpKind::Remove) => Outcome::RemoveOk { existed: rng.chance_per_mille(500) },
        (_, OpKind::RemoveAll) => Outcome::Ok,
    }
}

// ---------------------------------------------------------------- host tests

/// Set (by `.ci/run`) where root and the chaos tools must be present: a
/// host test then fails instead of skipping, so CI cannot pass without
/// running it.
pub const CHAOS_REQUIRED_ENV: &str = "MOONCAKE_CHAOS_REQUIRED";

/// Reports why a host test cannot run here: skips it (prints `SKIPPED`) on
/// a developer machine, panics where [`CHAOS_REQUIRED_ENV`] is set.
pub fn skip_or_fail(what: &str, reason: impl std::fmt::Display) {
    if std::env::var_os(CHAOS_REQUIRED_ENV).is_some() {
        panic!("{what}: {reason} ({CHAOS_REQUIRED_ENV} is set, so this test must run)");
    }
    eprintln!("SKIPPED ({what}): {reason}");
}

/// Options of a chaos run of `scenario` for a host test, or `None` (after
/// [`skip_or_fail`]) when this host cannot run one: not root, chaos tools
/// or the `mooncake` binary missing. `prefix` names the run's namespaces.
pub fn chaos_run_options(
    scenario: mooncake_jepsen::scenario::Scenario,
    seed: u64,
    duration: std::time::Duration,
    master_flags: Vec<String>,
    results: &std::path::Path,
    prefix: &str,
) -> Option<mooncake_jepsen::runner::RunOptions> {
    if let Err(e) = mooncake_jepsen::safety::require_root().and_then(|()| mooncake_jepsen::safety::check_tools()) {
        skip_or_fail("chaos host", e);
        return None;
    }
    let bin = match mooncake_local_cluster::find_binary("mooncake") {
        Ok(b) => b,
        Err(e) => {
            skip_or_fail("mooncake binary", e);
            return None;
        }
    };
    if master_flags.iter().any(|f| f.starts_with("--dev-unsafe")) && !knows_planted_bugs(&bin, "master") {
        return None;
    }
    Some(mooncake_jepsen::runner::RunOptions {
        scenario,
        seed,
        duration,
        rate: 200,
        clients: 6,
        bin,
        harness_bin: env!("CARGO_BIN_EXE_mooncake-jepsen").into(),
        results_root: results.to_path_buf(),
        master_flags,
        store_flags: Vec::new(),
        prefix: format!("{prefix}{}", std::process::id() % 10_000),
        preload_objects: mooncake_jepsen::preload::PRELOAD_OBJECTS_DEFAULT,
        tls: true,
    })
}

/// Whether `bin`'s `mooncake <command>` knows the planted-bug flags (a
/// build with the `planted-bugs` feature); when not, [`skip_or_fail`]
/// says how to build one.
pub fn knows_planted_bugs(bin: &std::path::Path, command: &str) -> bool {
    let help = std::process::Command::new(bin).args([command, "--help"]).output();
    let knows = help.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--dev-unsafe-"));
    if !knows {
        skip_or_fail(
            "planted bugs",
            format!(
                "{} {command} has no --dev-unsafe-* flags: build it with the planted-bugs feature (cargo test \
                 --workspace --features mooncake-cli/planted-bugs, as the README says)",
                bin.display()
            ),
        );
    }
    knows
}

/// Runs `opts` (from [`chaos_run_options`]) to its verdict and prints its
/// summary (the evidence when a test fails).
pub fn run_reported(opts: mooncake_jepsen::runner::RunOptions) -> mooncake_jepsen::report::RunReport {
    let report = mooncake_jepsen::runner::run(opts).expect("the run itself completes");
    eprint!("{}", report.summary());
    report
}

/// The verdict of `checker` in `report`.
pub fn verdict<'a>(
    report: &'a mooncake_jepsen::report::RunReport,
    checker: &str,
) -> &'a mooncake_jepsen::report::CheckerVerdict {
    report.checkers.iter().find(|c| c.checker == checker).unwrap_or_else(|| panic!("a {checker} verdict"))
}
