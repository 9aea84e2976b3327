//! The state machine as openraft sees it: applies committed entries to the
//! in-memory [`MetaState`], and persists it through snapshots.
//!
//! Persistence model: `apply` is in memory only; every snapshot is written to
//! its own file (`snapshot/raft_file.rs`) and synced before it is reported. At
//! start the state is rebuilt from the last snapshot and openraft re-applies
//! the committed log after it. Installing a snapshot decodes it fully, stores
//! it with one atomic rename, and only then swaps the in-memory state: a
//! crash at any point leaves either the old or the new state, never a mix.
//!
//! Building a snapshot clones the state under the state's read lock (its
//! large indexes are persistent maps, so the clone shares them) and makes
//! and encodes the image after letting go: apply waits microseconds.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, EntryPayload, OptionalSend, RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError,
    StoredMembership,
};

use crate::checkpoints::Checkpoints;
use crate::codec;
use crate::command::Response;
use crate::data_dir::durable::DataSync;
use crate::error::StoreError;
use crate::events::EventHistory;
use crate::fatal;
use crate::log::flushed::FlushedLog;
use crate::snapshot::raft_file::{SnapshotPath, StoredSnapshot};
use crate::state::{MetaState, StateImage, StateImageV1};
use crate::type_config::{Entry, LogId, NodeId, TypeConfig};

/// Newest version of the state image (the first 4 bytes of every
/// snapshot, LE). Format v1 is version 1; version 2 adds the tenants'
/// quotas, and is written only once some tenant has one (a state without
/// quotas is written as version 1, so masters of the previous release still
/// read it). A newer binary reads older versions; an older one refuses a
/// newer with a clear message. (Pre-release builds numbered their
/// images 1 to 6 too; their data dirs and snapshot files are refused before
/// any image is read: `data_dir/mod.rs`, `snapshot/export_file.rs`.)
/// The bytes of each version are pinned by `tests/t05_formats.rs`.
pub const SNAPSHOT_SCHEMA_VERSION: u32 = 3;

const SNAPSHOT_TREE: &str = "sm_snapshot";
/// A restored state (`--restore`): the base the log applies on top of until
/// the first snapshot replaces it.
const RESTORE_BASE_KEY: &[u8] = b"restore_base";

/// Shared read access to the applied state, for the master's read paths.
#[derive(Clone)]
pub struct StateReader(Arc<RwLock<MetaState>>);

impl StateReader {
    /// Runs `f` on the current applied state. Keep `f` short: apply waits.
    /// While `f` runs, [`in_state_read`] is true on this thread.
    pub fn read<R>(&self, f: impl FnOnce(&MetaState) -> R) -> R {
        let guard = self.0.read().unwrap_or_else(state_poisoned);
        let _depth = ReadDepth::enter();
        f(&guard)
    }
}

/// What a poisoned state lock means.
const STATE_LOCK_POISONED: &str =
    "the state lock is poisoned: a panic inside apply may have left the state half-applied";

/// Ends the process: the state lock is poisoned. Only a panic while the
/// lock was held for writing (inside apply or a snapshot install) poisons
/// it, and the state may then be half-applied: reading through the poison
/// would serve, and snapshot, a state no log produces. Release builds abort
/// on panic before this can happen; debug builds unwind and end here.
fn state_poisoned<G, T>(_: std::sync::PoisonError<G>) -> T {
    fatal::invariant_broken(STATE_LOCK_POISONED)
}

