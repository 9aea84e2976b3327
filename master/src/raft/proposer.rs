//! Group commit: proposals from concurrent RPCs are gathered into one log
//! entry (`Command::Batch`), so one Raft round and one fsync serve many
//! requests under load. `--batches-in-flight` batches may be in flight at
//! once (pipelining; one by default); while they are, new proposals queue
//! and form the next, larger batch.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use mooncake_raft_store::state::BATCH_MAX;
use mooncake_raft_store::{Command, FlushedLog, Raft, Request, Response};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::refusal::Refusal;

/// Proposals waiting for a batch. Bounds memory under overload; callers wait
/// (backpressure) when it is full.
pub const PROPOSAL_QUEUE_MAX: usize = 16_384;
/// Batches being replicated at once, at most (`--batches-in-flight`). More
/// overlaps fsync and network round trips; each costs one entry in
/// openraft's pipeline.
pub const IN_FLIGHT_BATCHES_MAX: usize = 16;
/// `--batches-in-flight` by default: one. While a batch commits, the writes
/// that arrive gather into the next, so each entry (its replication, its
/// fsyncs, its apply on every master) carries more of them. On the 2-vCPU
/// machine kind, where the masters' CPUs are the bottleneck, 1 against 4
/// measured: 16-client puts 6,432 vs 4,860 ops/s (`bench meta --quick`),
/// trace requests/s +13 % (batch) and +10 % (single calls); 1-client put p50
/// unchanged (docs/PERFORMANCE.md, "The store as a cache"). Raise it where
/// the masters' cores idle and the round trip between them dominates.
pub const DEFAULT_BATCHES_IN_FLIGHT: usize = 1;

struct Proposal {
    cmds: Vec<Command>,
    reply: oneshot::Sender<Result<Vec<Response>, Refusal>>,
}

/// Submits commands to Raft, batched.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<Proposal>,
}

impl Proposer {
    /// Starts the batching task for `raft`; `batch_sizes` observes the
    /// commands per log entry.
    /// `flushed`: the leader's log sync; answers wait until their entry is
    /// synced here too (the leader replicates while it syncs, raft-store `log/flushed.rs`).
    pub fn start(
        raft: Raft,
        batch_sizes: prometheus::Histogram,
        commit_seconds: prometheus::Histogram,
        flushed: FlushedLog,
        in_flight: usize,
    ) -> Self {
        let (tx, rx) = mpsc::channel(PROPOSAL_QUEUE_MAX);
        let in_flight = in_flight.clamp(1, IN_FLIGHT_BATCHES_MAX);
        tokio::spawn(batch_loop(raft, rx, batch_sizes, commit_seconds, flushed, in_flight));
        Proposer { tx }
    }

    /// Proposes one command; resolves once it is committed and applied.
    pub async fn propose(&self, cmd: Command) -> Result<Response, Refusal> {
        let mut responses = self.propose_many(vec![cmd]).await?;
        responses.pop().ok_or_else(|| Refusal::internal("empty response to a proposal"))
    }

    /// Proposes several commands in one entry; one response per command.
    pub async fn propose_many(&self, cmds: Vec<Command>) -> Result<Vec<Response>, Refusal> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, rx) = oneshot::channel();
        self.tx.send(Proposal { cmds, reply }).await.map_err(|_| Refusal::unavailable("master is shutting down"))?;
        rx.await.map_err(|_| Refusal::unavailable("master is shutting down"))?
    }
}

async fn batch_loop(
    raft: Raft,
    mut rx: mpsc::Receiver<Proposal>,
    batch_sizes: prometheus::Histogram,
    commit_seconds: prometheus::Histogram,
    flushed: FlushedLog,
    in_flight: usize,
) {
    let permits = Arc::new(Semaphore::new(in_flight));
    let mut carry: Option<Proposal> = None;
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else { return };
        let first = match carry.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let mut size = first.cmds.len();
        let mut batch = vec![first];
        while let Ok(p) = rx.try_recv() {
            if size + p.cmds.len() > BATCH_MAX {
                carry = Some(p);
                break;
            }
            size += p.cmds.len();
            batch.push(p);
        }
        batch_sizes.observe(size as f64);
        let raft = raft.clone();
        let (commit_seconds, flushed) = (commit_seconds.clone(), flushed.clone());
        tokio::spawn(async move {
            let since = std::time::Instant::now();
            write_batch(&raft, &flushed, batch).await;
            commit_seconds.observe(since.elapsed().as_secs_f64());
            drop(permit);
        });
    }
}

fn batch_answers(data: Response) -> Result<Vec<Response>, Refusal> {
    match data {
        Response::Batch(responses) => Ok(responses),
        Response::Err(e) => Err(Refusal::Meta(e)),
        other => Err(Refusal::internal(format!("unexpected response to a batch: {other:?}"))),
    }
}

/// This master's wall clock in ms since the Unix epoch: what it stamps on
/// the entries it proposes (and what soft-pin deadlines are compared with).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

async fn write_batch(raft: &Raft, flushed: &FlushedLog, batch: Vec<Proposal>) {
    let counts: Vec<usize> = batch.iter().map(|p| p.cmds.len()).collect();
    let (cmds, replies): (Vec<Vec<Command>>, Vec<_>) = batch.into_iter().map(|p| (p.cmds, p.reply)).unzip();
    let request = Request { ts_ms: now_ms(), cmd: Command::Batch(cmds.into_iter().flatten().collect()) };
    let result = match raft.client_write(request).await {
        Ok(written) => {
            // Committed and applied, but acknowledged only once the leader's
            // own copy is synced too: then a quorum (it and the follower
            // that acked) holds it on disk.
            flushed.wait_for(written.log_id.index).await;
            batch_answers(written.data)
        }
        Err(e) => Err(Refusal::of_write(&e)),
    };
    match result {
        Ok(responses) => {
            let mut responses = responses.into_iter();
            for (reply, n) in replies.into_iter().zip(counts) {
                let _ = reply.send(Ok(responses.by_ref().take(n).collect()));
            }
        }
        Err(refusal) => {
            for reply in replies {
                let _ = reply.send(Err(refusal.clone()));
            }
        }
    }
}
