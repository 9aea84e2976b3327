//! `ClientConfig`: Mooncake's setup knobs for one client process, with the
//! same names (`local_hostname`, `global_segment_size`, `local_buffer_size`,
//! `protocol`), plus our identity and transfer settings. Defaults live here.

use std::net::SocketAddr;
use std::time::Duration;

use mooncake_transfer::{Protocol, TcpConfig};

/// Heartbeat period: a third of the master's default `client_ttl` (10 s) so
/// two lost pings never expire a live client.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(1_000);

/// Writer chunks of 4 MiB per replica: puts of up to 256 KiB take one
/// master round trip. A client holds one chunk per replica count it puts
/// with, so this much of the pool per writer is set aside at a time.
pub const DEFAULT_PUT_CHUNK_BYTES: u64 = 4 << 20;

/// How one client process joins the store.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Master addresses (`host:port`), some or all.
    pub masters: Vec<String>,
    /// This host's name as other nodes reach it; also its host id for
    /// same-host (shm) transfers and replica choice.
    pub local_hostname: String,
    /// Zone label (rack, switch) for replica choice.
    pub zone: String,
    /// Bytes of memory this process contributes to the pool (0 = none).
    pub global_segment_size: u64,
    /// Bytes of registered buffer the client keeps for transfers (pooled,
    /// pre-faulted). 0 = allocate per call.
    pub local_buffer_size: u64,
    /// Transport: `tcp`, `shm`, `rdma` (falls back to tcp) or `auto`.
    pub protocol: Protocol,
    /// Stable identity. A restarted process that keeps it re-registers at
    /// once and its stale segments are unmounted; `None` = random per start.
    pub client_id: Option<u64>,
    /// Where the store role serves transfers (port 0 = any free port).
    pub transfer_listen: SocketAddr,
    /// Touch every page of the segment at start, so no put page-faults.
    pub prefault: bool,
    /// Back the segment by a file in /dev/shm (same-host clients map it).
    pub shm_segment: bool,
    /// Also serve this node's memory segment to UCX readers (one-sided
    /// reads; `mooncake store --ucx`). Needs the `ucx` feature.
    pub serve_ucx: bool,
    /// TESTS ONLY: serve UCX although no transport UCX opened does RMA in a
    /// NIC (TCP, shared memory: UCX emulates RMA, and any peer that reaches
    /// the worker can read any address of this process, or crash it).
    /// Without it such a node refuses to start (`--ucx-allow-emulated-rma`,
    /// docs/SECURITY.md).
    pub ucx_allow_emulated_rma: bool,
    /// Dedicate this node's segments to one tenant: only its objects are
    /// placed on them (docs/TENANTS.md). `None`: any tenant's, except that a
    /// node serving UCX dedicates them to `tenant` unless
    /// `ucx_shared_tenants` says otherwise ([`Self::segment_tenant`]).
    pub dedicated_tenant: Option<mooncake_segment::tenant::Tenant>,
    /// Serve UCX from segments every tenant's objects may be placed on: a
    /// UCX key then reaches every tenant's bytes on them (trusted tenants
    /// only; `mooncake store --ucx-shared-tenants`).
    pub ucx_shared_tenants: bool,
    /// On close, a store node that keeps its identity across restarts (an
    /// explicit `client_id` and a `credential`) leaves its memory segment
    /// mounted and its /dev/shm file in place for its successor, which
    /// re-attaches it with its objects (docs/OPERATIONS.md, "Restarting a
    /// store node"); the masters drop it after `client_ttl` if none comes.
    /// Otherwise (or false) close unmounts the segment and removes the file.
    /// `mooncake store` sets it unless `--unmount-on-exit`.
    pub hand_over_on_close: bool,
    pub tcp: TcpConfig,
    /// Mutual TLS for every connection this client makes (masters, store
    /// nodes) and accepts (its own segment's transfer server). Overrides
    /// `tcp.tls`. `None` = plain TCP: loopback or a network only the
    /// cluster reaches (docs/SECURITY.md).
    pub tls: Option<mooncake_tls::TlsConfig>,
    pub heartbeat_interval: Duration,
    /// Replicas per put unless the call says otherwise.
    pub default_replicas: u32,
    /// Bytes per replica of the writer chunks small puts are placed in by
    /// this client itself, so each needs one master round trip (its PutEnd)
    /// instead of two; puts of at most a sixteenth of this use them. 0 =
    /// never: every put starts with a PutStart (docs/CLIENT.md).
    pub put_chunk_bytes: u64,
    /// Act as admin (forced RemoveAll, membership, eviction, snapshots).
    pub admin_token: Option<mooncake_auth::admin::AdminToken>,
    /// The tenant (key space) every call acts in (docs/TENANTS.md): the
    /// same key in two tenants is two objects. With a client certificate
    /// bound to a tenant, leave it default or name that tenant.
    pub tenant: mooncake_segment::tenant::Tenant,
    /// Proof that this process is `client_id`: sent with every mount,
    /// unmount, remount and ping. The first credential to register an id
    /// holds it until the registration expires (client_ttl) or an admin
    /// evicts it. `None` = random per process: a restarted process with the
    /// same `client_id` then waits for its old registration to expire; give
    /// the same credential across restarts to be the same client at once
    /// (`mooncake store --credential-file`).
    pub credential: Option<mooncake_auth::Credential>,
    /// A disk segment this store node contributes besides its memory
    /// (docs/TIERS.md): a file on a local SSD, created with `disk_size`
    /// bytes on the first start and mounted again, with its objects, on
    /// later starts (keep `client_id` and `credential` the same). `None` =
    /// no disk.
    pub disk_segment: Option<std::path::PathBuf>,
    /// Data bytes of the disk segment (a whole number of 4 KiB blocks).
    pub disk_size: u64,
    /// How the disk segment is read and written: io_uring where the kernel
    /// allows it, else pread/pwrite (`Auto`, one log line says which).
    pub disk_io: mooncake_segment::BackendChoice,
    /// The store node's planted bug (`planted.rs`): off, and in a default
    /// build without a way to turn it on.
    pub planted: crate::planted::StorePlantedBugs,
}

