//! Mutual TLS for every network service of mooncake-rs: the masters' gRPC
//! port (client, admin and Raft services), the store nodes' transfer port,
//! and every client of them.
//!
//! Key types: [`TlsFiles`] (the `--tls-cert --tls-key --tls-ca` paths, all
//! three or none, flags in [`TlsArgs`]), [`TlsConfig`] (the loaded files and
//! the rustls [`server_config`](TlsConfig::server_config) — client
//! certificate required — and [`client_config`](TlsConfig::client_config)),
//! [`Role`] (who a verified certificate names: its subject common name, see
//! [`role`]), [`generate`] (the development PKI of `mooncake certs init`),
//! and the loopback rule for servers without TLS ([`check_binds`]).
//! Every config uses rustls' ring provider and TLS 1.3.
//!
//! This crate sits at the bottom of the workspace: it knows nothing of Raft,
//! segments or the wire protocols it protects.

mod args;
mod config;
mod der;
mod error;
mod exposure;
mod files;
mod generate;
#[cfg(feature = "grpc")]
pub mod grpc;
pub mod role;
pub mod tenant;

pub use args::TlsArgs;
pub use config::{DEFAULT_SERVER_NAME, HANDSHAKE_TIMEOUT, TlsConfig};
pub use error::TlsError;
pub use exposure::{Exposure, check_binds};
pub use files::TlsFiles;
pub use generate::{CA_VALIDITY_DAYS, GeneratedPki, LEAF_VALIDITY_DAYS, MASTERS_MAX, generate, generate_with_tenants};
pub use role::Role;
/// The rustls version this crate builds its configs with.
pub use rustls;
pub use tenant::{TENANT_OU_PREFIX, tenant_of_peer};
