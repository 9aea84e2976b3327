//! tonic's TLS settings from a [`TlsConfig`] (feature `grpc`): the masters'
//! server (client certificate required) and every channel to a master.

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

use crate::config::{HANDSHAKE_TIMEOUT, TlsConfig};

/// A master's gRPC server: this node's identity, client certificates
/// required and verified against the CA.
pub fn server_tls(tls: &TlsConfig) -> ServerTlsConfig {
    ServerTlsConfig::new()
        .identity(Identity::from_pem(tls.cert_pem(), tls.key_pem()))
        .client_ca_root(Certificate::from_pem(tls.ca_pem()))
        .client_auth_optional(false)
        .timeout(HANDSHAKE_TIMEOUT)
}

/// A channel to a master: the CA, this node's identity, and the server name
/// checked against the master's certificate.
pub fn client_tls(tls: &TlsConfig) -> ClientTlsConfig {
    ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(tls.ca_pem()))
        .identity(Identity::from_pem(tls.cert_pem(), tls.key_pem()))
        .domain_name(tls.server_name().to_str())
        .timeout(HANDSHAKE_TIMEOUT)
}

/// The endpoint of the master at `addr` (`host:port`): `https://` with
/// [`client_tls`] when `tls` is given, `http://` otherwise.
pub fn endpoint(addr: &str, tls: Option<&TlsConfig>) -> Result<Endpoint, tonic::transport::Error> {
    match tls {
        None => Endpoint::from_shared(format!("http://{addr}")),
        Some(tls) => Endpoint::from_shared(format!("https://{addr}"))?.tls_config(client_tls(tls)),
    }
}
