//! `Client`: the store client library. Puts run PutStart → parallel writes
//! to every replica → PutEnd with a crc32c checksum (PutRevoke on any
//! failure); gets choose the nearest replica (same host, then same zone),
//! verify the checksum and fall back to the next replica. A client that
//! contributes memory also serves its segment (the store-node role) and
//! keeps it registered through heartbeats.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::join_all;
use mooncake_auth::capability::Capability;
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{GetReplicaListResponse, PutEndRequest, PutRevokeRequest, PutStartRequest, Replica};
use mooncake_segment::SegmentId;
use mooncake_transfer::{BatchRead, RemoteSegment, ServerConfig, TransferEngine};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ClientConfig;
use crate::error::ClientError;
use crate::master_client::{Attempted, MasterClient, MasterClientConfig, MasterError};
use crate::store_node::LocalSegment;

mod scatter;
mod sessions;

pub use sessions::{GetSession, PutSession, SessionReads};

/// Options of one put.
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    /// Replicas wanted (0 = the client's default). Fewer are placed when
    /// fewer segments have room, down to `min_replicas`.
    pub replicas: u32,
    /// Fewest replicas the put accepts (0 = 1): when fewer segments have
    /// room, the put fails with `NO_AVAILABLE_HANDLE` rather than store
    /// fewer copies. Set it to `replicas` for a put that must survive the
    /// loss of all but one of its segments.
    pub min_replicas: u32,
    /// Segments to try first.
    pub preferred_segments: Vec<SegmentId>,
    /// How eviction treats the object.
    pub pin: Pin,
}

/// How eviction treats an object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Pin {
    /// Evicted in its turn (oldest first, KV leases respected).
    #[default]
    None,
    /// Evicted only after every unpinned candidate.
    Soft,
    /// Never evicted: removed only by Remove/RemoveAll or the loss of its
    /// segments.
    Hard,
    /// As `Soft` for `ttl_ms` (1..=86,400,000) after the object becomes
    /// readable, then as `None`.
    SoftFor { ttl_ms: u64 },
}

impl Pin {
    /// The value on the wire (`mooncake_proto::master::Pin`).
    pub fn wire(self) -> i32 {
        use mooncake_proto::master::Pin as Wire;
        match self {
            Pin::None => Wire::None as i32,
            Pin::Soft => Wire::Soft as i32,
            Pin::Hard => Wire::Hard as i32,
            Pin::SoftFor { .. } => Wire::Soft as i32,
        }
    }

    /// The soft-pin TTL on the wire (`soft_pin_ttl_ms`; 0: none).
    pub fn soft_pin_ttl_ms(self) -> u64 {
        match self {
            Pin::SoftFor { ttl_ms } => ttl_ms,
            Pin::None | Pin::Soft | Pin::Hard => 0,
        }
    }
}

impl std::str::FromStr for Pin {
    type Err = String;

    /// `none`, `soft`, `hard`, or `soft:<ttl ms>`.
    fn from_str(s: &str) -> Result<Pin, String> {
        match s {
            "none" => Ok(Pin::None),
            "soft" => Ok(Pin::Soft),
            "hard" => Ok(Pin::Hard),
            other => match other.strip_prefix("soft:").map(str::parse::<u64>) {
                Some(Ok(ttl_ms)) if ttl_ms > 0 => Ok(Pin::SoftFor { ttl_ms }),
                _ => Err(format!("{other:?} is not a pin; use none, soft, soft:<ttl ms> or hard")),
            },
        }
    }
}

/// The ids of `segments` on the wire.
fn wire_segments(segments: &[SegmentId]) -> Vec<u64> {
    segments.iter().map(|s| s.0).collect()
}

/// What a successful put did. As in Mooncake, putting a key that exists
/// (or that another client is writing) succeeds and keeps the existing
/// object: the first writer wins. Replace a value with `upsert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// The bytes were stored under the key.
    Stored,
    /// The key already held an object (or one was being written); it is
    /// kept and nothing was written.
    KeptExisting,
}

/// Counters of one client: cache hits and misses of gets, put outcomes.
#[derive(Debug, Default)]
pub struct ClientStats {
    pub gets_found: AtomicU64,
    pub gets_not_found: AtomicU64,
    pub gets_failed: AtomicU64,
    pub puts_ok: AtomicU64,
    pub puts_failed: AtomicU64,
    /// Puts of a key that existed: nothing written, the object kept.
    pub puts_kept_existing: AtomicU64,
}

