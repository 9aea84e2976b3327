//! Who a call acts as: a client id proven by its credential (mounts, pings,
//! puts acting as their writer), the segment keys a store node gets, and
//! the shared-memory paths a mount may name.

use mooncake_auth::Credential;
use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::{CredentialHash, MetaError};
use mooncake_segment::{ClientId, SegmentId};
use tonic::metadata::MetadataMap;

use super::*;
use crate::rpc::errors::meta_status;

impl MasterServiceImpl {
    /// Refuses early a caller holding `credential` that names a client
    /// registered under another credential. Only the leader answers early
    /// (its applied state is the freshest); apply decides in any case.
    pub(super) fn may_act_as(&self, client: ClientId, credential: &CredentialHash) -> Result<(), Status> {
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
    pub(super) fn registering(&self, client: ClientId, credential: &[u8]) -> Result<CredentialHash, Status> {
        let credential = credential_hash(credential)?;
        self.may_act_as(client, &credential)?;
        self.shared.leader.heartbeat(client, self.shared.now());
        Ok(credential)
    }

    /// The capability keys of `segments`, now mounted by `owner`, for the
    /// owner's store node: none unless the mount succeeded.
    pub(super) fn segment_keys(
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
        let fences =
            crate::rpc::grants::fences(crate::objects::arenas::fences_of(&self.shared, owner, Some(&ids), false));
        ids.into_iter()
            .map(|id| SegmentKey {
                segment_id: id.0,
                key: issuer.key_bytes(id, owner).to_vec(),
                fence: fences.iter().find(|f| f.segment_id == id.0).cloned(),
            })
            .collect()
    }
}

/// PutStart, PutEnd and PutRevoke act as their writer: a writer registered
/// with a credential must present it (the `x-mooncake-client-credential`
/// metadata entry the client library sends on every call), or another
/// client could revoke its puts in flight or end them with a checksum of
/// its own. A writer id that is not registered is not checked: no process
/// holds it, so there is nobody to impersonate.
pub(super) fn writers_allowed(
    shared: &crate::shared::Shared,
    metadata: &MetadataMap,
    writers: &[u64],
) -> Result<(), Status> {
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
pub(super) fn credential_hash(bytes: &[u8]) -> Result<CredentialHash, Status> {
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
pub(super) fn validate_shm_path(spec: &mooncake_raft_store::SegmentSpec) -> Result<(), MetaError> {
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
