//! Reads into memory the caller owns, for bindings that hand the library
//! raw buffers (the Python `get_into` family): into a buffer chosen once the
//! size is known ([`Client::get_with`]), into one buffer per key of a batch
//! ([`Client::get_batch_into`]), scattered over several buffers
//! ([`Client::get_into_parts`]), and byte ranges of objects
//! ([`Client::get_ranges_batch`]); plus [`Client::batch_exists`]. Bytes go
//! straight from the socket (or the shm mapping) into the caller's memory.
//!
//! Whole-object reads verify the checksum and fall back to the next replica,
//! as [`Client::get`] does. A range read cannot be checked against the
//! object's checksum (it sees part of the bytes); it relies on the KV lease
//! its replica list carries (the ranges are not reused while it reads).

use std::sync::atomic::Ordering;

use futures::future::join_all;
use mooncake_proto::master::GetReplicaListResponse;

use mooncake_segment::SegmentId;

use super::{BATCH_ITEMS_MAX, Client, combined_crc32c, item_status, list_error};
use crate::error::ClientError;
use crate::master_client::{Attempted, MasterError};
use crate::remote::remote;

impl Client {
    /// Reads `key` into the buffer `alloc(size)` returns once the size is
    /// known (at least `size` bytes); returns that buffer and the size.
    pub async fn get_with<B, F>(&self, key: &str, alloc: F) -> Result<(B, usize), ClientError>
    where
        B: AsMut<[u8]>,
        F: FnOnce(u64) -> Result<B, ClientError>,
    {
        let list = self.replica_list(key).await?;
        let mut buf = alloc(list.size)?;
        let size = self.read_object(key, &list, buf.as_mut()).await?;
        Ok((buf, size))
    }

    /// Reads each key into its own buffer (`bufs[i]` for `keys[i]`): one
    /// batch replica-list call, then the batched reads of
    /// [`get_batch`](Self::get_batch). A buffer smaller than its object gets
    /// `BufferTooSmall` and is left as it was. Returns each object's size.
    pub async fn get_batch_into(&self, keys: &[&str], bufs: Vec<&mut [u8]>) -> Vec<Result<usize, ClientError>> {
        if keys.len() != bufs.len() {
            let msg = format!("{} keys but {} buffers", keys.len(), bufs.len());
            return keys.iter().map(|_| Err(ClientError::Config(msg.clone()))).collect();
        }
        let mut slots: Vec<Option<&mut [u8]>> = bufs.into_iter().map(Some).collect();
        let got = self
            .get_batch_with(keys, |index, _size| {
                slots[index].take().ok_or_else(|| ClientError::Config(format!("buffer {index} used twice")))
            })
            .await;
        got.into_iter().map(|r| r.map(|(_, size)| size)).collect()
    }

    /// Reads `key` scattered over `parts`: its first bytes fill `parts[0]`,
    /// the next `parts[1]`, and so on (the parts together must hold the
    /// object, else `BufferTooSmall` and nothing is written). The checksum
    /// is verified over the whole object. Returns the object's size.
    pub async fn get_into_parts(&self, key: &str, parts: &mut [&mut [u8]]) -> Result<usize, ClientError> {
        let list = self.replica_list(key).await?;
        self.read_object_parts(key, &list, parts).await
    }

