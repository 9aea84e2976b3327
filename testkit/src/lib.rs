//! The one harness integration tests use: [`Cluster`], real `mooncake-master`
//! and store-node processes on loopback (the same code as `mooncake up`),
//! with start, SIGKILL, restart and waits that panic with the logs' tails.

mod cluster;
mod fake_store;
mod http;
pub mod in_process;
mod process;
pub mod sources;
pub mod zmq_feed;

pub use cluster::{Cluster, ClusterBuilder, wait_until};
pub use fake_store::acknowledge_fences;
pub use http::{Sample, http_get, parse_prometheus, sample_value};
pub use mooncake_local_cluster::{Role, free_port};
pub use process::KillOnDrop;
