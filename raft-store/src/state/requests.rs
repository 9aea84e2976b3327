//! Deduplication of retried requests (`Command::Once`): the first answer of
//! each request id, remembered for [`REQUEST_DEDUP_WINDOW_MS`] of
//! *request-clock* time, so a client retrying after a lost answer gets that
//! answer back instead of a second effect.
//!
//! The request clock does not trust the leaders' wall clocks. Each entry's
//! timestamp may advance it by at most [`REQUEST_CLOCK_STEP_MAX_MS`] over the
//! previous entry's timestamp, and it never moves back:
//!
//! - a leader whose clock jumps a day ahead ages every remembered id by one
//!   step, not by a day (which would drop them all at once, and retries
//!   would run again);
//! - a leader whose clock jumps back re-anchors at its new time and the
//!   clock keeps running from there, so ids still expire after the window
//!   (measuring from the largest timestamp seen, as `MetaState::now_ms`
//!   does, would keep them until the new clock caught up with the old one:
//!   forever, after a leader with a clock years ahead).
//!
//! So expiring an id takes at least `REQUEST_DEDUP_WINDOW_MS /
//! REQUEST_CLOCK_STEP_MAX_MS` entries after it, whatever the timestamps say;
//! with steady leader time (entries at most a step apart) the clock follows
//! the leader's time exactly, and across idle gaps longer than a step it runs
//! slow, which only keeps ids longer (bounded by [`REQUEST_DEDUP_MAX`]).
//! Like everything in apply, the clock is a pure function of the log.
//!
//! Only differences of the clock mean anything, so the state image stores
//! each id's *age* and the anchor, not the clock's reading: a restored state
//! starts the clock at another origin and behaves identically. This also
//! lets replicas that were upgraded from images of schema version 2 at
//! different log indexes (aged on the largest timestamp then) agree again
//! once the ids of the transition have expired: their clocks may differ by
//! a constant, their images and state hashes do not.

use imbl::{OrdMap, Vector};

use super::invariants::{InvariantViolation, Record};
use crate::command::{ObjectVersion, Response};

/// How long (request-clock time) a request id is remembered for
/// deduplication: far longer than any client retries one call (15 s).
pub const REQUEST_DEDUP_WINDOW_MS: u64 = 120_000;
/// Most request ids remembered; the oldest go first beyond this.
pub const REQUEST_DEDUP_MAX: usize = 1_000_000;
/// Most one entry may advance the request clock over the previous entry's
/// timestamp. A forward clock jump of any size costs at most this much of
/// the window (120 s against a client's 15 s of retries leaves room for 105
/// such jumps); an idle gap longer than this stretches the window by the
/// difference (ids kept longer, never dropped early).
pub const REQUEST_CLOCK_STEP_MAX_MS: u64 = 1_000;
/// A timestamp at most this far below the previous one is taken as
/// reordering, not a clock step: the master stamps several batches in
/// flight at once, and they may commit in either order a few ms apart.
/// Keeping the anchor then stops reordering from inflating the clock; a real
/// step back this small pauses the clock for at most this long.
pub const REQUEST_CLOCK_REORDER_MAX_MS: u64 = 1_000;

/// The clock that ages remembered request ids (see the module doc). Not
/// serialised as such: images carry ages and the anchor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestClock {
    /// Request-clock time: the sum of every entry's capped advance, from an
    /// arbitrary origin (a state restored from an image starts elsewhere).
    pub now_ms: u64,
    /// The leader timestamp the next entry's advance is measured from: the
    /// last entry's, unless that one was a small step back (reordering).
    pub anchor_ts_ms: u64,
}

impl RequestClock {
    /// Advances the clock for an entry stamped `ts_ms` by its leader.
    pub fn tick(&mut self, ts_ms: u64) {
        if ts_ms >= self.anchor_ts_ms {
            let step_ms = (ts_ms - self.anchor_ts_ms).min(REQUEST_CLOCK_STEP_MAX_MS);
            self.now_ms = self.now_ms.saturating_add(step_ms);
            self.anchor_ts_ms = ts_ms;
        } else if self.anchor_ts_ms - ts_ms > REQUEST_CLOCK_REORDER_MAX_MS {
            // The leader's clock stepped back (or a new leader's clock is
            // behind the old one's): measure from its time from now on.
            self.anchor_ts_ms = ts_ms;
        }
    }
}

/// An answer as remembered: the common ones (a put's `Committed`, `Ok`) in
/// 16 bytes instead of a whole `Response` (48), the rest boxed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Remembered {
    Ok,
    Committed(ObjectVersion),
    Other(Box<Response>),
}

impl From<Response> for Remembered {
    fn from(r: Response) -> Self {
        match r {
            Response::Ok => Remembered::Ok,
            Response::Committed { version } => Remembered::Committed(version),
            other => Remembered::Other(Box::new(other)),
        }
    }
}

