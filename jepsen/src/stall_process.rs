//! The harness's side of the stall writers ([`crate::stall_writer`]): it
//! starts each as a child process inside the client namespace, reads its
//! JSON lines on a thread (stamping them on the run's clock), tells when
//! every writer has stopped itself, continues them, and at the end stops,
//! kills and reaps them and hands back what they did.
//!
//! A writer counts as stopped when the kernel reports it stopped (state
//! `T` in `/proc/<pid>/stat`) AND the harness has read the `stall` line it
//! printed just before: so every put it started is recorded, with its
//! harness-clock start time, before the nemesis kills a leader or
//! continues it. That ordering makes the start time a safe lower bound of
//! the put's commit (which needs the SIGCONT).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::history::Outcome;
use crate::net::Network;
use crate::stall_writer::{STALL_VALUE_BASE, STALL_VALUE_WRITER_SHIFT, StallLine, StallOutcome};
use crate::workload::{RemoveAllCall, Shared};

/// Key prefix of every stall writer put (writer `w`: `stall/w<w>/`). The
/// register and lease workloads never use it.
pub const STALL_KEY_PREFIX: &str = "stall/";
/// How often the harness looks at a writer's process state.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// Lines a writer may print that are not [`StallLine`]s before the harness
/// stops logging them (it still counts them).
const BAD_LINES_LOGGED_MAX: u64 = 10;

/// What the stall writers are started with.
#[derive(Clone, Debug)]
pub struct StallSpawn {
    /// The `mooncake-jepsen` binary (runs `stall-writer`).
    pub bin: PathBuf,
    /// Namespace (host) they run in.
    pub host: String,
    pub masters: Vec<String>,
    /// The client certificate files they connect with (`None`: plain TCP).
    pub tls: Option<mooncake_tls::TlsFiles>,
    pub local_hostname: String,
    pub writers: usize,
    pub object_bytes: usize,
    pub puts_per_stall: usize,
    pub seed: u64,
    /// Directory of their logs (stderr).
    pub log_dir: PathBuf,
}

/// One put of a stall writer, as the harness saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StallPut {
    pub key: String,
    pub value: u64,
    /// When the harness read its `start` line (before its PutStart was
    /// answered, so before any commit of it).
    pub invoke_ns: u64,
    pub complete_ns: Option<u64>,
    /// `None`: still in flight when the writer was killed.
    pub outcome: Option<StallOutcome>,
    pub detail: String,
}

impl StallPut {
    /// Whether one of `remove_alls` may have removed this put's object: a
    /// RemoveAll not known to have failed that was not answered before the
    /// put started (an unanswered one may take effect at any time).
    pub fn may_be_removed_by(&self, remove_alls: &[RemoveAllCall]) -> bool {
        remove_alls.iter().any(|call| match call.outcome {
            Outcome::Fail => false,
            Outcome::Unknown => true,
            _ => call.complete_ns >= self.invoke_ns,
        })
    }
}

/// What the stall writers did in a run (for the report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StallCounts {
    pub writers: usize,
    /// Times a writer stopped itself (summed over the writers).
    pub stalls: u64,
    pub started: usize,
    pub ok: usize,
    pub expired: usize,
    pub error: usize,
    /// Started, not ended when the writer was killed.
    pub unfinished: usize,
}

impl StallCounts {
    pub fn of(writers: usize, stalls: u64, puts: &[StallPut]) -> Self {
        let count = |o: Option<StallOutcome>| puts.iter().filter(|p| p.outcome == o).count();
        StallCounts {
            writers,
            stalls,
            started: puts.len(),
            ok: count(Some(StallOutcome::Ok)),
            expired: count(Some(StallOutcome::Expired)),
            error: count(Some(StallOutcome::Error)),
            unfinished: count(None),
        }
    }
}

impl std::fmt::Display for StallCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "writers {}  stalls {}  puts {}  ok {}  expired {}  error {}  unfinished {}",
            self.writers, self.stalls, self.started, self.ok, self.expired, self.error, self.unfinished
        )
    }
}

/// What one writer's reader thread has seen.
#[derive(Default)]
struct Seen {
    puts: Vec<StallPut>,
    by_key: BTreeMap<String, usize>,
    stalls: u64,
    bad_lines: u64,
}

impl Seen {
    fn take(&mut self, line: StallLine, now_ns: u64) {
        match line {
            StallLine::Start { key, value } => {
                self.by_key.insert(key.clone(), self.puts.len());
                let put =
                    StallPut { key, value, invoke_ns: now_ns, complete_ns: None, outcome: None, detail: "".into() };
                self.puts.push(put);
            }
            StallLine::Stall { .. } => self.stalls += 1,
            StallLine::End { key, outcome, detail, .. } => {
                if let Some(put) = self.by_key.get(&key).and_then(|i| self.puts.get_mut(*i)) {
                    put.complete_ns = Some(now_ns);
                    put.outcome = Some(outcome);
                    put.detail = detail;
                } else {
                    self.bad_lines += 1;
                }
            }
        }
    }
}

