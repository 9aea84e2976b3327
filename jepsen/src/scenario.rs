//! The named scenarios: which faults a run injects.

use std::fmt;
use std::str::FromStr;

use crate::chaos_cluster::{STALLED_WRITERS_SEGMENT_SIZE, STORE_SEGMENT_SIZE};

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
    /// SIGSTOP every voter for longer than the client TTL (a VM pause, a
    /// live migration or a stall of the host of every master), SIGCONT
    /// them all: no store node may be expired for heartbeats nobody could
    /// hear, so nothing acknowledged may be lost.
    QuorumPause,
    /// Lower the leader's file descriptor limit to 1,024 and hold thousands
    /// of silent connections to its gRPC port past the client TTL: it
    /// must keep hearing the store nodes (or restart their TTLs), lose
    /// nothing, and keep serving (or end itself and be restarted).
    FdFlood,
    /// Kill a master and drop its filesystem's unflushed writes.
    PowerLoss,
    /// Fill a master's disk: it must end itself (crash-only) and, once
    /// space returns, restart and catch up.
    DiskFull,
    /// SIGSTOP the store node for longer than the client TTL: the masters
    /// expire it; resumed, it must mount its segment again by itself.
    StorePause,
    /// Once per run: a follower's data dir is wiped and it is restarted
    /// under its old id — it must refuse to start — then it is replaced by
    /// the membership procedure (the spare joins, the wiped id leaves).
    WipeReplace,
    /// Replace a voter: remove a follower, add the spare master.
    Membership,
    /// Drop 20 % of all packets on the bridge.
    Loss,
    /// Shift a master's wall clock by ±30 s (libfaketime).
    ClockSkew,
    /// Wait until the stall writers stopped themselves between PutStart
    /// and PutEnd, SIGKILL the leader and restart it, let the workloads put
    /// on the new leader, then SIGCONT the writers.
    KillUnderStall,
    /// Series of SIGSTOP bursts of one follower (stopped 1–3 s, running
    /// 0.5–2 s); once, half way through the run, the leader is SIGKILLed
    /// and restarted between two series. The leader must stay the leader
    /// through every series (see `leader_stability.rs`).
    FollowerBursts,
    /// Rounds of their own (`store_kill.rs`): SIGKILL a store node that
    /// has a disk segment — once nothing lives only in its memory — and
    /// restart it at once or after its client TTL (its disk detached, then
    /// attached again), while a leader kill or a leader isolation runs.
    StoreKill,
    /// Rounds of their own (`zone_loss.rs`): SIGKILL every store node of
    /// one zone at once, keep it down past the client TTL and read every
    /// key meanwhile, then restart it.
    ZoneLoss,
    /// Rounds of their own (`rolling_restart.rs`): restart every store
    /// node in turn, one at a time (SIGTERM, or SIGKILL every other round),
    /// each with its client id and credential, waiting for it to serve
    /// again before the next: each must re-attach the memory it left.
    RollingRestart,
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
    QuorumPause,
    FdFlood,
    PowerLoss,
    DiskFull,
    StorePause,
    WipeReplace,
    Membership,
    Loss,
    ClockSkew,
    Mixed,
    StalledWriters,
    LargeState,
    DiskStores,
    UcxStores,
    ZoneLoss,
    RollingRestart,
}

pub const ALL: &[Scenario] = &[
    Scenario::Baseline,
    Scenario::IsolateLeader,
    Scenario::Halves,
    Scenario::Ring,
    Scenario::OneWay,
    Scenario::Kill,
    Scenario::Pause,
    Scenario::QuorumPause,
    Scenario::FdFlood,
    Scenario::PowerLoss,
    Scenario::DiskFull,
    Scenario::StorePause,
    Scenario::WipeReplace,
    Scenario::Membership,
    Scenario::Loss,
    Scenario::ClockSkew,
    Scenario::Mixed,
    Scenario::StalledWriters,
    Scenario::LargeState,
    Scenario::DiskStores,
    Scenario::UcxStores,
    Scenario::ZoneLoss,
    Scenario::RollingRestart,
];

/// Every scenario this build can run: `ucx-stores` needs the `ucx` feature.
pub fn runnable() -> Vec<Scenario> {
    ALL.iter().copied().filter(|sc| !sc.over_ucx() || cfg!(feature = "ucx")).collect()
}

