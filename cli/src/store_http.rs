//! HTTP of a store node: `/health` and `/metrics` (Prometheus text) with the
//! transfer server's counters (including connections open, refused at each
//! limit and closed by a timeout), the segment's size and whether the masters
//! know it, and the client's per-transport, per-peer transfer counters and
//! get hit/miss counts.
//!
//! `/health` answers 503 while the masters do not know the node's segment
//! (it is being remounted, or the remount fails): such a node serves nothing.
//!
//! `/standalone` (JSON) tells an inference process on the same host how to
//! use this node as its store (Mooncake's standalone mode, Python's
//! `setup_dummy(…, server_address)`): the masters, and the node's segment.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use mooncake_client::Client;
use tokio::task::JoinHandle;

/// What the HTTP handlers read: the node's client and the masters it was
/// given.
#[derive(Clone)]
pub struct NodeState {
    pub client: Arc<Client>,
    pub masters: Vec<String>,
}

pub async fn serve(addr: SocketAddr, node: NodeState) -> anyhow::Result<JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let app = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/standalone", get(standalone))
        .with_state(node);
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "store node HTTP stopped");
        }
    }))
}

/// 200 while the node serves a segment the masters know; 503 with the
/// reason otherwise.
async fn health(State(NodeState { client, .. }): State<NodeState>) -> (StatusCode, String) {
    match client.local_segment() {
        Some(seg) if !seg.is_mounted() => {
            let why = seg.mount_error().unwrap_or_else(|| "the masters do not know this node's segment".into());
            (StatusCode::SERVICE_UNAVAILABLE, format!("segment not mounted: {why}\n"))
        }
        _ => (StatusCode::OK, "ok\n".into()),
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The masters and this node's segment, for a standalone-mode client.
async fn standalone(State(node): State<NodeState>) -> (StatusCode, String) {
    let Some(seg) = node.client.local_segment() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "this node serves no segment\n".into());
    };
    let spec = seg.spec();
    let body = serde_json::json!({
        "masters": node.masters,
        "endpoint": spec.endpoint,
        "segment_id": spec.id,
        "segment_bytes": spec.size,
        "mounted": seg.is_mounted(),
    });
    (StatusCode::OK, body.to_string())
}

