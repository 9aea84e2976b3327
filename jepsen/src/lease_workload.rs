//! The lease workload, run next to the register workload in every scenario,
//! on its own keys (`lease/r<round>/k<i>`). Round after round it puts fresh
//! keys once (a unique value in their bytes, two replicas, unpinned so
//! eviction may take them), then races on each with small seeded delays:
//! lease readers (GetReplicaList), ExistKey, a non-force Remove, and now and
//! then a non-force RemoveAll. Some readers hold their lease and copy the
//! bytes late, through the transfer engine, then read the key again; every
//! round also reads the previous round's keys again. Store segments are
//! small, so eviction runs the whole time. `lease.rs` checks the record.
//!
//! Its keys stay out of the register history: eviction makes them vanish
//! without a recorded op. Its RemoveAlls reach the register keys too, so
//! each is also handed to the register history ([`Shared::remove_alls`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mooncake_client::{Client, MasterError, Pin, PutOptions, PutOutcome, remote};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::GetReplicaListResponse;
use tokio::task::JoinSet;

use crate::access::Access;
use crate::availability::{PutRefusal, PutSource};
use crate::history::Outcome;
use crate::lease::{LeaseOp, LeaseOutcome, LeaseRecord};
use crate::rng::Rng;
use crate::workload::{
    OP_TIMEOUT, RemoveAllCall, Shared, connect_with_retry, decode_sized, failure_cause, value_bytes,
};

/// Bytes of every lease object: big enough that the small segments pass the
/// eviction watermark within seconds, small enough that the objects leased
/// at any moment (about a lease's worth of rounds) stay well under it.
pub const LEASE_OBJECT_BYTES: usize = 16 << 10;
/// Fresh keys per round, each raced on by `RACERS_PER_KEY` operations.
const KEYS_PER_ROUND: usize = 4;
/// Each racer starts after a seeded delay below this: wide enough to land
/// on both sides of a removal's commit, narrow enough to overlap it.
const RACE_DELAY_MAX: Duration = Duration::from_millis(6);
/// Every this many rounds one also runs a RemoveAll (a few in every run):
/// often enough to be seen, rare enough that the register keys it removes
/// stay the exception.
const REMOVE_ALL_EVERY_ROUNDS: u64 = 40;
/// Chance (per mille) that a lease reader holds its lease and copies late.
const HOLD_PER_MILLE: u64 = 500;
/// A holder copies at a seeded share of the lease, at most this (per mille):
/// half the lease leaves the copy plenty of time to end inside it.
const HOLD_SHARE_MAX_PER_MILLE: u64 = 500;
/// Pause between rounds (keeps the load near the register workload's).
const ROUND_GAP: Duration = Duration::from_millis(100);
/// Holders in flight at once; a round waits for room (bounds the tasks).
const HOLDERS_MAX: usize = 64;
/// Unpinned (eviction may take them), two replicas: one on the store node
/// faults never touch, so a killed store node never loses a lease object.
const LEASE_PUT: PutOptions =
    PutOptions { replicas: 2, min_replicas: 0, preferred_segments: Vec::new(), pin: Pin::None };
/// Keeps the lease workload's draws apart from the register workload's.
const SEED_SALT: u64 = 0x1ea5_e5ee_d000_0001;

/// What the lease workload needs.
#[derive(Clone, Debug)]
pub struct LeaseWorkloadOptions {
    /// How the client connects (TLS or plain).
    pub access: Access,
    pub masters: Vec<String>,
    pub local_hostname: String,
    pub seed: u64,
    /// The masters' `--default_kv_lease_ttl`.
    pub lease_ttl: Duration,
    /// Host id of the store node faults never touch.
    pub steady_store_host: String,
    /// RemoveAlls run only this long into the run: each one may remove any
    /// register key, so a put before it cannot be checked for loss at the
    /// end; the later half of the run keeps the lost-put checker's reach.
    pub remove_all_for: Duration,
}

/// What every racer shares.
struct Ctx {
    client: Client,
    shared: Arc<Shared>,
    opts: LeaseWorkloadOptions,
}

