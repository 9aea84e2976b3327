//! Typed identifiers shared by every crate that names segments or clients.
//! A `SegmentId` is not a `ClientId` is not a `u64`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Identifies one mounted segment cluster-wide. Chosen by the store node that
/// contributes the memory (random), so a retried mount is idempotent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SegmentId(pub u64);

/// Identifies one client process (an inference server or a store node).
/// Chosen by the client; a restarted client that keeps its id re-registers
/// its segments at once instead of waiting for the old registration to expire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClientId(pub u64);

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seg-{:016x}", self.0)
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client-{:016x}", self.0)
    }
}
