//! Serving one master's ports: the gRPC port (client, admin and Raft
//! services) and the HTTP port, each behind its connection limits, with
//! mutual TLS when configured.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use mooncake_proto::GRPC_MESSAGE_MAX_BYTES;
use mooncake_proto::admin::admin_service_server::AdminServiceServer;
use mooncake_proto::master::master_service_server::MasterServiceServer;
use mooncake_proto::raft::raft_service_server::RaftServiceServer;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::node::config::MasterConfig;
use crate::node::ports::{FD_RESERVE, FIRST_BYTES_TIMEOUT, GuardedListener, PortEvents, PortLimits, fd_budget};
use crate::rpc::admin_service::AdminServiceImpl;
use crate::rpc::client_service::MasterServiceImpl;
use crate::rpc::edge::Edge;
use crate::rpc::instrumented::Instrumented;
use crate::rpc::raft_service::RaftServiceImpl;
use crate::shared::Shared;

async fn wait_stop(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Most connections to the HTTP port (health checks, metrics scrapers,
/// `mooncake status`), and from one address.
const HTTP_CONNECTIONS_MAX: usize = 128;
const HTTP_PEER_CONNECTIONS_MAX: usize = 32;

/// The connection limits of both ports.
pub(super) struct Limits {
    pub(super) grpc: PortLimits,
    pub(super) http: PortLimits,
}

/// The configured limits within the file descriptor budget (`ports.rs`).
pub(super) fn port_limits(cfg: &MasterConfig) -> Limits {
    let budget = usize::try_from(fd_budget()).unwrap_or(usize::MAX);
    let http_max = HTTP_CONNECTIONS_MAX.min(budget / 8).max(1);
    let grpc_max = cfg.grpc_connections_max.min(budget.saturating_sub(http_max)).max(1);
    if grpc_max < cfg.grpc_connections_max {
        tracing::warn!(
            configured = cfg.grpc_connections_max,
            used = grpc_max,
            reserve = FD_RESERVE,
            "the file descriptor limit (ulimit -n) caps the gRPC port's connections below --grpc-connections-max; \
             raise the limit (LimitNOFILE= in systemd) for larger clusters"
        );
    }
    let first_bytes_timeout = FIRST_BYTES_TIMEOUT;
    Limits {
        grpc: PortLimits {
            total_max: grpc_max,
            peer_max: cfg.grpc_peer_connections_max.min(grpc_max),
            first_bytes_timeout,
            budget_others: http_max,
        },
        http: PortLimits {
            total_max: http_max,
            peer_max: HTTP_PEER_CONNECTIONS_MAX.min(http_max),
            first_bytes_timeout,
            // Small: it takes its share first.
            budget_others: 0,
        },
    }
}

/// What a port tells the master: a refusal restarts every client's TTL
/// (a heartbeat may have been refused) and is counted.
fn port_events(port: &'static str, shared: &Arc<Shared>) -> PortEvents {
    let (leader, metrics) = (shared.leader.clone(), shared.metrics.clone());
    PortEvents {
        on_deaf: Box::new(move || {
            leader.with(|t| t.restart_hearing(std::time::Instant::now()));
        }),
        on_refused: Box::new(move |reason| metrics.port_refusals.with_label_values(&[port, reason]).inc()),
    }
}

/// Binds `addr` for a port and starts admitting connections under `limits`.
fn bind_port(
    port: &'static str,
    addr: SocketAddr,
    limits: PortLimits,
    shared: &Arc<Shared>,
) -> anyhow::Result<GuardedListener> {
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(std_listener)?;
    Ok(GuardedListener::start(port, listener, limits, port_events(port, shared))?)
}

/// What the gRPC port serves: the client and admin services over the
/// shared state and the edge's own, and the Raft transport.
pub(super) struct Services {
    pub shared: Arc<Shared>,
    pub edge: Arc<Edge>,
    pub raft: RaftServiceImpl,
}

pub(super) fn serve_grpc(
    addr: SocketAddr,
    limits: PortLimits,
    tls: Option<&mooncake_tls::TlsConfig>,
    services: Services,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let Services { shared, edge, raft: raft_service } = services;
    let listener = bind_port("grpc", addr, limits, &shared)
        .with_context(|| format!("binding gRPC address {addr} (in use? pick another --listen)"))?;
    let bound = listener.local_addr();
    let incoming = listener.into_stream();
    let service =
        Instrumented::new(MasterServiceImpl::new(shared.clone(), edge.clone(), stop.clone()), shared.metrics.clone());
    let master = MasterServiceServer::new(service)
        .max_decoding_message_size(GRPC_MESSAGE_MAX_BYTES)
        .max_encoding_message_size(GRPC_MESSAGE_MAX_BYTES);
    let raft = RaftServiceServer::new(raft_service)
        .max_decoding_message_size(GRPC_MESSAGE_MAX_BYTES)
        .max_encoding_message_size(GRPC_MESSAGE_MAX_BYTES);
    let admin = AdminServiceServer::new(AdminServiceImpl::new(shared, edge));
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(mooncake_tls::grpc::server_tls(tls)).context("gRPC TLS settings")?;
    }
    let task = tokio::spawn(async move {
        let server = builder
            .add_service(master)
            .add_service(raft)
            .add_service(admin)
            .serve_with_incoming_shutdown(incoming, wait_stop(stop));
        if let Err(e) = server.await {
            tracing::error!(error = %e, "gRPC server stopped");
        }
    });
    Ok((bound, task))
}

/// Loads the TLS files (`None`: TLS off), and logs the one warning of
/// `--insecure` when it lets a plain master bind a reachable address.
pub(super) fn load_tls(cfg: &MasterConfig) -> anyhow::Result<Option<mooncake_tls::TlsConfig>> {
    if let mooncake_tls::Exposure::Insecure { warning } = cfg.exposure().map_err(anyhow::Error::msg)? {
        tracing::warn!("{warning}");
    }
    let tls = cfg.tls.load()?;
    if let Some(tls) = &tls {
        tracing::info!(cert = %tls.files().cert.display(), role = ?tls.own_role(), "mutual TLS on the gRPC port");
    }
    Ok(tls)
}

pub(super) async fn serve_http(
    addr: SocketAddr,
    limits: PortLimits,
    shared: Arc<Shared>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = bind_port("http", addr, limits, &shared)
        .with_context(|| format!("binding HTTP address {addr} (in use? pick another --http)"))?;
    let bound = listener.local_addr();
    let app = crate::node::http::router(shared);
    let task = tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(wait_stop(stop));
        if let Err(e) = server.await {
            tracing::error!(error = %e, "HTTP server stopped");
        }
    });
    Ok((bound, task))
}
