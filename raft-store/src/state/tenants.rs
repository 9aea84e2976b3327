//! Tenants in the replicated state (docs/TENANTS.md): each tenant's quota
//! (`Command::SetTenantQuota`, replicated, in the image from schema 2 on)
//! and its usage, derived from the objects ([`ObjectIndex`] keeps it as
//! they change, so it is never stored and always agrees with them).
//!
//! [`ObjectIndex`]: super::objects::ObjectIndex

use mooncake_segment::tenant::Tenant;
use serde::Serialize;

use super::MetaState;
use super::validation::invalid;
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
