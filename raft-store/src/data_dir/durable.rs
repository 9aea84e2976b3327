//! Making sled's writes durable. sled 0.34's `flush()` ends in
//! `sync_file_range`, which does not survive a power cut; wherever we promise
//! durability (vote, appended entries, purge marker, snapshots) we flush sled
//! and then `fdatasync` its data file ourselves.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StoreError;
use crate::observer::StoreObserver;

/// Flushes a sled database to stable storage. Cheap to clone.
#[derive(Clone)]
pub struct DataSync {
    db: sled::Db,
    inner: Arc<Inner>,
}

struct Inner {
    file: Option<File>,
    path: PathBuf,
    observer: Arc<dyn StoreObserver>,
}

impl DataSync {
    /// `dir` is the directory sled was opened at. `fsync = false` is for
    /// throw-away test databases (and the chaos harness's deliberately broken
    /// build); production always syncs.
    pub fn open(db: sled::Db, dir: &Path, fsync: bool, observer: Arc<dyn StoreObserver>) -> Result<Self, StoreError> {
        let path = dir.join("db");
        let file = if fsync {
            Some(File::open(&path).map_err(|source| StoreError::Io {
                op: "open sled data file for fdatasync",
                path: path.display().to_string(),
                source,
            })?)
        } else {
            None
        };
        Ok(DataSync { db, inner: Arc::new(Inner { file, path, observer }) })
    }

    /// Returns once everything written to the database before the call is on
    /// stable storage.
    pub fn sync(&self) -> Result<(), StoreError> {
        let start = std::time::Instant::now();
        self.db.flush().map_err(StoreError::sled("flush"))?;
        if let Some(file) = &self.inner.file {
            file.sync_data().map_err(|source| StoreError::Io {
                op: "fdatasync",
                path: self.inner.path.display().to_string(),
                source,
            })?;
        }
        self.inner.observer.synced(start.elapsed());
        Ok(())
    }

    /// The observer of this store's costs.
    pub fn observer(&self) -> &Arc<dyn StoreObserver> {
        &self.inner.observer
    }

    /// The same as [`sync`](Self::sync) on a blocking thread, for async callers.
    pub async fn sync_async(&self) -> Result<(), StoreError> {
        let this = self.clone();
        match tokio::task::spawn_blocking(move || this.sync()).await {
            Ok(r) => r,
            Err(e) => Err(StoreError::Io {
                op: "fdatasync task",
                path: self.inner.path.display().to_string(),
                source: std::io::Error::other(e.to_string()),
            }),
        }
    }
}

/// Replaces `path` with `bytes` durably (see [`replace_file_durably`]).
/// For small files written rarely.
pub fn write_file_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    replace_file_durably(path, |f| f.write_all(bytes))
}

/// Replaces `path` with what `write` writes, durably: a temporary file
/// written, synced and renamed over it, then the directory synced (a crash
/// leaves the old or the new content, never a mix).
pub fn replace_file_durably(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    write(&mut f)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
