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
