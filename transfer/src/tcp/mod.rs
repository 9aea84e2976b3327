//! The TCP data path, both ends of the [`crate::frame`] protocol: the
//! client side, [`TcpTransport`] (`client`: lanes per store node, chunked
//! transfers, pipelined small READs, mutual TLS when configured), and the
//! store node side, [`TransferServer`] (`server`: the accept loop and its
//! connection limits, one task per connection, disk segments in chunks).
//! The two share only the frame format and the socket options (`sockopt`);
//! the server admits requests with the checks in `access`, as the local
//! route does.

mod client;
mod server;

pub(crate) use client::check_target_range;
pub use client::{ItemResult, PIPELINE_ITEMS_MAX, ReadItem, TcpConfig, TcpTransport};
pub use server::{
    SERVER_CONNECTIONS_DEFAULT, SERVER_CONNECTIONS_MAX, SERVER_HEADER_TIMEOUT_DEFAULT, SERVER_IDLE_TIMEOUT_DEFAULT,
    SERVER_PEER_CONNECTIONS_DEFAULT, SERVER_REFUSALS_MAX, ServerConfig, ServerStats, TransferServer,
};
