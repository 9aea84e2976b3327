//! A large metadata state loaded before the workload (`large-state`), as
//! `mooncake bench scale` loads it: one fake segment, registered by the
//! harness for a fake store node that it keeps alive with its own pings,
//! and objects put through the batch RPCs (BatchPutStart + BatchPutEnd,
//! [`BATCH_KEYS`] keys each, [`LOADERS`] loaders). Metadata only: no byte
//! is written, nobody reads these objects.
//!
//! The objects must stay out of everyone's way for the whole run:
//!
//! - **Placement.** The fake segment is filled to the brim: sized for the
//!   asked objects ([`PRELOAD_OBJECT_BYTES`] each) and a little more
//!   (arenas a leader seals early leave holes), then loaded until the
//!   master places a key elsewhere (that key is revoked): it could grant
//!   no more arena there. Afterwards less than one arena (1/64 of it) is
//!   free, often nothing, and every arena a master asks for on it is at
//!   least that long: the workloads' puts always go to the real store
//!   nodes. (The committed-bytes checker would find any workload replica
//!   there unreadable.)
//! - **Eviction.** They are hard-pinned; and the run's masters get an
//!   eviction watermark that puts the real segments' threshold where it is
//!   in every other scenario ([`eviction_flags`]).
//! - **Removal.** The lease workload runs no RemoveAll in this scenario;
//!   the committed-bytes checker lists only the harness's own key prefixes.
//! - **Expiry.** The fake owner and the writer are pinged every second
//!   (the masters' client TTL is 5 s) until [`Preload::stop`].
//!
//! At the end [`Preload::verify`] asks (BatchExistKey) for every key.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::MasterClient;
use mooncake_proto::master::{PutEndRequest, PutRevokeRequest, PutStartRequest, Segment};
use serde::Serialize;

use crate::access::Access;
use crate::chaos_cluster::{CLIENT_TTL, EVICTION_HIGH_WATERMARK_RATIO};

/// Objects preloaded by `large-state` unless `--preload-objects` says otherwise.
pub const PRELOAD_OBJECTS_DEFAULT: u64 = 300_000;
/// Keys per batch RPC (the master's limit is 1,024).
pub const BATCH_KEYS: u64 = 1_000;
/// Concurrent loaders (the machine has two cores; the bench uses two).
const LOADERS: u64 = 2;
/// Size of every preloaded object: one allocation unit, the least an
/// object can take, so the fake segment (all of it "used") weighs as
/// little as possible in the masters' usage ratio.
pub const PRELOAD_OBJECT_BYTES: u64 = 64;
/// The fake segment has room for 1/this more objects than asked: the
/// holes sealed arenas leave are not always filled again (a few hundred
/// objects in 300,000), and the load goes on until it is full anyway.
const SLACK_DIVISOR: u64 = 64;
/// The masters' arenas are at most 1/this of their segment
/// (`ARENA_SHARE_DIVISOR` in `master/src/leader/reservations/arenas.rs`).
const ARENA_SHARE_DIVISOR: u64 = 64;
/// Segments are whole pages.
const PAGE_BYTES: u64 = 4096;
/// Keys of the preloaded objects.
pub const KEY_PREFIX: &str = "preload/";
/// Client ids of the fake store node that owns the segment and of the
/// writer (far from the store nodes' `STORE_CLIENT_ID + n`).
const OWNER: u64 = 0x5ca1_e000_0001;
const WRITER: u64 = 0x5ca1_e000_0002;
/// The fake segment's id (real ones are random 63-bit numbers).
const SEGMENT_ID: u64 = 0x5ca1_e000_0001;
/// Ping period of the fake owner and the writer: a fifth of the client TTL.
const HEARTBEAT: Duration = Duration::from_secs(1);
const _: () = assert!(5 * HEARTBEAT.as_millis() <= CLIENT_TTL.as_millis());
/// Longest wait for one ping or one batch RPC.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// What the preload did, for the report.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PreloadReport {
    /// Objects asked for, and stored (at least as many: the fake segment
    /// is filled up).
    pub asked: u64,
    pub objects: u64,
    pub load_s: f64,
    pub objects_per_s: f64,
    /// The fake segment's size, and its bytes in use once loaded.
    pub segment_bytes: u64,
    pub segment_used_bytes: u64,
    /// Preloaded keys the masters no longer had at the end.
    pub missing_at_end: u64,
}

/// The fake segment's size for `asked` objects (the masters take whole pages).
pub fn segment_bytes(asked: u64) -> u64 {
    ((asked + asked / SLACK_DIVISOR) * PRELOAD_OBJECT_BYTES).next_multiple_of(PAGE_BYTES)
}

/// `--eviction_high_watermark_ratio` and `--eviction_ratio` for masters
/// whose state will hold a full fake segment of `fake_bytes` next to real
/// segments of `real_bytes` in all. The watermark is set so that eviction
/// starts when the real segments' usage passes the usual share of them
/// (used − watermark is the same number of bytes as in every other
/// scenario), and the eviction ratio so that a round frees about what it
/// frees there (it is a share of all used bytes, the fake ones included).
pub fn eviction_flags(fake_bytes: u64, real_bytes: u64, eviction_ratio: f64) -> (f64, f64) {
    let (f, r) = (fake_bytes as f64, real_bytes as f64);
    let watermark = (f + EVICTION_HIGH_WATERMARK_RATIO * r) / (f + r);
    (watermark, eviction_ratio * r / (f + r))
}

