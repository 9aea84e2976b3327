//! The store-node role of a client: the memory it contributes (a segment in
//! /dev/shm or anonymous memory), the transfer server that serves it, the
//! segment's declaration for the masters, and whether the masters still know
//! it ([`LocalSegment::is_mounted`], kept by the heartbeat).
//!
//! A shm-backed store node first claims its identity with a
//! [`ShmOwner`] (`/dev/shm/mooncake-<client id>-lock`, held for its life)
//! and removes the segment files a dead predecessor of the same client id
//! left behind, before it creates its own: a SIGKILLed node's file would
//! otherwise hold its tmpfs memory for ever, and a restart with a full
//! /dev/shm would fail. A second live store node with the same client id on
//! the host is refused at start.
//!
//! The transfer server refuses every request for the segment until the
//! masters' answer to its mount brings the segment's capability key
//! ([`LocalSegment::install_keys`]); from then on it serves a request only
//! under a capability the masters issued for it (docs/SECURITY.md).
//!
//! When the masters have forgotten the segment (it expired, or an operator
//! unmounted it), the heartbeat calls [`LocalSegment::renew`] before it
//! remounts: the same memory is served under a new segment id (and its file
//! renamed to match), so a writer still holding a range of the forgotten
//! segment gets UNKNOWN_SEGMENT instead of overwriting an object the masters
//! place there after the remount.
//!
//! A node may also contribute a disk segment (docs/TIERS.md), served by the
//! same transfer server: its file is created on the first start and opened
//! again on later ones, under the segment id its header keeps, so the masters
//! find its objects again. A file that belongs to another client id is
//! refused. When the masters have forgotten the disk (its grace ended),
//! [`LocalSegment::renew_disk`] gives it a new id: its old bytes are then
//! nobody's objects.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};

use mooncake_auth::capability::SegmentKey;
use mooncake_proto::master::{self as pb, Segment, Tier};
use mooncake_segment::{ClientId, DiskSegment, FileIdentity, SHM_DIR, SegmentId, SegmentMemory};
use mooncake_transfer::{SegmentRegistry, ServerConfig, ShmOwner, TransferError, TransferServer};
use tokio::sync::Mutex;

use crate::config::ClientConfig;
use crate::error::ClientError;

pub struct LocalSegment {
    /// The declaration the masters know (or should): its id and shm path
    /// change on [`Self::renew`].
    spec: std::sync::Mutex<Segment>,
    memory: Arc<SegmentMemory>,
    registry: Arc<SegmentRegistry>,
    server: Mutex<Option<TransferServer>>,
    addr: SocketAddr,
    /// The claim on this node's /dev/shm files (shm segments only).
    owner: Option<ShmOwner>,
    /// Whether the masters knew the segment at the last look (see the heartbeat).
    mounted: AtomicBool,
    /// Remounts after the masters had forgotten the segment.
    remounts: AtomicU64,
    /// Why the segment is not mounted, while it is not.
    mount_error: std::sync::Mutex<Option<String>>,
    /// The disk segment's declaration, if the node has one (its id changes
    /// on [`Self::renew_disk`]).
    disk: Option<std::sync::Mutex<Segment>>,
    /// Whether the disk file existed at start (its blocks are scrubbed).
    disk_reopened: bool,
    /// The tenant its segments are dedicated to ([`ClientConfig::segment_tenant`]).
    tenant: Option<mooncake_segment::tenant::Tenant>,
    /// Serving a predecessor's memory until the first registration says
    /// whether the masters kept its segment ([`Self::is_reattaching`]).
    reattaching: AtomicBool,
    /// Handed over to a successor ([`Self::hand_over`]): its file stays.
    handed_over: AtomicBool,
}

