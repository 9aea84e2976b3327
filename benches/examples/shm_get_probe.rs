//! Where a same-host (shm) 4 MiB get's time goes: a local cluster (3
//! masters, 1 store node, the `mooncake` binary), one shm client, 40
//! objects, then gets timed whole and in their two halves: the replica
//! list from the leader, and the copy out of the mapped segment with its
//! checksum. Then GetReplicaList alone, back to back, and the leader's own
//! handling time of it (its metrics). Compare with `mooncake bench data`'s
//! shm get row; docs/PERFORMANCE.md has what it showed.
//!
//!     cargo build --release --bin mooncake
//!     cargo run --release -p mooncake-benches --example shm_get_probe [-- --rounds 400] [-- --current-thread]
//!
//! `--current-thread` runs the client on a current-thread runtime (no hops
//! between the client's own threads).
// Test support: a failed unwrap or expect is the probe failing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use mooncake_benches::baseline::raw_tcp::prefaulted;
use mooncake_benches::cluster::{Cluster, Spec};
use mooncake_benches::metrics::{histogram_mean_ms, scrape};
use mooncake_client::remote;
use mooncake_transfer::{Protocol, TcpConfig};

const OBJECT_BYTES: usize = 4 << 20;
const OBJECTS: usize = 40;

fn p50_ms(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize =
        args.iter().position(|a| a == "--rounds").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(400);
    let current_thread = args.iter().any(|a| a == "--current-thread");
    let exe = mooncake_local_cluster::find_binary("mooncake").map_err(anyhow::Error::msg)?;
    let rt = if current_thread {
        tokio::runtime::Builder::new_current_thread().enable_all().build()?
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?
    };
    rt.block_on(async {
        let spec = Spec { masters: 3, stores: 1, segment_size: "512MiB", prefault: true };
        let cluster = Cluster::start(&exe, spec, &[]).await?;
        let client = cluster.client(Protocol::Shm, &TcpConfig::default()).await?;
        let data = vec![7u8; OBJECT_BYTES];
        for i in 0..OBJECTS {
            client.put(&format!("probe/{i}"), &data, &Default::default()).await?;
        }
        let mut buf = prefaulted(OBJECT_BYTES);
        let (mut whole, mut list, mut copy, mut lists_alone) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            let key = format!("probe/{}", r % OBJECTS);
            let t = Instant::now();
            let n = client.get_into(&key, &mut buf).await?;
            whole.push(t.elapsed());
            assert_eq!(n, OBJECT_BYTES);
            let t = Instant::now();
            let l = client.master().get_replica_list(client.client_id(), &key).await?;
            list.push(t.elapsed());
            let r = &l.replicas[0];
            let t = Instant::now();
            client.engine().read_checksummed(&remote(r), r.offset, &mut buf).await?;
            copy.push(t.elapsed());
        }
        for r in 0..rounds {
            let t = Instant::now();
            client.master().get_replica_list(client.client_id(), &format!("probe/{}", r % OBJECTS)).await?;
            lists_alone.push(t.elapsed());
        }
        let (leader, _) = cluster.wait_for_leader(Duration::from_secs(10)).await.map_err(anyhow::Error::msg)?;
        let node = cluster.node(mooncake_local_cluster::Role::Master, leader).expect("leader");
        let handled = histogram_mean_ms(&scrape(&node.http)?, "mooncake_rpc_duration_seconds", Some("GetReplicaList"));
        let runtime = if current_thread { "current-thread" } else { "2 workers" };
        println!("shm get probe: {rounds} gets of 4 MiB over {OBJECTS} objects, client runtime {runtime}, p50");
        println!("  get_into (whole)                      {:.3} ms", p50_ms(whole));
        println!("  GetReplicaList, between copies        {:.3} ms", p50_ms(list));
        println!("  copy + crc32c from shm                {:.3} ms", p50_ms(copy));
        println!("  GetReplicaList, back to back          {:.3} ms", p50_ms(lists_alone));
        let handled = handled.map_or("-".to_string(), |(ms, _)| format!("{ms:.3} ms"));
        println!("  GetReplicaList handled on the leader  {handled} (mean)");
        anyhow::Ok(())
    })
}
