//! The tenant probe: two clients in two tenants (docs/TENANTS.md) put,
//! read and remove the same keys through every fault of the run, and the
//! `tenant_isolation` checker judges what they saw. Each round r:
//!
//! - both tenants put `iso/r{r}/shared`, each with a value of its own, and
//!   tenant b alone puts `iso/r{r}/b-only`;
//! - each tenant reads `shared`: it must never get the other tenant's value;
//! - tenant a reads, asks for and removes (forced) `b-only`, which it never
//!   put: the read must find nothing, the existence check say no, and the
//!   remove answer `OBJECT_NOT_FOUND`. Anything else crossed tenants;
//! - every object is removed again;
//! - tenant a puts `iso/r{r}/claimed` by hand (PutStart, its writes, PutEnd)
//!   and removes it; tenant b then sends, as a client that never
//!   registered, a PutEnd naming the ranges a's object held some rounds
//!   ago without their WRITE capability (issue 38, finding 1: after a
//!   leader change such a claim was recorded, and the read that followed
//!   returned the removed object's bytes). Every claim must be refused;
//!   one recorded crossed tenants. Rounds across a leader change are the
//!   ones that matter: only there does the leader not know the ranges.
//!
//! Only definite answers count: a timeout or an error proves nothing
//! either way. Eviction only makes objects vanish, never appear, so no
//! answer that would be a crossing can come from it. The probe's keys live
//! in named tenants: the register and lease workloads (the default tenant)
//! never see them, nor do the final checkers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mooncake_client::{Client, ClientError, Pin, PutOptions, Tenant, remote};
use mooncake_proto::ErrorCode;
use mooncake_proto::master::{PutEndRequest, PutStartRequest, Replica};
use serde::Serialize;

use crate::access::Access;
use crate::workload::{OBJECT_BYTES, OP_TIMEOUT, Shared, connect_with_retry, decode_value, value_bytes};

/// The two tenants of the probe.
pub const PROBE_TENANTS: [&str; 2] = ["jepsen-a", "jepsen-b"];
/// A round every this often.
pub(crate) const ROUND_INTERVAL: Duration = Duration::from_millis(100);
/// Crossings kept at most (the count goes on in `checked`'s terms: a
/// broken build crosses on every round).
const CROSSINGS_MAX: usize = 1_000;
/// Ranges of tenant a's removed objects kept for tenant b's claims: a
/// claim names those of about this many rounds ago, so the rounds after a
/// leader change claim ranges the deposed leader handed out.
const CLAIMS_BEHIND: usize = 20;
/// The client id of tenant b's claims: never registered (a registered
/// writer's PutEnds need its credential).
const CLAIMANT: u64 = 0x0c1a_1000_0000_0000;
/// One replica, unpinned: the probe's objects may be evicted freely.
const PROBE_PUT: PutOptions =
    PutOptions { replicas: 1, min_replicas: 1, preferred_segments: Vec::new(), pin: Pin::None };

/// What the probe needs.
#[derive(Clone, Debug)]
pub struct TenantProbeOptions {
    pub access: Access,
    pub masters: Vec<String>,
    pub local_hostname: String,
    /// For the forced removes (a KV lease of a read must not keep a key).
    pub admin_token: Option<mooncake_auth::admin::AdminToken>,
}

/// What the probe saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TenantProbeReport {
    pub rounds: u64,
    /// Definite answers judged.
    pub checked: u64,
    /// Answers that crossed tenants, described.
    pub crossings: Vec<String>,
}

/// Which tenant put which value.
#[derive(Default)]
struct Owners(HashMap<u64, usize>);

impl Owners {
    fn crossed(&self, reader: usize, bytes: &[u8]) -> Option<String> {
        let value = decode_value(bytes)?;
        match self.0.get(&value) {
            Some(owner) if *owner != reader => Some(format!(
                "tenant {} read value {value}, which tenant {} put",
                PROBE_TENANTS[reader], PROBE_TENANTS[*owner]
            )),
            _ => None,
        }
    }
}

async fn connect(opts: &TenantProbeOptions, tenant: &str) -> anyhow::Result<Client> {
    let mut cfg = opts.access.client(opts.masters.clone());
    cfg.local_hostname = opts.local_hostname.clone();
    cfg.tcp.request_timeout = OP_TIMEOUT;
    cfg.admin_token = opts.admin_token.clone();
    cfg.tenant = Tenant::parse(tenant).map_err(|e| anyhow::anyhow!("{e}"))?;
    connect_with_retry(cfg).await
}

/// A call bounded by [`OP_TIMEOUT`]; `None` when it timed out.
async fn bounded<T>(f: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(OP_TIMEOUT, f).await.ok()
}

