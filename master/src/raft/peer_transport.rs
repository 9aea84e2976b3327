//! The wire to one peer master: AppendEntries (and heartbeats) on one
//! long-lived `AppendEntriesStream`, the other Raft RPCs as unary calls,
//! and calls only for a peer without streams (a master of an older release,
//! during a rolling upgrade). Framing only: what the messages say, and what
//! their answers mean, is `network.rs`'s.

use std::time::Duration;

use futures::SinkExt;
use mooncake_proto::raft::RaftMessage;
use mooncake_proto::raft::raft_service_client::RaftServiceClient;
use mooncake_raft_store::NodeId;
use tonic::Status;
use tonic::transport::Channel;

/// How long to wait for a TCP connection to a peer before calling it unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The Raft RPCs a master sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rpc {
    /// AppendEntries carrying entries.
    Append,
    /// AppendEntries without entries.
    Heartbeat,
    Vote,
    Snapshot,
    /// Not openraft's: "would you vote for me?" (prevote.rs).
    PreVote,
}

impl Rpc {
    pub fn label(self) -> &'static str {
        match self {
            Rpc::Append => "append",
            Rpc::Heartbeat => "heartbeat",
            Rpc::Vote => "vote",
            Rpc::Snapshot => "snapshot",
            Rpc::PreVote => "pre_vote",
        }
    }

    /// The gRPC method, as the MAC names it.
    pub fn method(self) -> &'static str {
        match self {
            Rpc::Append | Rpc::Heartbeat => "append_entries",
            Rpc::Vote => "vote",
            Rpc::Snapshot => "install_snapshot",
            Rpc::PreVote => "pre_vote",
        }
    }
}

/// The gRPC connection to one peer.
pub struct PeerTransport {
    target: NodeId,
    /// `None` when the peer's address cannot be a gRPC endpoint.
    client: Option<RaftServiceClient<Channel>>,
    addr: String,
    /// The AppendEntriesStream to the peer, while one is open.
    stream: Option<AppendStream>,
    /// The peer answered UNIMPLEMENTED to a stream: AppendEntries go as calls.
    no_stream: bool,
}

/// An open AppendEntriesStream: one message sent at a time, its answer read
/// before the next is sent.
struct AppendStream {
    requests: futures::channel::mpsc::Sender<RaftMessage>,
    answers: tonic::Streaming<RaftMessage>,
    /// A message was sent whose answer is not read yet.
    in_flight: bool,
}

impl PeerTransport {
    /// A connection made at its first use (`tls`: mutual TLS, `https://`).
    pub fn new(target: NodeId, addr: &str, tls: Option<&mooncake_tls::TlsConfig>) -> Self {
        let client = mooncake_tls::grpc::endpoint(addr, tls)
            .ok()
            .map(|e| e.connect_timeout(CONNECT_TIMEOUT).tcp_nodelay(true).connect_lazy())
            .map(|ch| {
                RaftServiceClient::new(ch)
                    .max_decoding_message_size(mooncake_proto::GRPC_MESSAGE_MAX_BYTES)
                    .max_encoding_message_size(mooncake_proto::GRPC_MESSAGE_MAX_BYTES)
            });
        PeerTransport { target, client, addr: addr.to_string(), stream: None, no_stream: false }
    }

    /// False when the peer's address is no endpoint (every send fails).
    pub fn has_address(&self) -> bool {
        self.client.is_some()
    }

    /// Sends `message` as `rpc` and waits at most `timeout` for its answer.
    pub async fn send(&mut self, rpc: Rpc, message: RaftMessage, timeout: Duration) -> Result<RaftMessage, Status> {
        match rpc {
            Rpc::Append | Rpc::Heartbeat if !self.no_stream => self.exchange(message, timeout).await,
            _ => self.unary(rpc, message, timeout).await,
        }
    }

    /// One unary call of `rpc`.
    async fn unary(&mut self, rpc: Rpc, message: RaftMessage, timeout: Duration) -> Result<RaftMessage, Status> {
        let Some(client) = self.client.as_mut() else {
            return Err(Status::unavailable(format!("bad peer address {:?}", self.addr)));
        };
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        let reply = match rpc {
            Rpc::Append | Rpc::Heartbeat => client.append_entries(request).await,
            Rpc::Vote => client.vote(request).await,
            Rpc::Snapshot => client.install_snapshot(request).await,
            Rpc::PreVote => client.pre_vote(request).await,
        };
        reply.map(tonic::Response::into_inner)
    }

