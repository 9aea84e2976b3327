//! `setup`'s arguments, Mooncake's names and meanings, turned into our
//! [`ClientConfig`]: `master_server_addr` is our comma-separated master list,
//! `local_hostname` (`host` or `host:port`) says where this process serves
//! its segment, `metadata_server` and `rdma_devices` are accepted and unused
//! (we keep no transfer metadata outside the masters).

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

/// Whether `value` (of [`PREFAULT_ENV`]) asks for prefaulting.
pub fn prefault_wanted(value: Option<&str>) -> bool {
    value.is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

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
        if cfg.global_segment_size > 0 {
            cfg.transfer_listen = host.listen_addr(port)?;
            cfg.prefault = prefault_wanted(std::env::var(PREFAULT_ENV).ok().as_deref());
        }
        cfg.validate()?;
        Ok((cfg, host.endpoint(port)))
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
        let etcd = SetupArgs { master_server_addr: "etcd://127.0.0.1:2379".into(), ..args() };
        assert!(etcd.client_config(&host, 1).unwrap_err().contains("no etcd"));
        assert!(SetupArgs { master_server_addr: " , ".into(), ..args() }.client_config(&host, 1).is_err());
    }

    #[test]
    fn ports_come_from_mooncakes_range() {
        assert_eq!(candidate_ports(Some(7)), [7]);
        let picked = candidate_ports(None);
        assert_eq!(picked.len(), PORT_ATTEMPTS_MAX);
        assert!(picked.iter().all(|p| PORT_RANGE.contains(p)));
    }
}
