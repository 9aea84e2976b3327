//! Wraps the client API so every RPC is counted by method and answer code
//! and timed, in one place. The macro lists every method of `MasterService`:
//! a new RPC that is not listed here does not compile.

use std::sync::Arc;
use std::time::Instant;

use mooncake_proto::HasStatus;
use mooncake_proto::master::master_service_server::MasterService;
use mooncake_proto::master::*;
use tonic::{Request, Response, Status};

use crate::metrics::MasterMetrics;
use crate::rpc::client_service::MasterServiceImpl;

pub struct Instrumented {
    inner: MasterServiceImpl,
    metrics: Arc<MasterMetrics>,
}

impl Instrumented {
    pub fn new(inner: MasterServiceImpl, metrics: Arc<MasterMetrics>) -> Self {
        Instrumented { inner, metrics }
    }
}

fn code_name<R: HasStatus>(r: &Result<Response<R>, Status>) -> &'static str {
    match r {
        Ok(resp) => resp.get_ref().status().map(|s| s.error_code().as_str_name()).unwrap_or("OK"),
        Err(_) => "GRPC_ERROR",
    }
}

macro_rules! instrument {
    ($($method:ident: $req:ty => $resp:ty, $name:literal;)*) => {
        #[tonic::async_trait]
        impl MasterService for Instrumented {
            type WatchStream = crate::rpc::watch::WatchStream;

            /// Counted when opened (the stream's life is not timed).
            async fn watch(&self, req: Request<WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
                let start = Instant::now();
                let out = self.inner.watch(req).await;
                let code = if out.is_ok() { "OK" } else { "GRPC_ERROR" };
                self.metrics.observe_rpc("Watch", code, start.elapsed());
                out
            }

            $(
                async fn $method(&self, req: Request<$req>) -> Result<Response<$resp>, Status> {
                    let start = Instant::now();
                    let out = self.inner.$method(req).await;
                    self.metrics.observe_rpc($name, code_name(&out), start.elapsed());
                    out
                }
            )*
        }
    };
}

instrument! {
    ping: PingRequest => PingResponse, "Ping";
    get_cluster_info: GetClusterInfoRequest => GetClusterInfoResponse, "GetClusterInfo";
    mount_segment: MountSegmentRequest => MountSegmentResponse, "MountSegment";
    unmount_segment: UnmountSegmentRequest => UnmountSegmentResponse, "UnmountSegment";
    remount_segment: RemountSegmentRequest => RemountSegmentResponse, "RemountSegment";
    put_start: PutStartRequest => PutStartResponse, "PutStart";
    put_end: PutEndRequest => PutEndResponse, "PutEnd";
    put_revoke: PutRevokeRequest => PutRevokeResponse, "PutRevoke";
    reserve_chunk: ReserveChunkRequest => ReserveChunkResponse, "ReserveChunk";
    return_chunk: ReturnChunkRequest => ReturnChunkResponse, "ReturnChunk";
    get_replica_list: GetReplicaListRequest => GetReplicaListResponse, "GetReplicaList";
    exist_key: ExistKeyRequest => ExistKeyResponse, "ExistKey";
    get_size: GetSizeRequest => GetSizeResponse, "GetSize";
    remove: RemoveRequest => RemoveResponse, "Remove";
    remove_all: RemoveAllRequest => RemoveAllResponse, "RemoveAll";
    list_objects: ListObjectsRequest => ListObjectsResponse, "ListObjects";
    batch_put_start: BatchPutStartRequest => BatchPutStartResponse, "BatchPutStart";
    batch_put_end: BatchPutEndRequest => BatchPutEndResponse, "BatchPutEnd";
    batch_put_revoke: BatchPutRevokeRequest => BatchPutRevokeResponse, "BatchPutRevoke";
    batch_get_replica_list: BatchGetReplicaListRequest => BatchGetReplicaListResponse, "BatchGetReplicaList";
    batch_exist_key: BatchExistKeyRequest => BatchExistKeyResponse, "BatchExistKey";
    batch_probe_key: BatchExistKeyRequest => BatchExistKeyResponse, "BatchProbeKey";
    batch_remove: BatchRemoveRequest => BatchRemoveResponse, "BatchRemove";
    take_copies: TakeCopiesRequest => TakeCopiesResponse, "TakeCopies";
    report_copy: ReportCopyRequest => ReportCopyResponse, "ReportCopy";
    report_corrupt: ReportCorruptRequest => ReportCorruptResponse, "ReportCorrupt";
    create_copy_task: CreateCopyTaskRequest => CreateTaskResponse, "CreateCopyTask";
    create_move_task: CreateMoveTaskRequest => CreateTaskResponse, "CreateMoveTask";
    query_task: QueryTaskRequest => QueryTaskResponse, "QueryTask";
    prefetch_to_memory: PrefetchToMemoryRequest => PrefetchToMemoryResponse, "PrefetchToMemory";
}