    /// [`get_into_parts`](Self::get_into_parts) of many keys after one batch
    /// replica-list call; `parts[i]` receives `keys[i]`. One result per key.
    pub async fn get_batch_into_parts(
        &self,
        keys: &[&str],
        parts: &mut [Vec<&mut [u8]>],
    ) -> Vec<Result<usize, ClientError>> {
        if keys.len() != parts.len() {
            let msg = format!("{} keys but {} part lists", keys.len(), parts.len());
            return keys.iter().map(|_| Err(ClientError::Config(msg.clone()))).collect();
        }
        let mut out = Vec::with_capacity(keys.len());
        for (chunk, chunk_parts) in keys.chunks(BATCH_ITEMS_MAX).zip(parts.chunks_mut(BATCH_ITEMS_MAX)) {
            let lists = match self.batch_lists(chunk).await {
                Ok(lists) => lists,
                Err(e) => {
                    out.extend(chunk.iter().map(|_| Err(ClientError::Master(e.clone()))));
                    continue;
                }
            };
            let reads = chunk.iter().zip(&lists.reply).zip(chunk_parts.iter_mut()).map(|((key, list), parts)| {
                let status = self.list_status(key, list, lists.attempts);
                async move {
                    status?;
                    self.read_object_parts(key, list, parts).await
                }
            });
            out.extend(join_all(reads).await);
        }
        out
    }

    /// Reads byte ranges of objects: `ranges[i]` lists `(offset in the
    /// object, buffer)` pairs of `keys[i]`; each buffer is filled from that
    /// offset. One batch replica-list call for all keys. Returns, per key and
    /// range, the bytes read or why not (a range past the object's end is
    /// refused on its own; a missing key fails all its ranges).
    pub async fn get_ranges_batch(
        &self,
        keys: &[&str],
        ranges: &mut [Vec<(u64, &mut [u8])>],
    ) -> Vec<Vec<Result<usize, ClientError>>> {
        if keys.len() != ranges.len() {
            let msg = format!("{} keys but {} range lists", keys.len(), ranges.len());
            return ranges.iter().map(|r| r.iter().map(|_| Err(ClientError::Config(msg.clone()))).collect()).collect();
        }
        let mut out = Vec::with_capacity(keys.len());
        for (chunk, chunk_ranges) in keys.chunks(BATCH_ITEMS_MAX).zip(ranges.chunks_mut(BATCH_ITEMS_MAX)) {
            let lists = match self.batch_lists(chunk).await {
                Ok(lists) => lists,
                Err(e) => {
                    out.extend(
                        chunk_ranges.iter().map(|r| r.iter().map(|_| Err(ClientError::Master(e.clone()))).collect()),
                    );
                    continue;
                }
            };
            let reads = chunk.iter().zip(&lists.reply).zip(chunk_ranges.iter_mut()).map(|((key, list), ranges)| {
                let attempts = lists.attempts;
                async move {
                    if self.list_status(key, list, attempts).is_err() {
                        let error = || {
                            list_error(key, list, attempts).unwrap_or_else(|| ClientError::NotFound(key.to_string()))
                        };
                        return ranges.iter().map(|_| Err(error())).collect();
                    }
                    let reads = ranges.iter_mut().map(|(offset, buf)| self.read_range(key, list, *offset, buf));
                    join_all(reads).await
                }
            });
            out.extend(join_all(reads).await);
        }
        out
    }

    /// Existence of many keys in one master call per [`BATCH_ITEMS_MAX`]
    /// keys (linearizable, as [`exists`](Self::exists)); each key found is
    /// KV-leased, as Mooncake's `batch_is_exist`.
    pub async fn batch_exists(&self, keys: &[&str]) -> Vec<Result<bool, ClientError>> {
        self.existence(keys, false).await
    }

    /// [`batch_exists`](Self::batch_exists) without KV leases (upstream
    /// 0.3.14's `batch_probe_key`): a lookup that pins nothing, so probing
    /// many keys never keeps eviction from making room for the next put.
    pub async fn batch_probe(&self, keys: &[&str]) -> Vec<Result<bool, ClientError>> {
        self.existence(keys, true).await
    }

