//! `MasterClient`: talks to the master quorum for the caller. It finds the
//! leader, follows `NOT_LEADER` redirects, retries unreachable or electing
//! masters with capped exponential backoff, and gives up with a clear error
//! after a deadline. Callers never write a retry loop of their own.
//!
//! Retries after an unknown outcome (a timeout) are safe for PutStart (same
//! writer, same size: the master returns the same placement), PutEnd (same
//! checksum: OK), mounts and remounts, and Remove (it carries a request id
//! the master applies at most once).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mooncake_proto::admin::admin_service_client::AdminServiceClient;
use mooncake_proto::master::master_service_client::MasterServiceClient;
use mooncake_proto::{ErrorCode, GRPC_MESSAGE_MAX_BYTES, HasStatus, Status, StatusReason};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// Most redirects followed within one call before backing off (guards
/// against two masters pointing at each other during a leader change).
const REDIRECTS_MAX: u32 = 8;

/// How the client reaches the masters.
#[derive(Clone, Debug)]
pub struct MasterClientConfig {
    /// Addresses (`host:port`) of some or all masters.
    pub masters: Vec<String>,
    /// Timeout of one RPC attempt.
    pub rpc_timeout: Duration,
    /// Total time one call may take, retries included, before giving up.
    pub deadline: Duration,
    /// First and largest pause between attempts.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Mutual TLS to the masters (`https://`); `None` = plain HTTP/2.
    pub tls: Option<mooncake_tls::TlsConfig>,
    /// The admin token, sent with every call when set: admin operations
    /// (membership, eviction, snapshots, forced RemoveAll) need it.
    pub admin_token: Option<mooncake_auth::admin::AdminToken>,
    /// The client credential sent with MountSegment, UnmountSegment,
    /// RemountSegment and Ping: it proves the caller is the process that
    /// registered the client id it names. `None` = this process's
    /// ([`mooncake_auth::Credential::of_process`]).
    pub credential: Option<mooncake_auth::Credential>,
    /// The tenant every call acts in (sent as `x-mooncake-tenant` unless
    /// it is the default one).
    pub tenant: mooncake_segment::tenant::Tenant,
}

impl MasterClientConfig {
    pub fn new(masters: Vec<String>) -> Self {
        MasterClientConfig {
            masters,
            rpc_timeout: Duration::from_secs(2),
            deadline: Duration::from_secs(15),
            backoff_initial: Duration::from_millis(10),
            backoff_max: Duration::from_millis(50),
            tls: None,
            admin_token: None,
            credential: None,
            tenant: mooncake_segment::tenant::Tenant::default(),
        }
    }

    /// Acts as admin with the token in `file` (a master's data dir holds
    /// `admin.token`; `mooncake up` writes one in its cluster dir).
    pub fn with_admin_token_file(mut self, file: &std::path::Path) -> Result<Self, MasterError> {
        let token = mooncake_auth::admin::read_token_file(file).map_err(|e| MasterError::Config(e.to_string()))?;
        self.admin_token = Some(token);
        Ok(self)
    }
}

/// Adds the caller's credentials to every request: the client credential
/// (puts act as their writer only with it), the admin token when
/// configured, and the tenant unless it is the default one.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    admin: Option<tonic::metadata::AsciiMetadataValue>,
    client: Option<tonic::metadata::AsciiMetadataValue>,
    tenant: Option<tonic::metadata::AsciiMetadataValue>,
}

impl tonic::service::Interceptor for Credentials {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.admin {
            req.metadata_mut().insert(mooncake_auth::admin::ADMIN_TOKEN_HEADER, token.clone());
        }
        if let Some(credential) = &self.client {
            req.metadata_mut().insert(mooncake_auth::credential::CREDENTIAL_HEADER, credential.clone());
        }
        if let Some(tenant) = &self.tenant {
            req.metadata_mut().insert(mooncake_segment::tenant::TENANT_HEADER, tenant.clone());
        }
        Ok(req)
    }
}

/// The client API over one channel, with the caller's credentials.
pub type MasterRpc = MasterServiceClient<InterceptedService<Channel, Credentials>>;
/// The admin API over one channel, with the caller's credentials.
pub type AdminRpc = AdminServiceClient<InterceptedService<Channel, Credentials>>;