    /// One AppendEntries over the peer's stream, opened first when none is
    /// (or the last one was left with an answer unread). Any failure drops
    /// the stream; the next message opens a new one. A peer without streams
    /// gets a unary call, now and from then on.
    async fn exchange(&mut self, message: RaftMessage, timeout: Duration) -> Result<RaftMessage, Status> {
        if self.stream.as_ref().is_some_and(|s| s.in_flight) {
            self.stream = None;
        }
        if self.stream.is_none() {
            match self.open_stream(timeout).await {
                Ok(stream) => self.stream = Some(stream),
                Err(status) if status.code() == tonic::Code::Unimplemented => {
                    tracing::info!(peer = self.target, "peer has no AppendEntriesStream (older release): using calls");
                    self.no_stream = true;
                    return self.unary(Rpc::Append, message, timeout).await;
                }
                Err(status) => return Err(status),
            }
        }
        let Some(stream) = self.stream.as_mut() else {
            return Err(Status::internal("append stream vanished"));
        };
        // Until its answer is read: a call cancelled in between leaves the
        // stream one answer behind, and the next call drops it.
        stream.in_flight = true;
        let answered = tokio::time::timeout(timeout, async {
            stream.requests.send(message).await.map_err(|_| Status::aborted("append stream closed"))?;
            stream.answers.message().await?.ok_or_else(|| Status::aborted("append stream ended by the peer"))
        })
        .await
        .unwrap_or_else(|_| Err(Status::deadline_exceeded("no answer on the append stream in time")));
        match answered {
            Ok(answer) => {
                stream.in_flight = false;
                Ok(answer)
            }
            Err(status) => {
                self.stream = None;
                Err(status)
            }
        }
    }

