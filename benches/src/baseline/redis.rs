//! The small-object baseline: `redis-server` (Debian's `redis-server`
//! package) on a free loopback port with persistence off (`--save ""
//! --appendonly no`), killed afterwards, loaded with MSET/MGET of the same
//! batches as Mooncake's put_batch/get_batch.
//!
//! The client is a tiny hand-written RESP2 client over a blocking
//! `TcpStream` (`TCP_NODELAY`, one connection per concurrent client, one
//! request in flight per connection, reused buffers), so the baseline costs
//! no dependency and has no client-side tricks the Mooncake client lacks.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::baseline::{Proc, find_program, free_port, wait_until};

/// What to run when redis-server is missing.
pub const INSTALL_HINT: &str =
    "redis-server not found; install it with `apt-get install redis-server` (Debian) to measure this baseline";

/// Largest bulk string the client accepts (bounds its memory).
pub const BULK_MAX_BYTES: usize = 64 << 20;
/// Largest array reply the client accepts.
pub const ARRAY_MAX_ITEMS: usize = 1 << 20;

const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The `redis-server` binary, if installed.
pub fn find() -> Option<PathBuf> {
    find_program("redis-server")
}

/// A running redis-server, killed (and its directory removed) on drop.
pub struct RedisServer {
    pub addr: String,
    _proc: Proc,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts it on a free loopback port and waits until it answers PING.
    pub async fn start(bin: &std::path::Path) -> anyhow::Result<RedisServer> {
        let dir = tempfile::Builder::new().prefix("mooncake-bench-redis-").tempdir()?;
        let port = free_port()?;
        let args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
            "--daemonize",
            "no",
            "--dir",
            &dir.path().display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut proc = Proc::start("redis-server", bin, args, dir.path().join("redis.log"))?;
        let addr = format!("127.0.0.1:{port}");
        let ping = || async {
            let addr = addr.clone();
            tokio::task::spawn_blocking(move || Resp::connect(&addr).and_then(|mut c| c.command(&[b"PING"])).is_ok())
                .await
                .unwrap_or(false)
        };
        if let Err(e) = wait_until("redis-server to answer PING", START_TIMEOUT, ping).await {
            proc.check_alive()?;
            return Err(e);
        }
        Ok(RedisServer { addr, _proc: proc, _dir: dir })
    }
}

/// One RESP reply.
#[derive(Debug, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Reply>),
}

/// A blocking RESP2 connection.
pub struct Resp {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    out: Vec<u8>,
    line: String,
}

impl Resp {
    pub fn connect(addr: &str) -> anyhow::Result<Resp> {
        let stream = TcpStream::connect(addr).with_context(|| format!("connecting to redis at {addr}"))?;
        stream.set_nodelay(true)?;
        let reader = BufReader::with_capacity(256 << 10, stream.try_clone()?);
        Ok(Resp { writer: stream, reader, out: Vec::new(), line: String::new() })
    }

    /// Sends one command and reads its reply; a RESP error becomes `Err`.
    pub fn command(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        encode(&mut self.out, args);
        self.writer.write_all(&self.out)?;
        match self.read_reply(0)? {
            Reply::Error(e) => anyhow::bail!("redis: {e}"),
            r => Ok(r),
        }
    }

    /// MSET of `keys` all set to `value`.
    pub fn mset(&mut self, keys: &[String], value: &[u8]) -> anyhow::Result<()> {
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for k in keys {
            args.push(k.as_bytes());
            args.push(value);
        }
        match self.command(&args)? {
            Reply::Simple(s) if s == "OK" => Ok(()),
            other => anyhow::bail!("MSET answered {other:?}"),
        }
    }

    /// MGET of `keys`; the number of values found and their total bytes.
    pub fn mget(&mut self, keys: &[String]) -> anyhow::Result<(usize, u64)> {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(keys.iter().map(|k| k.as_bytes()));
        let Reply::Array(items) = self.command(&args)? else { anyhow::bail!("MGET did not answer an array") };
        let found: Vec<usize> = items
            .iter()
            .filter_map(|r| match r {
                Reply::Bulk(Some(v)) => Some(v.len()),
                _ => None,
            })
            .collect();
        Ok((found.len(), found.iter().map(|n| *n as u64).sum()))
    }

    fn read_reply(&mut self, depth: usize) -> anyhow::Result<Reply> {
        anyhow::ensure!(depth < 4, "redis reply nested too deeply");
        self.line.clear();
        let n = self.reader.read_line(&mut self.line)?;
        anyhow::ensure!(n > 0, "redis closed the connection");
        let line = self.line.trim_end_matches(['\r', '\n']).to_string();
        let (kind, rest) = line.split_at(line.len().min(1));
        match kind {
            "+" => Ok(Reply::Simple(rest.to_string())),
            "-" => Ok(Reply::Error(rest.to_string())),
            ":" => Ok(Reply::Int(rest.parse()?)),
            "$" => self.read_bulk(rest.parse()?),
            "*" => {
                let n: i64 = rest.parse()?;
                anyhow::ensure!((0..=ARRAY_MAX_ITEMS as i64).contains(&n), "redis array of {n} items");
                (0..n).map(|_| self.read_reply(depth + 1)).collect::<anyhow::Result<_>>().map(Reply::Array)
            }
            other => anyhow::bail!("unexpected redis reply type {other:?}"),
        }
    }

    fn read_bulk(&mut self, len: i64) -> anyhow::Result<Reply> {
        if len < 0 {
            return Ok(Reply::Bulk(None));
        }
        let len = len as usize;
        anyhow::ensure!(len <= BULK_MAX_BYTES, "redis bulk string of {len} bytes");
        let mut v = vec![0u8; len + 2];
        self.reader.read_exact(&mut v)?;
        v.truncate(len);
        Ok(Reply::Bulk(Some(v)))
    }
}

/// RESP array of bulk strings.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.clear();
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_encode_as_resp_arrays() {
        let mut out = Vec::new();
        encode(&mut out, &[b"MGET", b"a", b"bc"]);
        assert_eq!(out, b"*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$2\r\nbc\r\n");
    }

    #[test]
    fn replies_parse_from_a_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = s.read(&mut buf).unwrap();
            s.write_all(b"*3\r\n$3\r\nabc\r\n$-1\r\n$2\r\nde\r\n").unwrap();
            let _ = s.read(&mut buf).unwrap();
            s.write_all(b"-ERR nope\r\n").unwrap();
        });
        let mut c = Resp::connect(&addr).unwrap();
        let keys = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(c.mget(&keys).unwrap(), (2, 5));
        assert!(c.command(&[b"PING"]).unwrap_err().to_string().contains("ERR nope"));
        server.join().unwrap();
    }
}
