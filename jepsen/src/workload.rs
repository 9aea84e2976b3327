//! The workload: concurrent logical clients doing put / get / exists /
//! remove on a small rotating set of keys, every put with a unique value
//! carried in the object's bytes (gets verify every byte). Each operation is
//! recorded with invoke/complete times and an outcome that says only what the
//! client knows: a timeout or transport error is `Unknown`.
//!
//! Every client reads through its own "home" master and writes through all
//! of them, so a master that serves reads it should not (the deliberately
//! broken build) is visible in the history.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, ClientError, PutOptions, PutOutcome};
use mooncake_proto::ErrorCode;
use tokio::sync::Mutex;

use crate::history::{OpKind, OpRecord, Outcome, ProcessId};
use crate::rng::Rng;

/// Bytes of every object: small, so the run measures coordination, but
/// still moved and verified over the data path.
pub const OBJECT_BYTES: usize = 4096;
/// A key is retired after this many operations (keeps the checker fast).
const OPS_PER_KEY_MAX: u64 = 150;
/// Keys in play at once.
const ACTIVE_KEYS: usize = 6;
/// Every put asks for two replicas: one per store node, so killing the
/// faulted store node never loses an acknowledged object.
const TWO_REPLICAS: PutOptions = PutOptions { replicas: 2, preferred_segments: Vec::new(), pin: 0 };
/// A client gives up on an operation after this long (outcome Unknown).
const OP_TIMEOUT: Duration = Duration::from_secs(4);

/// What the workload needs.
#[derive(Clone, Debug)]
pub struct WorkloadOptions {
    pub masters: Vec<String>,
    pub local_hostname: String,
    pub clients: usize,
    /// Total operations per second across all clients.
    pub rate: u64,
    pub seed: u64,
}

/// Shared by the clients: the key rotation, value counter and the history.
pub struct Shared {
    origin: Instant,
    keys: Mutex<KeySet>,
    next_value: AtomicU64,
    pub records: Mutex<Vec<OpRecord>>,
    /// Bytes read back that did not match any put's content.
    pub corrupt_reads: AtomicU64,
    /// Reads whose bytes decoded to a value some put wrote.
    pub verified_reads: AtomicU64,
    pub stop: AtomicBool,
}

struct KeySet {
    active: Vec<(String, u64)>,
    generation: u64,
    all: Vec<String>,
}

impl Shared {
    pub fn new(origin: Instant) -> Arc<Self> {
        let mut keys = KeySet { active: Vec::new(), generation: 0, all: Vec::new() };
        for _ in 0..ACTIVE_KEYS {
            keys.fresh();
        }
        Arc::new(Shared {
            origin,
            keys: Mutex::new(keys),
            next_value: AtomicU64::new(1),
            records: Mutex::new(Vec::new()),
            corrupt_reads: AtomicU64::new(0),
            verified_reads: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        })
    }

    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Every key the workload touched.
    pub async fn all_keys(&self) -> Vec<String> {
        self.keys.lock().await.all.clone()
    }

    async fn pick_key(&self, rng: &mut Rng) -> String {
        let mut k = self.keys.lock().await;
        let i = rng.below(k.active.len() as u64) as usize;
        k.active[i].1 += 1;
        let key = k.active[i].0.clone();
        if k.active[i].1 >= OPS_PER_KEY_MAX {
            k.active.swap_remove(i);
            k.fresh();
        }
        key
    }
}

impl KeySet {
    fn fresh(&mut self) {
        let key = format!("jepsen/k{}", self.generation);
        self.generation += 1;
        self.all.push(key.clone());
        self.active.push((key, 0));
    }
}

/// The content of the put of `value`.
pub fn object_bytes(value: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(OBJECT_BYTES);
    let mut x = value.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    out.extend_from_slice(&value.to_le_bytes());
    while out.len() < OBJECT_BYTES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(OBJECT_BYTES);
    out
}

/// The value whose put wrote `bytes`, if the bytes are exactly such a put's.
pub fn decode_value(bytes: &[u8]) -> Option<u64> {
    let v = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    (object_bytes(v) == bytes).then_some(v)
}

/// Runs `opts.clients` clients until `shared.stop` is set.
pub async fn run(opts: WorkloadOptions, shared: Arc<Shared>) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for i in 0..opts.clients {
        let (reader, writer) = connect_pair(&opts, i).await?;
        let shared = shared.clone();
        let interval = Duration::from_micros(1_000_000 * opts.clients as u64 / opts.rate.max(1));
        let seed = opts.seed ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
        tasks.push(tokio::spawn(client_loop(i as u64, reader, writer, shared, interval, seed)));
    }
    for t in tasks {
        t.await?;
    }
    Ok(())
}

