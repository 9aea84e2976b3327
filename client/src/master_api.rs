//! Typed calls on [`MasterClient`]: one method per master RPC, returning the
//! response on OK and [`MasterError::Rejected`] with the stable code otherwise.

use mooncake_proto::admin::*;
use mooncake_proto::master::master_service_client::MasterServiceClient;
use mooncake_proto::master::*;

use crate::master_client::{MasterClient, MasterError, check};

impl MasterClient {
    /// Heartbeat. `Ok(false)` means the master wants the client's segments remounted.
    pub async fn ping(&self, client_id: u64) -> Result<bool, MasterError> {
        let r = self.call(|mut c| async move { c.ping(PingRequest { client_id }).await }).await?;
        match r.status.as_ref().map(|s| s.error_code()) {
            Some(mooncake_proto::ErrorCode::NeedRemount) => Ok(false),
            _ => check(r).map(|_| true),
        }
    }

    pub async fn mount_segment(&self, client_id: u64, segment: Segment) -> Result<(), MasterError> {
        let req = MountSegmentRequest { client_id, segment: Some(segment) };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.mount_segment(req).await }
            })
            .await?,
        )
        .map(drop)
    }

    pub async fn unmount_segment(&self, client_id: u64, segment_id: u64) -> Result<(), MasterError> {
        let req = UnmountSegmentRequest { client_id, segment_id };
        check(self.call(|mut c| async move { c.unmount_segment(req).await }).await?).map(drop)
    }

    pub async fn remount_segments(&self, client_id: u64, segments: Vec<Segment>) -> Result<(), MasterError> {
        let req = RemountSegmentRequest { client_id, segments };
        check(
            self.call(|mut c| {
                let req = req.clone();
                async move { c.remount_segment(req).await }
            })
            .await?,
        )
        .map(drop)
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

    pub async fn put_end(&self, client_id: u64, key: &str, checksum: u32) -> Result<(), MasterError> {
        let req = PutEndRequest { client_id, key: key.to_string(), checksum };
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
        let req = RemoveRequest { key: key.to_string(), force };
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

    /// This one master's view of the cluster (no redirect, one attempt).
    pub async fn cluster_info_of(&self, addr: &str) -> Result<GetClusterInfoResponse, MasterError> {
        let ch = self.channel(addr)?;
        let call = async move { MasterServiceClient::new(ch).get_cluster_info(GetClusterInfoRequest {}).await };
        match tokio::time::timeout(self.config().rpc_timeout, call).await {
            Ok(Ok(r)) => check(r.into_inner()),
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

    /// Adds a master as a learner (waits until it has caught up).
    pub async fn add_learner(&self, node_id: u64, addr: &str) -> Result<String, MasterError> {
        let req = AddLearnerRequest { node_id, addr: addr.to_string(), blocking: true };
        let r = self
            .call_admin(|mut c| {
                let req = req.clone();
                async move { c.add_learner(req).await }
            })
            .await?;
        Ok(check(r)?.detail)
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

    pub async fn trigger_snapshot(&self) -> Result<String, MasterError> {
        let r = self.call_admin(|mut c| async move { c.trigger_snapshot(TriggerSnapshotRequest {}).await }).await?;
        Ok(check(r)?.detail)
    }
}