/// One stall writer process.
struct StallProcess {
    index: usize,
    child: Option<Child>,
    pid: u32,
    seen: Arc<Mutex<Seen>>,
    reader: Option<JoinHandle<()>>,
    /// SIGCONTs sent: a new stop shows as one more `stall` line than this.
    resumed: u64,
}

/// The run's stall writers.
pub struct StallWriters {
    procs: Vec<StallProcess>,
}

impl StallWriters {
    /// Starts `spawn.writers` writers inside `spawn.host`'s namespace.
    pub fn start(net: &Network, spawn: &StallSpawn, shared: Arc<Shared>) -> anyhow::Result<Self> {
        let mut procs = Vec::new();
        for index in 0..spawn.writers {
            procs.push(StallProcess::start(net, spawn, index, shared.clone())?);
        }
        Ok(StallWriters { procs })
    }

    /// Waits until every writer has stopped itself again (since the last
    /// [`resume`](Self::resume)); false after `within`. A writer that exited
    /// is an error (its log says why).
    pub async fn wait_stopped(&mut self, within: Duration) -> anyhow::Result<bool> {
        let deadline = Instant::now() + within;
        loop {
            let mut all = true;
            for p in &mut self.procs {
                all &= p.is_stopped()?;
            }
            if all {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// Puts in flight in the current stop (half written), across writers.
    pub fn half_written(&self) -> usize {
        self.procs.iter().map(|p| p.seen().puts.iter().filter(|put| put.outcome.is_none()).count()).sum()
    }

    /// SIGCONT to every stopped writer.
    pub fn resume(&mut self) -> anyhow::Result<()> {
        for p in &mut self.procs {
            p.resume()?;
        }
        Ok(())
    }

    /// Lets the writers finish the round they are in (bounded by
    /// `within`), then kills and reaps them; returns every put they made
    /// and the counts.
    pub async fn finish(mut self, within: Duration) -> anyhow::Result<(Vec<StallPut>, StallCounts)> {
        self.resume()?;
        if !self.wait_stopped(within).await? {
            tracing::warn!("stall writers did not stop again within {within:?}; killing them mid-round");
        }
        let mut puts = Vec::new();
        let mut stalls = 0;
        for p in &mut self.procs {
            p.kill()?;
            let seen = p.seen();
            stalls += seen.stalls;
            if seen.bad_lines > 0 {
                tracing::warn!(writer = p.index, lines = seen.bad_lines, "stall writer printed lines it should not");
            }
            puts.extend(seen.puts.iter().cloned());
        }
        let counts = StallCounts::of(self.procs.len(), stalls, &puts);
        Ok((puts, counts))
    }
}

impl StallProcess {
    fn start(net: &Network, spawn: &StallSpawn, index: usize, shared: Arc<Shared>) -> anyhow::Result<Self> {
        let first_value = STALL_VALUE_BASE + ((index as u64) << STALL_VALUE_WRITER_SHIFT);
        let mut cmd = net.command(&spawn.host, &spawn.bin.display().to_string())?;
        cmd.args([
            "stall-writer".to_string(),
            format!("--masters={}", spawn.masters.join(",")),
            format!("--local-hostname={}", spawn.local_hostname),
            format!("--key-prefix={STALL_KEY_PREFIX}w{index}/"),
            format!("--first-value={first_value}"),
            format!("--seed={}", spawn.seed ^ (index as u64 + 1).wrapping_mul(0x5851_f42d_4c95_7f2d)),
            format!("--object-bytes={}", spawn.object_bytes),
            format!("--puts-per-stall={}", spawn.puts_per_stall),
        ]);
        cmd.args(spawn.tls.as_ref().map(mooncake_tls::TlsFiles::to_args).unwrap_or_default());
        crate::access::clear_tls_env(&mut cmd);
        let log = log_file(&spawn.log_dir, index)?;
        cmd.env("RUST_LOG", "info").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log);
        let mut child = cmd.spawn().with_context(|| format!("starting stall writer {index}"))?;
        let pid = child.id();
        crate::registry::track(pid);
        let stdout = child.stdout.take().context("stall writer stdout")?;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let reader_seen = seen.clone();
        let reader = std::thread::Builder::new()
            .name(format!("stall-reader-{index}"))
            .spawn(move || read_lines(stdout, &reader_seen, &shared))
            .context("spawning a stall writer reader")?;
        Ok(StallProcess { index, child: Some(child), pid, seen, reader: Some(reader), resumed: 0 })
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stopped by itself since the last resume, and its stall line read.
    fn is_stopped(&mut self) -> anyhow::Result<bool> {
        let child = self.child.as_mut().context("stall writer already killed")?;
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("stall writer {} exited ({status}); see nodes/stall-writer-{}.log", self.index, self.index);
        }
        Ok(self.seen().stalls > self.resumed && process_state(self.pid)? == Some('T'))
    }

    fn resume(&mut self) -> anyhow::Result<()> {
        if self.seen().stalls > self.resumed && process_state(self.pid)? == Some('T') {
            crate::faults::resume(self.pid)?;
            self.resumed += 1;
        }
        Ok(())
    }

    fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            crate::registry::untrack(self.pid);
            crate::faults::kill9_and_reap(&mut child)?;
        }
        if let Some(reader) = self.reader.take() {
            // The pipe closed with the process: the thread ends at EOF.
            let _ = reader.join();
        }
        Ok(())
    }
}

