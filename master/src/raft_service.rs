//! The receiving side of the Raft transport: decodes openraft messages from
//! peers of the same cluster, hands them to the local Raft, and encodes the
//! result (including Raft-level errors, which travel back as values).

use std::sync::Arc;

use mooncake_proto::raft::raft_service_server::RaftService;
use mooncake_proto::raft::{HeardFromRequest, HeardFromResponse, RaftMessage};
use mooncake_raft_store::{Raft, codec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::{Request, Response, Status};

use crate::cluster_id::ClusterId;
use crate::peers_heard::PeersHeard;
use crate::prevote::{self, LeaderContact, PreVoteRequest};

pub struct RaftServiceImpl {
    raft: Raft,
    /// This master's log (its last log id answers pre-votes).
    log: mooncake_raft_store::LogStore,
    cluster: Arc<ClusterId>,
    /// Refreshed by every accepted leader message and granted vote.
    contact: Arc<LeaderContact>,
    /// How long without a leader before this master grants a pre-vote.
    quiet: std::time::Duration,
    /// Time to handle each RPC received, by kind.
    handled: prometheus::HistogramVec,
    /// Leaders and candidates whose requests arrived (`peers_heard.rs`).
    heard: Arc<PeersHeard>,
}

impl RaftServiceImpl {
    pub fn new(
        raft: Raft,
        log: mooncake_raft_store::LogStore,
        cluster: Arc<ClusterId>,
        contact: Arc<LeaderContact>,
        quiet: std::time::Duration,
        handled: prometheus::HistogramVec,
        heard: Arc<PeersHeard>,
    ) -> Self {
        RaftServiceImpl { raft, log, cluster, contact, quiet, handled, heard }
    }

    /// The sender of a leader's or candidate's request: it has a vote.
    fn record_sender(&self, vote: &openraft::Vote<mooncake_raft_store::NodeId>) {
        if let Some(id) = vote.leader_id().voted_for() {
            self.heard.record(id);
        }
    }

    fn observe(&self, rpc: &str, since: std::time::Instant) {
        self.handled.with_label_values(&[rpc]).observe(since.elapsed().as_secs_f64());
    }

    /// A message of an established leader whose term is not behind ours is
    /// contact with the leader, recorded on arrival (as Raft resets its
    /// election timer): a follower slow to sync a large append still heard
    /// from its leader, even if the leader gave up waiting for the answer
    /// (openraft allows an AppendEntries one heartbeat interval) and the
    /// call was cancelled before it returned.
    fn heard_if_from_leader(&self, vote: &openraft::Vote<mooncake_raft_store::NodeId>) {
        let mine = self.raft.metrics().borrow().vote;
        if vote.is_committed() && *vote >= mine {
            self.contact.heard();
        }
    }

    /// Refuses messages of another cluster, then decodes.
    fn decode<T: DeserializeOwned>(&self, req: Request<RaftMessage>) -> Result<T, Status> {
        let msg = req.into_inner();
        if let Err(e) = self.cluster.check(&msg.cluster_id) {
            tracing::warn!(error = %e, "refused a raft message");
            return Err(Status::failed_precondition(e.to_string()));
        }
        codec::decode("raft request", &msg.data)
            .map_err(|e| Status::invalid_argument(format!("undecodable raft message: {e}")))
    }
}

fn reply<T: Serialize>(value: &T) -> Result<Response<RaftMessage>, Status> {
    match codec::encode("raft response", value) {
        Ok(data) => Ok(Response::new(RaftMessage { data, ..Default::default() })),
        Err(e) => Ok(Response::new(RaftMessage { error: e.to_string(), ..Default::default() })),
    }
}

#[tonic::async_trait]
impl RaftService for RaftServiceImpl {
    async fn append_entries(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let since = std::time::Instant::now();
        let rpc: openraft::raft::AppendEntriesRequest<mooncake_raft_store::TypeConfig> = self.decode(req)?;
        let kind = if rpc.entries.is_empty() { "heartbeat" } else { "append" };
        self.heard_if_from_leader(&rpc.vote);
        self.record_sender(&rpc.vote);
        let result = self.raft.append_entries(rpc).await;
        let answer = reply(&result);
        self.observe(kind, since);
        answer
    }

    async fn vote(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let since = std::time::Instant::now();
        let rpc: openraft::raft::VoteRequest<mooncake_raft_store::NodeId> = self.decode(req)?;
        self.record_sender(&rpc.vote);
        let result = self.raft.vote(rpc).await;
        if matches!(&result, Ok(v) if v.vote_granted) {
            self.contact.heard();
        }
        let answer = reply(&result);
        self.observe("vote", since);
        answer
    }

    async fn install_snapshot(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let since = std::time::Instant::now();
        let rpc: openraft::raft::InstallSnapshotRequest<mooncake_raft_store::TypeConfig> = self.decode(req)?;
        self.heard_if_from_leader(&rpc.vote);
        self.record_sender(&rpc.vote);
        let result = self.raft.install_snapshot(rpc).await;
        let answer = reply(&result);
        self.observe("snapshot", since);
        answer
    }

    async fn pre_vote(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let since = std::time::Instant::now();
        let rpc: PreVoteRequest = self.decode(req)?;
        let answer = prevote::answer(&self.raft, &self.log, &self.contact, self.quiet, &rpc);
        if !answer.granted {
            tracing::debug!(candidate = rpc.candidate, reason = %answer.reason, "refused a pre-vote");
        }
        // Framed as openraft's answers are (the network client decodes one way).
        let answer = reply(&Ok::<_, openraft::error::RaftError<mooncake_raft_store::NodeId>>(answer));
        self.observe("pre_vote", since);
        answer
    }

    async fn heard_from(&self, req: Request<HeardFromRequest>) -> Result<Response<HeardFromResponse>, Status> {
        let id = req.into_inner().node_id;
        let cluster_id = self.cluster.get().unwrap_or_default();
        Ok(Response::new(HeardFromResponse { heard: self.heard.contains(id), cluster_id }))
    }
}
