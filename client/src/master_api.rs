//! Typed calls on [`MasterClient`]: one method per master RPC, returning the
//! response on OK and [`MasterError::Rejected`] with the stable code otherwise.

use mooncake_proto::admin::*;
use mooncake_proto::master::master_service_client::MasterServiceClient;
use mooncake_proto::master::*;

use crate::master_client::{Attempted, MasterClient, MasterError, check};

impl MasterClient {
    /// The Ping of `client_id`, with this client's credential.
    pub(crate) fn ping_request(&self, client_id: u64) -> PingRequest {
        PingRequest { client_id, credential: self.credential().as_bytes().to_vec() }
    }

    /// Heartbeat. `Ok(false)` means the master wants the client's segments
    /// remounted; `PERMISSION_DENIED`, that another process (another
    /// credential) holds the client id.
    pub async fn ping(&self, client_id: u64) -> Result<bool, MasterError> {
        let req = self.ping_request(client_id);
        let r = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.ping(req).await }
            })
            .await?;
        match r.reply.status.as_ref().map(|s| s.error_code()) {
            Some(mooncake_proto::ErrorCode::NeedRemount) => Ok(false),
            _ => check(r).map(|_| true),
        }
    }

    /// Heartbeat of a store node: the full answer, with the copies the
    /// leader asks it to make (docs/TIERS.md).
    pub async fn ping_for_copies(&self, client_id: u64) -> Result<PingResponse, MasterError> {
        let req = self.ping_request(client_id);
        let r = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.ping(req).await }
            })
            .await?;
        check(r)
    }

    /// Reports the outcome of copy `task_id` (`error`: empty when the copy is
    /// written and durable).
    pub async fn report_copy(&self, client_id: u64, task_id: u64, error: &str) -> Result<(), MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let req = ReportCopyRequest { client_id, credential, task_id, error: error.to_string() };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.report_copy(req).await }
            })
            .await?,
        )
        .map(drop)
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
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.report_corrupt(req).await }
            })
            .await?,
        )
        .map(|r| r.dropped)
    }

    /// Mounts `segment` for `client_id`; returns its capability key (for
    /// the transfer server that serves it).
    pub async fn mount_segment(&self, client_id: u64, segment: Segment) -> Result<Vec<SegmentKey>, MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let req = MountSegmentRequest { client_id, segment: Some(segment), credential };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.mount_segment(req).await }
            })
            .await?,
        )
        .map(|r| r.segment_keys)
    }

    pub async fn unmount_segment(&self, client_id: u64, segment_id: u64) -> Result<(), MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let req = UnmountSegmentRequest { client_id, segment_id, credential };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.unmount_segment(req).await }
            })
            .await?,
        )
        .map(drop)
    }

    /// Registers `client_id` with exactly `segments`; returns their
    /// capability keys (for the transfer server that serves them).
    pub async fn remount_segments(
        &self,
        client_id: u64,
        segments: Vec<Segment>,
    ) -> Result<Vec<SegmentKey>, MasterError> {
        let credential = self.credential().as_bytes().to_vec();
        let req = RemountSegmentRequest { client_id, segments, credential };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.remount_segment(req).await }
            })
            .await?,
        )
        .map(|r| r.segment_keys)
    }

    pub async fn put_start(&self, req: PutStartRequest) -> Result<Vec<Replica>, MasterError> {
        let r = check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.put_start(req).await }
            })
            .await?,
        )?;
        Ok(r.replicas)
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
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.put_end(req).await }
            })
            .await?,
        )
        .map(drop)
    }

    pub async fn put_revoke(&self, client_id: u64, key: &str) -> Result<(), MasterError> {
        let req = PutRevokeRequest { client_id, key: key.to_string() };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.put_revoke(req).await }
            })
            .await?,
        )
        .map(drop)
    }

    pub async fn get_replica_list(&self, client_id: u64, key: &str) -> Result<GetReplicaListResponse, MasterError> {
        let req = GetReplicaListRequest { key: key.to_string(), client_id };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.get_replica_list(req).await }
            })
            .await?,
        )
    }

    pub async fn exist_key(&self, key: &str) -> Result<bool, MasterError> {
        let req = ExistKeyRequest { key: key.to_string() };
        Ok(check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.exist_key(req).await }
            })
            .await?,
        )?
        .exists)
    }

    pub async fn get_size(&self, key: &str) -> Result<u64, MasterError> {
        let req = GetSizeRequest { key: key.to_string() };
        Ok(check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.get_size(req).await }
            })
            .await?,
        )?
        .size)
    }

    pub async fn remove(&self, key: &str, force: bool) -> Result<(), MasterError> {
        // One id for every retry of this remove: the master applies it once.
        let req = RemoveRequest { key: key.to_string(), force, request_id: rand::random::<u64>().max(1) };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.remove(req).await }
            })
            .await?,
        )
        .map(drop)
    }

    pub async fn remove_all(&self, force: bool) -> Result<u64, MasterError> {
        let req = RemoveAllRequest { force };
        Ok(check(self.call(|mut c| async move { c.remove_all(req).await }).await?)?.removed)
    }

    pub async fn list_objects(&self, prefix: &str, limit: u32) -> Result<Vec<ObjectInfo>, MasterError> {
        let req = ListObjectsRequest { prefix: prefix.to_string(), limit };
        Ok(check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.list_objects(req).await }
            })
            .await?,
        )?
        .objects)
    }

    /// PutStart of many objects in one RPC (and one log entry): the batch
    /// answer and each item's answer.
    pub async fn batch_put_start(
        &self,
        requests: Vec<PutStartRequest>,
    ) -> Result<Attempted<Vec<PutStartResponse>>, MasterError> {
        let req = BatchPutStartRequest { requests };
        let r = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.batch_put_start(req).await }
            })
            .await?;
        let attempts = r.attempts;
        Ok(Attempted { reply: check(r)?.responses, attempts })
    }

    pub async fn batch_put_end(
        &self,
        requests: Vec<PutEndRequest>,
    ) -> Result<Attempted<Vec<PutEndResponse>>, MasterError> {
        let req = BatchPutEndRequest { requests };
        let r = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.batch_put_end(req).await }
            })
            .await?;
        let attempts = r.attempts;
        Ok(Attempted { reply: check(r)?.responses, attempts })
    }

    pub async fn batch_put_revoke(
        &self,
        requests: Vec<PutRevokeRequest>,
    ) -> Result<Vec<PutRevokeResponse>, MasterError> {
        let req = BatchPutRevokeRequest { requests };
        Ok(check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.batch_put_revoke(req).await }
            })
            .await?,
        )?
        .responses)
    }

    /// Replica lists of many keys after one leadership confirmation.
    pub async fn batch_get_replica_list(
        &self,
        client_id: u64,
        keys: Vec<String>,
    ) -> Result<Attempted<Vec<GetReplicaListResponse>>, MasterError> {
        let req = BatchGetReplicaListRequest { keys, client_id };
        let r = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.batch_get_replica_list(req).await }
            })
            .await?;
        let attempts = r.attempts;
        Ok(Attempted { reply: check(r)?.responses, attempts })
    }

    /// Existence of many keys after one leadership confirmation: the batch
    /// answer and each key's answer.
    pub async fn batch_exist_key(&self, keys: Vec<String>) -> Result<Attempted<Vec<ExistKeyResponse>>, MasterError> {
        let req = BatchExistKeyRequest { keys };
        let r = self
            .call(|mut c| {
                let req = req.clone();
                async move { c.batch_exist_key(req).await }
            })
            .await?;
        let attempts = r.attempts;
        Ok(Attempted { reply: check(r)?.responses, attempts })
    }

    /// The leader's view of the cluster (following redirects).
    pub async fn cluster_info(&self) -> Result<GetClusterInfoResponse, MasterError> {
        let r = self
            .call(|mut c| async move {
                c.get_cluster_info(GetClusterInfoRequest { local_view: false, with_state_hash: false }).await
            })
            .await?;
        check(r)
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
        let r = self
            .call_admin(|mut c| {
                let req = req.clone();
                async move { c.add_learner(req).await }
            })
            .await?;
        let detail = check(r)?.detail;
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
        let r = self
            .call_admin(|mut c| {
                let req = req.clone();
                async move { c.change_membership(req).await }
            })
            .await?;
        Ok(check(r)?.detail)
    }

    /// Drops learner `node_id` from the membership (voters: use
    /// [`change_membership`](Self::change_membership)).
    pub async fn remove_learner(&self, node_id: u64) -> Result<String, MasterError> {
        let req = RemoveLearnerRequest { node_id };
        let r = self.call_admin(|mut c| async move { c.remove_learner(req).await }).await?;
        Ok(check(r)?.detail)
    }

    pub async fn trigger_snapshot(&self) -> Result<String, MasterError> {
        let r = self.call_admin(|mut c| async move { c.trigger_snapshot(TriggerSnapshotRequest {}).await }).await?;
        Ok(check(r)?.detail)
    }

    /// Registered clients with their segments and last heartbeat (leader's view).
    pub async fn list_clients(&self) -> Result<Vec<ClientInfo>, MasterError> {
        let r = self.call_admin(|mut c| async move { c.list_clients(ListClientsRequest {}).await }).await?;
        Ok(check(r)?.clients)
    }

    /// Expires `client_id` now: its segments are unmounted at once.
    pub async fn evict_client(&self, client_id: u64) -> Result<String, MasterError> {
        let r = self.call_admin(|mut c| async move { c.evict_client(EvictClientRequest { client_id }).await }).await?;
        Ok(check(r)?.detail)
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
