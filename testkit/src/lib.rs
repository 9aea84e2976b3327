//! The one harness integration tests use to run clusters of real
//! `mooncake-master` processes on loopback: start, kill (SIGKILL), restart
//! from the data dir, add joiners, and wait on conditions with deadlines.
//! Every child is killed when the [`Cluster`] is dropped.

mod cluster;

pub use cluster::{Cluster, ClusterBuilder, MasterProc, free_port, wait_until};
