//! The register workload: concurrent logical clients doing put / get /
//! exists / remove on a small rotating set of keys, every put with a unique
//! value carried in the object's bytes (gets verify every byte). Each
//! operation is recorded with invoke/complete times and an outcome that says
//! only what the client knows: a timeout or transport error is `Unknown`.
//!
//! Every client reads through its own "home" master and writes through all
//! of them, so a master that serves reads it should not (the deliberately
//! broken build) is visible in the history.
//!
//! Its puts are hard-pinned, so eviction (which the lease workload drives,
//! `lease_workload.rs`) never removes a key of this history; the lease
//! workload's RemoveAlls do, and each is recorded here on every key it may
//! have touched ([`Shared::remove_all_records`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, ClientError, Pin, PutOptions, PutOutcome};
use mooncake_proto::ErrorCode;
use tokio::sync::Mutex;

use crate::access::Access;
use crate::availability::{PutRefusal, PutSource};
use crate::history::{OpKind, OpRecord, Outcome, ProcessId};
use crate::lease::LeaseRecord;
use crate::rng::Rng;

/// Bytes of every object: small, so the run measures coordination, but
/// still moved and verified over the data path.
pub const OBJECT_BYTES: usize = 4096;
/// A key is retired after this many operations (keeps the checker fast).
const OPS_PER_KEY_MAX: u64 = 150;
/// Keys in play at once.
const ACTIVE_KEYS: usize = 6;
/// Every put asks for two replicas and accepts no fewer (`min_replicas`):
/// one per store node, so killing the faulted store node never loses an
/// acknowledged object, even when the other node's room is held by failed
/// puts' quarantined ranges (placement is otherwise best effort); hard-pinned
/// (`pin: 2`), so eviction never removes one (the final-state checker would
/// see it as lost).
const PINNED_TWO_REPLICAS: PutOptions =
    PutOptions { replicas: 2, min_replicas: 2, preferred_segments: Vec::new(), pin: Pin::Hard };
/// How often a held put looks whether it may go.
const PUTS_HELD_POLL: Duration = Duration::from_millis(2);
/// A client gives up on an operation after this long (outcome Unknown).
pub const OP_TIMEOUT: Duration = Duration::from_secs(4);

/// What the workload needs.
#[derive(Clone, Debug)]
pub struct WorkloadOptions {
    /// How the clients connect (TLS or plain).
    pub access: Access,
    pub masters: Vec<String>,
    pub local_hostname: String,
    pub clients: usize,
    /// Total operations per second across all clients.
    pub rate: u64,
    pub seed: u64,
    /// The cluster's admin token, for the writers: their removes are
    /// forced (an admin operation), so a reader's KV lease never refuses
    /// one and the register model stays a plain register.
    pub admin_token: Option<mooncake_auth::admin::AdminToken>,
}

