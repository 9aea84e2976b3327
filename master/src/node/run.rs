//! Running a master as a process: logging, validation (exit code 2 with
//! the bad value), start, and a clean stop on SIGINT/SIGTERM. Shared by the
//! `mooncake-master` binary and `mooncake master`.

use tracing_subscriber::EnvFilter;

use crate::{MasterConfig, MasterNode};

fn init_tracing(format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn,sled=warn,h2=warn,tower=warn,hyper=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if format == "json" { builder.json().try_init() } else { builder.try_init() };
}

/// Resolves on SIGINT or SIGTERM (used by every long-running command).
pub async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Runs one master until SIGINT/SIGTERM. An invalid configuration exits the
/// process with code 2 and a message naming the bad value.
pub async fn run(cfg: MasterConfig) -> anyhow::Result<()> {
    init_tracing(&cfg.log_format);
    if let Err(e) = cfg.validate() {
        eprintln!("mooncake-master: invalid configuration: {e}");
        std::process::exit(2);
    }
    let node = MasterNode::start(cfg).await?;
    tokio::select! {
        _ = wait_for_signal() => {}
        reason = node.core_failed() => core_failed_exit(&reason),
        log = node.removed() => {
            tracing::warn!(log, "this master was removed from the cluster's membership; stopping");
            eprintln!(
                "mooncake-master: removed from the cluster's membership (committed at log {log}); exiting with \
                 status 0. The remaining voters serve on; this data dir is no longer needed."
            );
        }
    }
    tracing::info!("stopping");
    node.shutdown().await;
    Ok(())
}

/// Exit status of a master whose Raft core stopped on its own (EX_SOFTWARE).
pub const EXIT_CORE_FAILED: i32 = 70;

/// Crash-only: a master whose Raft core stopped (it cannot write its log, or
/// the core panicked) ends the process with one line naming the cause, rather
/// than staying up and answering nothing truthfully. Its supervisor restarts
/// it; a restart recovers from the data dir and the leader.
fn core_failed_exit(reason: &str) -> ! {
    tracing::error!(reason, "the Raft core stopped; exiting");
    eprintln!(
        "mooncake-master: fatal: the Raft core stopped: {reason}. Exiting (status {EXIT_CORE_FAILED}) so a \
         supervisor restarts this master; it recovers from its data dir and the leader. If the cause is the disk \
         (full, read-only, failing), fix that first: the other masters keep serving meanwhile."
    );
    std::process::exit(EXIT_CORE_FAILED)
}