/// The loaded state and the task that keeps its owner alive.
pub struct Preload {
    client: Arc<MasterClient>,
    /// Keys `0..end` were put, except `revoked` (placed off the fake segment).
    end: u64,
    revoked: std::collections::BTreeSet<u64>,
    stop: Arc<AtomicBool>,
    pings: tokio::task::JoinHandle<()>,
    pub report: PreloadReport,
}

impl Preload {
    /// Registers the fake segment and fills it through the batch RPCs:
    /// at least `asked` objects.
    pub async fn load(access: &Access, masters: &[String], asked: u64) -> anyhow::Result<Preload> {
        let client = Arc::new(MasterClient::new(access.master(masters.to_vec()))?);
        let seg = Segment {
            id: SEGMENT_ID,
            size: segment_bytes(asked),
            // Never reached: nobody reads or writes these objects.
            endpoint: "192.0.2.1:9".into(),
            host_id: "preload-fake-store".into(),
            ..Default::default()
        };
        client.remount_segments(OWNER, vec![seg]).await.context("mounting the fake segment")?;
        client.remount_segments(WRITER, vec![]).await.context("registering the preload writer")?;
        let stop = Arc::new(AtomicBool::new(false));
        let pings = tokio::spawn(ping_loop(client.clone(), stop.clone()));
        let mut p = Preload {
            client,
            end: 0,
            revoked: Default::default(),
            stop,
            pings,
            report: PreloadReport { asked, ..Default::default() },
        };
        let started = Instant::now();
        let loaded = p.load_all(asked).await;
        p.report.objects = p.end - p.revoked.len() as u64;
        p.report.load_s = started.elapsed().as_secs_f64();
        p.report.objects_per_s = p.report.objects as f64 / p.report.load_s.max(1e-3);
        p.report.segment_bytes = segment_bytes(asked);
        let loaded = loaded.and_then(|()| {
            anyhow::ensure!(
                p.report.objects >= asked,
                "the fake segment was full after {} of {asked} objects",
                p.report.objects
            );
            Ok(())
        });
        if let Err(e) = loaded {
            p.stop().await;
            return Err(e);
        }
        let info = p.client.cluster_info().await.context("cluster info after the preload")?;
        p.report.segment_used_bytes = info
            .segments
            .iter()
            .find(|s| s.segment.as_ref().is_some_and(|g| g.id == SEGMENT_ID))
            .map_or(0, |s| s.used_bytes);
        // Full: less room left than one arena (1/64 of the segment), so
        // no master can grant an arena there again.
        let free = p.report.segment_bytes - p.report.segment_used_bytes;
        if free >= p.report.segment_bytes / ARENA_SHARE_DIVISOR {
            p.stop().await;
            anyhow::bail!("the fake segment is not full after the preload: {free} bytes free");
        }
        Ok(p)
    }

    /// Loads batches until the master places a key off the fake segment
    /// (it is full), or it holds 2 × `asked` (something is wrong).
    async fn load_all(&mut self, asked: u64) -> anyhow::Result<()> {
        let next = Arc::new(AtomicU64::new(0));
        let full = Arc::new(AtomicBool::new(false));
        let mut loaders = tokio::task::JoinSet::new();
        for _ in 0..LOADERS {
            let (client, next, full) = (self.client.clone(), next.clone(), full.clone());
            loaders.spawn(async move {
                let mut revoked = Vec::new();
                let mut end = 0;
                while !full.load(Ordering::SeqCst) {
                    let from = next.fetch_add(BATCH_KEYS, Ordering::SeqCst);
                    anyhow::ensure!(from < 2 * asked, "the fake segment never filled ({from} keys)");
                    end = from + BATCH_KEYS;
                    let stray = put_batch(&client, from..end).await?;
                    if !stray.is_empty() {
                        full.store(true, Ordering::SeqCst);
                        revoked.extend(stray);
                    }
                }
                anyhow::Ok((end, revoked))
            });
        }
        while let Some(r) = loaders.join_next().await {
            let (end, revoked) = r.context("preload loader")??;
            self.end = self.end.max(end);
            self.revoked.extend(revoked);
        }
        Ok(())
    }

    /// Asks for every preloaded key; records and returns how many are gone.
    pub async fn verify(&mut self) -> anyhow::Result<u64> {
        let mut missing = 0;
        for from in (0..self.end).step_by(BATCH_KEYS as usize) {
            let keys: Vec<String> =
                (from..(from + BATCH_KEYS).min(self.end)).filter(|i| !self.revoked.contains(i)).map(key).collect();
            let answers = tokio::time::timeout(CALL_TIMEOUT, self.client.batch_exist_key(keys))
                .await
                .context("BatchExistKey timed out")?
                .context("BatchExistKey of the preloaded keys")?;
            missing += answers.reply.iter().filter(|r| !r.exists).count() as u64;
        }
        self.report.missing_at_end = missing;
        Ok(missing)
    }

