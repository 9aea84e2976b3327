//! The client heartbeat: `Ping` the leader every interval; when the master
//! answers NEED_REMOUNT (it does not know this client, e.g. it expired while
//! partitioned) remount this process's segments at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::local_segment::LocalSegment;
use crate::master_client::MasterClient;

pub async fn run(
    master: Arc<MasterClient>,
    client_id: u64,
    local: Option<Arc<LocalSegment>>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        match master.ping(client_id).await {
            Ok(true) => {}
            Ok(false) => {
                let segments = local.iter().map(|l| l.spec()).collect();
                match master.remount_segments(client_id, segments).await {
                    Ok(()) => tracing::info!(
                        client = format!("{client_id:016x}"),
                        "master asked for a remount; segments remounted"
                    ),
                    Err(e) => tracing::warn!(error = %e, "remount failed; will retry"),
                }
            }
            Err(e) => tracing::warn!(error = %e, "heartbeat failed; will retry"),
        }
    }
}
