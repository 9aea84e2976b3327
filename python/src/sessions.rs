//! Put and get sessions by key (Mooncake's `batch_put_session_*`,
//! `batch_put_from_multi_buffer_ranges`, `batch_get_session_*` and
//! `batch_get_into_multi_buffer_ranges`), over the client library's
//! [`PutSession`] and [`GetSession`]. As upstream's, sessions live in this
//! process, one per key: a second put session on a key is refused until the
//! first ends or is revoked; a get session started again replaces the old.
//! Closing the store revokes the put sessions still open.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::join_all;
use mooncake_client::{ClientError, GetSession, PutSession, SessionReads};

use mooncake_transfer::{CudaDriver, DeviceError};

use crate::buffers::{Readable, Region, Writable, device_copy_failed, finish_all};
use crate::codes::{self, Code};
use crate::session::{ReplicaSpec, Session};

/// The sessions of one store, by key.
#[derive(Default)]
pub struct Sessions {
    puts: Mutex<HashMap<String, Arc<PutSession>>>,
    gets: Mutex<HashMap<String, Arc<GetSession>>>,
}

/// One key's reads of `get_sessions_read`: its index in the call, its
/// session, and where each range lands.
type KeyTargets<'a> = (usize, &'a GetSession, Vec<(u64, Writable<'a>)>);

/// One key's ranges of a ranged call: `(offset in the object, memory)`, or
/// `None` when the key's arguments were refused.
pub type KeyRanges = Option<Vec<(u64, Region)>>;

impl Sessions {
    fn puts(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<PutSession>>> {
        self.puts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn gets(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<GetSession>>> {
        self.gets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The put sessions still open (taken out; for `close`).
    pub fn take_puts(&self) -> Vec<Arc<PutSession>> {
        self.puts().drain().map(|(_, s)| s).collect()
    }
}

impl Session {
    /// Reserves each `(key, size)`; per key 0 or a code. A key with a put
    /// session already open in this process is `INVALID_PARAMS`; a key that
    /// exists, or that `items` names again, is `OBJECT_ALREADY_EXISTS`.
    pub fn put_sessions_start(&self, items: &[(String, u64)], spec: &ReplicaSpec) -> Vec<Code> {
        let opts = match self.block_on(self.put_options(spec)) {
            Ok(o) => o,
            Err(code) => return vec![code; items.len()],
        };
        let mut out = vec![codes::INVALID_PARAMS; items.len()];
        let mut asked = Vec::new();
        {
            let open = self.sessions().puts();
            let mut seen = std::collections::HashSet::new();
            for (i, (key, size)) in items.iter().enumerate() {
                if *size == 0 || open.contains_key(key) {
                    continue;
                }
                match seen.insert(key.as_str()) {
                    true => asked.push(i),
                    // The first of the call reserves the key (upstream's
                    // master answers the second so).
                    false => out[i] = codes::OBJECT_ALREADY_EXISTS,
                }
            }
        }
        let wanted: Vec<(&str, u64)> = asked.iter().map(|&i| (items[i].0.as_str(), items[i].1)).collect();
        let started = self.block_on(self.client().put_sessions_start(&wanted, &opts, false));
        let mut open = self.sessions().puts();
        for (&i, r) in asked.iter().zip(started) {
            out[i] = match r {
                Ok(s) => match open.entry(items[i].0.clone()) {
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(Arc::new(s));
                        codes::OK
                    }
                    // Another thread opened one meanwhile: this reservation
                    // is the master's to discard (ours is the same client).
                    std::collections::hash_map::Entry::Occupied(_) => codes::INVALID_PARAMS,
                },
                Err(e) => codes::of_client(&e),
            };
        }
        out
    }

    /// Writes each key's ranges into its put session; per key the bytes
    /// written or a code.
    pub fn put_sessions_write(&self, keys: &[String], ranges: Vec<KeyRanges>) -> Vec<Code> {
        let sessions: Vec<Option<Arc<PutSession>>> = {
            let open = self.sessions().puts();
            keys.iter().map(|k| open.get(k).cloned()).collect()
        };
        let writes = sessions.iter().zip(&ranges).map(|(s, r)| async move {
            let (Some(s), Some(r)) = (s, r) else { return codes::INVALID_PARAMS };
            // SAFETY: each region was checked against registered memory (see `Session::region`).
            let sources = r.iter().map(|(o, region)| Ok((*o, unsafe { region.readable(&CudaDriver) }?)));
            let sources: Vec<(u64, Readable)> = match sources.collect::<Result<_, DeviceError>>() {
                Ok(sources) => sources,
                Err(e) => return device_copy_failed(&e),
            };
            let pieces: Vec<(u64, &[u8])> = sources.iter().map(|(o, data)| (*o, &**data)).collect();
            codes::of_result(&self.client().put_session_write(s, &pieces).await, |n| *n as Code)
        });
        self.block_on(join_all(writes))
    }

    /// Ends the put sessions of `keys`: 0 (the object is readable, the
    /// session gone) or a code (the session stays, to end again or revoke).
    pub fn put_sessions_end(&self, keys: &[String]) -> Vec<Code> {
        self.finish_puts(keys, false)
    }

    /// Revokes the put sessions of `keys`: 0 (nothing was stored, the
    /// session gone) or a code (the session stays, to revoke again).
    pub fn put_sessions_revoke(&self, keys: &[String]) -> Vec<Code> {
        self.finish_puts(keys, true)
    }

    fn finish_puts(&self, keys: &[String], revoke: bool) -> Vec<Code> {
        let found: Vec<Option<Arc<PutSession>>> = {
            let open = self.sessions().puts();
            let mut seen = std::collections::HashSet::new();
            keys.iter().map(|k| open.get(k).filter(|_| seen.insert(k.as_str())).cloned()).collect()
        };
        let live: Vec<&PutSession> = found.iter().flatten().map(|s| s.as_ref()).collect();
        let results = match revoke {
            true => self.block_on(self.client().put_sessions_revoke(&live)),
            false => self.block_on(self.client().put_sessions_end(&live)),
        };
        let mut results = results.into_iter();
        let mut open = self.sessions().puts();
        found
            .iter()
            .zip(keys)
            .map(|(s, key)| match s {
                None => codes::INVALID_PARAMS,
                Some(s) => match results.next() {
                    Some(Ok(())) => {
                        if open.get(key).is_some_and(|o| Arc::ptr_eq(o, s)) {
                            open.remove(key);
                        }
                        codes::OK
                    }
                    Some(Err(e)) => codes::of_client(&e),
                    None => codes::INTERNAL_ERROR,
                },
            })
            .collect()
    }

    /// Resolves the replicas of `keys` once, for ranged reads; per key 0 or
    /// a code, and where the bytes will come from ("memory", "local_disk").
    pub fn get_sessions_start(&self, keys: &[String]) -> (Vec<Code>, Vec<String>) {
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let started = self.block_on(self.client().get_sessions_start(&names));
        let mut gets = self.sessions().gets();
        started
            .into_iter()
            .zip(keys)
            .map(|(r, key)| match r {
                Ok(s) => {
                    let source = if s.on_disk() { "local_disk" } else { "memory" };
                    gets.insert(key.clone(), Arc::new(s));
                    (codes::OK, source.to_string())
                }
                Err(e) => {
                    gets.remove(key);
                    (codes::of_client(&e), String::new())
                }
            })
            .unzip()
    }

    /// Reads each key's ranges from its get session; per key the bytes read
    /// or a code. A session whose KV lease ended is dropped
    /// (`LEASE_EXPIRED`: start a new one).
    pub fn get_sessions_read(&self, keys: &[String], ranges: Vec<KeyRanges>) -> Vec<Code> {
        let sessions: Vec<Option<Arc<GetSession>>> = {
            let open = self.sessions().gets();
            keys.iter().map(|k| open.get(k).cloned()).collect()
        };
        // The keys with a session and accepted ranges read in one batch.
        // Ranges in device memory are read into host copies of their
        // bytes, copied back whole once the key's read succeeded (the read
        // says only how many bytes the key's ranges received in all).
        let mut results: Vec<Result<u64, Code>> = vec![Err(codes::INVALID_PARAMS); keys.len()];
        let mut targets: Vec<KeyTargets> = Vec::new();
        for (i, (s, r)) in sessions.iter().zip(&ranges).enumerate() {
            if let (Some(s), Some(r)) = (s, r) {
                // SAFETY: each region was checked against registered memory
                // and the regions of one call do not overlap (`carve`).
                let key_targets =
                    r.iter().map(|(o, region)| Ok((*o, unsafe { region.writable_prefilled(&CudaDriver) }?)));
                match key_targets.collect::<Result<Vec<_>, DeviceError>>() {
                    Ok(t) => targets.push((i, s.as_ref(), t)),
                    Err(e) => results[i] = Err(device_copy_failed(&e)),
                }
            }
        }
        let mut batch: Vec<SessionReads<'_>> =
            targets.iter_mut().map(|(_, s, t)| (*s, t.iter_mut().map(|(o, w)| (*o, w.buf())).collect())).collect();
        let read = self.block_on(self.client().get_sessions_read(&mut batch));
        drop(batch);
        for ((i, _, t), r) in targets.into_iter().zip(read) {
            results[i] = match r {
                Err(ClientError::LeaseExpired { .. }) => Err(codes::LEASE_EXPIRED),
                Err(e) => Err(codes::of_client(&e)),
                Ok(n) => {
                    let (lens, t): (Vec<usize>, Vec<Writable>) = t.into_iter().map(|(_, w)| (w.len(), w)).unzip();
                    finish_all(t, lens, &CudaDriver).map(|()| n)
                }
            };
        }
        let mut open = self.sessions().gets();
        results
            .into_iter()
            .zip(keys.iter().zip(&sessions))
            .map(|(r, (key, s))| match r {
                Ok(n) => n as Code,
                Err(code) => {
                    if code == codes::LEASE_EXPIRED
                        && let Some(s) = s
                        && open.get(key).is_some_and(|o| Arc::ptr_eq(o, s))
                    {
                        open.remove(key);
                    }
                    code
                }
            })
            .collect()
    }

    /// Drops the get sessions of `keys` (nothing to tell the masters: a KV
    /// lease ends by itself).
    pub fn get_sessions_end(&self, keys: &[String]) {
        let mut open = self.sessions().gets();
        for key in keys {
            open.remove(key);
        }
    }
}
