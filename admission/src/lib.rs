//! Connection admission for every server of mooncake (the masters' gRPC
//! and HTTP ports, the store nodes' transfer port): at most a total and a
//! per-address number of connections, where a connection that is only
//! *waiting* (it has sent no request yet, or is idle between requests)
//! gives its place to a newcomer rather than the newcomer being refused.
//! So a flood of silent or idle sockets costs the flooder its sockets, not
//! the clients their service.
//!
//! Pure bookkeeping ([`Table`]), tested without sockets; each server keeps
//! one behind a lock and closes the connections it is told were evicted.
//! Depends on nothing.

mod table;

pub use table::{Admit, ConnId, Limits, Refusal, Table};
