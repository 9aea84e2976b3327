//! Batches of puts and gets: one master RPC per slice of up to
//! `BATCH_ITEMS_MAX` items, the transfers of all of them at once.

use std::sync::atomic::Ordering;

use futures::future::join_all;
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{GetReplicaListResponse, PutEndRequest, PutRevokeRequest, Replica};
use mooncake_transfer::{BatchRead, RemoteSegment};

use crate::error::ClientError;
use crate::master_client::Attempted;
use crate::remote::remote;

use super::put::{is_already_exists, is_grant_refused, is_put_expired, parts_crc32c, parts_len};
use super::{BATCH_ITEMS_MAX, Client, PutOptions, PutOutcome, item_status};

impl Client {
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

    pub(super) async fn batch_parts(
        &self,
        items: &[(&str, &[&[u8]])],
        opts: &PutOptions,
        upsert: bool,
    ) -> Vec<Result<PutOutcome, ClientError>> {
        let mut out = Vec::with_capacity(items.len());
        for slice in items.chunks(BATCH_ITEMS_MAX) {
            out.extend(self.put_slice(slice, opts, upsert).await);
        }
        out
    }

    /// One slice of a batch: placed in this client's writer chunk when
    /// every item is small, else the usual way.
    pub(super) async fn put_slice(
        &self,
        items: &[(&str, &[&[u8]])],
        opts: &PutOptions,
        upsert: bool,
    ) -> Vec<Result<PutOutcome, ClientError>> {
        if let Some(results) = self.put_slice_in_chunk(items, opts, upsert).await {
            return results;
        }
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
        let ended = self.end_slice(items, written, &placements, opts, upsert).await;
        // A PutEnd answered "already exists" lost to another writer's put of
        // the key (as `put_once`): kept too.
        let mut results: Vec<Result<PutOutcome, ClientError>> = ended
            .into_iter()
            .zip(kept)
            .map(|(r, kept)| match (r, kept) {
                (Err(_), true) => Ok(PutOutcome::KeptExisting),
                (Err(e), false) if !upsert && is_already_exists(&e) => Ok(PutOutcome::KeptExisting),
                (r, _) => r.map(|()| PutOutcome::Stored),
            })
            .collect();
        // A put whose reservation expired on the way (a leader change), or
        // whose WRITE grant a store node refused (its arena taken back), is
        // put again on its own, like `put` does (which counts it).
        let mut counted = vec![false; results.len()];
        for (i, r) in results.iter_mut().enumerate() {
            if r.as_ref().is_err_and(|e| is_put_expired(e) || is_grant_refused(e)) {
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

    /// A slice of small puts placed in this client's writer chunk: every
    /// write at once, then one batch PutEnd: one master round trip. `None`
    /// when the slice goes the usual way (an item does not suit a chunk, or
    /// no chunk could be had; nothing was written). An item whose write
    /// failed or whose chunk expired is put again on its own.
    async fn put_slice_in_chunk(
        &self,
        items: &[(&str, &[&[u8]])],
        opts: &PutOptions,
        upsert: bool,
    ) -> Option<Vec<Result<PutOutcome, ClientError>>> {
        let sizes: Vec<u64> = items.iter().map(|(_, data)| parts_len(data)).collect();
        if !opts.preferred_segments.is_empty() || !sizes.iter().all(|s| self.chunks.suits(*s)) {
            return None;
        }
        let replicas = if opts.replicas == 0 { self.cfg.default_replicas } else { opts.replicas };
        let mut placed = Vec::with_capacity(items.len());
        for size in &sizes {
            match self.place_in_chunk(replicas, *size).await {
                Some(p) => placed.push(p),
                None => {
                    // The slices taken stay unused: a slice is never handed out twice.
                    for p in &placed {
                        self.chunks.done(p, &self.master, self.client_id);
                    }
                    return None;
                }
            }
        }
        let writes = items.iter().zip(&placed).map(|((_, data), p)| self.write_replicas(&p.replicas, data));
        let written: Vec<Result<(), ClientError>> = join_all(writes).await;
        let ends: Vec<PutEndRequest> = items
            .iter()
            .zip(&placed)
            .zip(&written)
            .filter(|(_, w)| w.is_ok())
            .map(|(((key, data), p), _)| {
                let size = parts_len(data);
                let end = self.put_end_request(key, size, parts_crc32c(data), &p.replicas, opts, upsert);
                PutEndRequest { chunk_id: p.chunk.id, ..end }
            })
            .collect();
        let ended: Vec<Result<(), ClientError>> = match ends.is_empty() {
            true => Vec::new(),
            false => match self.master.batch_put_end(ends).await {
                Ok(r) => r.reply.iter().map(|e| item_status(e.status.as_ref(), r.attempts)).collect(),
                Err(e) => written.iter().filter(|w| w.is_ok()).map(|_| Err(ClientError::Master(e.clone()))).collect(),
            },
        };
        for p in &placed {
            self.chunks.done(p, &self.master, self.client_id);
        }
        let mut ended = ended.into_iter();
        let mut results = Vec::with_capacity(items.len());
        for (((key, data), p), w) in items.iter().zip(&placed).zip(written) {
            // Put again on its own when nothing was recorded: its write
            // failed, or its chunk expired.
            let again = match w {
                Err(e) => Some(e),
                Ok(()) => match ended.next() {
                    Some(Err(e)) if is_put_expired(&e) => Some(e),
                    answer => {
                        let answer = answer.unwrap_or_else(|| Err(ClientError::Config("missing PutEnd answer".into())));
                        let outcome = match answer {
                            Ok(()) => Ok(PutOutcome::Stored),
                            Err(e) if !upsert && is_already_exists(&e) => Ok(PutOutcome::KeptExisting),
                            Err(e) => Err(e),
                        };
                        self.count_chunk_put(&outcome);
                        results.push(outcome);
                        None
                    }
                },
            };
            if let Some(e) = again {
                tracing::debug!(key, error = %e, "a batch item in a writer chunk is put again on its own");
                self.chunks.drop_chunk(&p.chunk, &self.master, self.client_id);
                results.push(self.put_object(key, data, opts, upsert).await);
            }
        }
        Some(results)
    }

    /// PutEnd of the written items, PutRevoke of the others.
    pub(super) async fn end_slice(
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
    pub(super) async fn read_batch<B, F>(
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
}
