//! Sessions: a put whose space is reserved once and whose bytes arrive in
//! ranges over many calls ([`PutSession`]), and a get whose replicas are
//! resolved once and read in ranges under its KV lease ([`GetSession`]).
//! Frameworks that move a KV cache layer by layer use them (Mooncake's
//! `batch_put_session_*` and `batch_get_session_*`).
//!
//! A put session is a PutStart reservation: nothing is readable until
//! [`Client::put_sessions_end`] commits it with PutEnd, and a revoke (or a
//! leader change, which reclaims the reservation) leaves nothing. Writes are
//! refused once the session is ending; the end waits for writes still
//! moving bytes. Bytes no write covered are zeroed at the end (the range may
//! hold an older object's bytes), and the checksum is combined from the
//! writes' own checksums, so the object reads back checked like any other.
//! Two writes of one session may not overlap (each byte has one writer).
//!
//! A get session holds one replica list and the instant its KV lease ends,
//! measured from before the list was asked for. A ranged read checks the
//! lease before and after moving bytes: a read that may have raced a removal
//! is [`ClientError::LeaseExpired`], never silently wrong bytes.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::join_all;
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{GetReplicaListResponse, PutRevokeRequest, Replica};
use tokio::sync::Notify;

use super::{BATCH_ITEMS_MAX, Client, PutOptions, combined_crc32c, item_status, list_error};
use crate::error::ClientError;
use crate::remote::remote;

/// Size of the zero buffer gaps are filled from.
const ZEROS_CHUNK: usize = 1 << 20;

/// A put whose space is reserved and whose bytes arrive in ranges.
#[derive(Debug)]
pub struct PutSession {
    key: String,
    size: u64,
    replicas: Vec<Replica>,
    opts: PutOptions,
    upsert: bool,
    state: Mutex<PutState>,
    drained: Notify,
}

#[derive(Debug)]
struct PutState {
    /// False once an end or revoke began: no write is admitted after.
    open: bool,
    /// Writes admitted and still moving bytes.
    in_flight: usize,
    /// Ranges claimed by writes: offset → (length, crc32c once written).
    /// A claim whose write failed is dropped (its bytes are zeroed at the end).
    claimed: BTreeMap<u64, (u64, Option<u32>)>,
}

impl PutSession {
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PutState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims `ranges` for one write: all or none. Refused when the session
    /// is ending, a range reaches past the object, or two ranges (of this
    /// write or of earlier ones) overlap.
    fn claim(&self, ranges: &[(u64, u64)]) -> Result<(), ClientError> {
        let mut st = self.lock();
        if !st.open {
            return Err(ClientError::InvalidSession(format!("the put session of {:?} has ended", self.key)));
        }
        let mut sorted: Vec<(u64, u64)> = ranges.iter().copied().filter(|(_, len)| *len > 0).collect();
        sorted.sort_unstable();
        for &(offset, len) in &sorted {
            if offset.checked_add(len).is_none_or(|end| end > self.size) {
                return Err(ClientError::RangeOutsideObject { key: self.key.clone(), offset, len, size: self.size });
            }
        }
        let overlap = sorted.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0).map(|w| w[1]).or_else(|| {
            sorted.iter().copied().find(|&(offset, len)| {
                let before = st.claimed.range(..offset + len).next_back();
                before.is_some_and(|(&o, &(l, _))| o + l > offset)
            })
        });
        if let Some((offset, len)) = overlap {
            return Err(ClientError::InvalidSession(format!(
                "range [{offset}, {}) of {:?} overlaps a range already written in this put session",
                offset + len,
                self.key
            )));
        }
        for (offset, len) in sorted {
            st.claimed.insert(offset, (len, None));
        }
        st.in_flight += 1;
        Ok(())
    }

    /// Ends a write admitted by `claim`: records each range's checksum, or
    /// drops the claims of a failed write.
    fn settle(&self, ranges: &[(u64, u64)], crcs: Option<&[u32]>) {
        let mut st = self.lock();
        for (i, &(offset, len)) in ranges.iter().enumerate().filter(|(_, r)| r.1 > 0) {
            match crcs {
                Some(crcs) => {
                    st.claimed.insert(offset, (len, crcs.get(i).copied()));
                }
                None => {
                    st.claimed.remove(&offset);
                }
            }
        }
        st.in_flight -= 1;
        if st.in_flight == 0 {
            self.drained.notify_waiters();
        }
    }

    /// Stops admitting writes and waits for those admitted.
    async fn close(&self) {
        self.lock().open = false;
        loop {
            let drained = self.drained.notified();
            if self.lock().in_flight == 0 {
                return;
            }
            drained.await;
        }
    }

    /// The ranges no write covers, in order.
    fn gaps(&self) -> Vec<(u64, u64)> {
        let st = self.lock();
        let mut gaps = Vec::new();
        let mut pos = 0;
        for (&offset, &(len, _)) in &st.claimed {
            if offset > pos {
                gaps.push((pos, offset - pos));
            }
            pos = offset + len;
        }
        if pos < self.size {
            gaps.push((pos, self.size - pos));
        }
        gaps
    }

    /// The object's checksum once every byte is written (the gaps zeroed).
    fn checksum(&self, zeroed: &[(u64, u64)]) -> u32 {
        let st = self.lock();
        let mut pieces: Vec<(u64, u32, usize)> =
            st.claimed.iter().map(|(&o, &(l, crc))| (o, crc.unwrap_or(0), l as usize)).collect();
        pieces.extend(zeroed.iter().map(|&(o, l)| (o, zeros_crc32c(l), l as usize)));
        pieces.sort_unstable_by_key(|p| p.0);
        combined_crc32c(pieces.into_iter().map(|(_, crc, len)| (crc, len)))
    }
}

