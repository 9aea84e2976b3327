//! The UCX route (cargo feature `ucx`): one-sided reads of remote segments
//! over UCX's RMA (`ucp_get_nbx`), which runs on InfiniBand/RoCE verbs, TCP,
//! shared memory (posix, sysv, cma) and, in a CUDA-enabled UCX, GPU memory.
//!
//! - `worker`: [`UcxWorker`], a UCP context and worker owned by one thread,
//!   with reads as futures that are safe to drop.
//! - `error`: [`UcxError`], why a UCX operation failed.
//! - `exports`: the store node's side, [`UcxExports`]: maps each memory
//!   segment for peers' reads and answers UCX_KEY requests (`crate::frame`) with
//!   its key, once the request's READ capability verifies.
//! - `route`: the client's side, [`UcxRoute`]: fetches a segment's key over
//!   the TCP lanes (under the replica's READ grant), caches it, and reads
//!   one-sided; a node that cannot serve UCX is read over TCP instead.
//!
//! Writes stay on the TCP lanes, where the store node checks every WRITE's
//! capability and arena fence (docs/SECURITY.md, docs/TRANSFER.md).

mod error;
mod exports;
mod ffi;
mod route;
mod worker;

pub use error::UcxError;
pub use exports::UcxExports;
pub(crate) use route::UcxRoute;
pub use worker::{MemoryKind, Read, UcxWorker};
