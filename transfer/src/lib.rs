//! The transfer engine: moves object bytes between a local buffer and a
//! remote segment (TCP lanes, shared memory, and one-sided UCX reads behind
//! the `ucx` feature).
//!
//! Key types: [`TransferEngine`] (picks a backend per target), the
//! [`Transport`] trait with [`TcpTransport`] and [`ShmTransport`], the store
//! node side [`TransferServer`] serving a [`SegmentRegistry`] of memory and
//! disk segments ([`Backing`]) (with its
//! connection limits in [`ServerConfig`]), [`ShmOwner`] (a store node's claim
//! on its `/dev/shm` files, and the removal of a dead predecessor's), and the
//! wire format in [`frame`]. [`testing`] is the conformance suite every transport
//! runs. The server serves a TCP request only under a capability the masters
//! issued (`mooncake_auth::capability`; keys in the registry). Depends only
//! on `segment`, `auth` and `tls`; knows nothing of Raft or the masters.
//!
//! Layout: `transport` is the vocabulary every backend shares ([`Transport`],
//! [`RemoteSegment`], [`Protocol`]); `engine` is [`TransferEngine`] and its
//! route choice (and batched reads); the routes are `local` (this process's
//! own segments, no socket), `shm` and `tcp` (`tcp/client`, and the store
//! node's `tcp/server`); `access` holds the admission checks the server and
//! the local route share; `registry` the segments a store node serves.

mod access;
mod device;
mod engine;
mod error;
pub mod fence;
pub mod frame;
mod local;
mod registry;
mod shm;
mod shm_owner;
mod sockopt;
mod stats;
mod tcp;
pub mod testing;
mod transport;
#[cfg(feature = "ucx")]
pub mod ucx;

pub use device::{AddressKind, CudaDriver, DeviceCopy, DeviceError, address_kind};
pub use engine::{BatchRead, TransferEngine};
pub use error::TransferError;
pub use fence::{Fence, SharedFence};
/// Capabilities as the data path checks them (for callers that sign their
/// own: tests, probes).
pub use mooncake_auth::capability;
pub use registry::{Backing, REGISTRY_SEGMENTS_MAX, SegmentRegistry};
pub use shm::{SHM_MAPPINGS_MAX, ShmTransport};
pub use shm_owner::{SHM_STALE_FILES_MAX, ShmOwner, StaleFile};
pub use sockopt::{CONGESTION_NAME_MAX_BYTES, set_congestion, tune, validate_congestion};
pub use stats::{EngineStats, PeerStats, STATS_PEERS_MAX, TransportKind};
pub use tcp::{
    ItemResult, PIPELINE_ITEMS_MAX, ReadItem, SERVER_CONNECTIONS_DEFAULT, SERVER_CONNECTIONS_MAX,
    SERVER_HEADER_TIMEOUT_DEFAULT, SERVER_IDLE_TIMEOUT_DEFAULT, SERVER_PEER_CONNECTIONS_DEFAULT, SERVER_REFUSALS_MAX,
    ServerConfig, ServerStats, TcpConfig, TcpTransport, TransferServer,
};
pub use transport::{ParseProtocolError, Protocol, RemoteSegment, Transport};