/// A connected store client.
pub struct Client {
    cfg: ClientConfig,
    client_id: u64,
    master: Arc<MasterClient>,
    engine: Arc<TransferEngine>,
    local: Option<Arc<LocalSegment>>,
    stop: watch::Sender<bool>,
    heartbeat: Option<JoinHandle<()>>,
    stats: ClientStats,
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
        mcfg.credential = cfg.credential.clone();
        mcfg.rpc_timeout = mcfg.rpc_timeout.min(cfg.tcp.request_timeout);
        let master = Arc::new(MasterClient::new(mcfg)?);
        let engine = Arc::new(TransferEngine::new(cfg.local_hostname.clone(), cfg.protocol, cfg.tcp.clone())?);
        let local = match cfg.global_segment_size {
            0 => None,
            size => Some(Arc::new(LocalSegment::start(&cfg, client_id, size, server).await?)),
        };
        // This process's own segments are reached without a socket (a store
        // node's copies to its own disk, a client reading what it serves).
        if let Some(local) = &local {
            engine.route_locally(local.registry().clone());
        }
        // Register at once with our exact set of segments: a restarted
        // process with the same identity replaces its stale segments now
        // instead of waiting for its old registration to expire. Unless that
        // registration is another process's (another credential): then the
        // heartbeat waits for it to expire and registers.
        let segments = local.iter().flat_map(|l| l.specs()).collect();
        let mut held = crate::store_node::heartbeat::HeldId::default();
        match master.remount_segments(client_id, segments).await {
            Ok(keys) => {
                if let Some(local) = &local {
                    local.install_keys(&keys)?;
                }
            }
            Err(e) if e.code() == Some(ErrorCode::PermissionDenied) => held.refused(client_id, local.as_deref()),
            Err(e) => return Err(e.into()),
        }
        // A store node makes the copies the leader asks for (tiers), and
        // scrubs a disk it found at start.
        let copier = local.as_ref().map(|local| {
            crate::store_node::copier::Copier::new(
                master.clone(),
                engine.clone(),
                local.clone(),
                client_id,
                cfg.dev_unsafe_unwritten_copies,
            )
        });
        if let Some(local) = local.clone() {
            tokio::spawn(async move {
                if let Err(e) = local.scrub_disk().await {
                    tracing::error!(error = %e, "scrubbing the disk segment failed; its reads are still verified");
                }
            });
        }
        let (stop, stop_rx) = watch::channel(false);
        let take_copies = copier.clone().map(|c| c.take_copies(cfg.heartbeat_interval, stop_rx.clone()));
        let beat = crate::store_node::heartbeat::run(
            master.clone(),
            client_id,
            local.clone(),
            copier,
            cfg.heartbeat_interval,
            held,
            stop_rx,
        );
        let heartbeat = Some(tokio::spawn(async move {
            match take_copies {
                Some(take_copies) => {
                    tokio::join!(beat, take_copies);
                }
                None => beat.await,
            }
        }));
        tracing::info!(client = format!("{client_id:016x}"), segment = ?local.as_ref().map(|l| l.spec().id), "client connected");
        Ok(Client { cfg, client_id, master, engine, local, stop, heartbeat, stats: ClientStats::default() })
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

    /// The segment this process serves, if any.
    pub fn local_segment(&self) -> Option<&LocalSegment> {
        self.local.as_deref()
    }

    /// Stores `data` under `key`; a key that exists is kept as it is
    /// ([`PutOutcome::KeptExisting`]).
    pub async fn put(&self, key: &str, data: &[u8], opts: &PutOptions) -> Result<PutOutcome, ClientError> {
        self.put_object(key, std::slice::from_ref(&data), opts, false).await
    }

    /// Stores the concatenation of `parts` under `key` without joining them
    /// in memory first: each part is written from where it lies (a gather
    /// write). Otherwise as [`put`](Self::put).
    pub async fn put_parts(&self, key: &str, parts: &[&[u8]], opts: &PutOptions) -> Result<PutOutcome, ClientError> {
        self.put_object(key, parts, opts, false).await
    }

