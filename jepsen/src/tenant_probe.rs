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
//! - every object is removed again.
//!
//! Only definite answers count: a timeout or an error proves nothing
//! either way. Eviction only makes objects vanish, never appear, so no
//! answer that would be a crossing can come from it. The probe's keys live
//! in named tenants: the register and lease workloads (the default tenant)
//! never see them, nor do the final checkers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mooncake_client::{Client, ClientError, Pin, PutOptions, Tenant};
use mooncake_proto::ErrorCode;
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
    let mut tick = tokio::time::interval(ROUND_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !shared.stop.load(Ordering::Relaxed) {
        tick.tick().await;
        round(&clients, &shared, &mut owners, &mut report).await;
        report.crossings.truncate(CROSSINGS_MAX);
        report.rounds += 1;
    }
    for c in clients {
        c.close().await;
    }
    Ok(report)
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