    async fn existence(&self, keys: &[&str], lease_free: bool) -> Vec<Result<bool, ClientError>> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_ITEMS_MAX) {
            let names = chunk.iter().map(|k| k.to_string()).collect();
            let answers = match lease_free {
                true => self.master.batch_probe_key(names).await,
                false => self.master.batch_exist_key(names).await,
            };
            match answers {
                Ok(r) => {
                    out.extend(r.reply.iter().map(|e| item_status(e.status.as_ref(), r.attempts).map(|()| e.exists)))
                }
                Err(e) => out.extend(chunk.iter().map(|_| Err(ClientError::Master(e.clone())))),
            }
        }
        out
    }

    async fn batch_lists(&self, keys: &[&str]) -> Result<Attempted<Vec<GetReplicaListResponse>>, MasterError> {
        let names = keys.iter().map(|k| k.to_string()).collect();
        self.master.batch_get_replica_list(self.client_id, names).await
    }

    /// The whole object from the nearest replica whose bytes match the
    /// checksum, scattered over `parts` (each part read at once).
    pub(super) async fn read_object_parts(
        &self,
        key: &str,
        list: &GetReplicaListResponse,
        parts: &mut [&mut [u8]],
    ) -> Result<usize, ClientError> {
        let room: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if room < list.size {
            return Err(ClientError::BufferTooSmall { key: key.into(), size: list.size, buf: room as usize });
        }
        // The object's bytes: the parts, the last one cut at the object's end.
        let mut pieces: Vec<(u64, &mut [u8])> = Vec::with_capacity(parts.len());
        let mut pos = 0u64;
        for part in parts.iter_mut() {
            let len = (list.size - pos).min(part.len() as u64);
            if len > 0 {
                pieces.push((pos, &mut part[..len as usize]));
            }
            pos += len;
        }
        let mut last = String::from("no replica");
        let order = self.nearest_first(&list.replicas);
        for r in &order {
            let target = remote(r);
            let reads = pieces.iter_mut().map(|(pos, piece)| {
                let len = piece.len();
                let read = self.engine.read_checksummed(&target, r.offset + *pos, piece);
                async move { read.await.map(|crc| (crc, len)) }
            });
            let crcs: Result<Vec<(u32, usize)>, _> = join_all(reads).await.into_iter().collect();
            match crcs {
                Ok(crcs) if combined_crc32c(crcs.iter().copied()) == list.checksum => {
                    self.stats.objects_read.fetch_add(1, Ordering::Relaxed);
                    self.stats.bytes_read.fetch_add(list.size, Ordering::Relaxed);
                    return Ok(list.size as usize);
                }
                Ok(_) => {
                    last = format!("checksum mismatch on segment {} at {}", SegmentId(r.segment_id), r.endpoint);
                    tracing::warn!(key, %last, "corrupt replica; trying the next one");
                }
                Err(e) => {
                    last = format!("{}: {e}", r.endpoint);
                    tracing::warn!(key, error = %e, "replica read failed; trying the next one");
                }
            }
        }
        self.stats.reads_failed.fetch_add(1, Ordering::Relaxed);
        Err(ClientError::AllReplicasFailed { key: key.into(), tried: order.len(), last })
    }

    /// `[offset, offset + buf.len())` of the object into `buf`, from the
    /// nearest replica that answers.
    pub(super) async fn read_range(
        &self,
        key: &str,
        list: &GetReplicaListResponse,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, ClientError> {
        let len = buf.len() as u64;
        if offset.checked_add(len).is_none_or(|end| end > list.size) {
            return Err(ClientError::RangeOutsideObject { key: key.into(), offset, len, size: list.size });
        }
        let mut last = String::from("no replica");
        let order = self.nearest_first(&list.replicas);
        for r in &order {
            match self.engine.read(&remote(r), r.offset + offset, buf).await {
                Ok(()) => {
                    self.stats.ranges_read.fetch_add(1, Ordering::Relaxed);
                    self.stats.bytes_read.fetch_add(len, Ordering::Relaxed);
                    return Ok(buf.len());
                }
                Err(e) => {
                    last = format!("{}: {e}", r.endpoint);
                    tracing::warn!(key, error = %e, "replica range read failed; trying the next one");
                }
            }
        }
        self.stats.reads_failed.fetch_add(1, Ordering::Relaxed);
        Err(ClientError::AllReplicasFailed { key: key.into(), tried: order.len(), last })
    }
}
