//! The NOSPACE alarm: a master whose data dir runs short of free space says
//! so before a write fails, and stops leading.
//!
//! Every [`CHECK_EVERY`] the free space of the data dir's file system is
//! read (`statvfs`). Below what the master needs — `--data-dir-min-free-mb`,
//! or twice its last snapshot if that is more (a snapshot build writes a
//! whole new file before the old one goes) — the alarm is on:
//! - `/ready` answers 503 with the reason, `mooncake status` shows it, and
//!   `mooncake_data_dir_nospace_alarm` is 1 (`mooncake_data_dir_free_bytes`
//!   always says how much is left);
//! - the master starts no election (`prevote.rs`), and as leader sends no
//!   heartbeats, so the followers elect a leader with room while it is
//!   idle (writes still flow to it until one fails);
//! - the first write that fails ends the process (crash-only, status 74:
//!   `raft-store/src/fatal.rs`); a master that can still write into space
//!   it holds (sled preallocates) keeps serving as a follower, durable.
//!
//! Freeing space clears the alarm on the next check: the master is ready,
//! heartbeats and may be elected again. As etcd's NOSPACE alarm, but per
//! master: the others keep the cluster writable.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use mooncake_raft_store::Raft;

use crate::duties::book::{self, DutyBook};
use crate::duties::runner::{Duty, Record, Tick};
use crate::metrics::MasterMetrics;
use crate::raft::proposer::now_ms;

/// How often the free space is read (one `statvfs`, a few microseconds).
pub const CHECK_EVERY: Duration = Duration::from_millis(500);

/// Default of `--data-dir-min-free-mb`.
pub const DEFAULT_MIN_FREE_MB: u64 = 64;

/// The alarm's state, read by `/ready`, ClusterInfo and the election driver.
#[derive(Debug, Default)]
pub struct DiskAlarm {
    on: AtomicBool,
    free_bytes: AtomicU64,
    need_bytes: AtomicU64,
}

impl DiskAlarm {
    /// Whether the alarm is on.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Why this master is not ready, while the alarm is on.
    pub fn reason(&self) -> Option<String> {
        self.is_on().then(|| {
            format!(
                "NOSPACE: the data dir has {} MiB free, below the {} MiB this master needs (--data-dir-min-free-mb, \
                 or twice its last snapshot); it does not lead and exits at its first failed write: free space",
                self.free_bytes.load(Ordering::Relaxed) >> 20,
                self.need_bytes.load(Ordering::Relaxed) >> 20
            )
        })
    }

    /// Records a reading; returns whether the alarm changed.
    fn record(&self, free_bytes: u64, need_bytes: u64) -> bool {
        self.free_bytes.store(free_bytes, Ordering::Relaxed);
        self.need_bytes.store(need_bytes, Ordering::Relaxed);
        let on = free_bytes < need_bytes;
        self.on.swap(on, Ordering::Relaxed) != on
    }
}

/// Bytes free to an unprivileged writer on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in the data dir's path"))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string that outlives the call, and
    // `st` is a valid statvfs for the call to fill.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Watches the data dir a round every [`CHECK_EVERY`], on every master;
/// see the module doc.
pub struct DiskWatch {
    pub dir: PathBuf,
    pub min_free_bytes: u64,
    pub alarm: Arc<DiskAlarm>,
    pub raft: Raft,
    pub metrics: Arc<MasterMetrics>,
    pub duties: Arc<DutyBook>,
}

impl Duty for DiskWatch {
    fn name(&self) -> &'static str {
        book::DISK_WATCH
    }

    fn tick(&self) -> Duration {
        CHECK_EVERY
    }

    fn leader_only(&self) -> bool {
        false
    }

    async fn round(&mut self, _: Tick) -> Record {
        self.check();
        Record::Round
    }
}

impl DiskWatch {
    /// Reads the free space and turns the alarm on or off; a failure (no
    /// reading, or the alarm on) is noted in the duty's record.
    fn check(&self) {
        let (dir, metrics, duties) = (&self.dir, &self.metrics, &self.duties);
        let free = match free_bytes(dir) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot read the data dir's free space");
                let why = format!("cannot read the free space of {}: {e}", dir.display());
                duties.failed(book::DISK_WATCH, now_ms(), why);
                return;
            }
        };
        let snapshot = u64::try_from(metrics.raft.snapshot_bytes.get()).unwrap_or(0);
        let need = self.min_free_bytes.max(snapshot.saturating_mul(2));
        metrics.raft.data_dir_free_bytes.set(i64::try_from(free).unwrap_or(i64::MAX));
        let changed = self.alarm.record(free, need);
        if let Some(why) = self.alarm.reason() {
            duties.failed(book::DISK_WATCH, now_ms(), why);
        }
        if !changed {
            return;
        }
        let on = self.alarm.is_on();
        metrics.raft.nospace_alarm.set(i64::from(on));
        // A leader without heartbeats is replaced once it is idle; a master
        // with the alarm starts no election (prevote.rs).
        self.raft.runtime_config().heartbeat(!on);
        match on {
            true => tracing::warn!(
                dir = %dir.display(),
                free_mib = free >> 20,
                need_mib = need >> 20,
                "NOSPACE alarm: the data dir is nearly full; not ready, not leading, exiting at the first failed \
                 write; free space or grow the disk"
            ),
            false => tracing::info!(free_mib = free >> 20, "NOSPACE alarm cleared: the data dir has room again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alarm_turns_on_below_the_need_and_says_why() {
        let a = DiskAlarm::default();
        assert!(!a.record(100 << 20, 64 << 20), "room: no change");
        assert!(a.reason().is_none());
        assert!(a.record(10 << 20, 64 << 20), "short: on");
        let why = a.reason().unwrap_or_default();
        assert!(why.contains("NOSPACE") && why.contains("10 MiB free") && why.contains("64 MiB"), "{why}");
        assert!(!a.record(9 << 20, 64 << 20), "still on: no change");
        assert!(a.record(65 << 20, 64 << 20), "room again: off");
        assert!(!a.is_on());
    }

    #[test]
    fn free_space_is_read_from_the_file_system() {
        let dir = std::env::temp_dir();
        assert!(free_bytes(&dir).is_ok_and(|b| b > 0));
        assert!(free_bytes(Path::new("/nonexistent/mooncake")).is_err());
    }
}
