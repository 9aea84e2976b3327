//! `setup`'s arguments, Mooncake's names and meanings, turned into our
//! [`ClientConfig`]: `master_server_addr` is our comma-separated master list,
//! `local_hostname` (`host` or `host:port`) says where this process serves
//! its segment, `metadata_server` and `rdma_devices` are accepted and unused
//! (we keep no transfer metadata outside the masters). Mutual TLS is ours:
//! the dict's `tls_cert`, `tls_key`, `tls_ca`, else the `MOONCAKE_TLS_*`
//! variables ([`TlsPaths`]).

use std::net::{SocketAddr, ToSocketAddrs};

use mooncake_client::ClientConfig;
use mooncake_transfer::Protocol;

/// Where a port is picked when `local_hostname` names none: Mooncake's
/// range, so firewall rules written for Mooncake still hold.
pub const PORT_RANGE: std::ops::RangeInclusive<u16> = 12300..=14300;

/// Ports tried before setup gives up (each taken one costs a failed bind).
pub const PORT_ATTEMPTS_MAX: usize = 64;

/// Segments are whole pages (the masters refuse others): sizes are rounded
/// down to this.
pub const SEGMENT_ALIGN_BYTES: u64 = 4096;

/// The variable that makes `setup` touch every page of the segment at once
/// (`1`/`true`/`yes`): no put into it page-faults later, at the cost of a
/// slower setup and the whole segment resident from the start.
pub const PREFAULT_ENV: &str = "MOONCAKE_PREFAULT";
/// Bytes per replica of the writer chunks small puts are placed in
/// (`ClientConfig::put_chunk_bytes`, docs/CLIENT.md): a size such as `4MiB`,
/// or `0` to start every put with a PutStart.
pub const PUT_CHUNK_BYTES_ENV: &str = "MOONCAKE_PUT_CHUNK_BYTES";
/// A file holding the cluster's admin token (as for the `mooncake` CLI).
pub const ADMIN_TOKEN_FILE_ENV: &str = "MOONCAKE_ADMIN_TOKEN_FILE";
/// The JSON settings file frameworks read (`admin_token_file` is ours).
pub const CONFIG_PATH_ENV: &str = "MOONCAKE_CONFIG_PATH";
/// This process's certificate, its key and the cluster's CA (PEM files, as
/// the CLI's `--tls-cert --tls-key --tls-ca`): all three turn on mutual TLS
/// to the masters and store nodes, and for this process's own segment.
pub const TLS_ENV: [&str; 3] = ["MOONCAKE_TLS_CERT", "MOONCAKE_TLS_KEY", "MOONCAKE_TLS_CA"];
/// The keys of `setup`'s dict form with the same meaning (they win over
/// the variables when any is given).
pub const TLS_KEYS: [&str; 3] = ["tls_cert", "tls_key", "tls_ca"];
/// The name servers' certificates are checked against (default `localhost`,
/// which every `mooncake certs init` certificate carries).
pub const TLS_SERVER_NAME_ENV: &str = "MOONCAKE_TLS_SERVER_NAME";

/// This process's client id (decimal), stable across restarts; default: a
/// random one per process.
pub const CLIENT_ID_ENV: &str = "MOONCAKE_CLIENT_ID";
/// The credential proving this process is its client id (read if the file
/// exists, else created, mode 0600), as the CLI's `--credential-file`.
pub const CREDENTIAL_FILE_ENV: &str = "MOONCAKE_CREDENTIAL_FILE";
/// A disk segment this process contributes besides its memory segment
/// (docs/TIERS.md): the file's path, and its data size (`64GiB`). Needs a
/// memory segment, [`CLIENT_ID_ENV`] and, to find its disk objects again
/// after a restart, [`CREDENTIAL_FILE_ENV`].
pub const DISK_SEGMENT_ENV: &str = "MOONCAKE_DISK_SEGMENT";
pub const DISK_SIZE_ENV: &str = "MOONCAKE_DISK_SIZE";