/// Probes until `shared.stop` is set.
pub async fn run(opts: TenantProbeOptions, shared: Arc<Shared>) -> anyhow::Result<TenantProbeReport> {
    let clients = [connect(&opts, PROBE_TENANTS[0]).await?, connect(&opts, PROBE_TENANTS[1]).await?];
    let mut report = TenantProbeReport::default();
    let mut owners = Owners::default();
    let mut claimable: VecDeque<Vec<Replica>> = VecDeque::new();
    let mut tick = tokio::time::interval(ROUND_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !shared.stop.load(Ordering::Relaxed) {
        tick.tick().await;
        round(&clients, &shared, &mut owners, &mut report).await;
        claim(&clients, &shared, &mut claimable, &mut report).await;
        report.crossings.truncate(CROSSINGS_MAX);
        report.rounds += 1;
    }
    for c in clients {
        c.close().await;
    }
    Ok(report)
}

/// Tenant a's hand-made put and removal of `iso/r{r}/claimed`, then tenant
/// b's claim, without a grant, of the ranges a held [`CLAIMS_BEHIND`]
/// rounds ago.
async fn claim(
    clients: &[Client; 2],
    shared: &Shared,
    claimable: &mut VecDeque<Vec<Replica>>,
    report: &mut TenantProbeReport,
) {
    let r = report.rounds;
    let (a, b) = (&clients[0], &clients[1]);
    let key = format!("iso/r{r}/claimed");
    let bytes = value_bytes(shared.next_value(), OBJECT_BYTES);
    let put = shared.put_allowed().await;
    let start = PutStartRequest {
        client_id: a.client_id(),
        key: key.clone(),
        size: bytes.len() as u64,
        replica_num: 1,
        ..Default::default()
    };
    if let Some(Ok(replicas)) = bounded(a.master().put_start(start)).await {
        let mut written = true;
        for r in &replicas {
            written &= matches!(bounded(a.engine().write(&remote(r), r.offset, &bytes)).await, Some(Ok(())));
        }
        let end = PutEndRequest {
            client_id: a.client_id(),
            key: key.clone(),
            checksum: mooncake_client::checksum::crc32c(&bytes),
            size: bytes.len() as u64,
            replicas: replicas.clone(),
            // The probe's own request ids: one per round, odd.
            request_id: 0x7e17_0000_0000_0000 | (r << 1) | 1,
            ..Default::default()
        };
        let ended = written && matches!(bounded(a.master().put_end_with(end)).await, Some(Ok(())));
        if ended && matches!(bounded(a.remove(&key, true)).await, Some(Ok(()))) {
            claimable.push_back(replicas.into_iter().map(|r| Replica { capability: Vec::new(), ..r }).collect());
        } else if !ended {
            let _ = bounded(a.master().put_revoke(a.client_id(), &key)).await;
        }
    }
    drop(put);
    if claimable.len() < CLAIMS_BEHIND {
        return;
    }
    let Some(ranges) = claimable.pop_front() else { return };
    let stolen = format!("iso/r{r}/stolen");
    let end = PutEndRequest {
        client_id: CLAIMANT,
        key: stolen.clone(),
        checksum: 0,
        size: OBJECT_BYTES as u64,
        replicas: ranges,
        ..Default::default()
    };
    match bounded(b.master().put_end_with(end)).await {
        Some(Ok(())) => {
            report.checked += 1;
            report.crossings.push(format!(
                "tenant {}'s claim of ranges {} freed, without their WRITE grant, was recorded as {stolen:?}",
                PROBE_TENANTS[1], PROBE_TENANTS[0]
            ));
            let _ = bounded(b.remove(&stolen, true)).await;
        }
        Some(Err(_)) => report.checked += 1,
        None => {}
    }
}

async fn round(clients: &[Client; 2], shared: &Shared, owners: &mut Owners, report: &mut TenantProbeReport) {
    let r = report.rounds;
    let (shared_key, b_only) = (format!("iso/r{r}/shared"), format!("iso/r{r}/b-only"));
    let (a, b) = (&clients[0], &clients[1]);
    for (i, client) in clients.iter().enumerate() {
        let value = shared.next_value();
        owners.0.insert(value, i);
        // Puts wait while a nemesis holds them (`Shared::puts_held`).
        let _put = shared.put_allowed().await;
        let _ = bounded(client.put(&shared_key, &value_bytes(value, OBJECT_BYTES), &PROBE_PUT)).await;
    }
    let value = shared.next_value();
    owners.0.insert(value, 1);
    let put = shared.put_allowed().await;
    let _ = bounded(b.put(&b_only, &value_bytes(value, OBJECT_BYTES), &PROBE_PUT)).await;
    drop(put);

    // Each tenant's read of the shared key.
    for (i, client) in clients.iter().enumerate() {
        match bounded(client.get(&shared_key)).await {
            Some(Ok(bytes)) => {
                report.checked += 1;
                report.crossings.extend(owners.crossed(i, &bytes));
            }
            Some(Err(ClientError::NotFound(_))) => report.checked += 1,
            _ => {}
        }
    }
    // Tenant a on b's key: nothing there, whatever b did.
    match bounded(a.get(&b_only)).await {
        Some(Ok(bytes)) => {
            report.checked += 1;
            let whose = owners.crossed(0, &bytes).unwrap_or_else(|| format!("{} bytes", bytes.len()));
            report.crossings.push(format!(
                "tenant {} read {b_only:?}, which only {} put: {whose}",
                PROBE_TENANTS[0], PROBE_TENANTS[1]
            ));
        }
        Some(Err(ClientError::NotFound(_))) => report.checked += 1,
        _ => {}
    }
    if let Some(Ok(exists)) = bounded(a.exists(&b_only)).await {
        report.checked += 1;
        if exists {
            report
                .crossings
                .push(format!("tenant {} sees {b_only:?}, which only {} put", PROBE_TENANTS[0], PROBE_TENANTS[1]));
        }
    }
    match bounded(a.remove(&b_only, true)).await {
        Some(Ok(())) => {
            report.checked += 1;
            report
                .crossings
                .push(format!("tenant {} removed {b_only:?}, which only {} put", PROBE_TENANTS[0], PROBE_TENANTS[1]));
        }
        Some(Err(e)) if e.code() == Some(ErrorCode::ObjectNotFound) => report.checked += 1,
        _ => {}
    }
    // Clean up (forced: the reads' KV leases must not keep the objects).
    let _ = bounded(a.remove(&shared_key, true)).await;
    let _ = bounded(b.remove(&shared_key, true)).await;
    let _ = bounded(b.remove(&b_only, true)).await;
}