/// Shared by the clients of both workloads: the key rotation, value counter
/// and the histories.
pub struct Shared {
    origin: Instant,
    keys: Mutex<KeySet>,
    next_value: AtomicU64,
    pub records: Mutex<Vec<OpRecord>>,
    /// The lease workload's history (its own keys).
    pub lease_records: Mutex<Vec<LeaseRecord>>,
    /// The lease workload's RemoveAlls, which reach this history's keys too.
    pub remove_alls: Mutex<Vec<RemoveAllCall>>,
    /// Bytes read back that did not match any put's content.
    pub corrupt_reads: AtomicU64,
    /// Reads whose bytes decoded to a value some put wrote.
    pub verified_reads: AtomicU64,
    pub stop: AtomicBool,
    /// While set, neither workload puts: the register workload skips the
    /// puts it draws, the lease workload's rounds wait (the nemesis of the
    /// `stalled-writers` scenario shapes which arena holds what; reads and
    /// removes go on).
    pub puts_held: AtomicBool,
    /// While set, the register workload starts no operation at all
    /// (`quorum-pause`: with every master stopped, each op would only time
    /// out, and dozens of concurrent unknown ops per key put the
    /// linearizability search past its budget). Ops in flight go on.
    pub ops_held: AtomicBool,
    /// Puts of either workload started and not finished (see
    /// [`Shared::begin_put`]): with puts held, once it is zero no put can
    /// still be acknowledged (`disk-stores` kills a store node then).
    puts_in_flight: AtomicU64,
    /// The lease workload's reads (GetReplicaList) answered with disk
    /// replicas only (`disk-stores`: the object left memory for disk).
    pub lease_disk_only_reads: AtomicU64,
    /// The lease workload's stored objects (at most [`LEASE_STORED_MAX`]),
    /// for the tier reader of `disk-stores`: older ones have left memory
    /// for disk.
    pub lease_stored: Mutex<Vec<StoredLease>>,
    /// Why puts of either workload were not acknowledged, by cause (the
    /// report's `put failures` line: a run whose puts all failed says why).
    put_failures: std::sync::Mutex<BTreeMap<String, PutFailures>>,
    /// Puts of either workload refused with `NO_AVAILABLE_HANDLE` (at most
    /// [`REFUSALS_MAX`]), for the availability checker.
    refusals: std::sync::Mutex<Vec<PutRefusal>>,
}

/// Refusals kept in [`Shared::refusals`] at most (each about 1 KiB with
/// the master's message): a cache refusing most puts makes about 50 a
/// second (23,000 in 5 min before stop 43). Past it the checker judges
/// those kept, so it can only miss violations, never invent one.
const REFUSALS_MAX: usize = 100_000;

/// Puts that failed for one cause: how many, and the first one's message.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PutFailures {
    pub count: u64,
    pub first: String,
}

/// A failed put's cause, for [`Shared::note_put_failure`]: the master's
/// error code when it refused, else the kind of error (a few distinct
/// labels, never a key or a number).
pub fn failure_cause(e: &ClientError) -> String {
    match e.code() {
        Some(code) => format!("{code:?}"),
        None => {
            let text = e.to_string();
            text.split(':').next().unwrap_or_default().trim().to_string()
        }
    }
}

/// Lease objects kept in [`Shared::lease_stored`] at most (a 5 min run
/// stores about 10,000).
const LEASE_STORED_MAX: usize = 100_000;

/// A lease object the lease workload stored: its key (put once), value,
/// and when the put was acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredLease {
    pub key: String,
    pub value: u64,
    pub stored_ns: u64,
}

/// A put counted in flight ([`Shared::begin_put`]) until dropped.
pub struct PutInFlight<'a> {
    shared: &'a Shared,
}