impl ClientConfig {
    /// The tenant this node's segments are dedicated to, if any:
    /// `dedicated_tenant`, else, for a node serving UCX, `tenant` (a UCX key
    /// reaches its whole segment, so a segment served over UCX holds one
    /// tenant's objects), unless `ucx_shared_tenants`.
    pub fn segment_tenant(&self) -> Option<&mooncake_segment::tenant::Tenant> {
        match (&self.dedicated_tenant, self.serve_ucx && !self.ucx_shared_tenants) {
            (Some(t), _) => Some(t),
            (None, true) => Some(&self.tenant),
            (None, false) => None,
        }
    }

    /// A client of `masters` on loopback that contributes no memory.
    pub fn new(masters: Vec<String>) -> Self {
        ClientConfig {
            masters,
            local_hostname: "127.0.0.1".into(),
            zone: String::new(),
            global_segment_size: 0,
            local_buffer_size: 0,
            protocol: Protocol::Tcp,
            client_id: None,
            transfer_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            prefault: false,
            shm_segment: true,
            serve_ucx: false,
            ucx_allow_emulated_rma: false,
            dedicated_tenant: None,
            ucx_shared_tenants: false,
            hand_over_on_close: false,
            tcp: TcpConfig::default(),
            tls: None,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            default_replicas: 1,
            put_chunk_bytes: DEFAULT_PUT_CHUNK_BYTES,
            admin_token: None,
            tenant: mooncake_segment::tenant::Tenant::default(),
            credential: None,
            disk_segment: None,
            disk_size: 0,
            disk_io: mooncake_segment::BackendChoice::Auto,
            planted: Default::default(),
        }
    }

