//! openraft's network over tonic: each Raft RPC's payload is the openraft
//! message encoded by the raft-store codec. AppendEntries (and heartbeats)
//! go over one long-lived stream per peer (`AppendEntriesStream`), the
//! others as unary calls. A peer that cannot be reached is reported
//! `Unreachable` so openraft backs off.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_proto::raft::RaftMessage;
use mooncake_raft_store::{LogId, NodeId, TypeConfig, codec};
use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::raft::cluster_id::ClusterId;
use crate::raft::leader_lease::AckClock;
use crate::raft::partition::RaftPartition;
use crate::raft::peer_transport::{PeerTransport, Rpc};
use crate::raft::peers_heard::PeersHeard;
use mooncake_auth::MacKey;

/// PreVote (`prevote.rs`): "would you vote for me?" (encoded by the raft-store codec).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PreVoteRequest {
    pub candidate: NodeId,
    /// The candidate's last log id.
    pub last_log_id: Option<LogId>,
}

/// The answer, with the reason of a refusal (logged by the candidate).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PreVoteResponse {
    pub granted: bool,
    pub reason: String,
}

/// Creates one [`PeerClient`] per target for openraft.
#[derive(Clone)]
pub struct NetworkFactory {
    pub cluster: Arc<ClusterId>,
    /// Where accepted AppendEntries are recorded for the leader lease.
    pub acks: Arc<AckClock>,
    /// Round trips of the RPCs sent, by kind.
    pub rpc_seconds: prometheus::HistogramVec,
    /// This master's log sync: followers are never told a commit index past it.
    pub flushed: mooncake_raft_store::FlushedLog,
    /// Peers whose vote or log answers arrived (`peers_heard.rs`).
    pub heard: Arc<PeersHeard>,
    /// Mutual TLS to the peers (`https://`), when the master has it.
    pub tls: Option<mooncake_tls::TlsConfig>,
    /// Signs every request: peers accept only the cluster's masters (`secret.rs`).
    pub raft_key: MacKey,
    /// In-process tests only: this master's id and the links cut (`partition.rs`).
    pub partition: Option<(NodeId, Arc<RaftPartition>)>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient::new(target, &node.addr, self.clone())
    }
}

/// The connection to one peer master.
pub struct PeerClient {
    target: NodeId,
    transport: PeerTransport,
    cluster: Arc<ClusterId>,
    acks: Arc<AckClock>,
    rpc_seconds: prometheus::HistogramVec,
    flushed: mooncake_raft_store::FlushedLog,
    heard: Arc<PeersHeard>,
    raft_key: MacKey,
    partition: Option<(NodeId, Arc<RaftPartition>)>,
}

/// The MAC a Raft request of `method` carries (`RaftMessage.mac`).
pub fn raft_mac(key: &MacKey, method: &str, cluster_id: &str, data: &[u8]) -> Vec<u8> {
    key.sign(&[method.as_bytes(), cluster_id.as_bytes(), data])
}

type RpcErr<E = openraft::error::Infallible> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl PeerClient {
    fn new(target: NodeId, addr: &str, factory: NetworkFactory) -> Self {
        let NetworkFactory { cluster, acks, rpc_seconds, flushed, heard, raft_key, tls, partition } = factory;
        let transport = PeerTransport::new(target, addr, tls.as_ref());
        PeerClient { target, transport, cluster, acks, rpc_seconds, flushed, heard, raft_key, partition }
    }

    async fn call<Req, Resp, E>(&mut self, rpc: Rpc, req: &Req, option: &RPCOption) -> Result<Resp, RpcErr<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        if !self.transport.has_address() {
            let e = std::io::Error::other(format!("peer {} has no usable address", self.target));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        if let Some((me, partition)) = &self.partition
            && partition.cuts(*me, self.target)
        {
            let e = std::io::Error::other(format!("the link to peer {} is cut (a test's partition)", self.target));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        }
        let data = codec::encode("raft request", req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let cluster_id = self.cluster.get().unwrap_or_default();
        let mac = raft_mac(&self.raft_key, rpc.method(), &cluster_id, &data);
        let message = RaftMessage { data, error: String::new(), cluster_id, mac };
        let sent = Instant::now();
        let reply = self.transport.send(rpc, message, option.hard_ttl()).await;
        self.rpc_seconds.with_label_values(&[rpc.label()]).observe(sent.elapsed().as_secs_f64());
        let reply = reply.map_err(|status| transport_error(&status))?;
        if !reply.error.is_empty() {
            let e = std::io::Error::other(reply.error);
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let result: Result<Resp, RaftError<NodeId, E>> =
            codec::decode("raft response", &reply.data).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        // An answer from its vote or log: the peer has state to lose.
        if !matches!(rpc, Rpc::PreVote) {
            self.heard.record(self.target);
        }
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl PeerClient {
    /// Asks the peer for a pre-vote, waiting at most `timeout`.
    pub async fn pre_vote(&mut self, req: &PreVoteRequest, timeout: Duration) -> Result<PreVoteResponse, String> {
        let option = RPCOption::new(timeout);
        self.call::<_, _, openraft::error::Infallible>(Rpc::PreVote, req, &option).await.map_err(|e| e.to_string())
    }
}

/// Only a peer that cannot be connected to is `Unreachable` (openraft then
/// backs off, see [`UNREACHABLE_BACKOFF`]). A call that ran out of time is a
/// plain network error, retried at the next tick: openraft's AppendEntries
/// timeout is one heartbeat interval (40 ms), which a large batch appended
/// and synced on a loaded follower can exceed — treating that as
/// unreachable stopped replication to *both* followers for half a second at
/// once and set off elections (seen loading 200 k objects).
fn transport_error<E: std::error::Error>(status: &tonic::Status) -> RpcErr<E> {
    match status.code() {
        tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(status)),
        _ => RPCError::Network(NetworkError::new(status)),
    }
}

/// How long openraft waits before it tries an unreachable peer again:
/// well under the followers' election timeout (lease 240 ms + 120–240 ms),
/// so even both followers unreachable for a moment do not stop heartbeats
/// long enough to start an election.
pub const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(100);

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr> {
        // openraft may count this leader's own, not yet synced, copy towards
        // a commit (raft-store `log/flushed.rs`): a follower learns a commit index only up to
        // what is synced here, so it never applies an entry that a power cut
        // on this leader could still take back.
        if let Some(commit) = rpc.leader_commit {
            let synced = self.flushed.get();
            if synced.is_none_or(|s| s.index < commit.index) {
                rpc.leader_commit = synced;
            }
        }
        let sent = Instant::now();
        let kind = if rpc.entries.is_empty() { Rpc::Heartbeat } else { Rpc::Append };
        let reply = self.call(kind, &rpc, &option).await;
        // Only an acceptance refreshes the follower's lease; a conflict or a
        // higher vote proves nothing.
        if let Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_)) = &reply {
            self.acks.record(self.target, &rpc.vote, sent);
        }
        reply
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<InstallSnapshotError>> {
        self.call(Rpc::Snapshot, &rpc, &option).await
    }

    async fn vote(&mut self, rpc: VoteRequest<NodeId>, option: RPCOption) -> Result<VoteResponse<NodeId>, RpcErr> {
        self.call(Rpc::Vote, &rpc, &option).await
    }

    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF))
    }
}
