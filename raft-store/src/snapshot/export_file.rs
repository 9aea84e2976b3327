//! The snapshot file of `mooncake snapshot save` and `mooncake-master
//! --restore`: a self-describing, checksummed copy of the replicated state.
//!
//! Layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `MCSNAPf1` (format v1; pre-release builds wrote `MCSNAPv1`) |
//! | 4 | state schema version (`SNAPSHOT_SCHEMA_VERSION` of the writer) |
//! | 8 | applied log index on the source cluster |
//! | 8 | state hash on the source cluster |
//! | 8 | body length |
//! | 4 | crc32c of the body |
//! | n | body: the state image exactly as stored in Raft snapshots |

use crate::error::StoreError;
use crate::state::MetaState;
use crate::state_machine::{SNAPSHOT_SCHEMA_VERSION, decode_image};

const MAGIC: &[u8; 8] = b"MCSNAPf1";
/// The magic of the snapshot files of pre-release builds.
const PRE_RELEASE_MAGIC: &[u8; 8] = b"MCSNAPv1";
const HEADER_BYTES: usize = 8 + 4 + 8 + 8 + 8 + 4;

/// What a snapshot file says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotFileInfo {
    pub schema_version: u32,
    pub applied_index: u64,
    pub state_hash: u64,
    pub body_bytes: u64,
}

fn bad(message: impl Into<String>) -> StoreError {
    StoreError::Decode { what: "snapshot file".into(), message: message.into() }
}

/// Builds a snapshot file from a state image (`body`).
pub fn encode_snapshot_file(body: &[u8], applied_index: u64, state_hash: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&SNAPSHOT_SCHEMA_VERSION.to_le_bytes());
    out.extend_from_slice(&applied_index.to_le_bytes());
    out.extend_from_slice(&state_hash.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c_of(body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Checks a snapshot file and returns its header and body. Refuses files of
/// another kind, a newer schema, a wrong length or a bad checksum.
pub fn decode_snapshot_file(bytes: &[u8]) -> Result<(SnapshotFileInfo, &[u8]), StoreError> {
    if bytes.get(..8) == Some(&PRE_RELEASE_MAGIC[..]) {
        return Err(StoreError::PreRelease { what: "this snapshot file".into() });
    }
    if bytes.len() < HEADER_BYTES || &bytes[..8] != MAGIC {
        return Err(bad("not a mooncake snapshot file (bad magic); make one with `mooncake snapshot save`"));
    }
    let u64_at = |at: usize| bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let u32_at = |at: usize| bytes.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    let header = (u32_at(8), u64_at(12), u64_at(20), u64_at(28), u32_at(36));
    let (Some(schema_version), Some(applied_index), Some(state_hash), Some(body_bytes), Some(crc)) = header else {
        return Err(bad("truncated header"));
    };
    if schema_version > SNAPSHOT_SCHEMA_VERSION {
        return Err(StoreError::SchemaVersion { found: schema_version, supported: SNAPSHOT_SCHEMA_VERSION });
    }
    let body = &bytes[HEADER_BYTES..];
    if body.len() as u64 != body_bytes {
        return Err(bad(format!("body is {} bytes, header says {body_bytes}; the file is truncated", body.len())));
    }
    if crc32c_of(body) != crc {
        return Err(bad("checksum mismatch; the file is corrupt"));
    }
    Ok((SnapshotFileInfo { schema_version, applied_index, state_hash, body_bytes }, body))
}

/// Decodes a snapshot file all the way to a state, verifying its hash.
pub fn load_snapshot_file(bytes: &[u8]) -> Result<(SnapshotFileInfo, MetaState), StoreError> {
    let (info, body) = decode_snapshot_file(bytes)?;
    let state = decode_image(body)?;
    if state.state_hash() != info.state_hash {
        return Err(bad(format!(
            "state hash {:016x} differs from the recorded {:016x}",
            state.state_hash(),
            info.state_hash
        )));
    }
    Ok((info, state))
}

fn crc32c_of(body: &[u8]) -> u32 {
    mooncake_segment::checksum::crc32c(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c_of(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn damaged_files_are_refused_with_a_reason() {
        let body = crate::state_machine::encode_image(&MetaState::default()).unwrap();
        let good = encode_snapshot_file(&body, 7, MetaState::default().state_hash());
        let (info, _) = load_snapshot_file(&good).unwrap();
        assert_eq!(info.applied_index, 7);
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(decode_snapshot_file(&flipped).unwrap_err().to_string().contains("checksum"));
        assert!(decode_snapshot_file(&good[..good.len() - 1]).unwrap_err().to_string().contains("truncated"));
        assert!(decode_snapshot_file(b"garbage").unwrap_err().to_string().contains("magic"));
        let mut newer = good.clone();
        newer[8..12].copy_from_slice(&(SNAPSHOT_SCHEMA_VERSION + 1).to_le_bytes());
        assert!(decode_snapshot_file(&newer).unwrap_err().to_string().contains("schema version"));
    }
}
