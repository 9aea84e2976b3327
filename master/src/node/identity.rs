//! Who this master is and which cluster it belongs to, settled before Raft
//! starts: the cluster secret and the keys derived from it, the cluster id,
//! the peers heard from, the refusal of a founding member whose data dir was
//! wiped, and the bootstrap of a new cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mooncake_auth::{ClusterSecret, MacKey};
use mooncake_raft_store::{LogStore, Raft};
use openraft::BasicNode;

use crate::node::config::MasterConfig;
use crate::raft::cluster_id::{ClusterId, founding_id};
use crate::raft::peers_heard::PeersHeard;
use crate::rpc::raft_service::heard_from_mac;

/// This master's identity in its cluster.
pub(super) struct Identity {
    pub(super) cluster: Arc<ClusterId>,
    pub(super) heard: Arc<PeersHeard>,
    pub(super) secret: ClusterSecret,
    /// MACs every Raft message between masters.
    pub(super) raft_key: MacKey,
    pub(super) admin_token: mooncake_auth::admin::AdminToken,
}

impl Identity {
    /// Loads (or, on a founding member's first start, creates) the cluster
    /// secret and writes the admin token beside it; reads the cluster id
    /// and, on a founding member with no state, refuses to start if a peer
    /// ever heard from this id (its votes and log are gone).
    pub(super) async fn establish(
        cfg: &MasterConfig,
        log: &LogStore,
        tls: Option<&mooncake_tls::TlsConfig>,
    ) -> anyhow::Result<Identity> {
        let cluster = Arc::new(ClusterId::load(log.clone()).context("reading the cluster id")?);
        let heard = Arc::new(
            PeersHeard::load(&cfg.data_dir)
                .with_context(|| format!("reading the peers heard from in {}", cfg.data_dir.display()))?,
        );
        let sole_founder = cfg.initial_cluster.as_ref().is_some_and(|c| c.0.len() == 1);
        let (secret, origin) = ClusterSecret::load(&cfg.data_dir, cfg.cluster_secret_file.as_deref(), sole_founder)?;
        tracing::info!(?origin, "cluster secret loaded");
        let raft_key = secret.key("raft");
        let admin_token = mooncake_auth::admin::admin_token(&secret);
        let token_file = cfg.data_dir.join(mooncake_auth::admin::ADMIN_TOKEN_FILE);
        mooncake_auth::admin::write_token_file(&token_file, &admin_token)?;
        // No cluster id: a data dir that never held this master's state (or
        // was wiped). A founding member checks its peers never heard from it.
        if cluster.get().is_none()
            && cfg.restore.is_none()
            && let Some(c) = &cfg.initial_cluster
        {
            let id = founding_id(&cfg.cluster_name, &c.0);
            refuse_if_known(cfg.id, &cfg.data_dir, &id, &c.0, &raft_key, tls).await?;
        }
        if let Some(c) = &cfg.initial_cluster {
            let id = cluster.adopt(&founding_id(&cfg.cluster_name, &c.0)).context("recording the cluster id")?;
            tracing::info!(cluster_id = %id, "cluster id");
        }
        Ok(Identity { cluster, heard, secret, raft_key, admin_token })
    }
}

/// How long a master with an empty data dir waits for each peer's answer
/// to `HeardFrom` (a peer that is down cannot vouch either way).
const HEARD_FROM_TIMEOUT: Duration = Duration::from_secs(2);

/// A founding member whose data dir holds no state asks the other founding
/// members whether they ever had a Raft exchange with its id. If one did,
/// this master lost the votes and log it promised (its data dir was wiped or
/// replaced): starting blank under the same id could let it vote twice in a
/// term, so it refuses and says how to replace it (`peers_heard.rs`).
async fn refuse_if_known(
    id: u64,
    data_dir: &std::path::Path,
    cluster_id: &str,
    members: &BTreeMap<u64, String>,
    raft_key: &MacKey,
    tls: Option<&mooncake_tls::TlsConfig>,
) -> anyhow::Result<()> {
    use mooncake_proto::raft::HeardFromRequest;
    use mooncake_proto::raft::raft_service_client::RaftServiceClient;
    for (peer, addr) in members.iter().filter(|(peer, _)| **peer != id) {
        let asked = async {
            let mut c = RaftServiceClient::new(mooncake_tls::grpc::endpoint(addr, tls).ok()?.connect().await.ok()?);
            let mac = heard_from_mac(raft_key, id);
            c.heard_from(HeardFromRequest { node_id: id, mac }).await.ok().map(|r| r.into_inner())
        };
        let Ok(Some(answer)) = tokio::time::timeout(HEARD_FROM_TIMEOUT, asked).await else {
            continue;
        };
        if answer.heard && answer.cluster_id == cluster_id {
            anyhow::bail!(
                "data dir {} holds no state, but master {peer} ({addr}) has had Raft exchanges with master {id} of \
                 cluster {cluster_id}: this master lost the votes and log it promised (wiped or replaced disk). It \
                 must not rejoin under id {id}. Replace it: start a fresh master with a NEW id and --join, then \
                 `mooncake member add <new-id> <addr>` and `mooncake member remove {id}` (docs/OPERATIONS.md, \
                 Membership)",
                data_dir.display()
            );
        }
    }
    Ok(())
}

/// Initializes the cluster on a pristine founding member. Every founding
/// member does this with the same membership, which openraft allows; a
/// member that already has state skips it.
pub(super) async fn bootstrap(raft: &Raft, members: &BTreeMap<u64, String>) -> anyhow::Result<()> {
    if raft.is_initialized().await.context("raft state")? {
        return Ok(());
    }
    let nodes: BTreeMap<u64, BasicNode> = members.iter().map(|(id, a)| (*id, BasicNode::new(a))).collect();
    match raft.initialize(nodes).await {
        Ok(()) => tracing::info!(members = ?members, "bootstrapped the cluster"),
        Err(e) => tracing::info!(error = %e, "not bootstrapping: already initialized"),
    }
    Ok(())
}
