//! The durable watermark: a small file beside sled's files recording the
//! least this master is known to have made durable — the highest committed
//! log index it had synced and the term of its last saved vote. sled checks
//! its own records, but a damaged file makes it recover silently to an
//! earlier, consistent state (found by flipping bytes in a data dir): a
//! master would then restart without votes and entries it acknowledged, and
//! Raft's safety rests on those. At open the store compares what sled
//! recovered with the watermark and refuses to start if it went backwards
//! (`StoreError::WentBackwards`).
//!
//! Writes: at every vote saved (rare), and for the committed index at most
//! once per [`COMMITTED_EVERY`] on a blocking thread (one small fsync), so a
//! rollback of entries older than that is always caught.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

const FILE: &str = "durable-watermark";

/// Most time between two records of the committed index.
pub const COMMITTED_EVERY: Duration = Duration::from_secs(1);

/// What the file holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// A committed log index this master had synced.
    pub committed_index: u64,
    /// The term of the last vote this master saved.
    pub vote_term: u64,
}

/// The watermark of one data dir.
pub struct Watermark {
    path: PathBuf,
    state: Mutex<State>,
}

struct State {
    mark: Mark,
    last_write: Option<Instant>,
}

impl Watermark {
    /// Reads the watermark in `dir` (zero when there is none).
    pub fn load(dir: &Path) -> Result<Watermark, StoreError> {
        let path = dir.join(FILE);
        let io = |op, source| StoreError::Io { op, path: path.display().to_string(), source };
        let mark = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| StoreError::Decode {
                what: format!(
                    "{} (it is replaced whole by a rename, so a crash or a full disk cannot leave it so: the disk \
                     damaged it; never delete it to get past this check: replace this master under a new id, \
                     docs/OPERATIONS.md, Membership)",
                    path.display()
                ),
                message: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Mark::default(),
            Err(e) => return Err(io("read durable watermark", e)),
        };
        Ok(Watermark { path, state: Mutex::new(State { mark, last_write: None }) })
    }

    pub fn mark(&self) -> Mark {
        self.lock().mark
    }

    /// Refuses a store that recovered less than the watermark promises:
    /// `last_index` is its last log index (entries or purge marker),
    /// `vote_term` the term of its saved vote.
    pub fn check(&self, last_index: u64, vote_term: u64) -> Result<(), StoreError> {
        let mark = self.mark();
        if last_index < mark.committed_index || vote_term < mark.vote_term {
            return Err(StoreError::WentBackwards {
                dir: self.path.parent().map(|d| d.display().to_string()).unwrap_or_default(),
                holds: format!("log up to index {last_index}, vote of term {vote_term}"),
                had: format!("log up to index {}, vote of term {}", mark.committed_index, mark.vote_term),
            });
        }
        Ok(())
    }

    /// Records a saved vote's term, durably, before returning.
    pub fn raise_vote(&self, term: u64) -> Result<(), StoreError> {
        let mut st = self.lock();
        if term <= st.mark.vote_term {
            return Ok(());
        }
        let next = Mark { vote_term: term, ..st.mark };
        self.write(&next)?;
        st.mark = next;
        Ok(())
    }

    /// A committed index that is synced here: recorded if the last record
    /// is older than [`COMMITTED_EVERY`]. Returns the mark to write, if any
    /// (the caller writes it off the async workers with [`Watermark::write_raised`]).
    pub fn committed_due(&self, index: u64, now: Instant) -> Option<Mark> {
        let st = self.lock();
        let due = st.last_write.is_none_or(|t| now.saturating_duration_since(t) >= COMMITTED_EVERY);
        (due && index > st.mark.committed_index).then_some(Mark { committed_index: index, ..st.mark })
    }

    /// Writes `mark` unless a higher one was written meanwhile.
    pub fn write_raised(&self, mark: Mark) -> Result<(), StoreError> {
        let mut st = self.lock();
        if mark.committed_index <= st.mark.committed_index {
            return Ok(());
        }
        let next = Mark { committed_index: mark.committed_index, vote_term: st.mark.vote_term };
        self.write(&next)?;
        st.mark = next;
        st.last_write = Some(Instant::now());
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `mark` durably (`durable::write_file_durably`).
    fn write(&self, mark: &Mark) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(mark)
            .map_err(|e| StoreError::Encode { what: "durable watermark".into(), message: e.to_string() })?;
        crate::data_dir::durable::write_file_durably(&self.path, &bytes).map_err(|source| StoreError::Io {
            op: "write durable watermark",
            path: self.path.display().to_string(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_that_went_backwards_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let w = Watermark::load(dir.path()).unwrap();
        assert_eq!(w.mark(), Mark::default());
        w.raise_vote(3).unwrap();
        let due = w.committed_due(40, Instant::now()).expect("the first record is due");
        w.write_raised(due).unwrap();
        assert!(w.committed_due(41, Instant::now()).is_none(), "at most once per second");
        let w = Watermark::load(dir.path()).unwrap();
        assert_eq!(w.mark(), Mark { committed_index: 40, vote_term: 3 });
        assert!(w.check(40, 3).is_ok());
        assert!(w.check(90, 4).is_ok());
        let e = w.check(39, 3).unwrap_err().to_string();
        assert!(e.contains("went backwards") && e.contains("index 39") && e.contains("--join"), "{e}");
        assert!(w.check(40, 2).is_err(), "a lost vote is refused too");
    }
}
