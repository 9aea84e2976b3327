//! The HTTP side of a master: `/health` (the Raft core runs), `/ready` (this
//! node can serve: core running, a leader known, everything it knows
//! committed applied, and as the leader a quorum heard from recently),
//! `/leader`, `/metrics` in Prometheus text format (see `metrics.rs`), and
//! upstream Mooncake's `/get_all_segments` (the mounted memory segments'
//! names, one a line: what SGLang's Mooncake backend checks at start) and
//! `/query_segment?segment=NAME` (its used and total bytes).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use mooncake_raft_store::Tier;
use openraft::ServerState;

use crate::shared::Shared;

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/leader", get(leader))
        .route("/metrics", get(metrics))
        .route("/get_all_segments", get(all_segments))
        .route("/query_segment", get(query_segment))
        .with_state(shared)
}

async fn health(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    match &s.raft.metrics().borrow().running_state {
        Ok(()) => (StatusCode::OK, "ok\n".into()),
        Err(fatal) => (StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: the Raft core stopped: {fatal}\n")),
    }
}

async fn ready(State(s): State<Arc<Shared>>) -> (StatusCode, String) {
    let committed = s.raft.with_raft_state(|st| st.committed.map(|l| l.index)).await.ok().flatten();
    let m = s.raft.metrics().borrow().clone();
    match readiness(&m, committed, s.quorum_ack_max, s.disk_alarm.reason()) {
        Ok(why) => (StatusCode::OK, format!("ready: {why}\n")),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}

/// Whether a master with these metrics can serve, and why (`committed`: the
/// commit index it knows; `quorum_ack_max`: how old a leader's last quorum
/// acknowledgement may be).
pub(crate) fn readiness(
    m: &openraft::RaftMetrics<u64, openraft::BasicNode>,
    committed: Option<u64>,
    quorum_ack_max: std::time::Duration,
    nospace: Option<String>,
) -> Result<String, String> {
    if let Err(fatal) = &m.running_state {
        return Err(format!("the Raft core stopped: {fatal}"));
    }
    if let Some(why) = nospace {
        return Err(why);
    }
    let Some(leader) = m.current_leader else { return Err("no leader known".into()) };
    let applied = m.last_applied.map(|l| l.index);
    if applied < committed {
        return Err(format!("catching up: applied {applied:?} of committed {committed:?}"));
    }
    if m.state == ServerState::Leader {
        match m.millis_since_quorum_ack {
            Some(ms) if u128::from(ms) <= quorum_ack_max.as_millis() => {}
            other => return Err(format!("leader without a quorum: last quorum ack {other:?} ms ago")),
        }
    }
    Ok(format!("leader {leader}, applied {applied:?}"))
}

/// Upstream's `/get_all_segments`: one line per mounted segment, its name,
/// which upstream takes from the store's `local_hostname` and we from the
/// segment's transfer endpoint (`host:port`, the same string), in segment
/// id order, from this master's applied state (a follower's may lag).
async fn all_segments(State(s): State<Arc<Shared>>) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    let mut names: Vec<(u64, String)> =
        s.reader.read(|st| st.attached(Tier::Dram).map(|g| (g.spec.id.0, g.spec.endpoint.clone())).collect());
    names.sort();
    let body: String = names.into_iter().map(|(_, name)| name + "\n").collect();
    ([(axum::http::header::CONTENT_TYPE, UPSTREAM_TEXT)], body)
}

/// Upstream's content type for its text answers.
const UPSTREAM_TEXT: &str = "text/plain; version=0.0.4";

/// Upstream's `/query_segment?segment=NAME`: the memory segment of that name
/// (as `/get_all_segments` lists it), its used and total bytes; 404 with a
/// line saying so when no mounted segment has the name.
async fn query_segment(
    State(s): State<Arc<Shared>>,
    uri: axum::http::Uri,
) -> (StatusCode, [(axum::http::HeaderName, &'static str); 1], String) {
    let text = [(axum::http::header::CONTENT_TYPE, UPSTREAM_TEXT)];
    let Some(name) = query_param(uri.query().unwrap_or(""), "segment") else {
        return (StatusCode::BAD_REQUEST, text, "give the segment's name: /query_segment?segment=host:port\n".into());
    };
    let found = s.reader.read(|st| {
        st.attached(Tier::Dram).find(|g| g.spec.endpoint == name).map(|g| (g.used_bytes(), g.capacity_bytes()))
    });
    match found {
        Some((used, capacity)) => {
            (StatusCode::OK, text, format!("{name}\nUsed(bytes): {used}\nCapacity(bytes): {capacity}\n"))
        }
        None => (StatusCode::NOT_FOUND, text, format!("segment {name:?} is not mounted (see /get_all_segments)\n")),
    }
}

/// The percent-decoded value of `key` in a query string (`None` when absent
/// or not valid UTF-8 once decoded).
fn query_param(query: &str, key: &str) -> Option<String> {
    let raw = query.split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))?;
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok())?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
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
        let held = st.retired().flat_map(|d| d.replicas.iter());
        g.retired_bytes.set(held.map(|r| r.range.len).sum::<u64>() as i64);
        g.arenas.set(st.arenas().count() as i64);
        g.arena_bytes.set(st.arenas().map(|a| a.len_bytes()).sum::<u64>() as i64);
        for tier in [Tier::Dram, Tier::Ssd] {
            g.tier_capacity_bytes.with_label_values(&[tier.name()]).set(st.tier_capacity_bytes(tier) as i64);
            g.tier_used_bytes.with_label_values(&[tier.name()]).set(st.tier_used_bytes(tier) as i64);
        }
        g.detached_segments.set(st.segments().filter(|x| !x.is_attached()).count() as i64);
        // Objects per tier cost one pass over every object: only once a disk
        // segment exists (without one every object is in memory).
        let (in_memory, on_disk) = match st.segments().any(|x| x.tier() == Tier::Ssd) {
            false => (st.object_count(), 0),
            true => st.objects().fold((0, 0), |(m, d), o| {
                let on = |t| o.replicas.iter().any(|r| st.replica_tier(r) == Some(t));
                (m + usize::from(on(Tier::Dram)), d + usize::from(on(Tier::Ssd)))
            }),
        };
        g.tier_objects.with_label_values(&[Tier::Dram.name()]).set(in_memory as i64);
        g.tier_objects.with_label_values(&[Tier::Ssd.name()]).set(on_disk as i64);
        // Reset first: a tenant whose last object went leaves the metrics.
        g.tenant_objects.reset();
        g.tenant_used_bytes.reset();
        g.tenant_quota_bytes.reset();
        for (tenant, usage) in st.tenant_usages() {
            g.tenant_objects.with_label_values(&[tenant]).set(usage.objects as i64);
            g.tenant_used_bytes.with_label_values(&[tenant]).set(usage.bytes as i64);
        }
        for (tenant, quota) in st.tenant_quotas() {
            g.tenant_quota_bytes.with_label_values(&[tenant]).set(quota as i64);
        }
    });
    let now = std::time::Instant::now();
    g.kv_leases.set(s.leader.with(|t| t.kv.lease_count(now)).unwrap_or(0) as i64);
    g.kv_fences.set(s.leader.with(|t| t.kv.fence_count()).unwrap_or(0) as i64);
    g.objects_processing.set(s.leader.with(|t| t.puts.active_count()).unwrap_or(0) as i64);
    g.writer_chunks.set(s.leader.with(|t| t.puts.chunk_count()).unwrap_or(0) as i64);
    for (duty, r) in s.duties.records() {
        let secs = |ms: Option<u64>| ms.map_or(0, |ms| (ms / 1000) as i64);
        g.duty_runs.with_label_values(&[duty]).set(r.runs as i64);
        g.duty_errors.with_label_values(&[duty]).set(r.errors as i64);
        g.duty_last_success.with_label_values(&[duty]).set(secs(r.last_success_unix_ms));
        g.duty_last_error.with_label_values(&[duty]).set(secs(r.last_error_unix_ms));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use openraft::error::Fatal;
    use openraft::{CommittedLeaderId, LogId, RaftMetrics};

    use super::*;

    #[test]
    fn query_parameters_are_found_and_percent_decoded() {
        assert_eq!(query_param("segment=127.0.0.1%3A7000", "segment"), Some("127.0.0.1:7000".into()));
        assert_eq!(query_param("x=1&segment=h:1", "segment"), Some("h:1".into()));
        assert_eq!(query_param("segments=h:1", "segment"), None, "another key");
        assert_eq!(query_param("", "segment"), None);
        assert_eq!(query_param("segment=%4", "segment"), None, "a cut escape");
        assert_eq!(query_param("segment=%ZZ", "segment"), None, "not hex");
        assert_eq!(query_param("segment=%FF", "segment"), None, "not UTF-8");
    }

    const QUORUM_ACK_MAX: Duration = Duration::from_millis(500);

    fn follower(applied: u64) -> RaftMetrics<u64, openraft::BasicNode> {
        let mut m = RaftMetrics::new_initial(2);
        m.current_leader = Some(1);
        m.state = ServerState::Follower;
        m.last_applied = Some(LogId::new(CommittedLeaderId::new(1, 1), applied));
        m
    }

    #[test]
    fn a_master_is_ready_only_when_it_can_serve() {
        assert!(readiness(&follower(10), Some(10), QUORUM_ACK_MAX, None).is_ok());
        let full = readiness(&follower(10), Some(10), QUORUM_ACK_MAX, Some("NOSPACE: 1 MiB free".into()));
        assert!(full.unwrap_err().contains("NOSPACE"), "a nearly full data dir is not ready");
        let behind = readiness(&follower(7), Some(10), QUORUM_ACK_MAX, None).unwrap_err();
        assert!(behind.contains("catching up"), "{behind}");
        let mut m = follower(10);
        m.current_leader = None;
        assert!(readiness(&m, Some(10), QUORUM_ACK_MAX, None).unwrap_err().contains("no leader"));
        let mut m = follower(10);
        m.running_state = Err(Fatal::Panicked);
        assert!(readiness(&m, Some(10), QUORUM_ACK_MAX, None).unwrap_err().contains("core stopped"));
        // A leader cut off from its followers is not ready.
        let mut m = follower(10);
        m.state = ServerState::Leader;
        m.millis_since_quorum_ack = Some(100);
        assert!(readiness(&m, Some(10), QUORUM_ACK_MAX, None).is_ok());
        m.millis_since_quorum_ack = Some(5_000);
        assert!(readiness(&m, Some(10), QUORUM_ACK_MAX, None).unwrap_err().contains("without a quorum"));
        m.millis_since_quorum_ack = None;
        assert!(readiness(&m, Some(10), QUORUM_ACK_MAX, None).is_err());
    }
}
