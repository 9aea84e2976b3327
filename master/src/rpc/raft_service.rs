//! The receiving side of the Raft transport: decodes openraft messages from
//! peers of the same cluster, hands them to the local Raft, and encodes the
//! result (including Raft-level errors, which travel back as values).

use std::sync::Arc;

use mooncake_proto::raft::raft_service_server::RaftService;
use mooncake_proto::raft::{
    HeardFromRequest, HeardFromResponse, RaftMessage, StateCheckpoint, StateCheckpointsRequest,
    StateCheckpointsResponse,
};
use mooncake_raft_store::{Raft, codec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::{Request, Response, Status};

use crate::raft::cluster_id::ClusterId;
use crate::raft::network::PreVoteRequest;
use crate::raft::peers_heard::PeersHeard;
use crate::raft::prevote::{self, LeaderContact};
use mooncake_auth::MacKey;

/// The MAC a HeardFrom request about `node_id` carries.
pub fn heard_from_mac(key: &MacKey, node_id: u64) -> Vec<u8> {
    key.sign(&[b"heard_from", &node_id.to_le_bytes()])
}

/// What a Raft request must show to be handled: a MAC under the cluster
/// secret's raft key, and this cluster's id.
pub struct Admission {
    pub cluster: Arc<ClusterId>,
    pub raft_key: MacKey,
}

#[derive(Clone)]
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
    /// Requests must carry a MAC under it: only the cluster's masters hold
    /// the secret it comes from (`secret.rs`).
    raft_key: MacKey,
    /// Requests refused for a bad MAC (logged now and then, not each).
    forged: Arc<std::sync::atomic::AtomicU64>,
    /// This master's state checkpoints, for its peers' audits.
    checkpoints: Arc<mooncake_raft_store::Checkpoints>,
}

impl RaftServiceImpl {
    pub fn new(
        raft: Raft,
        log: mooncake_raft_store::LogStore,
        admission: Admission,
        contact: Arc<LeaderContact>,
        quiet: std::time::Duration,
        handled: prometheus::HistogramVec,
        heard: Arc<PeersHeard>,
    ) -> Self {
        let Admission { cluster, raft_key } = admission;
        let checkpoints = Arc::new(mooncake_raft_store::Checkpoints::default());
        RaftServiceImpl {
            raft,
            log,
            cluster,
            contact,
            quiet,
            handled,
            heard,
            raft_key,
            forged: Default::default(),
            checkpoints,
        }
    }

    /// Answers StateCheckpoints from `checkpoints`.
    pub fn with_checkpoints(mut self, checkpoints: Arc<mooncake_raft_store::Checkpoints>) -> Self {
        self.checkpoints = checkpoints;
        self
    }

