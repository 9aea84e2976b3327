//! What a client does in a failover, against scripted masters in this
//! process (real gRPC on loopback, no master binary): it follows a
//! NOT_LEADER answer to the address it names, caps redirects between
//! masters that point at each other, backs off between rounds, times out a
//! stalled master and tries the next, gives up at its deadline saying why,
//! and puts again once when a PutEnd answers that the put expired — and
//! only then. Each test runs in well under a second.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientConfig, ClientError, MasterClient, MasterClientConfig, MasterError, PutOptions};
use mooncake_proto::master::master_service_server::{MasterService, MasterServiceServer};
use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, HasStatus, Status, StatusReason};
use tonic::{Request, Response};

/// What a scripted master answers to one call.
#[derive(Clone, Debug)]
enum Step {
    Ok,
    /// NOT_LEADER, naming the leader's address.
    NotLeader(String),
    /// UNAVAILABLE: an election in progress.
    Unavailable,
    /// No answer for this long.
    Stall(Duration),
    /// OBJECT_NOT_FOUND; with `expired`, the reason says the put expired.
    NotFound {
        expired: bool,
    },
    /// OBJECT_ALREADY_EXISTS.
    Exists,
}

/// A master that answers from a script: per method, a queue of steps, and
/// `otherwise` once it is empty. It records every call by method name.
struct Scripted {
    script: Mutex<HashMap<&'static str, VecDeque<Step>>>,
    otherwise: Mutex<Step>,
    calls: Mutex<Vec<&'static str>>,
}

impl Scripted {
    /// `steps` for the next calls of `method` (after those already queued).
    fn then(&self, method: &'static str, steps: impl IntoIterator<Item = Step>) {
        self.script.lock().unwrap().entry(method).or_default().extend(steps);
    }

    /// How many calls of `method` it received.
    fn calls(&self, method: &str) -> usize {
        self.calls.lock().unwrap().iter().filter(|m| **m == method).count()
    }

