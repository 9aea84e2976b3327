//! The receiving side of the Raft transport: decodes openraft messages from
//! peers, hands them to the local Raft, and encodes the result (including
//! Raft-level errors, which travel back as values).

use mooncake_proto::raft::RaftMessage;
use mooncake_proto::raft::raft_service_server::RaftService;
use mooncake_raft_store::{Raft, codec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::{Request, Response, Status};

pub struct RaftServiceImpl {
    raft: Raft,
}

impl RaftServiceImpl {
    pub fn new(raft: Raft) -> Self {
        RaftServiceImpl { raft }
    }
}

fn decode<T: DeserializeOwned>(req: Request<RaftMessage>) -> Result<T, Status> {
    codec::decode("raft request", &req.into_inner().data)
        .map_err(|e| Status::invalid_argument(format!("undecodable raft message: {e}")))
}

fn reply<T: Serialize>(value: &T) -> Result<Response<RaftMessage>, Status> {
    match codec::encode("raft response", value) {
        Ok(data) => Ok(Response::new(RaftMessage { data, error: String::new() })),
        Err(e) => Ok(Response::new(RaftMessage { data: Vec::new(), error: e.to_string() })),
    }
}

#[tonic::async_trait]
impl RaftService for RaftServiceImpl {
    async fn append_entries(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let rpc = decode(req)?;
        reply(&self.raft.append_entries(rpc).await)
    }

    async fn vote(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let rpc = decode(req)?;
        reply(&self.raft.vote(rpc).await)
    }

    async fn install_snapshot(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let rpc = decode(req)?;
        reply(&self.raft.install_snapshot(rpc).await)
    }
}
