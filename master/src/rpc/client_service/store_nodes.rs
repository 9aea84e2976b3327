//! What store nodes ask of the leader besides their mounts: Ping (the
//! heartbeat, answered with copies to make and arena fences), TakeCopies
//! (copies, the call held until some are queued), ReportCopy and
//! ReportCorrupt. Each call proves its client by credential first; the
//! copies themselves are `objects/copies/`.

use std::time::Duration;

use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, Status};
use mooncake_segment::ClientId;
use tonic::Request;

use super::*;
use crate::objects::copies::CopyReport;
use crate::rpc::errors::meta_status;

impl MasterServiceImpl {
    /// Ping: a client's heartbeat, its credential checked first; a
    /// registered client is answered with its copies and the arena fences
    /// it has yet to acknowledge, an unknown one told to remount.
    pub(super) async fn answer_ping(&self, req: Request<PingRequest>) -> RpcResult<PingResponse> {
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
            return refused(s.into());
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
            crate::objects::arenas::take_acks(&self.shared, client, &crate::rpc::grants::fence_acks(&r.fence_acks));
            (
                crate::objects::copies::copies_for_ping(&self.shared, client),
                crate::rpc::grants::fences(crate::objects::arenas::fences_of(&self.shared, client, None, true)),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        let copy_tasks = crate::rpc::grants::copy_tasks(&self.shared, &copy_tasks);
        ok(PingResponse { status: Some(status), view_version: applied, copy_tasks, fences })
    }

    /// TakeCopies: a store node's copies, the call held until some are
    /// queued (`objects::copies::copies_when_queued`).
    pub(super) async fn answer_take_copies(&self, req: Request<TakeCopiesRequest>) -> RpcResult<TakeCopiesResponse> {
        let r = req.into_inner();
        let client = ClientId(r.client_id);
        let refused =
            |status: Status| ok(TakeCopiesResponse { status: Some(status), copy_tasks: vec![], fences: vec![] });
        let credential = match credential_hash(&r.credential) {
            Ok(h) => h,
            Err(s) => return refused(s),
        };
        if let Err(s) = self.shared.require_leader() {
            return refused(s.into());
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
        crate::objects::arenas::take_acks(&self.shared, client, &crate::rpc::grants::fence_acks(&r.fence_acks));
        let wait = Duration::from_millis(r.wait_ms.into());
        let (copy_tasks, fences) = crate::objects::copies::copies_when_queued(&self.shared, client, wait).await;
        let copy_tasks = crate::rpc::grants::copy_tasks(&self.shared, &copy_tasks);
        let fences = crate::rpc::grants::fences(fences);
        ok(TakeCopiesResponse { status: Some(Status::ok()), copy_tasks, fences })
    }

    /// ReportCopy: a copy's outcome, recorded by the copy duty.
    pub(super) async fn answer_report_copy(&self, req: Request<ReportCopyRequest>) -> RpcResult<ReportCopyResponse> {
        let r = req.into_inner();
        let credential = match credential_hash(&r.credential) {
            Ok(h) => h,
            Err(s) => return ok(ReportCopyResponse { status: Some(s) }),
        };
        let report = CopyReport { client: ClientId(r.client_id), task_id: r.task_id, error: r.error };
        let answer = crate::objects::copies::report_copy(&self.shared, &report, &credential).await;
        ok(ReportCopyResponse { status: Some(crate::rpc::errors::answer(answer)) })
    }

    /// ReportCorrupt: corrupt disk ranges, their replicas dropped.
    pub(super) async fn answer_report_corrupt(
        &self,
        req: Request<ReportCorruptRequest>,
    ) -> RpcResult<ReportCorruptResponse> {
        let r = req.into_inner();
        let credential = match credential_hash(&r.credential) {
            Ok(h) => h,
            Err(s) => return ok(ReportCorruptResponse { status: Some(s), dropped: 0 }),
        };
        let ranges: Vec<mooncake_segment::Range> =
            r.ranges.iter().map(|g| mooncake_segment::Range::new(g.offset, g.len)).collect();
        let (client, segment) = (ClientId(r.client_id), mooncake_segment::SegmentId(r.segment_id));
        match crate::objects::copies::report_corrupt(&self.shared, client, segment, ranges, &credential).await {
            Ok(dropped) => ok(ReportCorruptResponse { status: Some(Status::ok()), dropped }),
            Err(r) => ok(ReportCorruptResponse { status: Some(r.into()), dropped: 0 }),
        }
    }
}
