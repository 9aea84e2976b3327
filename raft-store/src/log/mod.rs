//! The Raft log and vote on sled: [`LogStore`] owns the `raft_log` tree (key =
//! log index as 8 big-endian bytes, value = encoded entry) and the `raft_meta`
//! tree (keys `vote`, `last_purged`, `committed`).
//!
//! Durability promise: nothing is acknowledged before it is on stable storage.
//! `save_vote`, `truncate` and `purge` return only after [`DataSync::sync`];
//! `append` calls openraft's callback only after a sync covering the batch
//! (group commit on the flusher thread, see `group_commit.rs`, or the
//! caller's own sync when nothing waits there) — except for the
//! entries this node writes as the leader of its current term, whose sync
//! runs while they are replicated and is tracked in [`FlushedLog`] (see
//! `flushed.rs` for why that keeps every acknowledgement quorum-durable).
//! `purge` syncs the `last_purged` marker before any entry is deleted (in the
//! background, `purge_upto`), so a crash can never leave entries gone without
//! the marker; entries at or below it are invisible at once. `committed` is
//! only flushed: losing it makes a restart re-apply less, never wrongly.

pub(crate) mod flushed;
pub(crate) mod group_commit;
pub(crate) mod janitor;

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec::{decode, encode};
use crate::data_dir::durable::DataSync;
use crate::data_dir::watermark::Watermark;
use crate::error::StoreError;
use crate::log::flushed::FlushedLog;
use crate::log::group_commit::{Flusher, Job};
use crate::log::janitor::{Janitor, delete_upto};
use crate::type_config::{LogId, NodeId, TypeConfig};

/// A log entry of this type configuration.
type Entry = openraft::Entry<TypeConfig>;
/// What every trait method returns on failure.
type StorageResult<T> = Result<T, StorageError<NodeId>>;

const LOG_TREE: &str = "raft_log";
const META_TREE: &str = "raft_meta";
const KEY_VOTE: &str = "vote";
const KEY_LAST_PURGED: &str = "last_purged";
const KEY_COMMITTED: &str = "committed";
const KEY_CLUSTER_ID: &str = "cluster_id";

/// The durable Raft log and vote of one master. Cheap to clone; clones share
/// the same trees (openraft's log readers are clones).
#[derive(Clone)]
pub struct LogStore {
    log: sled::Tree,
    meta: sled::Tree,
    sync: DataSync,
    flusher: Arc<Flusher>,
    flushed: FlushedLog,
    /// This master's id, when known: its own entries as leader are synced
    /// while they replicate. `None` (tests, tools): every append waits.
    own_id: Option<NodeId>,
    /// The last vote saved, to tell whether this node leads its term.
    vote: Arc<std::sync::Mutex<Option<Vote<NodeId>>>>,
    /// Entries below this index are purged: the marker is saved, their
    /// deletion may still be running in the background (`purge_upto`).
    first_live: Arc<AtomicU64>,
    /// Deletes purged entries off the Raft core (`janitor.rs`).
    janitor: Arc<Janitor>,
    /// What this store is known to have made durable (`data_dir/watermark.rs`);
    /// `None` in tests and tools that open a log without a data dir.
    watermark: Option<Arc<Watermark>>,
}