/// Why a call to the masters failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MasterError {
    #[error("invalid master client configuration: {0}")]
    Config(String),
    #[error("no master answered within {deadline:?} ({attempts} attempts); last error: {last}")]
    Unavailable { deadline: Duration, attempts: u32, last: String },
    /// The master answered `code`. `attempts > 1` means earlier attempts
    /// ended without an answer (timeout, broken connection, a leader change
    /// mid-proposal): one of them may have taken effect, so the code alone
    /// does not prove the call changed nothing.
    #[error("{code:?}: {message}")]
    Rejected { code: ErrorCode, message: String, attempts: u32 },
    /// A PutEnd (or a batch item's) found the put's reservation gone: its
    /// arena was returned or its range taken, usually by a leader change.
    /// Nothing was recorded; put the object again (the client library does,
    /// once). Mooncake's code for it is OBJECT_NOT_FOUND, which
    /// [`code`](Self::code) answers; the master says which it is in the
    /// status's reason.
    #[error("put expired: {message}; put the object again")]
    PutExpired { message: String, attempts: u32 },
    /// A master added as a learner is still catching up (it keeps doing so).
    #[error(
        "master {node} was added as a learner but has not caught up within {waited:?} (at log index {at} of \
         {target}); it keeps catching up: watch `mooncake status`, then promote it"
    )]
    NotCaughtUp { node: u64, at: String, target: u64, waited: Duration },
}

impl MasterError {
    /// The stable error code, if the master answered one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            MasterError::Rejected { code, .. } => Some(*code),
            MasterError::PutExpired { .. } => Some(ErrorCode::ObjectNotFound),
            MasterError::Config(_) | MasterError::Unavailable { .. } | MasterError::NotCaughtUp { .. } => None,
        }
    }

    /// The refusal a status other than OK says, after `attempts` attempts
    /// (`None` for OK).
    pub fn from_status(status: &Status, attempts: u32) -> Option<MasterError> {
        match (status.error_code(), status.reason()) {
            (ErrorCode::Ok, _) => None,
            (ErrorCode::ObjectNotFound, StatusReason::PutExpired) => {
                Some(MasterError::PutExpired { message: status.message.clone(), attempts })
            }
            (code, _) => Some(MasterError::Rejected { code, message: status.message.clone(), attempts }),
        }
    }

    /// True when the call certainly had no effect: refused on its only
    /// attempt, or never sent. Retried calls and timeouts are not certain.
    pub fn is_definite(&self) -> bool {
        match self {
            MasterError::Rejected { attempts, .. } | MasterError::PutExpired { attempts, .. } => *attempts <= 1,
            MasterError::Config(_) => true,
            MasterError::Unavailable { .. } | MasterError::NotCaughtUp { .. } => false,
        }
    }
}

/// A response and how many attempts it took.
#[derive(Debug)]
pub struct Attempted<R> {
    pub reply: R,
    pub attempts: u32,
}

impl<R> Attempted<R> {
    /// The same attempts with `f` of the reply (a batch answer's items).
    pub(crate) fn map<T>(self, f: impl FnOnce(R) -> T) -> Attempted<T> {
        Attempted { reply: f(self.reply), attempts: self.attempts }
    }
}

impl<R> From<R> for Attempted<R> {
    fn from(reply: R) -> Self {
        Attempted { reply, attempts: 1 }
    }
}

/// A connection to the master quorum.
pub struct MasterClient {
    cfg: MasterClientConfig,
    channels: Mutex<HashMap<String, Channel>>,
    /// The master to try first: the last leader seen.
    preferred: Mutex<String>,
    credentials: Credentials,
    /// The client credential (`cfg.credential`, or this process's).
    credential: mooncake_auth::Credential,
}

/// What one attempt told us.
enum Attempt<R> {
    Done(R),
    Redirect(String),
    Retry(String),
}

impl MasterClient {
    pub fn new(cfg: MasterClientConfig) -> Result<Self, MasterError> {
        let first =
            cfg.masters.first().cloned().ok_or_else(|| MasterError::Config("no master address given".into()))?;
        for m in &cfg.masters {
            endpoint(m, &cfg)?;
        }
        let admin = match &cfg.admin_token {
            Some(t) => Some(
                t.as_str().parse().map_err(|_| MasterError::Config("the admin token is not printable ASCII".into()))?,
            ),
            None => None,
        };
        let credential = match &cfg.credential {
            Some(c) => c.clone(),
            None => mooncake_auth::Credential::of_process().map_err(|e| MasterError::Config(e.to_string()))?,
        };
        let client = credential.to_hex().parse().map_err(|_| MasterError::Config("unprintable credential".into()))?;
        // A valid tenant name is ASCII, so always a metadata value.
        let tenant = match cfg.tenant.is_default() {
            true => None,
            false => {
                Some(cfg.tenant.name().parse().map_err(|_| MasterError::Config("unprintable tenant name".into()))?)
            }
        };
        let credentials = Credentials { admin, client: Some(client), tenant };
        let preferred = Mutex::new(first);
        Ok(MasterClient { cfg, channels: Mutex::new(HashMap::new()), preferred, credentials, credential })
    }

    /// The client credential this client sends with the calls that act as a
    /// client id (mounts, unmounts, remounts, pings).
    pub fn credential(&self) -> &mooncake_auth::Credential {
        &self.credential
    }

    pub fn config(&self) -> &MasterClientConfig {
        &self.cfg
    }

    /// What this client adds to each request (for calls made outside
    /// [`call`](Self::call), such as streams).
    pub fn credentials(&self) -> Credentials {
        self.credentials.clone()
    }

