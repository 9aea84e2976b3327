//! [`Session`]: what `setup` builds and `close` ends. A tokio runtime of
//! its own (the store-node role's transfer server, heartbeats and the I/O
//! driver run on its workers), the connected [`Client`], the registered
//! buffers and the local buffer pool. Calls block the calling thread on the
//! runtime (the bindings release the GIL around them), so many Python
//! threads run calls at once. [`StoreState`] is the lifecycle: not set up,
//! open, closed; every call outside "open" gets `INVALID_PARAMS`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientError, Pin, PutOptions};
use mooncake_segment::SegmentId;
use tokio::runtime::Runtime;

use crate::buffers::{BufferRegistry, Region};
use crate::codes::{self, Code};
use crate::pool::BufferPool;
use crate::sessions::Sessions;
use crate::setup::{HostPort, SetupArgs, candidate_ports};

/// Runtime worker threads, at most: they serve this process's segment and
/// drive the sockets; the calling Python threads do the rest of the work.
pub const RUNTIME_WORKERS_MAX: usize = 4;

/// How long `close` waits for calls still running on other threads before
/// it leaves the unmount to the last of them.
pub const CLOSE_WAIT_MAX: Duration = Duration::from_secs(30);

/// How long `close` gives the runtime's tasks to stop.
const RUNTIME_SHUTDOWN_MAX: Duration = Duration::from_secs(2);

/// How long `health_check` waits for a master.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

/// How a put places its replicas (from Mooncake's `ReplicateConfig`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicaSpec {
    /// Replicas wanted (at least 1).
    pub replica_num: i64,
    /// How eviction treats the object.
    pub pin: Pin,
    /// Segments to try first, by endpoint (`host:port`, as `get_hostname`).
    pub preferred: Vec<String>,
    /// Why the config cannot be used (a soft-pin TTL without `ENABLE`, or
    /// above a day): every put with it is `INVALID_PARAMS`.
    pub refused: Option<String>,
}

/// An open store: everything `setup` made.
pub struct Session {
    rt: Runtime,
    client: Client,
    registry: BufferRegistry,
    pool: Option<Arc<BufferPool>>,
    hostname: String,
    /// Segment ids by endpoint, learned from the masters (for preferred segments).
    segment_ids: Mutex<HashMap<String, u64>>,
    sessions: Sessions,
    /// `enable_ssd_prefetch` of the setup dict (`tasks.rs`, prefetch).
    ssd_prefetch: bool,
}

/// Why `setup` failed: the code it returns and what to tell the user.
#[derive(Debug)]
pub struct SetupError {
    pub code: Code,
    pub message: String,
}

impl SetupError {
    fn invalid(message: String) -> Self {
        SetupError { code: codes::INVALID_PARAMS, message }
    }
}

