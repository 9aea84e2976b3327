//! Tenants in the replicated state (docs/TENANTS.md): each tenant's quota
//! (`Command::SetTenantQuota`, replicated, in the image from schema 2 on)
//! and its usage, derived from the objects ([`ObjectIndex`] keeps it as
//! they change, so it is never stored and always agrees with them).
//!
//! [`ObjectIndex`]: super::objects::ObjectIndex

use mooncake_segment::tenant::{Tenant, tenant_of};
use serde::Serialize;

use super::MetaState;
use super::apply::Applied;
use super::validation::invalid;
use crate::command::{NewObject, Response};
use crate::error::MetaError;

/// What a tenant's objects take: how many, and their bytes (each object
/// once, at its size, whatever its replicas: what a quota bounds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TenantUsage {
    pub objects: u64,
    pub bytes: u64,
}

impl TenantUsage {
    pub(super) fn add(&mut self, size_bytes: u64) {
        self.objects += 1;
        self.bytes += size_bytes;
    }

    pub(super) fn take(&mut self, size_bytes: u64) {
        self.objects = self.objects.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(size_bytes);
    }

    pub fn is_empty(&self) -> bool {
        self.objects == 0
    }
}

impl MetaState {
    /// `Command::SetTenantQuota`.
    pub(super) fn set_tenant_quota(&mut self, tenant: &str, bytes: u64) -> Result<(), MetaError> {
        let tenant = Tenant::parse(tenant).map_err(|e| invalid(e.to_string()))?;
        match bytes {
            0 => self.tenant_quotas.remove(tenant.name()),
            n => self.tenant_quotas.insert(tenant.name().to_string(), n),
        };
        Ok(())
    }

    /// `Command::PutCommitInQuota`: `PutCommit` once the object fits its
    /// tenant's quota. A retry of an applied commit, and a put of a key
    /// that exists (not an upsert), get `PutCommit`'s answer.
    pub(super) fn put_commit_in_quota(&mut self, new: &NewObject) -> Applied {
        let existing = self.objects.get(&new.key);
        let retry = existing.is_some_and(|o| super::arenas::is_retry_of(o, new));
        if retry || (existing.is_some() && !new.upsert) {
            return self.put_commit(new);
        }
        let tenant = tenant_of(&new.key);
        if let Some(quota) = self.tenant_quota(tenant) {
            let replaced = existing.map_or(0, |o| o.size_bytes);
            let used = self.tenant_usage(tenant).bytes.saturating_sub(replaced);
            if used.saturating_add(new.size_bytes) > quota {
                return Ok(Response::Err(MetaError::QuotaExceeded(format!(
                    "tenant {tenant:?} holds {used} of its {quota} bytes; {:?} ({} bytes) does not fit: remove some \
                     of its objects, or raise the quota",
                    new.key, new.size_bytes
                ))));
            }
        }
        self.put_commit(new)
    }

    /// The quota of tenant `name` in bytes, if it has one.
    pub fn tenant_quota(&self, name: &str) -> Option<u64> {
        self.tenant_quotas.get(name).copied()
    }

    /// Every quota, by tenant name.
    pub fn tenant_quotas(&self) -> impl Iterator<Item = (&str, u64)> {
        self.tenant_quotas.iter().map(|(t, b)| (t.as_str(), *b))
    }

    /// What tenant `name`'s objects take now.
    pub fn tenant_usage(&self, name: &str) -> TenantUsage {
        self.objects.usage(name)
    }

    /// The usage of every tenant that has objects, by name.
    pub fn tenant_usages(&self) -> impl Iterator<Item = (&str, TenantUsage)> {
        self.objects.usages()
    }
}
