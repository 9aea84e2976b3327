//! Listings at one revision, a page at a time: the first page of a
//! ListObjects that has more keeps a copy of the state it read (an O(1)
//! clone: the indexes are shared), under its revision, so the later pages
//! (`at_revision`) come from the same state however the objects changed
//! meanwhile. A watcher resyncs from such a listing and watches from its
//! revision + 1 (docs/EVENTS.md). Each peer address has its own
//! [`LISTINGS_PER_PEER`] copies (a new one replaces that peer's oldest, so
//! one client listing in a loop cannot push out another's pages), at most
//! [`LISTINGS_MAX`] in all, each for [`LISTING_KEPT`]; they are this
//! master's (a later page asked of another master, or from another
//! address, or after a restart, is refused: list again).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mooncake_proto::Status;
use mooncake_raft_store::MetaState;

use crate::rpc::tenancy::KeySpace;

/// How long the state of a paged listing is kept after its first page.
pub const LISTING_KEPT: Duration = Duration::from_secs(60);
/// Listings kept at once, of all peers (the oldest goes first).
pub const LISTINGS_MAX: usize = 64;
/// Listings kept at once for one peer address (its oldest goes first).
pub const LISTINGS_PER_PEER: usize = 4;

/// One kept listing: whose, at which revision, since when, the state.
struct Kept {
    peer: Option<IpAddr>,
    revision: u64,
    at: Instant,
    state: Arc<MetaState>,
}

/// The states paged listings are read from.
#[derive(Default)]
pub struct Listings {
    kept: Mutex<VecDeque<Kept>>,
}

impl Listings {
    /// Keeps `state`, read at `revision`, for `peer`'s pages after the first.
    pub fn keep(&self, peer: Option<IpAddr>, revision: u64, state: MetaState, now: Instant) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.retain(|k| !(k.peer == peer && k.revision == revision) && now.duration_since(k.at) < LISTING_KEPT);
        if kept.iter().filter(|k| k.peer == peer).count() >= LISTINGS_PER_PEER {
            if let Some(oldest) = kept.iter().position(|k| k.peer == peer) {
                kept.remove(oldest);
            }
        } else if kept.len() >= LISTINGS_MAX {
            kept.pop_front();
        }
        kept.push_back(Kept { peer, revision, at: now, state: Arc::new(state) });
    }

    /// The state kept for `peer` at `revision`, if it still is.
    pub fn at(&self, peer: Option<IpAddr>, revision: u64, now: Instant) -> Option<Arc<MetaState>> {
        let kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        kept.iter()
            .find(|k| k.peer == peer && k.revision == revision && now.duration_since(k.at) < LISTING_KEPT)
            .map(|k| k.state.clone())
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

    fn peer(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, n]))
    }

    #[test]
    fn a_kept_listing_is_found_by_its_peer_and_revision_until_it_expires() {
        let l = Listings::default();
        let t0 = Instant::now();
        l.keep(peer(1), 7, MetaState::default(), t0);
        assert!(l.at(peer(1), 7, t0 + Duration::from_secs(1)).is_some());
        assert!(l.at(peer(1), 8, t0).is_none());
        assert!(l.at(peer(2), 7, t0).is_none(), "another peer's listing");
        assert!(l.at(peer(1), 7, t0 + LISTING_KEPT).is_none(), "expired");
    }

    /// Issue 38: the kept listings were shared by all clients, so one
    /// client listing in a loop made every other client's next page fail.
    #[test]
    fn a_peer_listing_in_a_loop_pushes_out_only_its_own_listings() {
        let l = Listings::default();
        let t0 = Instant::now();
        l.keep(peer(1), 7, MetaState::default(), t0);
        for r in 0..10 * LISTINGS_MAX as u64 {
            l.keep(peer(2), 100 + r, MetaState::default(), t0);
        }
        assert!(l.at(peer(1), 7, t0).is_some(), "another peer's listing survives");
        let last = 100 + 10 * LISTINGS_MAX as u64 - 1;
        assert!(l.at(peer(2), last, t0).is_some());
        assert!(l.at(peer(2), last - LISTINGS_PER_PEER as u64, t0).is_none(), "its own oldest made room");
        // Many peers: the oldest of all goes once the total is reached.
        for n in 0..LISTINGS_MAX as u8 {
            l.keep(peer(10 + n), 1, MetaState::default(), t0);
        }
        assert!(l.at(peer(1), 7, t0).is_none());
    }
}