    /// UNAUTHENTICATED unless `mac` is the cluster's MAC of `parts`. The
    /// first refusal and every 1000th after it are logged (a flood of forged
    /// messages must not flood the log too).
    fn authenticate(&self, parts: &[&[u8]], mac: &[u8]) -> Result<(), Status> {
        if self.raft_key.verify(parts, mac) {
            return Ok(());
        }
        let n = self.forged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n.is_multiple_of(1000) {
            tracing::warn!(
                refused = n + 1,
                "refused a raft request without a valid MAC of this cluster's secret (a peer that is not a master \
                 of this cluster, or a master given another --cluster-secret-file)"
            );
        }
        Err(Status::unauthenticated(
            "raft request without a valid MAC of this cluster's secret: only masters of this cluster may send them \
             (check --cluster-secret-file)",
        ))
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

    /// With mutual TLS, the sender's certificate must name a master that is
    /// a member (voter or learner) of the cluster as this master knows it
    /// (any master, while it knows no membership yet: a new learner learns
    /// it from the leader's first message). A removed master's certificate
    /// no longer admits it. Without TLS there is no certificate; the MAC
    /// then stands alone.
    fn check_certificate<T>(&self, req: &Request<T>) -> Result<(), Status> {
        self.check_peer(&PeerCert::of(req))
    }

    /// [`check_certificate`](Self::check_certificate) of a certificate
    /// taken from a request before (a stream's messages are checked
    /// against the membership as it is when each arrives).
    fn check_peer(&self, peer: &PeerCert) -> Result<(), Status> {
        let id = match peer {
            PeerCert::None => return Ok(()),
            PeerCert::Master(id) => *id,
            PeerCert::Other(other) => {
                return Err(Status::permission_denied(format!(
                    "raft requests come only from masters; the certificate presented names {other}"
                )));
            }
        };
        let membership = self.raft.metrics().borrow().membership_config.clone();
        let mut members = membership.membership().nodes().map(|(n, _)| *n).peekable();
        if members.peek().is_none() || members.any(|n| n == id) {
            return Ok(());
        }
        Err(Status::permission_denied(format!(
            "the certificate names master {id}, which is not a member of this cluster (removed, or never added)"
        )))
    }

    /// Handles one AppendEntries message (of a call or of a stream).
    async fn handle_append(&self, peer: &PeerCert, msg: RaftMessage) -> Result<RaftMessage, Status> {
        let since = std::time::Instant::now();
        self.check_peer(peer)?;
        let rpc: openraft::raft::AppendEntriesRequest<mooncake_raft_store::TypeConfig> =
            self.decode_message("append_entries", msg)?;
        let kind = if rpc.entries.is_empty() { "heartbeat" } else { "append" };
        self.heard_if_from_leader(&rpc.vote);
        self.record_sender(&rpc.vote);
        let result = self.raft.append_entries(rpc).await;
        let answer = reply(&result);
        self.observe(kind, since);
        answer.map(Response::into_inner)
    }

    /// Refuses messages not signed with this cluster's secret, from a peer
    /// whose certificate names no member, or of another cluster; then decodes.
    fn decode<T: DeserializeOwned>(&self, method: &str, req: Request<RaftMessage>) -> Result<T, Status> {
        self.check_certificate(&req)?;
        self.decode_message(method, req.into_inner())
    }

    /// [`decode`](Self::decode) after the certificate check.
    fn decode_message<T: DeserializeOwned>(&self, method: &str, msg: RaftMessage) -> Result<T, Status> {
        let parts: [&[u8]; 3] = [method.as_bytes(), msg.cluster_id.as_bytes(), &msg.data];
        self.authenticate(&parts, &msg.mac)?;
        if let Err(e) = self.cluster.check(&msg.cluster_id) {
            tracing::warn!(error = %e, "refused a raft message");
            return Err(Status::failed_precondition(e.to_string()));
        }
        codec::decode("raft request", &msg.data)
            .map_err(|e| Status::invalid_argument(format!("undecodable raft message: {e}")))
    }
}

/// What a peer's TLS certificate says, taken once from a request.
enum PeerCert {
    /// No TLS: the MAC stands alone.
    None,
    /// A master's certificate, naming its id.
    Master(u64),
    /// A certificate of something else (its role, for the refusal).
    Other(String),
}

impl PeerCert {
    fn of<T>(req: &Request<T>) -> PeerCert {
        if req.peer_certs().is_none() {
            return PeerCert::None;
        }
        match crate::rpc::peer::peer_role(req) {
            Some(mooncake_tls::Role::Master { id }) => PeerCert::Master(id),
            other => PeerCert::Other(format!("{other:?}")),
        }
    }
}

/// The answers of an AppendEntriesStream, in the order of its messages.
pub type AppendAnswers = std::pin::Pin<Box<dyn futures::Stream<Item = Result<RaftMessage, Status>> + Send>>;

fn reply<T: Serialize>(value: &T) -> Result<Response<RaftMessage>, Status> {
    match codec::encode("raft response", value) {
        Ok(data) => Ok(Response::new(RaftMessage { data, ..Default::default() })),
        Err(e) => Ok(Response::new(RaftMessage { error: e.to_string(), ..Default::default() })),
    }
}

#[tonic::async_trait]
impl RaftService for RaftServiceImpl {
    async fn append_entries(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let peer = PeerCert::of(&req);
        self.handle_append(&peer, req.into_inner()).await.map(Response::new)
    }

    type AppendEntriesStreamStream = AppendAnswers;

    /// Answers each message of the stream in turn, as `append_entries`; a
    /// refused message ends the stream with its status.
    async fn append_entries_stream(
        &self,
        req: Request<tonic::Streaming<RaftMessage>>,
    ) -> Result<Response<AppendAnswers>, Status> {
        let peer = PeerCert::of(&req);
        self.check_peer(&peer)?;
        // tonic ends the stream at the first `Err` it is given.
        let state = (self.clone(), peer, req.into_inner());
        let answers = futures::stream::unfold(state, |(service, peer, mut incoming)| async move {
            let msg = match incoming.message().await {
                Ok(Some(msg)) => msg,
                // The leader closed it, or the connection went.
                Ok(None) | Err(_) => return None,
            };
            let answer = service.handle_append(&peer, msg).await;
            Some((answer, (service, peer, incoming)))
        });
        Ok(Response::new(Box::pin(answers)))
    }

    async fn vote(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let since = std::time::Instant::now();
        let rpc: openraft::raft::VoteRequest<mooncake_raft_store::NodeId> = self.decode("vote", req)?;
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
        let rpc: openraft::raft::InstallSnapshotRequest<mooncake_raft_store::TypeConfig> =
            self.decode("install_snapshot", req)?;
        self.heard_if_from_leader(&rpc.vote);
        self.record_sender(&rpc.vote);
        let result = self.raft.install_snapshot(rpc).await;
        let answer = reply(&result);
        self.observe("snapshot", since);
        answer
    }

    async fn pre_vote(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
        let since = std::time::Instant::now();
        let rpc: PreVoteRequest = self.decode("pre_vote", req)?;
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
        self.check_certificate(&req)?;
        let req = req.into_inner();
        let id = req.node_id;
        self.authenticate(&[b"heard_from", &id.to_le_bytes()], &req.mac)?;
        let cluster_id = self.cluster.get().unwrap_or_default();
        Ok(Response::new(HeardFromResponse { heard: self.heard.contains(id), cluster_id }))
    }

    async fn state_checkpoints(
        &self,
        req: Request<StateCheckpointsRequest>,
    ) -> Result<Response<StateCheckpointsResponse>, Status> {
        self.check_certificate(&req)?;
        let req = req.into_inner();
        self.authenticate(&[b"state_checkpoints", &req.from.to_le_bytes()], &req.mac)?;
        let checkpoints = self
            .checkpoints
            .recent()
            .into_iter()
            .map(|(applied_index, state_hash)| StateCheckpoint { applied_index, state_hash })
            .collect();
        Ok(Response::new(StateCheckpointsResponse { checkpoints }))
    }
}