impl Drop for PutInFlight<'_> {
    fn drop(&mut self) {
        self.shared.puts_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct KeySet {
    active: Vec<(String, u64)>,
    generation: u64,
    /// Every key with the time it came into play.
    all: Vec<(String, u64)>,
}

/// A RemoveAll of the lease workload, as the register history must see it.
#[derive(Clone, Copy, Debug)]
pub struct RemoveAllCall {
    pub invoke_ns: u64,
    pub complete_ns: u64,
    /// `Ok` (answered: took effect inside its interval), `Unknown` (may take
    /// effect any time after invoke, or never); `Fail` is not recorded.
    pub outcome: Outcome,
}

impl Shared {
    pub fn new(origin: Instant) -> Arc<Self> {
        let mut keys = KeySet { active: Vec::new(), generation: 0, all: Vec::new() };
        for _ in 0..ACTIVE_KEYS {
            keys.fresh(0);
        }
        Arc::new(Shared {
            origin,
            keys: Mutex::new(keys),
            next_value: AtomicU64::new(1),
            records: Mutex::new(Vec::new()),
            lease_records: Mutex::new(Vec::new()),
            remove_alls: Mutex::new(Vec::new()),
            corrupt_reads: AtomicU64::new(0),
            verified_reads: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            puts_held: AtomicBool::new(false),
            ops_held: AtomicBool::new(false),
            puts_in_flight: AtomicU64::new(0),
            lease_disk_only_reads: AtomicU64::new(0),
            lease_stored: Mutex::new(Vec::new()),
            put_failures: std::sync::Mutex::new(BTreeMap::new()),
            refusals: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Counts a put that was not acknowledged, under `cause`; `message`
    /// is kept for the first of each cause.
    pub fn note_put_failure(&self, cause: &str, message: impl FnOnce() -> String) {
        let mut failures = self.put_failures.lock().unwrap_or_else(|p| p.into_inner());
        let entry = failures.entry(cause.to_string()).or_default();
        if entry.count == 0 {
            entry.first = message();
        }
        entry.count += 1;
    }

    /// Records a put refused with `NO_AVAILABLE_HANDLE` (the answer came
    /// now); other errors are not recorded.
    pub fn note_refusal(&self, e: &ClientError, refused: impl FnOnce(String, u64) -> PutRefusal) {
        if e.code() != Some(ErrorCode::NoAvailableHandle) {
            return;
        }
        let refusal = refused(e.to_string(), self.now_ns());
        let mut refusals = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        if refusals.len() < REFUSALS_MAX {
            refusals.push(refusal);
        }
    }

    /// Every put refused for room so far.
    pub fn refusals(&self) -> Vec<PutRefusal> {
        self.refusals.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every put failure so far, by cause.
    pub fn put_failures(&self) -> BTreeMap<String, PutFailures> {
        self.put_failures.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Every key the workload touched.
    pub async fn all_keys(&self) -> Vec<String> {
        self.keys.lock().await.all.iter().map(|(key, _)| key.clone()).collect()
    }

    /// A put may start unless puts are held: it is counted in flight
    /// first, then the hold is looked at (and the nemesis sets the hold,
    /// then looks at the count: one of the two sees the other).
    pub fn begin_put(&self) -> Option<PutInFlight<'_>> {
        self.puts_in_flight.fetch_add(1, Ordering::SeqCst);
        let put = PutInFlight { shared: self };
        (!self.puts_held.load(Ordering::SeqCst)).then_some(put)
    }

    /// Waits for a put to be allowed ([`Shared::begin_put`]); once the run
    /// is stopping, puts go on held or not.
    pub async fn put_allowed(&self) -> PutInFlight<'_> {
        loop {
            if let Some(put) = self.begin_put() {
                return put;
            }
            if self.stop.load(Ordering::Relaxed) {
                self.puts_in_flight.fetch_add(1, Ordering::SeqCst);
                return PutInFlight { shared: self };
            }
            tokio::time::sleep(PUTS_HELD_POLL).await;
        }
    }

    /// Holds puts and waits until none is in flight (at most `max`):
    /// afterwards no put of either workload can be acknowledged until
    /// [`Shared::release_puts`]. Returns whether the puts drained.
    pub async fn hold_puts(&self, max: Duration) -> bool {
        self.puts_held.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + max;
        while self.puts_in_flight.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(PUTS_HELD_POLL).await;
        }
        true
    }

    pub fn release_puts(&self) {
        self.puts_held.store(false, Ordering::SeqCst);
    }

    /// Notes a stored lease object (see [`Shared::lease_stored`]).
    pub async fn note_lease_stored(&self, key: &str, value: u64) {
        let mut stored = self.lease_stored.lock().await;
        if stored.len() < LEASE_STORED_MAX {
            stored.push(StoredLease { key: key.to_string(), value, stored_ns: self.now_ns() });
        }
    }

    /// A fresh value, unique across both workloads.
    pub fn next_value(&self) -> u64 {
        self.next_value.fetch_add(1, Ordering::Relaxed)
    }

    /// The lease workload's RemoveAlls as ops of `process` on this history's
    /// keys: an answered one on every key in play before it completed (it
    /// cannot touch a later one), an unknown one on every key.
    pub async fn remove_all_records(&self, process: ProcessId) -> Vec<OpRecord> {
        let keys = self.keys.lock().await.all.clone();
        let calls = self.remove_alls.lock().await.clone();
        let mut out = Vec::new();
        for call in calls.iter().filter(|c| c.outcome != Outcome::Fail) {
            let reached = |created_ns: u64| call.outcome == Outcome::Unknown || created_ns <= call.complete_ns;
            out.extend(keys.iter().filter(|(_, created_ns)| reached(*created_ns)).map(|(key, _)| OpRecord {
                process,
                key: key.clone(),
                op: OpKind::RemoveAll,
                invoke_ns: call.invoke_ns,
                complete_ns: Some(call.complete_ns),
                outcome: call.outcome,
            }));
        }
        out
    }

    async fn pick_key(&self, rng: &mut Rng) -> String {
        let now_ns = self.now_ns();
        let mut k = self.keys.lock().await;
        let i = rng.below(k.active.len() as u64) as usize;
        k.active[i].1 += 1;
        let key = k.active[i].0.clone();
        if k.active[i].1 >= OPS_PER_KEY_MAX {
            k.active.swap_remove(i);
            k.fresh(now_ns);
        }
        key
    }
}

impl KeySet {
    fn fresh(&mut self, now_ns: u64) {
        let key = format!("jepsen/k{}", self.generation);
        self.generation += 1;
        self.all.push((key.clone(), now_ns));
        self.active.push((key, 0));
    }
}

/// The content of the put of `value` by the register workload.
pub fn object_bytes(value: u64) -> Vec<u8> {
    value_bytes(value, OBJECT_BYTES)
}

/// `len` bytes that carry `value`: it in the first 8, then a stream seeded by it.
pub fn value_bytes(value: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = value.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    out.extend_from_slice(&value.to_le_bytes());
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The value whose register put wrote `bytes`, if the bytes are exactly such a put's.
pub fn decode_value(bytes: &[u8]) -> Option<u64> {
    decode_sized(bytes, OBJECT_BYTES)
}

/// The value whose `len` bytes ([`value_bytes`]) are exactly `bytes`.
pub fn decode_sized(bytes: &[u8], len: usize) -> Option<u64> {
    let v = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    (bytes.len() == len && value_bytes(v, len) == bytes).then_some(v)
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
    let mut cfg = opts.access.client(vec![home]);
    cfg.local_hostname = opts.local_hostname.clone();
    cfg.tcp.request_timeout = OP_TIMEOUT;
    let reader = connect_with_retry(cfg.clone()).await?;
    cfg.masters = opts.masters.clone();
    cfg.admin_token = opts.admin_token.clone();
    let writer = connect_with_retry(cfg).await?;
    Ok((reader, writer))
}

pub(crate) async fn connect_with_retry(cfg: ClientConfig) -> anyhow::Result<Client> {
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
        if shared.ops_held.load(Ordering::Relaxed) {
            continue;
        }
        let key = shared.pick_key(&mut rng).await;
        let op = match rng.below(100) {
            0..35 => OpKind::Put { value: shared.next_value() },
            35..70 => OpKind::Get,
            70..85 => OpKind::Exists,
            _ => OpKind::Remove,
        };
        // A put drawn while puts are held is not made (reads go on).
        let put = match op {
            OpKind::Put { .. } => match shared.begin_put() {
                Some(put) => Some(put),
                None => continue,
            },
            _ => None,
        };
        let invoke_ns = shared.now_ns();
        let outcome =
            match tokio::time::timeout(OP_TIMEOUT, perform(&reader, &writer, &key, op, &shared, invoke_ns)).await {
                Ok(o) => o,
                Err(_) => {
                    if put.is_some() {
                        shared.note_put_failure("timed out", || format!("no answer in {OP_TIMEOUT:?}"));
                    }
                    Outcome::Unknown
                }
            };
        let complete_ns = Some(shared.now_ns());
        drop(put);
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

async fn perform(reader: &Client, writer: &Client, key: &str, op: OpKind, shared: &Shared, invoke_ns: u64) -> Outcome {
    match op {
        OpKind::Put { value } => {
            let result = writer.put(key, &object_bytes(value), &PINNED_TWO_REPLICAS).await;
            match &result {
                Ok(PutOutcome::Stored) => {}
                Ok(PutOutcome::KeptExisting) => shared.note_put_failure("kept existing", || key.to_string()),
                Err(e) => {
                    shared.note_put_failure(&failure_cause(e), || e.to_string());
                    shared.note_refusal(e, |message, complete_ns| PutRefusal {
                        source: PutSource::Register,
                        key: key.to_string(),
                        size_bytes: OBJECT_BYTES as u64,
                        replicas: PINNED_TWO_REPLICAS.replicas,
                        min_replicas: PINNED_TWO_REPLICAS.min_replicas,
                        invoke_ns,
                        complete_ns,
                        message,
                    });
                }
            }
            match result {
                Ok(PutOutcome::Stored) => Outcome::Ok,
                // The key existed: Mooncake's put keeps it and writes nothing.
                Ok(PutOutcome::KeptExisting) => Outcome::Fail,
                Err(e) if definitely_failed(&e) => Outcome::Fail,
                Err(e) if e.is_definite() && e.code() == Some(ErrorCode::NoAvailableHandle) => Outcome::Fail,
                Err(ClientError::PutRevoked(_)) => Outcome::Fail,
                Err(_) => Outcome::Unknown,
            }
        }
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
        // Never drawn here (nothing was sent): the lease workload runs
        // RemoveAll and records it on every key (`remove_all_records`).
        OpKind::RemoveAll => Outcome::Fail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::History;

    #[tokio::test]
    async fn remove_alls_reach_every_key_they_may_have_touched() {
        let shared = Shared::new(Instant::now());
        shared.keys.lock().await.fresh(500); // the seventh key comes into play at 500 ns
        let call = |invoke_ns, complete_ns, outcome| RemoveAllCall { invoke_ns, complete_ns, outcome };
        *shared.remove_alls.lock().await = vec![
            call(100, 200, Outcome::Ok),
            call(300, 400, Outcome::Fail),
            call(450, 460, Outcome::Unknown),
            call(800, 900, Outcome::Ok),
        ];
        let records = shared.remove_all_records(ProcessId(9)).await;
        let on = |key: &str| records.iter().filter(|r| r.key == key).map(|r| r.invoke_ns).collect::<Vec<_>>();
        // Answered before the key existed: cannot touch it. Failed: nothing.
        // Unknown: may take effect later, on any key.
        assert_eq!(on("jepsen/k0"), vec![100, 450, 800]);
        assert_eq!(on("jepsen/k6"), vec![450, 800]);
        assert_eq!(records.len(), 6 * 3 + 2);
        assert!(records.iter().all(|r| r.op == OpKind::RemoveAll && r.process == ProcessId(9)));
        assert!(History::new(records).is_ok(), "well-formed ops of the register history");
    }

    #[tokio::test]
    async fn held_puts_drain_and_none_starts_until_released() {
        let shared = Shared::new(Instant::now());
        let put = shared.begin_put().expect("puts are not held");
        assert!(!shared.hold_puts(Duration::from_millis(20)).await, "a put in flight keeps the hold from draining");
        assert!(shared.begin_put().is_none(), "held: no put starts");
        drop(put);
        assert!(shared.hold_puts(Duration::from_millis(20)).await, "drained once the put ended");
        shared.release_puts();
        let again = shared.begin_put();
        assert!(again.is_some(), "released");
        drop(again);
        assert!(shared.hold_puts(Duration::ZERO).await, "a refused or finished put leaves no count behind");
    }

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
        let big = value_bytes(7, 65_536);
        assert_eq!(decode_sized(&big, 65_536), Some(7));
        assert_eq!(decode_sized(&big[..65_528], 65_536), None, "a cut object is not the object");
        assert_eq!(decode_value(&big), None, "not a register object");
    }
}