thread_local! {
    static STATE_READ_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether this thread is inside [`StateReader::read`]. Lets other locks
/// enforce their place in the lock order (the master's soft state must never
/// be locked inside a state read).
pub fn in_state_read() -> bool {
    STATE_READ_DEPTH.with(|d| d.get() > 0)
}

/// Marks a state read on this thread for as long as it lives (unwinding too).
struct ReadDepth;

impl ReadDepth {
    fn enter() -> ReadDepth {
        STATE_READ_DEPTH.with(|d| d.set(d.get() + 1));
        ReadDepth
    }
}

impl Drop for ReadDepth {
    fn drop(&mut self) {
        STATE_READ_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// openraft's state machine and snapshot builder over [`MetaState`].
#[derive(Clone)]
pub struct StateMachineStore {
    state: Arc<RwLock<MetaState>>,
    tree: sled::Tree,
    file: SnapshotPath,
    sync: DataSync,
    snapshot_seq: Arc<AtomicU64>,
    /// Size of the last snapshot built here: the next one's buffer.
    last_snapshot_bytes: Arc<AtomicU64>,
    /// How far the log is synced, when the leader's own entries may be
    /// applied before they are (`log/flushed.rs`): a snapshot is then stored only
    /// once every entry it contains is synced. `None`: every applied entry
    /// was synced first.
    flushed: Option<FlushedLog>,
    /// State hashes at fixed applied indices (`checkpoints.rs`).
    checkpoints: Arc<Checkpoints>,
    /// The object events of the recent entries, for watchers (`events.rs`).
    events: Arc<EventHistory>,
}

impl StateMachineStore {
    /// Takes `checkpoints` of the state as it applies.
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Self {
        self.checkpoints = Arc::new(checkpoints);
        self
    }

    /// This store's recent state checkpoints.
    pub fn checkpoints(&self) -> Arc<Checkpoints> {
        self.checkpoints.clone()
    }

    /// Keeps the events of the last `max_events` (about) for watchers.
    pub fn with_event_history(mut self, max_events: usize) -> Self {
        self.events = Arc::new(EventHistory::with_capacity(max_events));
        self
    }

    /// The object events of the entries this store applied recently.
    pub fn events(&self) -> Arc<EventHistory> {
        self.events.clone()
    }

    /// Rebuilds the state from the last snapshot of the data dir `dir`.
    pub fn open(
        db: &sled::Db,
        dir: &std::path::Path,
        sync: DataSync,
        flushed: Option<FlushedLog>,
    ) -> Result<Self, StoreError> {
        let tree = db.open_tree(SNAPSHOT_TREE).map_err(StoreError::sled("open sm_snapshot tree"))?;
        let file = SnapshotPath::in_dir(dir);
        let state = match file.read()? {
            Some(stored) => decode_state(&stored.meta, &stored.data)?,
            None => match tree.get(RESTORE_BASE_KEY).map_err(StoreError::sled("read restore base"))? {
                Some(data) => decode_image(&data)?,
                None => MetaState::default(),
            },
        };
        Ok(StateMachineStore {
            state: Arc::new(RwLock::new(state)),
            tree,
            file,
            sync,
            snapshot_seq: Arc::new(AtomicU64::new(0)),
            last_snapshot_bytes: Arc::new(AtomicU64::new(0)),
            flushed,
            checkpoints: Arc::new(Checkpoints::default()),
            events: Arc::new(EventHistory::default()),
        })
    }

    /// The state image (as in snapshots), the applied index and the state
    /// hash, taken atomically.
    pub fn export(&self) -> Result<(Vec<u8>, u64, u64), StoreError> {
        let state = self.state.read().unwrap_or_else(state_poisoned).clone();
        let data = encode_image(&state)?;
        Ok((data, state.last_applied.map(|l| l.index).unwrap_or(0), state.state_hash()))
    }

    /// Makes `image` the starting state of a pristine store (restore from a
    /// snapshot file). Refuses a store that already has state.
    pub fn seed_restore(&self, image: &[u8]) -> Result<(), StoreError> {
        // The new cluster starts its own log: keep the data, not the source's
        // Raft bookkeeping.
        let mut restored = decode_image(image)?;
        restored.last_applied = None;
        restored.last_membership = StoredMembership::default();
        let image = encode_image(&restored)?;
        let pristine = self.file.read()?.is_none()
            && self.tree.get(RESTORE_BASE_KEY).map_err(StoreError::sled("read restore base"))?.is_none()
            && self.state.read().unwrap_or_else(state_poisoned).last_applied.is_none();
        if !pristine {
            return Err(StoreError::Decode {
                what: "restore".into(),
                message: "the data directory already holds a cluster's state; restore into an empty --data-dir".into(),
            });
        }
        self.tree.insert(RESTORE_BASE_KEY, image).map_err(StoreError::sled("write restore base"))?;
        self.sync.sync()?;
        *self.write_state() = restored;
        Ok(())
    }

    /// The index of the last entry the state holds.
    pub fn applied_index(&self) -> u64 {
        self.state.read().unwrap_or_else(state_poisoned).last_applied.map_or(0, |l| l.index)
    }

    /// A handle for reading the applied state.
    pub fn reader(&self) -> StateReader {
        StateReader(self.state.clone())
    }

    /// The state for writing. While a snapshot is being encoded (a read
    /// lock held for up to a few hundred ms at millions of objects) the
    /// wait happens off the runtime's workers.
    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, MetaState> {
        match self.state.try_write() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(p)) => state_poisoned(p),
            Err(std::sync::TryLockError::WouldBlock) => {
                off_the_workers(|| self.state.write().unwrap_or_else(state_poisoned))
            }
        }
    }

    fn apply_one(state: &mut MetaState, entry: &Entry) -> Response {
        state.last_applied = Some(entry.log_id);
        match &entry.payload {
            EntryPayload::Blank => Response::Ok,
            EntryPayload::Normal(req) => state.apply(req),
            EntryPayload::Membership(m) => {
                state.last_membership = StoredMembership::new(Some(entry.log_id), m.clone());
                Response::Ok
            }
        }
    }

    /// Stores `stored` as the current snapshot and makes it durable.
    async fn persist(&self, stored: &StoredSnapshot) -> Result<(), StoreError> {
        off_the_workers(|| self.file.write(stored))
    }
}

/// Runs `f` (encoding a snapshot: seconds of CPU at millions of objects) on
/// a thread of its own at a lower CPU priority (nice +10), so that on a
/// busy machine apply, heartbeats and votes get the cores first; waits for
/// it without holding a runtime worker.
async fn in_background<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Result<R, StoreError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("snapshot-encode".into())
        .spawn(move || {
            // SAFETY: setpriority with PRIO_PROCESS and this thread's id
            // only raises this thread's nice value; it touches no memory.
            // Should it fail, the thread keeps the normal priority.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10);
            }
            let _ = tx.send(f());
        })
        .map_err(|source| StoreError::Io { op: "spawn the snapshot thread", path: String::new(), source })?;
    rx.await.map_err(|_| StoreError::Encode {
        what: "snapshot".into(),
        message: "the snapshot thread ended without an answer".into(),
    })
}

