//! Opening a master's data directory: one sled database holding the log, the
//! vote and the state-machine snapshot, synced through one [`DataSync`].

pub(crate) mod durable;
pub(crate) mod watermark;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::checkpoints::Checkpoints;
use crate::data_dir::durable::DataSync;
use crate::error::StoreError;
use crate::log::LogStore;
use crate::observer::{NoopObserver, StoreObserver};
use crate::state_machine::StateMachineStore;

/// How to open the store.
#[derive(Clone)]
pub struct StoreOptions {
    pub dir: PathBuf,
    /// fdatasync before acknowledging durability. Only tests and the chaos
    /// harness's deliberately broken build turn this off.
    pub fsync: bool,
    /// Told about fsync latency and snapshot builds.
    pub observer: Arc<dyn StoreObserver>,
    /// The master this store belongs to: as leader, its own entries are
    /// synced while they replicate (`log/flushed.rs`). `None`: every append
    /// waits for its sync.
    pub node_id: Option<crate::type_config::NodeId>,
    /// State checkpoints: the state hash after every `checkpoint_every`-th
    /// applied index (0: none), for masters to compare (`checkpoints.rs`).
    pub checkpoint_every: u64,
    /// DEVELOPMENT ONLY: alter this store's checkpoint hashes, so that the
    /// masters' audit must find it diverged.
    pub dev_unsafe_tampered_checkpoints: bool,
    /// Object events kept in memory for watchers (`events.rs`).
    pub event_history: usize,
}

impl StoreOptions {
    pub fn new(dir: impl AsRef<Path>) -> Self {
        StoreOptions {
            dir: dir.as_ref().to_path_buf(),
            fsync: true,
            observer: Arc::new(NoopObserver),
            node_id: None,
            checkpoint_every: 0,
            dev_unsafe_tampered_checkpoints: false,
            event_history: crate::events::HISTORY_EVENTS_MAX,
        }
    }

    pub fn with_observer(mut self, observer: Arc<dyn StoreObserver>) -> Self {
        self.observer = observer;
        self
    }
}

/// Version of the data directory's layout (sled trees and their encodings,
/// the snapshot file beside them). Format v1 is version 1; from then on a
/// newer binary reads older layouts (upgrading them) or refuses with a
/// clear message, and an older binary refuses a newer layout.
pub const DATA_DIR_FORMAT_VERSION: u32 = 1;
const FORMAT_TREE: &str = "mooncake_meta";
const FORMAT_KEY: &[u8] = b"format_version";
/// The key pre-release builds kept their layout version under: a data dir
/// holding it and no format version was never written by format v1.
const PRE_RELEASE_KEY: &[u8] = b"schema_version";

/// Checks (and on a new directory writes) the layout version.
fn check_format(db: &sled::Db, dir: &Path) -> Result<(), StoreError> {
    let tree = db.open_tree(FORMAT_TREE).map_err(StoreError::sled("open mooncake_meta tree"))?;
    match tree.get(FORMAT_KEY).map_err(StoreError::sled("read format version"))? {
        Some(v) => {
            let found = v.as_ref().try_into().map(u32::from_le_bytes).map_err(|_| StoreError::Decode {
                what: "format version".into(),
                message: format!("{} bytes, expected 4", v.len()),
            })?;
            if found > DATA_DIR_FORMAT_VERSION {
                return Err(StoreError::SchemaVersion { found, supported: DATA_DIR_FORMAT_VERSION });
            }
            Ok(())
        }
        None if tree.contains_key(PRE_RELEASE_KEY).map_err(StoreError::sled("read format version"))? => {
            Err(StoreError::PreRelease { what: format!("the data dir {}", dir.display()) })
        }
        None => {
            tree.insert(FORMAT_KEY, &DATA_DIR_FORMAT_VERSION.to_le_bytes())
                .map_err(StoreError::sled("write format version"))?;
            Ok(())
        }
    }
}

/// Removes the snapshots sled began and never finished
/// (`snap.<lsn>.generating`): sled writes a snapshot to that name, syncs
/// it and renames it, so such a file is only ever a partial write (a crash,
/// or a disk that filled up mid-write). sled 0.34 would read it at start
/// and refuse the whole data dir as corrupt; without it, sled recovers from
/// its previous snapshot and the log, as after any crash.
fn remove_unfinished_sled_snapshots(dir: &Path) -> Result<(), StoreError> {
    let io = |op, source| StoreError::Io { op, path: dir.display().to_string(), source };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return Err(io("list data dir", e)),
    };
    let mut removed = false;
    for entry in entries {
        let entry = entry.map_err(|e| io("list data dir", e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("snap.") && name.ends_with(".generating") {
            std::fs::remove_file(entry.path()).map_err(|e| io("remove an unfinished sled snapshot", e))?;
            tracing::warn!(file = %entry.path().display(), "removed a sled snapshot that was never finished (a crash or a full disk during its write)");
            removed = true;
        }
    }
    if removed {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io("sync data dir", e))?;
    }
    Ok(())
}

/// Opens (or creates) the store in `opts.dir` and recovers its state.
pub fn open_store(opts: &StoreOptions) -> Result<(LogStore, StateMachineStore), StoreError> {
    std::fs::create_dir_all(&opts.dir).map_err(|source| StoreError::Io {
        op: "create data dir",
        path: opts.dir.display().to_string(),
        source,
    })?;
    remove_unfinished_sled_snapshots(&opts.dir)?;
    let db = sled::Config::new()
        .path(&opts.dir)
        .mode(sled::Mode::HighThroughput)
        .open()
        .map_err(|source| StoreError::SledOpen { dir: opts.dir.display().to_string(), source })?;
    check_format(&db, &opts.dir)?;
    let sync = DataSync::open(db.clone(), &opts.dir, opts.fsync, opts.observer.clone())?;
    let mut log = LogStore::open(&db, sync.clone())?.with_watermark(&opts.dir)?;
    if let Some(id) = opts.node_id {
        log = log.with_own_id(id)?;
    }
    let sm = StateMachineStore::open(&db, &opts.dir, sync, opts.node_id.map(|_| log.flushed()))?
        .with_checkpoints(Checkpoints::new(opts.checkpoint_every, opts.dev_unsafe_tampered_checkpoints))
        .with_event_history(opts.event_history);
    // Entries are purged only once a snapshot holds them: a snapshot older
    // than the purge point (deleted, or replaced by an older copy) cannot be
    // caught up from this log.
    let purged = log.last_purged()?.map_or(0, |l| l.index);
    let applied = sm.applied_index();
    if purged > applied {
        return Err(StoreError::SnapshotBehindLog { dir: opts.dir.display().to_string(), purged, applied });
    }
    Ok((log, sm))
}