impl LogStore {
    /// Opens (or creates) the `raft_log` and `raft_meta` trees of `db`;
    /// `sync` must make writes to `db` durable.
    pub fn open(db: &sled::Db, sync: DataSync) -> Result<LogStore, StoreError> {
        let log = db.open_tree(LOG_TREE).map_err(StoreError::sled("open raft_log tree"))?;
        let meta = db.open_tree(META_TREE).map_err(StoreError::sled("open raft_meta tree"))?;
        let probe = LogStore::read_meta_in::<Vote<NodeId>>(&meta, KEY_VOTE)?;
        let purged = LogStore::read_meta_in::<LogId>(&meta, KEY_LAST_PURGED)?;
        // A purge whose background deletion a crash interrupted: finish it.
        if let Some(p) = purged {
            delete_upto(&log, p.index).map_err(StoreError::sled("delete purged log entries"))?;
        }
        let last = match log.last().map_err(StoreError::sled("read last log entry"))? {
            Some((_, bytes)) => Some(decode::<Entry>("log entry", &bytes)?.log_id),
            None => None,
        };
        // What the log held (or purged into a snapshot) when opened is on disk.
        let flushed = FlushedLog::new(last.max(purged));
        let flusher = Flusher::start(sync.clone(), flushed.clone()).map_err(|source| StoreError::Io {
            op: "start log flusher thread",
            path: String::new(),
            source,
        })?;
        let vote = Arc::new(std::sync::Mutex::new(probe));
        let first_live = Arc::new(AtomicU64::new(purged.map_or(0, |p| p.index + 1)));
        let janitor = Janitor::start(log.clone()).map_err(|source| StoreError::Io {
            op: "start log janitor thread",
            path: String::new(),
            source,
        })?;
        Ok(LogStore {
            log,
            meta,
            sync,
            flusher: Arc::new(flusher),
            flushed,
            own_id: None,
            vote,
            first_live,
            janitor: Arc::new(janitor),
            watermark: None,
        })
    }

    /// This store belongs to master `id`: its own entries as leader are
    /// synced while they replicate (see `flushed.rs`).
    ///
    /// Because of that, a leader that crashed may have sent followers
    /// entries its own disk never got, and it restarts with a log that ends
    /// before them. openraft restarts a node whose saved vote is its own
    /// committed one as the leader of that same term, which would write new,
    /// different entries under log ids the followers already hold and break
    /// Raft's log matching (found by the chaos harness's power-loss
    /// scenario). So such a vote is saved back uncommitted, durably, before
    /// openraft reads it: the node keeps its term and whom it voted for, but
    /// restarts as a follower, and leads again only by winning a new term.
    pub fn with_own_id(mut self, id: NodeId) -> Result<Self, StoreError> {
        self.own_id = Some(id);
        let saved = *self.vote.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(vote) = saved
            && vote.is_committed()
            && vote.leader_id().voted_for() == Some(id)
        {
            let resigned = Vote::new(vote.leader_id().get_term(), id);
            self.write_meta(KEY_VOTE, &resigned)?;
            self.sync.sync()?;
            *self.vote.lock().unwrap_or_else(|p| p.into_inner()) = Some(resigned);
            tracing::info!(
                term = resigned.leader_id().get_term(),
                "restarting as a follower of my own term: leading again needs a new election"
            );
        }
        Ok(self)
    }

    /// Checks the log and vote against the durable watermark kept in `dir`
    /// and keeps that watermark up to date from now on: a data dir that
    /// went backwards (sled recovered less than this master had made
    /// durable) is refused with [`StoreError::WentBackwards`].
    pub fn with_watermark(mut self, dir: &std::path::Path) -> Result<Self, StoreError> {
        let watermark = Watermark::load(dir)?;
        let last = self.log_state()?.last_log_id.map_or(0, |l| l.index);
        let vote = self.vote.lock().unwrap_or_else(|p| p.into_inner()).map_or(0, |v| v.leader_id().get_term());
        watermark.check(last, vote)?;
        self.watermark = Some(Arc::new(watermark));
        Ok(self)
    }

    /// How far the log is on stable storage.
    pub fn flushed(&self) -> FlushedLog {
        self.flushed.clone()
    }

