//! The vocabulary every backend shares: the [`Transport`] trait (moving
//! bytes between a local buffer and a remote segment), [`RemoteSegment`]
//! (what the master tells a client about a replica's segment) and
//! [`Protocol`] (which backend a client asks for, parsed from its config).
//! The backends (`tcp`, `shm`) and the engine that picks one per target
//! (`engine`) build on this module; it depends on none of them.

use std::fmt;
use std::str::FromStr;

use mooncake_auth::capability::Capability;
use mooncake_segment::SegmentId;

use crate::error::TransferError;

/// A segment on some store node, as the master describes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteSegment {
    /// The segment's id, as the store node registered it.
    pub id: SegmentId,
    /// The store node's transfer server, `host:port`.
    pub endpoint: String,
    /// Identifies the store node's host; equal ids mean shared memory works.
    pub host_id: String,
    /// The segment's `/dev/shm` file, or empty if it has none.
    pub shm_path: String,
    /// Size of the segment in bytes.
    pub size_bytes: u64,
    /// The master's grant for the range being moved (one replica's: WRITE
    /// from PutStart, READ from GetReplicaList), sent with every TCP
    /// request; `None` and the store node refuses. Shared memory needs none.
    pub capability: Option<Capability>,
}

/// Moves bytes between a local buffer and a remote segment. Every backend
/// runs the conformance suite in [`crate::testing`].
pub trait Transport: Send + Sync {
    /// Writes `data` to `[offset, offset + data.len())` of `target`.
    fn write(
        &self,
        target: &RemoteSegment,
        offset: u64,
        data: &[u8],
    ) -> impl Future<Output = Result<(), TransferError>> + Send;

    /// Fills `buf` from `[offset, offset + buf.len())` of `target`.
    fn read(
        &self,
        target: &RemoteSegment,
        offset: u64,
        buf: &mut [u8],
    ) -> impl Future<Output = Result<(), TransferError>> + Send;
}

/// Which backend the engine uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Always TCP (the default).
    #[default]
    Tcp,
    /// Shared memory for same-host targets, TCP otherwise.
    Shm,
    /// RDMA: served by UCX where the build has the `ucx` feature (UCX uses
    /// verbs where a device is present), else TCP (with a warning).
    Rdma,
    /// UCX for reads of every segment this process does not serve itself
    /// (UCX picks its transports: verbs, TCP, shared memory); writes over
    /// TCP. Needs the `ucx` feature.
    Ucx,
    /// The fastest that works: shared memory on the same host, else TCP.
    Auto,
}

/// A protocol name that is not one of ours.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown transfer protocol {input:?}; expected one of: tcp, shm, rdma, ucx, auto")]
pub struct ParseProtocolError {
    /// The text given.
    pub input: String,
}

impl FromStr for Protocol {
    type Err = ParseProtocolError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        match input.trim().to_ascii_lowercase().as_str() {
            "tcp" => Ok(Protocol::Tcp),
            "shm" => Ok(Protocol::Shm),
            "rdma" => Ok(Protocol::Rdma),
            "ucx" => Ok(Protocol::Ucx),
            "auto" => Ok(Protocol::Auto),
            _ => Err(ParseProtocolError { input: input.to_owned() }),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Shm => "shm",
            Protocol::Rdma => "rdma",
            Protocol::Ucx => "ucx",
            Protocol::Auto => "auto",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_parses_and_names_the_choices() {
        assert_eq!("TCP".parse::<Protocol>(), Ok(Protocol::Tcp));
        assert_eq!(" auto ".parse::<Protocol>(), Ok(Protocol::Auto));
        let err = "infiniband".parse::<Protocol>().unwrap_err();
        assert!(err.to_string().contains("tcp, shm, rdma, ucx, auto"), "{err}");
        for p in [Protocol::Tcp, Protocol::Shm, Protocol::Rdma, Protocol::Ucx, Protocol::Auto] {
            assert_eq!(p.to_string().parse::<Protocol>(), Ok(p));
        }
    }
}
