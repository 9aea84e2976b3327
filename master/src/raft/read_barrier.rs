//! Batched linearizable reads. A read may be answered from the leader's
//! applied state once the leader has confirmed, with a quorum round started
//! after the read arrived, that it still leads and has applied everything
//! committed before. Concurrent reads share one such round: each round takes
//! every read waiting when it starts; reads that arrive during a round wait
//! for the next one (a round that began before a read arrived proves nothing
//! about writes acknowledged in between).

use mooncake_raft_store::Raft;
use tokio::sync::{mpsc, oneshot};

use crate::refusal::Refusal;

/// Reads waiting for a round. Bounds memory under overload; callers wait.
pub const READ_QUEUE_MAX: usize = 16_384;

type Waiter = oneshot::Sender<Result<(), Refusal>>;

/// Hands out read barriers, one quorum round per batch of concurrent reads.
#[derive(Clone)]
pub struct ReadBarrier {
    tx: mpsc::Sender<Waiter>,
}

impl ReadBarrier {
    pub fn start(raft: Raft, rounds: prometheus::Histogram) -> Self {
        let (tx, rx) = mpsc::channel(READ_QUEUE_MAX);
        tokio::spawn(run(raft, rx, rounds));
        ReadBarrier { tx }
    }

    /// Resolves once a read arriving now may be served linearizably.
    pub async fn wait(&self) -> Result<(), Refusal> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).await.map_err(|_| Refusal::unavailable("master is shutting down"))?;
        rx.await.map_err(|_| Refusal::unavailable("master is shutting down"))?
    }
}

async fn run(raft: Raft, mut rx: mpsc::Receiver<Waiter>, rounds: prometheus::Histogram) {
    while let Some(first) = rx.recv().await {
        let mut waiters = vec![first];
        while let Ok(w) = rx.try_recv() {
            waiters.push(w);
        }
        rounds.observe(waiters.len() as f64);
        let result = raft.ensure_linearizable().await.map(|_| ()).map_err(|e| Refusal::of_read(&e));
        for w in waiters {
            let _ = w.send(result.clone());
        }
    }
}
