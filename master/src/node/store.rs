//! This master's data dir: opened (with its planted bugs announced),
//! restored from a snapshot file when asked, and compacted after a restore.

use std::time::Duration;

use anyhow::Context;
use mooncake_raft_store::{LogStore, Raft, StateMachineStore, StoreOptions, open_store};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics::{MasterMetrics, MetricsObserver};
use crate::node::config::MasterConfig;

/// Opens the data dir of `cfg` (and seeds it from `--restore`): the log and
/// the state machine Raft will own.
pub(super) fn open(cfg: &MasterConfig, metrics: &Arc<MasterMetrics>) -> anyhow::Result<(LogStore, StateMachineStore)> {
    let observer = Arc::new(MetricsObserver(metrics.clone()));
    let mut store_opts = StoreOptions::new(&cfg.data_dir).with_observer(observer);
    store_opts.fsync = !cfg.planted.no_fsync();
    store_opts.node_id = Some(cfg.id);
    store_opts.checkpoint_every = cfg.state_audit_every;
    store_opts.event_history = cfg.watch_history_events;
    store_opts.dev_unsafe_tampered_checkpoints = cfg.planted.diverges(cfg.id);
    let planted = cfg.planted.on(cfg.id);
    if !planted.is_empty() {
        tracing::warn!(
            planted_bugs = %planted.join(","),
            "DEVELOPMENT-ONLY PLANTED BUGS: this master breaks its guarantees on purpose"
        );
    }
    let (log, sm) = open_store(&store_opts).with_context(|| format!("opening data dir {}", cfg.data_dir.display()))?;
    if let Some(file) = &cfg.restore {
        restore_from(&sm, file)?;
    }
    Ok((log, sm))
}

/// Seeds a pristine store with the state of a snapshot file.
fn restore_from(sm: &StateMachineStore, file: &std::path::Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading snapshot file {}", file.display()))?;
    let (info, body) = mooncake_raft_store::decode_snapshot_file(&bytes)
        .with_context(|| format!("checking snapshot file {}", file.display()))?;
    sm.seed_restore(body).context("restoring")?;
    tracing::info!(
        file = %file.display(),
        source_applied_index = info.applied_index,
        state_hash = format!("{:016x}", info.state_hash),
        "restored the state from a snapshot file"
    );
    Ok(())
}

/// After a restore, snapshot and purge the log at once, so masters added
/// later receive the restored state as a snapshot (the log alone does not
/// contain it); then clears `restoring`, which holds membership changes
/// back until here (a failure leaves it set: adding a master would lose the
/// restored state on it).
pub(super) async fn compact_after_restore(raft: Raft, restoring: Arc<AtomicBool>) {
    let deadline = Duration::from_secs(60);
    let leading = raft.wait(Some(deadline)).state(openraft::ServerState::Leader, "restored master leads").await;
    if let Err(e) = leading {
        tracing::error!(error = %e, "restored master did not become leader; not compacting");
        return;
    }
    let applied = raft.metrics().borrow().last_applied.map(|l| l.index).unwrap_or(0);
    if let Err(e) = raft.trigger().snapshot().await {
        tracing::error!(error = %e, "snapshot after restore");
        return;
    }
    let built = raft
        .wait(Some(deadline))
        .metrics(|m| m.snapshot.is_some_and(|s| s.index >= applied), "snapshot after restore")
        .await;
    match built {
        Ok(m) => {
            let upto = m.snapshot.map(|l| l.index).unwrap_or(0);
            if let Err(e) = raft.trigger().purge_log(upto).await {
                tracing::error!(error = %e, "purge after restore");
                return;
            }
            // The purge runs later in openraft's core: only once it is done
            // must a new master start from the snapshot.
            let purged = raft
                .wait(Some(deadline))
                .metrics(|m| m.purged.is_some_and(|p| p.index >= upto), "purge after restore")
                .await;
            if let Err(e) = purged {
                tracing::error!(error = %e, "purge after restore did not complete");
                return;
            }
            tracing::info!(snapshot_index = upto, "restored state snapshotted; new masters will receive it");
            restoring.store(false, Ordering::Release);
        }
        Err(e) => tracing::error!(error = %e, "snapshot after restore did not complete"),
    }
}
