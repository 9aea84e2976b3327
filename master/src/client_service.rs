//! The client API (`MasterService`): object and segment metadata with
//! Mooncake's semantics. Writes become proposed commands; reads run on the
//! leader after a linearizable barrier, once per RPC (a batch RPC confirms
//! leadership once for all its keys). Object reads carry KV leases
//! ([`Shared::read_leased`]); removals go through [`crate::removal`].

use std::sync::Arc;
use std::time::Duration;

use mooncake_auth::Credential;
use mooncake_auth::capability::Access;
use mooncake_proto::master::master_service_server::MasterService;
use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, HasStatus, Status};
use mooncake_raft_store::state::{validate_key, validate_segment};
use mooncake_raft_store::{Command, CredentialHash, MetaError, MetaState, SegmentSpec};
use mooncake_segment::{ClientId, SegmentId};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response};

use crate::convert::{self, Wire};
use crate::errors::{internal, invalid, meta_status, response_status};
use crate::shared::Shared;

type RpcResult<T> = Result<Response<T>, tonic::Status>;

/// Most items in one batch RPC.
pub const BATCH_RPC_MAX: usize = 1_024;
/// Default and largest page of ListObjects.
const LIST_DEFAULT: usize = 1_000;
const LIST_MAX: usize = 100_000;

pub struct MasterServiceImpl {
    shared: Arc<Shared>,
}

impl MasterServiceImpl {
    pub fn new(shared: Arc<Shared>) -> Self {
        MasterServiceImpl { shared }
    }
}

fn ok<T>(t: T) -> RpcResult<T> {
    Ok(Response::new(t))
}

/// An answer about leadership rather than about an item: a batch carrying
/// one is answered with it as a whole, so the client redirects and retries.
fn is_leadership(s: &Status) -> bool {
    matches!(s.error_code(), ErrorCode::NotLeader | ErrorCode::Unavailable)
}

fn too_many(n: usize) -> Status {
    Status::with(ErrorCode::InvalidParams, format!("batch of {n} items; the limit is {BATCH_RPC_MAX}"))
}

/// The answer of a batch RPC: a status of its own and one answer per item
/// (none when the status refuses the batch as a whole).
trait Batch: HasStatus + Default {
    type Item;
    /// The OK answer with `responses`.
    fn answered(responses: Vec<Self::Item>) -> Self;
}

macro_rules! batch {
    ($($batch:ident of $item:ident),* $(,)?) => {$(
        impl Batch for $batch {
            type Item = $item;
            fn answered(responses: Vec<$item>) -> Self {
                $batch { status: Some(Status::ok()), responses }
            }
        }
    )*};
}

batch!(
    BatchPutStartResponse of PutStartResponse,
    BatchPutEndResponse of PutEndResponse,
    BatchPutRevokeResponse of PutRevokeResponse,
    BatchGetReplicaListResponse of GetReplicaListResponse,
    BatchExistKeyResponse of ExistKeyResponse,
    BatchRemoveResponse of RemoveResponse,
);

/// A batch of `items` answered by `answers` (each item's answer, or one
/// status for the whole batch), unless it has more than [`BATCH_RPC_MAX`]
/// items: `answers` is a future, so nothing of it runs for a batch refused.
async fn answer_batch<B: Batch, T>(
    items: &[T],
    answers: impl Future<Output = Result<Vec<B::Item>, Status>>,
) -> RpcResult<B> {
    if items.len() > BATCH_RPC_MAX {
        return ok(refused(too_many(items.len())));
    }
    match answers.await {
        Ok(responses) => ok(B::answered(responses)),
        Err(s) => ok(refused(s)),
    }
}

/// Each item's status: the refusal `refusal` finds for it, or else its
/// answer from `answer`, which is given the indices of the items not
/// refused and answers them all in one go, in that order.
async fn answer_valid<T>(
    items: &[T],
    refusal: impl Fn(&T) -> Option<Status>,
    answer: impl AsyncFnOnce(&[usize]) -> Vec<Status>,
) -> Vec<Status> {
    let mut out: Vec<Option<Status>> = items.iter().map(refusal).collect();
    let valid: Vec<usize> = (0..items.len()).filter(|i| out[*i].is_none()).collect();
    let statuses = answer(&valid).await;
    for (i, s) in valid.into_iter().zip(statuses) {
        out[i] = Some(s);
    }
    out.into_iter().map(|s| s.unwrap_or_else(|| internal("no answer"))).collect()
}

