//! What each background duty of this master last did ([`DutyBook`]): the
//! leader's duties (client expiry, eviction, reclaim, copies) and the
//! watches every master runs (elections, the state audit, the disk). Its
//! name and tick, how often it ran, when it last succeeded, and its last
//! error (when, and what). One shape for every duty, read by `/metrics`
//! (`mooncake_duty_*{duty}`) and by `mooncake status` (GetClusterInfo's
//! `duties`), so an operator sees a duty that keeps failing without
//! reading logs. Wall-clock times in unix ms: they are shown as "ago".

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// The duties of a master, by the names operators see.
pub const CLIENT_EXPIRY: &str = "client_expiry";
pub const EVICTION: &str = "eviction";
pub const RECLAIM: &str = "reclaim";
pub const COPIES: &str = "copies";
/// The election driver (`raft/prevote.rs`): a round is one attempt, made
/// only after no leader was heard for an election wait; it fails when the
/// pre-vote is lost or this master may not elect.
pub const ELECTIONS: &str = "elections";
/// The comparison of state checkpoints with the peers' (`raft/state_audit.rs`):
/// it fails while a peer does not answer (a divergence exits the process).
pub const STATE_AUDIT: &str = "state_audit";
/// The data dir's free-space watch (`raft/disk_space.rs`): it fails while
/// the space cannot be read or the NOSPACE alarm is on.
pub const DISK_WATCH: &str = "disk_watch";

/// What one duty last did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DutyRecord {
    /// How often it runs.
    pub tick: Duration,
    /// Rounds run (the leader's duties: while this master led).
    pub runs: u64,
    /// Rounds that failed.
    pub errors: u64,
    pub last_success_unix_ms: Option<u64>,
    pub last_error_unix_ms: Option<u64>,
    /// The last error ("" before the first).
    pub last_error: String,
}

/// The records of every duty; one lock, held for a map update.
#[derive(Debug, Default)]
pub struct DutyBook {
    records: Mutex<BTreeMap<&'static str, DutyRecord>>,
}

impl DutyBook {
    /// Names a duty and its tick (before its first round: it is listed as
    /// never run until then).
    pub fn register(&self, name: &'static str, tick: Duration) {
        self.with(name, |r| r.tick = tick);
    }

    /// Something `name` did in its round failed at `now_unix_ms` with
    /// `error`: the round will not count as a success.
    pub fn failed(&self, name: &'static str, now_unix_ms: u64, error: impl std::fmt::Display) {
        self.with(name, |r| {
            r.errors += 1;
            r.last_error_unix_ms = Some(now_unix_ms);
            r.last_error = error.to_string();
        });
    }

    /// Errors `name` has had.
    pub fn errors(&self, name: &'static str) -> u64 {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).get(name).map_or(0, |r| r.errors)
    }

    /// A round of `name` ended at `now_unix_ms`; `ok` unless something in
    /// it failed.
    pub fn finished(&self, name: &'static str, now_unix_ms: u64, ok: bool) {
        self.with(name, |r| {
            r.runs += 1;
            if ok {
                r.last_success_unix_ms = Some(now_unix_ms);
            }
        });
    }

    /// Runs one round of `name` (`round`), counted as a success unless
    /// something in it reported a failure ([`failed`](Self::failed)).
    pub async fn round<T>(&self, name: &'static str, round: impl Future<Output = T>) -> T {
        let errors = self.errors(name);
        let out = round.await;
        self.finished(name, crate::raft::proposer::now_ms(), self.errors(name) == errors);
        out
    }

    /// Every duty's record, by name.
    pub fn records(&self) -> Vec<(&'static str, DutyRecord)> {
        let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        records.iter().map(|(name, r)| (*name, r.clone())).collect()
    }

    fn with(&self, name: &'static str, f: impl FnOnce(&mut DutyRecord)) {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        f(records.entry(name).or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duty_shows_its_last_success_and_its_last_error_apart() {
        let book = DutyBook::default();
        book.register(EVICTION, Duration::from_millis(100));
        assert_eq!(book.records()[0].1.runs, 0, "registered, never run");
        book.finished(EVICTION, 1_000, true);
        book.failed(EVICTION, 2_000, "proposal failed: not the leader");
        book.finished(EVICTION, 2_000, false);
        book.finished(EVICTION, 3_000, true);
        let (name, r) = book.records().remove(0);
        assert_eq!(name, "eviction");
        assert_eq!((r.tick, r.runs, r.errors), (Duration::from_millis(100), 3, 1));
        assert_eq!((r.last_success_unix_ms, r.last_error_unix_ms), (Some(3_000), Some(2_000)));
        assert_eq!(r.last_error, "proposal failed: not the leader", "kept after a later success");
    }

    #[tokio::test]
    async fn a_round_that_reported_a_failure_is_no_success() {
        let book = DutyBook::default();
        book.round(RECLAIM, async { book.failed(RECLAIM, 5, "arena return failed") }).await;
        let r = book.records().remove(0).1;
        assert_eq!((r.runs, r.errors, r.last_success_unix_ms), (1, 1, None));
        book.round(RECLAIM, async {}).await;
        let r = book.records().remove(0).1;
        assert_eq!((r.runs, r.errors), (2, 1));
        assert!(r.last_success_unix_ms.is_some_and(|ms| ms > 5), "{r:?}");
    }
}
