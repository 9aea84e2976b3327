//! `mooncake store`: a store node. Contributes a segment of memory, serves
//! transfers on `--listen`, keeps the segment registered with heartbeats,
//! and unmounts it on SIGINT/SIGTERM.

use std::net::SocketAddr;

use anyhow::Context;
use mooncake_client::{Client, ClientConfig, parse_size};
use mooncake_transfer::Protocol;

use crate::MastersArg;

#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    #[command(flatten)]
    pub masters: MastersArg,
    /// Memory to contribute (Mooncake: global_segment_size), e.g. 4GiB.
    #[arg(long = "segment-size", alias = "global_segment_size", default_value = "1GiB", value_parser = parse_size)]
    pub segment_size: u64,
    /// Address to serve transfers on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// How other nodes reach this host (Mooncake: local_hostname); default: the --listen IP.
    #[arg(long = "local-hostname", alias = "local_hostname")]
    pub local_hostname: Option<String>,
    /// Zone label (rack) for replica choice.
    #[arg(long, default_value = "")]
    pub zone: String,
    /// Stable identity; keep it across restarts so stale segments are replaced at once.
    #[arg(long = "client-id")]
    pub client_id: Option<u64>,
    /// Touch every page at start (no page faults later; fails early if memory is short).
    #[arg(long)]
    pub prefault: bool,
    /// Use anonymous memory instead of a /dev/shm file (no same-host shm transfers).
    #[arg(long)]
    pub anonymous: bool,
    /// HTTP address for /health and /metrics (Prometheus text).
    #[arg(long)]
    pub http: Option<std::net::SocketAddr>,
}

pub async fn run(a: StoreArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.local_hostname.is_some() || !a.listen.ip().is_unspecified(),
        "--listen {} binds every address; give --local-hostname so other nodes know how to reach this one",
        a.listen
    );
    let mut cfg = ClientConfig::new(a.masters.masters.clone());
    cfg.local_hostname = a.local_hostname.clone().unwrap_or_else(|| a.listen.ip().to_string());
    cfg.zone = a.zone.clone();
    cfg.global_segment_size = a.segment_size;
    cfg.client_id = a.client_id;
    cfg.transfer_listen = a.listen;
    cfg.prefault = a.prefault;
    cfg.shm_segment = !a.anonymous;
    cfg.protocol = Protocol::Tcp;
    let client = Client::connect(cfg).await.context("starting the store node")?;
    let seg = client.local_segment().map(|l| l.spec()).context("store node has no segment")?;
    eprintln!(
        "store node {:016x}: segment {:016x} of {} bytes served at {} (shm {})",
        client.client_id(),
        seg.id,
        seg.size,
        seg.endpoint,
        if seg.shm_path.is_empty() { "off" } else { &seg.shm_path }
    );
    let client = std::sync::Arc::new(client);
    let http = match a.http {
        Some(addr) => Some(crate::store_http::serve(addr, client.clone()).await?),
        None => None,
    };
    wait_for_signal().await;
    eprintln!("store node stopping: unmounting its segment");
    if let Some(h) = http {
        h.abort();
    }
    match std::sync::Arc::try_unwrap(client) {
        Ok(c) => c.close().await,
        Err(_) => eprintln!("store node: HTTP server still holds the client; segment left to expire"),
    }
    Ok(())
}

pub use mooncake_master::wait_for_signal;
