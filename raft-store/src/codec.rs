//! The one binary encoding of everything raft-store persists or sends:
//! log entries, votes, snapshots and openraft RPC messages (postcard).

use serde::{Serialize, de::DeserializeOwned};

use crate::error::StoreError;

/// Encodes `value`; `what` names it in the error.
pub fn encode<T: Serialize>(what: &str, value: &T) -> Result<Vec<u8>, StoreError> {
    postcard::to_stdvec(value).map_err(|e| StoreError::Encode { what: what.to_string(), message: e.to_string() })
}

/// Decodes bytes written by [`encode`]; `what` names it in the error.
pub fn decode<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, StoreError> {
    postcard::from_bytes(bytes).map_err(|e| StoreError::Decode { what: what.to_string(), message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Request};
    use crate::type_config::TypeConfig;
    use openraft::{BasicNode, Entry, EntryPayload, LogId, Membership, Vote};
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn openraft_types_round_trip() {
        let vote = Vote::new_committed(3, 2);
        let back: Vote<u64> = decode("vote", &encode("vote", &vote).unwrap()).unwrap();
        assert_eq!(vote, back);

        let nodes: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::new(format!("n{i}")))).collect();
        let members = Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes);
        let entries: Vec<Entry<TypeConfig>> = vec![
            Entry { log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), 1), payload: EntryPayload::Blank },
            Entry {
                log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), 2),
                payload: EntryPayload::Membership(members),
            },
            Entry {
                log_id: LogId::new(openraft::CommittedLeaderId::new(2, 1), 3),
                payload: EntryPayload::Normal(Request { ts_ms: 7, cmd: Command::Noop }),
            },
        ];
        let back: Vec<Entry<TypeConfig>> = decode("entries", &encode("entries", &entries).unwrap()).unwrap();
        assert_eq!(format!("{entries:?}"), format!("{back:?}"));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let r: Result<Vec<Entry<TypeConfig>>, _> = decode("entries", &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(r.is_err());
    }
}
