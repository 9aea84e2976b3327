//! `mooncake-master`: runs one master until SIGINT/SIGTERM.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mooncake_master::run(mooncake_master::MasterConfig::parse()).await
}
