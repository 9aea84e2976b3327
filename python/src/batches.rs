//! Calls on many objects, one code per item (Mooncake's `batch_*`): each
//! is one batch call to the masters per phase and the transfers of every
//! item at once. An item refused before the call (an unregistered or
//! overlapping buffer, an empty value) gets `INVALID_PARAMS` and the others
//! go ahead without it.

use mooncake_client::ClientError;

use mooncake_transfer::CudaDriver;

use crate::buffers::{Readable, Region, Writable, device_copy_failed, read_into, scattered};
use crate::codes::{self, Code};
use crate::pool::Staging;
use crate::session::{ReplicaSpec, Session};

/// Keys per `GetReplicaList` batch RPC (the masters' batch limit).
pub const BATCH_KEYS_MAX: usize = 1_024;

/// One object of a batch put: its key and its parts, back to back.
pub type PutItem<'a> = (&'a str, Vec<&'a [u8]>);

/// Per key, the ranges to read: `(offset in the object, destination)`, a
/// refused destination as `None`.
pub type RangeReads = Vec<Vec<(u64, Option<Region>)>>;

/// Where one replica of an object lives (for `batch_get_replica_desc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaInfo {
    pub segment_id: u64,
    /// The store node's transfer server, `host:port`.
    pub endpoint: String,
    /// Offset of the object's bytes in the segment.
    pub offset: u64,
    pub size: u64,
    pub complete: bool,
    /// On a store node's disk segment (docs/TIERS.md), not in memory.
    pub on_disk: bool,
}

impl Session {
    /// Puts each `(key, parts)`; one code per item (0 also when the key
    /// existed and was kept; with `upsert`, an existing object is replaced).
    pub fn put_batch(&self, items: Vec<Option<PutItem<'_>>>, spec: &ReplicaSpec, upsert: bool) -> Vec<Code> {
        let items = items.into_iter().map(|i| i.filter(|(_, parts)| parts.iter().any(|p| !p.is_empty()))).collect();
        on_valid(items, |valid| {
            self.block_on(async {
                let opts = match self.put_options(spec).await {
                    Ok(o) => o,
                    Err(code) => return vec![code; valid.len()],
                };
                let refs: Vec<(&str, &[&[u8]])> = valid.iter().map(|(k, parts)| (*k, parts.as_slice())).collect();
                match upsert {
                    true => {
                        let results = self.client().upsert_batch_parts(&refs, &opts).await;
                        results.iter().map(|r| codes::of_result(r, |_| codes::OK)).collect()
                    }
                    false => {
                        let results = self.client().put_batch_parts(&refs, &opts).await;
                        results.iter().map(|r| codes::of_result(r, |_| codes::OK)).collect()
                    }
                }
            })
        })
    }

    /// Puts `keys[i]` from the concatenation of `regions[i]` (see [`put_batch`](Self::put_batch)).
    /// Parts in device memory are copied to the host first; an item whose
    /// copy fails gets `INVALID_PARAMS`.
    pub fn put_batch_from(
        &self,
        keys: &[String],
        regions: Vec<Option<Vec<Region>>>,
        spec: &ReplicaSpec,
        upsert: bool,
    ) -> Vec<Code> {
        // SAFETY: regions were checked against registered memory; the caller
        // keeps them valid and unwritten for the call.
        let sources: Vec<Option<Vec<Readable>>> = regions
            .into_iter()
            .map(|r| {
                // SAFETY: as above.
                let parts = r?.into_iter().map(|p| unsafe { p.readable(&CudaDriver) }).collect::<Result<Vec<_>, _>>();
                parts.map_err(|e| device_copy_failed(&e)).ok()
            })
            .collect();
        let items = keys
            .iter()
            .zip(&sources)
            .map(|(k, r)| r.as_ref().map(|parts| (k.as_str(), parts.iter().map(|p| &**p).collect())))
            .collect();
        self.put_batch(items, spec, upsert)
    }

    /// Reads `keys[i]` into `regions[i]`; each object's size, or a code.
    /// Regions in device memory receive their bytes once the read of their
    /// key succeeded.
    pub fn get_batch_into(&self, keys: &[String], regions: Vec<Option<Region>>) -> Vec<Code> {
        let items = keys.iter().zip(regions).map(|(k, r)| r.map(|r| (k.as_str(), r))).collect();
        on_valid(items, |valid| {
            let keys: Vec<&str> = valid.iter().map(|(k, _)| *k).collect();
            // SAFETY: regions were checked against registered memory and
            // carved without overlap; the caller keeps them valid for the call.
            let mut targets: Vec<Writable> = valid.iter().map(|(_, r)| unsafe { r.writable() }).collect();
            let bufs: Vec<&mut [u8]> = targets.iter_mut().map(Writable::buf).collect();
            let results = self.block_on(self.client().get_batch_into(&keys, bufs));
            results.iter().zip(targets).map(|(r, target)| read_into(r, [target], |n| [n])).collect()
        })
    }

    /// Reads `keys[i]` scattered over `parts[i]`; each object's size, or a
    /// code. Parts in device memory receive their bytes once the read of
    /// their key succeeded.
    pub fn get_batch_into_parts(&self, keys: &[String], parts: Vec<Option<Vec<Region>>>) -> Vec<Code> {
        let items = keys.iter().zip(parts).map(|(k, p)| p.map(|p| (k.as_str(), p))).collect();
        on_valid(items, |valid| {
            let keys: Vec<&str> = valid.iter().map(|(k, _)| *k).collect();
            // SAFETY: regions were checked against registered memory and
            // carved without overlap; the caller keeps them valid for the call.
            let mut targets: Vec<Vec<Writable>> =
                valid.iter().map(|(_, p)| p.iter().map(|r| unsafe { r.writable() }).collect()).collect();
            let mut bufs: Vec<Vec<&mut [u8]>> =
                targets.iter_mut().map(|t| t.iter_mut().map(Writable::buf).collect()).collect();
            let results = self.block_on(self.client().get_batch_into_parts(&keys, &mut bufs));
            drop(bufs);
            results
                .iter()
                .zip(targets)
                .zip(&valid)
                .map(|((r, targets), (_, parts))| {
                    read_into(r, targets, |n| scattered(n, parts.iter().map(Region::len)))
                })
                .collect()
        })
    }

