//! Baselines measured in the same run as Mooncake, on the same machine and
//! loopback: a raw TCP request/response loop, the same loop over mutual TLS
//! and memcpy (for `data`), a
//! 3-member etcd cluster (for `meta` and `failover`), Redis (for `small`),
//! and upstream Mooncake itself (for `data`, `meta` and `small`). External servers are started by the bench on free 127.0.0.1
//! ports with their own temporary directories, and a [`Proc`] guard kills
//! them (and the directory goes) however the bench ends.
//!
//! The etcd and Redis clients ([`etcd`], [`redis`]) are compiled only with
//! feature `baselines` (on by default).

#[cfg(feature = "baselines")]
pub mod etcd;
pub mod memcpy;
pub mod raw_disk;
pub mod raw_tcp;
pub mod raw_tls;
#[cfg(feature = "baselines")]
pub mod redis;
pub mod upstream;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;

/// Finds `name` on `PATH` (Debian installs `etcd` and `redis-server` in /usr/bin).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// A child process of the bench, SIGKILLed on drop if still running.
pub struct Proc {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    /// Starts `program args…` with stdout and stderr appended to `log`.
    pub fn start(name: &str, program: &Path, args: Vec<String>, log: PathBuf) -> anyhow::Result<Proc> {
        let mut p = Proc { name: name.into(), program: program.into(), args, log, child: None };
        p.launch()?;
        Ok(p)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} ({})", self.name, self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again with the same arguments (after [`kill`](Self::kill)).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.launch()
    }

    /// `Err` with the log tail if the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        let exited = match self.child.as_mut() {
            None => true,
            Some(c) => matches!(c.try_wait(), Ok(Some(_))),
        };
        anyhow::ensure!(!exited, "{} exited; last lines of {}:\n{}", self.name, self.log.display(), self.log_tail(15));
        Ok(())
    }

    /// The last `lines` of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

/// The last `lines` of the file at `path` (empty if it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(lines).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A free port on 127.0.0.1 (free a moment ago).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(mooncake_local_cluster::free_port()?)
}

/// Polls `cond` every 50 ms until it is true or `timeout` passes.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut cond: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !cond().await {
        anyhow::ensure!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// GETs `path` from an HTTP/1.0 server at `addr` (the masters' /metrics);
/// the body.
pub fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok(body.to_string())
}