async fn metrics(State(NodeState { client, .. }): State<NodeState>) -> String {
    let mut out = String::new();
    if let Some(seg) = client.local_segment() {
        family(&mut out, "mooncake_store_segment_bytes", "gauge", "Size of the segment this node serves.");
        let _ = writeln!(out, "mooncake_store_segment_bytes {}", seg.spec().size);
        let mut gauges = vec![(
            "mooncake_store_segment_mounted",
            "1 while the masters know this node's segment.",
            u64::from(seg.is_mounted()),
        )];
        let mut counters = vec![(
            "mooncake_store_segment_remounts_total",
            "Remounts after the masters had forgotten the segment (expired or unmounted).",
            seg.remounts(),
        )];
        let server = seg.server_stats().await;
        if let Some(s) = server {
            gauges.push(("mooncake_store_connections_open", "Transfer connections open now.", s.connections_open));
            gauges.push((
                "mooncake_store_connections_waiting",
                "Open transfer connections waiting for a request (a newcomer at a limit may take their place).",
                s.connections_waiting,
            ));
            counters.extend([
                ("mooncake_store_read_bytes_total", "Bytes served to READ requests.", s.read_bytes),
                ("mooncake_store_written_bytes_total", "Bytes written by WRITE requests.", s.written_bytes),
                ("mooncake_store_requests_total", "Transfer requests received.", s.ops),
                (
                    "mooncake_store_ucx_keys_total",
                    "UCX keys handed out (--ucx): clients reading this node's segment one-sided.",
                    s.ucx_keys,
                ),
                ("mooncake_store_errors_total", "Transfer requests refused or broken.", s.errors),
                ("mooncake_store_connections_total", "Transfer connections accepted.", s.connections),
                (
                    "mooncake_store_connections_replaced_total",
                    "Waiting transfer connections closed to give their place to a newcomer at a connection limit.",
                    s.replaced,
                ),
                (
                    "mooncake_store_idle_closed_total",
                    "Transfer connections closed after the idle timeout.",
                    s.idle_closed,
                ),
                (
                    "mooncake_store_header_timeouts_total",
                    "Transfer connections closed because a request header came too slowly.",
                    s.header_timeouts,
                ),
                (
                    "mooncake_store_tls_handshake_failures_total",
                    "Transfer connections closed because their TLS handshake failed (no or a foreign certificate).",
                    s.tls_handshake_failures,
                ),
                (
                    "mooncake_store_unauthorized_total",
                    "Transfer requests refused UNAUTHORIZED: no valid capability (also in errors_total).",
                    s.unauthorized,
                ),
                (
                    "mooncake_store_fenced_writes_total",
                    "WRITEs refused UNAUTHORIZED because the masters took their arena back (also in unauthorized_total).",
                    s.fenced,
                ),
            ]);
        }
        for (kind, rows) in [("gauge", gauges), ("counter", counters)] {
            for (name, help, v) in rows {
                family(&mut out, name, kind, help);
                let _ = writeln!(out, "{name} {v}");
            }
        }
        if let Some(s) = server {
            let name = "mooncake_store_connections_refused_total";
            family(&mut out, name, "counter", "Transfer connections answered BUSY, by the limit they hit.");
            let _ = writeln!(out, "{name}{{limit=\"total\"}} {}", s.refused_total_limit);
            let _ = writeln!(out, "{name}{{limit=\"peer\"}} {}", s.refused_peer_limit);
        }
    }
    let st = client.stats();
    family(&mut out, "mooncake_client_gets_total", "counter", "Gets by result (found = cache hit).");
    for (result, v) in [("found", &st.gets_found), ("not_found", &st.gets_not_found), ("error", &st.gets_failed)] {
        let _ = writeln!(out, "mooncake_client_gets_total{{result=\"{result}\"}} {}", v.load(Ordering::Relaxed));
    }
    family(&mut out, "mooncake_client_reads_total", "counter", "Object and range reads by result (ok = bytes landed).");
    for (what, result, v) in
        [("object", "ok", &st.objects_read), ("range", "ok", &st.ranges_read), ("any", "error", &st.reads_failed)]
    {
        let _ = writeln!(
            out,
            "mooncake_client_reads_total{{what=\"{what}\",result=\"{result}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    family(&mut out, "mooncake_client_read_bytes_total", "counter", "Bytes of the object and range reads that landed.");
    let _ = writeln!(out, "mooncake_client_read_bytes_total {}", st.bytes_read.load(Ordering::Relaxed));
    family(&mut out, "mooncake_client_puts_total", "counter", "Puts by result.");
    for (result, v) in [("ok", &st.puts_ok), ("error", &st.puts_failed)] {
        let _ = writeln!(out, "mooncake_client_puts_total{{result=\"{result}\"}} {}", v.load(Ordering::Relaxed));
    }
    transfer_rows(&mut out, &client);
    out
}

fn transfer_rows(out: &mut String, client: &Client) {
    let snap = client.engine().stats().snapshot();
    family(
        out,
        "mooncake_transfer_bytes_total",
        "counter",
        "Bytes moved by this client, per transport, peer and direction.",
    );
    for (kind, peer, s) in &snap {
        let (k, p) = (kind.as_str(), peer);
        let _ = writeln!(
            out,
            "mooncake_transfer_bytes_total{{transport=\"{k}\",peer=\"{p}\",dir=\"read\"}} {}",
            s.read_bytes
        );
        let _ = writeln!(
            out,
            "mooncake_transfer_bytes_total{{transport=\"{k}\",peer=\"{p}\",dir=\"write\"}} {}",
            s.written_bytes
        );
    }
    family(out, "mooncake_transfer_ops_total", "counter", "Transfers per transport, peer and direction.");
    for (kind, peer, s) in &snap {
        let (k, p) = (kind.as_str(), peer);
        let _ = writeln!(out, "mooncake_transfer_ops_total{{transport=\"{k}\",peer=\"{p}\",dir=\"read\"}} {}", s.reads);
        let _ =
            writeln!(out, "mooncake_transfer_ops_total{{transport=\"{k}\",peer=\"{p}\",dir=\"write\"}} {}", s.writes);
    }
    family(out, "mooncake_transfer_errors_total", "counter", "Failed transfers per transport and peer.");
    for (kind, peer, s) in &snap {
        let _ = writeln!(
            out,
            "mooncake_transfer_errors_total{{transport=\"{}\",peer=\"{peer}\"}} {}",
            kind.as_str(),
            s.errors
        );
    }
}
