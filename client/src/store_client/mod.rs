//! `Client`: the store client library. Puts run PutStart → parallel writes
//! to every replica → PutEnd with a crc32c checksum (PutRevoke on any
//! failure); small ones skip the PutStart, placed in a writer chunk
//! (`chunks`); gets choose the nearest replica (same host, then same zone),
//! verify the checksum and fall back to the next replica. A client that
//! contributes memory also serves its segment (the store-node role,
//! `store_node`) and keeps it registered through heartbeats.
//!
//! This module holds the [`Client`] itself (connect, close, accessors); its
//! operations live in submodules: `put` (one object), `get` (one object,
//! existence, size), `batch` (batches of puts and gets), `remove`, and the
//! zero-copy `sessions` with their `scatter` reads; `options` holds what a
//! put is asked with and answers.

use std::sync::Arc;

use mooncake_proto::ErrorCode;
use mooncake_proto::master::GetReplicaListResponse;
use mooncake_transfer::{ServerConfig, TransferEngine};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::master_client::{MasterClient, MasterClientConfig, MasterError};
use crate::store_node::{LocalSegment, StoreNode, heartbeat};

mod batch;
mod chunks;
mod get;
mod options;
mod put;
mod remove;
mod scatter;
mod sessions;

pub use options::{ClientStats, Pin, PutOptions, PutOutcome};
pub use sessions::{GetSession, PutSession, SessionReads};

/// A connected store client.
pub struct Client {
    cfg: ClientConfig,
    client_id: u64,
    master: Arc<MasterClient>,
    engine: Arc<TransferEngine>,
    /// The store-node role, when this process serves segments.
    node: Option<StoreNode>,
    stop: watch::Sender<bool>,
    heartbeat: Option<JoinHandle<()>>,
    stats: ClientStats,
    /// The writer chunks small puts are placed in (`chunks.rs`).
    chunks: chunks::WriterChunks,
    /// Moves with every read: which of equally near replicas goes first
    /// (`get.rs`, [`get::rank_replicas`]).
    read_turn: std::sync::atomic::AtomicU64,
}

impl Client {
    /// Connects to the masters; when `global_segment_size > 0`, also creates,
    /// serves and registers this process's segment.
    pub async fn connect(cfg: ClientConfig) -> Result<Client, ClientError> {
        Self::connect_with_server_config(cfg, ServerConfig::default()).await
    }

    /// As [`connect`](Self::connect), serving the segment (if any) under
    /// `server` (the transfer server's connection limits and timeouts).
    pub async fn connect_with_server_config(cfg: ClientConfig, server: ServerConfig) -> Result<Client, ClientError> {
        cfg.validate().map_err(ClientError::Config)?;
        server.validate().map_err(|e| ClientError::Config(e.to_string()))?;
        let client_id = cfg.client_id.unwrap_or_else(rand::random);
        let (cfg, server) = with_tls(cfg, server);
        let mut mcfg = MasterClientConfig::new(cfg.masters.clone());
        mcfg.tls = cfg.tls.clone();
        mcfg.admin_token = cfg.admin_token.clone();
        mcfg.tenant = cfg.tenant.clone();
        mcfg.credential = cfg.credential.clone();
        mcfg.rpc_timeout = mcfg.rpc_timeout.min(cfg.tcp.request_timeout);
        let master = Arc::new(MasterClient::new(mcfg)?);
        let engine = Arc::new(TransferEngine::new(cfg.local_hostname.clone(), cfg.protocol, cfg.tcp.clone())?);
        let node = match cfg.global_segment_size {
            0 => None,
            size => Some(StoreNode::start(&cfg, client_id, size, server, &master, &engine).await?),
        };
        let held = heartbeat::register(&master, client_id, node.as_ref()).await?;
        if let Some(node) = &node {
            node.scrub_in_background();
        }
        let (stop, stop_rx) = watch::channel(false);
        let heartbeat = Some(tokio::spawn(heartbeat::run(
            master.clone(),
            client_id,
            node.clone(),
            cfg.heartbeat_interval,
            held,
            stop_rx,
        )));
        tracing::info!(client = format!("{client_id:016x}"), segment = ?node.as_ref().map(|n| n.segment().spec().id), "client connected");
        let chunks = chunks::WriterChunks::new(cfg.put_chunk_bytes);
        let read_turn = std::sync::atomic::AtomicU64::new(client_id);
        let stats = ClientStats::default();
        Ok(Client { cfg, client_id, master, engine, node, stop, heartbeat, stats, chunks, read_turn })
    }

    /// Hit/miss and outcome counters of this client.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// The transfer engine (per-transport, per-peer counters).
    pub fn engine(&self) -> &TransferEngine {
        &self.engine
    }

    pub fn client_id(&self) -> u64 {
        self.client_id
    }

    pub fn master(&self) -> &MasterClient {
        &self.master
    }

    /// The master client, shared (a [`crate::Watcher`] holds one).
    pub fn master_handle(&self) -> Arc<MasterClient> {
        self.master.clone()
    }

    /// The store-node role of this process, if it serves segments.
    pub fn store_node(&self) -> Option<&StoreNode> {
        self.node.as_ref()
    }

    /// The segment this process serves, if any.
    pub fn local_segment(&self) -> Option<&LocalSegment> {
        self.node.as_ref().map(StoreNode::segment)
    }

    /// Stops heartbeats, unmounts this process's memory segment and stops
    /// serving. A disk segment stays mounted: once the registration expires
    /// the masters keep it, detached, for the disk replica grace, and the
    /// node restarted with the same identity serves its objects again
    /// (docs/TIERS.md).
    pub async fn close(mut self) {
        self.chunks.retire_all(&self.master, self.client_id);
        let _ = self.stop.send(true);
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        if let Some(node) = self.node.take() {
            node.stop(&self.master, self.client_id).await;
        }
    }
}

/// Items per batch RPC (the master's limit).
pub(super) const BATCH_ITEMS_MAX: usize = 1024;

/// `cfg.tls` is the one switch: it turns on TLS for the transfer lanes
/// and for this client's own transfer server too.
fn with_tls(mut cfg: ClientConfig, mut server: ServerConfig) -> (ClientConfig, ServerConfig) {
    if let Some(tls) = &cfg.tls {
        cfg.tcp.tls = Some(tls.clone());
        server.tls = Some(tls.clone());
    }
    (cfg, server)
}

/// One batch item's status as a result.
pub(super) fn item_status(status: Option<&mooncake_proto::Status>, attempts: u32) -> Result<(), ClientError> {
    match status.and_then(|s| MasterError::from_status(s, attempts)) {
        Some(e) => Err(ClientError::Master(e)),
        None => Ok(()),
    }
}

/// The CRC-32C of consecutive pieces from each piece's CRC and length.
pub(super) fn combined_crc32c(crcs: impl IntoIterator<Item = (u32, usize)>) -> u32 {
    use mooncake_segment::checksum::{crc32c, crc32c_combine};
    let mut crcs = crcs.into_iter();
    let first = crcs.next().map_or(crc32c(&[]), |(crc, _)| crc);
    crcs.fold(first, |acc, (crc, len)| crc32c_combine(acc, crc, len))
}

/// Why a batch item's replica list is not usable (`NotFound` for a
/// missing key), or `None` when it is.
pub(super) fn list_error(key: &str, list: &GetReplicaListResponse, attempts: u32) -> Option<ClientError> {
    match item_status(list.status.as_ref(), attempts) {
        Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => Some(ClientError::NotFound(key.to_string())),
        Err(e) => Some(e),
        Ok(()) => None,
    }
}