    /// Stores `data` under `key`, replacing the object if the key exists.
    /// Readers see the old bytes or the new, never a mix: the new value is
    /// written to new ranges, and the old ones stay until no reader can
    /// still hold a KV lease on them.
    pub async fn upsert(&self, key: &str, data: &[u8], opts: &PutOptions) -> Result<(), ClientError> {
        self.upsert_parts(key, std::slice::from_ref(&data), opts).await
    }

    /// [`upsert`](Self::upsert) of the concatenation of `parts`, each
    /// written from where it lies.
    pub async fn upsert_parts(&self, key: &str, parts: &[&[u8]], opts: &PutOptions) -> Result<(), ClientError> {
        self.put_object(key, parts, opts, true).await.map(drop)
    }

    /// Same as [`put`](Self::put); the name of Mooncake's zero-copy variant.
    pub async fn put_from(&self, key: &str, data: &[u8], opts: &PutOptions) -> Result<PutOutcome, ClientError> {
        self.put(key, data, opts).await
    }

    /// PutStart → write every replica → PutEnd (the one commit); PutRevoke
    /// on failure. A put whose reservation expired on the way (a leader
    /// change reclaimed its arena) is put again, once: the caller sees one
    /// stored object or one error.
    async fn put_object(
        &self,
        key: &str,
        data: &[&[u8]],
        opts: &PutOptions,
        upsert: bool,
    ) -> Result<PutOutcome, ClientError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.put_once(key, data, opts, upsert).await {
                Err(PutFailure::Expired(e)) if attempt < PUT_ATTEMPTS_MAX => {
                    tracing::info!(key, error = %e, "put expired on the way (leader change?); putting again");
                }
                Err(PutFailure::Expired(e) | PutFailure::Other(e)) => {
                    self.stats.puts_failed.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
                Ok(outcome) => {
                    let counter = match outcome {
                        PutOutcome::Stored => &self.stats.puts_ok,
                        PutOutcome::KeptExisting => &self.stats.puts_kept_existing,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    return Ok(outcome);
                }
            }
        }
    }

    async fn put_once(
        &self,
        key: &str,
        data: &[&[u8]],
        opts: &PutOptions,
        upsert: bool,
    ) -> Result<PutOutcome, PutFailure> {
        // The checksum is computed while PutStart is in flight (the RPC is
        // polled, and so sent, first): its round trip hides the CPU time.
        let size = parts_len(data);
        let (replicas, checksum) = tokio::join!(self.put_start(key, size, opts, upsert), async { parts_crc32c(data) });
        let replicas = match replicas {
            Err(e) if !upsert && is_already_exists(&e) => return Ok(PutOutcome::KeptExisting),
            other => other.map_err(PutFailure::Other)?,
        };
        let result = self.write_replicas(&replicas, data).await;
        let result = match result {
            Ok(()) => {
                let end = self.put_end_request(key, size, checksum, &replicas, opts, upsert);
                self.master.put_end_with(end).await.map_err(ClientError::from)
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => Ok(PutOutcome::Stored),
            // Only an expiry answered on the PutEnd's first attempt proves
            // nothing was recorded; a retried PutEnd carries its request id,
            // so one that did commit answers OK rather than this.
            Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) && e.is_definite() => Err(PutFailure::Expired(e)),
            Err(e) => match self.master.put_revoke(self.client_id, key).await {
                // The reservation is gone: the put certainly had no effect a
                // reader could see.
                Ok(()) => Err(PutFailure::Other(ClientError::PutRevoked(Box::new(e)))),
                Err(revoke) => {
                    tracing::warn!(key, error = %revoke, "put revoke after a failed put");
                    Err(PutFailure::Other(e))
                }
            },
        }
    }

    /// The PutStart of `size` bytes under `key` with `opts`.
    fn put_start_request(&self, key: &str, size: u64, opts: &PutOptions, upsert: bool) -> PutStartRequest {
        PutStartRequest {
            client_id: self.client_id,
            key: key.to_string(),
            size,
            replica_num: if opts.replicas == 0 { self.cfg.default_replicas } else { opts.replicas },
            preferred_segments: wire_segments(&opts.preferred_segments),
            pin: opts.pin.wire(),
            soft_pin_ttl_ms: opts.pin.soft_pin_ttl_ms(),
            upsert,
            min_replicas: opts.min_replicas,
        }
    }