/// A lease reader that holds its lease: what it copies and when.
struct Held {
    key: String,
    list: GetReplicaListResponse,
    lease_invoke_ns: u64,
    copy_at: Instant,
}

/// One racer of a round.
#[derive(Clone, Copy, Debug)]
enum Racer {
    /// GetReplicaList; with `hold`, a found object is copied that long after
    /// the read was invoked.
    Reader {
        hold: Option<Duration>,
    },
    Exists,
    Remove,
}

/// Runs rounds until `shared.stop` is set, then waits for its holders.
pub async fn run(opts: LeaseWorkloadOptions, shared: Arc<Shared>) -> anyhow::Result<()> {
    let mut cfg = opts.access.client(opts.masters.clone());
    cfg.local_hostname = opts.local_hostname.clone();
    cfg.tcp.request_timeout = OP_TIMEOUT;
    let client = connect_with_retry(cfg).await?;
    let mut rng = Rng::new(opts.seed ^ SEED_SALT);
    let ctx = Arc::new(Ctx { client, shared, opts });
    let mut holders = JoinSet::new();
    let mut previous: Vec<String> = Vec::new();
    let mut round = 0u64;
    let started = Instant::now();
    while !ctx.shared.stop.load(Ordering::Relaxed) {
        let stored = put_round(&ctx, round).await;
        let due = round % REMOVE_ALL_EVERY_ROUNDS == REMOVE_ALL_EVERY_ROUNDS - 1;
        let remove_all = (due && started.elapsed() < ctx.opts.remove_all_for).then(|| delay(&mut rng));
        for held in race(&ctx, &stored, remove_all, &previous, &mut rng).await {
            holders.spawn(hold_and_copy(ctx.clone(), held));
        }
        while holders.len() > HOLDERS_MAX {
            holders.join_next().await;
        }
        previous = stored;
        round += 1;
        tokio::time::sleep(ROUND_GAP).await;
    }
    while holders.join_next().await.is_some() {}
    match Arc::try_unwrap(ctx) {
        Ok(ctx) => ctx.client.close().await,
        Err(_) => tracing::warn!("lease workload: client still shared at the end; not closed"),
    }
    Ok(())
}

fn delay(rng: &mut Rng) -> Duration {
    Duration::from_micros(rng.below(RACE_DELAY_MAX.as_micros() as u64 + 1))
}

impl Ctx {
    async fn record(&self, key: &str, op: LeaseOp, invoke_ns: u64, outcome: LeaseOutcome) {
        let complete_ns = self.shared.now_ns();
        let record = LeaseRecord { key: key.to_string(), op, invoke_ns, complete_ns, outcome };
        self.shared.lease_records.lock().await.push(record);
    }

    fn found(&self, list: &GetReplicaListResponse) -> LeaseOutcome {
        let steady = list.replicas.iter().any(|r| r.host_id == self.opts.steady_store_host);
        LeaseOutcome::Found { on_steady_store: Some(steady) }
    }
}

/// Puts this round's fresh keys at once; returns those stored.
async fn put_round(ctx: &Arc<Ctx>, round: u64) -> Vec<String> {
    let mut puts = JoinSet::new();
    for i in 0..KEYS_PER_ROUND {
        let ctx = ctx.clone();
        puts.spawn(async move {
            let key = format!("lease/r{round}/k{i}");
            let value = ctx.shared.next_value();
            let put = ctx.shared.put_allowed().await;
            let invoke_ns = ctx.shared.now_ns();
            let bytes = value_bytes(value, LEASE_OBJECT_BYTES);
            let result = tokio::time::timeout(OP_TIMEOUT, ctx.client.put(&key, &bytes, &LEASE_PUT)).await;
            match &result {
                Ok(Ok(PutOutcome::Stored)) => {}
                Ok(Ok(PutOutcome::KeptExisting)) => ctx.shared.note_put_failure("kept existing", || key.clone()),
                Ok(Err(e)) => {
                    ctx.shared.note_put_failure(&failure_cause(e), || e.to_string());
                    ctx.shared.note_refusal(e, |message, complete_ns| PutRefusal {
                        source: PutSource::Lease,
                        key: key.clone(),
                        size_bytes: LEASE_OBJECT_BYTES as u64,
                        replicas: LEASE_PUT.replicas,
                        min_replicas: LEASE_PUT.min_replicas,
                        invoke_ns,
                        complete_ns,
                        message,
                    });
                }
                Err(_) => ctx.shared.note_put_failure("timed out", || format!("no answer in {OP_TIMEOUT:?}")),
            }
            let outcome = match result {
                Ok(Ok(PutOutcome::Stored)) => LeaseOutcome::Stored,
                Ok(Err(e)) if e.is_definite() => LeaseOutcome::Other,
                Ok(Ok(PutOutcome::KeptExisting)) => LeaseOutcome::Other,
                Ok(Err(_)) | Err(_) => LeaseOutcome::Unknown,
            };
            drop(put);
            ctx.record(&key, LeaseOp::Put { value }, invoke_ns, outcome).await;
            if outcome == LeaseOutcome::Stored {
                ctx.shared.note_lease_stored(&key, value).await;
            }
            (outcome == LeaseOutcome::Stored).then_some(key)
        });
    }
    let mut stored: Vec<String> = puts.join_all().await.into_iter().flatten().collect();
    stored.sort();
    stored
}