/// The identity and disk settings of the environment, applied to `cfg`
/// (`var` reads one variable; empty counts as unset).
pub fn apply_identity_env(cfg: &mut ClientConfig, var: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty()).map(|v| v.trim().to_string());
    if let Some(id) = var(CLIENT_ID_ENV) {
        let id = id.parse::<u64>().ok().filter(|id| *id != 0);
        cfg.client_id = Some(id.ok_or_else(|| format!("{CLIENT_ID_ENV} must be a non-zero decimal number"))?);
    }
    if let Some(file) = var(CREDENTIAL_FILE_ENV) {
        let credential = mooncake_auth::Credential::load_or_create(std::path::Path::new(&file))
            .map_err(|e| format!("{CREDENTIAL_FILE_ENV} {file}: {e}"))?;
        cfg.credential = Some(credential);
    }
    match (var(DISK_SEGMENT_ENV), var(DISK_SIZE_ENV)) {
        (None, None) => {}
        (Some(path), Some(size)) => {
            cfg.disk_segment = Some(path.into());
            cfg.disk_size = mooncake_client::parse_size(&size).map_err(|e| format!("{DISK_SIZE_ENV}: {e}"))?;
        }
        _ => return Err(format!("a disk segment needs both {DISK_SEGMENT_ENV} and {DISK_SIZE_ENV}")),
    }
    Ok(())
}

/// Whether `value` (of [`PREFAULT_ENV`]) asks for prefaulting.
pub fn prefault_wanted(value: Option<&str>) -> bool {
    env_flag(value)
}

/// Whether an environment flag's value says yes (1, true, yes, on).
pub fn env_flag(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// Serve UCX although UCX emulates RMA here (tests only; docs/SECURITY.md).
pub const UCX_ALLOW_EMULATED_RMA_ENV: &str = "MOONCAKE_UCX_ALLOW_EMULATED_RMA";

/// Largest local buffer: it is allocated and pre-faulted at setup.
pub const LOCAL_BUFFER_MAX_BYTES: u64 = 1 << 40;

/// Mooncake's `setup` arguments (positional order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetupArgs {
    pub local_hostname: String,
    pub metadata_server: String,
    pub global_segment_size: u64,
    pub local_buffer_size: u64,
    pub protocol: String,
    pub rdma_devices: String,
    pub master_server_addr: String,
    /// The dict form's `tls_cert`, `tls_key`, `tls_ca` (empty: the
    /// environment decides).
    pub tls: TlsPaths,
    /// `tenant_id`: the tenant (key space) every call acts in; empty or
    /// `default` is the default tenant (docs/TENANTS.md).
    pub tenant: String,
    /// The dict form's `enable_ssd_prefetch`: `is_exist` and
    /// `batch_is_exist` with `ExistOptions.prefetch_to_memory` ask the
    /// leader to promote disk-only objects (upstream 0.3.14 gates it the
    /// same way; off otherwise).
    pub enable_ssd_prefetch: bool,
}

/// Paths of a certificate, its key and the CA, as given (any may be missing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPaths {
    pub cert: Option<String>,
    pub key: Option<String>,
    pub ca: Option<String>,
}

impl TlsPaths {
    /// The `MOONCAKE_TLS_*` variables (an empty one counts as unset).
    pub fn from_env() -> TlsPaths {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        TlsPaths { cert: var(TLS_ENV[0]), key: var(TLS_ENV[1]), ca: var(TLS_ENV[2]) }
    }

    fn is_empty(&self) -> bool {
        self.cert.is_none() && self.key.is_none() && self.ca.is_none()
    }

    /// The files to use: `given` (the dict's keys) if it names any, else
    /// `env`; all three or none (`Ok(None)`: TLS off). A partial set is
    /// refused, naming what is missing where.
    pub fn resolve(given: &TlsPaths, env: &TlsPaths) -> Result<Option<mooncake_tls::TlsFiles>, String> {
        let (paths, names, source) = match given.is_empty() {
            false => (given, TLS_KEYS, "setup's config dict"),
            true => (env, TLS_ENV, "the environment"),
        };
        match (&paths.cert, &paths.key, &paths.ca) {
            (None, None, None) => Ok(None),
            (Some(cert), Some(key), Some(ca)) => {
                Ok(Some(mooncake_tls::TlsFiles { cert: cert.into(), key: key.into(), ca: ca.into() }))
            }
            (cert, key, ca) => {
                let missing: Vec<&str> = [cert.is_none(), key.is_none(), ca.is_none()]
                    .into_iter()
                    .zip(names)
                    .filter_map(|(absent, name)| absent.then_some(name))
                    .collect();
                Err(format!(
                    "TLS needs all three of {} or none; {source} lacks {} (`mooncake certs init DIR` makes a set)",
                    names.join(", "),
                    missing.join(", ")
                ))
            }
        }
    }
}

