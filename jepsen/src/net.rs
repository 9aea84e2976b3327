//! The harness's private network: one network namespace per host, joined by a
//! bridge in a hub namespace, with nftables rules on that bridge for
//! partitions and packet loss.
//!
//! Layout for run prefix `p` and hosts `a`, `b`, …:
//!
//! ```text
//!   netns p-a            netns p-hub                         netns p-b
//!   eth0 10.213.47.10 ── v-a ─┐                      ┌─ v-b ── eth0 10.213.47.11
//!                             └── br0 (bridge) ──────┘
//!                         nft table `bridge mcj`: filter_fwd → part_rules, loss_rules
//! ```
//!
//! **Safety.** All addresses are in [`SUBNET`] and exist only inside the
//! namespaces. The root namespace routes private ranges to the machine's
//! default gateway, so a packet sent there from the root namespace would
//! leave the machine. [`Network::create`] therefore first installs a
//! blackhole route for [`SUBNET`] in the root namespace, and every client or
//! probe must run inside a host namespace ([`Network::enter_thread`],
//! [`Network::spawn_in`], [`Network::command`]), never in the root namespace.
//!
//! Cleanup: [`Network::destroy`] (also run by `Drop`) and [`cleanup_leftovers`]
//! (for the start of a run and Ctrl-C handlers) kill processes left in the
//! run's namespaces, delete the namespaces (and with them every link and nft
//! table) and remove the blackhole route once no harness network needs it.

use std::collections::HashSet;
use std::fs::{self, File};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

use crate::faults;
use crate::host::{self, HostError};

/// The harness subnet. 10.213.47.0/24 is a private (RFC 1918) range picked to
/// be unlikely to be in use on a developer machine or CI runner; nothing
/// outside the namespaces ever has an address in it, and the blackhole route
/// keeps the root namespace from sending to it.
pub const SUBNET: &str = "10.213.47.0/24";
/// The first three octets of [`SUBNET`].
const SUBNET_OCTETS: [u8; 3] = [10, 213, 47];
/// Prefix length of [`SUBNET`].
const SUBNET_PREFIX_LEN: u8 = 24;
/// Host `i` (0-based) gets `10.213.47.(10 + i)`; .1–.9 stay free for
/// infrastructure a later harness may add (e.g. a userspace delay proxy).
const FIRST_HOST_OCTET: u8 = 10;
/// Highest usable host octet (.255 is the broadcast address).
const LAST_HOST_OCTET: u8 = 254;

/// Linux interface names are at most IFNAMSIZ − 1 = 15 bytes.
const MAX_IFNAME_LEN: usize = 15;
/// Hub-side veth names are `v-<host>`.
const VETH_PREFIX: &str = "v-";
/// Longest host name whose veth name fits [`MAX_IFNAME_LEN`].
pub const MAX_HOST_NAME_LEN: usize = MAX_IFNAME_LEN - VETH_PREFIX.len();
/// Longest run prefix; namespace names are files, this only keeps them readable.
pub const MAX_PREFIX_LEN: usize = 32;

/// Suffix of the hub namespace's name: `<prefix>-hub`. Also how other live
/// harness networks are recognised before the shared blackhole route is removed.
const HUB_SUFFIX: &str = "hub";
/// The bridge in the hub namespace.
const BRIDGE: &str = "br0";
/// The interface name of every host inside its namespace.
const HOST_IFACE: &str = "eth0";
/// Where `ip netns add` bind-mounts named namespaces.
const NETNS_DIR: &str = "/var/run/netns";

/// The nft table (family `bridge`) in the hub namespace.
const NFT_TABLE: &str = "mcj";
/// The base chain on the bridge's forward hook. Not `fwd`: a keyword in nft.
const NFT_BASE_CHAIN: &str = "filter_fwd";
/// Partition drop rules; replaced as a whole by [`Network::partition`].
const NFT_PARTITION_CHAIN: &str = "part_rules";
/// The packet-loss rule; replaced by [`Network::loss`].
const NFT_LOSS_CHAIN: &str = "loss_rules";

