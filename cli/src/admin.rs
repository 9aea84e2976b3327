//! Operator commands: `mooncake snapshot save`, `mooncake client list|evict`.

use std::time::Instant;

use anyhow::Context;
use clap::Subcommand;

use crate::MastersArg;

#[derive(Subcommand)]
pub enum SnapshotOp {
    /// Save a consistent metadata snapshot from the leader to FILE
    /// (checksummed, versioned); start a new cluster from it with
    /// `mooncake-master --restore FILE`.
    Save {
        file: String,
        #[command(flatten)]
        masters: MastersArg,
    },
}

#[derive(Subcommand)]
pub enum ClientOp {
    /// Registered clients, their segments and when the leader last heard them.
    List {
        #[command(flatten)]
        masters: MastersArg,
        #[arg(long)]
        json: bool,
    },
    /// Expire client ID now: unmount its segments instead of waiting for its TTL.
    Evict {
        /// Client id (decimal, or hex with 0x).
        id: String,
        #[command(flatten)]
        masters: MastersArg,
    },
}

pub async fn snapshot(op: SnapshotOp) -> anyhow::Result<()> {
    let SnapshotOp::Save { file, masters } = op;
    let start = Instant::now();
    eprintln!("asking the leader for a consistent snapshot…");
    let (header, image) = masters.client()?.export_snapshot().await.context("exporting the snapshot")?;
    let bytes = mooncake_raft_store::encode_snapshot_file(&image, header.applied_index, header.state_hash);
    let tmp = format!("{file}.partial");
    std::fs::write(&tmp, &bytes).with_context(|| format!("writing {tmp}"))?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).with_context(|| format!("syncing {tmp}"))?;
    std::fs::rename(&tmp, &file).with_context(|| format!("renaming {tmp} to {file}"))?;
    println!(
        "saved {file}: {} bytes, applied index {}, state hash {:016x}, schema v{}, in {:.2} s",
        bytes.len(),
        header.applied_index,
        header.state_hash,
        header.schema_version,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn parse_id(s: &str) -> anyhow::Result<u64> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.with_context(|| format!("{s:?} is not a client id (decimal, or hex with 0x)"))
}

pub async fn client(op: ClientOp) -> anyhow::Result<()> {
    match op {
        ClientOp::List { masters, json } => {
            let clients = masters.client()?.list_clients().await?;
            if json {
                let rows: Vec<_> = clients
                    .iter()
                    .map(|c| {
                        serde_json::json!({"id": c.id, "id_hex": format!("{:016x}", c.id), "segments": c.segments,
                            "segment_bytes": c.segment_bytes, "used_bytes": c.used_bytes,
                            "last_heartbeat_ms_ago": c.last_heartbeat_ms_ago, "registered_ms": c.registered_ms})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            println!("{:<18} {:>8} {:>14} {:>14} {:>12}", "CLIENT", "SEGMENTS", "CAPACITY", "USED", "LAST PING");
            for c in &clients {
                println!(
                    "0x{:016x} {:>8} {:>14} {:>14} {:>9} ms",
                    c.id,
                    c.segments.len(),
                    c.segment_bytes,
                    c.used_bytes,
                    c.last_heartbeat_ms_ago
                );
            }
        }
        ClientOp::Evict { id, masters } => {
            let id = parse_id(&id)?;
            println!("{}", masters.client()?.evict_client(id).await.with_context(|| format!("evicting {id:#x}"))?);
        }
    }
    Ok(())
}
