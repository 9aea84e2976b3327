//! Where one commit's time goes: three real masters (the `mooncake-master`
//! binary, fsync on), one client doing sequential one-commit operations
//! (a put: PutStart from the leader's arena, then the PutEnd commit; and a
//! remove), then the masters' own histograms say how the time split.
//!
//!     cargo build --release --bin mooncake-master
//!     cargo run --release -p mooncake-benches --example commit_probe [-- --ops 2000] [-- --master-arg=FLAG]
//!
//! Rows (means over the run): the client's whole call; on the leader the
//! commit (proposal handed to Raft → applied), its log fsync, the
//! AppendEntries round trip to a follower; on a follower the time to handle
//! an AppendEntries (decode, append, fsync, answer) and its fsync. What the
//! commit holds beyond leader fsync + round trip is openraft's core and the
//! hand-offs between tasks.
// Test support: a failed unwrap or expect is the test failing (the
// workspace denies them in library code: Cargo.toml [workspace.lints]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mooncake_benches::metrics::{histogram_mean_ms as mean_ms, scrape};
use mooncake_local_cluster::LocalCluster;
use mooncake_proto::master::{PutStartRequest, Segment};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let ops: usize = args.iter().position(|a| a == "--ops").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(1000);
    let master_args: Vec<String> =
        args.iter().filter_map(|a| a.strip_prefix("--master-arg=")).map(String::from).collect();
    let masters: u64 =
        args.iter().position(|a| a == "--masters").and_then(|i| args.get(i + 1)?.parse().ok()).unwrap_or(3);
    let mut builder = LocalCluster::builder().masters(masters).stores(0);
    if let Ok(bin) = mooncake_local_cluster::find_binary("mooncake-master") {
        builder = builder.master_bin(bin);
    }
    for a in &master_args {
        builder = builder.master_arg(a.clone());
    }
    let cluster = builder.start().map_err(anyhow::Error::msg)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let (leader, client_ms, remove_ms) = rt.block_on(async {
        let (leader, _) = cluster.wait_for_leader(Duration::from_secs(20)).await.map_err(anyhow::Error::msg)?;
        let client = cluster.client().map_err(anyhow::Error::msg)?;
        let seg =
            Segment { id: 1, size: 1 << 34, endpoint: "127.0.0.1:1".into(), host_id: "h".into(), ..Default::default() };
        client.remount_segments(1, vec![seg]).await?;
        client.remount_segments(2, vec![]).await?;
        // Both client ids stay registered for the whole run (a short
        // client TTL would otherwise unmount the segment mid-run).
        let pinger = cluster.client().map_err(anyhow::Error::msg)?;
        tokio::spawn(async move {
            loop {
                let _ = pinger.ping(1).await;
                let _ = pinger.ping(2).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        let mut puts = Vec::with_capacity(ops);
        let mut removes = Vec::with_capacity(ops);
        for i in 0..ops {
            let key = format!("probe/{i}");
            let t = Instant::now();
            let req =
                PutStartRequest { client_id: 2, key: key.clone(), size: 4096, replica_num: 1, ..Default::default() };
            client.put_start(req).await.map_err(|e| anyhow::anyhow!("put {i}: {e}"))?;
            client.put_end(2, &key, 1).await?;
            puts.push(t.elapsed());
        }
        for i in 0..ops {
            let t = Instant::now();
            client.remove(&format!("probe/{i}"), true).await?;
            removes.push(t.elapsed());
        }
        puts.sort();
        removes.sort();
        let p50 = |v: &[Duration]| v[v.len() / 2].as_secs_f64() * 1e3;
        anyhow::Ok((leader, p50(&puts), p50(&removes)))
    })?;
    let mut rows: BTreeMap<&str, String> = BTreeMap::new();
    let leader_text = scrape(&cluster.node(mooncake_local_cluster::Role::Master, leader).expect("leader").http)?;
    let follower = cluster.master_ids().into_iter().find(|id| *id != leader).unwrap_or(leader);
    let follower_text = scrape(&cluster.node(mooncake_local_cluster::Role::Master, follower).expect("follower").http)?;
    let show = |m: Option<(f64, f64)>| m.map(|(ms, n)| format!("{ms:.3} ms (n={n})")).unwrap_or_else(|| "-".into());
    rows.insert("1 client: put p50 (PutStart + PutEnd commit)", format!("{client_ms:.3} ms"));
    rows.insert("1 client: remove p50 (one commit)", format!("{remove_ms:.3} ms"));
    // (row, on the leader?, histogram, label value): means from the masters' own metrics.
    let histograms: [(&str, bool, &str, Option<&str>); 7] = [
        ("leader: commit (to Raft -> applied)", true, "mooncake_commit_seconds", None),
        ("leader: Remove RPC handled", true, "mooncake_rpc_duration_seconds", Some("Remove")),
        ("leader: PutEnd RPC handled", true, "mooncake_rpc_duration_seconds", Some("PutEnd")),
        ("leader: log fsync", true, "mooncake_fsync_duration_seconds", None),
        ("leader: AppendEntries round trip", true, "mooncake_raft_rpc_seconds", Some("append")),
        ("follower: AppendEntries handled", false, "mooncake_raft_rpc_handled_seconds", Some("append")),
        ("follower: log fsync", false, "mooncake_fsync_duration_seconds", None),
    ];
    for (row, on_leader, name, label) in histograms {
        let text = if on_leader { &leader_text } else { &follower_text };
        rows.insert(row, show(mean_ms(text, name, label)));
    }
    println!("commit probe: {ops} ops each, {masters} masters, leader {leader} {master_args:?}");
    for (k, v) in rows {
        println!("  {k:<48} {v}");
    }
    Ok(())
}
