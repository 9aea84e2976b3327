//! Test support, behind the `testing` feature (and in this crate's own unit
//! tests): builders of the values commands carry, so that tests, examples
//! and benches declare a segment in one line instead of copying the struct.
//!
//! ```
//! use mooncake_raft_store::Tier;
//! use mooncake_raft_store::testing::{SegmentSpecExt, segment};
//!
//! let disk = segment(9, 1 << 20, "host-a").ssd();
//! assert_eq!((disk.endpoint.as_str(), disk.tier), ("host-a:7000", Tier::Ssd));
//! let shared = segment(1, 1 << 20, "host-a").shm("/dev/shm/seg-a");
//! assert_eq!(shared.shm_path, "/dev/shm/seg-a");
//! ```
//!
//! Never used by a binary: nothing here is part of the replicated formats.

use mooncake_segment::SegmentId;

use crate::command::{SegmentSpec, Tier};

/// A memory segment `id` of `size_bytes` on `host`: endpoint
/// `"{host}:7000"`, zone `"zone-1"`, tier [`Tier::Dram`], no shared-memory
/// file. Change a field with [`SegmentSpecExt`].
pub fn segment(id: u64, size_bytes: u64, host: &str) -> SegmentSpec {
    SegmentSpec {
        id: SegmentId(id),
        size_bytes,
        endpoint: format!("{host}:7000"),
        host_id: host.to_string(),
        zone: "zone-1".to_string(),
        tier: Tier::Dram,
        shm_path: String::new(),
    }
}

/// Builder steps on a [`SegmentSpec`] made by [`segment`]: each sets one
/// field and returns the spec.
pub trait SegmentSpecExt {
    /// On a disk ([`Tier::Ssd`]).
    fn ssd(self) -> SegmentSpec;
    /// On `tier`.
    fn tier(self, tier: Tier) -> SegmentSpec;
    /// Backed by the shared-memory file `path` on its host.
    fn shm(self, path: &str) -> SegmentSpec;
    /// Served from the transfer endpoint `endpoint` ("host:port").
    fn endpoint(self, endpoint: impl Into<String>) -> SegmentSpec;
    /// In zone `zone` ("" for none).
    fn zone(self, zone: impl Into<String>) -> SegmentSpec;
}

impl SegmentSpecExt for SegmentSpec {
    fn ssd(self) -> SegmentSpec {
        self.tier(Tier::Ssd)
    }
    fn tier(self, tier: Tier) -> SegmentSpec {
        SegmentSpec { tier, ..self }
    }
    fn shm(self, path: &str) -> SegmentSpec {
        SegmentSpec { shm_path: path.to_string(), ..self }
    }
    fn endpoint(self, endpoint: impl Into<String>) -> SegmentSpec {
        SegmentSpec { endpoint: endpoint.into(), ..self }
    }
    fn zone(self, zone: impl Into<String>) -> SegmentSpec {
        SegmentSpec { zone: zone.into(), ..self }
    }
}
