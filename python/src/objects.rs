//! Calls on one object, in Mooncake's return convention (see [`codes`]):
//! puts from memory the caller owns (gathered from several parts), reads
//! into registered memory or into a [`Staging`] buffer, existence, size,
//! removal. Each runs on the session's runtime on the calling thread.
//!
//! [`codes`]: crate::codes

use mooncake_client::PutOutcome;

use mooncake_transfer::CudaDriver;

use crate::buffers::{Region, Writable, device_copy_failed, read_into, scattered};
use crate::codes::{self, Code};
use crate::pool::Staging;
use crate::session::{ReplicaSpec, Session};

/// Most objects `remove_by_regex` considers in one call (the masters'
/// listing limit): the keys are listed, matched here, then removed.
pub const LIST_KEYS_MAX: u32 = 100_000;

/// Removals in flight at once in `remove_keys` (the masters batch them
/// into few log entries; this bounds the requests queued on one channel).
pub const REMOVALS_IN_FLIGHT_MAX: usize = 256;

impl Session {
    /// Stores the concatenation of `parts` under `key` (first writer wins:
    /// an existing key answers 0 and keeps its object); `upsert` replaces it.
    pub fn put(&self, key: &str, parts: &[&[u8]], spec: &ReplicaSpec, upsert: bool) -> Code {
        if parts.iter().all(|p| p.is_empty()) {
            return codes::INVALID_PARAMS;
        }
        self.block_on(async {
            let opts = match self.put_options(spec).await {
                Ok(o) => o,
                Err(code) => return code,
            };
            let stored = match upsert {
                true => self.client().upsert_parts(key, parts, &opts).await.map(|()| PutOutcome::Stored),
                false => self.client().put_parts(key, parts, &opts).await,
            };
            codes::of_result(&stored, |_| codes::OK)
        })
    }

    /// Stores `region` under `key` (as [`put`](Self::put)).
    pub fn put_from(&self, key: &str, region: Region, spec: &ReplicaSpec, upsert: bool) -> Code {
        // SAFETY: `region` was checked against registered memory; the caller
        // keeps it valid and unwritten for the call (register_buffer's contract).
        match unsafe { region.readable(&CudaDriver) } {
            Ok(data) => self.put(key, &[&data], spec, upsert),
            Err(e) => device_copy_failed(&e),
        }
    }

    /// Reads `key` into `region`; its size, or a code.
    pub fn get_into(&self, key: &str, region: Region) -> Code {
        self.get_into_parts(key, &[region])
    }

    /// Reads `key` scattered over `parts`, in order; its size, or a code.
    /// Parts in device memory receive their bytes once the read succeeded.
    pub fn get_into_parts(&self, key: &str, parts: &[Region]) -> Code {
        // SAFETY: `parts` were checked against registered memory and carved
        // without overlap; the caller keeps them valid and unshared for the
        // call (register_buffer's contract).
        let mut targets: Vec<Writable> = parts.iter().map(|r| unsafe { r.writable() }).collect();
        let mut bufs: Vec<&mut [u8]> = targets.iter_mut().map(Writable::buf).collect();
        let read = self.block_on(self.client().get_into_parts(key, &mut bufs));
        drop(bufs);
        read_into(&read, targets, |n| scattered(n, parts.iter().map(Region::len)))
    }

    /// Reads `key` into memory of the store's own (the pool, else the heap).
    pub fn get_staged(&self, key: &str) -> Result<Staging, Code> {
        let got = self.block_on(self.client().get_with(key, |size| Ok(Staging::take(self.pool(), size as usize))));
        match got {
            Ok((mut staging, size)) => {
                staging.truncate(size);
                Ok(staging)
            }
            Err(e) => Err(codes::of_client(&e)),
        }
    }

    /// 1 if `key` exists, 0 if not, -1 if the masters could not say.
    pub fn exists(&self, key: &str) -> Code {
        match self.block_on(self.client().exists(key)) {
            Ok(found) => Code::from(found),
            Err(_) => -1,
        }
    }

    /// The object's size, or a code.
    pub fn get_size(&self, key: &str) -> Code {
        codes::of_result(&self.block_on(self.client().get_size(key)), |n| *n as Code)
    }

    pub fn remove(&self, key: &str, force: bool) -> Code {
        codes::of_result(&self.block_on(self.client().remove(key, force)), |()| codes::OK)
    }

    /// Objects removed, or a code. A forced one refused for want of the
    /// admin token warns (frameworks reset the cache this way and do not
    /// look at the answer: vLLM's store connector).
    pub fn remove_all(&self, force: bool) -> Code {
        let code = codes::of_result(&self.block_on(self.client().remove_all(force)), |n| *n as Code);
        if force && code == codes::ILLEGAL_CLIENT {
            tracing::warn!(
                "remove_all(force=True) refused: a forced removal is an admin operation; give this process the \
                 cluster's admin token (MOONCAKE_ADMIN_TOKEN_FILE, or \"admin_token_file\" in the \
                 MOONCAKE_CONFIG_PATH file; `mooncake up` writes both), see docs/PYTHON.md"
            );
        }
        code
    }

    /// Every key (up to [`LIST_KEYS_MAX`]), for `remove_by_regex`.
    pub fn list_keys(&self) -> Result<Vec<String>, Code> {
        match self.block_on(self.client().master().list_objects("", LIST_KEYS_MAX)) {
            Ok(objects) => Ok(objects.into_iter().map(|o| o.key).collect()),
            Err(e) => Err(codes::of_master(&e)),
        }
    }

    /// Removes each key; one code per key.
    pub fn remove_each(&self, keys: &[String], force: bool) -> Vec<Code> {
        self.block_on(async {
            let mut out = Vec::with_capacity(keys.len());
            for chunk in keys.chunks(REMOVALS_IN_FLIGHT_MAX) {
                let results = futures::future::join_all(chunk.iter().map(|k| self.client().remove(k, force))).await;
                out.extend(results.iter().map(|r| codes::of_result(r, |()| codes::OK)));
            }
            out
        })
    }

    /// Removes `keys`, skipping those a reader holds a KV lease on (unless
    /// `force`) and those gone already; the count removed, or the first
    /// other error's code.
    pub fn remove_keys(&self, keys: &[String], force: bool) -> Code {
        let mut removed = 0;
        for code in self.remove_each(keys, force) {
            match code {
                codes::OK => removed += 1,
                codes::OBJECT_HAS_LEASE | codes::OBJECT_NOT_FOUND => {}
                other => return other,
            }
        }
        removed
    }
}
