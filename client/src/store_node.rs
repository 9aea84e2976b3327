//! The store-node role of a client: what a process that contributes memory
//! (`global_segment_size` > 0) or a disk segment does besides its own puts
//! and gets. [`LocalSegment`] serves its segments (the transfer server and
//! the registry behind it, the shm files, the disk file and its scrub);
//! `heartbeat` keeps it registered and mounted with the masters; `copier`
//! makes the copies between tiers the leader asks of it (docs/TIERS.md).
//!
//! A plain client (no segment) uses none of this but the heartbeat's
//! registration.

pub(crate) mod copier;
pub(crate) mod heartbeat;
mod local_segment;

pub use local_segment::LocalSegment;
