//! The loopback rule: without TLS a server binds loopback addresses only,
//! unless the operator accepts the risk with `--insecure`. Plain TCP on a
//! reachable address lets anyone on the network call every API and read or
//! overwrite every segment.

use std::net::SocketAddr;

/// How a server's listening addresses are exposed, once allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exposure {
    /// TLS is on: any address is fine.
    Tls,
    /// TLS is off and every address is loopback.
    Loopback,
    /// TLS is off, some address is not loopback and `--insecure` was given:
    /// the one line to log as a warning.
    Insecure { warning: String },
}

/// Checks `binds` (flag name, address) of a server. Without TLS, an address
/// that is not loopback (`0.0.0.0` included) is refused with a message
/// saying how to turn TLS on, unless `insecure`.
pub fn check_binds(binds: &[(&str, SocketAddr)], tls: bool, insecure: bool) -> Result<Exposure, String> {
    if tls {
        return Ok(Exposure::Tls);
    }
    let exposed: Vec<String> = binds
        .iter()
        .filter(|(_, addr)| !addr.ip().is_loopback())
        .map(|(flag, addr)| format!("{flag} {addr}"))
        .collect();
    if exposed.is_empty() {
        return Ok(Exposure::Loopback);
    }
    let exposed = exposed.join(", ");
    if insecure {
        return Ok(Exposure::Insecure {
            warning: format!(
                "--insecure: serving plain TCP without authentication on {exposed}; anyone who reaches it can call \
                 every API and read or overwrite stored objects. Use only on a network only the cluster can reach, \
                 or turn on TLS (docs/SECURITY.md)"
            ),
        });
    }
    Err(format!(
        "{exposed}: not a loopback address, and TLS is off, so anyone who reaches it could call every API and read \
         or overwrite stored objects. Turn on mutual TLS: `mooncake certs init DIR`, then give this node \
         --tls-cert, --tls-key and --tls-ca (docs/SECURITY.md). Or bind 127.0.0.1, or pass --insecure to accept the \
         risk on a network only the cluster can reach"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_is_allowed_in_the_clear() {
        let lo: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let lo6: SocketAddr = "[::1]:1".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:1".parse().unwrap();
        let lan: SocketAddr = "10.0.0.5:1".parse().unwrap();
        assert_eq!(check_binds(&[("--listen", lo), ("--http", lo6)], false, false), Ok(Exposure::Loopback));
        let err = check_binds(&[("--listen", lo), ("--http", any)], false, false).unwrap_err();
        assert!(err.starts_with("--http 0.0.0.0:1: not a loopback") && err.contains("certs init"), "{err}");
        assert!(matches!(check_binds(&[("--listen", lan)], false, true), Ok(Exposure::Insecure { .. })));
        assert_eq!(check_binds(&[("--listen", any)], true, false), Ok(Exposure::Tls));
    }
}
