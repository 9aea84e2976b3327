//! The development PKI of `mooncake certs init`: one CA and a certificate
//! per role, enough to run a cluster with mutual TLS in a minute. For
//! production, issue the same roles from your own CA (see docs/SECURITY.md).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;

use crate::config::DEFAULT_SERVER_NAME;
use crate::error::TlsError;
use crate::files::{CA_FILE, CA_KEY_FILE, TlsFiles};
use crate::role::Role;

/// Most master certificates one call issues (a quorum is 3 or 5; this
/// leaves room for replacements without inviting typos like 1000).
pub const MASTERS_MAX: u64 = 99;

/// Days the CA is valid.
pub const CA_VALIDITY_DAYS: i64 = 3650;

/// Days each node certificate is valid: renew by issuing a new set (or
/// from your own CA) before then; docs/SECURITY.md says how.
pub const LEAF_VALIDITY_DAYS: i64 = 825;

/// Certificates are valid from this long before their creation, so a peer
/// whose clock is a little behind accepts them at once.
const CLOCK_SKEW_SECS: i64 = 3600;

/// What [`generate`] wrote.
#[derive(Clone, Debug)]
pub struct GeneratedPki {
    pub dir: PathBuf,
    /// The CA certificate every node is given as `--tls-ca`.
    pub ca: PathBuf,
    /// The CA's key: needed only to issue more certificates; keep it off the cluster.
    pub ca_key: PathBuf,
    /// The files of every role issued, masters first.
    pub nodes: Vec<(Role, TlsFiles)>,
    /// The client certificates bound to a tenant, by tenant name.
    pub tenants: Vec<(String, TlsFiles)>,
}

impl GeneratedPki {
    /// The files of `role`, if it was issued.
    pub fn files(&self, role: Role) -> Option<&TlsFiles> {
        self.nodes.iter().find(|(r, _)| *r == role).map(|(_, f)| f)
    }
}

/// Writes a CA (`ca.pem`, `ca-key.pem`) and a certificate and key for
/// masters `1..=masters`, a store node, a client and an admin into `dir`
/// (created if missing). Every certificate names its role in its CN
/// ([`crate::role`]), may serve and connect (server and client auth), and
/// carries the subject alternative names `localhost`, `127.0.0.1` and
/// `hosts`. Keys are written mode 0600. Refuses to overwrite any file.
pub fn generate(dir: &Path, masters: u64, hosts: &[String]) -> Result<GeneratedPki, TlsError> {
    generate_with_tenants(dir, masters, hosts, &[])
}

/// [`generate`], plus a client certificate bound to each of `tenants`
/// (`tenant-<name>.pem`, [`TlsFiles::for_tenant`]): CN `mooncake-client`
/// and the organizational unit of [`crate::tenant`]. Tenant names are
/// checked by the master, not here, beyond being usable as file names.
pub fn generate_with_tenants(
    dir: &Path,
    masters: u64,
    hosts: &[String],
    tenants: &[String],
) -> Result<GeneratedPki, TlsError> {
    if let Some(bad) = tenants.iter().find(|t| {
        t.is_empty() || t.len() > 64 || !t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    }) {
        return Err(TlsError::Generate(format!(
            "--tenant {bad:?}: a tenant name is 1 to 64 ASCII letters, digits, '.', '_' or '-'"
        )));
    }
    if !(1..=MASTERS_MAX).contains(&masters) {
        return Err(TlsError::Generate(format!("--masters {masters} must be in 1..={MASTERS_MAX}")));
    }
    let roles: Vec<Role> =
        (1..=masters).map(|id| Role::Master { id }).chain([Role::Store, Role::Client, Role::Admin]).collect();
    let nodes: Vec<(Role, TlsFiles)> = roles.iter().map(|r| (*r, TlsFiles::in_dir(dir, *r))).collect();
    let tenant_files: Vec<(String, TlsFiles)> =
        tenants.iter().map(|t| (t.clone(), TlsFiles::for_tenant(dir, t))).collect();
    let (ca, ca_key) = (dir.join(CA_FILE), dir.join(CA_KEY_FILE));
    let targets = [&ca, &ca_key]
        .into_iter()
        .chain(nodes.iter().flat_map(|(_, f)| [&f.cert, &f.key]))
        .chain(tenant_files.iter().flat_map(|(_, f)| [&f.cert, &f.key]));
    if let Some(existing) = targets.into_iter().find(|p| p.exists()) {
        return Err(TlsError::Exists { path: existing.clone() });
    }
    let sans = subject_alt_names(hosts)?;
    let now = OffsetDateTime::from(SystemTime::now());
    let gen_err = |e: rcgen::Error| TlsError::Generate(e.to_string());
    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write { path: dir.to_owned(), source })?;

    let ca_keypair = KeyPair::generate().map_err(gen_err)?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name("mooncake CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.not_before = now - time::Duration::seconds(CLOCK_SKEW_SECS);
    ca_params.not_after = now + time::Duration::days(CA_VALIDITY_DAYS);
    let ca_cert = ca_params.self_signed(&ca_keypair).map_err(gen_err)?;
    write(&ca_key, ca_keypair.serialize_pem().as_bytes(), 0o600)?;
    write(&ca, ca_cert.pem().as_bytes(), 0o644)?;
    let issuer = Issuer::new(ca_params, ca_keypair);

    let subjects = nodes.iter().map(|(role, files)| (name(&role.common_name()), files)).chain(tenant_files.iter().map(
        |(tenant, files)| {
            let mut dn = name(&Role::Client.common_name());
            dn.push(DnType::OrganizationalUnitName, crate::tenant::tenant_org_unit(tenant));
            (dn, files)
        },
    ));
    for (subject, files) in subjects {
        let key = KeyPair::generate().map_err(gen_err)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = subject;
        params.subject_alt_names = sans.clone();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = now - time::Duration::seconds(CLOCK_SKEW_SECS);
        params.not_after = now + time::Duration::days(LEAF_VALIDITY_DAYS);
        let cert = params.signed_by(&key, &issuer).map_err(gen_err)?;
        write(&files.key, key.serialize_pem().as_bytes(), 0o600)?;
        write(&files.cert, cert.pem().as_bytes(), 0o644)?;
    }
    Ok(GeneratedPki { dir: dir.to_owned(), ca, ca_key, nodes, tenants: tenant_files })
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "mooncake");
    dn.push(DnType::CommonName, common_name);
    dn
}

/// `localhost`, `127.0.0.1` and `hosts` (IP addresses or DNS names), without duplicates.
fn subject_alt_names(hosts: &[String]) -> Result<Vec<SanType>, TlsError> {
    let mut names: Vec<String> = vec![DEFAULT_SERVER_NAME.into(), "127.0.0.1".into()];
    for h in hosts.iter().map(|h| h.trim()) {
        if h.is_empty() {
            return Err(TlsError::Generate("--host \"\" is empty; give a DNS name or an IP address".into()));
        }
        if !names.iter().any(|n| n == h) {
            names.push(h.to_owned());
        }
    }
    names
        .into_iter()
        .map(|n| match n.parse::<std::net::IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => n
                .clone()
                .try_into()
                .map(SanType::DnsName)
                .map_err(|e| TlsError::Generate(format!("--host {n:?} is not a DNS name or IP address: {e}"))),
        })
        .collect()
}

/// Creates `path` (never overwriting) with `mode` and writes `bytes`.
fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| TlsError::Write { path: path.to_owned(), source };
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(err)?;
    file.write_all(bytes).map_err(err)?;
    file.sync_all().map_err(err)
}
