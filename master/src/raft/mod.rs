//! Consensus plumbing around openraft: the network between masters (MACed
//! messages; AppendEntries on one stream per peer, the rest as calls;
//! PreVote; the leader lease's acknowledgements), the proposer (group
//! commit), read barriers, the state audit between masters, the cluster
//! id, and the data dir's disk-space alarm.

pub(crate) mod cluster_id;
pub mod disk_space;
pub mod leader_lease;
pub(crate) mod network;
pub mod partition;
pub(crate) mod peer_transport;
pub(crate) mod peers_heard;
pub mod prevote;
pub(crate) mod proposer;
pub(crate) mod read_barrier;
pub mod state_audit;