/// The answer of a one-key call made through its batch form: the one
/// answer, or one carrying the status that answered the whole batch.
fn single<R: HasStatus + Default>(answers: Result<Vec<R>, Status>) -> RpcResult<R> {
    let status = match answers.map(|mut v| v.pop()) {
        Ok(Some(answer)) => return ok(answer),
        Ok(None) => internal("no answer"),
        Err(s) => s,
    };
    ok(refused(status))
}

/// An answer carrying only `status`, every other field empty.
fn refused<R: HasStatus + Default>(status: Status) -> R {
    let mut answer = R::default();
    answer.set_status(status);
    answer
}

impl MasterServiceImpl {
    /// Proposes one command and returns its status.
    async fn write(&self, cmd: Command) -> Status {
        match self.shared.write_path.proposer.propose(cmd).await {
            Ok(r) => response_status(&r),
            Err(s) => s,
        }
    }

    /// A batch of puts, item `i` acting as `writers[i]`: refused as a whole
    /// when a writer may not act as itself ([`writers_allowed`]), then
    /// answered as [`answer_batch`].
    async fn write_batch<B: Batch>(
        &self,
        metadata: &MetadataMap,
        writers: &[u64],
        answers: impl Future<Output = Result<Vec<B::Item>, Status>>,
    ) -> RpcResult<B> {
        if let Err(s) = writers_allowed(&self.shared, metadata, writers) {
            return ok(refused(s));
        }
        answer_batch(writers, answers).await
    }

    /// Refuses early a caller holding `credential` that names a client
    /// registered under another credential. Only the leader answers early
    /// (its applied state is the freshest); apply decides in any case.
    fn may_act_as(&self, client: ClientId, credential: &CredentialHash) -> Result<(), Status> {
        if self.shared.require_leader().is_err() {
            return Ok(());
        }
        self.shared.reader.read(|s| s.check_credential(client, credential)).map_err(|e| meta_status(&e))
    }

    /// The credential of a mount or remount, checked as [`Self::may_act_as`];
    /// then the client counts as heard from. Registering is hearing from the
    /// client: without the heartbeat, a client that registers more than
    /// client_ttl after the election counts as silent since the election and
    /// is expired before its first Ping. A refused caller is not heard from:
    /// it must not keep another process's registration alive.
    fn registering(&self, client: ClientId, credential: &[u8]) -> Result<CredentialHash, Status> {
        let credential = credential_hash(credential)?;
        self.may_act_as(client, &credential)?;
        self.shared.leader.heartbeat(client, self.shared.now());
        Ok(credential)
    }

    /// The capability keys of `segments`, now mounted by `owner`, for the
    /// owner's store node: none unless the mount succeeded.
    fn segment_keys(
        &self,
        status: &Status,
        owner: ClientId,
        segments: impl IntoIterator<Item = SegmentId>,
    ) -> Vec<SegmentKey> {
        if status.error_code() != ErrorCode::Ok {
            return vec![];
        }
        let issuer = &self.shared.auth.capabilities;
        let ids: Vec<SegmentId> = segments.into_iter().collect();
        let fences = crate::capabilities::fences_of(&self.shared, owner, Some(&ids), false);
        ids.into_iter()
            .map(|id| SegmentKey {
                segment_id: id.0,
                key: issuer.key_bytes(id, owner).to_vec(),
                fence: fences.iter().find(|f| f.segment_id == id.0).cloned(),
            })
            .collect()
    }

