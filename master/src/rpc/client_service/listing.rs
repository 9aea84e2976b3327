//! ListObjects on the wire: a page of the caller's key space, in key
//! order; a listing of several pages reads them all from the state its
//! first page came from (`crate::rpc::listings`, kept by revision a while).

use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, Status};
use tonic::Request;

use super::*;
use crate::rpc::convert;

/// Default and largest page of ListObjects.
const LIST_DEFAULT: usize = 1_000;
const LIST_MAX: usize = 100_000;

impl MasterServiceImpl {
    /// ListObjects: a page of the caller's key space, later pages read from
    /// the state the first page came from (kept a while, by revision).
    pub(super) async fn answer_list_objects(&self, req: Request<ListObjectsRequest>) -> RpcResult<ListObjectsResponse> {
        let space = match self.admit(&req, Needs::TENANT) {
            Ok(space) => space,
            Err(s) => return ok(ListObjectsResponse { status: Some(s), ..Default::default() }),
        };
        let peer = req.remote_addr().map(|a| a.ip());
        let r = req.into_inner();
        let limit = match r.limit as usize {
            0 => LIST_DEFAULT,
            n => n.min(LIST_MAX),
        };
        let bounds = match crate::rpc::listings::Bounds::of(&space, &r.prefix, &r.start_after) {
            Ok(bounds) => bounds,
            Err(s) => return ok(ListObjectsResponse { status: Some(s), ..Default::default() }),
        };
        let read = |s: &mooncake_raft_store::MetaState| {
            let (page, more) = crate::rpc::listings::page(s, &bounds, limit);
            let objects: Vec<ObjectInfo> = page
                .into_iter()
                .filter_map(|o| {
                    let key = space.client_key(&o.key)?.to_string();
                    Some(ObjectInfo { key, ..convert::object_pb(s, o) })
                })
                .collect();
            (objects, more)
        };
        let now = std::time::Instant::now();
        let listed = match r.at_revision {
            0 => {
                let first = self.shared.read(|s| {
                    let (objects, more) = read(s);
                    // More pages come from this state: kept (an O(1) clone).
                    (objects, more, s.last_applied.map_or(0, |l| l.index), more.then(|| s.clone()))
                });
                first.await.map_err(Status::from).map(|(objects, more, revision, state)| {
                    if let Some(state) = state {
                        self.edge.listings.keep(peer, revision, state, now);
                    }
                    (objects, more, revision)
                })
            }
            at => match self.edge.listings.at(peer, at, now) {
                Some(state) => {
                    let (objects, more) = read(&state);
                    Ok((objects, more, at))
                }
                None => Err(Status::with(
                    ErrorCode::InvalidParams,
                    format!(
                        "the listing at revision {at} is no longer kept here (its pages are kept {} s on the master \
                     that answered its first page): list again from the first page",
                        crate::rpc::listings::LISTING_KEPT.as_secs()
                    ),
                )),
            },
        };
        match listed {
            Ok((objects, more, revision)) => {
                ok(ListObjectsResponse { status: Some(Status::ok()), objects, revision, more })
            }
            Err(s) => ok(ListObjectsResponse { status: Some(s), ..Default::default() }),
        }
    }
}