/// The CI suite: one of each fault family, short enough for CI.
pub const CI_SUITE: &[Scenario] = &[
    Scenario::Baseline,
    Scenario::IsolateLeader,
    Scenario::Halves,
    Scenario::Kill,
    Scenario::Pause,
    Scenario::QuorumPause,
    Scenario::FdFlood,
    Scenario::PowerLoss,
    Scenario::DiskFull,
    Scenario::StorePause,
    Scenario::WipeReplace,
    Scenario::Membership,
    Scenario::Loss,
    Scenario::ClockSkew,
    Scenario::Mixed,
    Scenario::StalledWriters,
    Scenario::LargeState,
    Scenario::DiskStores,
    Scenario::ZoneLoss,
    Scenario::RollingRestart,
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
            Scenario::QuorumPause => "quorum-pause",
            Scenario::FdFlood => "fd-flood",
            Scenario::PowerLoss => "power-loss",
            Scenario::DiskFull => "disk-full",
            Scenario::StorePause => "store-pause",
            Scenario::WipeReplace => "wipe-replace",
            Scenario::Membership => "membership",
            Scenario::Loss => "loss",
            Scenario::ClockSkew => "clock-skew",
            Scenario::Mixed => "mixed",
            Scenario::StalledWriters => "stalled-writers",
            Scenario::LargeState => "large-state",
            Scenario::DiskStores => "disk-stores",
            Scenario::UcxStores => "ucx-stores",
            Scenario::ZoneLoss => "zone-loss",
            Scenario::RollingRestart => "rolling-restart",
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
            Scenario::QuorumPause => &[Fault::QuorumPause],
            Scenario::FdFlood => &[Fault::FdFlood],
            Scenario::PowerLoss => &[Fault::PowerLoss],
            Scenario::DiskFull => &[Fault::DiskFull],
            Scenario::StorePause => &[Fault::StorePause],
            Scenario::WipeReplace => &[Fault::WipeReplace],
            Scenario::Membership => &[Fault::Membership],
            Scenario::Loss => &[Fault::Loss],
            Scenario::ClockSkew => &[Fault::ClockSkew],
            Scenario::Mixed => {
                &[Fault::IsolateLeader, Fault::Halves, Fault::Kill, Fault::Pause, Fault::Loss, Fault::Ring]
            }
            Scenario::StalledWriters => &[Fault::KillUnderStall],
            Scenario::LargeState => &[Fault::FollowerBursts],
            Scenario::DiskStores | Scenario::UcxStores => &[Fault::StoreKill],
            Scenario::ZoneLoss => &[Fault::ZoneLoss],
            Scenario::RollingRestart => &[Fault::RollingRestart],
        }
    }

    /// Masters keep their data on loop-mounted filesystems of their own
    /// (power cuts, full disks).
    pub fn needs_power_loss(self) -> bool {
        self.faults().iter().any(|f| matches!(f, Fault::PowerLoss | Fault::DiskFull))
    }

    pub fn needs_fake_clock(self) -> bool {
        self.faults().contains(&Fault::ClockSkew)
    }

    /// The store nodes' segment size. `stalled-writers` kills the leader
    /// every few seconds, and every leader change strands the dead leader's
    /// open arena on each segment for the release timeout (600 s): on the
    /// usual 4 MiB segments (512 KiB arenas) three or four changes leave no
    /// room. On 64 MiB segments a term's first arena is 4 MiB, which holds
    /// a cycle's puts, so a 30 s run strands well under half.
    pub fn store_segment_size(self) -> &'static str {
        match self {
            Scenario::StalledWriters => STALLED_WRITERS_SEGMENT_SIZE,
            _ => STORE_SEGMENT_SIZE,
        }
    }

    /// A large metadata state is loaded before the workload (see `preload.rs`).
    pub fn preloads(self) -> bool {
        self == Scenario::LargeState
    }

    /// The lease workload runs RemoveAlls (in the first half of the run).
    /// Not over a preloaded state: a RemoveAll would take it all away.
    pub fn runs_remove_all(self) -> bool {
        !self.preloads()
    }

    /// Store nodes contribute a disk segment besides memory, the masters
    /// offload objects to them (eagerly) and promote hot ones back, and a
    /// reader records which tier served each of its reads (docs/TIERS.md).
    pub fn has_disks(self) -> bool {
        self.faults().contains(&Fault::StoreKill)
    }

    /// Stall writer processes run next to the workloads.
    /// Every client reads over UCX (protocol `ucx`) from store nodes that
    /// serve it (`--ucx`): the store kills of `disk-stores` over the UCX
    /// route. Needs the `ucx` feature in this harness and in `mooncake`.
    pub fn over_ucx(self) -> bool {
        self == Scenario::UcxStores
    }

    /// Masters replicate hot keys (`chaos_cluster::HOT_KEY_FLAGS`): in
    /// `mixed`, so the copies and the fenced drops of cooled replicas run
    /// under leader changes, partitions and kills, judged by every checker
    /// (the summary's `kv leases` line counts them).
    pub fn replicates_hot_keys(self) -> bool {
        self == Scenario::Mixed
    }

    /// Store nodes keep their memory in /dev/shm files (not anonymous
    /// memory), which their restarts re-attach (docs/OPERATIONS.md,
    /// "Restarting a store node").
    pub fn shm_stores(self) -> bool {
        self.faults().contains(&Fault::RollingRestart)
    }

    /// The availability checker judges the puts refused for room
    /// (`availability.rs`): its bound knows the register and lease
    /// workloads and the tenant probe on two 4 MiB memory segments, with
    /// master faults (any leader change is seen by the term watch) and
    /// kills of the faulted store node. Not where something else holds
    /// room it cannot see: stall writers, a preloaded segment, disk tiers,
    /// or faults whose effect on room outlasts their heal (a skewed wall
    /// clock dates commits, a full or power-cut disk, a wiped master).
    pub fn checks_availability(self) -> bool {
        let judged = |f: &Fault| {
            matches!(
                f,
                Fault::IsolateLeader
                    | Fault::Halves
                    | Fault::Ring
                    | Fault::OneWay
                    | Fault::Kill
                    | Fault::Pause
                    | Fault::Loss
                    | Fault::Membership
            )
        };
        self.store_segment_size() == STORE_SEGMENT_SIZE && !self.preloads() && self.faults().iter().all(judged)
    }

    pub fn needs_stall_writers(self) -> bool {
        self.faults().contains(&Fault::KillUnderStall)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_is_judged_only_where_the_bound_knows_what_holds_room() {
        let judged: Vec<&str> = ALL.iter().filter(|sc| sc.checks_availability()).map(|sc| sc.name()).collect();
        assert_eq!(
            judged,
            ["baseline", "isolate-leader", "halves", "ring", "one-way", "kill", "pause", "membership", "loss", "mixed"]
        );
    }
}