impl LocalSegment {
    /// Claims the identity and removes a dead predecessor's files (shm
    /// segments), allocates the memory (a clear error when the host cannot
    /// back it), starts serving it under `server_config`, and describes it
    /// for MountSegment.
    pub async fn start(
        cfg: &ClientConfig,
        client_id: u64,
        size: u64,
        server_config: ServerConfig,
    ) -> Result<Self, ClientError> {
        let (id, memory, owner, reattaching) = if cfg.shm_segment {
            let owner = claim_identity(Path::new(SHM_DIR), client_id)?;
            let kept = match keeps_identity(cfg) {
                true => owner.predecessor(size)?,
                false => None,
            };
            sweep(&owner, kept.as_ref().map(|(_, path)| path.as_path()))?;
            match kept.map(|(id, path)| (id, SegmentMemory::adopt_shm(&path, size), path)) {
                Some((id, Ok(memory), path)) => {
                    tracing::info!(path = %path.display(), segment = %id, size_bytes = size,
                        "serving the memory a previous store node of this client id left; re-attaching its segment");
                    (id, memory, Some(owner), true)
                }
                other => {
                    if let Some((_, Err(e), path)) = other {
                        tracing::warn!(path = %path.display(), error = %e, "cannot serve the memory a previous \
                            store node left; removing it and starting empty");
                        let _ = std::fs::remove_file(&path);
                    }
                    let id = fresh_segment_id(None);
                    let memory = SegmentMemory::create_shm(&owner.segment_file_name(id), size, cfg.prefault)?;
                    (id, memory, Some(owner), false)
                }
            }
        } else {
            (fresh_segment_id(None), SegmentMemory::anonymous(size, cfg.prefault)?, None, false)
        };
        let memory = Arc::new(memory);
        let registry = Arc::new(SegmentRegistry::new());
        registry.register(id, memory.clone())?;
        if cfg.serve_ucx {
            serve_ucx(&registry, cfg.ucx_allow_emulated_rma)?;
        }
        let disk = match &cfg.disk_segment {
            Some(path) => Some(open_disk(cfg, client_id, path, &registry)?),
            None => None,
        };
        let server = TransferServer::bind_with_config(cfg.transfer_listen, registry.clone(), server_config).await?;
        let addr = server.local_addr();
        let shm_path = memory.shm_path().map(|p| p.display().to_string()).unwrap_or_default();
        let spec = Segment {
            id: id.0,
            size,
            endpoint: format!("{}:{}", cfg.local_hostname, addr.port()),
            host_id: cfg.local_hostname.clone(),
            zone: cfg.zone.clone(),
            tier: Tier::Dram as i32,
            shm_path,
        };
        let disk_reopened = disk.as_ref().is_some_and(|(_, reopened)| *reopened);
        let disk = disk.map(|(d, _)| {
            std::sync::Mutex::new(Segment {
                id: d.id.0,
                size: d.size,
                tier: Tier::Ssd as i32,
                shm_path: String::new(),
                ..spec.clone()
            })
        });
        Ok(LocalSegment {
            spec: std::sync::Mutex::new(spec),
            memory,
            registry,
            server: Mutex::new(Some(server)),
            addr,
            owner,
            mounted: AtomicBool::new(true),
            remounts: AtomicU64::new(0),
            mount_error: std::sync::Mutex::new(None),
            disk,
            disk_reopened,
            tenant: cfg.segment_tenant().cloned(),
            reattaching: AtomicBool::new(reattaching),
            handed_over: AtomicBool::new(false),
        })
    }

    /// Whether the node serves the memory a predecessor left and has not
    /// yet learnt whether the masters still know its segment (the first
    /// registration re-attaches it, [`crate::store_node`]'s heartbeat).
    pub fn is_reattaching(&self) -> bool {
        self.reattaching.load(Ordering::Relaxed)
    }

    /// Leaves the memory (and its /dev/shm file, whatever its name) in
    /// place when this node goes: a successor with the same identity
    /// re-attaches it. Returns whether there is a file to leave.
    pub(crate) fn hand_over(&self) -> bool {
        self.memory.keep();
        self.handed_over.store(true, Ordering::Relaxed);
        self.owner.is_some()
    }

    /// Whether a restart of this node (`cfg`) may re-attach what it hands
    /// over: an explicit client id and a credential kept across restarts.
    pub(crate) fn keeps_identity(cfg: &ClientConfig) -> bool {
        keeps_identity(cfg)
    }

    /// The first registration settled the re-attach (kept, or renewed).
    pub(crate) fn reattach_settled(&self) {
        self.reattaching.store(false, Ordering::Relaxed);
    }