/// The file holding the cluster's admin token, if this process is given
/// one: `MOONCAKE_ADMIN_TOKEN_FILE`, else the `admin_token_file` key of the
/// JSON file `MOONCAKE_CONFIG_PATH` names (the file vLLM and SGLang read
/// their Mooncake settings from, which `mooncake up` writes; frameworks
/// ignore keys they do not know). A config file that cannot be read or
/// parsed is left to the framework to complain about.
pub fn admin_token_file(env: impl Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
    if let Some(file) = env(ADMIN_TOKEN_FILE_ENV) {
        return Ok(Some(file));
    }
    let Some(path) = env(CONFIG_PATH_ENV) else { return Ok(None) };
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(None) };
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else { return Ok(None) };
    match doc.get("admin_token_file") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(file)) => Ok(Some(file.clone())),
        Some(other) => Err(format!("{path}: admin_token_file must be a path (a string), not {other}")),
    }
}

/// `local_hostname` split into host and optional port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: Option<u16>,
}

impl HostPort {
    /// `host`, `host:port`, `[v6]`, `[v6]:port`; a bare IPv6 address has no port.
    pub fn parse(s: &str) -> Result<HostPort, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("local_hostname is empty; give the address other nodes reach this host by".into());
        }
        if let Some(rest) = s.strip_prefix('[') {
            let (host, tail) = rest.split_once(']').ok_or_else(|| format!("local_hostname {s:?}: missing ']'"))?;
            let port = match tail.strip_prefix(':') {
                Some(p) => Some(parse_port(s, p)?),
                None if tail.is_empty() => None,
                None => return Err(format!("local_hostname {s:?}: unexpected {tail:?} after ']'")),
            };
            return Ok(HostPort { host: host.to_string(), port });
        }
        match s.split_once(':') {
            Some((host, port)) if !port.contains(':') => {
                Ok(HostPort { host: host.to_string(), port: Some(parse_port(s, port)?) })
            }
            _ => Ok(HostPort { host: s.to_string(), port: None }),
        }
    }

    /// `host:port` as other nodes reach it (IPv6 in brackets).
    pub fn endpoint(&self, port: u16) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{port}", self.host),
            false => format!("{}:{port}", self.host),
        }
    }

    /// The address to serve on: the host's first address.
    pub fn listen_addr(&self, port: u16) -> Result<SocketAddr, String> {
        (self.host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| format!("local_hostname {:?} does not resolve: {e}", self.host))?
            .next()
            .ok_or_else(|| format!("local_hostname {:?} has no address", self.host))
    }
}

fn parse_port(whole: &str, port: &str) -> Result<u16, String> {
    port.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("local_hostname {whole:?}: {port:?} is not a port (1..=65535)"))
}

/// The master list: `host:port` items separated by `,` or `;`.
pub fn parse_masters(s: &str) -> Result<Vec<String>, String> {
    let s = s.trim();
    if s.contains("://") {
        return Err(format!(
            "master_server_addr {s:?}: give the masters' addresses (host:port,host:port,...); \
             mooncake-rs needs no etcd"
        ));
    }
    let masters: Vec<String> = s.split([',', ';']).map(str::trim).filter(|m| !m.is_empty()).map(String::from).collect();
    if masters.is_empty() {
        return Err("master_server_addr is empty; give host:port of some or all masters".into());
    }
    Ok(masters)
}

/// Whether a process with `protocol`, a segment of `segment` bytes and TLS
/// on or off serves its segment over UCX.
fn serves_ucx(protocol: Protocol, segment: u64, tls: bool) -> bool {
    let ucx = match protocol {
        Protocol::Ucx => true,
        Protocol::Rdma => cfg!(feature = "ucx"),
        Protocol::Tcp | Protocol::Shm | Protocol::Auto => false,
    };
    ucx && segment > 0 && !tls
}

/// Our transport for Mooncake's protocol name.
pub fn parse_protocol(s: &str) -> Result<Protocol, String> {
    match s.trim() {
        "" => Ok(Protocol::Tcp),
        other => other.parse::<Protocol>().map_err(|e| e.to_string()),
    }
}

