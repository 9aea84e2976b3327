//! Apply of the client and segment commands: registering clients (and
//! binding their credentials), mounting, unmounting and remounting
//! segments, dropping a segment with every replica on it, and expiring a
//! client (keeping its disk segments detached, if asked).

use std::collections::BTreeSet;

use mooncake_segment::tenant::Tenant;
use mooncake_segment::{ClientId, RangeAllocator, SegmentId};

use super::validation::{invalid, validate_segment};
use super::{ClientEntry, MetaState, SegmentEntry};
use crate::command::{CredentialHash, SegmentSpec, Tier};
use crate::error::MetaError;

/// Whether `client` (holding `credential`) may mount `spec` over `existing`,
/// the segment already mounted under its id: only its owner, with the same
/// size and tier, and for a detached disk segment the credential its owner
/// was registered with.
fn check_remount(
    existing: &SegmentEntry,
    client: ClientId,
    spec: &SegmentSpec,
    credential: &CredentialHash,
    tenant: Option<&str>,
) -> Result<(), MetaError> {
    if existing.owner != client || existing.spec.size_bytes != spec.size_bytes || existing.tier() != spec.tier {
        return Err(MetaError::SegmentAlreadyExists(format!(
            "{} is mounted by {} with {} bytes of {}",
            spec.id,
            existing.owner,
            existing.spec.size_bytes,
            existing.tier().name()
        )));
    }
    if existing.tenant() != tenant {
        let named = |t: Option<&str>| t.map_or("every tenant".to_string(), |t| format!("tenant {t:?}"));
        return Err(MetaError::SegmentAlreadyExists(format!(
            "{} is mounted for {}, not {}; restart the store node with the --segment-tenant it had, or unmount the \
             segment first",
            spec.id,
            named(existing.tenant()),
            named(tenant)
        )));
    }
    if let Some(detached) = &existing.detached
        && detached.credential != *credential
    {
        return Err(MetaError::PermissionDenied(format!(
            "disk segment {} belongs to {client} as registered by another process (another credential); \
             restart the store node with its --credential-file to mount its disk again",
            spec.id
        )));
    }
    Ok(())
}

/// The tenant a segment is to be dedicated to, once its name is checked.
/// (An empty name is the default tenant's, as in a call's tenant header.)
fn valid_tenant(tenant: Option<&str>) -> Result<Option<String>, MetaError> {
    let Some(name) = tenant else { return Ok(None) };
    let parsed = Tenant::parse(name).map_err(|e| invalid(format!("a segment dedicated to {name:?}: {e}")))?;
    Ok(Some(parsed.name().to_string()))
}

fn same_memory_error(spec: &SegmentSpec, other: &SegmentEntry) -> MetaError {
    MetaError::SegmentAlreadyExists(format!(
        "segment {} would map {} on {}, which is already segment {} (owned by {}); one memory region is one segment",
        spec.id, spec.shm_path, spec.host_id, other.spec.id, other.owner
    ))
}

impl MetaState {
    /// Runs `register` (a mount or remount, which registers `client` under
    /// `credential`) for a caller holding `credential`, if it may act as
    /// `client`. A refusal changes nothing.
    pub(super) fn as_client(
        &mut self,
        client: ClientId,
        credential: &CredentialHash,
        register: impl FnOnce(&mut Self) -> Result<(), MetaError>,
    ) -> Result<(), MetaError> {
        self.check_credential(client, credential)?;
        register(self)
    }

    fn register_client(&mut self, client: ClientId, credential: &CredentialHash) {
        let now = self.now_ms;
        let entry = ClientEntry { id: client, registered_ms: now, credential: *credential };
        self.clients.entry(client).or_insert(entry);
    }

    /// The segment (other than `spec.id` and those `ignore` accepts) that
    /// already maps the same shared memory as `spec`: same host, same file.
    fn same_memory(&self, spec: &SegmentSpec, ignore: impl Fn(&SegmentEntry) -> bool) -> Option<&SegmentEntry> {
        if spec.shm_path.is_empty() {
            return None; // private memory of its store node: nothing to share
        }
        self.segments.values().find(|s| {
            s.spec.id != spec.id && s.spec.host_id == spec.host_id && s.spec.shm_path == spec.shm_path && !ignore(s)
        })
    }

    /// Mounts `spec` for `client` (holding `credential`), dedicated to
    /// `tenant` if named. Mounting a segment it already has is a retried
    /// mount, except for a disk segment: a restarted store node mounts its
    /// disk file again from a new endpoint, which the segment takes (and a
    /// detached one is attached again, its objects readable again).
    pub(super) fn mount(
        &mut self,
        client: ClientId,
        spec: &SegmentSpec,
        credential: &CredentialHash,
        tenant: Option<&str>,
    ) -> Result<(), MetaError> {
        validate_segment(spec)?;
        let tenant = valid_tenant(tenant)?;
        if let Some(other) = self.same_memory(spec, |_| false) {
            return Err(same_memory_error(spec, other));
        }
        if let Some(existing) = self.segments.get(&spec.id) {
            check_remount(existing, client, spec, credential, tenant.as_deref())?;
            self.register_client(client, credential);
            if let Some(existing) = self.segments.get_mut(&spec.id)
                && existing.tier() == Tier::Ssd
            {
                existing.detached = None;
                existing.spec = spec.clone();
            }
            return Ok(()); // a retried mount, or a disk segment's owner back
        }
        self.register_client(client, credential);
        let alloc = RangeAllocator::new(spec.size_bytes);
        self.segments
            .insert(spec.id, SegmentEntry { spec: spec.clone(), owner: client, alloc, detached: None, tenant });
        Ok(())
    }

