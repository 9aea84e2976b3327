//! Local clusters of real processes: masters and store nodes started as
//! child processes on loopback, all data under one directory
//! ([`LocalCluster`], built by [`LocalClusterBuilder`]). It owns everything
//! in the workspace that spawns or signals a process of ours: start,
//! SIGTERM/SIGKILL, SIGSTOP/SIGCONT, restart from the data dir, joiners, and
//! the waits on a leader and on mounted segments. It backs `mooncake up`,
//! `mooncake demo`, `mooncake bench`, the chaos harness and (through
//! `mooncake-testkit`) every multi-process test.
//!
//! Depends on `client` (the admin's `MasterClient`), `proto`, `auth` and
//! `tls`; only the tools above it (`cli`, `benches`, `jepsen`, `testkit`)
//! depend on it, so the client library itself spawns no process.

mod binary;
mod cluster;
mod node;
mod ports;
mod wait;

pub use binary::find_binary;
pub use cluster::{
    LocalCluster, LocalClusterBuilder, SECRET_FILE, STORE_CLIENT_ID_BASE, STORE_DISK_FILE, TLS_TENANTS, log_tail,
};
pub use node::{Node, Role};
pub use ports::free_port;
pub use wait::wait_for;