impl Drop for StallProcess {
    fn drop(&mut self) {
        if let Err(e) = self.kill() {
            tracing::warn!(writer = self.index, error = %e, "killing a stall writer");
        }
    }
}

fn log_file(dir: &Path, index: usize) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("stall-writer-{index}.log"));
    Ok(std::fs::OpenOptions::new().create(true).append(true).open(path)?)
}

/// The reader thread: every line, stamped on the run's clock, until EOF.
fn read_lines(stdout: std::process::ChildStdout, seen: &Mutex<Seen>, shared: &Shared) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let now_ns = shared.now_ns();
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        match serde_json::from_str::<StallLine>(&line) {
            Ok(parsed) => seen.take(parsed, now_ns),
            Err(e) => {
                seen.bad_lines += 1;
                if seen.bad_lines <= BAD_LINES_LOGGED_MAX {
                    tracing::warn!(line, error = %e, "stall writer: not a stall line");
                }
            }
        }
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` stopped, `Z`, …);
/// `None` if it is gone.
fn process_state(pid: u32) -> anyhow::Result<Option<char>> {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => Ok(state_of(&stat)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading /proc/{pid}/stat")),
    }
}

/// The state field of a `/proc/<pid>/stat` line: the first field after the
/// command name, which is in parentheses and may itself hold `)` or spaces.
fn state_of(stat: &str) -> Option<char> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_last_parenthesis() {
        assert_eq!(state_of("4242 (mooncake-jepsen) T 1 4242 4242 0 -1"), Some('T'));
        assert_eq!(state_of("7 (odd) name) (x) S 1 7"), Some('S'));
        assert_eq!(state_of("garbage"), None);
        assert_eq!(state_of("1 (x)"), None);
        let own = process_state(std::process::id()).expect("own stat");
        assert!(matches!(own, Some('R' | 'S')), "{own:?}");
    }

    #[test]
    fn lines_become_puts_with_harness_times() {
        let mut seen = Seen::default();
        seen.take(StallLine::Start { key: "a".into(), value: 1 }, 10);
        seen.take(StallLine::Start { key: "b".into(), value: 2 }, 11);
        seen.take(StallLine::Stall { round: 0, in_flight: 2 }, 12);
        seen.take(StallLine::End { key: "a".into(), value: 1, outcome: StallOutcome::Ok, detail: "".into() }, 20);
        seen.take(StallLine::End { key: "zz".into(), value: 9, outcome: StallOutcome::Ok, detail: "".into() }, 21);
        assert_eq!(seen.stalls, 1);
        assert_eq!(seen.bad_lines, 1, "an end of a put never started");
        assert_eq!(seen.puts[0].complete_ns, Some(20));
        assert_eq!(seen.puts[1].outcome, None);
        let counts = StallCounts::of(1, seen.stalls, &seen.puts);
        assert_eq!((counts.started, counts.ok, counts.unfinished), (2, 1, 1));
    }

    #[test]
    fn remove_alls_reach_puts_they_may_have_followed() {
        let put = StallPut {
            key: "k".into(),
            value: 1,
            invoke_ns: 100,
            complete_ns: Some(200),
            outcome: Some(StallOutcome::Ok),
            detail: String::new(),
        };
        let call = |complete_ns, outcome| RemoveAllCall { invoke_ns: 0, complete_ns, outcome };
        assert!(!put.may_be_removed_by(&[]));
        assert!(!put.may_be_removed_by(&[call(99, Outcome::Ok)]), "answered before the put started");
        assert!(put.may_be_removed_by(&[call(100, Outcome::Ok)]));
        assert!(put.may_be_removed_by(&[call(5, Outcome::Unknown)]), "unanswered: any time");
        assert!(!put.may_be_removed_by(&[call(500, Outcome::Fail)]));
    }
}
