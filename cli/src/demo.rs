//! `mooncake demo`: the README's "run" command. Starts a local cluster like
//! `up`, runs a KV-cache-shaped workload (prefill puts of 4 MiB blocks,
//! decode gets that verify every byte), SIGKILLs the master leader halfway
//! and keeps going, prints a summary, stops everything and exits 0 only if
//! every byte read back was the byte written.

use std::time::{Duration, Instant};

use anyhow::Context;
use mooncake_client::{Client, ClientConfig, PutOptions, PutOutcome, parse_size};
use mooncake_local_cluster::Role;
use mooncake_transfer::Protocol;

#[derive(clap::Args)]
pub struct DemoArgs {
    /// Prefill blocks to put.
    #[arg(long, default_value_t = 96)]
    pub blocks: u64,
    /// Size of one KV-cache block.
    #[arg(long = "block-size", default_value = "4MiB", value_parser = parse_size)]
    pub block_size: u64,
    /// Replicas per block.
    #[arg(long, default_value_t = 2)]
    pub replicas: u32,
    /// Decode gets per prefill put.
    #[arg(long = "gets-per-put", default_value_t = 2)]
    pub gets_per_put: u64,
    #[arg(long, default_value_t = 2)]
    pub stores: u64,
    #[arg(long = "segment-size", default_value = "1GiB")]
    pub segment_size: String,
    /// Transport for the workload client: tcp, shm, auto or ucx (reads
    /// over UCX from store nodes that serve it: the demo starts them with
    /// `--ucx`; needs a build with feature `ucx`).
    #[arg(long, alias = "transport", default_value = "tcp")]
    pub protocol: String,
    /// Do not kill the leader halfway.
    #[arg(long = "no-kill")]
    pub no_kill: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Deterministic content of a block, so gets verify without keeping copies.
fn fill(key: &str, buf: &mut [u8]) {
    let mut x = key.bytes().fold(0x9e37_79b9_7f4a_7c15_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

#[derive(Default)]
struct Phase {
    latencies: Vec<Duration>,
    bytes: u64,
    busy: Duration,
    errors: u64,
}

impl Phase {
    fn record(&mut self, d: Duration, bytes: u64) {
        self.latencies.push(d);
        self.bytes += bytes;
        self.busy += d;
    }
    fn pct(&self, p: f64) -> Duration {
        let mut v = self.latencies.clone();
        v.sort();
        v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default()
    }
    fn gbps(&self) -> f64 {
        if self.busy.is_zero() { 0.0 } else { self.bytes as f64 / self.busy.as_secs_f64() / 1e9 }
    }
    fn row(&self, name: &str) -> String {
        format!(
            "{name:<8} {:>6} {:>8} {:>9.2} {:>10.2} {:>10.2}",
            self.latencies.len(),
            self.errors,
            self.gbps(),
            self.pct(0.5).as_secs_f64() * 1e3,
            self.pct(0.99).as_secs_f64() * 1e3
        )
    }
}

struct Failover {
    killed: u64,
    gap: Duration,
}

pub async fn run(a: DemoArgs) -> anyhow::Result<()> {
    let protocol: Protocol = a.protocol.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let dir = crate::up::default_dir("demo");
    eprintln!("demo: starting 3 masters and {} store nodes in {}", a.stores, dir.display());
    let ucx = matches!(protocol, Protocol::Ucx);
    let store_args: &[&str] = if ucx { &["--ucx"] } else { &[] };
    let mut cluster = crate::up::start(3, a.stores, &a.segment_size, dir.clone(), &[], store_args).await?;
    let mut cfg = ClientConfig::new(cluster.master_addrs());
    cfg.protocol = protocol;
    let client = Client::connect(cfg).await.context("connecting the workload client")?;
    let mut outcome = workload(&a, &client, &mut cluster).await;
    if ucx && let Ok((_, get, _, _)) = &outcome {
        // The point of `--transport ucx`: the verified gets really crossed UCX.
        let over_ucx = transport_read_bytes(&client, mooncake_transfer::TransportKind::Ucx);
        eprintln!("demo: {over_ucx} of {} bytes read came over UCX", get.bytes);
        if over_ucx < get.bytes {
            outcome = Err(anyhow::anyhow!(
                "only {over_ucx} of {} bytes read came over UCX; the rest fell back to TCP (do the store nodes \
                 serve UCX? see their logs)",
                get.bytes
            ));
        }
    }
    client.close().await;
    cluster.stop();
    let (put, get, verified, failover) = match outcome {
        Ok(v) => v,
        Err(e) => {
            eprintln!("{}", cluster.log_tails(15));
            return Err(e);
        }
    };
    summary(&a, &put, &get, verified, failover.as_ref());
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
    anyhow::ensure!(put.errors == 0 && get.errors == 0, "{} puts and {} gets failed", put.errors, get.errors);
    Ok(())
}

/// Bytes `client` read over transport `kind`, from every peer.
fn transport_read_bytes(client: &Client, kind: mooncake_transfer::TransportKind) -> u64 {
    client.engine().stats().snapshot().iter().filter(|(k, _, _)| *k == kind).map(|(_, _, s)| s.read_bytes).sum()
}

async fn workload(
    a: &DemoArgs,
    client: &Client,
    cluster: &mut mooncake_local_cluster::LocalCluster,
) -> anyhow::Result<(Phase, Phase, u64, Option<Failover>)> {
    let (mut put, mut get) = (Phase::default(), Phase::default());
    let size = a.block_size as usize;
    let (mut data, mut back) = (vec![0u8; size], vec![0u8; size]);
    let opts = PutOptions { replicas: a.replicas, ..Default::default() };
    let mut verified = 0u64;
    let mut killed: Option<(u64, Instant)> = None;
    let mut failover = None;
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for i in 0..a.blocks {
        if i == a.blocks / 2 && !a.no_kill {
            let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await.map_err(anyhow::Error::msg)?;
            cluster.kill(Role::Master, leader);
            eprintln!("\ndemo: SIGKILLed the master leader (master {leader}); the workload keeps going");
            killed = Some((leader, Instant::now()));
        }
        let key = format!("prefill/req-{}/block-{}", i / 8, i % 8);
        fill(&key, &mut data);
        let t = Instant::now();
        match client.put(&key, &data, &opts).await {
            Ok(PutOutcome::Stored) => put.record(t.elapsed(), size as u64),
            Ok(PutOutcome::KeptExisting) => {
                put.errors += 1;
                eprintln!("\nput {key}: the key already existed (a fresh cluster should not have it)");
            }
            Err(e) => {
                put.errors += 1;
                eprintln!("\nput {key}: {e}");
            }
        }
        if let (Some((leader, at)), None) = (killed, &failover)
            && t >= at
            && put.errors == 0
        {
            failover = Some(Failover { killed: leader, gap: at.elapsed() });
        }
        for _ in 0..a.gets_per_put {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let j = rng % (i + 1);
            let key = format!("prefill/req-{}/block-{}", j / 8, j % 8);
            let t = Instant::now();
            match client.get_into(&key, &mut back).await {
                Ok(n) => {
                    get.record(t.elapsed(), n as u64);
                    fill(&key, &mut data);
                    anyhow::ensure!(n == size && back == data, "get {key}: bytes differ from what was put");
                    verified += n as u64;
                }
                Err(e) => {
                    get.errors += 1;
                    eprintln!("\nget {key}: {e}");
                }
            }
        }
        progress(i + 1, a.blocks, &put, &get);
    }
    eprintln!();
    Ok((put, get, verified, failover))
}

/// A redrawn bar on a terminal; a line per 10 % otherwise (logs, CI).
fn progress(done: u64, total: u64, put: &Phase, get: &Phase) {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        if done * 10 / total.max(1) != (done - 1) * 10 / total.max(1) || done == total {
            eprintln!("{done}/{total} blocks  puts {}  gets {}", put.latencies.len(), get.latencies.len());
        }
        return;
    }
    let width = 30;
    let filled = (done * width / total.max(1)) as usize;
    eprint!(
        "\r[{}{}] {done}/{total} blocks  puts {}  gets {}  ",
        "#".repeat(filled),
        " ".repeat(width as usize - filled),
        put.latencies.len(),
        get.latencies.len()
    );
}

fn summary(a: &DemoArgs, put: &Phase, get: &Phase, verified: u64, failover: Option<&Failover>) {
    if a.json {
        let phase = |p: &Phase| {
            serde_json::json!({"ops": p.latencies.len(), "errors": p.errors, "gb_per_s": p.gbps(),
                "p50_ms": p.pct(0.5).as_secs_f64() * 1e3, "p99_ms": p.pct(0.99).as_secs_f64() * 1e3})
        };
        let v = serde_json::json!({"block_bytes": a.block_size, "replicas": a.replicas, "put": phase(put), "get": phase(get),
            "bytes_verified": verified, "failover_gap_ms": failover.map(|f| f.gap.as_secs_f64() * 1e3)});
        println!("{v}");
        return;
    }
    println!(
        "\nmooncake demo: {} blocks of {} bytes, {} replicas, protocol {}",
        a.blocks, a.block_size, a.replicas, a.protocol
    );
    println!("{:<8} {:>6} {:>8} {:>9} {:>10} {:>10}", "op", "ops", "errors", "GB/s", "p50 ms", "p99 ms");
    println!("{}", put.row("put"));
    println!("{}", get.row("get"));
    match failover {
        Some(f) => println!(
            "failover: master {} SIGKILLed; first put after it acknowledged {:.0} ms later",
            f.killed,
            f.gap.as_secs_f64() * 1e3
        ),
        None => println!("failover: not exercised"),
    }
    println!("bytes verified: {verified} ({:.1} MiB), all equal to what was put", verified as f64 / 1048576.0);
}