/// Runs `f`, CPU-heavy or I/O-heavy (decoding a whole state, writing a
/// snapshot file), without holding up the runtime: on a multi-thread runtime the
/// worker hands its other tasks to another thread first (at 1 M objects
/// this takes ~0.1–0.5 s, during which Raft heartbeats and votes on this
/// worker would otherwise wait and followers start elections).
fn off_the_workers<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Encodes the state image behind a 4-byte schema version.
pub fn encode_image(state: &MetaState) -> Result<Vec<u8>, StoreError> {
    encode_image_into(state, Vec::new())
}

/// [`encode_image`] into `buf` (a capacity sized from the last snapshot
/// saves regrowing a buffer of hundreds of MB).
fn encode_image_into(state: &MetaState, mut buf: Vec<u8>) -> Result<Vec<u8>, StoreError> {
    buf.extend_from_slice(&state.image_schema().to_le_bytes());
    state.encode_image(buf)
}

/// Decodes snapshot data; the snapshot's metadata is authoritative for the
/// applied log id and membership.
fn decode_state(meta: &SnapshotMeta<NodeId, BasicNode>, data: &[u8]) -> Result<MetaState, StoreError> {
    let mut state = decode_image(data)?;
    state.last_applied = meta.last_log_id;
    state.last_membership = meta.last_membership.clone();
    Ok(state)
}

