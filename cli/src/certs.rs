//! `mooncake certs init DIR`: a development PKI for mutual TLS (a CA and a
//! certificate per role, `mooncake_tls::generate`), and a summary of the
//! files written and the flags each node takes. docs/SECURITY.md explains
//! the roles and how to use your own CA instead.

use std::path::{Path, PathBuf};

use mooncake_tls::{CA_VALIDITY_DAYS, GeneratedPki, LEAF_VALIDITY_DAYS, Role};

#[derive(clap::Subcommand)]
pub enum CertsOp {
    /// Write ca.pem, ca-key.pem and a certificate and key for masters
    /// 1..=N, a store node, a client and an admin into DIR (never
    /// overwriting). Every certificate is valid for localhost, 127.0.0.1
    /// and each --host.
    Init {
        /// Directory to write into (created if missing).
        dir: PathBuf,
        /// Master certificates to issue (master-1 … master-N).
        #[arg(long, default_value_t = 3)]
        masters: u64,
        /// An extra DNS name or IP address every certificate is valid for
        /// (repeat it, or separate with commas). Needed only when clients
        /// check a server name other than localhost (--tls-server-name).
        #[arg(long = "host", value_delimiter = ',')]
        hosts: Vec<String>,
        /// Also issue a client certificate bound to this tenant
        /// (`tenant-NAME.pem`): a master lets it act in that tenant only
        /// (docs/TENANTS.md). Repeat it, or separate with commas.
        #[arg(long = "tenant", value_delimiter = ',')]
        tenants: Vec<String>,
    },
}

pub fn run(op: CertsOp) -> anyhow::Result<()> {
    let CertsOp::Init { dir, masters, hosts, tenants } = op;
    let pki = mooncake_tls::generate_with_tenants(&dir, masters, &hosts, &tenants)?;
    print!("{}", summary(&pki, &hosts));
    Ok(())
}

/// What was written and which flags each node takes.
fn summary(pki: &GeneratedPki, hosts: &[String]) -> String {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    names.extend(hosts.iter().cloned());
    let mut out = format!("wrote a development PKI to {}\n", pki.dir.display());
    out += &format!("  {:<22} CA certificate (give it to every node as --tls-ca)\n", name(&pki.ca));
    out += &format!(
        "  {:<22} CA key, mode 0600: only to issue more certificates; keep it off the cluster\n",
        name(&pki.ca_key)
    );
    for (role, files) in &pki.nodes {
        out += &format!(
            "  {:<22} {} ({}), key mode 0600\n",
            format!("{} + {}", name(&files.cert), name(&files.key)),
            role,
            role.common_name()
        );
    }
    for (tenant, files) in &pki.tenants {
        out += &format!(
            "  {:<22} client bound to tenant {tenant} (OU {}{tenant}), key mode 0600\n",
            format!("{} + {}", name(&files.cert), name(&files.key)),
            mooncake_tls::TENANT_OU_PREFIX
        );
    }
    out += &format!(
        "certificates: valid for {} for {LEAF_VALIDITY_DAYS} days (CA: {CA_VALIDITY_DAYS} days)\n\nflags:\n",
        names.join(", ")
    );
    let flags = |role: Role| pki.files(role).map(|f| f.to_args().join(" ")).unwrap_or_default();
    if let Some((Role::Master { id }, _)) = pki.nodes.first() {
        out += &format!("  mooncake master --id {id} ... {}\n", flags(Role::Master { id: *id }));
    }
    out += &format!("  mooncake store ... {}\n", flags(Role::Store));
    out += &format!("  mooncake put/get/ls ... {}\n", flags(Role::Client));
    out += &format!("  mooncake status/member/snapshot/client ... {}\n", flags(Role::Admin));
    for (tenant, files) in &pki.tenants {
        out += &format!("  mooncake put/get/ls in tenant {tenant} ... {}\n", files.to_args().join(" "));
    }
    out += "  (or set MOONCAKE_TLS_CERT, MOONCAKE_TLS_KEY and MOONCAKE_TLS_CA)\n";
    out
}

fn name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}