/// Serialises creation and removal of networks in this process, so that one
/// network's teardown cannot remove the blackhole route another is relying on
/// between its `ip route replace` and the creation of its hub namespace.
static ROUTE_LOCK: Mutex<()> = Mutex::new(());

fn route_lock() -> MutexGuard<'static, ()> {
    // A panic while holding the lock leaves nothing inconsistent that the next holder relies on.
    ROUTE_LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A set of host namespaces joined by a bridge; see the module docs.
#[derive(Debug)]
pub struct Network {
    prefix: String,
    hosts: Vec<String>,
    holds_route: bool,
    destroyed: bool,
}

impl Network {
    /// Builds the network: blackhole route first, then removal of leftovers
    /// of a crashed run with the same prefix, then the hub, the hosts and the
    /// nft table. On failure everything created so far is removed again.
    ///
    /// `run_prefix`: letters, digits and `_` (no `-`, so that `<prefix>-*`
    /// never matches another prefix's namespaces). Host names: letters,
    /// digits, `_` and `-`, at most [`MAX_HOST_NAME_LEN`] bytes, not `hub`.
    pub fn create(run_prefix: &str, hosts: &[&str]) -> Result<Network, HostError> {
        validate_prefix(run_prefix)?;
        validate_hosts(hosts)?;
        let mut net =
            Network { prefix: run_prefix.to_owned(), hosts: Vec::new(), holds_route: false, destroyed: false };
        let built = {
            let _guard = route_lock();
            net.build(hosts)
        };
        // On error `net` is dropped here, after the lock was released; Drop tears it down.
        built.map(|()| net)
    }

    fn build(&mut self, hosts: &[&str]) -> Result<(), HostError> {
        host::run_args("ip", ["route", "replace", "blackhole", SUBNET])?;
        self.holds_route = true;
        let leftovers = remove_namespaces(&self.prefix);
        if !leftovers.is_empty() {
            return Err(HostError::Cleanup(leftovers));
        }
        let hub = self.hub_ns();
        host::run_args("ip", ["netns", "add", &hub])?;
        host::run_args("ip", ["-n", &hub, "link", "set", "lo", "up"])?;
        host::run_args("ip", ["-n", &hub, "link", "add", BRIDGE, "type", "bridge"])?;
        host::run_args("ip", ["-n", &hub, "link", "set", BRIDGE, "up"])?;
        for (index, name) in hosts.iter().enumerate() {
            self.add_host(index, name)?;
        }
        let table = format!(
            "table bridge {NFT_TABLE} {{\n\
             \tchain {NFT_PARTITION_CHAIN} {{\n\t}}\n\
             \tchain {NFT_LOSS_CHAIN} {{\n\t}}\n\
             \tchain {NFT_BASE_CHAIN} {{\n\
             \t\ttype filter hook forward priority 0; policy accept;\n\
             \t\tjump {NFT_PARTITION_CHAIN}\n\
             \t\tjump {NFT_LOSS_CHAIN}\n\
             \t}}\n\
             }}\n"
        );
        self.nft(&table)
    }

    fn add_host(&mut self, index: usize, name: &str) -> Result<(), HostError> {
        let hub = self.hub_ns();
        let ns = format!("{}-{name}", self.prefix);
        let veth = format!("{VETH_PREFIX}{name}");
        host::run_args("ip", ["netns", "add", &ns])?;
        // Recorded before the remaining steps, so a failure tears this namespace down too.
        self.hosts.push(name.to_owned());
        host::run_args("ip", ["-n", &ns, "link", "set", "lo", "up"])?;
        // The pair is created inside the hub with its peer directly in the host
        // namespace: nothing ever appears in the root namespace.
        host::run_args(
            "ip",
            ["-n", &hub, "link", "add", &veth, "type", "veth", "peer", "name", HOST_IFACE, "netns", &ns],
        )?;
        host::run_args("ip", ["-n", &hub, "link", "set", &veth, "master", BRIDGE])?;
        host::run_args("ip", ["-n", &hub, "link", "set", &veth, "up"])?;
        let address = format!("{}/{SUBNET_PREFIX_LEN}", ip_for_index(index)?);
        host::run_args("ip", ["-n", &ns, "addr", "add", &address, "dev", HOST_IFACE])?;
        host::run_args("ip", ["-n", &ns, "link", "set", HOST_IFACE, "up"])?;
        Ok(())
    }

