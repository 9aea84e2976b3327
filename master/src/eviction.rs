//! Eviction rounds, run by the leader's duty (usage above the high
//! watermark) and by puts that found no room (they evict what they need and
//! retry). One round at a time: concurrent puts that all failed evict in
//! turn, each what it needs, instead of each evicting for everyone.
//!
//! A round reads its candidates from the state, then — under the soft-state
//! lock, after the state read (lock order, `leader.rs`) — drops the leased
//! and fenced ones, ranks the rest, and fences its victims in the same hold
//! of the lock, so no reader is admitted between the choice and the fence.

use std::sync::Arc;
use std::time::Instant;

use mooncake_raft_store::{Command, RemoveReason, Response, StateReader};

use crate::decisions::{self, EvictionPolicy};
use crate::kv_lease::KeyHash;
use crate::leader::LeaderState;
use crate::metrics::MasterMetrics;
use crate::proposer::Proposer;
use crate::removal::propose_fenced;

/// Most victims of one round (bounds one entry's size and apply time).
pub const EVICTION_BATCH_MAX: usize = 1_024;

/// Runs eviction rounds, one at a time.
pub struct Evictor {
    pub reader: StateReader,
    pub leader: Arc<LeaderState>,
    pub proposer: Proposer,
    pub policy: EvictionPolicy,
    pub metrics: Arc<MasterMetrics>,
    round: tokio::sync::Mutex<()>,
}

impl Evictor {
    pub fn new(
        reader: StateReader,
        leader: Arc<LeaderState>,
        proposer: Proposer,
        policy: EvictionPolicy,
        metrics: Arc<MasterMetrics>,
    ) -> Self {
        Evictor { reader, leader, proposer, policy, metrics, round: tokio::sync::Mutex::new(()) }
    }

    /// One round: frees what the high watermark asks and at least
    /// `need_bytes` (0 for the duty's rounds), from objects neither leased,
    /// hard-pinned nor being removed. Returns how many objects it evicted:
    /// 0 means nothing evictable was found (or this master does not lead).
    pub async fn round(&self, need_bytes: u64) -> u64 {
        let _one_at_a_time = self.round.lock().await;
        let (used, capacity) = self.reader.read(|s| (s.used_bytes(), s.capacity_bytes()));
        let target = decisions::eviction_target(used, capacity, &self.policy, need_bytes);
        if target == 0 {
            return 0;
        }
        let candidates = self.reader.read(decisions::eviction_candidates);
        let ttl = self.policy.kv_lease_ttl;
        let chosen = self.leader.with(|t| {
            let mut victims = decisions::choose_victims(candidates, t, Instant::now(), ttl, target);
            victims.truncate(EVICTION_BATCH_MAX);
            for v in &victims {
                t.kv.fence(v.hash);
            }
            (t.term, victims)
        });
        let Some((term, victims)) = chosen else { return 0 };
        if victims.is_empty() {
            return 0;
        }
        let guard = self.leader.fenced_by(term, victims.iter().map(|v| v.hash).collect::<Vec<KeyHash>>());
        let asked = victims.len();
        let cmd = Command::RemoveObjects {
            victims: victims.into_iter().map(|v| v.object).collect(),
            reason: RemoveReason::Evict,
        };
        match propose_fenced(&self.proposer, vec![cmd], guard, |_, _| true).await {
            Ok(answers) => {
                let count = match answers.first() {
                    Some(Response::Removed { count }) => *count,
                    _ => 0,
                };
                self.metrics.eviction_rounds.inc();
                self.metrics.evicted_objects.inc_by(count);
                let (used, capacity) = self.reader.read(|s| (s.used_bytes(), s.capacity_bytes()));
                tracing::info!(
                    asked,
                    evicted = count,
                    need_bytes,
                    used_bytes = used,
                    capacity_bytes = capacity,
                    "eviction round"
                );
                count
            }
            Err(status) => {
                tracing::warn!(code = ?status.error_code(), message = %status.message, "eviction proposal failed");
                0
            }
        }
    }
}