/// Races on `stored` (and a RemoveAll after `remove_all`, if drawn), and
/// reads `previous` again; returns the readers that hold their lease.
async fn race(
    ctx: &Arc<Ctx>,
    stored: &[String],
    remove_all: Option<Duration>,
    previous: &[String],
    rng: &mut Rng,
) -> Vec<Held> {
    let mut racers = JoinSet::new();
    for key in stored {
        let hold = (rng.below(1000) < HOLD_PER_MILLE).then(|| {
            let share = rng.below(HOLD_SHARE_MAX_PER_MILLE + 1) as u32;
            ctx.opts.lease_ttl * share / 1000
        });
        for racer in [Racer::Reader { hold }, Racer::Reader { hold: None }, Racer::Exists, Racer::Remove] {
            racers.spawn(run_racer(ctx.clone(), key.clone(), racer, delay(rng)));
        }
    }
    for key in previous {
        racers.spawn(run_racer(ctx.clone(), key.clone(), Racer::Reader { hold: None }, Duration::ZERO));
    }
    if let Some(after) = remove_all {
        let ctx = ctx.clone();
        racers.spawn(async move {
            tokio::time::sleep(after).await;
            run_remove_all(&ctx).await;
            None
        });
    }
    racers.join_all().await.into_iter().flatten().collect()
}

async fn run_racer(ctx: Arc<Ctx>, key: String, racer: Racer, after: Duration) -> Option<Held> {
    tokio::time::sleep(after).await;
    let invoke = Instant::now();
    let invoke_ns = ctx.shared.now_ns();
    match racer {
        Racer::Reader { hold } => {
            let list = read_replicas(&ctx, &key, invoke_ns).await?;
            hold.map(|hold| Held { key, list, lease_invoke_ns: invoke_ns, copy_at: invoke + hold })
        }
        Racer::Exists => {
            read_exists(&ctx, &key, invoke_ns).await;
            None
        }
        Racer::Remove => {
            let remove = ctx.client.master().remove(&key, false);
            let outcome = match tokio::time::timeout(OP_TIMEOUT, remove).await {
                Ok(Ok(())) => LeaseOutcome::Removed,
                Ok(Err(e)) => refusal(&e, ErrorCode::ObjectHasLease, LeaseOutcome::HasLease),
                Err(_) => LeaseOutcome::Unknown,
            };
            ctx.record(&key, LeaseOp::Remove, invoke_ns, outcome).await;
            None
        }
    }
}

/// What an error answer says: `code` means `outcome`, not-found means
/// missing, another code proves nothing, no code (unreachable) is unknown.
fn refusal(e: &MasterError, code: ErrorCode, outcome: LeaseOutcome) -> LeaseOutcome {
    match e.code() {
        Some(c) if c == code => outcome,
        Some(ErrorCode::ObjectNotFound) => LeaseOutcome::Missing,
        Some(_) => LeaseOutcome::Other,
        None => LeaseOutcome::Unknown,
    }
}