/// A reader pinned to a home master and a writer that knows them all.
async fn connect_pair(opts: &WorkloadOptions, i: usize) -> anyhow::Result<(Client, Client)> {
    let home = opts.masters[i % opts.masters.len()].clone();
    let mut cfg = ClientConfig::new(vec![home]);
    cfg.local_hostname = opts.local_hostname.clone();
    cfg.tcp.request_timeout = OP_TIMEOUT;
    let reader = connect_with_retry(cfg.clone()).await?;
    cfg.masters = opts.masters.clone();
    let writer = connect_with_retry(cfg).await?;
    Ok((reader, writer))
}

async fn connect_with_retry(cfg: ClientConfig) -> anyhow::Result<Client> {
    let mut last = None;
    for _ in 0..20 {
        match Client::connect(cfg.clone()).await {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(anyhow::anyhow!("workload client could not connect: {last:?}"))
}

async fn client_loop(p: u64, reader: Client, writer: Client, shared: Arc<Shared>, interval: Duration, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !shared.stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let key = shared.pick_key(&mut rng).await;
        let op = match rng.below(100) {
            0..35 => OpKind::Put { value: shared.next_value.fetch_add(1, Ordering::Relaxed) },
            35..70 => OpKind::Get,
            70..85 => OpKind::Exists,
            _ => OpKind::Remove,
        };
        let invoke_ns = shared.now_ns();
        let outcome = match tokio::time::timeout(OP_TIMEOUT, perform(&reader, &writer, &key, op, &shared)).await {
            Ok(o) => o,
            Err(_) => Outcome::Unknown,
        };
        let complete_ns = Some(shared.now_ns());
        let record = OpRecord { process: ProcessId(p), key, op, invoke_ns, complete_ns, outcome };
        shared.records.lock().await.push(record);
    }
    reader.close().await;
    writer.close().await;
}

/// Codes that prove an operation had no effect — when the call was not
/// retried after an attempt that may have taken effect (a remove retried
/// after a timeout can see REPLICA_IS_NOT_READY from a newer put although
/// its first attempt did remove the key).
fn definitely_failed(e: &ClientError) -> bool {
    e.is_definite()
        && matches!(
            e.code(),
            Some(
                ErrorCode::ObjectAlreadyExists
                    | ErrorCode::ObjectHasLease
                    | ErrorCode::ReplicaIsNotReady
                    | ErrorCode::InvalidParams
            )
        )
}

async fn perform(reader: &Client, writer: &Client, key: &str, op: OpKind, shared: &Shared) -> Outcome {
    match op {
        OpKind::Put { value } => match writer.put(key, &object_bytes(value), &TWO_REPLICAS).await {
            Ok(PutOutcome::Stored) => Outcome::Ok,
            // The key existed: Mooncake's put keeps it and writes nothing.
            Ok(PutOutcome::KeptExisting) => Outcome::Fail,
            Err(e) if definitely_failed(&e) => Outcome::Fail,
            Err(e) if e.is_definite() && e.code() == Some(ErrorCode::NoAvailableHandle) => Outcome::Fail,
            Err(ClientError::PutRevoked(_)) => Outcome::Fail,
            Err(_) => Outcome::Unknown,
        },
        OpKind::Get => match reader.get(key).await {
            Ok(bytes) => match decode_value(&bytes) {
                Some(v) => {
                    shared.verified_reads.fetch_add(1, Ordering::Relaxed);
                    Outcome::GetOk { value: Some(v) }
                }
                None => {
                    shared.corrupt_reads.fetch_add(1, Ordering::Relaxed);
                    Outcome::Unknown
                }
            },
            Err(ClientError::NotFound(_)) => Outcome::GetOk { value: None },
            Err(e) if definitely_failed(&e) => Outcome::Fail,
            Err(_) => Outcome::Unknown,
        },
        OpKind::Exists => match reader.exists(key).await {
            Ok(exists) => Outcome::ExistsOk { exists },
            Err(_) => Outcome::Unknown,
        },
        OpKind::Remove => match writer.remove(key, true).await {
            Ok(()) => Outcome::RemoveOk { existed: true },
            Err(e) if e.code() == Some(ErrorCode::ObjectNotFound) => Outcome::RemoveOk { existed: false },
            Err(e) if definitely_failed(&e) => Outcome::Fail,
            Err(_) => Outcome::Unknown,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_bytes_carry_their_value_and_reject_anything_else() {
        let b = object_bytes(42);
        assert_eq!(b.len(), OBJECT_BYTES);
        assert_eq!(decode_value(&b), Some(42));
        let mut flipped = b.clone();
        flipped[100] ^= 1;
        assert_eq!(decode_value(&flipped), None);
        assert_eq!(decode_value(&object_bytes(43)), Some(43));
        assert_eq!(decode_value(&b[..10]), None);
    }
}