    /// The tenant this node's segments are dedicated to (sent with every
    /// mount and remount), if any.
    pub fn tenant(&self) -> Option<&mooncake_segment::tenant::Tenant> {
        self.tenant.as_ref()
    }

    /// The declaration of the memory segment.
    pub fn spec(&self) -> Segment {
        self.spec.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The declaration of the disk segment, if the node has one.
    pub fn disk_spec(&self) -> Option<Segment> {
        self.disk.as_ref().map(|d| d.lock().unwrap_or_else(PoisonError::into_inner).clone())
    }

    /// Every segment this node contributes, memory first: what it mounts.
    pub fn specs(&self) -> Vec<Segment> {
        std::iter::once(self.spec()).chain(self.disk_spec()).collect()
    }

    /// The segments this node serves (for copies and corrupt-range reports).
    pub fn registry(&self) -> &Arc<SegmentRegistry> {
        &self.registry
    }

    /// Verifies every block of a disk file this node found at start (a
    /// restart): the corrupt ranges are noted in the registry, for the
    /// heartbeat to report. Returns how many runs failed.
    pub async fn scrub_disk(&self) -> Result<usize, ClientError> {
        let Some(spec) = self.disk_spec().filter(|_| self.disk_reopened) else { return Ok(0) };
        let id = SegmentId(spec.id);
        let Some(mooncake_transfer::Backing::Disk(disk)) = self.registry.lookup_backing(id) else { return Ok(0) };
        let started = std::time::Instant::now();
        let bad = disk.scrub().await.map_err(|e| ClientError::Config(format!("scrubbing the disk segment: {e}")))?;
        for (offset, len) in &bad {
            self.registry.note_corrupt(id, *offset, *len);
        }
        match bad.len() {
            0 => tracing::info!(segment = %id, took_ms = started.elapsed().as_millis() as u64,
                "disk segment scrubbed after a restart: every block verifies"),
            n => tracing::warn!(segment = %id, corrupt_runs = n,
                "disk segment scrubbed after a restart: corrupt blocks found; their replicas are reported to the masters"),
        }
        Ok(bad.len())
    }

    pub fn memory(&self) -> &SegmentMemory {
        &self.memory
    }

    pub fn transfer_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Counters of the transfer server (None once stopped).
    pub async fn server_stats(&self) -> Option<mooncake_transfer::ServerStats> {
        self.server.lock().await.as_ref().map(|s| s.stats())
    }

    /// Whether the masters knew this segment at the heartbeat's last look
    /// (true from a successful start until a check finds it gone, and again
    /// once it is remounted). A store node whose segment is not mounted
    /// serves nothing and must not report itself healthy.
    pub fn is_mounted(&self) -> bool {
        self.mounted.load(Ordering::Relaxed)
    }

    /// Why the segment is not mounted (the last remount error), while it is not.
    pub fn mount_error(&self) -> Option<String> {
        self.mount_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Times the segment was remounted after the masters had forgotten it.
    pub fn remounts(&self) -> u64 {
        self.remounts.load(Ordering::Relaxed)
    }

    /// Hands the capability key and the first arena fence the masters sent
    /// for this node's segment (in a MountSegment or RemountSegment answer)
    /// to the transfer server, which serves the segment from now on. An
    /// answer without a usable key or fence for the segment is an error:
    /// the node would serve nothing, or WRITEs the masters took back.
    pub fn install_keys(&self, keys: &[pb::SegmentKey]) -> Result<(), ClientError> {
        for spec in self.specs() {
            let id = SegmentId(spec.id);
            let Some(sent) = keys.iter().find(|k| k.segment_id == id.0) else {
                return Err(ClientError::Config(format!(
                    "the master's mount answer carries no capability key for segment {id}: it predates \
                     capabilities; upgrade the masters (this node would refuse every transfer)"
                )));
            };
            let key = SegmentKey::from_slice(&sent.key)
                .map_err(|e| ClientError::Config(format!("the master's capability key for segment {id}: {e}")))?;
            let Some(fence) = &sent.fence else {
                return Err(ClientError::Config(format!(
                    "the master's mount answer carries no arena fence for segment {id}: it predates arena \
                     fences; upgrade the masters"
                )));
            };
            // The fence first: the key opens the segment to requests.
            self.registry.install_fence(id, fence_of(fence))?;
            self.registry.set_key(id, key)?;
        }
        Ok(())
    }

    /// The arena fences this node enforces, for the leader (Ping and
    /// TakeCopies carry them): a fence counts once no WRITE under an arena
    /// it excludes is still moving bytes.
    pub(crate) fn fence_acks(&self) -> Vec<pb::FenceAck> {
        self.registry
            .fence_acks()
            .into_iter()
            .map(|(segment, version)| pb::FenceAck { segment_id: segment.0, version })
            .collect()
    }

    /// Installs the fences the leader sent (those of segments served here
    /// and newer than the ones held); from then on WRITEs under the arenas
    /// they leave out are refused. Whether any was new.
    pub(crate) fn install_fences(&self, fences: &[pb::ArenaFence]) -> bool {
        let mut any = false;
        for fence in fences {
            let id = SegmentId(fence.segment_id);
            match self.registry.install_fence(id, fence_of(fence)) {
                Ok(true) => {
                    any = true;
                    tracing::debug!(segment = %id, version = fence.version, live = fence.live.len(),
                        "arena fence installed");
                }
                Ok(false) => {}
                Err(e) => tracing::debug!(segment = %id, "arena fence for a segment not served here: {e}"),
            }
        }
        any
    }

    /// Serves the disk under a new segment id (rewriting its header), for a
    /// remount after the masters forgot it: the objects it held are gone,
    /// its bytes are free space. On error nothing changed.
    pub fn renew_disk(&self) -> Result<Option<Segment>, ClientError> {
        let Some(disk) = &self.disk else { return Ok(None) };
        let mut spec = disk.lock().unwrap_or_else(PoisonError::into_inner);
        let new_id = fresh_segment_id(Some(SegmentId(spec.id)));
        self.registry.renew_disk(SegmentId(spec.id), new_id)?;
        spec.id = new_id.0;
        Ok(Some(spec.clone()))
    }

    /// Records that the masters know the segment (again, after a remount).
    pub(crate) fn set_mounted(&self, remounted: bool) {
        self.mounted.store(true, Ordering::Relaxed);
        *self.mount_error.lock().unwrap_or_else(PoisonError::into_inner) = None;
        if remounted {
            self.remounts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records that the masters do not know the segment, and why it is not back.
    pub(crate) fn set_unmounted(&self, why: String) {
        self.mounted.store(false, Ordering::Relaxed);
        *self.mount_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
    }

    /// Serves the same memory under a new segment id (and renames its shm
    /// file to match), for a remount after the masters forgot the segment;
    /// returns the new declaration. Requests for the old id get
    /// UNKNOWN_SEGMENT from now on, and same-host writers holding the old
    /// file name fail. On error nothing changed.
    pub fn renew(&self) -> Result<Segment, ClientError> {
        self.reattach_settled();
        let mut spec = self.spec.lock().unwrap_or_else(PoisonError::into_inner);
        let old_id = SegmentId(spec.id);
        let new_id = fresh_segment_id(Some(old_id));
        let mut renewed = spec.clone();
        renewed.id = new_id.0;
        self.registry.register(new_id, self.memory.clone())?;
        if let (Some(owner), false) = (&self.owner, spec.shm_path.is_empty()) {
            let new_path = owner.dir().join(owner.segment_file_name(new_id));
            if let Err(err) = std::fs::rename(&spec.shm_path, &new_path) {
                self.registry.unregister(new_id);
                let path = PathBuf::from(&spec.shm_path);
                return Err(ClientError::Transfer(TransferError::ShmOwnerIo { op: "rename", path, source: err }));
            }
            renewed.shm_path = new_path.display().to_string();
        }
        self.registry.unregister(old_id);
        *spec = renewed.clone();
        Ok(renewed)
    }

    pub async fn stop(&self) {
        if let Some(s) = self.server.lock().await.take() {
            s.shutdown().await;
        }
    }

    /// The shm file, if [`Self::renew`] moved it away from the name the
    /// memory was created under (which the memory removes by itself).
    fn renamed_file(&self) -> Option<PathBuf> {
        let current = PathBuf::from(self.spec.lock().unwrap_or_else(PoisonError::into_inner).shm_path.clone());
        let created = self.memory.shm_path()?;
        (current.as_os_str() != created.as_os_str()).then_some(current)
    }
}

impl Drop for LocalSegment {
    fn drop(&mut self) {
        // A renewed segment's file has a name its memory does not know:
        // remove it here, if it is still ours, like the memory removes the
        // file it created.
        if self.handed_over.load(Ordering::Relaxed) {
            return;
        }
        let Some(path) = self.renamed_file() else { return };
        let ours = std::fs::metadata(&path).ok().map(|m| FileIdentity { dev: m.dev(), ino: m.ino() })
            == self.memory.file_identity();
        if ours && let Err(err) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), "could not remove segment file: {err}");
        }
    }
}

/// Claims `mooncake-<client id>` in `dir`.
fn claim_identity(dir: &Path, client_id: u64) -> Result<ShmOwner, ClientError> {
    ShmOwner::acquire(dir, &format!("mooncake-{client_id:016x}")).map_err(|err| match err {
        // Two store nodes with one identity is a configuration error.
        busy @ TransferError::ShmOwnerBusy { .. } => ClientError::Config(busy.to_string()),
        other => ClientError::Transfer(other),
    })
}

/// Removes the segment files a previous store node of this identity left,
/// but `keep` (the memory this one serves again).
fn sweep(owner: &ShmOwner, keep: Option<&Path>) -> Result<(), ClientError> {
    for stale in owner.remove_stale(keep)? {
        tracing::warn!(path = %stale.path.display(), size_bytes = stale.size_bytes,
            "removed a segment file left by a previous store node of this client id that did not exit cleanly");
    }
    Ok(())
}

/// Whether a restart of this node is the same client to the masters (an
/// explicit client id and a credential kept across restarts), so the
/// memory its predecessor left may still hold objects the masters know.
fn keeps_identity(cfg: &ClientConfig) -> bool {
    cfg.client_id.is_some() && cfg.credential.is_some()
}

/// A disk segment as opened or created at start.
struct OpenedDisk {
    id: SegmentId,
    size: u64,
}

/// Opens this node's disk file (created, preallocated, on the first start)
/// and registers it; answers whether it existed.
fn open_disk(
    cfg: &ClientConfig,
    client_id: u64,
    path: &Path,
    registry: &SegmentRegistry,
) -> Result<(OpenedDisk, bool), ClientError> {
    let disk_error =
        |e: mooncake_segment::DiskError| ClientError::Config(format!("disk segment {}: {e}", path.display()));
    let (disk, reopened) = if path.exists() {
        let disk = DiskSegment::open(path, cfg.disk_io).map_err(disk_error)?;
        let header = disk.header();
        if header.owner != ClientId(client_id) {
            return Err(ClientError::Config(format!(
                "disk segment {} belongs to {} and this node is {}: start it with that client id, or give \
                 another --disk-segment path",
                path.display(),
                header.owner,
                ClientId(client_id)
            )));
        }
        if header.data_bytes != cfg.disk_size {
            return Err(ClientError::Config(format!(
                "disk segment {} holds {} bytes and --disk-size asks for {}: a disk segment is not resized; give \
                 its size, or remove the file to start empty with the new one",
                path.display(),
                header.data_bytes,
                cfg.disk_size
            )));
        }
        (disk, true)
    } else {
        let id = fresh_segment_id(None);
        (DiskSegment::create(path, id, ClientId(client_id), cfg.disk_size, cfg.disk_io).map_err(disk_error)?, false)
    };
    let opened = OpenedDisk { id: disk.segment_id(), size: disk.data_bytes() };
    tracing::info!(path = %path.display(), segment = %opened.id, size_bytes = opened.size, reopened,
        backend = ?disk.backend(), "disk segment ready");
    registry.register_disk(opened.id, Arc::new(disk))?;
    Ok((opened, reopened))
}

/// The transfer server's form of a fence the masters sent.
fn fence_of(fence: &pb::ArenaFence) -> mooncake_transfer::Fence {
    mooncake_transfer::Fence { version: fence.version, live: fence.live.iter().copied().collect(), next: fence.next }
}

/// A random segment id (63 bits, as the masters store ids) other than `not`.
fn fresh_segment_id(not: Option<SegmentId>) -> SegmentId {
    loop {
        let id = SegmentId(rand::random::<u64>() >> 1);
        if Some(id) != not {
            return id;
        }
    }
}

/// Serves the node's memory segments over UCX too (`ClientConfig::serve_ucx`),
/// only where a NIC does the RMA unless `allow_emulated` (tests).
#[cfg(feature = "ucx")]
fn serve_ucx(registry: &SegmentRegistry, allow_emulated: bool) -> Result<(), ClientError> {
    use mooncake_transfer::ucx::{UcxExports, UcxWorker};
    let worker = UcxWorker::start().map_err(|err| {
        ClientError::Config(format!(
            "serving UCX: UCX did not start: {err}; check UCX_TLS and the other UCX_* variables (`ucx_info -d` \
             lists what this host has), or leave UCX off"
        ))
    })?;
    if let Some(refusal) = emulated_rma_refusal(worker.transports(), worker.has_hardware_rma(), allow_emulated) {
        return Err(ClientError::Config(refusal));
    }
    registry.serve_ucx(Arc::new(UcxExports::new(worker)));
    tracing::info!(version = %UcxWorker::library_version(), "serving the segment over UCX too");
    Ok(())
}

/// Why serving UCX over `transports` is refused: none of them does RMA in
/// a NIC (`hardware`), and emulation was not allowed (`allow_emulated`).
#[cfg_attr(not(feature = "ucx"), allow(dead_code))]
pub(crate) fn emulated_rma_refusal(transports: &[String], hardware: bool, allow_emulated: bool) -> Option<String> {
    if hardware {
        return None;
    }
    if allow_emulated {
        tracing::warn!(
            ?transports,
            "--ucx-allow-emulated-rma: UCX emulates RMA here; any peer that reaches this \
            node's UCX worker can read any byte of this process (a test setting)"
        );
        return None;
    }
    Some(format!(
        "serving UCX: no transport UCX opened here does RMA in a NIC ({}): UCX would emulate it, and then any peer \
         that reaches this node's UCX worker can read any byte of this process (its keys included) or crash it. \
         Serve UCX where an RDMA NIC carries it (UCX_TLS with rc or dc), leave --ucx off, or, for tests only, \
         add --ucx-allow-emulated-rma (docs/SECURITY.md)",
        match transports.is_empty() {
            true => "UCX did not list them".to_string(),
            false => transports.join(", "),
        }
    ))
}

/// Without the `ucx` feature, `ClientConfig::validate` refuses `serve_ucx`.
#[cfg(not(feature = "ucx"))]
fn serve_ucx(_registry: &SegmentRegistry, _allow_emulated: bool) -> Result<(), ClientError> {
    Err(ClientError::Config("serving UCX needs a build with the `ucx` feature".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 38, finding 4: over UCX's TCP or shared-memory transports a
    /// key holder read the store node's heap (a get at 0x1000 crashed it).
    /// Such a node now refuses to serve UCX unless a test says otherwise.
    #[test]
    fn ucx_is_served_only_where_a_nic_does_the_rma_unless_a_test_allows_emulation() {
        let emulated = vec!["tcp/lo".to_string(), "posix/memory".to_string()];
        let refusal = emulated_rma_refusal(&emulated, false, false).expect("refused");
        assert!(refusal.contains("tcp/lo, posix/memory"), "{refusal}");
        assert!(refusal.contains("--ucx-allow-emulated-rma"), "{refusal}");
        assert!(emulated_rma_refusal(&[], false, false).is_some_and(|r| r.contains("did not list")));
        assert_eq!(emulated_rma_refusal(&emulated, false, true), None, "a test allows it");
        let rdma = vec!["rc_mlx5/mlx5_0:1".to_string()];
        assert_eq!(emulated_rma_refusal(&rdma, true, false), None);
    }
}