    fn put_end_request(
        &self,
        key: &str,
        size: u64,
        checksum: u32,
        replicas: &[Replica],
        opts: &PutOptions,
        upsert: bool,
    ) -> PutEndRequest {
        PutEndRequest {
            client_id: self.client_id,
            key: key.to_string(),
            checksum,
            size,
            replicas: replicas.to_vec(),
            pin: opts.pin.wire(),
            soft_pin_ttl_ms: opts.pin.soft_pin_ttl_ms(),
            upsert,
            // One id per put attempt: retries of this PutEnd share it.
            request_id: rand::random::<u64>() | 1,
        }
    }

    async fn put_start(
        &self,
        key: &str,
        size: u64,
        opts: &PutOptions,
        upsert: bool,
    ) -> Result<Vec<Replica>, ClientError> {
        let req = self.put_start_request(key, size, opts, upsert);
        Ok(self.master.put_start(req).await?)
    }

    /// Writes the parts of one object, back to back, to every replica at once.
    async fn write_replicas(&self, replicas: &[Replica], data: &[&[u8]]) -> Result<(), ClientError> {
        let writes = replicas.iter().flat_map(|r| {
            let target = remote(r);
            part_offsets(data).map(move |(pos, part)| {
                let target = target.clone();
                async move { self.engine.write(&target, r.offset + pos, part).await }
            })
        });
        for r in join_all(writes).await {
            r?;
        }
        Ok(())
    }

    /// Reads `key` into `buf`; returns its size.
    pub async fn get_into(&self, key: &str, buf: &mut [u8]) -> Result<usize, ClientError> {
        let list = self.replica_list(key).await?;
        self.read_object(key, &list, buf).await
    }

    /// Reads `key` into a new buffer.
    pub async fn get(&self, key: &str) -> Result<Vec<u8>, ClientError> {
        let list = self.replica_list(key).await?;
        let mut buf = vec![0u8; list.size as usize];
        let n = self.read_object(key, &list, &mut buf).await?;
        buf.truncate(n);
        Ok(buf)
    }

    async fn replica_list(&self, key: &str) -> Result<GetReplicaListResponse, ClientError> {
        match self.master.get_replica_list(self.client_id, key).await {
            Err(e) if e.code() == Some(mooncake_proto::ErrorCode::ObjectNotFound) => {
                self.stats.gets_not_found.fetch_add(1, Ordering::Relaxed);
                Err(ClientError::NotFound(key.to_string()))
            }
            Err(e) => {
                self.stats.gets_failed.fetch_add(1, Ordering::Relaxed);
                Err(e.into())
            }
            Ok(list) => {
                self.stats.gets_found.fetch_add(1, Ordering::Relaxed);
                Ok(list)
            }
        }
    }

    /// Reads from the nearest replica whose bytes match the checksum (the
    /// one-buffer case of `read_object_parts`).
    async fn read_object(
        &self,
        key: &str,
        list: &GetReplicaListResponse,
        buf: &mut [u8],
    ) -> Result<usize, ClientError> {
        self.read_object_parts(key, list, &mut [buf]).await
    }

