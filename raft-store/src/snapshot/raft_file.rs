//! The current Raft snapshot, in a file of its own in the data dir
//! (`raft-snapshot`), not in sled: a snapshot of a million objects is
//! ~150 MB, and stored in sled it made the next log fdatasync write all of
//! it, stalling every commit for up to a second (docs/PERFORMANCE.md).
//!
//! Layout (little-endian): magic `MCRAFTS1` (8), body length (8), crc32c of
//! the body (4), then the body: openraft's snapshot metadata and the state
//! image, as [`StoredSnapshot`] encodes them. Written to a temporary file,
//! synced, renamed over the old one, and the directory synced: a crash
//! leaves the old snapshot or the new one. A file whose length or checksum
//! does not match is refused, never read as an older state.
//!
//! Data dirs of schema version 1 kept the snapshot in sled's `sm_snapshot`
//! tree; it is still read from there until the first snapshot is written
//! here (which removes it).

use std::io::Write;
use std::path::{Path, PathBuf};

use openraft::{BasicNode, SnapshotMeta};
use serde::{Deserialize, Serialize};

use crate::codec;
use crate::data_dir::durable::replace_file_durably;
use crate::error::StoreError;
use crate::type_config::NodeId;

/// A stored snapshot: openraft's metadata and the encoded state image.
#[derive(Serialize, Deserialize)]
pub(crate) struct StoredSnapshot {
    pub(crate) meta: SnapshotMeta<NodeId, BasicNode>,
    pub(crate) data: Vec<u8>,
}

const MAGIC: &[u8; 8] = b"MCRAFTS1";
const HEADER_BYTES: usize = 8 + 8 + 4;
/// The file's name in the data dir.
pub const FILE_NAME: &str = "raft-snapshot";
/// Bytes written between two fdatasyncs of a snapshot being stored: the
/// device's queue never holds more than this much of it, so the log's own
/// fdatasyncs meanwhile wait behind little.
const SYNC_EVERY_BYTES: usize = 8 << 20;

/// Where the current snapshot lives.
#[derive(Clone, Debug)]
pub struct SnapshotPath {
    path: PathBuf,
}

impl SnapshotPath {
    pub fn in_dir(dir: &Path) -> Self {
        SnapshotPath { path: dir.join(FILE_NAME) }
    }

    fn io(&self, op: &'static str) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
        move |source| StoreError::Io { op, path: self.path.display().to_string(), source }
    }

    fn damaged(&self, what: String) -> StoreError {
        StoreError::Decode {
            what: format!("snapshot {} in the data dir", self.path.display()),
            message: format!(
                "{what}. The file is damaged: do not start this master from it; replace the master under a new id \
                 (start a fresh one with --join, `mooncake member add`, then `mooncake member remove` this id; \
                 docs/OPERATIONS.md, Membership)"
            ),
        }
    }

    /// The stored snapshot, or `None` when there is no file.
    pub fn read(&self) -> Result<Option<StoredSnapshot>, StoreError> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io("read snapshot")(e)),
        };
        if bytes.len() < HEADER_BYTES || &bytes[..8] != MAGIC {
            return Err(self.damaged(format!("{} bytes without a snapshot header", bytes.len())));
        }
        let len = bytes[8..16].try_into().map(u64::from_le_bytes).unwrap_or(u64::MAX);
        let crc = bytes[16..20].try_into().map(u32::from_le_bytes).unwrap_or(0);
        let body = &bytes[HEADER_BYTES..];
        if body.len() as u64 != len {
            return Err(self.damaged(format!("the body is {} bytes, its header says {len}", body.len())));
        }
        if mooncake_segment::checksum::crc32c(body) != crc {
            return Err(self.damaged("the body does not match its checksum".into()));
        }
        codec::decode("stored snapshot", body).map(Some)
    }

    /// Replaces the stored snapshot with `stored`, durably. The body is
    /// written as the encoding of `stored` would be (the metadata, the
    /// image's length, the image) without copying the image into one
    /// buffer first: at 10 M objects it is ~580 MB.
    pub fn write(&self, stored: &StoredSnapshot) -> Result<(), StoreError> {
        let mut prefix = codec::encode("snapshot metadata", &stored.meta)?;
        prefix.extend(codec::encode("snapshot length", &(stored.data.len() as u64))?);
        let body_len = prefix.len() + stored.data.len();
        let crc = mooncake_segment::checksum::crc32c_combine(
            mooncake_segment::checksum::crc32c(&prefix),
            mooncake_segment::checksum::crc32c(&stored.data),
            stored.data.len(),
        );
        let mut header = Vec::with_capacity(HEADER_BYTES + prefix.len());
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&(body_len as u64).to_le_bytes());
        header.extend_from_slice(&crc.to_le_bytes());
        header.extend_from_slice(&prefix);
        replace_file_durably(&self.path, |f| {
            f.write_all(&header)?;
            for chunk in stored.data.chunks(SYNC_EVERY_BYTES) {
                f.write_all(chunk)?;
                f.sync_data()?;
            }
            Ok(())
        })
        .map_err(self.io("store snapshot"))
    }
}

#[cfg(test)]
mod tests {
    use openraft::SnapshotMeta;

    use super::*;

    fn stored(data: Vec<u8>) -> StoredSnapshot {
        StoredSnapshot { meta: SnapshotMeta::default(), data }
    }

    fn refusal(at: &SnapshotPath) -> String {
        match at.read() {
            Err(e) => e.to_string(),
            Ok(found) => panic!("a damaged snapshot was read (found one: {})", found.is_some()),
        }
    }

    #[test]
    fn the_body_is_the_encoding_of_the_stored_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let at = SnapshotPath::in_dir(dir.path());
        for len in [0, 1, 127, 128, 300_000] {
            let s = stored((0..len).map(|i| i as u8).collect());
            at.write(&s).unwrap();
            let file = std::fs::read(dir.path().join(FILE_NAME)).unwrap();
            assert_eq!(file[HEADER_BYTES..], codec::encode("snapshot", &s).unwrap()[..], "{len} bytes");
        }
    }

    #[test]
    fn a_written_snapshot_reads_back_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let at = SnapshotPath::in_dir(dir.path());
        assert!(at.read().unwrap().is_none(), "no file: no snapshot");
        at.write(&stored(vec![7; 100_000])).unwrap();
        at.write(&stored(vec![9; 50_000])).unwrap();
        assert_eq!(at.read().unwrap().unwrap().data, vec![9; 50_000], "the last write wins");
        assert!(!dir.path().join("raft-snapshot.tmp").exists());

        let path = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let e = refusal(&at);
        assert!(e.contains("checksum") && e.contains("data dir") && e.contains("member add"), "{e}");

        bytes.truncate(mid);
        std::fs::write(&path, &bytes).unwrap();
        let e = refusal(&at);
        assert!(e.contains("header says"), "{e}");
    }
}
