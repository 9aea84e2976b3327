//! Typed calls on [`MasterClient`]: one method per master RPC, returning the
//! response on OK and [`MasterError::Rejected`] with the stable code otherwise.
//! Every unary RPC goes through [`MasterClient::ask`] (or
//! [`MasterClient::ask_admin`]): the method builds the request and picks the
//! fields of the answer, and nothing else.

use std::time::Duration;

use mooncake_proto::HasStatus;
use mooncake_proto::admin::*;
use mooncake_proto::master::master_service_client::MasterServiceClient;
use mooncake_proto::master::*;

use crate::master_client::{AdminRpc, Attempted, MasterClient, MasterError, MasterRpc, check};

/// What one attempt of a unary RPC returns.
type Reply<R> = Result<tonic::Response<R>, tonic::Status>;

impl MasterClient {
    /// Sends `req` to the leader's client API through `rpc` (retrying and
    /// following redirects as [`call`](Self::call) does, each attempt with a
    /// copy of `req`); an answer whose status is not OK becomes
    /// [`MasterError::Rejected`].
    async fn ask<Q: Clone, R: HasStatus>(
        &self,
        req: Q,
        rpc: impl AsyncFn(MasterRpc, Q) -> Reply<R>,
    ) -> Result<Attempted<R>, MasterError> {
        checked(self.call(|c| rpc(c, req.clone())).await?)
    }

    /// [`ask`](Self::ask) of the admin API.
    async fn ask_admin<Q: Clone, R: HasStatus>(
        &self,
        req: Q,
        rpc: impl AsyncFn(AdminRpc, Q) -> Reply<R>,
    ) -> Result<Attempted<R>, MasterError> {
        checked(self.call_admin(|c| rpc(c, req.clone())).await?)
    }

    /// The Ping of `client_id`, with this client's credential.
    pub(crate) fn ping_request(&self, client_id: u64) -> PingRequest {
        PingRequest { client_id, credential: self.credential().as_bytes().to_vec(), fence_acks: Vec::new() }
    }

    /// Heartbeat. `Ok(false)` means the master wants the client's segments
    /// remounted; `PERMISSION_DENIED`, that another process (another
    /// credential) holds the client id.
    pub async fn ping(&self, client_id: u64) -> Result<bool, MasterError> {
        match self.ping_for_copies(client_id).await {
            Err(e) if e.code() == Some(mooncake_proto::ErrorCode::NeedRemount) => Ok(false),
            r => r.map(|_| true),
        }
    }

    /// Heartbeat of a store node: the full answer, with the copies the
    /// leader asks it to make (docs/TIERS.md).
    pub async fn ping_for_copies(&self, client_id: u64) -> Result<PingResponse, MasterError> {
        self.ping_store_node(client_id, Vec::new()).await
    }

    /// [`ping_for_copies`](Self::ping_for_copies), telling the leader which
    /// arena fences the node enforces; the answer carries the newer ones.
    pub async fn ping_store_node(
        &self,
        client_id: u64,
        fence_acks: Vec<FenceAck>,
    ) -> Result<PingResponse, MasterError> {
        let req = PingRequest { fence_acks, ..self.ping_request(client_id) };
        Ok(self.ask(req, async |mut c, r| c.ping(r).await).await?.reply)
    }

    /// The copies the leader asks store node `client_id` to make: those
    /// queued for it, or, when none is, the first queued within `wait`
    /// (held by the leader; at most half the RPC timeout, so a held call is
    /// never taken for a dead master). Empty when none came.
    pub async fn take_copies(&self, client_id: u64, wait: Duration) -> Result<Vec<CopyTask>, MasterError> {
        Ok(self.take_copies_fenced(client_id, wait, Vec::new()).await?.copy_tasks)
    }