    /// Stops pinging (the fake owner then expires with the cluster).
    pub async fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = (&mut self.pings).await;
    }
}

fn key(i: u64) -> String {
    format!("{KEY_PREFIX}{i:010}")
}

/// Pings the fake owner and the writer until `stop`.
async fn ping_loop(client: Arc<MasterClient>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        for id in [OWNER, WRITER] {
            match tokio::time::timeout(CALL_TIMEOUT, client.ping(id)).await {
                Ok(Ok(true)) => {}
                Ok(Ok(false)) => tracing::warn!(client = id, "preload: the masters forgot a preload client"),
                Ok(Err(e)) => tracing::debug!(client = id, error = %e, "preload: ping failed"),
                Err(_) => tracing::debug!(client = id, "preload: ping timed out"),
            }
        }
        tokio::time::sleep(HEARTBEAT).await;
    }
}

/// Puts the keys of `range` on the fake segment, metadata only. A key
/// placed anywhere else (the fake segment is full) is revoked: it must
/// never take the real store nodes' room. Returns those keys.
async fn put_batch(client: &MasterClient, range: std::ops::Range<u64>) -> anyhow::Result<Vec<u64>> {
    let starts: Vec<PutStartRequest> = range
        .clone()
        .map(|i| PutStartRequest {
            client_id: WRITER,
            key: key(i),
            size: PRELOAD_OBJECT_BYTES,
            replica_num: 1,
            preferred_segments: vec![SEGMENT_ID],
            pin: mooncake_proto::master::Pin::Hard as i32,
            ..Default::default()
        })
        .collect();
    let started = tokio::time::timeout(CALL_TIMEOUT, client.batch_put_start(starts))
        .await
        .context("BatchPutStart timed out")?
        .context("BatchPutStart")?;
    let mut ends = Vec::new();
    let mut stray = Vec::new();
    let mut refused = Vec::new();
    for (i, r) in range.clone().zip(&started.reply) {
        let ok = r.status.as_ref().is_none_or(|s| s.code == 0);
        if !ok {
            refused.push(format!("{}: {:?}", key(i), r.status));
        } else if r.replicas.iter().any(|p| p.segment_id != SEGMENT_ID) {
            stray.push(i);
        } else {
            ends.push(PutEndRequest {
                client_id: WRITER,
                key: key(i),
                checksum: i as u32,
                size: PRELOAD_OBJECT_BYTES,
                replicas: r.replicas.clone(),
                pin: mooncake_proto::master::Pin::Hard as i32,
                request_id: request_id(),
                ..Default::default()
            });
        }
    }
    if !stray.is_empty() {
        let revokes = stray.iter().map(|i| PutRevokeRequest { client_id: WRITER, key: key(*i) }).collect();
        tokio::time::timeout(CALL_TIMEOUT, client.batch_put_revoke(revokes))
            .await
            .context("BatchPutRevoke timed out")?
            .context("BatchPutRevoke of keys placed off the fake segment")?;
    }
    anyhow::ensure!(refused.is_empty(), "PutStart refused {} keys, first {}", refused.len(), refused[0]);
    let want = ends.len();
    let ended = tokio::time::timeout(CALL_TIMEOUT, client.batch_put_end(ends))
        .await
        .context("BatchPutEnd timed out")?
        .context("BatchPutEnd")?;
    let stored = ended.reply.iter().filter(|r| r.status.as_ref().is_none_or(|s| s.code == 0)).count();
    anyhow::ensure!(stored == want, "BatchPutEnd stored {stored} of {want} keys of {range:?}");
    Ok(stray)
}

/// A request id unique to this harness process (for retried PutEnds): the
/// master applies a PutEnd at most once per id, and answers a repeated id
/// with the first answer, whatever its key. Never 0 (= no id).
fn request_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static BASE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) << 20
    });
    base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_distinct() {
        let ids: std::collections::BTreeSet<u64> = (0..1_000).map(|_| request_id()).collect();
        assert_eq!(ids.len(), 1_000);
        assert!(!ids.contains(&0));
    }

    #[test]
    fn the_fake_segment_has_a_little_room_to_spare() {
        assert_eq!(segment_bytes(300_000), ((300_000 + 4_687) * 64u64).next_multiple_of(4096));
        assert_eq!(segment_bytes(300_000) % 4096, 0);
    }

    #[test]
    fn eviction_flags_keep_the_real_segments_threshold() {
        let (fake, real) = (segment_bytes(300_000), 8u64 << 20);
        let (w, r) = eviction_flags(fake, real, 0.05);
        // Eviction starts at the same used bytes of the real segments.
        let threshold = w * (fake + real) as f64 - fake as f64;
        assert!((threshold - EVICTION_HIGH_WATERMARK_RATIO * real as f64).abs() < 1.0, "{threshold}");
        assert!(w < 1.0 && r > 0.0 && r < 0.05);
    }
}