    /// The master currently believed to lead (or the first to try).
    pub fn preferred(&self) -> String {
        self.preferred.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_preferred(&self, addr: &str) {
        *self.preferred.lock().unwrap_or_else(|p| p.into_inner()) = addr.to_string();
    }

    /// A channel to `addr` (connected lazily, reused).
    pub fn channel(&self, addr: &str) -> Result<Channel, MasterError> {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = channels.get(addr) {
            return Ok(c.clone());
        }
        let ch = endpoint(addr, &self.cfg)?.connect_lazy();
        channels.insert(addr.to_string(), ch.clone());
        Ok(ch)
    }

    fn next_after(&self, addr: &str) -> String {
        let ms = &self.cfg.masters;
        match ms.iter().position(|m| m == addr) {
            Some(i) => ms[(i + 1) % ms.len()].clone(),
            None => ms[0].clone(),
        }
    }

    /// Calls the leader's client API with retries; `f` makes one attempt.
    /// Answers with a status other than NOT_LEADER/UNAVAILABLE are returned
    /// as they are (the caller decides what a domain error means).
    pub async fn call<R, F, Fut>(&self, f: F) -> Result<Attempted<R>, MasterError>
    where
        R: HasStatus,
        F: Fn(MasterRpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        self.retrying(|ch| {
            let client = MasterServiceClient::with_interceptor(ch, self.credentials.clone())
                .max_decoding_message_size(GRPC_MESSAGE_MAX_BYTES)
                .max_encoding_message_size(GRPC_MESSAGE_MAX_BYTES);
            f(client)
        })
        .await
    }

    /// Like [`call`](Self::call) for the admin API.
    pub async fn call_admin<R, F, Fut>(&self, f: F) -> Result<Attempted<R>, MasterError>
    where
        R: HasStatus,
        F: Fn(AdminRpc) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        self.retrying(|ch| f(AdminServiceClient::with_interceptor(ch, self.credentials.clone()))).await
    }

    async fn retrying<R, F, Fut>(&self, f: F) -> Result<Attempted<R>, MasterError>
    where
        R: HasStatus,
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let start = Instant::now();
        let mut backoff = self.cfg.backoff_initial;
        let mut attempts = 0u32;
        let mut redirects = 0u32;
        let mut target = self.preferred();
        loop {
            attempts += 1;
            let last = match self.attempt(&target, &f).await {
                Attempt::Done(reply) => {
                    self.set_preferred(&target);
                    return Ok(Attempted { reply, attempts });
                }
                Attempt::Redirect(leader) if redirects < REDIRECTS_MAX => {
                    redirects += 1;
                    target = leader;
                    continue;
                }
                Attempt::Redirect(leader) => format!("redirected too often (last to {leader})"),
                Attempt::Retry(why) => why,
            };
            if start.elapsed() + backoff > self.cfg.deadline {
                return Err(MasterError::Unavailable { deadline: self.cfg.deadline, attempts, last });
            }
            tracing::debug!(%target, %last, ?backoff, "master call failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.cfg.backoff_max);
            redirects = 0;
            target = self.next_after(&target);
        }
    }

    async fn attempt<R, F, Fut>(&self, target: &str, f: &F) -> Attempt<R>
    where
        R: HasStatus,
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let ch = match self.channel(target) {
            Ok(ch) => ch,
            Err(e) => return Attempt::Retry(e.to_string()),
        };
        let reply = match tokio::time::timeout(self.cfg.rpc_timeout, f(ch)).await {
            Err(_) => return Attempt::Retry(format!("{target}: no answer within {:?}", self.cfg.rpc_timeout)),
            Ok(Err(status)) => return Attempt::Retry(format!("{target}: {}", status.message())),
            Ok(Ok(r)) => r.into_inner(),
        };
        let Some(status) = reply.status() else { return Attempt::Done(reply) };
        match status.error_code() {
            ErrorCode::NotLeader if !status.leader_addr.is_empty() => Attempt::Redirect(status.leader_addr.clone()),
            ErrorCode::NotLeader | ErrorCode::Unavailable => Attempt::Retry(format!("{target}: {}", status.message)),
            _ => Attempt::Done(reply),
        }
    }
}

fn endpoint(addr: &str, cfg: &MasterClientConfig) -> Result<Endpoint, MasterError> {
    mooncake_tls::grpc::endpoint(addr, cfg.tls.as_ref())
        .map(|e| e.connect_timeout(cfg.rpc_timeout).tcp_nodelay(true))
        .map_err(|e| MasterError::Config(format!("bad master address {addr:?}: {e}")))
}

/// Turns a response's status into `Ok(response)` or `Err(Rejected)`.
pub fn check<R: HasStatus>(r: Attempted<R>) -> Result<R, MasterError> {
    let Attempted { reply, attempts } = r;
    match reply.status().and_then(|s| MasterError::from_status(s, attempts)) {
        Some(e) => Err(e),
        None => Ok(reply),
    }
}