    /// The run prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The hosts, in creation order (host `i` has address `.10 + i`).
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The hub namespace's name, `<prefix>-hub`.
    pub fn hub_ns(&self) -> String {
        format!("{}-{HUB_SUFFIX}", self.prefix)
    }

    /// The namespace of `host`, `<prefix>-<host>`.
    pub fn ns_name(&self, host: &str) -> Result<String, HostError> {
        self.index_of(host)?;
        Ok(format!("{}-{host}", self.prefix))
    }

    /// The address of `host` (10.213.47.(10 + its index)).
    pub fn host_ip(&self, host: &str) -> Result<Ipv4Addr, HostError> {
        ip_for_index(self.index_of(host)?)
    }

    /// The hub-side veth of `host`, `v-<host>` (what partition rules match).
    pub fn veth_name(&self, host: &str) -> Result<String, HostError> {
        self.index_of(host)?;
        Ok(format!("{VETH_PREFIX}{host}"))
    }

    /// `ip netns exec <ns> <program>`: add arguments, environment and stdio,
    /// then spawn. `ip netns exec` execs the program directly, so the child's
    /// pid is the program's pid (for [`crate::faults`]); the caller must reap it.
    pub fn command(&self, host: &str, program: &str) -> Result<Command, HostError> {
        let ns = self.ns_name(host)?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns, program]);
        Ok(cmd)
    }

    /// Runs `program args…` inside `host`'s namespace to completion; returns its stdout.
    pub fn run_in(&self, host: &str, program: &str, args: &[&str]) -> Result<String, HostError> {
        host::run(self.command(host, program)?.args(args))
    }

    /// Drops all traffic for each directed pair `(from, to)`: frames entering
    /// the bridge from `from` and leaving towards `to`. Replaces the previous
    /// partition (atomically); packet loss set by [`Network::loss`] stays.
    /// An empty slice removes the partition.
    pub fn partition(&self, drops: &[(&str, &str)]) -> Result<(), HostError> {
        let mut script = format!("flush chain bridge {NFT_TABLE} {NFT_PARTITION_CHAIN}\n");
        for &(from, to) in drops {
            if from == to {
                return Err(HostError::InvalidArgument(format!("partition pair ({from:?}, {to:?}) names one host")));
            }
            let (from_if, to_if) = (self.veth_name(from)?, self.veth_name(to)?);
            script.push_str(&format!(
                "add rule bridge {NFT_TABLE} {NFT_PARTITION_CHAIN} iifname \"{from_if}\" oifname \"{to_if}\" drop\n"
            ));
        }
        self.nft(&script)
    }

    /// Cuts `host` off from every other host, both directions.
    pub fn isolate(&self, host: &str) -> Result<(), HostError> {
        self.index_of(host)?;
        let others: Vec<&str> = self.hosts.iter().map(String::as_str).filter(|h| *h != host).collect();
        self.halves(&[host], &others)
    }

    /// Cuts every host of `a` off from every host of `b`, both directions
    /// (hosts in neither side keep talking to both).
    pub fn halves(&self, a: &[&str], b: &[&str]) -> Result<(), HostError> {
        if let Some(both) = a.iter().find(|h| b.contains(h)) {
            return Err(HostError::InvalidArgument(format!("host {both:?} is on both sides of the partition")));
        }
        let pairs: Vec<(&str, &str)> = a.iter().flat_map(|&x| b.iter().flat_map(move |&y| [(x, y), (y, x)])).collect();
        self.partition(&pairs)
    }

    /// Removes every partition and the packet loss.
    pub fn heal(&self) -> Result<(), HostError> {
        self.nft(&format!(
            "flush chain bridge {NFT_TABLE} {NFT_PARTITION_CHAIN}\nflush chain bridge {NFT_TABLE} {NFT_LOSS_CHAIN}\n"
        ))
    }

    /// Drops `percent` % of all frames crossing the bridge, at random
    /// (replacing a previous loss setting; 0 removes it).
    pub fn loss(&self, percent: u8) -> Result<(), HostError> {
        // numgen yields 0..=99, so `< percent` drops exactly percent out of 100.
        const PERCENT_RANGE: u8 = 100;
        if percent > PERCENT_RANGE {
            return Err(HostError::InvalidArgument(format!("packet loss of {percent} % (0..=100)")));
        }
        let mut script = format!("flush chain bridge {NFT_TABLE} {NFT_LOSS_CHAIN}\n");
        if percent == PERCENT_RANGE {
            // nft rejects `< 100` after `mod 100` (out of range 0..=99): drop everything instead.
            script.push_str(&format!("add rule bridge {NFT_TABLE} {NFT_LOSS_CHAIN} drop\n"));
        } else if percent > 0 {
            script.push_str(&format!(
                "add rule bridge {NFT_TABLE} {NFT_LOSS_CHAIN} numgen random mod {PERCENT_RANGE} < {percent} drop\n"
            ));
        }
        self.nft(&script)
    }

    /// The current nft table, as `nft list table` prints it (for fault logs).
    pub fn ruleset(&self) -> Result<String, HostError> {
        host::run_args("ip", ["netns", "exec", &self.hub_ns(), "nft", "list", "table", "bridge", NFT_TABLE])
    }

    /// Moves the CURRENT thread into `host`'s network namespace (`setns`).
    /// Sockets it opens afterwards live there, and threads it spawns
    /// afterwards start there (so a tokio runtime built on it runs there).
    /// There is no way back: use a dedicated thread ([`Network::spawn_in`]).
    pub fn enter_thread(&self, host: &str) -> Result<(), HostError> {
        enter_netns(&self.ns_path(host)?)
    }

    /// Spawns a thread that enters `host`'s namespace and then runs `f`.
    pub fn spawn_in<T, F>(&self, host: &str, f: F) -> Result<JoinHandle<Result<T, HostError>>, HostError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let path = self.ns_path(host)?;
        thread::Builder::new()
            .name(format!("netns-{host}"))
            .spawn(move || {
                enter_netns(&path)?;
                Ok(f())
            })
            .map_err(|e| HostError::io(format!("spawning a thread for host {host}"), e))
    }

    /// Removes everything this network created: kills processes left in its
    /// namespaces, deletes the namespaces (with their links and nft tables)
    /// and the blackhole route if no other harness network is left.
    /// Idempotent, never panics; logs and returns what it could not remove.
    pub fn destroy(&mut self) -> Result<(), HostError> {
        if self.destroyed {
            return Ok(());
        }
        let _guard = route_lock();
        let mut failures = remove_namespaces(&self.prefix);
        if self.holds_route {
            match release_route() {
                Ok(()) => self.holds_route = false,
                Err(e) => failures.push(e.to_string()),
            }
        }
        if failures.is_empty() {
            self.destroyed = true;
            Ok(())
        } else {
            for failure in &failures {
                tracing::warn!(prefix = %self.prefix, "network cleanup: {failure}");
            }
            Err(HostError::Cleanup(failures))
        }
    }

    fn index_of(&self, host: &str) -> Result<usize, HostError> {
        self.hosts.iter().position(|h| h == host).ok_or_else(|| HostError::UnknownHost(host.to_owned()))
    }

    fn ns_path(&self, host: &str) -> Result<PathBuf, HostError> {
        Ok(PathBuf::from(NETNS_DIR).join(self.ns_name(host)?))
    }

    /// Applies an nft script in the hub namespace, as one transaction.
    fn nft(&self, script: &str) -> Result<(), HostError> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.hub_ns(), "nft", "-f", "-"]);
        host::run_with_stdin(&mut cmd, Some(script)).map(|_| ())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // destroy() already logged what it could not remove.
        let _ = self.destroy();
    }
}

