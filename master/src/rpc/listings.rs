//! Listings at one revision, a page at a time: the first page of a
//! ListObjects that has more keeps a copy of the state it read (an O(1)
//! clone: the indexes are shared), under its revision, so the later pages
//! (`at_revision`) come from the same state however the objects changed
//! meanwhile. A watcher resyncs from such a listing and watches from its
//! revision + 1 (docs/EVENTS.md). At most [`LISTINGS_MAX`] copies, each
//! for [`LISTING_KEPT`]; they are this master's (a later page asked of
//! another master, or after a restart, is refused: list again).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mooncake_proto::Status;
use mooncake_raft_store::MetaState;

use crate::rpc::tenancy::KeySpace;

/// How long the state of a paged listing is kept after its first page.
pub const LISTING_KEPT: Duration = Duration::from_secs(60);
/// Listings kept at once (the oldest goes first).
pub const LISTINGS_MAX: usize = 8;

/// The states paged listings are read from.
#[derive(Default)]
pub struct Listings {
    kept: Mutex<VecDeque<(u64, Instant, Arc<MetaState>)>>,
}

impl Listings {
    /// Keeps `state`, read at `revision`, for the pages after the first.
    pub fn keep(&self, revision: u64, state: MetaState, now: Instant) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|(r, at, _)| *r != revision && now.duration_since(*at) < LISTING_KEPT);
        if kept.len() >= LISTINGS_MAX {
            kept.pop_front();
        }
        kept.push_back((revision, now, Arc::new(state)));
    }

    /// The state kept at `revision`, if it still is.
    pub fn at(&self, revision: u64, now: Instant) -> Option<Arc<MetaState>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter()
            .find(|(r, at, _)| *r == revision && now.duration_since(*at) < LISTING_KEPT)
            .map(|(_, _, s)| s.clone())
    }
}

/// Where a listing of one tenant's keys reads, in stored keys: under
/// `prefix`, after `start_after` (none: from the first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    space: KeySpace,
    prefix: String,
    start_after: Option<String>,
}

/// Sorts after every stored key of a named tenant (`NUL name NUL key`, the
/// name ASCII) and before every default-tenant key (none starts with NUL):
/// a default-tenant listing of everything starts after it.
const AFTER_NAMED_TENANTS: &str = "\0\u{10FFFF}";

impl Bounds {
    /// The bounds of a listing in `space` of the client's `prefix` after
    /// its `start_after` (empty: from the first key).
    pub fn of(space: &KeySpace, prefix: &str, start_after: &str) -> Result<Bounds, Status> {
        let stored_prefix = space.stored_prefix(prefix)?;
        let start_after = match start_after.is_empty() {
            true if space.tenant().is_default() && prefix.is_empty() => Some(AFTER_NAMED_TENANTS.to_string()),
            true => None,
            false => Some(space.stored_prefix(start_after)?),
        };
        Ok(Bounds { space: space.clone(), prefix: stored_prefix, start_after })
    }
}

/// The objects within `bounds`, at most `limit`, and whether more follow.
pub fn page<'a>(
    s: &'a MetaState,
    bounds: &'a Bounds,
    limit: usize,
) -> (Vec<&'a mooncake_raft_store::state::ObjectMeta>, bool) {
    let prefix = bounds.prefix.as_str();
    let mut objects: Vec<_> = match bounds.start_after.as_deref() {
        Some(after) if after >= prefix => s
            .objects_after(after)
            .take_while(|o| o.key.starts_with(prefix))
            .filter(|o| bounds.space.client_key(&o.key).is_some())
            .take(limit + 1)
            .collect(),
        _ => s
            .objects_with_prefix(prefix)
            .filter(|o| bounds.space.client_key(&o.key).is_some())
            .take(limit + 1)
            .collect(),
    };
    let more = objects.len() > limit;
    objects.truncate(limit);
    (objects, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_listing_is_found_by_revision_until_it_expires() {
        let l = Listings::default();
        let t0 = Instant::now();
        l.keep(7, MetaState::default(), t0);
        assert!(l.at(7, t0 + Duration::from_secs(1)).is_some());
        assert!(l.at(8, t0).is_none());
        assert!(l.at(7, t0 + LISTING_KEPT).is_none(), "expired");
        for r in 0..LISTINGS_MAX as u64 {
            l.keep(100 + r, MetaState::default(), t0);
        }
        assert!(l.at(7, t0).is_none(), "the oldest made room");
        assert!(l.at(100, t0).is_some());
    }
}