    /// Reads each key into memory of the store's own (the pool, else the heap).
    pub fn get_batch_staged(&self, keys: &[String]) -> Vec<Result<Staging, Code>> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let pool = self.pool();
        let got = self.block_on(self.client().get_batch_with(&keys, |_, size| Ok(Staging::take(pool, size as usize))));
        got.into_iter()
            .map(|r| match r {
                Ok((mut staging, size)) => {
                    staging.truncate(size);
                    Ok(staging)
                }
                Err(e) => Err(codes::of_client(&e)),
            })
            .collect()
    }

    /// Byte ranges of objects: for `keys[i]`, each `(offset in the object,
    /// destination)` of `ranges[i]`. Per key and range: the bytes read, or
    /// a code (`INVALID_PARAMS` for a refused destination).
    pub fn get_ranges(&self, keys: &[String], ranges: RangeReads) -> Vec<Vec<Code>> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        // SAFETY: accepted regions were checked and carved (see `get_batch_into_parts`).
        let mut targets: Vec<Vec<Option<Writable>>> =
            ranges.iter().map(|rs| rs.iter().map(|(_, r)| r.map(|r| unsafe { r.writable() })).collect()).collect();
        // Refused destinations are read into nothing: an empty range at 0.
        let mut reads: Vec<Vec<(u64, &mut [u8])>> = targets
            .iter_mut()
            .zip(&ranges)
            .map(|(ts, rs)| {
                ts.iter_mut()
                    .zip(rs)
                    .map(|(t, (src, _))| t.as_mut().map_or((0, &mut [][..]), |t| (*src, t.buf())))
                    .collect()
            })
            .collect();
        let results = self.block_on(self.client().get_ranges_batch(&keys, &mut reads));
        drop(reads);
        results
            .iter()
            .zip(targets)
            .map(|(per_key, ts)| {
                per_key
                    .iter()
                    .zip(ts)
                    .map(|(r, target)| match target {
                        None => codes::INVALID_PARAMS,
                        Some(t) => read_into(r, [t], |n| [n]),
                    })
                    .collect()
            })
            .collect()
    }

    /// 1 / 0 / -1 per key, as `exists`.
    pub fn batch_exists(&self, keys: &[String]) -> Vec<Code> {
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let results = self.block_on(self.client().batch_exists(&keys));
        results.iter().map(|r| r.as_ref().map_or(-1, |found| Code::from(*found))).collect()
    }

    /// The replicas of each key (`None` when it does not exist or the
    /// masters could not say).
    pub fn replica_lists(&self, keys: &[String]) -> Vec<Option<Vec<ReplicaInfo>>> {
        let client = self.client();
        self.block_on(async {
            let mut out = Vec::with_capacity(keys.len());
            for chunk in keys.chunks(BATCH_KEYS_MAX) {
                match client.master().batch_get_replica_list(client.client_id(), chunk.to_vec()).await {
                    Ok(lists) => out.extend(lists.reply.iter().map(|l| {
                        let ok = l.status.as_ref().is_none_or(|s| s.error_code() == mooncake_proto::ErrorCode::Ok);
                        ok.then(|| l.replicas.iter().map(|r| replica_info(r, l.size)).collect())
                    })),
                    Err(e) => {
                        tracing::warn!(error = %ClientError::from(e), "replica descriptors");
                        out.extend(chunk.iter().map(|_| None));
                    }
                }
            }
            out
        })
    }
}

fn replica_info(r: &mooncake_proto::master::Replica, size: u64) -> ReplicaInfo {
    ReplicaInfo {
        segment_id: r.segment_id,
        endpoint: r.endpoint.clone(),
        offset: r.offset,
        size,
        complete: r.status == mooncake_proto::master::ReplicaStatus::Complete as i32,
        on_disk: r.tier() == mooncake_proto::master::Tier::Ssd,
    }
}

/// Runs `f` on the accepted items (`Some`), in order, and gives each
/// refused item `INVALID_PARAMS`; `f` returns one code per item it got.
fn on_valid<T>(items: Vec<Option<T>>, f: impl FnOnce(Vec<T>) -> Vec<Code>) -> Vec<Code> {
    let accepted: Vec<bool> = items.iter().map(Option::is_some).collect();
    let valid: Vec<T> = items.into_iter().flatten().collect();
    let count = valid.len();
    let mut results = if count == 0 { Vec::new() } else { f(valid) }.into_iter();
    let out: Vec<Code> = accepted
        .iter()
        .map(|ok| if *ok { results.next().unwrap_or(codes::INTERNAL_ERROR) } else { codes::INVALID_PARAMS })
        .collect();
    debug_assert_eq!(results.next(), None, "one result per accepted item ({count})");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_items_get_invalid_params_and_the_rest_their_results() {
        let got = on_valid(vec![Some(10), None, Some(30)], |v| v.into_iter().map(|x| x + 1).collect());
        assert_eq!(got, [11, codes::INVALID_PARAMS, 31]);
        let none = on_valid::<i64>(vec![None, None], |_| unreachable!("nothing to run"));
        assert_eq!(none, [codes::INVALID_PARAMS; 2]);
    }
}