impl Remembered {
    fn response(&self) -> Response {
        match self {
            Remembered::Ok => Response::Ok,
            Remembered::Committed(version) => Response::Committed { version: *version },
            Remembered::Other(r) => (**r).clone(),
        }
    }
}

/// The remembered answers, by request id and by the time they were applied.
/// Persistent maps (`imbl`), as the object index: a clone of the state for
/// a snapshot shares them (up to a million ids) instead of copying them.
#[derive(Clone, Debug, Default)]
pub(super) struct RequestMemory {
    clock: RequestClock,
    /// Answer of each id, with the request-clock time it was applied at.
    answers: OrdMap<u64, (u64, Remembered)>,
    /// The same ids as (time, id), in that order, for pruning (a dense
    /// sequence, 16 bytes an id, where a tree took ~50). The clock never
    /// moves back, so a new id goes at the end or among the last ones of
    /// its millisecond: the order is (time, id), not the order of apply, so
    /// a state rebuilt from an image prunes exactly as one that applied
    /// the log.
    by_time: Vector<(u64, u64)>,
}

impl RequestMemory {
    /// Rebuilds the memory from a state image's entries (id, age, answer)
    /// and the clock's anchor. The clock restarts at the oldest age, so
    /// every time is a plain non-negative reading.
    pub(super) fn from_image(entries: Vec<(u64, u64, Response)>, anchor_ts_ms: u64) -> Self {
        let origin_ms = entries.iter().map(|(_, age_ms, _)| *age_ms).max().unwrap_or(0);
        let time = |age_ms: u64| origin_ms - age_ms;
        RequestMemory {
            clock: RequestClock { now_ms: origin_ms, anchor_ts_ms },
            by_time: {
                let mut by_time: Vec<(u64, u64)> = entries.iter().map(|(id, age_ms, _)| (time(*age_ms), *id)).collect();
                by_time.sort_unstable();
                by_time.into_iter().collect()
            },
            answers: entries.into_iter().map(|(id, age_ms, answer)| (id, (time(age_ms), answer.into()))).collect(),
        }
    }

    /// The entries of a state image: (id, age on the request clock, answer),
    /// by id.
    pub(super) fn image(&self) -> Vec<(u64, u64, Response)> {
        self.image_iter().collect()
    }

