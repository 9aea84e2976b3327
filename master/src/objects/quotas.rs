//! Tenants' quotas at put time (docs/TENANTS.md). A put that would take its
//! tenant past its quota first evicts the tenant's own objects — neither
//! leased, hard-pinned nor being removed; unpinned before soft-pinned, in
//! eviction's usual order (`objects/eviction.rs`) — and is refused with
//! `TENANT_QUOTA_EXCEEDED` only when nothing of the tenant's is left to
//! evict. Other tenants' objects are never evicted for it.
//!
//! The leader admits a put at PutStart against the applied usage plus the
//! tenant's puts in flight (so the items of one batch count each other),
//! evicting ahead; the bound itself is the state machine's: every commit
//! of a tenant with a quota is a `PutCommitInQuota`, refused at apply when
//! it would take the tenant past its quota, whatever path placed it
//! (PutStart, writer chunks, a put a deposed leader started, upserts), so
//! concurrent puts cannot overshoot it. Writer chunks are not handed to a
//! tenant with a quota (its small puts take the PutStart path).

use crate::refusal::Refusal;
use mooncake_segment::tenant::{Tenant, tenant_of};

use mooncake_raft_store::MetaState;

use crate::leader::reservations::PutAsk;
use crate::shared::Shared;

/// Eviction rounds one put may run for its quota before it is refused.
const QUOTA_ROUNDS_MAX: u32 = 4;

/// How far `ask` would take its tenant past its quota, in bytes (0: it fits
/// or the tenant has none), counting the tenant's other puts in flight,
/// and the tenant.
fn over_quota(shared: &Shared, ask: &PutAsk) -> (u64, Option<u64>, String) {
    let tenant = tenant_of(&ask.key).to_string();
    let (after, quota) = shared.reader.read(|s| {
        let Some(quota) = s.tenant_quota(&tenant) else { return (0, None) };
        let used = s.tenant_usage(&tenant).bytes;
        // An upsert replaces the object it finds: its bytes go.
        let replaced = match ask.upsert {
            true => s.object(&ask.key).map_or(0, |o| o.size_bytes),
            false => 0,
        };
        (used.saturating_sub(replaced).saturating_add(ask.size_bytes), Some(quota))
    });
    let Some(quota) = quota else { return (0, None, tenant) };
    // The state first, then the soft state (lock order, leader.rs).
    let in_flight = shared.leader.with(|t| t.puts.tenant_in_flight(&tenant, &ask.key)).unwrap_or(0);
    (after.saturating_add(in_flight).saturating_sub(quota), Some(quota), tenant)
}

/// Admits `ask` under its tenant's quota, evicting the tenant's own
/// objects as needed; `TENANT_QUOTA_EXCEEDED` when that cannot make room.
pub async fn admit(shared: &Shared, ask: &PutAsk) -> Result<(), Refusal> {
    for _ in 0..QUOTA_ROUNDS_MAX {
        let (over, quota, name) = over_quota(shared, ask);
        let Some(quota) = quota else { return Ok(()) };
        if over == 0 {
            return Ok(());
        }
        if ask.size_bytes > quota {
            return Err(exceeded(&name, quota, format!("the object alone ({} bytes) is larger", ask.size_bytes)));
        }
        let tenant = Tenant::parse(&name).unwrap_or_default();
        // An upsert's own object is replaced, not evicted: it frees nothing.
        if crate::objects::eviction::round_for_quota(shared, &tenant, &ask.key, over).await == 0 {
            return Err(exceeded(
                &name,
                quota,
                "nothing of its own is left to evict (leased, hard-pinned, or its puts in flight)".into(),
            ));
        }
    }
    match over_quota(shared, ask) {
        (0, _, _) => Ok(()),
        (_, quota, name) => Err(exceeded(&name, quota.unwrap_or(0), "concurrent puts kept filling it".into())),
    }
}

fn exceeded(tenant: &str, quota: u64, why: String) -> Refusal {
    Refusal::QuotaExceeded(format!(
        "tenant {tenant:?} is at its quota of {quota} bytes and {why}: remove some of its objects, or raise the \
         quota (`mooncake tenant set {tenant} --quota SIZE`)"
    ))
}

/// A PutEnd of an object placed in a writer chunk (`stored_key`, `size`
/// bytes): no eviction runs for it, so it is refused when it would take
/// its tenant past its quota. Chunks are not handed to a tenant with a
/// quota, but a client may hold one reserved before the quota was set, or
/// reserved in another tenant.
pub fn chunk_put_allowed(shared: &Shared, stored_key: &str, size: u64) -> Result<(), Refusal> {
    let tenant = tenant_of(stored_key);
    let over = shared.reader.read(|s| {
        let quota = s.tenant_quota(tenant)?;
        let used = s.tenant_usage(tenant).bytes;
        (used.saturating_add(size) > quota).then_some(quota)
    });
    match over {
        None => Ok(()),
        Some(quota) => Err(exceeded(
            tenant,
            quota,
            "a put placed in a writer chunk evicts nothing: put it the usual way (PutStart)".into(),
        )),
    }
}

/// The refusal of a PutEnd recorded without a reservation (a put an
/// earlier leader started) whose `size` bytes would take the tenant of
/// `stored_key` past its quota in `s`; `None` when it fits. No eviction
/// runs for it: it was placed before this leader could admit it.
pub fn over_quota_at_end(s: &MetaState, stored_key: &str, size: u64, upsert: bool) -> Option<Refusal> {
    let tenant = tenant_of(stored_key);
    let quota = s.tenant_quota(tenant)?;
    // An upsert replaces the object it finds: its bytes go.
    let replaced = match upsert {
        true => s.object(stored_key).map_or(0, |o| o.size_bytes),
        false => 0,
    };
    let used = s.tenant_usage(tenant).bytes.saturating_sub(replaced);
    (used.saturating_add(size) > quota).then(|| {
        exceeded(tenant, quota, "a put started before a leader change evicts nothing for it: put it again".into())
    })
}

/// Whether `tenant` has a quota (writer chunks are not handed to it).
pub fn has_quota(shared: &Shared, tenant: &Tenant) -> bool {
    shared.reader.read(|s| s.tenant_quota(tenant.name()).is_some())
}
