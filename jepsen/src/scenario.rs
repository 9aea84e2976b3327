//! The named scenarios: which faults a run injects.

use std::fmt;
use std::str::FromStr;

/// One kind of fault the nemesis can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Cut the leader off from the other masters (clients still reach it).
    IsolateLeader,
    /// Split the masters into a majority and a minority.
    Halves,
    /// Majorities ring: m1–m2 and m2–m3 connected, m1–m3 cut.
    Ring,
    /// The leader's messages to the followers are dropped (one way).
    OneWay,
    /// SIGKILL a master (or the store node), restart it from its data dir.
    Kill,
    /// SIGSTOP the leader or a follower, SIGCONT later.
    Pause,
    /// Kill a master and drop its filesystem's unflushed writes.
    PowerLoss,
    /// Replace a voter: remove a follower, add the spare master.
    Membership,
    /// Drop 20 % of all packets on the bridge.
    Loss,
    /// Shift a master's wall clock by ±30 s (libfaketime).
    ClockSkew,
}

/// A named run configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    Baseline,
    IsolateLeader,
    Halves,
    Ring,
    OneWay,
    Kill,
    Pause,
    PowerLoss,
    Membership,
    Loss,
    ClockSkew,
    Mixed,
}

pub const ALL: &[Scenario] = &[
    Scenario::Baseline,
    Scenario::IsolateLeader,
    Scenario::Halves,
    Scenario::Ring,
    Scenario::OneWay,
    Scenario::Kill,
    Scenario::Pause,
    Scenario::PowerLoss,
    Scenario::Membership,
    Scenario::Loss,
    Scenario::ClockSkew,
    Scenario::Mixed,
];

/// The CI suite: one of each fault family, short enough for CI.
pub const CI_SUITE: &[Scenario] = &[
    Scenario::Baseline,
    Scenario::IsolateLeader,
    Scenario::Halves,
    Scenario::Kill,
    Scenario::Pause,
    Scenario::PowerLoss,
    Scenario::Membership,
    Scenario::Loss,
    Scenario::ClockSkew,
    Scenario::Mixed,
];

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::IsolateLeader => "isolate-leader",
            Scenario::Halves => "halves",
            Scenario::Ring => "ring",
            Scenario::OneWay => "one-way",
            Scenario::Kill => "kill",
            Scenario::Pause => "pause",
            Scenario::PowerLoss => "power-loss",
            Scenario::Membership => "membership",
            Scenario::Loss => "loss",
            Scenario::ClockSkew => "clock-skew",
            Scenario::Mixed => "mixed",
        }
    }

    /// The faults the nemesis draws from (empty: none).
    pub fn faults(self) -> &'static [Fault] {
        match self {
            Scenario::Baseline => &[],
            Scenario::IsolateLeader => &[Fault::IsolateLeader],
            Scenario::Halves => &[Fault::Halves],
            Scenario::Ring => &[Fault::Ring],
            Scenario::OneWay => &[Fault::OneWay],
            Scenario::Kill => &[Fault::Kill],
            Scenario::Pause => &[Fault::Pause],
            Scenario::PowerLoss => &[Fault::PowerLoss],
            Scenario::Membership => &[Fault::Membership],
            Scenario::Loss => &[Fault::Loss],
            Scenario::ClockSkew => &[Fault::ClockSkew],
            Scenario::Mixed => {
                &[Fault::IsolateLeader, Fault::Halves, Fault::Kill, Fault::Pause, Fault::Loss, Fault::Ring]
            }
        }
    }

    pub fn needs_power_loss(self) -> bool {
        self.faults().contains(&Fault::PowerLoss)
    }

    pub fn needs_fake_clock(self) -> bool {
        self.faults().contains(&Fault::ClockSkew)
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL.iter().copied().find(|sc| sc.name() == s).ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|s| s.name()).collect();
            format!("unknown scenario {s:?}; one of: {}", names.join(", "))
        })
    }
}
