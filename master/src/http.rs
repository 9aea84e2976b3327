//! The HTTP side of a master: `/health` (the process serves), `/ready` (a
//! leader is known and this node has applied what it knows committed),
//! `/leader`, and `/metrics` in Prometheus text format.

use std::fmt::Write;
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
    let m = s.raft.metrics().borrow().clone();
    let (objects, segments, clients, capacity, used) = s.reader.read(|st| {
        (st.object_count(), st.segments().count(), st.clients().count(), st.capacity_bytes(), st.used_bytes())
    });
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}");
    };
    gauge("mooncake_raft_term", "Current Raft term.", m.current_term as f64);
    gauge("mooncake_raft_is_leader", "1 if this master leads.", f64::from(u8::from(m.state == ServerState::Leader)));
    gauge("mooncake_raft_leader_id", "Id of the known leader (0 if none).", m.current_leader.unwrap_or(0) as f64);
    gauge("mooncake_raft_last_log_index", "Index of the last log entry.", m.last_log_index.unwrap_or(0) as f64);
    gauge(
        "mooncake_raft_applied_index",
        "Index of the last applied entry.",
        m.last_applied.map(|l| l.index).unwrap_or(0) as f64,
    );
    gauge("mooncake_objects", "Objects in the state machine.", objects as f64);
    gauge("mooncake_segments", "Mounted segments.", segments as f64);
    gauge("mooncake_clients", "Registered clients.", clients as f64);
    gauge("mooncake_capacity_bytes", "Capacity of all segments.", capacity as f64);
    gauge("mooncake_used_bytes", "Allocated bytes in all segments.", used as f64);
    out
}
