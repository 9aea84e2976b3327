//! Proposing removals under their fences: the keys a removal (Remove,
//! RemoveAll, eviction) fenced against readers stay fenced until its
//! commands were applied, whatever happens to the caller.

use mooncake_raft_store::{Command, Response};

use crate::leader::FenceGuard;
use crate::raft::proposer::Proposer;
use crate::refusal::Refusal;

/// Commands per log entry when a removal proposes many (RemoveAll of a
/// large cache): bounds one entry's size and apply time.
const PROPOSE_SLICE_MAX: usize = 256;

/// Proposes `cmds` while `guard` fences their keys, and lifts the fences
/// only once the proposal was applied — in a task of its own, so a caller
/// that goes away (a cancelled RPC) cannot lift them early. `removed(answers,
/// i)` says whether fenced key `i` is gone.
///
/// A proposal that fails without an answer (leadership lost, shutdown) may
/// still commit under the next leader, so its fences stay up for the rest of
/// this term: readers of those keys wait rather than be leased an object a
/// later commit frees. (The term is ending anyway; its end wakes them.)
pub async fn propose_fenced(
    proposer: &Proposer,
    cmds: Vec<Command>,
    guard: FenceGuard,
    removed: impl Fn(&[Response], usize) -> bool + Send + 'static,
) -> Result<Vec<Response>, Refusal> {
    let proposer = proposer.clone();
    let task = tokio::spawn(async move {
        let mut answers = Vec::with_capacity(cmds.len());
        for slice in cmds.chunks(PROPOSE_SLICE_MAX) {
            match proposer.propose_many(slice.to_vec()).await {
                Ok(r) => answers.extend(r),
                Err(refusal) => {
                    guard.keep_for_the_term();
                    return Err(refusal);
                }
            }
        }
        guard.lift(|i| removed(&answers, i));
        Ok(answers)
    });
    task.await.map_err(|e| Refusal::internal(format!("removal task ended abnormally: {e}")))?
}

/// What the `Removed` answers among `answers` count together (objects or
/// replicas, as each command answers).
pub fn removed_total(answers: &[Response]) -> u64 {
    answers
        .iter()
        .map(|a| match a {
            Response::Removed { count } => *count,
            _ => 0,
        })
        .sum()
}
