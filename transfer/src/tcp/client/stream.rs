//! [`Stream`]: one lane's connection, a bare socket or mutual TLS over one.
//!
//! The exchanges in `client` and `pipeline` are generic over the stream and
//! match on this enum once per request, so a plain connection runs the same
//! monomorphic code on the bare `TcpStream` as before TLS existed: no
//! wrapper, no extra copy, no lock between its read and write halves.

use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// One lane's connection.
#[derive(Debug)]
pub(crate) enum Stream {
    Plain(TcpStream),
    /// Boxed: a TLS session holds its buffers inline (kilobytes).
    Tls(Box<TlsStream<TcpStream>>),
}
