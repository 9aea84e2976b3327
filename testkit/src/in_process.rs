//! Masters in the test's own process ([`InProcessCluster`]): real
//! `MasterNode`s (their gRPC ports on loopback, sled with fsync, openraft)
//! started from the same configuration the binary parses, sharing one
//! Raft partition (`mooncake_master::raft::partition`) a test cuts and
//! heals. A failover here takes a second, not a process restart: isolate
//! the leader, watch another take over, heal.
//!
//! Test support: a cluster that does not come up fails the test with a
//! panic that says what it waited for.
// The panics are the test failing (the workspace denies them in libraries).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use mooncake_master::raft::partition::RaftPartition;
use mooncake_master::{MasterConfig, MasterNode};

/// `n` masters of one cluster, in this process.
pub struct InProcessCluster {
    nodes: Vec<Option<MasterNode>>,
    addrs: Vec<String>,
    partition: Arc<RaftPartition>,
    admin_token: mooncake_auth::admin::AdminToken,
    _dir: tempfile::TempDir,
}

impl InProcessCluster {
    /// Starts `n` founding masters with `extra` flags each (as the binary
    /// takes them) and waits for a leader.
    pub async fn start(n: u64, extra: &[&str]) -> InProcessCluster {
        let dir = tempfile::tempdir().expect("a temp dir");
        let secret = dir.path().join("cluster.secret");
        let admin_token =
            mooncake_auth::admin::admin_token(&mooncake_auth::ClusterSecret::create_file(&secret).expect("the secret"));
        let addrs: Vec<String> = (0..n).map(|_| format!("127.0.0.1:{}", crate::free_port().expect("a port"))).collect();
        let initial: Vec<String> = addrs.iter().enumerate().map(|(i, a)| format!("{}={a}", i + 1)).collect();
        let partition = Arc::new(RaftPartition::default());
        let mut starts = Vec::new();
        for id in 1..=n {
            let mut args = vec![
                "mooncake-master".to_string(),
                format!("--id={id}"),
                format!("--listen={}", addrs[(id - 1) as usize]),
                format!("--data-dir={}", dir.path().join(format!("master-{id}")).display()),
                format!("--cluster-secret-file={}", secret.display()),
                format!("--initial-cluster={}", initial.join(",")),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            let mut cfg = MasterConfig::try_parse_from(&args).expect("master flags");
            cfg.raft_partition = Some(partition.clone());
            starts.push(tokio::spawn(MasterNode::start(cfg)));
        }
        let mut nodes = Vec::new();
        for s in starts {
            nodes.push(Some(s.await.expect("the start task").expect("a master starts")));
        }
        let cluster = InProcessCluster { nodes, addrs, partition, admin_token, _dir: dir };
        cluster.wait_for_leader(&[], Duration::from_secs(10)).await;
        cluster
    }

    /// The masters' gRPC addresses, by id - 1.
    pub fn addrs(&self) -> Vec<String> {
        self.addrs.clone()
    }

    /// A master client of the cluster's admin, to every master.
    pub fn client(&self) -> mooncake_client::MasterClient {
        self.client_of(&self.ids())
    }

    /// A master client of the cluster's admin that knows only masters `ids`.
    pub fn client_of(&self, ids: &[u64]) -> mooncake_client::MasterClient {
        let addrs = ids.iter().map(|id| self.addrs[(*id - 1) as usize].clone()).collect();
        let cfg = mooncake_client::MasterClientConfig {
            admin_token: Some(self.admin_token.clone()),
            ..mooncake_client::MasterClientConfig::new(addrs)
        };
        mooncake_client::MasterClient::new(cfg).expect("a master client")
    }

    /// Master `id` (1-based), while it runs.
    pub fn node(&self, id: u64) -> &MasterNode {
        self.nodes[(id - 1) as usize].as_ref().expect("a running master")
    }

    /// The ids of the running masters.
    pub fn ids(&self) -> Vec<u64> {
        (1..=self.nodes.len() as u64).filter(|id| self.nodes[(*id - 1) as usize].is_some()).collect()
    }

    /// The leader most running masters outside `excluded` agree on, once a
    /// majority of the cluster does; panics after `within`.
    pub async fn wait_for_leader(&self, excluded: &[u64], within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        let majority = self.nodes.len() / 2 + 1;
        loop {
            let mut votes = std::collections::BTreeMap::<u64, usize>::new();
            for id in self.ids().into_iter().filter(|id| !excluded.contains(id)) {
                let m = self.node(id).shared.raft.metrics().borrow().clone();
                if let Some(leader) = m.current_leader.filter(|l| !excluded.contains(l)) {
                    *votes.entry(leader).or_default() += 1;
                }
            }
            if let Some((leader, _)) = votes.into_iter().find(|(_, n)| *n >= majority) {
                return leader;
            }
            assert!(Instant::now() < deadline, "no leader outside {excluded:?} within {within:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether master `id` believes it leads.
    pub fn thinks_it_leads(&self, id: u64) -> bool {
        let m = self.node(id).shared.raft.metrics().borrow().clone();
        m.current_leader == Some(id)
    }

    /// Cuts master `id`'s Raft links to every other master.
    pub fn isolate(&self, id: u64) {
        let all: Vec<u64> = (1..=self.nodes.len() as u64).collect();
        self.partition.isolate(id, &all);
    }

    /// Every Raft link back.
    pub fn heal(&self) {
        self.partition.heal();
    }

    /// Stops master `id` (its ports and Raft), as a crash would, but in
    /// this process.
    pub async fn stop(&mut self, id: u64) {
        if let Some(node) = self.nodes[(id - 1) as usize].take() {
            node.shutdown().await;
        }
    }

    /// Stops every master.
    pub async fn shutdown(mut self) {
        for id in 1..=self.nodes.len() as u64 {
            self.stop(id).await;
        }
    }
}