impl SetupArgs {
    /// The client configuration serving on `port`, and the endpoint
    /// (`host:port`) `get_hostname` reports.
    pub fn client_config(&self, host: &HostPort, port: u16) -> Result<(ClientConfig, String), String> {
        let mut cfg = ClientConfig::new(parse_masters(&self.master_server_addr)?);
        cfg.tenant = mooncake_segment::tenant::Tenant::parse(&self.tenant).map_err(|e| format!("tenant_id: {e}"))?;
        cfg.local_hostname = host.host.clone();
        cfg.protocol = parse_protocol(&self.protocol)?;
        cfg.global_segment_size = self.global_segment_size / SEGMENT_ALIGN_BYTES * SEGMENT_ALIGN_BYTES;
        if self.global_segment_size > 0 && cfg.global_segment_size == 0 {
            return Err(format!(
                "global_segment_size {} is below one page ({SEGMENT_ALIGN_BYTES} bytes); use 0 or more",
                self.global_segment_size
            ));
        }
        if self.local_buffer_size > LOCAL_BUFFER_MAX_BYTES {
            return Err(format!("local_buffer_size {} is above {LOCAL_BUFFER_MAX_BYTES}", self.local_buffer_size));
        }
        cfg.local_buffer_size = self.local_buffer_size;
        // Admin operations (a forced remove_all) need the cluster's admin token.
        if let Some(file) = admin_token_file(|name| std::env::var(name).ok())? {
            let token =
                mooncake_auth::admin::read_token_file(std::path::Path::new(&file)).map_err(|e| e.to_string())?;
            cfg.admin_token = Some(token);
        }
        // Mutual TLS for the masters, the store nodes and this process's
        // own segment (its transfer server then requires client certificates).
        cfg.tls = self.tls_config()?;
        // A process reading over UCX serves its own segment to UCX readers
        // too, except with TLS on: UCX reads bypass TLS, and a store node
        // serves them there only when its operator says the fabric is
        // trusted (`mooncake store --ucx-trusted-fabric`, docs/SECURITY.md).
        cfg.serve_ucx = serves_ucx(cfg.protocol, cfg.global_segment_size, cfg.tls.is_some());
        // Tests only, as `mooncake store --ucx-allow-emulated-rma`: without
        // an RDMA NIC, UCX emulates RMA and its worker exposes this process.
        cfg.ucx_allow_emulated_rma = env_flag(std::env::var(UCX_ALLOW_EMULATED_RMA_ENV).ok().as_deref());
        apply_identity_env(&mut cfg, |name| std::env::var(name).ok())?;
        if cfg.global_segment_size > 0 {
            cfg.transfer_listen = host.listen_addr(port)?;
            cfg.prefault = prefault_wanted(std::env::var(PREFAULT_ENV).ok().as_deref());
        }
        if let Some(v) = std::env::var(PUT_CHUNK_BYTES_ENV).ok().filter(|v| !v.trim().is_empty()) {
            cfg.put_chunk_bytes = mooncake_client::parse_size(v.trim())
                .map_err(|e| format!("{PUT_CHUNK_BYTES_ENV}={v:?}: {e}; give a size such as 4MiB, or 0"))?;
        }
        cfg.validate()?;
        Ok((cfg, host.endpoint(port)))
    }

    /// The loaded TLS identity ([`TlsPaths::resolve`] of the dict's keys
    /// and the environment), `None` when TLS is off.
    pub fn tls_config(&self) -> Result<Option<mooncake_tls::TlsConfig>, String> {
        let Some(files) = TlsPaths::resolve(&self.tls, &TlsPaths::from_env())? else { return Ok(None) };
        let tls = files.load().map_err(|e| e.to_string())?;
        match std::env::var(TLS_SERVER_NAME_ENV) {
            Ok(name) if !name.trim().is_empty() => {
                tls.with_server_name(name.trim()).map(Some).map_err(|e| e.to_string())
            }
            _ => Ok(Some(tls)),
        }
    }
}

