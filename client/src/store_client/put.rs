//! Putting one object: PutStart, the writes to every replica, PutEnd with
//! the object's checksum (PutRevoke on a failure), once more when the
//! reservation expired on the way (a leader change). A small object skips
//! the PutStart: it is placed in a writer chunk (`chunks.rs`).

use std::sync::atomic::Ordering;

use futures::future::join_all;
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Replica};
use mooncake_transfer::TransferError;
use mooncake_transfer::frame::Status;

use crate::error::ClientError;
use crate::master_client::MasterError;
use crate::remote::remote;

use super::options::wire_segments;
use super::{Client, PutOptions, PutOutcome, chunks, combined_crc32c};

impl Client {
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
    pub(super) async fn put_object(
        &self,
        key: &str,
        data: &[&[u8]],
        opts: &PutOptions,
        upsert: bool,
    ) -> Result<PutOutcome, ClientError> {
        if let Some(outcome) = self.put_in_chunk(key, data, opts, upsert).await {
            self.count_chunk_put(&outcome);
            return outcome;
        }
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

    /// A small put placed in a writer chunk: the writes, then its PutEnd,
    /// one master round trip. `None` when the put goes the usual way: it
    /// does not suit a chunk (large, or preferred segments named), no
    /// chunk could be had, or this one failed before anything could have
    /// been recorded (a write failed, or the leader no longer knows the
    /// chunk).
    async fn put_in_chunk(
        &self,
        key: &str,
        data: &[&[u8]],
        opts: &PutOptions,
        upsert: bool,
    ) -> Option<Result<PutOutcome, ClientError>> {
        let size = parts_len(data);
        if !opts.preferred_segments.is_empty() || !self.chunks.suits(size) {
            return None;
        }
        let replicas = if opts.replicas == 0 { self.cfg.default_replicas } else { opts.replicas };
        let placed = self.place_in_chunk(replicas, size).await?;
        let checksum = parts_crc32c(data);
        if let Err(e) = self.write_replicas(&placed.replicas, data).await {
            tracing::debug!(key, error = %e, "a write into a writer chunk failed; putting the usual way");
            self.chunks.drop_chunk(&placed.chunk, &self.master, self.client_id);
            self.chunks.done(&placed, &self.master, self.client_id);
            return None;
        }
        let mut end = self.put_end_request(key, size, checksum, &placed.replicas, opts, upsert);
        end.chunk_id = placed.chunk.id;
        let result = self.master.put_end_with(end).await.map_err(ClientError::from);
        self.chunks.done(&placed, &self.master, self.client_id);
        match result {
            Ok(()) => Some(Ok(PutOutcome::Stored)),
            Err(e) if !upsert && is_already_exists(&e) => Some(Ok(PutOutcome::KeptExisting)),
            // Nothing was recorded: the chunk expired, or its leader's
            // arenas were reclaimed. The usual way places it afresh.
            Err(e) if is_put_expired(&e) => {
                tracing::debug!(key, error = %e, "a writer chunk expired; putting the usual way");
                self.chunks.drop_chunk(&placed.chunk, &self.master, self.client_id);
                None
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// Counts the outcome of a put placed in a writer chunk.
    pub(super) fn count_chunk_put(&self, outcome: &Result<PutOutcome, ClientError>) {
        let c = match outcome {
            Ok(PutOutcome::Stored) => &self.stats.puts_ok,
            Ok(PutOutcome::KeptExisting) => &self.stats.puts_kept_existing,
            Err(_) => &self.stats.puts_failed,
        };
        c.fetch_add(1, Ordering::Relaxed);
        self.stats.puts_in_chunks.fetch_add(u64::from(outcome.is_ok()), Ordering::Relaxed);
    }

    /// A place for `size` bytes in this client's chunk of `replicas`,
    /// reserving a new chunk when it has no room or time left.
    pub(super) async fn place_in_chunk(&self, replicas: u32, size: u64) -> Option<chunks::Placed> {
        if let Some(p) = self.chunks.place(replicas, size, &self.master, self.client_id) {
            return Some(p);
        }
        let _one = self.chunks.refilling().await;
        // Another put may have reserved one while this one waited, or been
        // refused one (then this one goes the usual way too).
        if let Some(p) = self.chunks.place(replicas, size, &self.master, self.client_id) {
            return Some(p);
        }
        if !self.chunks.suits(size) {
            return None;
        }
        let len = self.chunks.chunk_bytes();
        match self.master.reserve_chunk(self.client_id, replicas, len, size).await {
            Ok(r) if r.replicas.len() != replicas as usize || r.replicas.iter().any(|c| c.len < size) => {
                tracing::debug!(chunk = r.chunk_id, "a writer chunk of another shape than asked; given back");
                chunks::send_return(&self.master, self.client_id, r.chunk_id);
                self.chunks.refused();
                None
            }
            Ok(r) => {
                self.chunks.adopt(replicas, r.chunk_id, r.replicas, r.valid_ms, &self.master, self.client_id);
                self.chunks.place(replicas, size, &self.master, self.client_id)
            }
            Err(e) => {
                tracing::debug!(error = %e, "no writer chunk; small puts go the usual way for a while");
                self.chunks.refused();
                None
            }
        }
    }

    pub(super) async fn put_once(
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
        let result = match self.write_replicas(&replicas, data).await {
            // The store node refused the put's WRITE grant: its arena was
            // taken back (a new leader fenced the deposed one's arenas) or
            // the grant expired. Nothing was recorded; a new PutStart gets
            // a new grant. The revoke only tidies up a reservation this
            // leader may still hold.
            Err(e) if is_grant_refused(&e) => {
                if let Err(revoke) = self.master.put_revoke(self.client_id, key).await {
                    tracing::debug!(key, error = %revoke, "put revoke after a refused WRITE grant");
                }
                return Err(PutFailure::Expired(e));
            }
            result => result,
        };
        let result = match result {
            Ok(()) => {
                let end = self.put_end_request(key, size, checksum, &replicas, opts, upsert);
                self.master.put_end_with(end).await.map_err(ClientError::from)
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => Ok(PutOutcome::Stored),
            // Another writer's put of the key was recorded first (a put in a
            // writer chunk reserves no key, so its PutEnd can win the race
            // with this PutStart's): the first writer wins, as when the
            // PutStart finds the key. The leader ended this reservation.
            Err(e) if !upsert && is_already_exists(&e) => Ok(PutOutcome::KeptExisting),
            // Only an expiry answered on the PutEnd's first attempt proves
            // nothing was recorded; a retried PutEnd carries its request id,
            // so one that did commit answers OK rather than this.
            Err(e) if is_put_expired(&e) => Err(PutFailure::Expired(e)),
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
    pub(super) fn put_start_request(&self, key: &str, size: u64, opts: &PutOptions, upsert: bool) -> PutStartRequest {
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

    pub(super) fn put_end_request(
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
            chunk_id: 0,
        }
    }

    pub(super) async fn put_start(
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
    pub(super) async fn write_replicas(&self, replicas: &[Replica], data: &[&[u8]]) -> Result<(), ClientError> {
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
}

/// A put is tried this often when its reservation expires on the way (a
/// leader change reclaimed its arena): once more is enough, since a fresh
/// PutStart lands in the new leader's own arenas.
pub(super) const PUT_ATTEMPTS_MAX: u32 = 2;

/// The master answered that the put's reservation expired, on the call's
/// only attempt: nothing was recorded, and putting again is safe.
pub(super) fn is_put_expired(e: &ClientError) -> bool {
    matches!(e, ClientError::Master(MasterError::PutExpired { .. })) && e.is_definite()
}

/// A store node refused a WRITE's grant (UNAUTHORIZED): its arena was
/// taken back from the node, or the capability expired or is not the
/// node's. Nothing can have been recorded for it, and a new PutStart gets
/// a new grant: the put is put again.
pub(super) fn is_grant_refused(e: &ClientError) -> bool {
    matches!(e, ClientError::Transfer(TransferError::Remote { status: Status::Unauthorized, .. }))
}

/// Why one attempt of a put failed.
pub(super) enum PutFailure {
    /// The master no longer knew the reservation: put again.
    Expired(ClientError),
    Other(ClientError),
}

/// The master refused a PutStart because the key exists (or is being
/// written by another client): the put keeps that object.
pub(super) fn is_already_exists(e: &ClientError) -> bool {
    matches!(e, ClientError::Master(MasterError::Rejected { code: ErrorCode::ObjectAlreadyExists, .. }))
}

/// Bytes in the concatenation of `parts`.
pub(super) fn parts_len(parts: &[&[u8]]) -> u64 {
    parts.iter().map(|p| p.len() as u64).sum()
}

/// The CRC-32C of the concatenation of `parts`, without joining them.
pub(super) fn parts_crc32c(parts: &[&[u8]]) -> u32 {
    combined_crc32c(parts.iter().map(|p| (mooncake_segment::checksum::crc32c(p), p.len())))
}

/// Each non-empty part with its offset in the concatenation.
pub(super) fn part_offsets<'a>(parts: &'a [&'a [u8]]) -> impl Iterator<Item = (u64, &'a [u8])> + 'a {
    parts
        .iter()
        .scan(0u64, |pos, part| {
            let at = *pos;
            *pos += part.len() as u64;
            Some((at, *part))
        })
        .filter(|(_, part)| !part.is_empty())
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
