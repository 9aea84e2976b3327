//! `mooncake-master`: runs one master until SIGINT/SIGTERM.

use clap::Parser;
use mooncake_master::{MasterConfig, MasterNode};
use tracing_subscriber::EnvFilter;

fn init_tracing(format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn,sled=warn,h2=warn,tower=warn,hyper=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cfg = MasterConfig::parse();
    init_tracing(&cfg.log_format);
    if let Err(e) = cfg.validate() {
        eprintln!("mooncake-master: invalid configuration: {e}");
        std::process::exit(2);
    }
    let node = MasterNode::start(cfg).await?;
    wait_for_signal().await;
    tracing::info!("stopping");
    node.shutdown().await;
    Ok(())
}
