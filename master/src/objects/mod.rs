//! What the leader does to objects and their bytes: puts (reservations
//! answered, commits, writer chunks), removals (proposed under their fences), eviction and
//! the arena cuts it needs, arenas taken back and returned, the copies
//! between tiers, hot keys' extra replicas and users' copy and move tasks,
//! and the capabilities that grant the data path.

pub mod arena_cuts;
pub(crate) mod arenas;
pub(crate) mod capabilities;
pub(crate) mod chunks;
pub(crate) mod copies;
pub(crate) mod copy_plan;
pub mod eviction;
pub(crate) mod fenced;
pub(crate) mod hot_keys;
pub(crate) mod put_end;
pub(crate) mod puts;
pub(crate) mod quotas;
pub mod removal;
pub(crate) mod user_tasks;

/// What answering one read told the leader, for its counts of reads (hot
/// keys, promotion on hit): the rpc layer reads it off its wire answer, so
/// the counts never look at protobuf.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadAnswered {
    /// The key was found and its replicas listed.
    pub found: bool,
    /// Every replica listed is on a disk tier.
    pub disk_only: bool,
}
