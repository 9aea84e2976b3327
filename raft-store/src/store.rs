//! Opening a master's data directory: one sled database holding the log, the
//! vote and the state-machine snapshot, synced through one [`DataSync`].

use std::path::{Path, PathBuf};

use crate::durable::DataSync;
use crate::error::StoreError;
use crate::log_store::LogStore;
use crate::sm_store::StateMachineStore;

/// How to open the store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub dir: PathBuf,
    /// fdatasync before acknowledging durability. Only tests and the chaos
    /// harness's deliberately broken build turn this off.
    pub fsync: bool,
}

impl StoreOptions {
    pub fn new(dir: impl AsRef<Path>) -> Self {
        StoreOptions { dir: dir.as_ref().to_path_buf(), fsync: true }
    }
}

/// Opens (or creates) the store in `opts.dir` and recovers its state.
pub fn open_store(opts: &StoreOptions) -> Result<(LogStore, StateMachineStore), StoreError> {
    std::fs::create_dir_all(&opts.dir).map_err(|source| StoreError::Io {
        op: "create data dir",
        path: opts.dir.display().to_string(),
        source,
    })?;
    let db = sled::Config::new()
        .path(&opts.dir)
        .mode(sled::Mode::HighThroughput)
        .open()
        .map_err(StoreError::sled("open"))?;
    let sync = DataSync::open(db.clone(), &opts.dir, opts.fsync)?;
    let log = LogStore::open(&db, sync.clone())?;
    let sm = StateMachineStore::open(&db, sync)?;
    Ok((log, sm))
}