    fn total_calls(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    async fn answer<R: HasStatus + Default>(&self, method: &'static str) -> Result<Response<R>, tonic::Status> {
        self.calls.lock().unwrap().push(method);
        let queued = self.script.lock().unwrap().get_mut(method).and_then(VecDeque::pop_front);
        let step = queued.unwrap_or_else(|| self.otherwise.lock().unwrap().clone());
        let status = match step {
            Step::Ok => Status::ok(),
            Step::NotLeader(addr) => {
                Status { leader_addr: addr, ..Status::with(ErrorCode::NotLeader, "not the leader") }
            }
            Step::Unavailable => Status::with(ErrorCode::Unavailable, "electing"),
            Step::Stall(d) => {
                tokio::time::sleep(d).await;
                Status::ok()
            }
            Step::NotFound { expired: true } => Status {
                reason: StatusReason::PutExpired as i32,
                ..Status::with(ErrorCode::ObjectNotFound, "put expired: its arena was returned; put again")
            },
            Step::NotFound { expired: false } => Status::with(ErrorCode::ObjectNotFound, "object not found"),
            Step::Exists => Status::with(ErrorCode::ObjectAlreadyExists, "object already exists"),
        };
        let mut reply = R::default();
        reply.set_status(status);
        Ok(Response::new(reply))
    }
}

/// Every method of the master API answers from the script.
macro_rules! scripted_methods {
    ($($method:ident: $req:ident => $resp:ident),* $(,)?) => {
        #[tonic::async_trait]
        impl MasterService for Scripted {
            type WatchStream = futures::stream::Empty<Result<WatchResponse, tonic::Status>>;

            /// Not scripted: the watch has its own tests (cli t85).
            async fn watch(&self, _: Request<WatchRequest>) -> Result<Response<Self::WatchStream>, tonic::Status> {
                Err(tonic::Status::unimplemented("not scripted"))
            }

            $(
                async fn $method(&self, _: Request<$req>) -> Result<Response<$resp>, tonic::Status> {
                    self.answer(stringify!($method)).await
                }
            )*
        }
    };
}

scripted_methods! {
    ping: PingRequest => PingResponse,
    get_cluster_info: GetClusterInfoRequest => GetClusterInfoResponse,
    mount_segment: MountSegmentRequest => MountSegmentResponse,
    unmount_segment: UnmountSegmentRequest => UnmountSegmentResponse,
    remount_segment: RemountSegmentRequest => RemountSegmentResponse,
    put_start: PutStartRequest => PutStartResponse,
    put_end: PutEndRequest => PutEndResponse,
    put_revoke: PutRevokeRequest => PutRevokeResponse,
    reserve_chunk: ReserveChunkRequest => ReserveChunkResponse,
    return_chunk: ReturnChunkRequest => ReturnChunkResponse,
    get_replica_list: GetReplicaListRequest => GetReplicaListResponse,
    exist_key: ExistKeyRequest => ExistKeyResponse,
    get_size: GetSizeRequest => GetSizeResponse,
    remove: RemoveRequest => RemoveResponse,
    remove_all: RemoveAllRequest => RemoveAllResponse,
    list_objects: ListObjectsRequest => ListObjectsResponse,
    batch_put_start: BatchPutStartRequest => BatchPutStartResponse,
    batch_put_end: BatchPutEndRequest => BatchPutEndResponse,
    batch_put_revoke: BatchPutRevokeRequest => BatchPutRevokeResponse,
    batch_get_replica_list: BatchGetReplicaListRequest => BatchGetReplicaListResponse,
    batch_exist_key: BatchExistKeyRequest => BatchExistKeyResponse,
    batch_probe_key: BatchExistKeyRequest => BatchExistKeyResponse,
    batch_remove: BatchRemoveRequest => BatchRemoveResponse,
    take_copies: TakeCopiesRequest => TakeCopiesResponse,
    report_copy: ReportCopyRequest => ReportCopyResponse,
    report_corrupt: ReportCorruptRequest => ReportCorruptResponse,
    create_copy_task: CreateCopyTaskRequest => CreateTaskResponse,
    create_move_task: CreateMoveTaskRequest => CreateTaskResponse,
    query_task: QueryTaskRequest => QueryTaskResponse,
    prefetch_to_memory: PrefetchToMemoryRequest => PrefetchToMemoryResponse,
}

/// A scripted master serving on a loopback port: its address and script.
async fn master(otherwise: Step) -> (String, Arc<Scripted>) {
    let scripted = Arc::new(Scripted {
        script: Mutex::new(HashMap::new()),
        otherwise: Mutex::new(otherwise),
        calls: Mutex::new(Vec::new()),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr").to_string();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = tonic::transport::Server::builder()
        .add_service(MasterServiceServer::from_arc(scripted.clone()))
        .serve_with_incoming(incoming);
    tokio::spawn(server);
    (addr, scripted)
}

/// A master client of `masters` with short timeouts: 100 ms per attempt,
/// backoff 10 ms doubling to 40 ms, giving up after `deadline`.
fn client_of(masters: &[&String], deadline: Duration) -> MasterClient {
    MasterClient::new(config_of(masters, deadline)).expect("master client")
}

fn config_of(masters: &[&String], deadline: Duration) -> MasterClientConfig {
    let mut cfg = MasterClientConfig::new(masters.iter().map(|m| m.to_string()).collect());
    cfg.rpc_timeout = Duration::from_millis(100);
    cfg.backoff_initial = Duration::from_millis(10);
    cfg.backoff_max = Duration::from_millis(40);
    cfg.deadline = deadline;
    cfg
}

#[tokio::test]
async fn a_not_leader_answer_is_followed_to_the_leader_it_names_at_once() {
    let (leader, at_leader) = master(Step::Ok).await;
    let (follower, at_follower) = master(Step::NotLeader(leader.clone())).await;
    // A pause of a second would show: a redirect is followed without one.
    let mut cfg = config_of(&[&follower], Duration::from_secs(5));
    (cfg.backoff_initial, cfg.backoff_max) = (Duration::from_secs(1), Duration::from_secs(1));
    let client = MasterClient::new(cfg).expect("master client");
    let start = Instant::now();
    assert!(!client.exist_key("k").await.expect("answered by the leader"));
    assert!(start.elapsed() < Duration::from_millis(500), "paused before a redirect: {:?}", start.elapsed());
    assert_eq!((at_follower.calls("exist_key"), at_leader.calls("exist_key")), (1, 1));
    // The next call goes straight to the leader it learned.
    assert_eq!(client.preferred(), leader);
    client.exist_key("k").await.expect("answered");
    assert_eq!((at_follower.calls("exist_key"), at_leader.calls("exist_key")), (1, 2));
}

#[tokio::test]
async fn masters_pointing_at_each_other_are_followed_a_few_times_then_backed_off_until_the_deadline() {
    let (a, at_a) = master(Step::Ok).await;
    let (b, at_b) = master(Step::NotLeader(a.clone())).await;
    *at_a.otherwise.lock().unwrap() = Step::NotLeader(b.clone());
    let deadline = Duration::from_millis(300);
    let client = client_of(&[&a, &b], deadline);
    let start = Instant::now();
    let e = client.exist_key("k").await.expect_err("no leader among them");
    let took = start.elapsed();
    let MasterError::Unavailable { attempts, last, .. } = &e else { panic!("{e}") };
    assert!(last.contains("redirected too often"), "{e}");
    assert!(took >= deadline / 2 && took <= deadline + Duration::from_millis(700), "gave up after {took:?}");
    // Each round follows at most 8 redirects (9 attempts), then pauses (10,
    // 20, 40, 40... ms): as many rounds as pauses fit in the deadline, plus
    // one. Without the cap, loopback answers would allow thousands of calls.
    let (mut pauses, mut slept, mut pause) = (0, Duration::ZERO, Duration::from_millis(10));
    while slept + pause <= deadline {
        (pauses, slept, pause) = (pauses + 1, slept + pause, (pause * 2).min(Duration::from_millis(40)));
    }
    let calls = at_a.total_calls() + at_b.total_calls();
    assert_eq!(calls as u32, *attempts);
    assert!((9 * 2..=9 * (pauses + 1)).contains(&calls), "{calls} calls in {took:?}, {pauses} pauses fit");
}

#[tokio::test]
async fn an_electing_master_is_asked_again_after_a_growing_pause() {
    let (m, at_m) = master(Step::Ok).await;
    at_m.then("exist_key", [Step::Unavailable, Step::Unavailable, Step::Unavailable]);
    let client = client_of(&[&m], Duration::from_secs(2));
    let start = Instant::now();
    let answered = client.call(|mut c| async move { c.exist_key(ExistKeyRequest { key: "k".into() }).await }).await;
    let answered = answered.expect("answered once the election is over");
    let took = start.elapsed();
    assert_eq!(answered.attempts, 4, "three UNAVAILABLE answers, then the answer");
    // Pauses of 10, 20 and 40 ms between the four attempts.
    assert!(took >= Duration::from_millis(70), "backed off only {took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
}

#[tokio::test]
async fn a_stalled_master_is_timed_out_and_the_next_one_asked() {
    let (stalled, at_stalled) = master(Step::Stall(Duration::from_secs(10))).await;
    let (leader, at_leader) = master(Step::Ok).await;
    let client = client_of(&[&stalled, &leader], Duration::from_secs(2));
    let start = Instant::now();
    client.exist_key("k").await.expect("the other master answers");
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(100) && took < Duration::from_millis(1500), "{took:?}");
    assert_eq!((at_stalled.calls("exist_key"), at_leader.calls("exist_key")), (1, 1));
    assert_eq!(client.preferred(), leader);
}

#[tokio::test]
async fn when_no_master_answers_the_call_gives_up_at_its_deadline_saying_why() {
    let (a, _) = master(Step::Stall(Duration::from_secs(10))).await;
    let (b, _) = master(Step::Unavailable).await;
    let deadline = Duration::from_millis(400);
    let client = client_of(&[&a, &b], deadline);
    let start = Instant::now();
    let e = client.exist_key("k").await.expect_err("nobody answers");
    let took = start.elapsed();
    // The last attempt may run its 100 ms past the deadline check.
    assert!(took <= deadline + Duration::from_millis(600), "gave up after {took:?}");
    assert!(matches!(e, MasterError::Unavailable { .. }), "{e}");
    assert!(!e.is_definite(), "an unanswered call may have taken effect");
    let shown = e.to_string();
    assert!(shown.contains("no master answered within 400ms") && shown.contains("last error"), "{shown}");
}

/// A client of the scripted master `m` (no segment of its own).
async fn store_client(m: &str) -> Client {
    Client::connect(ClientConfig::new(vec![m.to_string()])).await.expect("connect")
}

#[tokio::test]
async fn a_put_that_expired_on_the_way_is_put_again_once() {
    let (m, at_m) = master(Step::Ok).await;
    at_m.then("put_end", [Step::NotFound { expired: true }]);
    let client = store_client(&m).await;
    client.put("k", b"value", &PutOptions::default()).await.expect("stored by the second attempt");
    assert_eq!((at_m.calls("put_start"), at_m.calls("put_end")), (2, 2));
    assert_eq!(at_m.calls("put_revoke"), 0, "an expired put has nothing to revoke");
    client.close().await;
}

#[tokio::test]
async fn a_put_that_expires_twice_fails_with_put_expired() {
    let (m, at_m) = master(Step::Ok).await;
    at_m.then("put_end", [Step::NotFound { expired: true }, Step::NotFound { expired: true }]);
    let client = store_client(&m).await;
    let e = client.put("k", b"value", &PutOptions::default()).await.expect_err("expired twice");
    assert!(matches!(&e, ClientError::Master(MasterError::PutExpired { .. })), "{e:?}");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound), "Mooncake's code for it");
    assert!(e.to_string().contains("put again"), "{e}");
    assert_eq!((at_m.calls("put_start"), at_m.calls("put_end")), (2, 2), "put again once, not forever");
    client.close().await;
}

#[tokio::test]
async fn a_put_end_that_lost_to_another_writers_put_keeps_that_object() {
    // Another writer's put of the key (in a writer chunk, which reserves no
    // key) was recorded between this put's PutStart and its PutEnd.
    let (m, at_m) = master(Step::Ok).await;
    at_m.then("put_end", [Step::Exists]);
    let client = store_client(&m).await;
    let outcome = client.put("k", b"value", &PutOptions::default()).await.expect("the first writer wins");
    assert_eq!(outcome, mooncake_client::PutOutcome::KeptExisting);
    assert_eq!((at_m.calls("put_start"), at_m.calls("put_end")), (1, 1));
    assert_eq!(at_m.calls("put_revoke"), 0, "the leader ended the reservation with its answer");
    client.close().await;
}

#[tokio::test]
async fn a_put_end_answered_not_found_for_another_reason_is_not_put_again() {
    let (m, at_m) = master(Step::Ok).await;
    at_m.then("put_end", [Step::NotFound { expired: false }]);
    let client = store_client(&m).await;
    let e = client.put("k", b"value", &PutOptions::default()).await.expect_err("refused");
    assert_eq!(e.code(), Some(ErrorCode::ObjectNotFound), "{e:?}");
    assert!(!matches!(&e, ClientError::Master(MasterError::PutExpired { .. })), "{e:?}");
    assert_eq!((at_m.calls("put_start"), at_m.calls("put_end")), (1, 1), "one attempt only");
    client.close().await;
}
