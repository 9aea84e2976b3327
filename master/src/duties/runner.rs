//! One runner for every periodic duty of a master ([`Duty`]): the runner
//! owns the interval (missed ticks delayed, never bunched), the optional
//! wake-up between ticks, the stop signal, the leader check of the leader's
//! duties and the duty's record in the book ([`DutyBook`]); a duty says
//! only what one round does. A duty therefore cannot forget to stop, to
//! stay idle on a follower, or to report.
//!
//! Not on it: the election driver (`raft/prevote.rs`: its deadline moves
//! with every leader contact, so it has no tick) and following leadership
//! (`duties::follow_leadership`: woken by Raft metrics, not by time).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::duties::book::DutyBook;
use crate::leader::LeaderState;

/// One round's occasion, as the runner saw it.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    /// Ticks so far, this one included (wrapping; wake-ups and ticks a
    /// follower idled through count as well as the rounds).
    pub n: u32,
    /// When this round began.
    pub at: Instant,
    /// Time since the previous tick or wake-up (or since the runner started).
    pub gap: Duration,
    /// Woken between ticks ([`Duty::wake`]) rather than by the interval.
    pub woken: bool,
}

/// Whether a round goes into the duty's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// A round: counted, a success unless something in it reported a
    /// failure ([`DutyBook::failed`]).
    Round,
    /// Nothing to record (nothing to do yet, or a wake-up's small round).
    Skip,
}

/// A periodic duty: its name in the book, its tick, whether only the
/// leader runs it, and one bounded round.
pub trait Duty: Send + 'static {
    /// The name operators see (`duties::book`).
    fn name(&self) -> &'static str;
    /// How often a round runs.
    fn tick(&self) -> Duration;
    /// Whether the round runs only while this master leads (the soft
    /// state has a term); a follower's ticks pass idle.
    fn leader_only(&self) -> bool;
    /// What wakes a round before its tick, if anything.
    fn wake(&self) -> Option<&Notify> {
        None
    }
    /// One round.
    fn round(&mut self, tick: Tick) -> impl Future<Output = Record> + Send;
}

/// What the runner needs of the master: the book, the leader check, the
/// node's stop signal.
#[derive(Clone)]
pub struct Runner {
    pub book: Arc<DutyBook>,
    pub leader: Arc<LeaderState>,
    pub stop: watch::Receiver<bool>,
}

impl Runner {
    /// Lists `duty` in the book (before its first round, so it shows as
    /// never run) and runs it until the node stops.
    pub fn spawn<D>(&self, duty: D) -> JoinHandle<()>
    where
        D: Duty + Sync,
    {
        self.book.register(duty.name(), duty.tick());
        tokio::spawn(run(duty, self.clone()))
    }
}

/// Runs `duty` a round a tick, and at once when its wake fires, until the
/// stop signal changes or its sender is gone.
pub async fn run<D>(mut duty: D, runner: Runner)
where
    D: Duty + Sync,
{
    let Runner { book, leader, mut stop } = runner;
    let name = duty.name();
    let mut interval = tokio::time::interval(duty.tick());
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u32 = 0;
    let mut last = Instant::now();
    loop {
        let woken = tokio::select! {
            _ = interval.tick() => false,
            () = woken(duty.wake()) => true,
            _ = stop.changed() => return,
        };
        if !woken {
            n = n.wrapping_add(1);
        }
        let at = Instant::now();
        let gap = at.saturating_duration_since(last);
        last = at;
        if duty.leader_only() && leader.with(|_| ()).is_none() {
            continue;
        }
        let errors = book.errors(name);
        if duty.round(Tick { n, at, gap, woken }).await == Record::Round {
            book.finished(name, crate::raft::proposer::now_ms(), book.errors(name) == errors);
        }
    }
}

/// Resolves when `wake` fires; never without one.
async fn woken(wake: Option<&Notify>) {
    match wake {
        Some(wake) => wake.notified().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counting {
        leader_only: bool,
        wake: Arc<Notify>,
        ticks: Vec<Tick>,
        done: Option<tokio::sync::oneshot::Sender<Vec<Tick>>>,
    }

    impl Duty for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn tick(&self) -> Duration {
            Duration::from_millis(5)
        }
        fn leader_only(&self) -> bool {
            self.leader_only
        }
        fn wake(&self) -> Option<&Notify> {
            Some(&self.wake)
        }
        async fn round(&mut self, tick: Tick) -> Record {
            self.ticks.push(tick);
            if self.ticks.len() == 3
                && let Some(done) = self.done.take()
            {
                let _ = done.send(self.ticks.clone());
            }
            match tick.n % 2 {
                0 => Record::Skip,
                _ => Record::Round,
            }
        }
    }

    fn runner() -> (Runner, watch::Sender<bool>) {
        let (stop, rx) = watch::channel(false);
        let leader = Arc::new(LeaderState::new(Duration::from_secs(5)));
        (Runner { book: Arc::new(DutyBook::default()), leader, stop: rx }, stop)
    }

    #[tokio::test]
    async fn a_duty_runs_a_round_a_tick_is_recorded_as_it_says_and_stops_when_asked() {
        let (runner, stop) = runner();
        let (done, rounds) = tokio::sync::oneshot::channel();
        let duty = Counting { leader_only: false, wake: Arc::default(), ticks: Vec::new(), done: Some(done) };
        let task = runner.spawn(duty);
        let ticks = rounds.await.unwrap_or_default();
        assert_eq!(ticks.iter().map(|t| t.n).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(ticks.iter().all(|t| !t.woken));
        let _ = stop.send(true);
        assert!(tokio::time::timeout(Duration::from_secs(5), task).await.is_ok(), "stopped");
        let (name, r) = runner.book.records().remove(0);
        assert_eq!((name, r.tick, r.errors), ("counting", Duration::from_millis(5), 0));
        assert!(r.runs >= 2, "rounds 1 and 3 recorded, 2 skipped: {r:?}");
    }

    #[tokio::test]
    async fn a_leader_duty_idles_on_a_follower() {
        let (runner, stop) = runner();
        let (done, _rounds) = tokio::sync::oneshot::channel();
        let wake = Arc::new(Notify::new());
        let duty = Counting { leader_only: true, wake: wake.clone(), ticks: Vec::new(), done: Some(done) };
        let task = runner.spawn(duty);
        wake.notify_one();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = stop.send(true);
        assert!(tokio::time::timeout(Duration::from_secs(5), task).await.is_ok(), "stopped");
        assert_eq!(runner.book.records().remove(0).1.runs, 0, "no term: no round");
    }
}
