//! `mooncake events --zmq ENDPOINT --backend-id ID`: upstream Mooncake's
//! KV-event feed (ZMQ PUB, its wire format) from the masters' watch, so
//! routers built for upstream's feed (Dynamo's KV router) subscribe to it
//! unchanged; gapless across master failovers (docs/EVENTS.md, "The ZMQ
//! feed"). Runs until Ctrl-C, then prints what it published and where to
//! resume.

use std::sync::Arc;

use mooncake_zmq_events::{BridgeConfig, FeedOptions, Sequence};

use crate::MastersArg;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum SequenceArg {
    /// The revision of the entry each message is about (survives restarts
    /// and failovers; skips revisions without events).
    Revision,
    /// 1, 2, 3, ... per message of this process (upstream's numbering).
    Contiguous,
}

#[derive(clap::Args)]
pub struct EventsArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// Where to bind the PUB socket (upstream's kv_events_bind_endpoint).
    #[arg(long = "zmq", value_name = "ENDPOINT")]
    endpoint: String,
    /// Names this feed to subscribers (upstream's kv_events_backend_id).
    #[arg(long = "backend-id")]
    backend_id: String,
    /// Only keys that start with this.
    #[arg(long, default_value = "")]
    prefix: String,
    /// The first revision to publish (0: from now).
    #[arg(long = "from-revision", default_value_t = 0)]
    from_revision: u64,
    /// What the sequence frame carries.
    #[arg(long, value_enum, default_value = "revision")]
    sequence: SequenceArg,
    #[arg(long = "model-name")]
    model_name: Option<String>,
    #[arg(long = "block-size")]
    block_size: Option<u32>,
    /// The `tenant_id` field of every event; by default the tenant the
    /// feed watches (`--tenant`, docs/TENANTS.md).
    #[arg(long = "tenant-id")]
    tenant_id: Option<String>,
    #[arg(long = "dp-rank", default_value_t = 0)]
    dp_rank: u32,
    /// Leave out the legacy fields (`type`, `block_hashes`, `parent_block_hash`).
    #[arg(long = "no-legacy-compat")]
    no_legacy_compat: bool,
    /// Bind an endpoint other hosts can reach although the feed is neither
    /// encrypted nor authenticated (no ZMQ CURVE here): anyone who connects
    /// reads every key of the watched tenant. Without it only loopback
    /// endpoints are bound.
    #[arg(long)]
    insecure: bool,
}

pub async fn run(a: EventsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!a.backend_id.is_empty(), "--backend-id must not be empty: subscribers tell feeds apart by it");
    let master = Arc::new(a.masters.client()?);
    let tenant_id = match a.tenant_id {
        Some(t) => t,
        None => a.masters.tenant()?.name().to_string(),
    };
    let cfg = BridgeConfig {
        endpoint: a.endpoint.clone(),
        prefix: a.prefix,
        from_revision: a.from_revision,
        sequence: match a.sequence {
            SequenceArg::Revision => Sequence::Revision,
            SequenceArg::Contiguous => Sequence::Contiguous,
        },
        options: FeedOptions {
            backend_id: a.backend_id,
            model_name: a.model_name,
            block_size: a.block_size,
            tenant_id,
            dp_rank: a.dp_rank,
            legacy_compat: !a.no_legacy_compat,
            ..Default::default()
        },
        insecure: a.insecure,
        planted_resync_without_clear: false,
    };
    eprintln!("publishing KV events on {} (Ctrl-C stops)", a.endpoint);
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let p = mooncake_zmq_events::run(master, cfg, stop).await?;
    eprintln!(
        "published {} events in {} messages ({} resyncs, {} subscribers disconnected for not reading); resume with \
         --from-revision {}",
        p.events, p.messages, p.resyncs, p.dropped_subscribers, p.next_revision
    );
    Ok(())
}
