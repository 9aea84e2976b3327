//! `mooncake up`: a local cluster in the foreground — masters and store
//! nodes as child processes on loopback, data under a directory it prints —
//! until Ctrl-C, which stops everything cleanly.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use mooncake_local_cluster::LocalCluster;

#[derive(clap::Args)]
pub struct UpArgs {
    /// Number of masters (1, 3 or 5).
    #[arg(long, default_value_t = 3)]
    pub masters: u64,
    /// Number of store nodes.
    #[arg(long, default_value_t = 2)]
    pub stores: u64,
    /// Segment size of each store node.
    #[arg(long = "segment-size", default_value = "512MiB")]
    pub segment_size: String,
    /// Data and logs directory (default: a new directory under the temp dir, kept).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// An extra flag for every master (repeatable), e.g.
    /// `--master-arg=--client_ttl=3 --master-arg=--default_kv_lease_ttl=500`
    /// for a cluster with short TTLs.
    #[arg(long = "master-arg", value_name = "FLAG", allow_hyphen_values = true)]
    pub master_args: Vec<String>,
    /// A flag passed to every store node (repeat for several), e.g.
    /// `--store-arg=--ucx` for store nodes that serve UCX readers.
    #[arg(long = "store-arg", value_name = "FLAG", allow_hyphen_values = true)]
    pub store_args: Vec<String>,
}

/// Starts the cluster (`master_args` go to every master, `store_args` to
/// every store node) and waits until it serves.
pub async fn start(
    masters: u64,
    stores: u64,
    segment_size: &str,
    dir: PathBuf,
    master_args: &[String],
    store_args: &[&str],
) -> anyhow::Result<LocalCluster> {
    // One binary runs every role: `mooncake master` and `mooncake store`.
    let me = std::env::current_exe()?;
    let mut builder = LocalCluster::builder()
        .master_command(&me, &["master"])
        .store_command(&me, &["store"])
        .masters(masters)
        .stores(stores)
        .segment_size(segment_size)
        .dir(dir);
    for a in master_args {
        builder = builder.master_arg(a);
    }
    for a in store_args {
        builder = builder.store_arg(*a);
    }
    let cluster = builder.start().map_err(anyhow::Error::msg)?;
    let ready = async {
        let (leader, term) = cluster.wait_for_leader(Duration::from_secs(20)).await?;
        cluster.wait_for_segments(stores, Duration::from_secs(20)).await?;
        Ok::<_, String>((leader, term))
    };
    match ready.await {
        Ok((leader, term)) => {
            eprintln!("cluster up: leader is master {leader} (term {term}); {stores} store nodes mounted");
            Ok(cluster)
        }
        Err(e) => anyhow::bail!("{e}\n{}", cluster.log_tails(20)),
    }
}

/// Writes `<dir>/mooncake.json`, the settings file vLLM, SGLang and LMCache
/// read through `MOONCAKE_CONFIG_PATH` (upstream's keys), naming this
/// cluster's masters, and `admin_token_file` (ours, ignored by the
/// frameworks, read by `mooncake_rs`): a local cluster is its user's, so the
/// frameworks' forced cache resets work there. Returns its path.
fn write_framework_config(
    dir: &std::path::Path,
    masters: &str,
    admin_token: &std::path::Path,
) -> anyhow::Result<PathBuf> {
    let doc = serde_json::json!({
        "local_hostname": "localhost",
        "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": 0,
        "local_buffer_size": 64 << 20,
        "protocol": "tcp",
        "device_name": "",
        "master_server_address": masters,
        "admin_token_file": admin_token,
    });
    let path = dir.join("mooncake.json");
    std::fs::write(&path, format!("{doc:#}\n")).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

pub fn default_dir(what: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mooncake-{what}-{}", std::process::id()))
}

pub async fn run(a: UpArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.masters >= 1 && a.masters % 2 == 1, "--masters {} must be odd (1, 3, 5)", a.masters);
    let dir = a.dir.unwrap_or_else(|| default_dir("up"));
    eprintln!("starting {} masters and {} store nodes; data and logs in {}", a.masters, a.stores, dir.display());
    let store_args: Vec<&str> = a.store_args.iter().map(String::as_str).collect();
    let mut cluster = start(a.masters, a.stores, &a.segment_size, dir, &a.master_args, &store_args).await?;
    let masters = cluster.master_addrs().join(",");
    let admin_token = cluster.dir().join(mooncake_auth::admin::ADMIN_TOKEN_FILE);
    let config = write_framework_config(cluster.dir(), &masters, &admin_token)?;
    println!("masters: {masters}");
    println!("try:     export MOONCAKE_MASTERS={masters}");
    println!(
        "admin:   export MOONCAKE_ADMIN_TOKEN_FILE={}   (for mooncake member/snapshot/client evict)",
        admin_token.display()
    );
    println!(
        "vLLM, SGLang, LMCache: export MOONCAKE_CONFIG_PATH={}   (with the admin token: their cache resets work)",
        config.display()
    );
    println!("         mooncake status; echo hello | mooncake put greeting -; mooncake get greeting");
    println!("Ctrl-C stops everything.");
    crate::store::wait_for_signal().await;
    eprintln!("stopping the cluster");
    cluster.stop();
    eprintln!("stopped; data kept in {}", cluster.dir().display());
    Ok(())
}