    /// Memory before disk; within a tier same host first, then same zone,
    /// then the rest (stable within groups).
    fn nearest_first<'a>(&self, replicas: &'a [Replica]) -> Vec<&'a Replica> {
        let mut v: Vec<&Replica> = replicas.iter().collect();
        v.sort_by_key(|r| {
            let on_disk = r.tier == mooncake_proto::master::Tier::Ssd as i32;
            let same_host = r.host_id == self.cfg.local_hostname;
            let same_zone = !self.cfg.zone.is_empty() && r.zone == self.cfg.zone;
            (on_disk, !same_host, !same_zone)
        });
        v
    }

    /// Puts several objects: one batch PutStart, every write in parallel, one
    /// batch PutEnd (and one batch PutRevoke for those that failed). One
    /// result per item, in order; an existing key is kept, as in [`put`](Self::put).
    pub async fn put_batch(&self, items: &[(&str, &[u8])], opts: &PutOptions) -> Vec<Result<PutOutcome, ClientError>> {
        let items: Vec<(&str, &[&[u8]])> = items.iter().map(|(key, data)| (*key, std::slice::from_ref(data))).collect();
        self.put_batch_parts(&items, opts).await
    }

    /// [`put_batch`](Self::put_batch) where each object is the concatenation
    /// of its parts, written from where they lie (see [`put_parts`](Self::put_parts)).
    pub async fn put_batch_parts(
        &self,
        items: &[(&str, &[&[u8]])],
        opts: &PutOptions,
    ) -> Vec<Result<PutOutcome, ClientError>> {
        self.batch_parts(items, opts, false).await
    }

    /// [`put_batch_parts`](Self::put_batch_parts) replacing the objects of
    /// keys that exist, each as [`upsert`](Self::upsert) does (readers see
    /// an object's old bytes or its new, never a mix).
    pub async fn upsert_batch_parts(
        &self,
        items: &[(&str, &[&[u8]])],
        opts: &PutOptions,
    ) -> Vec<Result<(), ClientError>> {
        self.batch_parts(items, opts, true).await.into_iter().map(|r| r.map(drop)).collect()
    }

    async fn batch_parts(
        &self,
        items: &[(&str, &[&[u8]])],
        opts: &PutOptions,
        upsert: bool,
    ) -> Vec<Result<PutOutcome, ClientError>> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(BATCH_ITEMS_MAX) {
            out.extend(self.put_chunk(chunk, opts, upsert).await);
        }
        out
    }

    async fn put_chunk(
        &self,
        items: &[(&str, &[&[u8]])],
        opts: &PutOptions,
        upsert: bool,
    ) -> Vec<Result<PutOutcome, ClientError>> {
        let reqs = items.iter().map(|(key, data)| self.put_start_request(key, parts_len(data), opts, upsert)).collect();
        let started = match self.master.batch_put_start(reqs).await {
            Ok(r) => r,
            Err(e) => return items.iter().map(|_| Err(ClientError::Master(e.clone()))).collect(),
        };
        let writes = items.iter().zip(&started.reply).map(|((_, data), resp)| async move {
            item_status(resp.status.as_ref(), started.attempts)?;
            self.write_replicas(&resp.replicas, data).await
        });
        let written: Vec<Result<(), ClientError>> = join_all(writes).await;
        // Items whose key existed wrote nothing and end nothing: they are kept.
        let kept: Vec<bool> = written.iter().map(|w| w.as_ref().err().is_some_and(is_already_exists)).collect();
        let placements: Vec<&[Replica]> = started.reply.iter().map(|r| r.replicas.as_slice()).collect();
        let ended = self.end_chunk(items, written, &placements, opts, upsert).await;
        let mut results: Vec<Result<PutOutcome, ClientError>> = ended
            .into_iter()
            .zip(kept)
            .map(|(r, kept)| match (r, kept) {
                (Err(_), true) => Ok(PutOutcome::KeptExisting),
                (r, _) => r.map(|()| PutOutcome::Stored),
            })
            .collect();
        // A put whose reservation expired on the way (a leader change) is
        // put again on its own, like `put` does (which counts it).
        let mut counted = vec![false; results.len()];
        for (i, r) in results.iter_mut().enumerate() {
            if matches!(r, Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) && e.is_definite()) {
                let (key, data) = items[i];
                tracing::info!(key, "batch put expired on the way (leader change?); putting it again");
                *r = self.put_object(key, data, opts, upsert).await;
                counted[i] = true;
            }
        }
        for r in results.iter().zip(counted).filter(|(_, counted)| !counted).map(|(r, _)| r) {
            let c = match r {
                Ok(PutOutcome::Stored) => &self.stats.puts_ok,
                Ok(PutOutcome::KeptExisting) => &self.stats.puts_kept_existing,
                Err(_) => &self.stats.puts_failed,
            };
            c.fetch_add(1, Ordering::Relaxed);
        }
        results
    }

    /// PutEnd of the written items, PutRevoke of the others.
    async fn end_chunk(
        &self,
        items: &[(&str, &[&[u8]])],
        written: Vec<Result<(), ClientError>>,
        placements: &[&[Replica]],
        opts: &PutOptions,
        upsert: bool,
    ) -> Vec<Result<(), ClientError>> {
        let ends: Vec<PutEndRequest> = items
            .iter()
            .zip(&written)
            .zip(placements)
            .filter(|((_, w), _)| w.is_ok())
            .map(|(((key, data), _), replicas)| {
                self.put_end_request(key, parts_len(data), parts_crc32c(data), replicas, opts, upsert)
            })
            .collect();
        let ended = match self.master.batch_put_end(ends).await {
            Ok(r) => r.reply.into_iter().map(|e| item_status(e.status.as_ref(), r.attempts)).collect::<Vec<_>>(),
            Err(e) => written.iter().filter(|w| w.is_ok()).map(|_| Err(ClientError::Master(e.clone()))).collect(),
        };
        let mut ended = ended.into_iter();
        let results: Vec<Result<(), ClientError>> = written
            .into_iter()
            .map(|w| match w {
                Ok(()) => ended.next().unwrap_or_else(|| Err(ClientError::Config("missing PutEnd answer".into()))),
                Err(e) => Err(e),
            })
            .collect();
        let revoke: Vec<PutRevokeRequest> = items
            .iter()
            .zip(&results)
            .filter(|(_, r)| {
                r.as_ref().is_err_and(|e| !is_already_exists(e) && e.code() != Some(ErrorCode::ObjectNotFound))
            })
            .map(|((key, _), _)| PutRevokeRequest { client_id: self.client_id, key: key.to_string() })
            .collect();
        if !revoke.is_empty()
            && let Err(e) = self.master.batch_put_revoke(revoke).await
        {
            tracing::warn!(error = %e, "put revoke after failed batch puts");
        }
        results
    }

    /// Gets several objects: one batch replica-list call (one leadership
    /// confirmation), then every read in parallel. One result per key.
    pub async fn get_batch(&self, keys: &[&str]) -> Vec<Result<Vec<u8>, ClientError>> {
        let got = self.get_batch_with(keys, |_, size| Ok(vec![0u8; size as usize])).await;
        got.into_iter()
            .map(|r| {
                r.map(|(mut buf, size)| {
                    buf.truncate(size);
                    buf
                })
            })
            .collect()
    }

    /// [`get_batch`](Self::get_batch) into buffers the caller provides:
    /// `alloc(index, size)` gives the buffer of item `index` once its size is
    /// known (at least `size` bytes, or an error for that item). Returns each
    /// item's buffer and object size.
    pub async fn get_batch_with<B, F>(&self, keys: &[&str], mut alloc: F) -> Vec<Result<(B, usize), ClientError>>
    where
        B: AsMut<[u8]>,
        F: FnMut(usize, u64) -> Result<B, ClientError>,
    {
        let mut out = Vec::with_capacity(keys.len());
        for (chunk_index, chunk) in keys.chunks(BATCH_ITEMS_MAX).enumerate() {
            let base = chunk_index * BATCH_ITEMS_MAX;
            let names = chunk.iter().map(|k| k.to_string()).collect();
            match self.master.batch_get_replica_list(self.client_id, names).await {
                Ok(lists) => out.extend(self.read_batch(chunk, &lists, |i, size| alloc(base + i, size)).await),
                Err(e) => out.extend(chunk.iter().map(|_| Err(ClientError::Master(e.clone())))),
            }
        }
        out
    }

    /// Reads the objects of one batch: all found objects from their nearest
    /// replicas in one batched transfer (small reads from one store node
    /// share a pipelined connection), then each object that failed there or
    /// did not match its checksum on its own, over every replica.
    async fn read_batch<B, F>(
        &self,
        keys: &[&str],
        lists: &Attempted<Vec<GetReplicaListResponse>>,
        mut alloc: F,
    ) -> Vec<Result<(B, usize), ClientError>>
    where
        B: AsMut<[u8]>,
        F: FnMut(usize, u64) -> Result<B, ClientError>,
    {
        let mut out: Vec<Result<B, ClientError>> = keys
            .iter()
            .zip(&lists.reply)
            .enumerate()
            .map(|(index, (key, list))| {
                self.list_status(key, list, lists.attempts)?;
                let mut buf = alloc(index, list.size)?;
                let room = buf.as_mut().len();
                match room as u64 >= list.size {
                    true => Ok(buf),
                    false => Err(ClientError::BufferTooSmall { key: key.to_string(), size: list.size, buf: room }),
                }
            })
            .collect();
        let nearest: Vec<Option<(RemoteSegment, u64)>> = lists
            .reply
            .iter()
            .map(|list| self.nearest_first(&list.replicas).first().map(|r| (remote(r), r.offset)))
            .collect();
        let mut pending: Vec<bool> = out.iter().map(Result::is_ok).collect();
        let mut reads = Vec::new();
        let mut read_index = Vec::new();
        for (index, (slot, nearest)) in out.iter_mut().zip(&nearest).enumerate() {
            if let (Ok(buf), Some((target, offset))) = (slot, nearest) {
                let size = lists.reply[index].size as usize;
                reads.push(BatchRead { target, offset: *offset, buf: &mut buf.as_mut()[..size] });
                read_index.push(index);
            }
        }
        let crcs = self.engine.read_batch_checksummed(reads).await;
        for (index, crc) in read_index.into_iter().zip(crcs) {
            match crc {
                Ok(crc) if crc == lists.reply[index].checksum => pending[index] = false,
                Ok(_) => tracing::warn!(key = keys[index], "checksum mismatch on the nearest replica; trying each"),
                Err(e) => tracing::warn!(key = keys[index], error = %e, "batched replica read failed; trying each"),
            }
        }
        let slow = out.iter_mut().enumerate().filter(|(index, _)| pending[*index]).map(|(index, slot)| async move {
            let failed = match slot.as_mut() {
                Ok(buf) => self.read_object(keys[index], &lists.reply[index], buf.as_mut()).await.err(),
                Err(_) => None,
            };
            if let Some(e) = failed {
                *slot = Err(e);
            }
        });
        join_all(slow).await;
        out.into_iter().zip(&lists.reply).map(|(r, list)| r.map(|buf| (buf, list.size as usize))).collect()
    }

    /// One batch item's replica-list status as a result, counted as a get
    /// found or not found.
    fn list_status(&self, key: &str, list: &GetReplicaListResponse, attempts: u32) -> Result<(), ClientError> {
        match list_error(key, list, attempts) {
            Some(e @ ClientError::NotFound(_)) => {
                self.stats.gets_not_found.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
            Some(e) => Err(e),
            None => {
                self.stats.gets_found.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    pub async fn exists(&self, key: &str) -> Result<bool, ClientError> {
        Ok(self.master.exist_key(key).await?)
    }

    pub async fn get_size(&self, key: &str) -> Result<u64, ClientError> {
        match self.master.get_size(key).await {
            Err(e) if e.code() == Some(mooncake_proto::ErrorCode::ObjectNotFound) => {
                Err(ClientError::NotFound(key.to_string()))
            }
            other => Ok(other?),
        }
    }

    pub async fn remove(&self, key: &str, force: bool) -> Result<(), ClientError> {
        Ok(self.master.remove(key, force).await?)
    }

    pub async fn remove_all(&self, force: bool) -> Result<u64, ClientError> {
        Ok(self.master.remove_all(force).await?)
    }

    /// Stops heartbeats, unmounts this process's memory segment and stops
    /// serving. A disk segment stays mounted: once the registration expires
    /// the masters keep it, detached, for the disk replica grace, and the
    /// node restarted with the same identity serves its objects again
    /// (docs/TIERS.md).
    pub async fn close(mut self) {
        let _ = self.stop.send(true);
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        if let Some(local) = self.local.take() {
            // Bounded: a stopping node must not hang on unreachable masters
            // (its segment then expires after client_ttl).
            let unmount = self.master.unmount_segment(self.client_id, local.spec().id);
            match tokio::time::timeout(CLOSE_UNMOUNT_TIMEOUT, unmount).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "unmount on close"),
                Err(_) => tracing::warn!("unmount on close: no master answered; the segment will expire"),
            }
            local.stop().await;
        }
    }
}

/// How long `close` tries to unmount before giving up.
const CLOSE_UNMOUNT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// A put is tried this often when its reservation expires on the way (a
/// leader change reclaimed its arena): once more is enough, since a fresh
/// PutStart lands in the new leader's own arenas.
const PUT_ATTEMPTS_MAX: u32 = 2;

/// Why one attempt of a put failed.
enum PutFailure {
    /// The master no longer knew the reservation: put again.
    Expired(ClientError),
    Other(ClientError),
}

/// Items per batch RPC (the master's limit).
const BATCH_ITEMS_MAX: usize = 1024;

/// The master refused a PutStart because the key exists (or is being
/// written by another client): the put keeps that object.
/// `cfg.tls` is the one switch: it turns on TLS for the transfer lanes
/// and for this client's own transfer server too.
fn with_tls(mut cfg: ClientConfig, mut server: ServerConfig) -> (ClientConfig, ServerConfig) {
    if let Some(tls) = &cfg.tls {
        cfg.tcp.tls = Some(tls.clone());
        server.tls = Some(tls.clone());
    }
    (cfg, server)
}

fn is_already_exists(e: &ClientError) -> bool {
    matches!(e, ClientError::Master(MasterError::Rejected { code: ErrorCode::ObjectAlreadyExists, .. }))
}

/// One batch item's status as a result.
fn item_status(status: Option<&mooncake_proto::Status>, attempts: u32) -> Result<(), ClientError> {
    match status {
        Some(s) if s.error_code() != ErrorCode::Ok => Err(ClientError::Master(MasterError::Rejected {
            code: s.error_code(),
            message: s.message.clone(),
            attempts,
        })),
        _ => Ok(()),
    }
}

/// Bytes in the concatenation of `parts`.
fn parts_len(parts: &[&[u8]]) -> u64 {
    parts.iter().map(|p| p.len() as u64).sum()
}

/// The CRC-32C of the concatenation of `parts`, without joining them.
fn parts_crc32c(parts: &[&[u8]]) -> u32 {
    combined_crc32c(parts.iter().map(|p| (mooncake_segment::checksum::crc32c(p), p.len())))
}

/// The CRC-32C of consecutive pieces from each piece's CRC and length.
fn combined_crc32c(crcs: impl IntoIterator<Item = (u32, usize)>) -> u32 {
    use mooncake_segment::checksum::{crc32c, crc32c_combine};
    let mut crcs = crcs.into_iter();
    let first = crcs.next().map_or(crc32c(&[]), |(crc, _)| crc);
    crcs.fold(first, |acc, (crc, len)| crc32c_combine(acc, crc, len))
}

/// Why a batch item's replica list is not usable (`NotFound` for a
/// missing key), or `None` when it is.
fn list_error(key: &str, list: &GetReplicaListResponse, attempts: u32) -> Option<ClientError> {
    match item_status(list.status.as_ref(), attempts) {
        Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => Some(ClientError::NotFound(key.to_string())),
        Err(e) => Some(e),
        Ok(()) => None,
    }
}

/// Each non-empty part with its offset in the concatenation.
fn part_offsets<'a>(parts: &'a [&'a [u8]]) -> impl Iterator<Item = (u64, &'a [u8])> + 'a {
    parts
        .iter()
        .scan(0u64, |pos, part| {
            let at = *pos;
            *pos += part.len() as u64;
            Some((at, *part))
        })
        .filter(|(_, part)| !part.is_empty())
}

/// Where a replica lives, for the transfer engine, with the capability the
/// master granted for its range (a malformed one is sent as none: the store
/// node refuses it either way, and says so).
pub fn remote(r: &Replica) -> RemoteSegment {
    RemoteSegment {
        id: SegmentId(r.segment_id),
        endpoint: r.endpoint.clone(),
        host_id: r.host_id.clone(),
        shm_path: r.shm_path.clone(),
        size_bytes: r.segment_size,
        capability: Capability::decode(&r.capability).ok(),
    }
}

#[cfg(test)]
mod tests {
    use mooncake_segment::checksum::crc32c;

    #[test]
    fn checksums_of_parts_are_the_whole_objects() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let parts = [&data[..1], &data[1..4096], &data[4096..4096], &data[4096..]];
        assert_eq!(super::parts_crc32c(&parts), crc32c(&data));
        assert_eq!(super::parts_crc32c(&[]), crc32c(&[]));
        let offsets: Vec<(u64, usize)> = super::part_offsets(&parts).map(|(at, p)| (at, p.len())).collect();
        assert_eq!(offsets, vec![(0, 1), (1, 4095), (4096, 5904)], "empty parts are skipped");
    }
}