/// Decodes a state image written by [`encode_image`] (any supported version).
pub fn decode_image(data: &[u8]) -> Result<MetaState, StoreError> {
    let Some((version, body)) = data.split_first_chunk::<4>() else {
        return Err(StoreError::Decode { what: "snapshot".into(), message: "shorter than its header".into() });
    };
    let image = match u32::from_le_bytes(*version) {
        SNAPSHOT_SCHEMA_VERSION => codec::decode::<StateImage>("state image", body)?,
        // Schema 2: before dedicated segments.
        2 => {
            let (v1, quotas) = codec::decode::<(StateImageV1, Vec<(String, u64)>)>("state image (schema 2)", body)?;
            StateImage::join(v1, (quotas, Vec::new()))
        }
        // Schema 1: before tenants' quotas.
        1 => codec::decode::<StateImageV1>("state image (schema 1)", body)?.into(),
        found => return Err(StoreError::SchemaVersion { found, supported: SNAPSHOT_SCHEMA_VERSION }),
    };
    MetaState::from_image(image)
}

fn snapshot_err(e: StoreError) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(None, &e).into()
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let began = std::time::Instant::now();
        let state = self.state.clone();
        let size_hint = self.last_snapshot_bytes.load(Ordering::Relaxed) as usize;
        let (data, last_applied, membership, locked) = in_background(move || {
            // Only the clone holds the lock (its large indexes are shared,
            // not copied: `state/objects.rs`); the image is made after.
            let copy = state.read().unwrap_or_else(state_poisoned).clone();
            let locked = began.elapsed();
            let buf = Vec::with_capacity(size_hint + size_hint / 8);
            encode_image_into(&copy, buf).map(|data| (data, copy.last_applied, copy.last_membership.clone(), locked))
        })
        .await
        .and_then(|encoded| encoded)
        .map_err(snapshot_err)?;
        let encoded = began.elapsed();
        let start = std::time::Instant::now();
        if let Some(flushed) = &self.flushed {
            flushed.wait_for(last_applied.map(|l| l.index).unwrap_or(0)).await;
        }
        let seq = self.snapshot_seq.fetch_add(1, Ordering::Relaxed);
        let snapshot_id = match last_applied {
            Some(id) => format!("{}-{}-{seq}", id.leader_id, id.index),
            None => format!("none-{seq}"),
        };
        let meta = SnapshotMeta { last_log_id: last_applied, last_membership: membership, snapshot_id };
        let stored = StoredSnapshot { meta, data };
        self.persist(&stored).await.map_err(snapshot_err)?;
        self.last_snapshot_bytes.store(stored.data.len() as u64, Ordering::Relaxed);
        self.sync.observer().snapshot_built(start.elapsed(), stored.data.len());
        tracing::info!(
            index = last_applied.map_or(0, |l| l.index),
            bytes = stored.data.len(),
            state_lock_us = locked.as_micros() as u64,
            encode_ms = (encoded - locked).as_millis() as u64,
            store_ms = start.elapsed().as_millis() as u64,
            "snapshot built"
        );
        Ok(Snapshot { meta: stored.meta, snapshot: Box::new(Cursor::new(stored.data)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>> {
        let state = self.state.read().unwrap_or_else(state_poisoned);
        Ok((state.last_applied, state.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Each entry's commands are checked as they free and allocate, and
        // in debug builds the whole state after each entry (`MetaState::apply`).
        let mut state = self.write_state();
        state.record_events(true);
        let checkpoints = &self.checkpoints;
        Ok(entries
            .into_iter()
            .map(|e| {
                let answer = Self::apply_one(&mut state, &e);
                self.events.applied(e.log_id.index, state.take_events());
                if checkpoints.due(e.log_id.index) {
                    // An O(1) clone (shared indexes); hashed off this path.
                    checkpoints.take(e.log_id.index, state.clone());
                }
                answer
            })
            .collect())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let start = std::time::Instant::now();
        let data = snapshot.into_inner();
        let new_state = off_the_workers(|| decode_state(meta, &data))
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let stored = StoredSnapshot { meta: meta.clone(), data };
        self.persist(&stored).await.map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        *self.write_state() = new_state;
        // What came between the last entry applied here and the snapshot's
        // is not known here: watchers behind it resync.
        self.events.installed(meta.last_log_id.map_or(0, |l| l.index));
        // The snapshot is stored and synced: the state it holds is durable.
        if let (Some(last), Some(flushed)) = (meta.last_log_id, &self.flushed) {
            flushed.advance(last);
        }
        self.sync.observer().snapshot_installed(start.elapsed(), stored.data.len());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let stored = off_the_workers(|| self.file.read()).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(stored.map(|s| Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Membership};

    use super::*;

    /// The body of the current snapshot (`snapshot/raft_file.rs`): openraft's
    /// metadata, then the image bytes (whose own encoding
    /// `tests/t05_formats.rs` pins). Changing it, or the tree and key of the
    /// restore base, needs a new `DATA_DIR_FORMAT_VERSION`.
    #[test]
    fn the_stored_snapshot_record_is_pinned() {
        assert_eq!((SNAPSHOT_TREE, RESTORE_BASE_KEY), ("sm_snapshot", &b"restore_base"[..]));
        let nodes = std::collections::BTreeMap::from([(1, BasicNode::new("n1"))]);
        let membership = Membership::new(vec![std::collections::BTreeSet::from([1])], nodes);
        let log_id = openraft::LogId::new(CommittedLeaderId::new(3, 1), 9);
        let meta = SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::new(Some(log_id), membership),
            snapshot_id: "3-1-9-0".into(),
        };
        let stored = StoredSnapshot { meta, data: vec![3, 0, 0, 0, 0xab] };
        let bytes = codec::encode("snapshot", &stored).unwrap();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex, "01030109010301090101010101026e3107332d312d392d300503000000ab",
            "the stored snapshot record changed; see docs/STATE_MACHINE.md, \"Changing the formats\""
        );
        let back: StoredSnapshot = codec::decode("snapshot", &bytes).unwrap();
        assert_eq!((back.meta, back.data), (stored.meta, stored.data));
    }

    /// A panic while apply holds the state lock (debug builds unwind)
    /// poisons it; the next reader ends the process instead of serving the
    /// half-applied state. Shown in a child process (this test binary,
    /// re-run on just this test).
    #[test]
    fn a_poisoned_state_lock_ends_the_process() {
        const CHILD: &str = "MOONCAKE_TEST_POISON_CHILD";
        if std::env::var_os(CHILD).is_some() {
            let state = Arc::new(RwLock::new(MetaState::default()));
            let writer = state.clone();
            let panicked = std::thread::spawn(move || {
                let _guard = writer.write().unwrap();
                panic!("a panic inside apply");
            })
            .join();
            assert!(panicked.is_err() && state.is_poisoned());
            StateReader(state).read(|_| ());
            unreachable!("a poisoned state lock must end the process");
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args(["--exact", "state_machine::tests::a_poisoned_state_lock_ends_the_process", "--nocapture"])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(fatal::EXIT_INVARIANT_BROKEN), "{stderr}");
        let line = fatal::invariant_broken_line(STATE_LOCK_POISONED);
        assert!(stderr.lines().any(|l| l == line), "no line {line:?} in:\n{stderr}");
    }
}
