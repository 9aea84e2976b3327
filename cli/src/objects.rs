//! Object commands of the CLI: put, get, rm, ls, stat.

use std::io::{Read, Write};

use anyhow::Context;
use mooncake_client::{Client, ClientConfig, Pin, PutOptions, PutOutcome};
use mooncake_transfer::Protocol;

use crate::MastersArg;

#[derive(clap::Args)]
pub struct PutArgs {
    pub key: String,
    /// File to store, or `-` for standard input.
    pub file: String,
    #[command(flatten)]
    pub masters: MastersArg,
    /// Replicas (fewer are placed when fewer segments have room).
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    /// Fewest replicas to accept (default 1): with fewer segments with room
    /// the put fails instead of storing fewer copies.
    #[arg(long, default_value_t = 1)]
    pub min_replicas: u32,
    /// Eviction protection: none, soft, soft:<ttl ms> (a soft pin that
    /// lapses that long after the put) or hard.
    #[arg(long, default_value = "none")]
    pub pin: Pin,
    /// Transport: tcp, shm, rdma or auto.
    #[arg(long, default_value = "auto")]
    pub protocol: String,
    /// Replace the object if the key exists (readers see the old bytes or
    /// the new, never a mix). Without it, an existing key is kept.
    #[arg(long)]
    pub upsert: bool,
}

#[derive(clap::Args)]
pub struct GetArgs {
    pub key: String,
    /// Where to write the object (default: standard output).
    pub file: Option<String>,
    #[command(flatten)]
    pub masters: MastersArg,
    #[arg(long, default_value = "auto")]
    pub protocol: String,
}

#[derive(clap::Args)]
pub struct RmArgs {
    pub key: String,
    #[command(flatten)]
    pub masters: MastersArg,
    /// Remove even while a reader holds a lease.
    #[arg(long)]
    pub force: bool,
}

#[derive(clap::Args)]
pub struct LsArgs {
    /// Only keys starting with this.
    #[arg(default_value = "")]
    pub prefix: String,
    #[command(flatten)]
    pub masters: MastersArg,
    #[arg(long, default_value_t = 1000)]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct StatArgs {
    pub key: String,
    #[command(flatten)]
    pub masters: MastersArg,
    #[arg(long)]
    pub json: bool,
}

async fn connect(masters: &MastersArg, protocol: &str) -> anyhow::Result<Client> {
    let mut cfg = ClientConfig::new(masters.masters.clone());
    cfg.tls = masters.tls.load()?;
    cfg.admin_token = masters.admin_token()?;
    cfg.tenant = masters.tenant()?;
    cfg.protocol = protocol.parse::<Protocol>().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Client::connect(cfg).await?)
}

pub async fn put(a: PutArgs) -> anyhow::Result<()> {
    let mut data = Vec::new();
    if a.file == "-" {
        std::io::stdin().read_to_end(&mut data).context("reading standard input")?;
    } else {
        data = std::fs::read(&a.file).with_context(|| format!("reading {}", a.file))?;
    }
    let client = connect(&a.masters, &a.protocol).await?;
    let opts = PutOptions { replicas: a.replicas, min_replicas: a.min_replicas, pin: a.pin, ..Default::default() };
    let result = match a.upsert {
        true => client.upsert(&a.key, &data, &opts).await.map(|()| PutOutcome::Stored),
        false => client.put(&a.key, &data, &opts).await,
    };
    client.close().await;
    match result.with_context(|| format!("put {}", a.key))? {
        PutOutcome::Stored => {
            let crc = mooncake_client::checksum::crc32c(&data);
            eprintln!("stored {} ({} bytes, crc32c {crc:08x})", a.key, data.len());
        }
        // Mooncake's put: the first writer wins and the put succeeds.
        PutOutcome::KeptExisting => eprintln!("{} already exists; kept the existing object (nothing written)", a.key),
    }
    Ok(())
}

pub async fn get(a: GetArgs) -> anyhow::Result<()> {
    let client = connect(&a.masters, &a.protocol).await?;
    let result = client.get(&a.key).await;
    client.close().await;
    let data = result.with_context(|| format!("get {}", a.key))?;
    match &a.file {
        Some(f) => std::fs::write(f, &data).with_context(|| format!("writing {f}"))?,
        None => std::io::stdout().write_all(&data)?,
    }
    Ok(())
}

pub async fn rm(a: RmArgs) -> anyhow::Result<()> {
    a.masters.client()?.remove(&a.key, a.force).await.with_context(|| format!("rm {}", a.key))?;
    eprintln!("removed {}", a.key);
    Ok(())
}

pub async fn ls(a: LsArgs) -> anyhow::Result<()> {
    let objects = a.masters.client()?.list_objects(&a.prefix, a.limit).await?;
    if a.json {
        let rows: Vec<_> = objects
            .iter()
            .map(|o| serde_json::json!({"key": o.key, "size": o.size, "replicas": o.replicas.len(), "complete": o.status == 1}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    for o in &objects {
        let state = if o.status == 1 { "" } else { " (writing)" };
        println!("{:>12}  {}x  {}{state}", o.size, o.replicas.len(), o.key);
    }
    eprintln!("{} objects", objects.len());
    Ok(())
}

pub async fn stat(a: StatArgs) -> anyhow::Result<()> {
    let objects = a.masters.client()?.list_objects(&a.key, 1).await?;
    let o = objects.into_iter().find(|o| o.key == a.key).with_context(|| format!("object {:?} not found", a.key))?;
    if a.json {
        let replicas: Vec<_> = o
            .replicas
            .iter()
            .map(|r| serde_json::json!({"segment": format!("{:016x}", r.segment_id), "offset": r.offset, "len": r.len, "endpoint": r.endpoint, "host": r.host_id, "zone": r.zone}))
            .collect();
        let v = serde_json::json!({"key": o.key, "size": o.size, "checksum": format!("{:08x}", o.checksum), "complete": o.status == 1, "pin": o.pin, "soft_pin_ttl_ms": o.soft_pin_ttl_ms, "replicas": replicas});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("key:      {}", o.key);
    println!("size:     {} bytes", o.size);
    println!("checksum: crc32c {:08x}", o.checksum);
    println!("status:   {}", if o.status == 1 { "complete" } else { "writing" });
    let pin = ["none", "soft", "hard"].get(o.pin as usize).unwrap_or(&"?");
    match o.soft_pin_ttl_ms {
        0 => println!("pin:      {pin}"),
        ttl => println!("pin:      {pin} (lapses {ttl} ms after the put)"),
    }
    for r in &o.replicas {
        println!(
            "replica:  segment {:016x} [{}, +{}) at {} (host {}, zone {:?})",
            r.segment_id, r.offset, r.len, r.endpoint, r.host_id, r.zone
        );
    }
    Ok(())
}
