//! The sequential model of one key: a register holding `Option<u64>`, and the
//! reduction of an [`OpRecord`] to the transition it constrains.
//!
//! Records that cannot constrain the register are dropped before the search:
//! `Fail` ops (definitely not applied) and reads with an `Unknown` outcome
//! (no effect, nothing observed).

use crate::history::{OpKind, OpRecord, Outcome};

/// The value of one key: absent, or the value of the put that created it.
pub(crate) type State = Option<u64>;

/// One operation as the register sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModelOp {
    /// An acknowledged put: exactly the transition absent → `Some(value)`.
    PutAcked(u64),
    /// A put with unknown outcome: if it takes effect on an absent key it
    /// creates it, on a present key it fails with `OBJECT_ALREADY_EXISTS`.
    PutMaybe(u64),
    /// A get that answered this value (`None` = not found).
    Get(Option<u64>),
    /// An exists that answered this.
    Exists(bool),
    /// A remove that answered removed: present → absent.
    Removed,
    /// A remove that answered `OBJECT_NOT_FOUND`, read strictly: the key was absent.
    RemoveNotFound,
    /// A remove that answered `OBJECT_NOT_FOUND`, where a retried request may
    /// have removed the key on its first attempt: afterwards the key is absent.
    RemoveNotFoundAfterRetry,
    /// A remove with unknown outcome: if it takes effect, the key is absent after.
    RemoveMaybe,
    /// An answered non-force RemoveAll: at one instant inside its interval it
    /// removed the key or left it as it was (leased). The one op with two
    /// successor states ([`ModelOp::step_choice`]).
    RemovedOrKept,
}

/// Most successor states one op can have (an answered RemoveAll has two).
pub(crate) const CHOICES_MAX: u8 = 2;

impl ModelOp {
    /// The model op of a record, or `None` when the record constrains nothing.
    /// `retried_remove` says whether a not-found remove may have removed the key.
    pub(crate) fn from_record(record: &OpRecord, retried_remove: bool) -> Option<Self> {
        let op = match (record.op, record.outcome) {
            (_, Outcome::Fail) => return None,
            (OpKind::Put { value }, Outcome::Ok) => ModelOp::PutAcked(value),
            (OpKind::Put { value }, Outcome::Unknown) => ModelOp::PutMaybe(value),
            (OpKind::Get, Outcome::GetOk { value }) => ModelOp::Get(value),
            (OpKind::Exists, Outcome::ExistsOk { exists }) => ModelOp::Exists(exists),
            (OpKind::Remove, Outcome::RemoveOk { existed: true }) => ModelOp::Removed,
            (OpKind::Remove, Outcome::RemoveOk { existed: false }) if retried_remove => {
                ModelOp::RemoveNotFoundAfterRetry
            }
            (OpKind::Remove, Outcome::RemoveOk { existed: false }) => ModelOp::RemoveNotFound,
            (OpKind::Remove | OpKind::RemoveAll, Outcome::Unknown) => ModelOp::RemoveMaybe,
            (OpKind::RemoveAll, Outcome::Ok) => ModelOp::RemovedOrKept,
            // Reads with unknown outcome observe nothing; mismatched pairs are
            // rejected by `History::new`, so they cannot reach here.
            _ => return None,
        };
        Some(op)
    }

    /// The state after this op takes effect in `state`, or `None` when the
    /// recorded answer is impossible in `state`. For an op with several
    /// successors, the first of them.
    pub(crate) fn step(self, state: State) -> Option<State> {
        self.step_choice(state, 0)
    }

    /// The `choice`-th state this op may leave in `state` (choices count
    /// from 0, below [`CHOICES_MAX`]); `None` when there is no such choice.
    pub(crate) fn step_choice(self, state: State, choice: u8) -> Option<State> {
        match (self, choice) {
            (ModelOp::RemovedOrKept, 0) => Some(None),
            (ModelOp::RemovedOrKept, 1) => Some(state),
            (_, 0) => self.step_once(state),
            _ => None,
        }
    }

    fn step_once(self, state: State) -> Option<State> {
        match self {
            ModelOp::PutAcked(value) => state.is_none().then_some(Some(value)),
            ModelOp::PutMaybe(value) => Some(state.or(Some(value))),
            ModelOp::Get(value) => (state == value).then_some(state),
            ModelOp::Exists(exists) => (state.is_some() == exists).then_some(state),
            ModelOp::Removed => state.is_some().then_some(None),
            ModelOp::RemoveNotFound => state.is_none().then_some(None),
            ModelOp::RemoveNotFoundAfterRetry | ModelOp::RemoveMaybe | ModelOp::RemovedOrKept => Some(None),
        }
    }

