//! The chaos harness. Its core: operation histories of a concurrent KV
//! workload, and the checkers run over them after a chaos run.
//!
//! Key types: [`OpRecord`] and [`History`] (written as `history.jsonl` by
//! [`write_jsonl`], read by [`read_jsonl`]); [`check_linearizable`], a per-key
//! Wing–Gong/Lowe linearizability checker returning a [`Verdict`]; the
//! final-state checkers [`no_lost_acked_puts`] and [`cluster_health`];
//! [`check_kv_leases`] over the lease workload's [`LeaseRecord`]s;
//! [`event_feed::check_event_feed`] over what a watcher saw; and
//! [`availability::check_availability`] over the puts refused for room.
//!
//! That core (`history`, `jsonl`, `model`, `wgl`, `memo`, `explain`,
//! `linearizability`, `checkers`, `lease`, `event_feed`, `availability`)
//! is pure: it starts no processes, touches no network and uses no other
//! mooncake crate. The orchestration modules that
//! run masters in network namespaces, inject faults and record histories
//! build on it, never the other way round.

pub mod availability;
mod checkers;
mod error;
pub mod event_feed;
mod explain;
mod history;
mod jsonl;
mod lease;
mod linearizability;
mod memo;
mod model;
mod wgl;

pub use checkers::{CheckResult, NodeId, NodeReport, Violation, cluster_health, no_lost_acked_puts};
pub use error::{HistoryError, RecordError};
pub use history::{History, KeyOps, OpKind, OpRecord, Outcome, ProcessId};
pub use jsonl::{read_jsonl, write_jsonl, write_record};
pub use lease::{
    LeaseCheckConfig, LeaseCounts, LeaseOp, LeaseOutcome, LeaseRecord, LeaseVerdict, LeaseViolation, check_kv_leases,
};
pub use linearizability::{
    KeyFailure, KeyVerdict, LinearizabilityConfig, MAX_STATES_PER_KEY_DEFAULT, TimedOutKey, Verdict, check_key,
    check_linearizable,
};

// Host and fault primitives (root only): namespaces, nftables, signals, loop mounts, clocks.
pub mod clock;
pub mod faults;
pub mod host;
pub mod net;
pub mod power;
pub mod safety;

// Orchestration: the cluster under test, workloads, stall writers, nemesis,
// end-of-run byte checks, runs and reports.
pub mod access;
pub mod availability_run;
pub mod chaos_cluster;
pub mod committed_bytes;
pub mod disk_objects;
pub mod disk_stores;
pub mod event_watcher;
pub mod follower_bursts;
pub mod leader_stability;
pub mod lease_workload;
pub mod nemesis;
pub mod preload;
pub mod registry;
pub mod report;
pub mod rng;
pub mod rolling_restart;
pub mod runner;
pub mod scenario;
pub mod stall_process;
pub mod stall_writer;
pub mod store_kill;
pub mod tenant_probe;
pub mod term_watch;
pub mod tier_reader;
pub mod workload;
pub mod zone_loss;