    pub(super) fn unmount(&mut self, client: ClientId, id: SegmentId) -> Result<(), MetaError> {
        // Idempotent, as Mooncake's: a client retrying an unmount whose
        // answer it lost (or unmounting twice) is told OK.
        let Some(seg) = self.segments.get(&id) else {
            return Ok(());
        };
        if seg.owner != client {
            return Err(MetaError::IllegalClient(format!("{id} is owned by {}, not {client}", seg.owner)));
        }
        self.drop_segment(id);
        Ok(())
    }

    pub(super) fn remount(
        &mut self,
        client: ClientId,
        specs: &[SegmentSpec],
        credential: &CredentialHash,
        tenant: Option<&str>,
    ) -> Result<(), MetaError> {
        // Check everything first: a refused remount changes nothing.
        let tenant = valid_tenant(tenant)?;
        let mut ids = BTreeSet::new();
        let mut memories = BTreeSet::new();
        for spec in specs {
            validate_segment(spec)?;
            if !ids.insert(spec.id) {
                return Err(invalid(format!("segment {} listed twice", spec.id)));
            }
            if !spec.shm_path.is_empty() && !memories.insert((&spec.host_id, &spec.shm_path)) {
                return Err(invalid(format!("two segments map {} on {}", spec.shm_path, spec.host_id)));
            }
        }
        // The client's segments that this remount replaces may share memory
        // with the new ones (a restarted store node reusing its file).
        for spec in specs {
            if let Some(other) = self.same_memory(spec, |s| s.owner == client && !ids.contains(&s.spec.id)) {
                return Err(same_memory_error(spec, other));
            }
            if let Some(existing) = self.segments.get(&spec.id) {
                check_remount(existing, client, spec, credential, tenant.as_deref())?;
            }
        }
        let stale: Vec<SegmentId> =
            self.client_segments(client).map(|s| s.spec.id).filter(|id| !ids.contains(id)).collect();
        for id in stale {
            self.drop_segment(id);
        }
        self.register_client(client, credential);
        for spec in specs {
            self.mount(client, spec, credential, tenant.as_deref())?;
        }
        Ok(())
    }

    /// `Command::ReattachSegments`: [`Self::remount`] once every memory
    /// segment of `specs` is mounted already by `client`; each then takes
    /// its new declaration. A refusal changes nothing.
    pub(super) fn reattach(
        &mut self,
        client: ClientId,
        specs: &[SegmentSpec],
        credential: &CredentialHash,
        tenant: Option<&str>,
    ) -> Result<(), MetaError> {
        for spec in specs.iter().filter(|s| s.tier == Tier::Dram) {
            if self.segments.get(&spec.id).is_none_or(|s| s.owner != client) {
                return Err(MetaError::SegmentNotFound(format!(
                    "{} is not mounted by {client} any more (the masters forgot it: its registration expired or \
                     was evicted); its bytes are nobody's objects: mount the memory as a new segment",
                    spec.id
                )));
            }
        }
        self.remount(client, specs, credential, tenant)?;
        for spec in specs.iter().filter(|s| s.tier == Tier::Dram) {
            if let Some(seg) = self.segments.get_mut(&spec.id) {
                seg.spec = spec.clone();
            }
        }
        Ok(())
    }

    /// Removes a segment and every replica on it; objects left with no
    /// replica are gone.
    pub(super) fn drop_segment(&mut self, id: SegmentId) {
        self.segments.remove(&id);
        self.objects.retain_mut(|o| {
            o.replicas.retain(|r| r.segment != id);
            !o.replicas.is_empty()
        });
        self.retired.retain(|_, d| {
            d.replicas.retain(|r| r.segment != id);
            !d.replicas.is_empty()
        });
        self.drop_arenas_of(id);
    }

    /// Drops `client` and its segments; with `keep_disk`, its disk segments
    /// stay, detached, with their objects.
    pub(super) fn expire_client(&mut self, client: ClientId, keep_disk: bool) -> Result<(), MetaError> {
        // The id is free: the next credential to mount under it holds it.
        let Some(ClientEntry { credential, .. }) = self.clients.remove(&client) else {
            return Err(MetaError::IllegalClient(format!("{client} is not registered")));
        };
        let owned: Vec<(SegmentId, Tier)> = self.client_segments(client).map(|s| (s.spec.id, s.tier())).collect();
        for (id, tier) in owned {
            if keep_disk && tier == Tier::Ssd {
                self.detach(id, credential);
            } else {
                self.drop_segment(id);
            }
        }
        Ok(())
    }
}