impl Session {
    /// Connects to the masters and, with `global_segment_size > 0`, starts
    /// serving this process's segment on `local_hostname` (its port, or one
    /// of Mooncake's range).
    pub fn open(args: &SetupArgs) -> Result<Session, SetupError> {
        let host = HostPort::parse(&args.local_hostname).map_err(SetupError::invalid)?;
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, RUNTIME_WORKERS_MAX);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("mooncake-rs")
            .enable_all()
            .build()
            .map_err(|e| SetupError { code: codes::INTERNAL_ERROR, message: format!("starting the runtime: {e}") })?;
        let pool = match args.local_buffer_size {
            0 => None,
            size => Some(BufferPool::new(size).map_err(|e| SetupError {
                code: codes::INTERNAL_ERROR,
                message: format!("local buffer of {size} bytes: {e}"),
            })?),
        };
        let mut last = String::from("no port to try");
        for port in candidate_ports(host.port) {
            let (cfg, hostname) = args.client_config(&host, port).map_err(SetupError::invalid)?;
            match rt.block_on(Client::connect(cfg)) {
                Ok(client) => {
                    let segment_ids = Mutex::new(HashMap::new());
                    let registry = BufferRegistry::default();
                    return Ok(Session {
                        rt,
                        client,
                        registry,
                        pool,
                        hostname,
                        segment_ids,
                        sessions: Sessions::default(),
                        ssd_prefetch: args.enable_ssd_prefetch,
                    });
                }
                // Another process took the port between our pick and bind.
                Err(ClientError::Io(e)) if e.kind() == std::io::ErrorKind::AddrInUse && host.port.is_none() => {
                    last = format!("port {port}: {e}");
                }
                Err(e) => return Err(SetupError { code: codes::of_client(&e), message: e.to_string() }),
            }
        }
        Err(SetupError {
            code: codes::INTERNAL_ERROR,
            message: format!("no free port in {:?}: {last}", crate::setup::PORT_RANGE),
        })
    }

    /// Runs `f` to completion on this session's runtime, on the calling thread.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        crate::waiter::block_on(&self.rt, f)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Whether setup asked for prefetches (`enable_ssd_prefetch`).
    pub fn ssd_prefetch(&self) -> bool {
        self.ssd_prefetch
    }

    /// Runs `f` on this session's runtime without waiting for it (a
    /// best-effort request whose answer nobody reads).
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, f: F) {
        drop(self.rt.spawn(f));
    }

    pub fn registry(&self) -> &BufferRegistry {
        &self.registry
    }

    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    pub fn pool(&self) -> Option<&Arc<BufferPool>> {
        self.pool.as_ref()
    }

    /// Whether a copying put (`put`, `put_parts`, `put_batch` and their
    /// upserts) may run: upstream copies their bytes through the local
    /// buffer, so a store set up with `local_buffer_size=0` refuses them
    /// (`INVALID_PARAMS`, with a WARN saying what to use), as upstream's
    /// fail; the zero-copy `put_from` family needs no local buffer.
    pub fn copying_put_allowed(&self) -> Result<(), Code> {
        if self.pool.is_some() {
            return Ok(());
        }
        tracing::warn!(
            "put refused: this store was set up with local_buffer_size=0, and a copying put goes through the \
             local buffer (as upstream's); give setup a local buffer, or put from registered memory with put_from"
        );
        Err(codes::INVALID_PARAMS)
    }

    /// `host:port` of this process's transfer server.
    pub fn hostname(&self) -> &str {
        &self.hostname
    }

    /// What memory `[ptr, ptr + len)` is when a call may use it
    /// (registered, or the pool, which is host memory); `None` when not.
    pub fn usable(&self, ptr: usize, len: usize) -> Option<crate::buffers::Memory> {
        self.registry.memory_of(ptr, len).or_else(|| {
            self.pool.as_ref().is_some_and(|p| p.contains(ptr, len)).then_some(crate::buffers::Memory::Host)
        })
    }

    /// One checked range of the caller's memory.
    pub fn region(&self, ptr: usize, len: usize) -> Option<Region> {
        crate::buffers::check(ptr, len, |p, l| self.usable(p, l))
    }

    /// The put options of `spec`, or `INVALID_PARAMS`. Preferred segments
    /// the masters do not know are skipped (a preference, not a demand).
    pub async fn put_options(&self, spec: &ReplicaSpec) -> Result<PutOptions, Code> {
        if let Some(why) = &spec.refused {
            tracing::warn!("put refused: {why}");
            return Err(codes::INVALID_PARAMS);
        }
        let replicas = u32::try_from(spec.replica_num).ok().filter(|n| *n >= 1).ok_or(codes::INVALID_PARAMS)?;
        let mut preferred_segments = Vec::with_capacity(spec.preferred.len());
        for name in spec.preferred.iter().filter(|n| !n.is_empty()) {
            match self.segment_id(name).await {
                Some(id) => preferred_segments.push(SegmentId(id)),
                None => tracing::warn!(segment = %name, "preferred segment is not mounted; ignoring it"),
            }
        }
        Ok(PutOptions { replicas, preferred_segments, pin: spec.pin, ..Default::default() })
    }

    /// The id of the segment served at `endpoint`: our own, else from the
    /// masters' segment list (cached; looked up again on a miss).
    async fn segment_id(&self, endpoint: &str) -> Option<u64> {
        if let Some(own) = self.client.local_segment().map(|l| l.spec()).filter(|s| s.endpoint == endpoint) {
            return Some(own.id);
        }
        if let Some(id) = self.segment_ids.lock().unwrap_or_else(PoisonError::into_inner).get(endpoint) {
            return Some(*id);
        }
        let info = self.client.master().cluster_info().await.ok()?;
        let mut ids = self.segment_ids.lock().unwrap_or_else(PoisonError::into_inner);
        ids.clear();
        ids.extend(info.segments.iter().filter_map(|u| u.segment.as_ref()).map(|s| (s.endpoint.clone(), s.id)));
        ids.get(endpoint).copied()
    }

    /// 0 when a master answers within [`HEALTH_TIMEOUT`], else 2 (Mooncake's
    /// "master unreachable").
    pub fn health(&self) -> Code {
        let probe = async { tokio::time::timeout(HEALTH_TIMEOUT, self.client.master().cluster_info()).await };
        match self.block_on(probe) {
            Ok(Ok(_)) => 0,
            _ => 2,
        }
    }

    /// Revokes the put sessions still open, unmounts this process's
    /// segment, stops serving it and stops the runtime.
    fn close(self) {
        let Session { rt, client, sessions, .. } = self;
        let open = sessions.take_puts();
        if !open.is_empty() {
            let open: Vec<&mooncake_client::PutSession> = open.iter().map(|s| s.as_ref()).collect();
            tracing::warn!(sessions = open.len(), "close: revoking put sessions that were never ended");
            rt.block_on(client.put_sessions_revoke(&open));
        }
        rt.block_on(client.close());
        rt.shutdown_timeout(RUNTIME_SHUTDOWN_MAX);
    }
}