    /// Checks values and relations; the message says what to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.masters.is_empty() {
            return Err("no master address; set masters (e.g. 127.0.0.1:50051)".into());
        }
        if self.local_hostname.is_empty() {
            return Err("local_hostname is empty; set the address other nodes reach this host by".into());
        }
        if self.global_segment_size != 0 && self.global_segment_size < mooncake_segment::ALLOC_ALIGN_BYTES {
            return Err(format!(
                "global_segment_size {} is below {} bytes; use 0 (contribute nothing) or more",
                self.global_segment_size,
                mooncake_segment::ALLOC_ALIGN_BYTES
            ));
        }
        if self.disk_segment.is_some() {
            if self.global_segment_size == 0 {
                return Err("a disk segment needs a memory segment on the same node (global_segment_size > 0): \
                            objects are put in memory and copied to disk"
                    .into());
            }
            if self.client_id.is_none() {
                return Err("a disk segment needs a stable client_id: the disk file belongs to one store node and \
                            is mounted again by the same id after a restart"
                    .into());
            }
            let block = mooncake_segment::DISK_BLOCK_BYTES;
            if self.disk_size == 0 || !self.disk_size.is_multiple_of(block) {
                return Err(format!(
                    "disk_size {} must be a positive whole number of {block}-byte blocks (e.g. 64GiB)",
                    self.disk_size
                ));
            }
        }
        if self.put_chunk_bytes != 0 && !(1 << 16..=64 << 20).contains(&self.put_chunk_bytes) {
            return Err(format!(
                "put_chunk_bytes {} must be 0 (no writer chunks) or in 64KiB..=64MiB",
                self.put_chunk_bytes
            ));
        }
        if !cfg!(feature = "ucx") && (self.serve_ucx || self.protocol == Protocol::Ucx) {
            return Err("UCX (protocol ucx, or serving UCX) needs a build with the `ucx` feature (and libucx); \
                        use protocol tcp, or rebuild with `--features ucx`"
                .into());
        }
        if self.serve_ucx && self.global_segment_size == 0 {
            return Err("serving UCX needs a memory segment (global_segment_size > 0)".into());
        }
        if self.ucx_shared_tenants && (!self.serve_ucx || self.dedicated_tenant.is_some()) {
            return Err("ucx_shared_tenants shares a segment served over UCX among tenants: it needs serve_ucx and \
                        no dedicated_tenant"
                .into());
        }
        if self.dedicated_tenant.is_some() && self.global_segment_size == 0 {
            return Err(
                "dedicated_tenant dedicates this node's segments: it needs one (global_segment_size > 0)".into()
            );
        }
        if self.default_replicas == 0 {
            return Err("default_replicas must be at least 1".into());
        }
        if self.heartbeat_interval.is_zero() {
            return Err("heartbeat_interval must be positive".into());
        }
        self.tcp.validate().map_err(|e| e.to_string())
    }
}

/// Parses sizes like `4096`, `64KiB`, `512MiB`, `4GiB`, `1GB` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (examples: 4096, 64KiB, 4GiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(format!("unknown size unit {other:?} in {s:?}; use KiB, MiB, GiB or TiB")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_size("1 MB").unwrap(), 1 << 20);
        assert!(parse_size("12XB").unwrap_err().contains("unknown size unit"));
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999TiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn impossible_client_configs_are_refused() {
        let mut c = ClientConfig::new(vec![]);
        assert!(c.validate().unwrap_err().contains("no master"));
        c.masters = vec!["127.0.0.1:1".into()];
        c.global_segment_size = 10;
        assert!(c.validate().unwrap_err().contains("global_segment_size 10"));
        c.global_segment_size = 0;
        c.default_replicas = 0;
        assert!(c.validate().is_err());
        c.default_replicas = 1;
        assert!(c.validate().is_ok());
    }
}