    /// The entries of [`image`](Self::image), one at a time.
    pub(super) fn image_iter(&self) -> impl Iterator<Item = (u64, u64, Response)> + '_ {
        // No id is after the clock (`remember` and `check` hold that); a
        // snapshot is no place to stop on it, so this one saturates.
        let now = self.clock.now_ms;
        self.answers.iter().map(move |(id, (ms, answer))| (*id, now.saturating_sub(*ms), answer.response()))
    }

    pub(super) fn clock(&self) -> RequestClock {
        self.clock
    }

    /// Advances the clock for an entry stamped `ts_ms`.
    pub(super) fn tick(&mut self, ts_ms: u64) {
        self.clock.tick(ts_ms);
    }

    /// How many request ids are remembered.
    pub(super) fn count(&self) -> usize {
        self.answers.len()
    }

    pub(super) fn answer(&self, request_id: u64) -> Option<Response> {
        self.answers.get(&request_id).map(|(_, answer)| answer.response())
    }

    /// Records the first answer of `request_id`, first forgetting ids older
    /// than the window (and the oldest beyond [`REQUEST_DEDUP_MAX`]). An id
    /// remembered after the clock's reading is a broken state (the clock
    /// never moves back): reported, not aged as if it were new.
    pub(super) fn remember(&mut self, request_id: u64, answer: Response) -> Result<(), InvariantViolation> {
        let now = self.clock.now_ms;
        while let Some(&(ms, id)) = self.by_time.front() {
            let expired = self.age_ms(id, ms)? > REQUEST_DEDUP_WINDOW_MS;
            if !expired && self.answers.len() < REQUEST_DEDUP_MAX {
                break;
            }
            self.by_time.pop_front();
            self.answers.remove(&id);
        }
        self.answers.insert(request_id, (now, answer.into()));
        let entry = (now, request_id);
        match self.by_time.back() {
            Some(last) if *last > entry => {
                let at = self.by_time.binary_search(&entry).unwrap_or_else(|at| at);
                self.by_time.insert(at, entry);
            }
            _ => self.by_time.push_back(entry),
        }
        Ok(())
    }

    /// How long ago (request-clock ms) `id`, remembered at `ms`, was applied.
    fn age_ms(&self, id: u64, ms: u64) -> Result<u64, InvariantViolation> {
        self.clock.now_ms.checked_sub(ms).ok_or_else(|| InvariantViolation::Malformed {
            record: Record::Requests,
            problem: format!(
                "request id {id} remembered at {ms} ms, after the request clock's {} ms",
                self.clock.now_ms
            ),
        })
    }

    /// Test hook: records `request_id` at request-clock time `ms` in the
    /// answers (and, if `indexed`, by time) as given, consistent or not.
    #[cfg(test)]
    pub(super) fn insert_raw(&mut self, request_id: u64, ms: u64, indexed: bool) {
        self.answers.insert(request_id, (ms, Remembered::Ok));
        if indexed {
            self.by_time.push_back((ms, request_id));
        }
    }

    /// The two indexes name the same ids at the same times, none after the
    /// clock, at most [`REQUEST_DEDUP_MAX`] of them.
    pub(super) fn check(&self) -> Result<(), InvariantViolation> {
        let bad = |problem: String| Err(InvariantViolation::Malformed { record: Record::Requests, problem });
        if self.answers.len() > REQUEST_DEDUP_MAX {
            return bad(format!("{} ids remembered; the limit is {REQUEST_DEDUP_MAX}", self.answers.len()));
        }
        if self.answers.len() != self.by_time.len() {
            return bad(format!("{} answers but {} ids by time", self.answers.len(), self.by_time.len()));
        }
        let mut previous = None;
        for &(ms, id) in &self.by_time {
            if let Some((p_ms, p_id)) = previous
                && (p_ms, p_id) >= (ms, id)
            {
                return bad(format!("request id {id} at {ms} ms is listed after id {p_id} at {p_ms} ms"));
            }
            previous = Some((ms, id));
            if self.answers.get(&id).map(|(at, _)| *at) != Some(ms) {
                return bad(format!("request id {id} is listed at {ms} ms but its answer is not"));
            }
            self.age_ms(id, ms)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock_after(ts: &[u64]) -> RequestClock {
        let mut c = RequestClock::default();
        ts.iter().for_each(|t| c.tick(*t));
        c
    }

    #[test]
    fn answers_are_remembered_as_given() {
        let answers = [
            Response::Ok,
            Response::Committed { version: ObjectVersion(7) },
            Response::Removed { count: 3 },
            Response::Err(crate::MetaError::ObjectNotFound("k".into())),
        ];
        for a in answers {
            assert_eq!(Remembered::from(a.clone()).response(), a);
        }
        assert_eq!(std::mem::size_of::<Remembered>(), 16, "the common answers stay small");
    }

    #[test]
    fn ids_of_one_millisecond_are_kept_in_id_order_as_an_image_rebuilds_them() {
        let mut live = RequestMemory::default();
        live.tick(5_000);
        for id in [9, 3, 7] {
            live.remember(id, Response::Ok).unwrap();
        }
        live.tick(5_001);
        live.remember(4, Response::Ok).unwrap();
        live.check().unwrap();
        let order: Vec<u64> = live.by_time.iter().map(|(_, id)| *id).collect();
        assert_eq!(order, [3, 7, 9, 4], "by time, then by id");
        let rebuilt = RequestMemory::from_image(live.image(), live.clock().anchor_ts_ms);
        let rebuilt_order: Vec<u64> = rebuilt.by_time.iter().map(|(_, id)| *id).collect();
        assert_eq!(rebuilt_order, order, "a rebuilt memory prunes in the same order");
    }

    #[test]
    fn steady_time_is_followed_exactly() {
        let c = clock_after(&[10_000, 10_400, 11_000, 11_900]);
        assert_eq!(c.now_ms, REQUEST_CLOCK_STEP_MAX_MS + 1_900, "first entry: one step; then every ms");
    }

    #[test]
    fn a_jump_ahead_counts_one_step() {
        let base = clock_after(&[10_000, 10_500]);
        let jumped = clock_after(&[10_000, 10_500, 10_500 + 86_400_000, 10_500 + 86_400_000 + 300]);
        assert_eq!(jumped.now_ms, base.now_ms + REQUEST_CLOCK_STEP_MAX_MS + 300);
    }

    #[test]
    fn a_jump_back_re_anchors_and_the_clock_keeps_running() {
        let c = clock_after(&[86_400_000, 86_400_500, 1_000, 1_700]);
        assert_eq!(c.now_ms, REQUEST_CLOCK_STEP_MAX_MS + 500 + 700);
        assert_eq!(c.anchor_ts_ms, 1_700);
    }

    #[test]
    fn reordered_stamps_do_not_inflate_the_clock() {
        // Batches stamped 1 ms apart, committed pairwise swapped.
        let mut ts = vec![10_000];
        for i in 0..1_000u64 {
            ts.extend([10_000 + 2 * i + 2, 10_000 + 2 * i + 1]);
        }
        let c = clock_after(&ts);
        assert_eq!(c.now_ms, REQUEST_CLOCK_STEP_MAX_MS + 2_000);
    }
}
