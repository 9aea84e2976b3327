//! The control-path baseline: a real 3-member etcd cluster (Debian's
//! `etcd-server` package, binary `etcd`), started by the bench on free
//! loopback ports with its own temporary data directories and default
//! settings (fsync on, heartbeat 100 ms, election timeout 1000 ms), and
//! killed afterwards.
//!
//! The client is a minimal hand-vendored subset of etcd v3's gRPC API
//! (`benches/proto/etcd_kv.proto`: KV Put/Range/DeleteRange and Maintenance
//! Status, with etcd's package, names and field numbers) compiled by
//! `benches/build.rs` with the same tonic/prost and vendored protoc as our
//! own protos. We chose that over the `etcd-client` crate: it adds no
//! dependency tree, cannot drift to another tonic major version than ours,
//! and needs no system protoc. Requests carry etcd's `hasleader` metadata
//! (what `clientv3.WithRequireLeader` sends), so a member without a leader
//! fails them at once instead of holding them until a server timeout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

use crate::baseline::{Proc, find_program, free_port, wait_until};

/// The generated etcd v3 subset.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("etcdserverpb");
}

use pb::kv_client::KvClient;
use pb::maintenance_client::MaintenanceClient;

/// What to run when etcd is missing.
pub const INSTALL_HINT: &str =
    "etcd not found; install it with `apt-get install etcd-server` (Debian) to measure this baseline";

/// Members of the baseline cluster.
pub const MEMBERS: usize = 3;

/// How long the cluster may take to elect its first leader.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Timeout of one Status call.
const STATUS_TIMEOUT: Duration = Duration::from_millis(500);

/// The `etcd` binary, if installed.
pub fn find() -> Option<PathBuf> {
    find_program("etcd")
}

/// One member: its process, client URL and (once known) its member id.
pub struct Member {
    pub name: String,
    pub client_url: String,
    pub id: u64,
    proc: Proc,
    running: bool,
}

/// A running 3-member etcd cluster; every member is killed and the data
/// directories removed on drop.
pub struct EtcdCluster {
    pub members: Vec<Member>,
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts the members and waits for a leader they all agree on.
    pub async fn start(bin: &Path) -> anyhow::Result<EtcdCluster> {
        let dir = tempfile::Builder::new().prefix("mooncake-bench-etcd-").tempdir()?;
        let ports: Vec<(u16, u16)> =
            (0..MEMBERS).map(|_| Ok((free_port()?, free_port()?))).collect::<anyhow::Result<_>>()?;
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{}=http://127.0.0.1:{peer}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("mooncake-bench-{}", std::process::id());
        let mut members = Vec::new();
        for (i, &(client, peer)) in ports.iter().enumerate() {
            let name = format!("m{}", i + 1);
            let args = member_args(&name, dir.path(), client, peer, &initial, &token);
            let proc = Proc::start(&format!("etcd {name}"), bin, args, dir.path().join(format!("{name}.log")))?;
            members.push(Member { name, client_url: format!("http://127.0.0.1:{client}"), id: 0, proc, running: true });
        }
        let mut cluster = EtcdCluster { members, _dir: dir };
        cluster.wait_ready(START_TIMEOUT).await?;
        Ok(cluster)
    }

    /// Waits until every running member names the same running leader, and
    /// learns the member ids on the way.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let start = std::time::Instant::now();
        loop {
            if self.agreed_leader().await.is_some() {
                return Ok(());
            }
            for m in self.members.iter_mut().filter(|m| m.running) {
                m.proc.check_alive()?;
            }
            anyhow::ensure!(start.elapsed() < timeout, "etcd cluster has no agreed leader after {timeout:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The index of the leader every running member agrees on, if any.
    async fn agreed_leader(&mut self) -> Option<usize> {
        let mut leader = None;
        for i in 0..self.members.len() {
            if !self.members[i].running {
                continue;
            }
            let s = status(&self.members[i].client_url).await?;
            self.members[i].id = s.header.map(|h| h.member_id).unwrap_or_default();
            if s.leader == 0 || leader.is_some_and(|l| l != s.leader) {
                return None;
            }
            leader = Some(s.leader);
        }
        let leader = leader?;
        self.members.iter().position(|m| m.running && m.id == leader)
    }

    /// The index of the current leader (waits for agreement up to `timeout`).
    pub async fn leader(&mut self, timeout: Duration) -> anyhow::Result<usize> {
        self.wait_ready(timeout).await?;
        self.agreed_leader().await.context("etcd leader changed while looking it up")
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(m) = self.members.get_mut(i) {
            m.proc.kill();
            m.running = false;
        }
    }

    /// Starts member `i` again on its data directory.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        let m = self.members.get_mut(i).context("no such etcd member")?;
        m.proc.restart()?;
        m.running = true;
        let url = m.client_url.clone();
        wait_until("the restarted etcd member to answer", START_TIMEOUT, || async { status(&url).await.is_some() })
            .await
    }

    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }
}

