//! Batch RPCs: one status for the batch and one answer per item, refused
//! as a whole over the limit or on a leadership answer, and the writes a
//! batch of puts proposes.

use mooncake_proto::master::*;
use mooncake_proto::{ErrorCode, HasStatus, Status};
use mooncake_raft_store::Command;

use super::*;
use crate::rpc::errors::{internal, response_status};

/// An answer about leadership rather than about an item: a batch carrying
/// one is answered with it as a whole, so the client redirects and retries.
pub(super) fn is_leadership(s: &Status) -> bool {
    matches!(s.error_code(), ErrorCode::NotLeader | ErrorCode::Unavailable)
}

pub(super) fn too_many(n: usize) -> Status {
    Status::with(ErrorCode::InvalidParams, format!("batch of {n} items; the limit is {BATCH_RPC_MAX}"))
}

/// The answer of a batch RPC: a status of its own and one answer per item
/// (none when the status refuses the batch as a whole).
pub(super) trait Batch: HasStatus + Default {
    type Item;
    /// The OK answer with `responses`.
    fn answered(responses: Vec<Self::Item>) -> Self;
}

macro_rules! batch {
    ($($batch:ident of $item:ident),* $(,)?) => {$(
        impl Batch for $batch {
            type Item = $item;
            fn answered(responses: Vec<$item>) -> Self {
                $batch { status: Some(Status::ok()), responses }
            }
        }
    )*};
}

batch!(
    BatchPutStartResponse of PutStartResponse,
    BatchPutEndResponse of PutEndResponse,
    BatchPutRevokeResponse of PutRevokeResponse,
    BatchGetReplicaListResponse of GetReplicaListResponse,
    BatchExistKeyResponse of ExistKeyResponse,
    BatchRemoveResponse of RemoveResponse,
);

/// A batch of `items` answered by `answers` (each item's answer, or one
/// status for the whole batch), unless it has more than [`BATCH_RPC_MAX`]
/// items: `answers` is a future, so nothing of it runs for a batch refused.
pub(super) async fn answer_batch<B: Batch, T>(
    items: &[T],
    answers: impl Future<Output = Result<Vec<B::Item>, Status>>,
) -> RpcResult<B> {
    if items.len() > BATCH_RPC_MAX {
        return ok(refused(too_many(items.len())));
    }
    match answers.await {
        Ok(responses) => ok(B::answered(responses)),
        Err(s) => ok(refused(s)),
    }
}

/// Each item's status: the refusal `refusal` finds for it, or else its
/// answer from `answer`, which is given the indices of the items not
/// refused and answers them all in one go, in that order.
pub(super) async fn answer_valid<T>(
    items: &[T],
    refusal: impl Fn(&T) -> Option<Status>,
    answer: impl AsyncFnOnce(&[usize]) -> Vec<Status>,
) -> Vec<Status> {
    let mut out: Vec<Option<Status>> = items.iter().map(refusal).collect();
    let valid: Vec<usize> = (0..items.len()).filter(|i| out[*i].is_none()).collect();
    let statuses = answer(&valid).await;
    for (i, s) in valid.into_iter().zip(statuses) {
        out[i] = Some(s);
    }
    out.into_iter().map(|s| s.unwrap_or_else(|| internal("no answer"))).collect()
}

/// The answer of a one-key call made through its batch form: the one
/// answer, or one carrying the status that answered the whole batch.
pub(super) fn single<R: HasStatus + Default>(answers: Result<Vec<R>, Status>) -> RpcResult<R> {
    let status = match answers.map(|mut v| v.pop()) {
        Ok(Some(answer)) => return ok(answer),
        Ok(None) => internal("no answer"),
        Err(s) => s,
    };
    ok(refused(status))
}

/// An answer carrying only `status`, every other field empty.
pub(super) fn refused<R: HasStatus + Default>(status: Status) -> R {
    let mut answer = R::default();
    answer.set_status(status);
    answer
}

impl MasterServiceImpl {
    /// Proposes one command and returns its status.
    pub(super) async fn write(&self, cmd: Command) -> Status {
        match self.shared.write_path.proposer.propose(cmd).await {
            Ok(r) => response_status(&r),
            Err(s) => s.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(statuses: &[Status]) -> Vec<ErrorCode> {
        statuses.iter().map(Status::error_code).collect()
    }

    #[tokio::test]
    async fn a_batch_over_the_limit_is_refused_before_any_item_is_answered() {
        let items = vec![0u8; BATCH_RPC_MAX + 1];
        let never = async { panic!("an oversized batch was answered") };
        let r: BatchExistKeyResponse = answer_batch(&items, never).await.unwrap().into_inner();
        assert_eq!(r.status.map(|s| s.error_code()), Some(ErrorCode::InvalidParams));
        assert!(r.responses.is_empty());
        let whole = async { Err(Status::with(ErrorCode::NotLeader, "elsewhere")) };
        let r: BatchExistKeyResponse = answer_batch(&items[..1], whole).await.unwrap().into_inner();
        assert_eq!((r.status.map(|s| s.error_code()), r.responses.len()), (Some(ErrorCode::NotLeader), 0));
    }

    #[tokio::test]
    async fn refused_items_keep_their_place_among_the_answered_ones() {
        let items = ["a", "", "b", ""];
        let refusal = |k: &&str| k.is_empty().then(|| Status::with(ErrorCode::InvalidParams, "empty"));
        let statuses = answer_valid(&items, refusal, async |valid: &[usize]| {
            assert_eq!(valid, [0, 2], "only the items not refused are answered");
            vec![Status::ok(), Status::with(ErrorCode::ObjectNotFound, "b")]
        })
        .await;
        let expected = [ErrorCode::Ok, ErrorCode::InvalidParams, ErrorCode::ObjectNotFound, ErrorCode::InvalidParams];
        assert_eq!(codes(&statuses), expected);
    }

    #[test]
    fn a_single_answer_is_the_batch_answer_or_carries_the_whole_batch_status() {
        let answer = ExistKeyResponse { status: Some(Status::ok()), exists: true };
        assert_eq!(single(Ok(vec![answer.clone()])).unwrap().into_inner(), answer);
        let none: ExistKeyResponse = single(Ok(vec![])).unwrap().into_inner();
        assert_eq!((none.status.map(|s| s.error_code()), none.exists), (Some(ErrorCode::InternalError), false));
        let whole: ExistKeyResponse = single(Err(Status::with(ErrorCode::NotLeader, "x"))).unwrap().into_inner();
        assert_eq!((whole.status.map(|s| s.error_code()), whole.exists), (Some(ErrorCode::NotLeader), false));
    }
}
