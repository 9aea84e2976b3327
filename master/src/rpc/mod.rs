//! The edge: the gRPC services (client API, admin API, Raft transport), the
//! conversions between wire and state types, the one mapping of state
//! errors to wire codes, and who may call what (the caller's role).

pub(crate) mod admin_service;
pub(crate) mod client_service;
pub(crate) mod cluster_info;
pub(crate) mod convert;
pub(crate) mod edge;
pub(crate) mod errors;
pub(crate) mod grants;
pub(crate) mod instrumented;
pub mod listings;
pub mod peer;
pub(crate) mod raft_service;
pub(crate) mod roles;
pub mod tenancy;
pub mod watch;