/// GetReplicaList, recorded; the list when it found the object (a lease).
async fn read_replicas(ctx: &Ctx, key: &str, invoke_ns: u64) -> Option<GetReplicaListResponse> {
    let read = ctx.client.master().get_replica_list(ctx.client.client_id(), key);
    let (outcome, list) = match tokio::time::timeout(OP_TIMEOUT, read).await {
        Ok(Ok(list)) => {
            if crate::tier_reader::disk_only(&list.replicas) {
                ctx.shared.lease_disk_only_reads.fetch_add(1, Ordering::Relaxed);
            }
            (ctx.found(&list), Some(list))
        }
        Ok(Err(e)) => (refusal(&e, ErrorCode::ObjectNotFound, LeaseOutcome::Missing), None),
        Err(_) => (LeaseOutcome::Unknown, None),
    };
    ctx.record(key, LeaseOp::ReplicaList, invoke_ns, outcome).await;
    list
}

async fn read_exists(ctx: &Ctx, key: &str, invoke_ns: u64) {
    let outcome = match tokio::time::timeout(OP_TIMEOUT, ctx.client.master().exist_key(key)).await {
        Ok(Ok(true)) => LeaseOutcome::Found { on_steady_store: None },
        Ok(Ok(false)) => LeaseOutcome::Missing,
        Ok(Err(e)) => refusal(&e, ErrorCode::ObjectNotFound, LeaseOutcome::Missing),
        Err(_) => LeaseOutcome::Unknown,
    };
    ctx.record(key, LeaseOp::Exists, invoke_ns, outcome).await;
}

/// A non-force RemoveAll, recorded here and handed to the register history.
async fn run_remove_all(ctx: &Ctx) {
    let invoke_ns = ctx.shared.now_ns();
    let (outcome, register) = match tokio::time::timeout(OP_TIMEOUT, ctx.client.master().remove_all(false)).await {
        Ok(Ok(count)) => (LeaseOutcome::RemovedCount { count }, Outcome::Ok),
        Ok(Err(e)) if e.is_definite() => (LeaseOutcome::Other, Outcome::Fail),
        Ok(Err(_)) | Err(_) => (LeaseOutcome::Unknown, Outcome::Unknown),
    };
    ctx.record("", LeaseOp::RemoveAll, invoke_ns, outcome).await;
    let call = RemoveAllCall { invoke_ns, complete_ns: ctx.shared.now_ns(), outcome: register };
    ctx.shared.remove_alls.lock().await.push(call);
}

/// Waits until the holder's copy time, copies the bytes from a replica of
/// its list (the never-faulted store node's first), records what they
/// decode to, then reads the key again while its lease still runs.
async fn hold_and_copy(ctx: Arc<Ctx>, held: Held) {
    tokio::time::sleep_until(held.copy_at.into()).await;
    let invoke_ns = ctx.shared.now_ns();
    let outcome = tokio::time::timeout(OP_TIMEOUT, copy(&ctx, &held.list)).await.unwrap_or(LeaseOutcome::Unknown);
    let op = LeaseOp::Copy { lease_invoke_ns: held.lease_invoke_ns };
    ctx.record(&held.key, op, invoke_ns, outcome).await;
    read_exists(&ctx, &held.key, ctx.shared.now_ns()).await;
}

async fn copy(ctx: &Ctx, list: &GetReplicaListResponse) -> LeaseOutcome {
    // The size comes from the master: bytes of another size are not the
    // object's, and are never allocated.
    if list.size != LEASE_OBJECT_BYTES as u64 {
        return LeaseOutcome::Copied { value: None };
    }
    let mut replicas: Vec<_> = list.replicas.iter().collect();
    replicas.sort_by_key(|r| r.host_id != ctx.opts.steady_store_host);
    let mut buf = vec![0u8; LEASE_OBJECT_BYTES];
    for r in replicas {
        match ctx.client.engine().read_checksummed(&remote(r), r.offset, &mut buf).await {
            Ok(_) => return LeaseOutcome::Copied { value: decode_sized(&buf, LEASE_OBJECT_BYTES) },
            Err(e) => tracing::debug!(endpoint = %r.endpoint, error = %e, "lease copy: replica read failed"),
        }
    }
    LeaseOutcome::Other
}
