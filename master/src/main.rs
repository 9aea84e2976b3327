//! `mooncake-master`: runs one master until SIGINT/SIGTERM.

use clap::Parser;

/// mimalloc instead of glibc malloc, as in the `mooncake` binary (see
/// docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    mooncake_master::run(mooncake_master::MasterConfig::parse()).await
}