    async fn open_stream(&mut self, timeout: Duration) -> Result<AppendStream, Status> {
        let Some(client) = self.client.as_mut() else {
            return Err(Status::unavailable(format!("bad peer address {:?}", self.addr)));
        };
        let (requests, outgoing) = futures::channel::mpsc::channel(1);
        let opened = tokio::time::timeout(timeout, client.append_entries_stream(outgoing)).await;
        let answers =
            opened.unwrap_or_else(|_| Err(Status::deadline_exceeded("append stream not opened in time")))?.into_inner();
        Ok(AppendStream { requests, answers, in_flight: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use mooncake_proto::raft::raft_service_server::{RaftService, RaftServiceServer};
    use mooncake_proto::raft::{
        HeardFromRequest, HeardFromResponse, StateCheckpointsRequest, StateCheckpointsResponse,
    };
    use tonic::{Request, Response};

    type AppendAnswers = std::pin::Pin<Box<dyn futures::Stream<Item = Result<RaftMessage, Status>> + Send>>;

    /// A peer that echoes each AppendEntries' payload, counting calls and
    /// stream messages; without streams when `streams` is false (an older
    /// release). A payload of "slow" is answered after 300 ms.
    #[derive(Clone, Default)]
    struct EchoPeer {
        streams: bool,
        calls: Arc<AtomicUsize>,
        streamed: Arc<AtomicUsize>,
        opened: Arc<AtomicUsize>,
    }

    async fn echo(msg: RaftMessage) -> RaftMessage {
        if msg.data == b"slow" {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        RaftMessage { data: msg.data, ..Default::default() }
    }

    #[tonic::async_trait]
    impl RaftService for EchoPeer {
        async fn append_entries(&self, req: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            Ok(Response::new(echo(req.into_inner()).await))
        }

        type AppendEntriesStreamStream = AppendAnswers;

        async fn append_entries_stream(
            &self,
            req: Request<tonic::Streaming<RaftMessage>>,
        ) -> Result<Response<AppendAnswers>, Status> {
            if !self.streams {
                return Err(Status::unimplemented("no streams in this release"));
            }
            self.opened.fetch_add(1, Ordering::Relaxed);
            let streamed = self.streamed.clone();
            let answers =
                futures::stream::unfold((req.into_inner(), streamed), |(mut incoming, streamed)| async move {
                    let msg = incoming.message().await.ok()??;
                    streamed.fetch_add(1, Ordering::Relaxed);
                    Some((Ok(echo(msg).await), (incoming, streamed)))
                });
            Ok(Response::new(Box::pin(answers)))
        }

        async fn vote(&self, _: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        async fn install_snapshot(&self, _: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        async fn pre_vote(&self, _: Request<RaftMessage>) -> Result<Response<RaftMessage>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        async fn heard_from(&self, _: Request<HeardFromRequest>) -> Result<Response<HeardFromResponse>, Status> {
            Err(Status::unimplemented("not in this test"))
        }

        async fn state_checkpoints(
            &self,
            _: Request<StateCheckpointsRequest>,
        ) -> Result<Response<StateCheckpointsResponse>, Status> {
            Err(Status::unimplemented("not in this test"))
        }
    }

    /// Serves `peer` on a loopback port; its address.
    async fn serve(peer: EchoPeer) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let incoming = futures::stream::unfold(listener, |l| async move {
            let conn = l.accept().await.map(|(s, _)| s);
            Some((conn, l))
        });
        tokio::spawn(
            tonic::transport::Server::builder().add_service(RaftServiceServer::new(peer)).serve_with_incoming(incoming),
        );
        addr
    }

    fn message(data: &[u8]) -> RaftMessage {
        RaftMessage { data: data.to_vec(), ..Default::default() }
    }

    const T: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn appends_share_one_stream_and_each_gets_its_own_answer() {
        let peer = EchoPeer { streams: true, ..Default::default() };
        let mut transport = PeerTransport::new(2, &serve(peer.clone()).await, None);
        for i in 0..5u8 {
            let answer = transport.send(Rpc::Append, message(&[i]), T).await.expect("answered");
            assert_eq!(answer.data, [i]);
        }
        let answer = transport.send(Rpc::Heartbeat, message(b"hb"), T).await.expect("answered");
        assert_eq!(answer.data, b"hb");
        assert_eq!(peer.opened.load(Ordering::Relaxed), 1, "one stream for all");
        assert_eq!(peer.streamed.load(Ordering::Relaxed), 6);
        assert_eq!(peer.calls.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_peer_without_streams_gets_calls() {
        let peer = EchoPeer { streams: false, ..Default::default() };
        let mut transport = PeerTransport::new(2, &serve(peer.clone()).await, None);
        for i in 0..3u8 {
            let answer = transport.send(Rpc::Append, message(&[i]), T).await.expect("answered by a call");
            assert_eq!(answer.data, [i]);
        }
        assert_eq!(peer.calls.load(Ordering::Relaxed), 3);
        assert_eq!(peer.streamed.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn an_answer_left_unread_never_answers_the_next_message() {
        let peer = EchoPeer { streams: true, ..Default::default() };
        let mut transport = PeerTransport::new(2, &serve(peer.clone()).await, None);
        transport.send(Rpc::Append, message(b"first"), T).await.expect("answered");
        // Cancelled before its answer came (openraft gives up on a slow
        // AppendEntries): the stream is one answer behind.
        let cancelled =
            tokio::time::timeout(Duration::from_millis(50), transport.send(Rpc::Append, message(b"slow"), T));
        assert!(cancelled.await.is_err(), "gave up before the answer");
        let answer = transport.send(Rpc::Append, message(b"next"), T).await.expect("answered");
        assert_eq!(answer.data, b"next", "its own answer, not the slow one's");
        assert_eq!(peer.opened.load(Ordering::Relaxed), 2, "the stream behind was replaced");
        // A timeout inside the call drops the stream too.
        let refused = transport.send(Rpc::Append, message(b"slow"), Duration::from_millis(50)).await;
        assert_eq!(refused.map(|_| ()).map_err(|s| s.code()), Err(tonic::Code::DeadlineExceeded));
        let answer = transport.send(Rpc::Append, message(b"after"), T).await.expect("answered");
        assert_eq!(answer.data, b"after");
    }

    #[tokio::test]
    async fn an_unreachable_peer_is_unavailable() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let mut transport = PeerTransport::new(2, &format!("127.0.0.1:{port}"), None);
        let refused = transport.send(Rpc::Append, message(b"x"), T).await.map(|_| ()).map_err(|s| s.code());
        assert_eq!(refused, Err(tonic::Code::Unavailable));
    }
}