    fn read_meta_in<T: DeserializeOwned>(meta: &sled::Tree, key: &str) -> Result<Option<T>, StoreError> {
        match meta.get(key).map_err(StoreError::sled("read raft_meta"))? {
            Some(bytes) => decode(key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Whether entries written under `leader` are this node's own, as the
    /// leader of its current term.
    fn leads(&self, leader: &openraft::CommittedLeaderId<NodeId>) -> bool {
        let Some(me) = self.own_id else { return false };
        let vote = self.vote.lock().unwrap_or_else(|p| p.into_inner());
        vote.as_ref().is_some_and(|v| {
            v.is_committed() && v.leader_id().voted_for() == Some(me) && v.leader_id().get_term() == leader.term
        }) && leader.node_id == me
    }

    /// The id of the cluster this log belongs to, once known.
    pub fn cluster_id(&self) -> Result<Option<String>, StoreError> {
        self.read_meta(KEY_CLUSTER_ID)
    }

    /// Records the cluster id durably (a master never changes clusters).
    pub fn save_cluster_id(&self, id: &str) -> Result<(), StoreError> {
        self.write_meta(KEY_CLUSTER_ID, &id.to_string())?;
        self.sync.sync()
    }

    /// Decodes the value of meta `key`, `None` when absent.
    fn read_meta<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StoreError> {
        Self::read_meta_in(&self.meta, key)
    }

    /// Encodes `value` under meta `key` (not yet durable).
    fn write_meta<T: Serialize>(&self, key: &str, value: &T) -> Result<(), StoreError> {
        let bytes = encode(key, value)?;
        self.meta.insert(key, bytes).map_err(StoreError::sled("write raft_meta"))?;
        Ok(())
    }

    /// The log id of the last entry present in the log.
    fn last_entry_log_id(&self) -> Result<Option<LogId>, StoreError> {
        match self.log.last().map_err(StoreError::sled("read last log entry"))? {
            Some((_, bytes)) => {
                let id = decode::<Entry>("log entry", &bytes)?.log_id;
                // A purged entry whose deletion is still running is no entry.
                Ok((id.index >= self.first_live.load(Ordering::Acquire)).then_some(id))
            }
            None => Ok(None),
        }
    }

    /// The id of the last entry purged into a snapshot.
    pub fn last_purged(&self) -> Result<Option<LogId>, StoreError> {
        self.read_meta(KEY_LAST_PURGED)
    }

    /// The state openraft starts from: last purged and last known log ids.
    /// The id of the last entry in the log (or of the last purged one).
    pub fn last_log_id(&self) -> Result<Option<LogId>, StoreError> {
        Ok(self.log_state()?.last_log_id)
    }

    fn log_state(&self) -> Result<LogState<TypeConfig>, StoreError> {
        let last_purged_log_id: Option<LogId> = self.read_meta(KEY_LAST_PURGED)?;
        // Entries are always newer than the purge marker (purge is atomic),
        // so this is "last entry, else last purged"; `max` also covers a log
        // that ends before a snapshot's purge point.
        let last_log_id = self.last_entry_log_id()?.max(last_purged_log_id);
        Ok(LogState { last_purged_log_id, last_log_id })
    }

    /// Decodes the entries whose indexes lie in `range`, in index order
    /// (never a purged one).
    fn read_entries(&self, range: (Bound<[u8; 8]>, Bound<[u8; 8]>)) -> Result<Vec<Entry>, StoreError> {
        let first_live = index_key(self.first_live.load(Ordering::Acquire));
        let start = match range.0 {
            Bound::Included(k) | Bound::Excluded(k) if k >= first_live => range.0,
            _ => Bound::Included(first_live),
        };
        self.log
            .range((start, range.1))
            .map(|item| {
                let (_, bytes) = item.map_err(StoreError::sled("read log entries"))?;
                decode("log entry", &bytes)
            })
            .collect()
    }

    /// Writes `entries` atomically: readable on return, not durable.
    /// Returns the last entry's log id and whether every entry is this
    /// node's own as the leader of its current term.
    ///
    /// One entry (every append at low load, and most under load, where the
    /// proposer batches commands into one entry) is a plain insert, atomic
    /// on its own. Only several take a `sled::Batch`: sled 0.34 seals and
    /// writes its IO buffer before and after every batch (`pin_log`), two
    /// more writes that the next sync waits for, each ending in its own
    /// `sync_file_range` (`examples/log_sync_probe.rs`: 3 device writes per
    /// sync instead of 1, +0.15-0.2 ms on this machine kind).
    fn write_entries<I: IntoIterator<Item = Entry>>(&self, entries: I) -> Result<Option<(LogId, bool)>, StoreError> {
        let mut encoded: Vec<([u8; 8], Vec<u8>)> = Vec::new();
        let mut last: Option<(LogId, bool)> = None;
        for entry in entries {
            encoded.push((index_key(entry.log_id.index), encode("log entry", &entry)?));
            let own = last.is_none_or(|(_, own)| own) && self.leads(&entry.log_id.leader_id);
            last = Some((entry.log_id, own));
        }
        let append = StoreError::sled("append log entries");
        if encoded.len() == 1 {
            let (key, bytes) = encoded.swap_remove(0);
            self.log.insert(key, bytes).map_err(append)?;
        } else if !encoded.is_empty() {
            let mut batch = sled::Batch::default();
            for (key, bytes) in encoded {
                batch.insert(&key, bytes);
            }
            self.log.apply_batch(batch).map_err(append)?;
        }
        Ok(last)
    }

    /// A batch deleting every entry whose index lies in `range`.
    fn deletion_batch<R: RangeBounds<[u8; 8]>>(&self, range: R) -> Result<sled::Batch, StoreError> {
        let mut batch = sled::Batch::default();
        for key in self.log.range(range).keys() {
            batch.remove(key.map_err(StoreError::sled("scan log keys"))?);
        }
        Ok(batch)
    }

    /// Deletes entries with index >= `index` in one atomic batch, then syncs.
    async fn truncate_from(&self, index: u64) -> Result<(), StoreError> {
        let batch = self.deletion_batch(index_key(index)..)?;
        self.log.apply_batch(batch).map_err(StoreError::sled("truncate log"))?;
        self.sync.sync_async().await?;
        self.flushed.cut_back(self.last_entry_log_id()?);
        Ok(())
    }

    /// Records `last_purged` durably; from then on entries up to it are
    /// gone for every reader. Deleting them runs on the janitor thread
    /// (`janitor.rs`): openraft purges inline in its core loop, and deleting
    /// a large log there (read through sled, in one transaction) silenced
    /// the leader's heartbeats for long enough to start elections right
    /// after a learner caught up by snapshot. A crash before the deletion
    /// ends leaves entries below the marker, which `open` deletes and
    /// nothing reads meanwhile.
    async fn purge_upto(&self, log_id: &LogId) -> Result<(), StoreError> {
        self.write_meta(KEY_LAST_PURGED, log_id)?;
        self.sync.sync_async().await?;
        self.first_live.fetch_max(log_id.index + 1, Ordering::AcqRel);
        // Purged entries are covered by a stored snapshot.
        self.flushed.advance(*log_id);
        self.janitor.purged(log_id.index);
        Ok(())
    }

    /// Records (or clears) the committed log id, without waiting for the
    /// disk. It is a hint, not a promise: after a restart the node re-applies
    /// the log up to it instead of waiting to hear the commit index from the
    /// leader, and a stale (older) one is simply re-learned. It can never be
    /// ahead of the durable log: it is saved after the entries it covers were
    /// synced. (openraft calls this on every commit, before apply: a flush
    /// here cost ~0.14 ms of every commit's latency.) The next sync of the
    /// database — the next append's — makes it durable too.
    async fn store_committed(&self, committed: Option<LogId>) -> Result<(), StoreError> {
        // Never beyond what is synced here: the leader may see an entry
        // committed before its own copy is on disk (flushed.rs).
        let committed = match (committed, self.flushed.get()) {
            (Some(c), Some(f)) if c.index > f.index => Some(f),
            (Some(_), None) => return Ok(()),
            (c, _) => c,
        };
        match committed {
            Some(log_id) => {
                self.write_meta(KEY_COMMITTED, &log_id)?;
                self.raise_watermark(log_id.index);
            }
            None => {
                self.meta.remove(KEY_COMMITTED).map_err(StoreError::sled("clear committed"))?;
            }
        }
        Ok(())
    }

    /// A committed index synced here: recorded in the watermark now and
    /// then, on a blocking thread (openraft calls this on its core loop).
    fn raise_watermark(&self, index: u64) {
        let Some(w) = &self.watermark else { return };
        if let Some(mark) = w.committed_due(index, std::time::Instant::now()) {
            let w = w.clone();
            tokio::task::spawn_blocking(move || {
                // The data dir cannot take a small file (full, read-only,
                // or this process is out of file descriptors): a leader in
                // that state must not go on deciding (crash-only).
                if let Err(e) = w.write_raised(mark) {
                    crate::fatal::storage_failed("writing the durable watermark", &e);
                }
            });
        }
    }

    /// Saves `vote` and makes it durable.
    async fn store_vote(&self, vote: &Vote<NodeId>) -> Result<(), StoreError> {
        self.write_meta(KEY_VOTE, vote)?;
        self.sync.sync_async().await?;
        if let Some(w) = &self.watermark {
            w.raise_vote(vote.leader_id().get_term())?;
        }
        *self.vote.lock().unwrap_or_else(|p| p.into_inner()) = Some(*vote);
        Ok(())
    }
}

/// The sled key of log index `index`: big-endian, so keys sort by index.
fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// Turns a bound on log indexes into a bound on sled keys.
fn key_bound(bound: Bound<&u64>) -> Bound<[u8; 8]> {
    match bound {
        Bound::Included(i) => Bound::Included(index_key(*i)),
        Bound::Excluded(i) => Bound::Excluded(index_key(*i)),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A failure reading log entries or the log state, for openraft.
fn read_logs(e: StoreError) -> StorageError<NodeId> {
    StorageIOError::read_logs(&e).into()
}

/// A failure writing, truncating or purging log entries, for openraft.
fn write_logs(e: StoreError) -> StorageError<NodeId> {
    StorageIOError::write_logs(&e).into()
}

/// A failure reading the vote, for openraft.
fn read_vote(e: StoreError) -> StorageError<NodeId> {
    StorageIOError::read_vote(&e).into()
}

/// A failure saving the vote, for openraft.
fn write_vote(e: StoreError) -> StorageError<NodeId> {
    StorageIOError::write_vote(&e).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    /// Entries with indexes in `range`, in order; absent ones are skipped.
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let keys = (key_bound(range.start_bound()), key_bound(range.end_bound()));
        self.read_entries(keys).map_err(read_logs)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    /// Last purged log id and last log id (the last purged if the log is empty).
    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        self.log_state().map_err(read_logs)
    }

    /// A clone sharing the same trees.
    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Saves the vote; durable before returning.
    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> StorageResult<()> {
        self.store_vote(vote).await.map_err(write_vote)
    }

    /// The last vote saved by `save_vote`.
    async fn read_vote(&mut self) -> StorageResult<Option<Vote<NodeId>>> {
        self.read_meta(KEY_VOTE).map_err(read_vote)
    }

    /// Records the committed log id (a restart hint; see `store_committed`).
    async fn save_committed(&mut self, committed: Option<LogId>) -> StorageResult<()> {
        self.store_committed(committed).await.map_err(write_logs)
    }

    /// The last committed log id saved by `save_committed`.
    async fn read_committed(&mut self) -> StorageResult<Option<LogId>> {
        self.read_meta(KEY_COMMITTED).map_err(read_logs)
    }

    /// Writes `entries` in one batch (readable on return) and hands
    /// `callback` to the flusher, which completes it once a sync covers the
    /// batch (group commit, or a sync right here when nothing is queued).
    /// A write failure goes to both.
    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let cuts = self.flushed.cuts();
        let (last, own) = match self.write_entries(entries) {
            Ok(Some(written)) => written,
            Ok(None) => {
                callback.log_io_completed(Ok(()));
                return Ok(());
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                return Err(write_logs(e));
            }
        };
        // The leader's own entries replicate while they sync (flushed.rs);
        // anything else is acknowledged only once synced.
        let job = if own {
            callback.log_io_completed(Ok(()));
            Job { callback: None, last, cuts }
        } else {
            Job { callback: Some(callback), last, cuts }
        };
        self.flusher.submit(job).map_err(|e| StorageIOError::write_logs(&e).into())
    }

    /// Deletes entries from `log_id.index` on; durable before returning.
    async fn truncate(&mut self, log_id: LogId) -> StorageResult<()> {
        self.truncate_from(log_id.index).await.map_err(write_logs)
    }

    /// Deletes entries up to `log_id.index` and records `log_id` as last
    /// purged, atomically; durable before returning.
    async fn purge(&mut self, log_id: LogId) -> StorageResult<()> {
        self.purge_upto(&log_id).await.map_err(write_logs)
    }
}

#[cfg(test)]
mod tests;
