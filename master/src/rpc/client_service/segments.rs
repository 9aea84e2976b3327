//! Segments on the wire: MountSegment, UnmountSegment and RemountSegment
//! (a reattach too), each checked (spec, shared-memory path, the caller's
//! credential) before its command is proposed, and the tenant a mount
//! dedicates its segments to. What a mount does is the state's
//! (`MountSegment` and its kin in raft-store).

use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, Status};
use mooncake_raft_store::state::validate_segment;
use mooncake_raft_store::{Command, SegmentSpec};
use mooncake_segment::{ClientId, SegmentId};
use tonic::Request;

use super::*;
use crate::rpc::convert::Wire;
use crate::rpc::errors::invalid;

/// The tenant a mount dedicates its segments to ("" none), by a valid name.
fn dedicated_to(tenant: &str) -> Result<Option<String>, Status> {
    if tenant.is_empty() {
        return Ok(None);
    }
    match mooncake_segment::tenant::Tenant::parse(tenant) {
        Ok(t) => Ok(Some(t.name().to_string())),
        Err(e) => Err(Status::with(ErrorCode::InvalidParams, format!("the tenant to dedicate segments to: {e}"))),
    }
}

impl MasterServiceImpl {
    /// MountSegment: a segment registered (or dedicated to a tenant), its
    /// capability keys answered.
    pub(super) async fn answer_mount_segment(
        &self,
        req: Request<MountSegmentRequest>,
    ) -> RpcResult<MountSegmentResponse> {
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
        let cmd = match dedicated_to(&r.tenant) {
            Ok(None) => Command::MountSegment { client, credential, segment: spec },
            Ok(Some(tenant)) => Command::MountTenantSegment { client, credential, segment: spec, tenant },
            Err(s) => return refused(s),
        };
        let status = self.write(cmd).await;
        let segment_keys = self.segment_keys(&status, client, [id]);
        ok(MountSegmentResponse { status: Some(status), segment_keys })
    }

    /// UnmountSegment, by a caller proven to act as the segment's client.
    pub(super) async fn answer_unmount_segment(
        &self,
        req: Request<UnmountSegmentRequest>,
    ) -> RpcResult<UnmountSegmentResponse> {
        let r = req.into_inner();
        let client = ClientId(r.client_id);
        let credential = match credential_hash(&r.credential).and_then(|h| self.may_act_as(client, &h).map(|()| h)) {
            Ok(h) => h,
            Err(s) => return ok(UnmountSegmentResponse { status: Some(s) }),
        };
        let cmd = Command::UnmountSegment { client, credential, segment: SegmentId(r.segment_id) };
        ok(UnmountSegmentResponse { status: Some(self.write(cmd).await) })
    }

    /// RemountSegment: a client's segments registered again (or reattached),
    /// their capability keys answered.
    pub(super) async fn answer_remount_segment(
        &self,
        req: Request<RemountSegmentRequest>,
    ) -> RpcResult<RemountSegmentResponse> {
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
        let cmd = match (dedicated_to(&r.tenant), r.reattach) {
            (Ok(tenant), true) => Command::ReattachSegments { client, credential, segments, tenant },
            (Ok(None), false) => Command::RemountSegments { client, credential, segments },
            (Ok(Some(tenant)), false) => Command::RemountTenantSegments { client, credential, segments, tenant },
            (Err(s), _) => return refused(s),
        };
        let status = self.write(cmd).await;
        let segment_keys = self.segment_keys(&status, client, ids);
        ok(RemountSegmentResponse { status: Some(status), segment_keys })
    }
}
