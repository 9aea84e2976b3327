//! Who is calling: the [`Role`] named by the verified client certificate of
//! a gRPC request (mutual TLS, docs/SECURITY.md). Services that need a role
//! ask here; without TLS there is no certificate and so no role.

use mooncake_tls::Role;

/// The role of the peer that sent `req`, from its certificate; `None`
/// without TLS, or when the certificate names no role (`mooncake_tls::role`).
/// The certificate was verified against the cluster's CA during the
/// handshake, so the role can be trusted as far as the CA is.
pub fn peer_role<T>(req: &tonic::Request<T>) -> Option<Role> {
    Role::of_peer(req.peer_certs()?.as_slice())
}
