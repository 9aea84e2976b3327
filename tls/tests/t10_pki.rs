//! The development PKI: `generate` writes a CA and one identity per role,
//! each loads into working rustls configs, peers learn each other's role
//! from the verified certificate, and a certificate of another CA is refused.

use std::os::unix::fs::PermissionsExt;

use mooncake_tls::rustls::{ClientConnection, ServerConnection};
use mooncake_tls::{Role, TlsArgs, TlsConfig, TlsError, TlsFiles, generate};

fn load(dir: &std::path::Path, role: Role) -> TlsConfig {
    TlsFiles::in_dir(dir, role).load().unwrap_or_else(|e| panic!("loading {role}: {e}"))
}

/// Runs a handshake in memory; `Ok((server's view of the client, client's view of the server))`.
fn handshake(server: &TlsConfig, client: &TlsConfig) -> Result<(Option<Role>, Option<Role>), String> {
    let mut s = ServerConnection::new(server.server_config()).map_err(|e| e.to_string())?;
    let mut c =
        ClientConnection::new(client.client_config(), client.server_name().clone()).map_err(|e| e.to_string())?;
    for _ in 0..10 {
        let mut wire = Vec::new();
        c.write_tls(&mut wire).map_err(|e| e.to_string())?;
        s.read_tls(&mut wire.as_slice()).map_err(|e| e.to_string())?;
        s.process_new_packets().map_err(|e| format!("server: {e}"))?;
        let mut wire = Vec::new();
        s.write_tls(&mut wire).map_err(|e| e.to_string())?;
        c.read_tls(&mut wire.as_slice()).map_err(|e| e.to_string())?;
        c.process_new_packets().map_err(|e| format!("client: {e}"))?;
        if !s.is_handshaking() && !c.is_handshaking() {
            let seen_by_server = s.peer_certificates().and_then(Role::of_peer);
            let seen_by_client = c.peer_certificates().and_then(Role::of_peer);
            return Ok((seen_by_server, seen_by_client));
        }
    }
    Err("handshake did not finish".into())
}

#[test]
fn every_role_gets_a_working_identity_and_keys_are_private() {
    let dir = tempfile::tempdir().unwrap();
    let pki = generate(dir.path(), 3, &["10.0.0.7".into(), "store-1.example".into()]).unwrap();
    assert_eq!(pki.nodes.len(), 6, "3 masters, store, client, admin");
    for (role, files) in &pki.nodes {
        let tls = files.load().unwrap();
        assert_eq!(tls.own_role(), Some(*role));
        let mode = std::fs::metadata(&files.key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", files.key.display());
    }
    let mode = std::fs::metadata(&pki.ca_key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // Why: a second `certs init` into the same directory must not replace a
    // deployed CA (every node would lose its trust at once).
    let err = generate(dir.path(), 3, &[]).unwrap_err();
    assert!(matches!(err, TlsError::Exists { .. }), "{err}");
}

#[test]
fn peers_see_each_others_role_and_a_foreign_ca_is_refused() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    generate(ours.path(), 1, &[]).unwrap();
    generate(theirs.path(), 1, &[]).unwrap();
    let master = load(ours.path(), Role::Master { id: 1 });
    let admin = load(ours.path(), Role::Admin);
    assert_eq!(handshake(&master, &admin), Ok((Some(Role::Admin), Some(Role::Master { id: 1 }))));

    // A client of another CA that trusts ours (the CA certificate is no
    // secret): the server refuses its certificate.
    let stranger = TlsFiles {
        ca: TlsFiles::in_dir(ours.path(), Role::Client).ca,
        ..TlsFiles::in_dir(theirs.path(), Role::Client)
    };
    let err = handshake(&master, &stranger.load().unwrap()).unwrap_err();
    assert!(err.starts_with("server:"), "{err}");
    // A server of another CA: the client refuses it.
    let err = handshake(&load(theirs.path(), Role::Store), &admin).unwrap_err();
    assert!(err.starts_with("client:"), "{err}");

    // A server name the certificates do not carry is refused.
    let wrong_name = admin.clone().with_server_name("mooncake.invalid").unwrap();
    assert!(handshake(&master, &wrong_name).is_err());
}

#[test]
fn bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let pki = generate(dir.path(), 1, &[]).unwrap();
    let mut files = pki.files(Role::Client).unwrap().clone();
    files.key = pki.files(Role::Store).unwrap().key.clone();
    let err = files.load().unwrap_err().to_string();
    assert!(err.contains("client.pem") && err.contains("store-key.pem"), "mismatched key: {err}");

    let mut files = pki.files(Role::Client).unwrap().clone();
    files.ca = files.key.clone();
    let err = files.load().unwrap_err().to_string();
    assert!(err.contains("CA certificate (--tls-ca)") && err.contains("client-key.pem"), "{err}");

    let args = TlsArgs { tls_cert: Some(dir.path().join("nope.pem")), ..TlsArgs::default() };
    assert!(args.load().unwrap_err().to_string().contains("--tls-key, --tls-ca"));
    let files = TlsFiles { cert: dir.path().join("nope.pem"), ..pki.files(Role::Client).unwrap().clone() };
    let err = files.load().unwrap_err().to_string();
    assert!(err.contains("nope.pem") && err.contains("--tls-cert"), "{err}");
}
