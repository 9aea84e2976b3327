//! Hooks through which the owner of a store observes its costs (fsync
//! latency, snapshot builds) without raft-store knowing any metrics library.

use std::time::Duration;

/// Receives storage events. Every method has a no-op default; implementations
/// must be cheap and never block (they run on the I/O path).
pub trait StoreObserver: Send + Sync {
    /// A flush + fdatasync finished after `took`.
    fn synced(&self, _took: Duration) {}
    /// A snapshot of `bytes` was built and made durable in `took`.
    fn snapshot_built(&self, _took: Duration, _bytes: usize) {}
    /// A snapshot from the leader was installed in `took`.
    fn snapshot_installed(&self, _took: Duration, _bytes: usize) {}
}

/// Observes nothing.
pub struct NoopObserver;

impl StoreObserver for NoopObserver {}