/// The CRC-32C of `len` zero bytes.
fn zeros_crc32c(len: u64) -> u32 {
    let zeros = vec![0u8; ZEROS_CHUNK.min(len as usize)];
    let mut left = len;
    let mut pieces = Vec::new();
    while left > 0 {
        let n = left.min(ZEROS_CHUNK as u64) as usize;
        pieces.push((mooncake_segment::checksum::crc32c(&zeros[..n]), n));
        left -= n as u64;
    }
    combined_crc32c(pieces)
}

/// The ranges one get session reads: `(offset in the object, buffer)` each.
pub type SessionReads<'a> = (&'a GetSession, Vec<(u64, &'a mut [u8])>);

/// An object's replicas resolved once, read in ranges under its KV lease.
#[derive(Debug)]
pub struct GetSession {
    key: String,
    list: GetReplicaListResponse,
    lease_until: Instant,
}

impl GetSession {
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn size(&self) -> u64 {
        self.list.size
    }

    /// True when the object has no memory replica: its bytes come from a
    /// disk tier (memory replicas are listed first).
    pub fn on_disk(&self) -> bool {
        self.list.replicas.first().is_some_and(|r| r.tier() == mooncake_proto::master::Tier::Ssd)
    }

    /// Whether the KV lease still protects the replicas now.
    pub fn leased(&self) -> bool {
        Instant::now() < self.lease_until
    }

    /// `[offset, offset + len)` lies inside the object.
    fn check_range(&self, offset: u64, len: u64) -> Result<(), ClientError> {
        match offset.checked_add(len).is_some_and(|end| end <= self.list.size) {
            true => Ok(()),
            false => Err(ClientError::RangeOutsideObject { key: self.key.clone(), offset, len, size: self.list.size }),
        }
    }

    fn check_lease(&self) -> Result<(), ClientError> {
        match self.leased() {
            true => Ok(()),
            false => Err(ClientError::LeaseExpired { key: self.key.clone() }),
        }
    }
}

impl Client {
    /// Reserves space for each `(key, size)` (one batch PutStart per
    /// [`BATCH_ITEMS_MAX`]); nothing is readable until
    /// [`put_sessions_end`](Self::put_sessions_end). A key that exists (or is
    /// being written) is `OBJECT_ALREADY_EXISTS` unless `upsert`.
    pub async fn put_sessions_start(
        &self,
        items: &[(&str, u64)],
        opts: &PutOptions,
        upsert: bool,
    ) -> Vec<Result<PutSession, ClientError>> {
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(BATCH_ITEMS_MAX) {
            let reqs = chunk.iter().map(|(key, size)| self.put_start_request(key, *size, opts, upsert)).collect();
            match self.master.batch_put_start(reqs).await {
                Ok(started) => out.extend(chunk.iter().zip(started.reply).map(|((key, size), resp)| {
                    item_status(resp.status.as_ref(), started.attempts)?;
                    Ok(PutSession {
                        key: key.to_string(),
                        size: *size,
                        replicas: resp.replicas,
                        opts: opts.clone(),
                        upsert,
                        state: Mutex::new(PutState { open: true, in_flight: 0, claimed: BTreeMap::new() }),
                        drained: Notify::new(),
                    })
                })),
                Err(e) => out.extend(chunk.iter().map(|_| Err(ClientError::Master(e.clone())))),
            }
        }
        out
    }

    /// Writes `(offset in the object, bytes)` pieces into a put session, to
    /// every replica at once. All pieces are checked before any byte moves
    /// (inside the object, no overlap with each other or earlier writes).
    /// Returns the bytes written.
    pub async fn put_session_write(&self, session: &PutSession, pieces: &[(u64, &[u8])]) -> Result<u64, ClientError> {
        let ranges: Vec<(u64, u64)> = pieces.iter().map(|(o, d)| (*o, d.len() as u64)).collect();
        session.claim(&ranges)?;
        let writes = session.replicas.iter().flat_map(|r| {
            let target = remote(r);
            pieces.iter().filter(|(_, d)| !d.is_empty()).map(move |(offset, data)| {
                let target = target.clone();
                async move { self.engine.write(&target, r.offset + offset, data).await }
            })
        });
        let written: Result<Vec<()>, _> = join_all(writes).await.into_iter().collect();
        match written {
            Ok(_) => {
                let crcs: Vec<u32> = pieces.iter().map(|(_, d)| mooncake_segment::checksum::crc32c(d)).collect();
                session.settle(&ranges, Some(&crcs));
                Ok(ranges.iter().map(|r| r.1).sum())
            }
            Err(e) => {
                session.settle(&ranges, None);
                Err(e.into())
            }
        }
    }

    /// Ends put sessions: no write is admitted after, those in flight
    /// finish, bytes no write covered are zeroed, and one batch PutEnd makes
    /// the objects readable. A session whose end failed may be ended again
    /// or revoked; a reservation that expired (a leader change) is
    /// `OBJECT_NOT_FOUND` and left nothing.
    pub async fn put_sessions_end(&self, sessions: &[&PutSession]) -> Vec<Result<(), ClientError>> {
        let prepared = join_all(sessions.iter().map(|s| async move {
            s.close().await;
            let gaps = s.gaps();
            self.zero_fill(s, &gaps).await?;
            Ok::<u32, ClientError>(s.checksum(&gaps))
        }))
        .await;
        let mut out: Vec<Result<(), ClientError>> = Vec::with_capacity(sessions.len());
        let ready: Vec<(usize, u32)> =
            prepared.iter().enumerate().filter_map(|(i, p)| p.as_ref().ok().map(|crc| (i, *crc))).collect();
        let mut ended: BTreeMap<usize, Result<(), ClientError>> = BTreeMap::new();
        for chunk in ready.chunks(BATCH_ITEMS_MAX) {
            let ends = chunk
                .iter()
                .map(|&(i, crc)| {
                    let s = sessions[i];
                    self.put_end_request(&s.key, s.size, crc, &s.replicas, &s.opts, s.upsert)
                })
                .collect();
            match self.master.batch_put_end(ends).await {
                Ok(r) => {
                    for (&(i, _), e) in chunk.iter().zip(&r.reply) {
                        ended.insert(i, item_status(e.status.as_ref(), r.attempts));
                    }
                }
                Err(e) => {
                    for &(i, _) in chunk {
                        ended.insert(i, Err(ClientError::Master(e.clone())));
                    }
                }
            }
        }
        for (i, p) in prepared.into_iter().enumerate() {
            out.push(match p {
                Err(e) => Err(e),
                Ok(_) => ended.remove(&i).unwrap_or_else(|| Err(ClientError::Config("missing PutEnd answer".into()))),
            });
        }
        for r in &out {
            let c = if r.is_ok() { &self.stats.puts_ok } else { &self.stats.puts_failed };
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        out
    }

    /// Revokes put sessions: no write is admitted after, those in flight
    /// finish, and one batch PutRevoke frees the reservations. A reservation
    /// already gone (expired, or never committed) counts as revoked.
    pub async fn put_sessions_revoke(&self, sessions: &[&PutSession]) -> Vec<Result<(), ClientError>> {
        join_all(sessions.iter().map(|s| s.close())).await;
        let mut out = Vec::with_capacity(sessions.len());
        for chunk in sessions.chunks(BATCH_ITEMS_MAX) {
            let reqs =
                chunk.iter().map(|s| PutRevokeRequest { client_id: self.client_id, key: s.key.clone() }).collect();
            match self.master.batch_put_revoke(reqs).await {
                Ok(r) => out.extend(r.iter().map(|e| match item_status(e.status.as_ref(), 1) {
                    Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => Ok(()),
                    other => other,
                })),
                Err(e) => out.extend(chunk.iter().map(|_| Err(ClientError::Master(e.clone())))),
            }
        }
        out
    }

    /// Writes zeros over `gaps` of every replica of the session.
    async fn zero_fill(&self, session: &PutSession, gaps: &[(u64, u64)]) -> Result<(), ClientError> {
        if gaps.is_empty() {
            return Ok(());
        }
        let longest = gaps.iter().map(|g| g.1).max().unwrap_or(0);
        let zeros = vec![0u8; ZEROS_CHUNK.min(longest as usize)];
        let writes = session.replicas.iter().flat_map(|r| {
            let target = remote(r);
            let zeros = &zeros;
            gaps.iter().flat_map(move |&(offset, len)| {
                let target = target.clone();
                (0..len.div_ceil(ZEROS_CHUNK as u64)).map(move |k| {
                    let at = offset + k * ZEROS_CHUNK as u64;
                    let n = (offset + len - at).min(ZEROS_CHUNK as u64) as usize;
                    let target = target.clone();
                    async move { self.engine.write(&target, r.offset + at, &zeros[..n]).await }
                })
            })
        });
        for r in join_all(writes).await {
            r?;
        }
        Ok(())
    }

    /// Resolves each key's replicas once (one batch GetReplicaList per
    /// [`BATCH_ITEMS_MAX`]) for ranged reads under its KV lease.
    pub async fn get_sessions_start(&self, keys: &[&str]) -> Vec<Result<GetSession, ClientError>> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_ITEMS_MAX) {
            let asked = Instant::now();
            let names = chunk.iter().map(|k| k.to_string()).collect();
            match self.master.batch_get_replica_list(self.client_id, names).await {
                Ok(lists) => out.extend(chunk.iter().zip(lists.reply).map(|(key, list)| {
                    self.list_status(key, &list, lists.attempts)?;
                    if list.replicas.is_empty() {
                        return Err(list_error(key, &list, lists.attempts)
                            .unwrap_or_else(|| ClientError::NotFound(key.to_string())));
                    }
                    let lease_until = asked + Duration::from_millis(list.lease_ttl_ms);
                    let session = GetSession { key: key.to_string(), list, lease_until };
                    session.check_lease()?;
                    Ok(session)
                })),
                Err(e) => out.extend(chunk.iter().map(|_| Err(ClientError::Master(e.clone())))),
            }
        }
        out
    }

    /// Reads `(offset in the object, buffer)` ranges of get sessions in one
    /// batched transfer. Each session's ranges are checked before any byte
    /// moves and its lease before and after; the ranges of every session from its nearest
    /// replica at once (small ones to one store node share a pipelined
    /// connection), then each range that failed there from the other
    /// replicas. One result per session: its bytes read or why not.
    pub async fn get_sessions_read(&self, reads: &mut [SessionReads<'_>]) -> Vec<Result<u64, ClientError>> {
        // Each session's ranges checked first; a refused session reads nothing.
        let mut out: Vec<Result<u64, ClientError>> = reads
            .iter()
            .map(|(session, ranges)| {
                for (offset, buf) in ranges.iter() {
                    session.check_range(*offset, buf.len() as u64)?;
                }
                session.check_lease()?;
                Ok(ranges.iter().map(|(_, b)| b.len() as u64).sum())
            })
            .collect();
        let targets: Vec<Option<(mooncake_transfer::RemoteSegment, u64)>> = reads
            .iter()
            .map(|(s, _)| self.nearest_first(&s.list.replicas).first().map(|r| (remote(r), r.offset)))
            .collect();
        let mut batch = Vec::new();
        let mut owners = Vec::new();
        for (i, ((_, ranges), target)) in reads.iter_mut().zip(&targets).enumerate() {
            if let (Ok(_), Some((target, base))) = (&out[i], target) {
                for (j, (offset, buf)) in ranges.iter_mut().enumerate() {
                    batch.push(mooncake_transfer::BatchRead { target, offset: base + *offset, buf });
                    owners.push((i, j));
                }
            }
        }
        let results = self.engine.read_batch_checksummed(batch).await;
        let failed: Vec<(usize, usize)> =
            owners.into_iter().zip(results).filter(|(_, r)| r.is_err()).map(|(owner, _)| owner).collect();
        // The ranges that failed on the nearest replica, from every replica.
        for (i, j) in failed {
            if out[i].is_err() {
                continue;
            }
            let (session, ranges) = &mut reads[i];
            let (offset, buf) = &mut ranges[j];
            if let Err(e) = self.read_range(&session.key, &session.list, *offset, buf).await {
                out[i] = Err(e);
            }
        }
        for (r, (session, _)) in out.iter_mut().zip(reads.iter()) {
            if r.is_ok()
                && let Err(e) = session.check_lease()
            {
                *r = Err(e);
            }
        }
        out
    }
}
