//! The HTTP side of a master: `/health` (the process serves), `/ready` (a
//! leader is known and this node has applied what it knows committed),
//! `/leader`, and `/metrics` in Prometheus text format (see `metrics.rs`).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use openraft::ServerState;

use crate::shared::Shared;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/health", get(|| async { "ok\n" }))
        .route("/ready", get(ready))
        .route("/leader", get(leader))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

async fn ready(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    let m = s.raft.metrics().borrow().clone();
    match m.current_leader {
        Some(l) => (StatusCode::OK, format!("ready: leader {l}, applied {:?}\n", m.last_applied.map(|l| l.index))),
        None => (StatusCode::SERVICE_UNAVAILABLE, "not ready: no leader known\n".into()),
    }
}

async fn leader(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    let m = s.raft.metrics().borrow().clone();
    let addr = m.current_leader.and_then(|id| m.membership_config.membership().get_node(&id).map(|n| n.addr.clone()));
    let body = serde_json::json!({ "leader_id": m.current_leader, "leader_addr": addr, "term": m.current_term });
    (StatusCode::OK, format!("{body}\n"))
}

async fn metrics(State(s): State<Arc<Shared>>) -> String {
    refresh_gauges(&s).await;
    s.metrics.encode()
}

/// Sets the scrape-time gauges from Raft's metrics and the applied state.
async fn refresh_gauges(s: &Shared) {
    let m = s.raft.metrics().borrow().clone();
    let committed = s.raft.with_raft_state(|st| st.committed.map(|l| l.index)).await.ok().flatten();
    let g = &s.metrics.gauges;
    let idx = |v: Option<u64>| v.unwrap_or(0) as i64;
    g.term.set(m.current_term as i64);
    g.is_leader.set(i64::from(m.state == ServerState::Leader));
    g.leader_id.set(idx(m.current_leader));
    g.last_log_index.set(idx(m.last_log_index));
    g.committed_index.set(idx(committed));
    g.applied_index.set(idx(m.last_applied.map(|l| l.index)));
    g.snapshot_index.set(idx(m.snapshot.map(|l| l.index)));
    g.purged_index.set(idx(m.purged.map(|l| l.index)));
    let first = m.purged.map(|l| l.index + 1).unwrap_or(0);
    g.log_entries.set(m.last_log_index.map(|last| (last + 1).saturating_sub(first)).unwrap_or(0) as i64);
    s.reader.read(|st| {
        g.segments.set(st.segments().count() as i64);
        g.capacity_bytes.set(st.capacity_bytes() as i64);
        g.used_bytes.set(st.used_bytes() as i64);
        g.objects.set(st.object_count() as i64);
        g.clients.set(st.clients().count() as i64);
        let held = st.discarded().flat_map(|d| d.replicas.iter()).chain(st.retired().flat_map(|d| d.replicas.iter()));
        g.discarded_bytes.set(held.map(|r| r.range.len).sum::<u64>() as i64);
        g.arenas.set(st.arenas().count() as i64);
        g.arena_bytes.set(st.arenas().map(|a| a.len_bytes()).sum::<u64>() as i64);
    });
    let now = std::time::Instant::now();
    g.kv_leases.set(s.leader.with(|t| t.kv.lease_count(now)).unwrap_or(0) as i64);
    g.kv_fences.set(s.leader.with(|t| t.kv.fence_count()).unwrap_or(0) as i64);
    g.objects_processing.set(s.leader.with(|t| t.puts.active_count()).unwrap_or(0) as i64);
}
