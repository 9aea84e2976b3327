//! The replicated metadata state machine: segments, objects, clients and the
//! per-segment allocators, and the deterministic `apply` of each
//! [`Command`](crate::Command).
//!
//! Determinism is the contract: `apply` reads no clock, no randomness and no
//! I/O, iterates only ordered maps, and takes time from the request
//! (`now_ms` never moves backwards). Replicas that apply the same log reach
//! byte-identical state and snapshots.
//!
//! Consistency is checked as apply goes: every free and allocation of
//! segment bytes in every build, the whole state after every entry in debug
//! builds and tests (`invariants`). A broken invariant ends the process
//! rather than letting the state be read or replicated.
//!
//! This file holds [`MetaState`] itself; its jobs live in submodules:
//!
//! - `records`: the records it keeps (objects, segments, clients, held ranges);
//! - `reads`: the accessors;
//! - `validation`: the limits and shape checks shared with the master's edge;
//! - `apply`: the entry point, dispatch, `Batch` and `Once`;
//! - `segments`: client and segment commands (mount, unmount, remount, expire);
//! - `arenas`: the one-commit put (arenas and `PutCommit`);
//! - `removals`: removing complete objects;
//! - `tiers`: tier commands (copies, detached disks, corrupt ranges);
//! - `objects`: the object index;
//! - `requests`: deduplication of retried requests and the request clock that
//!   ages them without trusting leader wall time;
//! - `image`: the snapshot form (format v1) and the state hash;
//! - `invariants`: what the state promises, and the checks.
//!
//! Every public item is reached as `state::<item>` (only [`MetaState`] is
//! also re-exported at the crate root, where the rest of the workspace
//! takes it).

use std::collections::BTreeMap;

use mooncake_segment::{ClientId, SegmentId};
use openraft::{BasicNode, StoredMembership};

use crate::command::{Arena, ArenaId, ObjectVersion};
use crate::type_config::{LogId, NodeId};

mod apply;
mod arenas;
mod event_journal;
mod image;
mod invariants;
mod objects;
mod reads;
mod records;
mod removals;
mod requests;
mod segments;
mod tenants;
mod tiers;
mod validation;

pub use arenas::{ARENA_EXTENTS_MAX, validate_new_object};
pub use image::{StateImage, StateImageV1};
pub use invariants::{InvariantViolation, Record, SCAN_EVERY_ENTRY_RECORDS_MAX, SCAN_RECORDS_PER_ENTRY};
use objects::ObjectIndex;
pub use records::{ClientEntry, DetachedDisk, ObjectMeta, RetiredObject, SegmentEntry};
use requests::RequestMemory;
pub use requests::{
    REQUEST_CLOCK_REORDER_MAX_MS, REQUEST_CLOCK_STEP_MAX_MS, REQUEST_DEDUP_MAX, REQUEST_DEDUP_WINDOW_MS, RequestClock,
};
pub use tenants::TenantUsage;
pub use validation::{
    BATCH_MAX, KEY_MAX_BYTES, KEY_SCOPE_MAX_BYTES, LABEL_MAX_BYTES, PutSpec, REPLICA_NUM_MAX, SEGMENT_ALIGN_BYTES,
    SEGMENT_SIZE_MAX_BYTES, STORED_KEY_MAX_BYTES, validate_key, validate_pin, validate_put, validate_segment,
    validate_stored_key,
};

/// The whole replicated state.
#[derive(Clone, Debug, Default)]
pub struct MetaState {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
    now_ms: u64,
    next_version: u64,
    segments: BTreeMap<SegmentId, SegmentEntry>,
    objects: ObjectIndex,
    clients: BTreeMap<ClientId, ClientEntry>,
    /// Answers of `Command::Once` by request id, aged on the request clock.
    requests: RequestMemory,
    arenas: BTreeMap<ArenaId, Arena>,
    /// Arenas of each segment by offset (they never overlap).
    arenas_by_offset: BTreeMap<(SegmentId, u64), ArenaId>,
    next_arena: u64,
    retired: BTreeMap<ObjectVersion, RetiredObject>,
    /// Each tenant's quota in bytes (`tenants.rs`; schema 2).
    tenant_quotas: BTreeMap<String, u64>,
    /// Object events not taken yet (`event_journal.rs`). Local, not
    /// replicated, not in the image.
    events: event_journal::PendingEvents,
    /// Debug builds: records the full invariant scan may cover before it
    /// runs again (`invariants.rs`). Local bookkeeping, not replicated.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    scan_credit_records: u64,
}