    /// GetReplicaList of one key on the applied state (its KV lease was
    /// granted before the read).
    fn replica_list(&self, s: &MetaState, key: &str) -> GetReplicaListResponse {
        let lease_ttl_ms = self.shared.leader.kv_lease_ttl().as_millis() as u64;
        let status = match s.object(key) {
            None => Status::with(ErrorCode::ObjectNotFound, format!("object {key:?} not found")),
            // Its only replicas are on disks of a store node that is down.
            Some(o) if !o.replicas.iter().any(|r| s.is_readable(r)) => Status::with(
                ErrorCode::ReplicaIsNotReady,
                format!(
                    "object {key:?} is only on disk segments of a store node that is down; it is readable again \
                     when that node restarts with its disk (docs/TIERS.md)"
                ),
            ),
            Some(o) => {
                // Memory before disk; replicas of a detached disk are left out.
                let mut readable: Vec<&mooncake_raft_store::ReplicaPlacement> =
                    o.replicas.iter().filter(|r| s.is_readable(r)).collect();
                readable.sort_by_key(|r| s.replica_tier(r));
                let mut replicas: Vec<Replica> =
                    readable.into_iter().map(|r| convert::replica_pb(s, r, convert::ReplicaState::Complete)).collect();
                self.shared.auth.capabilities.grant(s, &mut replicas, Access::Read);
                return GetReplicaListResponse {
                    status: Some(Status::ok()),
                    replicas,
                    size: o.size_bytes,
                    checksum: o.checksum,
                    lease_ttl_ms,
                };
            }
        };
        GetReplicaListResponse { status: Some(status), replicas: vec![], size: 0, checksum: 0, lease_ttl_ms }
    }

    fn exist_key(&self, s: &MetaState, key: &str) -> ExistKeyResponse {
        let exists = s.object(key).is_some();
        ExistKeyResponse { status: Some(Status::ok()), exists }
    }

    /// GetReplicaList of each key, leased; invalid keys answered without a lease.
    async fn replica_lists(&self, keys: &[String]) -> Result<Vec<GetReplicaListResponse>, Status> {
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let answer = |s: &MetaState| -> Vec<GetReplicaListResponse> {
            keys.iter()
                .map(|k| match validate_key(k) {
                    Ok(()) => self.replica_list(s, k),
                    Err(e) => GetReplicaListResponse { status: Some(invalid(e)), ..Default::default() },
                })
                .collect()
        };
        let is_ok = |r: &GetReplicaListResponse| r.status.as_ref().is_some_and(|s| s.error_code() == ErrorCode::Ok);
        let mut answers = self.shared.read_leased(&names, answer, is_ok).await?;
        // A key whose put is in flight here is not ready (upstream's answer),
        // not missing: looked up after the state read (leader.rs).
        let missing =
            |r: &GetReplicaListResponse| r.status.as_ref().is_some_and(|s| s.error_code() == ErrorCode::ObjectNotFound);
        if answers.iter().any(missing) {
            for ((answer, key), in_flight) in
                answers.iter_mut().zip(keys).zip(crate::puts::in_flight(&self.shared, keys))
            {
                if in_flight && missing(answer) {
                    answer.status = Some(crate::puts::not_ready(key));
                }
            }
        }
        crate::copies::count_hits(&self.shared, keys, &answers);
        Ok(answers)
    }

    /// ExistKey of each key, leased when it exists (as Mooncake's).
    async fn exist_keys(&self, keys: &[String]) -> Result<Vec<ExistKeyResponse>, Status> {
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let answer = |s: &MetaState| -> Vec<ExistKeyResponse> {
            keys.iter()
                .map(|k| match validate_key(k) {
                    Ok(()) => self.exist_key(s, k),
                    Err(e) => ExistKeyResponse { status: Some(invalid(e)), exists: false },
                })
                .collect()
        };
        self.shared.read_leased(&names, answer, |r| r.exists).await
    }
}