/// Where a store is in its life.
#[derive(Default)]
enum Phase {
    #[default]
    NotSetUp,
    Open(Arc<Session>),
    Closed,
}

/// The lifecycle of one `MooncakeDistributedStore`.
#[derive(Default)]
pub struct StoreState {
    phase: RwLock<Phase>,
    /// Serializes `setup` and `close` (connecting takes a while; calls on
    /// other threads meanwhile see "not set up" rather than waiting).
    lifecycle: Mutex<()>,
}

impl StoreState {
    /// The open session, or `INVALID_PARAMS` before `setup` and after `close`.
    pub fn session(&self) -> Result<Arc<Session>, Code> {
        match &*self.phase.read().unwrap_or_else(PoisonError::into_inner) {
            Phase::Open(s) => Ok(s.clone()),
            Phase::NotSetUp | Phase::Closed => Err(codes::INVALID_PARAMS),
        }
    }

    /// True between a successful `setup` and `close`.
    pub fn is_open(&self) -> bool {
        self.session().is_ok()
    }

    /// Opens the store; a store already open stays as it is (0, as Mooncake).
    pub fn setup(&self, args: &SetupArgs) -> Result<(), SetupError> {
        let _serial = self.lifecycle.lock().unwrap_or_else(PoisonError::into_inner);
        if self.is_open() {
            tracing::warn!("setup on a store that is set up already; keeping the first setup");
            return Ok(());
        }
        let session = Session::open(args)?;
        *self.phase.write().unwrap_or_else(PoisonError::into_inner) = Phase::Open(Arc::new(session));
        Ok(())
    }

    /// Closes the store (idempotent): no new call starts; calls running on
    /// other threads finish (up to [`CLOSE_WAIT_MAX`]); then the segment is
    /// unmounted and the runtime stopped.
    pub fn close(&self) {
        let _serial = self.lifecycle.lock().unwrap_or_else(PoisonError::into_inner);
        let phase = std::mem::replace(&mut *self.phase.write().unwrap_or_else(PoisonError::into_inner), Phase::Closed);
        let Phase::Open(mut session) = phase else { return };
        let deadline = Instant::now() + CLOSE_WAIT_MAX;
        loop {
            match Arc::try_unwrap(session) {
                Ok(s) => return s.close(),
                Err(busy) if Instant::now() < deadline => {
                    session = busy;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(_) => {
                    tracing::warn!("close: calls still running after {CLOSE_WAIT_MAX:?}; the segment will expire");
                    return;
                }
            }
        }
    }
}

/// Logs go to stderr, filtered by `MOONCAKE_LOG` (`warn` by default; the
/// syntax of `RUST_LOG`). Installed once per process, unless the host
/// program installed a subscriber first.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MOONCAKE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).try_init();
}
