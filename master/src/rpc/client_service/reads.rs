//! Object reads: replica lists (with their KV leases and READ grants) and
//! existence, one key or a batch.

use mooncake_auth::capability::Access;
use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::MetaState;
use mooncake_raft_store::state::validate_stored_key;

use super::*;
use crate::rpc::convert::{self};
use crate::rpc::errors::invalid;

impl MasterServiceImpl {
    /// GetReplicaList of one key on the applied state (its KV lease was
    /// granted before the read).
    pub(super) fn replica_list(&self, s: &MetaState, key: &str) -> GetReplicaListResponse {
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
                crate::rpc::grants::sign(&self.shared, s, &mut replicas, Access::Read);
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

    pub(super) fn exist_key(&self, s: &MetaState, key: &str) -> ExistKeyResponse {
        let exists = s.object(key).is_some();
        ExistKeyResponse { status: Some(Status::ok()), exists }
    }

    /// GetReplicaList of each key, leased; invalid keys answered without a lease.
    pub(super) async fn replica_lists(&self, keys: &[String]) -> Result<Vec<GetReplicaListResponse>, Status> {
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        let answer = |s: &MetaState| -> Vec<GetReplicaListResponse> {
            keys.iter()
                .map(|k| match validate_stored_key(k) {
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
                answers.iter_mut().zip(keys).zip(crate::objects::puts::in_flight(&self.shared, keys))
            {
                if in_flight && missing(answer) {
                    answer.status = Some(crate::objects::puts::not_ready(key).into());
                }
            }
        }
        let answered = |a: &GetReplicaListResponse| crate::objects::ReadAnswered {
            found: is_ok(a),
            disk_only: !a.replicas.is_empty() && a.replicas.iter().all(|r| r.tier == Tier::Ssd as i32),
        };
        crate::objects::copies::count_hits(&self.shared, keys.iter().zip(answers.iter().map(answered)));
        crate::objects::hot_keys::count_reads(&self.shared, keys.iter().zip(answers.iter().map(answered)));
        Ok(answers)
    }

    /// ExistKey of each of `keys` on the applied state; invalid keys
    /// answered INVALID_PARAMS.
    fn existence(&self, s: &MetaState, keys: &[String]) -> Vec<ExistKeyResponse> {
        keys.iter()
            .map(|k| match validate_stored_key(k) {
                Ok(()) => self.exist_key(s, k),
                Err(e) => ExistKeyResponse { status: Some(invalid(e)), exists: false },
            })
            .collect()
    }

    /// ExistKey of each key, leased when it exists (as Mooncake's).
    pub(super) async fn exist_keys(&self, keys: &[String]) -> Result<Vec<ExistKeyResponse>, Status> {
        let names: Vec<&str> = keys.iter().map(String::as_str).collect();
        Ok(self.shared.read_leased(&names, |s| self.existence(s, keys), |r| r.exists).await?)
    }

    /// Existence of each key without a KV lease (BatchProbeKey): the same
    /// linearizable read as [`exist_keys`](Self::exist_keys), but an
    /// existing key is not pinned, so a probe never keeps eviction off it.
    pub(super) async fn probe_keys(&self, keys: &[String]) -> Result<Vec<ExistKeyResponse>, Status> {
        Ok(self.shared.read(|s| self.existence(s, keys)).await?)
    }
}