/// The ports to try: the one given, else [`PORT_ATTEMPTS_MAX`] random ones
/// of [`PORT_RANGE`].
pub fn candidate_ports(given: Option<u16>) -> Vec<u16> {
    match given {
        Some(p) => vec![p],
        None => {
            use rand::Rng;
            let mut rng = rand::thread_rng();
            (0..PORT_ATTEMPTS_MAX).map(|_| rng.gen_range(PORT_RANGE)).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_admin_token_file_comes_from_the_environment_or_the_frameworks_config_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("mooncake.json");
        let config_path = config.to_str().expect("utf-8");
        std::fs::write(&config, r#"{"master_server_address": "m:1", "admin_token_file": "/d/admin.token"}"#).unwrap();
        let from_file = admin_token_file(env_of(&[(CONFIG_PATH_ENV, config_path)]));
        assert_eq!(from_file, Ok(Some("/d/admin.token".into())));
        let both = env_of(&[(CONFIG_PATH_ENV, config_path), (ADMIN_TOKEN_FILE_ENV, "/e/admin.token")]);
        assert_eq!(admin_token_file(both), Ok(Some("/e/admin.token".into())), "the variable wins");
        assert_eq!(admin_token_file(env_of(&[])), Ok(None));
        std::fs::write(&config, r#"{"master_server_address": "m:1"}"#).unwrap();
        assert_eq!(admin_token_file(env_of(&[(CONFIG_PATH_ENV, config_path)])), Ok(None), "no key: no token");
        std::fs::write(&config, r#"{"admin_token_file": 7}"#).unwrap();
        let bad = admin_token_file(env_of(&[(CONFIG_PATH_ENV, config_path)]));
        assert!(bad.is_err_and(|e| e.contains("must be a path")), "a wrong type is named");
    }

    #[test]
    fn the_environment_gives_a_stable_identity_and_a_disk_segment() {
        let dir = tempfile::tempdir().expect("temp dir");
        let credential = dir.path().join("credential");
        let disk = dir.path().join("disk.seg");
        let mut cfg = ClientConfig::new(vec!["127.0.0.1:50051".into()]);
        cfg.global_segment_size = 1 << 20;
        let env = env_of(&[
            (CLIENT_ID_ENV, "42"),
            (CREDENTIAL_FILE_ENV, credential.to_str().expect("utf-8")),
            (DISK_SEGMENT_ENV, disk.to_str().expect("utf-8")),
            (DISK_SIZE_ENV, "64MiB"),
        ]);
        apply_identity_env(&mut cfg, env).expect("applied");
        assert_eq!(cfg.client_id, Some(42));
        assert!(cfg.credential.is_some() && credential.exists(), "the credential file is created");
        assert_eq!((cfg.disk_segment.as_deref(), cfg.disk_size), (Some(disk.as_path()), 64 << 20));
        cfg.validate().expect("a valid store config");

        let mut again = ClientConfig::new(vec!["127.0.0.1:50051".into()]);
        let env = env_of(&[(CREDENTIAL_FILE_ENV, credential.to_str().expect("utf-8"))]);
        apply_identity_env(&mut again, env).expect("applied");
        assert_eq!(again.credential, cfg.credential, "the same credential after a restart");
    }

    #[test]
    fn bad_identity_and_disk_variables_are_refused_by_name() {
        let mut cfg = ClientConfig::new(vec!["127.0.0.1:50051".into()]);
        let err = apply_identity_env(&mut cfg, env_of(&[(CLIENT_ID_ENV, "x")])).expect_err("not a number");
        assert!(err.contains(CLIENT_ID_ENV), "{err}");
        let err = apply_identity_env(&mut cfg, env_of(&[(DISK_SEGMENT_ENV, "/tmp/d")])).expect_err("no size");
        assert!(err.contains(DISK_SIZE_ENV), "{err}");
        let env = env_of(&[(DISK_SEGMENT_ENV, "/tmp/d"), (DISK_SIZE_ENV, "lots")]);
        let err = apply_identity_env(&mut cfg, env).expect_err("bad size");
        assert!(err.contains(DISK_SIZE_ENV), "{err}");
    }

    fn args() -> SetupArgs {
        SetupArgs {
            local_hostname: "127.0.0.1".into(),
            master_server_addr: "127.0.0.1:1, 127.0.0.1:2;127.0.0.1:3".into(),
            protocol: "tcp".into(),
            global_segment_size: (64 << 20) + 5,
            ..Default::default()
        }
    }

    #[test]
    fn prefault_is_asked_for_by_a_truthy_value_only() {
        for yes in ["1", "true", " YES ", "on"] {
            assert!(prefault_wanted(Some(yes)), "{yes}");
        }
        for no in [None, Some(""), Some("0"), Some("false"), Some("2")] {
            assert!(!prefault_wanted(no), "{no:?}");
        }
    }

    #[test]
    fn hostnames_split_into_host_and_port() {
        let hp = |s| HostPort::parse(s);
        assert_eq!(hp("node1").unwrap(), HostPort { host: "node1".into(), port: None });
        assert_eq!(hp("10.0.0.1:12345").unwrap(), HostPort { host: "10.0.0.1".into(), port: Some(12345) });
        assert_eq!(hp("[::1]:7").unwrap(), HostPort { host: "::1".into(), port: Some(7) });
        assert_eq!(hp("fe80::1").unwrap(), HostPort { host: "fe80::1".into(), port: None });
        assert_eq!(hp("[::1]").unwrap().endpoint(9), "[::1]:9");
        assert!(hp("").is_err() && hp("h:0").is_err() && hp("h:99999").is_err() && hp("[::1]x").is_err());
    }

    #[test]
    fn setup_arguments_become_a_client_config() {
        let a = args();
        let host = HostPort::parse(&a.local_hostname).unwrap();
        let (cfg, endpoint) = a.client_config(&host, 12345).expect("config");
        assert_eq!(cfg.masters, ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]);
        assert_eq!(cfg.global_segment_size, 64 << 20, "rounded down to a page");
        assert_eq!(cfg.transfer_listen, "127.0.0.1:12345".parse().unwrap());
        assert_eq!(endpoint, "127.0.0.1:12345");
        assert!(SetupArgs { global_segment_size: 100, ..args() }.client_config(&host, 1).is_err());
        assert!(SetupArgs { protocol: "carrier-pigeon".into(), ..args() }.client_config(&host, 1).is_err());
        let tenant =
            SetupArgs { tenant: "team-a".into(), ..args() }.client_config(&host, 1).expect("a tenant").0.tenant;
        assert_eq!(tenant.name(), "team-a");
        let bad = SetupArgs { tenant: "no spaces".into(), ..args() }.client_config(&host, 1).unwrap_err();
        assert!(bad.starts_with("tenant_id: "), "{bad}");
        let etcd = SetupArgs { master_server_addr: "etcd://127.0.0.1:2379".into(), ..args() };
        assert!(etcd.client_config(&host, 1).unwrap_err().contains("no etcd"));
        assert!(SetupArgs { master_server_addr: " , ".into(), ..args() }.client_config(&host, 1).is_err());
    }

    #[test]
    fn tls_takes_all_three_files_or_none() {
        let p = |s: &str| Some(s.to_string());
        let all = TlsPaths { cert: p("c.pem"), key: p("k.pem"), ca: p("ca.pem") };
        let none = TlsPaths::default();
        assert_eq!(TlsPaths::resolve(&none, &none).unwrap(), None);
        let files = TlsPaths::resolve(&none, &all).unwrap().expect("from the environment");
        assert_eq!(files.ca, std::path::PathBuf::from("ca.pem"));
        // The dict's keys win over the environment, and are not mixed with it.
        let given = TlsPaths { cert: p("mine.pem"), ..none.clone() };
        let err = TlsPaths::resolve(&given, &all).unwrap_err();
        assert!(err.contains("config dict lacks tls_key, tls_ca"), "{err}");
        let err = TlsPaths::resolve(&none, &TlsPaths { key: None, ..all.clone() }).unwrap_err();
        assert!(err.contains("environment lacks MOONCAKE_TLS_KEY") && err.contains("certs init"), "{err}");
    }

    #[test]
    fn tls_files_are_loaded_at_setup() {
        let dir = std::env::temp_dir().join(format!("mooncake-py-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        mooncake_tls::generate(&dir, 1, &[]).expect("dev PKI");
        let files = mooncake_tls::TlsFiles::in_dir(&dir, mooncake_tls::Role::Client);
        let path = |p: &std::path::Path| Some(p.display().to_string());
        let tls = TlsPaths { cert: path(&files.cert), key: path(&files.key), ca: path(&files.ca) };
        let a = SetupArgs { tls: tls.clone(), ..args() };
        let host = HostPort::parse(&a.local_hostname).unwrap();
        let (cfg, _) = a.client_config(&host, 12345).expect("config");
        assert_eq!(cfg.tls.and_then(|t| t.own_role()), Some(mooncake_tls::Role::Client));
        let missing = TlsPaths { ca: path(&dir.join("nope.pem")), ..tls };
        let err = SetupArgs { tls: missing, ..args() }.client_config(&host, 1).unwrap_err();
        assert!(err.contains("nope.pem"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ports_come_from_mooncakes_range() {
        assert_eq!(candidate_ports(Some(7)), [7]);
        let picked = candidate_ports(None);
        assert_eq!(picked.len(), PORT_ATTEMPTS_MAX);
        assert!(picked.iter().all(|p| PORT_RANGE.contains(p)));
    }
}