fn member_args(name: &str, dir: &Path, client: u16, peer: u16, initial: &str, token: &str) -> Vec<String> {
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    vec![
        format!("--name={name}"),
        format!("--data-dir={}", dir.join(name).display()),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster={initial}"),
        "--initial-cluster-state=new".into(),
        format!("--initial-cluster-token={token}"),
        "--logger=zap".into(),
        "--log-outputs=stderr".into(),
        "--log-level=warn".into(),
    ]
}

/// One member's Status, or `None` if it does not answer in time.
pub async fn status(url: &str) -> Option<pb::StatusResponse> {
    let ch = endpoint(url).ok()?.connect_lazy();
    let call = async move { MaintenanceClient::new(ch).status(pb::StatusRequest {}).await };
    match tokio::time::timeout(STATUS_TIMEOUT, call).await {
        Ok(Ok(r)) => Some(r.into_inner()),
        _ => None,
    }
}

fn endpoint(url: &str) -> anyhow::Result<Endpoint> {
    Ok(Endpoint::from_shared(url.to_string())
        .with_context(|| format!("bad etcd url {url}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(1)))
}

/// A KV client on one connection to one member (cheap to clone).
#[derive(Clone)]
pub struct EtcdKv {
    kv: KvClient<Channel>,
    timeout: Duration,
}

impl EtcdKv {
    /// Connects lazily to `url`; every call gives up after `timeout`.
    pub fn new(url: &str, timeout: Duration) -> anyhow::Result<EtcdKv> {
        Ok(EtcdKv { kv: KvClient::new(endpoint(url)?.connect_lazy()), timeout })
    }

    async fn call<T, F, Fut>(&self, f: F) -> anyhow::Result<T>
    where
        F: FnOnce(KvClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match tokio::time::timeout(self.timeout, f(self.kv.clone())).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(anyhow::anyhow!("etcd: {:?}: {}", s.code(), s.message())),
            Err(_) => Err(anyhow::anyhow!("etcd: no answer within {:?}", self.timeout)),
        }
    }

    pub async fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        let msg = pb::PutRequest { key: key.into(), value: value.to_vec(), ..Default::default() };
        self.call(|mut c| async move { c.put(require_leader(msg)).await }).await.map(drop)
    }

    /// Linearizable read; the value's length (0 if absent).
    pub async fn get(&self, key: &str) -> anyhow::Result<usize> {
        let msg = pb::RangeRequest { key: key.into(), ..Default::default() };
        let r = self.call(|mut c| async move { c.range(require_leader(msg)).await }).await?;
        Ok(r.kvs.first().map_or(0, |kv| kv.value.len()))
    }

    /// Linearizable existence check (`count_only`).
    pub async fn exists(&self, key: &str) -> anyhow::Result<bool> {
        let msg = pb::RangeRequest { key: key.into(), count_only: true, ..Default::default() };
        Ok(self.call(|mut c| async move { c.range(require_leader(msg)).await }).await?.count > 0)
    }

    /// Deletes every key that starts with `prefix`; how many went.
    pub async fn delete_prefix(&self, prefix: &str) -> anyhow::Result<i64> {
        let msg = pb::DeleteRangeRequest { key: prefix.into(), range_end: prefix_end(prefix), ..Default::default() };
        Ok(self.call(|mut c| async move { c.delete_range(require_leader(msg)).await }).await?.deleted)
    }

    pub async fn delete(&self, key: &str) -> anyhow::Result<()> {
        let msg = pb::DeleteRangeRequest { key: key.into(), ..Default::default() };
        self.call(|mut c| async move { c.delete_range(require_leader(msg)).await }).await.map(drop)
    }
}

/// The range end that selects every key starting with `prefix` (etcd's rule:
/// the prefix with its last byte below 0xff incremented).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Adds etcd's `hasleader: true` metadata (fail fast when a member has no leader).
fn require_leader<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert("hasleader", MetadataValue::from_static("true"));
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges_follow_etcd() {
        assert_eq!(prefix_end("bench/"), b"bench0".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }
}