/// Removes what a run with `prefix` left behind (after a crash, or from a
/// Ctrl-C handler thread — not from an async signal handler, it takes a lock
/// and runs commands): kills processes in the `<prefix>-*` namespaces,
/// deletes those namespaces and removes the blackhole route unless another
/// harness network (a `*-hub` namespace) still exists.
pub fn cleanup_leftovers(prefix: &str) -> Result<(), HostError> {
    validate_prefix(prefix)?;
    let _guard = route_lock();
    let mut failures = remove_namespaces(prefix);
    if let Err(e) = release_route() {
        failures.push(e.to_string());
    }
    if failures.is_empty() {
        Ok(())
    } else {
        for failure in &failures {
            tracing::warn!(prefix, "leftover cleanup: {failure}");
        }
        Err(HostError::Cleanup(failures))
    }
}

/// Names of all named network namespaces (the entries of `/var/run/netns`).
pub fn list_netns() -> Result<Vec<String>, HostError> {
    let entries = match fs::read_dir(NETNS_DIR) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(HostError::io(format!("listing {NETNS_DIR}"), e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| HostError::io(format!("listing {NETNS_DIR}"), e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// Whether the root namespace has the harness's blackhole route for [`SUBNET`].
pub fn blackhole_route_present() -> Result<bool, HostError> {
    let out = host::run_args("ip", ["-4", "route", "show", "exact", SUBNET, "type", "blackhole"])?;
    Ok(!out.trim().is_empty())
}

/// Removes the blackhole route unless another harness network still needs it.
/// Call with [`ROUTE_LOCK`] held.
fn release_route() -> Result<(), HostError> {
    let hub_suffix = format!("-{HUB_SUFFIX}");
    let others: Vec<String> = list_netns()?.into_iter().filter(|n| n.ends_with(&hub_suffix)).collect();
    if !others.is_empty() {
        tracing::info!(?others, "keeping the blackhole route for {SUBNET}: other harness networks exist");
        return Ok(());
    }
    if blackhole_route_present()? {
        host::run_args("ip", ["route", "del", "blackhole", SUBNET])?;
    }
    Ok(())
}

/// Kills processes in, and deletes, every `<prefix>-*` namespace (the hub
/// last). Returns what could not be done; never fails as a whole.
fn remove_namespaces(prefix: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let names = match list_netns() {
        Ok(names) => names,
        Err(e) => return vec![e.to_string()],
    };
    let hub = format!("{prefix}-{HUB_SUFFIX}");
    let mut ours: Vec<String> = names.into_iter().filter(|n| n.starts_with(&format!("{prefix}-"))).collect();
    for ns in &ours {
        kill_processes_in(ns, &mut failures);
    }
    if ours.contains(&hub) {
        // Deleting a namespace destroys its links and tables too, but only once nothing
        // pins it, and asynchronously; removing the hub's links first (each veth with its
        // peer in a host namespace) covers both.
        clear_hub(&hub, &mut failures);
    }
    // The hub last, so a failure midway leaves it for the next cleanup to find.
    ours.sort_by_key(|n| *n == hub);
    for ns in &ours {
        if let Err(e) = host::run_args("ip", ["netns", "del", ns]) {
            failures.push(e.to_string());
        }
    }
    failures
}

/// SIGKILLs every process whose network namespace is `ns` (except this one).
fn kill_processes_in(ns: &str, failures: &mut Vec<String>) {
    let listing = match host::run_args("ip", ["netns", "pids", ns]) {
        Ok(listing) => listing,
        Err(e) => {
            failures.push(e.to_string());
            return;
        }
    };
    let own = std::process::id();
    for pid in listing.lines().filter_map(|l| l.trim().parse::<u32>().ok()).filter(|&p| p != own) {
        tracing::warn!(ns, pid, "killing a process left in the namespace");
        match faults::kill9(pid) {
            Err(e) if !faults::is_no_such_process(&e) => failures.push(e.to_string()),
            _ => {}
        }
    }
}

/// Deletes the nft ruleset and every link but `lo` in the hub namespace.
fn clear_hub(hub: &str, failures: &mut Vec<String>) {
    if let Err(e) = host::run_args("ip", ["netns", "exec", hub, "nft", "flush", "ruleset"]) {
        failures.push(e.to_string());
    }
    let listing = match host::run_args("ip", ["-n", hub, "-o", "link", "show"]) {
        Ok(listing) => listing,
        Err(e) => {
            failures.push(e.to_string());
            return;
        }
    };
    // Lines look like "3: v-a@if2: <BROADCAST,…> …"; deleting a veth end deletes its peer.
    let links: HashSet<String> = listing
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_owned())
        .filter(|name| name != "lo")
        .collect();
    for link in &links {
        // A link may vanish meanwhile (its peer's namespace being torn down): only a link
        // that still exists after a failed delete is a failure.
        if let Err(e) = host::run_args("ip", ["-n", hub, "link", "del", link])
            && host::run_args("ip", ["-n", hub, "link", "show", "dev", link]).is_ok()
        {
            failures.push(e.to_string());
        }
    }
}

/// `setns(CLONE_NEWNET)` for the current thread into the namespace bound at `path`.
fn enter_netns(path: &std::path::Path) -> Result<(), HostError> {
    let file = File::open(path).map_err(|e| HostError::io(format!("opening {}", path.display()), e))?;
    // SAFETY: setns only reads the fd, which `file` keeps open for the call.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(HostError::io(format!("setns into {}", path.display()), std::io::Error::last_os_error()))
    }
}

fn ip_for_index(index: usize) -> Result<Ipv4Addr, HostError> {
    let octet = u8::try_from(index)
        .ok()
        .and_then(|i| FIRST_HOST_OCTET.checked_add(i))
        .filter(|&o| o <= LAST_HOST_OCTET)
        .ok_or_else(|| HostError::InvalidArgument(format!("host index {index} does not fit in {SUBNET}")))?;
    let [a, b, c] = SUBNET_OCTETS;
    Ok(Ipv4Addr::new(a, b, c, octet))
}

fn validate_prefix(prefix: &str) -> Result<(), HostError> {
    let invalid = |reason| Err(HostError::InvalidName { what: "run prefix", name: prefix.to_owned(), reason });
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN {
        return invalid("must be 1 to 32 bytes");
    }
    if !prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return invalid("only letters, digits and '_' are allowed");
    }
    Ok(())
}

fn validate_hosts(hosts: &[&str]) -> Result<(), HostError> {
    let capacity = usize::from(LAST_HOST_OCTET - FIRST_HOST_OCTET) + 1;
    if hosts.len() > capacity {
        return Err(HostError::InvalidArgument(format!("{} hosts; {SUBNET} fits {capacity}", hosts.len())));
    }
    let mut seen = HashSet::new();
    for &host in hosts {
        let invalid = |reason| Err(HostError::InvalidName { what: "host name", name: host.to_owned(), reason });
        if host.is_empty() || host.len() > MAX_HOST_NAME_LEN {
            return invalid("must be 1 to 13 bytes (interface names are at most 15)");
        }
        if !host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return invalid("only letters, digits, '_' and '-' are allowed");
        }
        if host == HUB_SUFFIX {
            return invalid("reserved for the hub namespace");
        }
        if !seen.insert(host) {
            return invalid("given twice");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_start_at_ten() {
        assert_eq!(ip_for_index(0).ok(), Some(Ipv4Addr::new(10, 213, 47, 10)));
        assert_eq!(ip_for_index(244).ok(), Some(Ipv4Addr::new(10, 213, 47, 254)));
        assert!(ip_for_index(245).is_err());
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_prefix("mcjt42").is_ok());
        assert!(validate_prefix("a-b").is_err());
        assert!(validate_prefix("").is_err());
        assert!(validate_hosts(&["m1", "store-0"]).is_ok());
        assert!(validate_hosts(&["hub"]).is_err());
        assert!(validate_hosts(&["a", "a"]).is_err());
        assert!(validate_hosts(&["fourteen_chars"]).is_err());
        assert!(validate_hosts(&["thirteen_char"]).is_ok());
    }
}