/// PutStart, PutEnd and PutRevoke act as their writer: a writer registered
/// with a credential must present it (the `x-mooncake-client-credential`
/// metadata entry the client library sends on every call), or another
/// client could revoke its puts in flight or end them with a checksum of
/// its own. A writer id that is not registered is not checked: no process
/// holds it, so there is nobody to impersonate.
fn writers_allowed(shared: &crate::shared::Shared, metadata: &MetadataMap, writers: &[u64]) -> Result<(), Status> {
    let presented = metadata
        .get(mooncake_auth::credential::CREDENTIAL_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(Credential::from_hex)
        .map(|c| CredentialHash(c.hash()));
    let mut distinct: Vec<u64> = writers.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    shared.reader.read(|s| {
        for w in distinct {
            let client = ClientId(w);
            if s.client(client).is_none() {
                continue;
            }
            let denied = |why: &str| {
                Status::with(
                    ErrorCode::PermissionDenied,
                    format!("a put as {client} needs {client}'s credential ({why}); a client may write only as itself"),
                )
            };
            match &presented {
                None => return Err(denied("none was presented")),
                Some(h) => s.check_credential(client, h).map_err(|_| denied("another was presented"))?,
            }
        }
        Ok(())
    })
}

/// The hash of the credential a request carries (what the state machine
/// keeps and compares); a request without a well-formed one is refused.
fn credential_hash(bytes: &[u8]) -> Result<CredentialHash, Status> {
    match Credential::from_bytes(bytes) {
        Ok(c) => Ok(CredentialHash(c.hash())),
        Err(e) => Err(Status::with(
            ErrorCode::InvalidParams,
            format!(
                "{e}: MountSegment, UnmountSegment, RemountSegment and Ping carry the client's credential \
                 (docs/SECURITY.md); upgrade the client"
            ),
        )),
    }
}

/// A segment's shared-memory file, if it names one, must be a segment file
/// (`/dev/shm/mooncake-*`): same-host clients map it and copy object bytes
/// into it, so a mount naming any other path could make them write into
/// (or read from) an arbitrary file. Checked here, on the way in, before
/// the mount is proposed.
fn validate_shm_path(spec: &mooncake_raft_store::SegmentSpec) -> Result<(), MetaError> {
    if spec.shm_path.is_empty() {
        return Ok(());
    }
    if spec.tier == mooncake_raft_store::Tier::Ssd {
        return Err(MetaError::InvalidParams(format!(
            "segment {} is a disk segment and names a shared-memory file; disk segments are read over TCP only \
             (leave shm_path empty)",
            spec.id
        )));
    }
    mooncake_segment::validate_segment_path(std::path::Path::new(&spec.shm_path))
        .map_err(|e| MetaError::InvalidParams(format!("segment {}: {e}", spec.id)))
}

#[tonic::async_trait]
impl MasterService for MasterServiceImpl {
    async fn ping(&self, req: Request<PingRequest>) -> RpcResult<PingResponse> {
        let r = req.into_inner();
        let client = ClientId(r.client_id);
        let refused = |status: Status| {
            ok(PingResponse { status: Some(status), view_version: 0, copy_tasks: vec![], fences: vec![] })
        };
        let credential = match credential_hash(&r.credential) {
            Ok(h) => h,
            Err(s) => return refused(s),
        };
        if let Err(s) = self.shared.require_leader() {
            return refused(s);
        }
        // Another process's ping must not keep the client alive: it is
        // checked before the heartbeat counts.
        let (known, applied) = match self.shared.reader.read(|s| {
            let applied = s.last_applied.map(|l| l.index).unwrap_or(0);
            s.check_credential(client, &credential).map(|()| (s.client(client).is_some(), applied))
        }) {
            Ok(seen) => seen,
            Err(e) => return refused(meta_status(&e)),
        };
        self.shared.leader.heartbeat(client, self.shared.now());
        let status = if known {
            Status::ok()
        } else {
            Status::with(ErrorCode::NeedRemount, format!("{client} is not registered; remount its segments"))
        };
        let (copy_tasks, fences) = if known {
            crate::capabilities::take_acks(&self.shared, client, &r.fence_acks);
            (
                crate::copies::copies_for_ping(&self.shared, client),
                crate::capabilities::fences_of(&self.shared, client, None, true),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        ok(PingResponse { status: Some(status), view_version: applied, copy_tasks, fences })
    }

    async fn take_copies(&self, req: Request<TakeCopiesRequest>) -> RpcResult<TakeCopiesResponse> {
        let r = req.into_inner();
        let client = ClientId(r.client_id);
        let refused =
            |status: Status| ok(TakeCopiesResponse { status: Some(status), copy_tasks: vec![], fences: vec![] });
        let credential = match credential_hash(&r.credential) {
            Ok(h) => h,
            Err(s) => return refused(s),
        };
        if let Err(s) = self.shared.require_leader() {
            return refused(s);
        }
        // Copies carry capabilities: only the registered process gets them.
        match self.shared.reader.read(|s| s.check_credential(client, &credential).map(|()| s.client(client).is_some()))
        {
            Ok(true) => {}
            Ok(false) => {
                return refused(Status::with(
                    ErrorCode::NeedRemount,
                    format!("{client} is not registered; remount its segments"),
                ));
            }
            Err(e) => return refused(meta_status(&e)),
        }
        crate::capabilities::take_acks(&self.shared, client, &r.fence_acks);
        let wait = Duration::from_millis(r.wait_ms.into());
        let (copy_tasks, fences) = crate::copies::copies_when_queued(&self.shared, client, wait).await;
        ok(TakeCopiesResponse { status: Some(Status::ok()), copy_tasks, fences })
    }

    async fn report_copy(&self, req: Request<ReportCopyRequest>) -> RpcResult<ReportCopyResponse> {
        let r = req.into_inner();
        let credential = match credential_hash(&r.credential) {
            Ok(h) => h,
            Err(s) => return ok(ReportCopyResponse { status: Some(s) }),
        };
        let status = crate::copies::report_copy(&self.shared, &r, &credential).await;
        ok(ReportCopyResponse { status: Some(status) })
    }

    async fn report_corrupt(&self, req: Request<ReportCorruptRequest>) -> RpcResult<ReportCorruptResponse> {
        let r = req.into_inner();
        let credential = match credential_hash(&r.credential) {
            Ok(h) => h,
            Err(s) => return ok(ReportCorruptResponse { status: Some(s), dropped: 0 }),
        };
        let (status, dropped) = crate::copies::report_corrupt(&self.shared, &r, &credential).await;
        ok(ReportCorruptResponse { status: Some(status), dropped })
    }

    async fn get_cluster_info(&self, req: Request<GetClusterInfoRequest>) -> RpcResult<GetClusterInfoResponse> {
        let r = req.into_inner();
        ok(crate::cluster_info::cluster_info(&self.shared, r.local_view, r.with_state_hash).await)
    }

    async fn mount_segment(&self, req: Request<MountSegmentRequest>) -> RpcResult<MountSegmentResponse> {
        let r = req.into_inner();
        let refused = |status: Status| ok(MountSegmentResponse { status: Some(status), segment_keys: vec![] });
        let Some(seg) = r.segment.as_ref() else {
            return refused(Status::with(ErrorCode::InvalidParams, "segment is missing"));
        };
        let spec = match SegmentSpec::try_from(Wire(seg)) {
            Ok(spec) => spec,
            Err(e) => return refused(invalid(e)),
        };
        if let Err(e) = validate_segment(&spec).and_then(|()| validate_shm_path(&spec)) {
            return refused(invalid(e));
        }
        let client = ClientId(r.client_id);
        let credential = match self.registering(client, &r.credential) {
            Ok(h) => h,
            Err(s) => return refused(s),
        };
        let id = spec.id;
        let status = self.write(Command::MountSegment { client, credential, segment: spec }).await;
        let segment_keys = self.segment_keys(&status, client, [id]);
        ok(MountSegmentResponse { status: Some(status), segment_keys })
    }

    async fn unmount_segment(&self, req: Request<UnmountSegmentRequest>) -> RpcResult<UnmountSegmentResponse> {
        let r = req.into_inner();
        let client = ClientId(r.client_id);
        let credential = match credential_hash(&r.credential).and_then(|h| self.may_act_as(client, &h).map(|()| h)) {
            Ok(h) => h,
            Err(s) => return ok(UnmountSegmentResponse { status: Some(s) }),
        };
        let cmd = Command::UnmountSegment { client, credential, segment: SegmentId(r.segment_id) };
        ok(UnmountSegmentResponse { status: Some(self.write(cmd).await) })
    }

    async fn remount_segment(&self, req: Request<RemountSegmentRequest>) -> RpcResult<RemountSegmentResponse> {
        let r = req.into_inner();
        let refused = |status: Status| ok(RemountSegmentResponse { status: Some(status), segment_keys: vec![] });
        let segments: Vec<_> = match r.segments.iter().map(|s| SegmentSpec::try_from(Wire(s))).collect() {
            Ok(segments) => segments,
            Err(e) => return refused(invalid(e)),
        };
        if let Some(e) = segments.iter().find_map(|s| validate_segment(s).and_then(|()| validate_shm_path(s)).err()) {
            return refused(invalid(e));
        }
        let client = ClientId(r.client_id);
        let credential = match self.registering(client, &r.credential) {
            Ok(h) => h,
            Err(s) => return refused(s),
        };
        let ids: Vec<SegmentId> = segments.iter().map(|s| s.id).collect();
        let status = self.write(Command::RemountSegments { client, credential, segments }).await;
        let segment_keys = self.segment_keys(&status, client, ids);
        ok(RemountSegmentResponse { status: Some(status), segment_keys })
    }

    async fn put_start(&self, req: Request<PutStartRequest>) -> RpcResult<PutStartResponse> {
        if let Err(s) = writers_allowed(&self.shared, req.metadata(), &[req.get_ref().client_id]) {
            return ok(PutStartResponse { status: Some(s), replicas: vec![] });
        }
        ok(crate::puts::put_start(&self.shared, &req.into_inner()).await)
    }

    async fn put_end(&self, req: Request<PutEndRequest>) -> RpcResult<PutEndResponse> {
        if let Err(s) = writers_allowed(&self.shared, req.metadata(), &[req.get_ref().client_id]) {
            return ok(PutEndResponse { status: Some(s) });
        }
        let r = req.into_inner();
        if let Err(e) = convert::check_put_end(&r) {
            return ok(PutEndResponse { status: Some(invalid(e)) });
        }
        let mut statuses = crate::puts::put_end(&self.shared, std::slice::from_ref(&r)).await;
        ok(PutEndResponse { status: statuses.pop() })
    }

    async fn put_revoke(&self, req: Request<PutRevokeRequest>) -> RpcResult<PutRevokeResponse> {
        if let Err(s) = writers_allowed(&self.shared, req.metadata(), &[req.get_ref().client_id]) {
            return ok(PutRevokeResponse { status: Some(s) });
        }
        let r = req.into_inner();
        if let Err(e) = validate_key(&r.key) {
            return ok(PutRevokeResponse { status: Some(invalid(e)) });
        }
        ok(PutRevokeResponse { status: Some(crate::puts::put_revoke(&self.shared, &r)) })
    }

    async fn get_replica_list(&self, req: Request<GetReplicaListRequest>) -> RpcResult<GetReplicaListResponse> {
        let key = req.into_inner().key;
        if let Err(e) = validate_key(&key) {
            return ok(refused(invalid(e)));
        }
        single(self.replica_lists(std::slice::from_ref(&key)).await)
    }

    async fn exist_key(&self, req: Request<ExistKeyRequest>) -> RpcResult<ExistKeyResponse> {
        let key = req.into_inner().key;
        if let Err(e) = validate_key(&key) {
            return ok(refused(invalid(e)));
        }
        single(self.exist_keys(std::slice::from_ref(&key)).await)
    }

    async fn get_size(&self, req: Request<GetSizeRequest>) -> RpcResult<GetSizeResponse> {
        let key = req.into_inner().key;
        if let Err(e) = validate_key(&key) {
            return ok(GetSizeResponse { status: Some(invalid(e)), size: 0 });
        }
        let read = self.shared.read(|s| match s.object(&key) {
            None => GetSizeResponse { status: Some(meta_status(&MetaError::ObjectNotFound(key.clone()))), size: 0 },
            Some(o) => GetSizeResponse { status: Some(Status::ok()), size: o.size_bytes },
        });
        match read.await {
            Ok(v) => ok(v),
            Err(s) => ok(GetSizeResponse { status: Some(s), size: 0 }),
        }
    }

    async fn remove(&self, req: Request<RemoveRequest>) -> RpcResult<RemoveResponse> {
        // Forced, it ignores the KV lease and the pin: an admin operation.
        if req.get_ref().force
            && let Err(s) = self.shared.auth.roles.require_admin(&req, "Remove with force")
        {
            return ok(RemoveResponse { status: Some(s) });
        }
        let r = req.into_inner();
        if let Err(e) = validate_key(&r.key) {
            return ok(RemoveResponse { status: Some(invalid(e)) });
        }
        let mut statuses = crate::removal::remove_keys(&self.shared, &[r.key], &[r.request_id], r.force).await;
        ok(RemoveResponse { status: statuses.pop() })
    }

    async fn remove_all(&self, req: Request<RemoveAllRequest>) -> RpcResult<RemoveAllResponse> {
        // Forced, it ignores every KV lease and pin: an admin operation.
        let allowed = match req.get_ref().force {
            true => self.shared.auth.roles.require_admin(&req, "RemoveAll with force"),
            false => Ok(()),
        };
        if let Err(s) = allowed {
            return ok(RemoveAllResponse { status: Some(s), removed: 0 });
        }
        let force = req.into_inner().force;
        match crate::removal::remove_all(&self.shared, force).await {
            Ok(removed) => ok(RemoveAllResponse { status: Some(Status::ok()), removed }),
            Err(s) => ok(RemoveAllResponse { status: Some(s), removed: 0 }),
        }
    }

    async fn list_objects(&self, req: Request<ListObjectsRequest>) -> RpcResult<ListObjectsResponse> {
        let r = req.into_inner();
        let limit = match r.limit as usize {
            0 => LIST_DEFAULT,
            n => n.min(LIST_MAX),
        };
        let objects = self
            .shared
            .read(|s| s.objects_with_prefix(&r.prefix).take(limit).map(|o| convert::object_pb(s, o)).collect())
            .await;
        match objects {
            Ok(objects) => ok(ListObjectsResponse { status: Some(Status::ok()), objects }),
            Err(s) => ok(ListObjectsResponse { status: Some(s), objects: vec![] }),
        }
    }

    async fn batch_put_start(&self, req: Request<BatchPutStartRequest>) -> RpcResult<BatchPutStartResponse> {
        let (metadata, _, reqs) = req.into_parts();
        let writers: Vec<u64> = reqs.requests.iter().map(|r| r.client_id).collect();
        let answers = async {
            let mut responses = Vec::with_capacity(reqs.requests.len());
            for r in &reqs.requests {
                let response = crate::puts::put_start(&self.shared, r).await;
                // Not the leader (any more): the whole batch goes to the leader,
                // which MasterClient finds from this answer.
                if let Some(s) = response.status.as_ref().filter(|s| is_leadership(s)) {
                    return Err(s.clone());
                }
                responses.push(response);
            }
            Ok(responses)
        };
        self.write_batch(&metadata, &writers, answers).await
    }

    async fn batch_put_end(&self, req: Request<BatchPutEndRequest>) -> RpcResult<BatchPutEndResponse> {
        let (metadata, _, reqs) = req.into_parts();
        let writers: Vec<u64> = reqs.requests.iter().map(|r| r.client_id).collect();
        let answers = async {
            let refusal = |r: &PutEndRequest| convert::check_put_end(r).err().map(invalid);
            let statuses = answer_valid(&reqs.requests, refusal, async |valid| {
                // Copied only when some are refused (never, from our client).
                if valid.len() == reqs.requests.len() {
                    return crate::puts::put_end(&self.shared, &reqs.requests).await;
                }
                let valid: Vec<PutEndRequest> = valid.iter().map(|i| reqs.requests[*i].clone()).collect();
                crate::puts::put_end(&self.shared, &valid).await
            })
            .await;
            if let Some(s) = statuses.iter().find(|s| is_leadership(s)) {
                return Err(s.clone());
            }
            Ok(statuses.into_iter().map(|s| PutEndResponse { status: Some(s) }).collect())
        };
        self.write_batch(&metadata, &writers, answers).await
    }

    async fn batch_put_revoke(&self, req: Request<BatchPutRevokeRequest>) -> RpcResult<BatchPutRevokeResponse> {
        let (metadata, _, reqs) = req.into_parts();
        let writers: Vec<u64> = reqs.requests.iter().map(|r| r.client_id).collect();
        // Unlike a PutStart's or PutEnd's, a revoke's NOT_LEADER answers its
        // item only: the batch itself is answered OK.
        let answers = async {
            let revoke = |r: &PutRevokeRequest| match validate_key(&r.key) {
                Ok(()) => crate::puts::put_revoke(&self.shared, r),
                Err(e) => invalid(e),
            };
            Ok(reqs.requests.iter().map(|r| PutRevokeResponse { status: Some(revoke(r)) }).collect())
        };
        self.write_batch(&metadata, &writers, answers).await
    }

    async fn batch_get_replica_list(
        &self,
        req: Request<BatchGetReplicaListRequest>,
    ) -> RpcResult<BatchGetReplicaListResponse> {
        let keys = req.into_inner().keys;
        answer_batch(&keys, self.replica_lists(&keys)).await
    }

    async fn batch_exist_key(&self, req: Request<BatchExistKeyRequest>) -> RpcResult<BatchExistKeyResponse> {
        let keys = req.into_inner().keys;
        answer_batch(&keys, self.exist_keys(&keys)).await
    }

    async fn batch_remove(&self, req: Request<BatchRemoveRequest>) -> RpcResult<BatchRemoveResponse> {
        // Forced, it ignores KV leases and pins: an admin operation (else
        // ListObjects and a forced BatchRemove would be a forced RemoveAll).
        if req.get_ref().force
            && let Err(s) = self.shared.auth.roles.require_admin(&req, "BatchRemove with force")
        {
            return ok(BatchRemoveResponse { status: Some(s), responses: vec![] });
        }
        let r = req.into_inner();
        let answers = async {
            let refusal = |k: &String| validate_key(k).err().map(invalid);
            let statuses = answer_valid(&r.keys, refusal, async |valid| {
                let keys: Vec<String> = valid.iter().map(|i| r.keys[*i].clone()).collect();
                let ids: Vec<u64> = valid.iter().map(|i| r.request_ids.get(*i).copied().unwrap_or(0)).collect();
                crate::removal::remove_keys(&self.shared, &keys, &ids, r.force).await
            })
            .await;
            Ok(statuses.into_iter().map(|s| RemoveResponse { status: Some(s) }).collect())
        };
        answer_batch(&r.keys, answers).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(statuses: &[Status]) -> Vec<ErrorCode> {
        statuses.iter().map(Status::error_code).collect()
    }

    #[tokio::test]
    async fn a_batch_over_the_limit_is_refused_before_any_item_is_answered() {
        let items = vec![0u8; BATCH_RPC_MAX + 1];
        let never = async { panic!("an oversized batch was answered") };
        let r: BatchExistKeyResponse = answer_batch(&items, never).await.unwrap().into_inner();
        assert_eq!(r.status.map(|s| s.error_code()), Some(ErrorCode::InvalidParams));
        assert!(r.responses.is_empty());
        let whole = async { Err(Status::with(ErrorCode::NotLeader, "elsewhere")) };
        let r: BatchExistKeyResponse = answer_batch(&items[..1], whole).await.unwrap().into_inner();
        assert_eq!((r.status.map(|s| s.error_code()), r.responses.len()), (Some(ErrorCode::NotLeader), 0));
    }

    #[tokio::test]
    async fn refused_items_keep_their_place_among_the_answered_ones() {
        let items = ["a", "", "b", ""];
        let refusal = |k: &&str| k.is_empty().then(|| Status::with(ErrorCode::InvalidParams, "empty"));
        let statuses = answer_valid(&items, refusal, async |valid: &[usize]| {
            assert_eq!(valid, [0, 2], "only the items not refused are answered");
            vec![Status::ok(), Status::with(ErrorCode::ObjectNotFound, "b")]
        })
        .await;
        let expected = [ErrorCode::Ok, ErrorCode::InvalidParams, ErrorCode::ObjectNotFound, ErrorCode::InvalidParams];
        assert_eq!(codes(&statuses), expected);
    }

    #[test]
    fn a_single_answer_is_the_batch_answer_or_carries_the_whole_batch_status() {
        let answer = ExistKeyResponse { status: Some(Status::ok()), exists: true };
        assert_eq!(single(Ok(vec![answer.clone()])).unwrap().into_inner(), answer);
        let none: ExistKeyResponse = single(Ok(vec![])).unwrap().into_inner();
        assert_eq!((none.status.map(|s| s.error_code()), none.exists), (Some(ErrorCode::InternalError), false));
        let whole: ExistKeyResponse = single(Err(Status::with(ErrorCode::NotLeader, "x"))).unwrap().into_inner();
        assert_eq!((whole.status.map(|s| s.error_code()), whole.exists), (Some(ErrorCode::NotLeader), false));
    }
}
