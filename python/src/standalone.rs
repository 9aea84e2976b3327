//! Mooncake's standalone mode (`setup_dummy`): the inference process holds
//! no segment; a store node on the same host (`mooncake store --http ADDR`)
//! holds the cache, so restarting the inference process keeps it. The
//! store node's `/standalone` answer names the masters; this process then
//! runs as an ordinary client with no segment of its own, moving bytes
//! itself (through the store node's shared-memory segment on the same host)
//! rather than asking the store node to move them, as upstream's dummy
//! client does. Also [`HostMemory`], the buffers of upstream's
//! `MooncakeHostMemAllocator`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use mooncake_segment::{MemoryError, SegmentMemory};

use crate::setup::{SetupArgs, TlsPaths};

/// How long the store node has to answer `/standalone`.
pub const STANDALONE_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest `/standalone` answer read.
const ANSWER_MAX_BYTES: u64 = 64 << 10;

/// What a store node tells a standalone-mode client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandaloneInfo {
    pub masters: Vec<String>,
    /// The store node's transfer endpoint (its segment).
    pub endpoint: String,
}

/// Asks the store node whose HTTP address is `server_address` (`host:port`)
/// for its masters. The error says what to check.
pub fn fetch(server_address: &str) -> Result<StandaloneInfo, String> {
    let addr = server_address
        .to_socket_addrs()
        .map_err(|e| format!("server_address {server_address:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("server_address {server_address:?} names no address"))?;
    let unreachable = |e: std::io::Error| {
        format!(
            "store node at {server_address}: {e}; start one on this host with `mooncake store --http {server_address} \
             --masters …`"
        )
    };
    let mut stream = TcpStream::connect_timeout(&addr, STANDALONE_TIMEOUT).map_err(unreachable)?;
    stream.set_read_timeout(Some(STANDALONE_TIMEOUT)).map_err(unreachable)?;
    stream.set_write_timeout(Some(STANDALONE_TIMEOUT)).map_err(unreachable)?;
    let request = format!("GET /standalone HTTP/1.0\r\nHost: {server_address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).map_err(unreachable)?;
    let mut answer = Vec::new();
    stream.take(ANSWER_MAX_BYTES).read_to_end(&mut answer).map_err(unreachable)?;
    parse_answer(&answer).map_err(|why| format!("store node at {server_address}: {why}"))
}

/// The `/standalone` JSON of an HTTP answer.
fn parse_answer(answer: &[u8]) -> Result<StandaloneInfo, String> {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP answer (is this a store node's --http address?)")?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("answered {status:?}: {}", body.trim()));
    }
    let json: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("bad /standalone answer: {e}"))?;
    let masters: Vec<String> = json["masters"]
        .as_array()
        .map(|a| a.iter().filter_map(|m| m.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    if masters.is_empty() {
        return Err("its /standalone answer names no master".into());
    }
    let endpoint = json["endpoint"].as_str().unwrap_or_default().to_string();
    Ok(StandaloneInfo { masters, endpoint })
}

impl StandaloneInfo {
    /// The setup of a client with no segment of its own, on this host, with
    /// the store node's masters (shared memory where the store node allows).
    pub fn setup_args(&self, local_buffer_size: u64) -> SetupArgs {
        SetupArgs {
            local_hostname: "127.0.0.1".into(),
            metadata_server: "P2PHANDSHAKE".into(),
            global_segment_size: 0,
            local_buffer_size,
            protocol: "auto".into(),
            rdma_devices: String::new(),
            master_server_addr: self.masters.join(","),
            tls: TlsPaths::default(),
            tenant: String::new(),
            enable_ssd_prefetch: false,
        }
    }
}

/// Buffers of upstream's `MooncakeHostMemAllocator`: page-aligned
/// anonymous mappings, by address, unmapped by `free`.
#[derive(Default)]
pub struct HostMemory {
    blocks: Mutex<HashMap<usize, SegmentMemory>>,
}

impl HostMemory {
    /// Maps `size` bytes; their address.
    pub fn alloc(&self, size: u64) -> Result<usize, MemoryError> {
        let memory = SegmentMemory::anonymous(size, false)?;
        let addr = memory.as_ptr() as usize;
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner).insert(addr, memory);
        Ok(addr)
    }

    /// Unmaps the block at `addr`; false when no block starts there.
    pub fn free(&self, addr: usize) -> bool {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner).remove(&addr).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_nodes_answer_names_its_masters() {
        let ok =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n{\"masters\":[\"a:1\",\"b:2\"],\"endpoint\":\"h:7\"}";
        let info = parse_answer(ok).expect("parsed");
        assert_eq!(info.masters, vec!["a:1", "b:2"]);
        assert_eq!(info.setup_args(0).master_server_addr, "a:1,b:2");
        let busy = b"HTTP/1.1 503 Service Unavailable\r\n\r\nthis node serves no segment\n";
        assert!(parse_answer(busy).unwrap_err().contains("503"));
        assert!(parse_answer(b"SSH-2.0-OpenSSH\r\n").is_err());
        let none = b"HTTP/1.1 200 OK\r\n\r\n{\"masters\":[]}";
        assert!(parse_answer(none).unwrap_err().contains("no master"));
    }

    #[test]
    fn host_memory_frees_only_what_it_allocated() {
        let mem = HostMemory::default();
        let a = mem.alloc(1 << 20).expect("alloc");
        assert_eq!(a % 4096, 0);
        assert!(!mem.free(a + 1));
        assert!(mem.free(a));
        assert!(!mem.free(a));
    }
}