    /// What the store would answer to this op in `state`, in its own words.
    pub(crate) fn answer_in(self, state: State) -> String {
        match (self, state) {
            (ModelOp::PutAcked(_) | ModelOp::PutMaybe(_), None) => "ok".into(),
            (ModelOp::PutAcked(_) | ModelOp::PutMaybe(_), Some(_)) => "OBJECT_ALREADY_EXISTS".into(),
            (ModelOp::Get(_), Some(value)) => format!("value {value}"),
            (ModelOp::Get(_) | ModelOp::Exists(_), None) => "not found".into(),
            (ModelOp::Exists(_), Some(_)) => "exists".into(),
            (ModelOp::RemovedOrKept, _) => "a count (removed the key, or kept it while leased)".into(),
            (_, Some(_)) => "removed".into(),
            (_, None) => "OBJECT_NOT_FOUND".into(),
        }
    }

    /// A short name for the op, with the value it wrote or read.
    pub(crate) fn describe(self) -> String {
        match self {
            ModelOp::PutAcked(value) => format!("put({value}) -> ok"),
            ModelOp::PutMaybe(value) => format!("put({value}) -> unknown"),
            ModelOp::Get(value) => format!("get -> {}", describe_state(value)),
            ModelOp::Exists(exists) => format!("exists -> {exists}"),
            ModelOp::Removed => "remove -> removed".into(),
            ModelOp::RemoveNotFound | ModelOp::RemoveNotFoundAfterRetry => "remove -> not found".into(),
            ModelOp::RemoveMaybe => "remove -> unknown".into(),
            ModelOp::RemovedOrKept => "remove_all -> answered".into(),
        }
    }
}

/// "absent" or "value 7".
pub(crate) fn describe_state(state: State) -> String {
    match state {
        Some(value) => format!("value {value}"),
        None => "absent".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acked_put_only_creates() {
        assert_eq!(ModelOp::PutAcked(1).step(None), Some(Some(1)));
        assert_eq!(ModelOp::PutAcked(1).step(Some(2)), None);
    }

    #[test]
    fn unknown_put_fails_quietly_on_a_present_key() {
        assert_eq!(ModelOp::PutMaybe(1).step(None), Some(Some(1)));
        assert_eq!(ModelOp::PutMaybe(1).step(Some(2)), Some(Some(2)));
    }

    #[test]
    fn reads_must_match_the_state() {
        assert_eq!(ModelOp::Get(Some(1)).step(Some(1)), Some(Some(1)));
        assert_eq!(ModelOp::Get(None).step(Some(1)), None);
        assert_eq!(ModelOp::Exists(false).step(None), Some(None));
        assert_eq!(ModelOp::Exists(true).step(None), None);
    }

    #[test]
    fn removes() {
        assert_eq!(ModelOp::Removed.step(Some(1)), Some(None));
        assert_eq!(ModelOp::Removed.step(None), None);
        assert_eq!(ModelOp::RemoveNotFound.step(Some(1)), None);
        assert_eq!(ModelOp::RemoveNotFound.step(None), Some(None));
        assert_eq!(ModelOp::RemoveNotFoundAfterRetry.step(Some(1)), Some(None));
        assert_eq!(ModelOp::RemoveMaybe.step(Some(1)), Some(None));
        assert_eq!(ModelOp::RemoveMaybe.step(None), Some(None));
    }

    #[test]
    fn an_answered_remove_all_removed_the_key_or_kept_it() {
        let choices = |state| (0..CHOICES_MAX + 1).map(|c| ModelOp::RemovedOrKept.step_choice(state, c)).collect();
        let found: Vec<Option<State>> = choices(Some(1));
        assert_eq!(found, vec![Some(None), Some(Some(1)), None]);
        let found: Vec<Option<State>> = choices(None);
        assert_eq!(found, vec![Some(None), Some(None), None]);
        // Every other op has exactly one way to take effect.
        assert_eq!(ModelOp::Removed.step_choice(Some(1), 1), None);
        assert_eq!(ModelOp::Get(Some(1)).step_choice(Some(1), 0), Some(Some(1)));
    }
}