    /// [`take_copies`](Self::take_copies), telling the leader which arena
    /// fences the node enforces; the answer carries the newer ones too (a
    /// held call returns as soon as one moves).
    pub async fn take_copies_fenced(
        &self,
        client_id: u64,
        wait: Duration,
        fence_acks: Vec<FenceAck>,
    ) -> Result<TakeCopiesResponse, MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let wait_ms = wait.min(self.config().rpc_timeout / 2).as_millis();
        let wait_ms = u32::try_from(wait_ms).unwrap_or(u32::MAX);
        let req = TakeCopiesRequest { client_id, credential, wait_ms, fence_acks };
        Ok(self.ask(req, async |mut c, r| c.take_copies(r).await).await?.reply)
    }

    /// Reports the outcome of copy `task_id` (`error`: empty when the copy is
    /// written and durable).
    pub async fn report_copy(&self, client_id: u64, task_id: u64, error: &str) -> Result<(), MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let req = ReportCopyRequest { client_id, credential, task_id, error: error.to_string() };
        self.ask(req, async |mut c, r| c.report_copy(r).await).await.map(drop)
    }

    /// Reports ranges of `segment_id` whose bytes failed verification;
    /// returns how many replicas the masters dropped.
    pub async fn report_corrupt(
        &self,
        client_id: u64,
        segment_id: u64,
        ranges: Vec<(u64, u64)>,
    ) -> Result<u64, MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let ranges = ranges.into_iter().map(|(offset, len)| ByteRange { offset, len }).collect();
        let req = ReportCorruptRequest { client_id, credential, segment_id, ranges };
        Ok(self.ask(req, async |mut c, r| c.report_corrupt(r).await).await?.reply.dropped)
    }

    /// Mounts `segment` for `client_id`; returns its capability key (for
    /// the transfer server that serves it).
    pub async fn mount_segment(&self, client_id: u64, segment: Segment) -> Result<Vec<SegmentKey>, MasterError> {
        self.mount_segment_for(client_id, segment, None).await
    }

    /// [`Self::mount_segment`], dedicating the segment to `tenant`, if named
    /// (docs/TENANTS.md).
    pub async fn mount_segment_for(
        &self,
        client_id: u64,
        segment: Segment,
        tenant: Option<&mooncake_segment::tenant::Tenant>,
    ) -> Result<Vec<SegmentKey>, MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let tenant = tenant.map(|t| t.name().to_string()).unwrap_or_default();
        let req = MountSegmentRequest { client_id, segment: Some(segment), credential, tenant };
        Ok(self.ask(req, async |mut c, r| c.mount_segment(r).await).await?.reply.segment_keys)
    }

    pub async fn unmount_segment(&self, client_id: u64, segment_id: u64) -> Result<(), MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let req = UnmountSegmentRequest { client_id, segment_id, credential };
        self.ask(req, async |mut c, r| c.unmount_segment(r).await).await.map(drop)
    }

    /// Registers `client_id` with exactly `segments`; returns their
    /// capability keys (for the transfer server that serves them).
    pub async fn remount_segments(
        &self,
        client_id: u64,
        segments: Vec<Segment>,
    ) -> Result<Vec<SegmentKey>, MasterError> {
        self.remount_segments_for(client_id, segments, None).await
    }

    /// [`Self::remount_segments`], dedicating every segment to `tenant`, if
    /// named (docs/TENANTS.md).
    pub async fn remount_segments_for(
        &self,
        client_id: u64,
        segments: Vec<Segment>,
        tenant: Option<&mooncake_segment::tenant::Tenant>,
    ) -> Result<Vec<SegmentKey>, MasterError> {
        self.remount(client_id, segments, tenant, false).await
    }

    /// [`Self::remount_segments_for`] of a store node restarted on its
    /// predecessor's memory: refused (`SEGMENT_NOT_FOUND`, nothing changed)
    /// unless the masters still know every memory segment listed as this
    /// client's, whose objects then stay.
    pub async fn reattach_segments(
        &self,
        client_id: u64,
        segments: Vec<Segment>,
        tenant: Option<&mooncake_segment::tenant::Tenant>,
    ) -> Result<Vec<SegmentKey>, MasterError> {
        self.remount(client_id, segments, tenant, true).await
    }

    async fn remount(
        &self,
        client_id: u64,
        segments: Vec<Segment>,
        tenant: Option<&mooncake_segment::tenant::Tenant>,
        reattach: bool,
    ) -> Result<Vec<SegmentKey>, MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let tenant = tenant.map(|t| t.name().to_string()).unwrap_or_default();
        let req = RemountSegmentRequest { client_id, segments, credential, tenant, reattach };
        Ok(self.ask(req, async |mut c, r| c.remount_segment(r).await).await?.reply.segment_keys)
    }

    pub async fn put_start(&self, req: PutStartRequest) -> Result<Vec<Replica>, MasterError> {
        Ok(self.ask(req, async |mut c, r| c.put_start(r).await).await?.reply.replicas)
    }

    /// PutEnd naming only the key: the leader that answered the PutStart
    /// knows the rest. (The client library sends [`put_end_with`] so a new
    /// leader can record the object too.)
    ///
    /// [`put_end_with`]: Self::put_end_with
    pub async fn put_end(&self, client_id: u64, key: &str, checksum: u32) -> Result<(), MasterError> {
        let req = PutEndRequest { client_id, key: key.to_string(), checksum, ..Default::default() };
        self.put_end_with(req).await
    }

    /// PutEnd with the placement and parameters of its PutStart echoed back.
    pub async fn put_end_with(&self, req: PutEndRequest) -> Result<(), MasterError> {
        self.ask(req, async |mut c, r| c.put_end(r).await).await.map(drop)
    }

    /// Asks the leader for a writer chunk of `len` bytes (at least
    /// `min_len`) per replica.
    pub async fn reserve_chunk(
        &self,
        client_id: u64,
        replica_num: u32,
        len: u64,
        min_len: u64,
    ) -> Result<ReserveChunkResponse, MasterError> {
        let req = ReserveChunkRequest { client_id, replica_num, len, min_len };
        Ok(self.ask(req, async |mut c, r| c.reserve_chunk(r).await).await?.reply)
    }

    /// Gives a writer chunk back to the leader.
    pub async fn return_chunk(&self, client_id: u64, chunk_id: u64) -> Result<(), MasterError> {
        let req = ReturnChunkRequest { client_id, chunk_id };
        self.ask(req, async |mut c, r| c.return_chunk(r).await).await.map(drop)
    }

    pub async fn put_revoke(&self, client_id: u64, key: &str) -> Result<(), MasterError> {
        let req = PutRevokeRequest { client_id, key: key.to_string() };
        self.ask(req, async |mut c, r| c.put_revoke(r).await).await.map(drop)
    }

    pub async fn get_replica_list(&self, client_id: u64, key: &str) -> Result<GetReplicaListResponse, MasterError> {
        let req = GetReplicaListRequest { key: key.to_string(), client_id };
        Ok(self.ask(req, async |mut c, r| c.get_replica_list(r).await).await?.reply)
    }

    pub async fn exist_key(&self, key: &str) -> Result<bool, MasterError> {
        let req = ExistKeyRequest { key: key.to_string() };
        Ok(self.ask(req, async |mut c, r| c.exist_key(r).await).await?.reply.exists)
    }

    pub async fn get_size(&self, key: &str) -> Result<u64, MasterError> {
        let req = GetSizeRequest { key: key.to_string() };
        Ok(self.ask(req, async |mut c, r| c.get_size(r).await).await?.reply.size)
    }

    pub async fn remove(&self, key: &str, force: bool) -> Result<(), MasterError> {
        // One id for every retry of this remove: the master applies it once.
        let req = RemoveRequest { key: key.to_string(), force, request_id: rand::random::<u64>().max(1) };
        self.ask(req, async |mut c, r| c.remove(r).await).await.map(drop)
    }

    /// A copy task of `key` to the segments named `targets` (upstream
    /// 0.3.14's `create_copy_task`; docs/TIERS.md, "Copy and move tasks"):
    /// its id. A retry after a lost answer may make a second task; both
    /// end with the same replicas.
    pub async fn create_copy_task(&self, key: &str, targets: Vec<String>) -> Result<TaskId, MasterError> {
        let req = CreateCopyTaskRequest { key: key.to_string(), targets };
        Ok(self.ask(req, async |mut c, r| c.create_copy_task(r).await).await?.reply.id.unwrap_or_default())
    }

    /// A move task of `key` from segment `source` to segment `target`
    /// (upstream 0.3.14's `create_move_task`): its id.
    pub async fn create_move_task(&self, key: &str, source: &str, target: &str) -> Result<TaskId, MasterError> {
        let req =
            CreateMoveTaskRequest { key: key.to_string(), source: source.to_string(), target: target.to_string() };
        Ok(self.ask(req, async |mut c, r| c.create_move_task(r).await).await?.reply.id.unwrap_or_default())
    }

    /// The state of task `id` (upstream 0.3.14's `query_task`);
    /// `TASK_NOT_FOUND` for an id the leader does not know.
    pub async fn query_task(&self, id: TaskId) -> Result<QueryTaskResponse, MasterError> {
        let req = QueryTaskRequest { id: Some(id) };
        Ok(self.ask(req, async |mut c, r| c.query_task(r).await).await?.reply)
    }

    /// Asks the leader to promote to memory those of `keys` whose only
    /// readable replicas are on disk (best effort, asynchronous): how many
    /// it queued.
    pub async fn prefetch_to_memory(&self, keys: Vec<String>) -> Result<u32, MasterError> {
        let req = PrefetchToMemoryRequest { keys };
        Ok(self.ask(req, async |mut c, r| c.prefetch_to_memory(r).await).await?.reply.queued)
    }

    pub async fn remove_all(&self, force: bool) -> Result<u64, MasterError> {
        let req = RemoveAllRequest { force };
        Ok(self.ask(req, async |mut c, r| c.remove_all(r).await).await?.reply.removed)
    }

    pub async fn list_objects(&self, prefix: &str, limit: u32) -> Result<Vec<ObjectInfo>, MasterError> {
        Ok(self.list_objects_at(prefix, limit).await?.0)
    }

    /// [`list_objects`](Self::list_objects) with the revision it was read
    /// at: a watcher that resyncs from the listing watches from the
    /// revision after it ([`crate::Watcher`]).
    pub async fn list_objects_at(&self, prefix: &str, limit: u32) -> Result<(Vec<ObjectInfo>, u64), MasterError> {
        let req = ListObjectsRequest { prefix: prefix.to_string(), limit, ..Default::default() };
        let listed = self.ask(req, async |mut c, r| c.list_objects(r).await).await?.reply;
        Ok((listed.objects, listed.revision))
    }

    /// Every object under `prefix` at one revision, read `page` at a time
    /// (the later pages from the state the first page was read at), with
    /// that revision. A listing whose pages a leader change interrupted is
    /// read again from its first page (at most three times).
    pub async fn list_all_at(&self, prefix: &str, page: u32) -> Result<(Vec<ObjectInfo>, u64), MasterError> {
        let mut attempt = 0;
        'listing: loop {
            attempt += 1;
            let mut objects = Vec::new();
            let mut req = ListObjectsRequest { prefix: prefix.to_string(), limit: page, ..Default::default() };
            loop {
                let listed = match self.ask(req.clone(), async |mut c, r| c.list_objects(r).await).await {
                    Ok(a) => a.reply,
                    Err(e) if req.at_revision != 0 && attempt < 3 => {
                        tracing::debug!(error = %e, "a listing's page was refused; listing again");
                        continue 'listing;
                    }
                    Err(e) => return Err(e),
                };
                req.start_after = listed.objects.last().map(|o| o.key.clone()).unwrap_or_default();
                req.at_revision = listed.revision;
                objects.extend(listed.objects);
                if !listed.more {
                    return Ok((objects, listed.revision));
                }
            }
        }
    }

    /// PutStart of many objects in one RPC (and one log entry): the batch
    /// answer and each item's answer.
    pub async fn batch_put_start(
        &self,
        requests: Vec<PutStartRequest>,
    ) -> Result<Attempted<Vec<PutStartResponse>>, MasterError> {
        let req = BatchPutStartRequest { requests };
        Ok(self.ask(req, async |mut c, r| c.batch_put_start(r).await).await?.map(|b| b.responses))
    }

    pub async fn batch_put_end(
        &self,
        requests: Vec<PutEndRequest>,
    ) -> Result<Attempted<Vec<PutEndResponse>>, MasterError> {
        let req = BatchPutEndRequest { requests };
        Ok(self.ask(req, async |mut c, r| c.batch_put_end(r).await).await?.map(|b| b.responses))
    }

    pub async fn batch_put_revoke(
        &self,
        requests: Vec<PutRevokeRequest>,
    ) -> Result<Vec<PutRevokeResponse>, MasterError> {
        let req = BatchPutRevokeRequest { requests };
        Ok(self.ask(req, async |mut c, r| c.batch_put_revoke(r).await).await?.reply.responses)
    }

    /// Replica lists of many keys after one leadership confirmation.
    pub async fn batch_get_replica_list(
        &self,
        client_id: u64,
        keys: Vec<String>,
    ) -> Result<Attempted<Vec<GetReplicaListResponse>>, MasterError> {
        let req = BatchGetReplicaListRequest { keys, client_id };
        Ok(self.ask(req, async |mut c, r| c.batch_get_replica_list(r).await).await?.map(|b| b.responses))
    }

    /// Existence of many keys after one leadership confirmation: the batch
    /// answer and each key's answer.
    pub async fn batch_exist_key(&self, keys: Vec<String>) -> Result<Attempted<Vec<ExistKeyResponse>>, MasterError> {
        let req = BatchExistKeyRequest { keys };
        Ok(self.ask(req, async |mut c, r| c.batch_exist_key(r).await).await?.map(|b| b.responses))
    }

    /// The leader's view of the cluster (following redirects).
    /// BatchProbeKey: existence without KV leases.
    pub async fn batch_probe_key(&self, keys: Vec<String>) -> Result<Attempted<Vec<ExistKeyResponse>>, MasterError> {
        let req = BatchExistKeyRequest { keys };
        Ok(self.ask(req, async |mut c, r| c.batch_probe_key(r).await).await?.map(|b| b.responses))
    }

    pub async fn cluster_info(&self) -> Result<GetClusterInfoResponse, MasterError> {
        let req = GetClusterInfoRequest { local_view: false, with_state_hash: false };
        Ok(self.ask(req, async |mut c, r| c.get_cluster_info(r).await).await?.reply)
    }

    /// This one master's own view of the cluster, leader or not (no
    /// redirect, one attempt); `leader_view` says which it was.
    pub async fn cluster_info_of(&self, addr: &str) -> Result<GetClusterInfoResponse, MasterError> {
        self.cluster_info_of_with(addr, false).await
    }

    /// [`cluster_info_of`](Self::cluster_info_of) with `state_hash` filled
    /// in: a hash of the whole applied state, O(objects) on the master
    /// (about a second at 1 M objects), for comparing replicas.
    pub async fn cluster_info_with_hash_of(&self, addr: &str) -> Result<GetClusterInfoResponse, MasterError> {
        self.cluster_info_of_with(addr, true).await
    }

    async fn cluster_info_of_with(
        &self,
        addr: &str,
        with_state_hash: bool,
    ) -> Result<GetClusterInfoResponse, MasterError> {
        let ch = self.channel(addr)?;
        let call = async move {
            MasterServiceClient::new(ch)
                .get_cluster_info(GetClusterInfoRequest { local_view: true, with_state_hash })
                .await
        };
        match tokio::time::timeout(self.config().rpc_timeout, call).await {
            Ok(Ok(r)) => check(Attempted::from(r.into_inner())),
            Ok(Err(s)) => Err(MasterError::Unavailable {
                deadline: self.config().rpc_timeout,
                attempts: 1,
                last: format!("{addr}: {}", s.message()),
            }),
            Err(_) => Err(MasterError::Unavailable {
                deadline: self.config().rpc_timeout,
                attempts: 1,
                last: format!("{addr}: no answer"),
            }),
        }
    }

    /// Adds a master as a learner and waits until it has caught up with the
    /// log as committed when it was added (by snapshot or by log), asking
    /// the leader how far it got. Not one blocking call: catching up by a
    /// snapshot of millions of objects outlasts any call's timeout, and a
    /// retried add used to restart the snapshot's transfer every time.
    pub async fn add_learner(&self, node_id: u64, addr: &str) -> Result<String, MasterError> {
        let req = AddLearnerRequest { node_id, addr: addr.to_string(), blocking: false };
        let detail = self.ask_admin(req, async |mut c, r| c.add_learner(r).await).await?.reply.detail;
        let target = self.cluster_info().await?.commit_index;
        let deadline = std::time::Instant::now() + LEARNER_CATCH_UP_MAX;
        loop {
            let info = self.cluster_info().await?;
            let matched = info.members.iter().find(|m| m.id == node_id && m.has_matched_index).map(|m| m.matched_index);
            if matched.is_some_and(|m| m >= target) {
                return Ok(format!("{detail}; caught up to log index {target}"));
            }
            if std::time::Instant::now() > deadline {
                return Err(MasterError::NotCaughtUp {
                    node: node_id,
                    at: matched.map_or("none".to_string(), |m| m.to_string()),
                    target,
                    waited: LEARNER_CATCH_UP_MAX,
                });
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Makes `voters` the complete voter set.
    pub async fn change_membership(&self, voters: Vec<u64>, retain: bool) -> Result<String, MasterError> {
        let req = ChangeMembershipRequest { voters, retain };
        Ok(self.ask_admin(req, async |mut c, r| c.change_membership(r).await).await?.reply.detail)
    }

    /// Drops learner `node_id` from the membership (voters: use
    /// [`change_membership`](Self::change_membership)).
    pub async fn remove_learner(&self, node_id: u64) -> Result<String, MasterError> {
        let req = RemoveLearnerRequest { node_id };
        Ok(self.ask_admin(req, async |mut c, r| c.remove_learner(r).await).await?.reply.detail)
    }

    pub async fn trigger_snapshot(&self) -> Result<String, MasterError> {
        let req = TriggerSnapshotRequest {};
        Ok(self.ask_admin(req, async |mut c, r| c.trigger_snapshot(r).await).await?.reply.detail)
    }

    /// Registered clients with their segments and last heartbeat (leader's view).
    pub async fn list_clients(&self) -> Result<Vec<ClientInfo>, MasterError> {
        let req = ListClientsRequest {};
        Ok(self.ask_admin(req, async |mut c, r| c.list_clients(r).await).await?.reply.clients)
    }

    /// Sets `tenant`'s quota to `quota_bytes` of objects (0 removes it);
    /// an admin operation.
    pub async fn set_tenant_quota(&self, tenant: &str, quota_bytes: u64) -> Result<String, MasterError> {
        let req = SetTenantQuotaRequest { tenant: tenant.to_string(), quota_bytes };
        Ok(self.ask_admin(req, async |mut c, r| c.set_tenant_quota(r).await).await?.reply.detail)
    }

    /// Every tenant with objects or a quota: its usage and quota (leader's view).
    pub async fn list_tenants(&self) -> Result<Vec<TenantInfo>, MasterError> {
        let req = ListTenantsRequest {};
        Ok(self.ask_admin(req, async |mut c, r| c.list_tenants(r).await).await?.reply.tenants)
    }

    /// Expires `client_id` now: its segments are unmounted at once.
    pub async fn evict_client(&self, client_id: u64) -> Result<String, MasterError> {
        let req = EvictClientRequest { client_id };
        Ok(self.ask_admin(req, async |mut c, r| c.evict_client(r).await).await?.reply.detail)
    }

    /// A consistent image of the leader's state: the first chunk's header
    /// (applied index, state hash, schema version) and the image bytes.
    pub async fn export_snapshot(&self) -> Result<(SnapshotChunk, Vec<u8>), MasterError> {
        let mut target = self.preferred();
        let mut last = String::new();
        for _ in 0..self.config().masters.len() + REDIRECTS_MAX {
            match export_from(self, &target).await {
                Ok(Export::Done(header, data)) => return Ok((header, data)),
                Ok(Export::Redirect(leader)) => target = leader,
                Ok(Export::Refused(code, message)) => return Err(MasterError::Rejected { code, message, attempts: 1 }),
                Err(e) => {
                    last = e;
                    target = self.config().masters.iter().find(|m| **m != target).cloned().unwrap_or(target);
                    tokio::time::sleep(self.config().backoff_max).await;
                }
            }
        }
        Err(MasterError::Unavailable { deadline: self.config().deadline, attempts: 0, last })
    }
}

/// How long [`MasterClient::add_learner`] waits for the learner to catch
/// up: a snapshot of 10 M objects installs in well under a minute here.
const LEARNER_CATCH_UP_MAX: std::time::Duration = std::time::Duration::from_secs(600);

/// Redirects followed while looking for the leader to export from.
const REDIRECTS_MAX: usize = 8;

enum Export {
    Done(SnapshotChunk, Vec<u8>),
    Redirect(String),
    Refused(mooncake_proto::ErrorCode, String),
}

async fn export_from(client: &MasterClient, addr: &str) -> Result<Export, String> {
    use mooncake_proto::ErrorCode;
    let ch = client.channel(addr).map_err(|e| e.to_string())?;
    let mut admin =
        mooncake_proto::admin::admin_service_client::AdminServiceClient::with_interceptor(ch, client.credentials())
            .max_decoding_message_size(mooncake_proto::GRPC_MESSAGE_MAX_BYTES);
    let mut stream = admin
        .export_snapshot(ExportSnapshotRequest {})
        .await
        .map_err(|s| format!("{addr}: {}", s.message()))?
        .into_inner();
    let first =
        stream.message().await.map_err(|s| format!("{addr}: {}", s.message()))?.ok_or("empty snapshot stream")?;
    let status = first.status.clone().unwrap_or_default();
    match status.error_code() {
        ErrorCode::Ok => {}
        ErrorCode::NotLeader if !status.leader_addr.is_empty() => return Ok(Export::Redirect(status.leader_addr)),
        ErrorCode::NotLeader | ErrorCode::Unavailable => return Err(format!("{addr}: {}", status.message)),
        code => return Ok(Export::Refused(code, status.message)),
    }
    let mut data = Vec::with_capacity(first.total_bytes as usize);
    data.extend_from_slice(&first.data);
    while let Some(chunk) = stream.message().await.map_err(|s| format!("{addr}: {}", s.message()))? {
        data.extend_from_slice(&chunk.data);
    }
    if data.len() as u64 != first.total_bytes {
        return Err(format!("{addr}: snapshot stream ended after {} of {} bytes", data.len(), first.total_bytes));
    }
    Ok(Export::Done(SnapshotChunk { data: Vec::new(), ..first }, data))
}

/// `r` when its status is OK, with its attempts; [`check`] otherwise.
fn checked<R: HasStatus>(r: Attempted<R>) -> Result<Attempted<R>, MasterError> {
    let attempts = r.attempts;
    Ok(Attempted { reply: check(r)?, attempts })
}

#[cfg(test)]
mod tests {
    use mooncake_proto::{ErrorCode, Status};

    use super::*;

    fn answer(status: Option<Status>, attempts: u32) -> Attempted<PutEndResponse> {
        Attempted { reply: PutEndResponse { status }, attempts }
    }

    #[test]
    fn an_ok_answer_keeps_its_attempts() {
        for status in [Some(Status::ok()), None] {
            let r = checked(answer(status.clone(), 3)).expect("OK");
            assert_eq!((r.reply.status, r.attempts), (status, 3));
        }
    }

    #[test]
    fn any_other_answer_is_rejected_with_its_code_message_and_attempts() {
        let r = checked(answer(Some(Status::with(ErrorCode::ObjectNotFound, "gone")), 2));
        match r {
            Err(MasterError::Rejected { code, message, attempts }) => {
                assert_eq!((code, message.as_str(), attempts), (ErrorCode::ObjectNotFound, "gone", 2));
            }
            other => panic!("expected Rejected, got {other:?}"),
        }
        // A code this version does not know is an error, never OK.
        let unknown = Status { code: 999, ..Status::with(ErrorCode::Ok, "newer") };
        assert_eq!(checked(answer(Some(unknown), 1)).err().and_then(|e| e.code()), Some(ErrorCode::InternalError));
    }
}
