//! One client's replay of its share of a trace against a mooncake-rs
//! cluster, as an inference instance uses a KV cache: per request, look up
//! the longest stored prefix of its blocks (one lease-free probe of all of
//! them), load that prefix and check every byte, then store the blocks
//! after what was loaded. [`Mode::Batch`] loads and stores with one batch
//! call each (as vLLM's and LMCache's connectors do); [`Mode::Single`] with
//! one call per block.

use std::time::{Duration, Instant};

use mooncake_client::{Client, ClientError, PutOptions, PutOutcome};

use super::Mode;
use super::blocks;
use super::file::Request;
use super::outcome::Outcome;

/// What every client of a replay shares.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub block_bytes: usize,
    /// Trace milliseconds per wall millisecond; 0: as fast as the cluster
    /// answers (each client starts its next request when the last ended).
    pub speedup: f64,
    pub mode: Mode,
}

/// Replays `requests` (this client's share, in trace order) from `start`.
pub async fn replay(client: &Client, requests: &[&Request], shape: Shape, start: Instant) -> Outcome {
    let mut out = Outcome::default();
    let most = requests.iter().map(|r| r.blocks.len()).max().unwrap_or(0);
    let mut loads = vec![0u8; most * shape.block_bytes];
    let mut stores = vec![0u8; most * shape.block_bytes];
    for r in requests {
        if shape.speedup > 0.0 {
            let due = start + Duration::from_secs_f64(r.timestamp_ms as f64 / 1e3 / shape.speedup);
            tokio::time::sleep_until(due.into()).await;
        }
        let keys: Vec<String> = r.blocks.iter().map(|b| blocks::key(*b)).collect();
        let t = Instant::now();
        let loaded = lookup_and_load(client, r, &keys, shape, &mut loads, &mut out).await;
        out.load_ns.push(t.elapsed().as_nanos() as u64);
        out.requests += 1;
        out.refs += r.blocks.len() as u64;
        out.hits += loaded as u64;
        if loaded < r.blocks.len() {
            store(client, &r.blocks[loaded..], &keys[loaded..], shape, &mut stores, &mut out).await;
        }
    }
    out.wall_ns = start.elapsed().as_nanos() as u64;
    out
}

/// Looks up the request's blocks and loads the stored prefix; returns how
/// many leading blocks were loaded with the right bytes.
async fn lookup_and_load(
    client: &Client,
    r: &Request,
    keys: &[String],
    shape: Shape,
    buf: &mut [u8],
    out: &mut Outcome,
) -> usize {
    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
    let mut prefix = 0;
    for found in client.batch_probe(&names).await {
        match found {
            Ok(true) => prefix += 1,
            Ok(false) => break,
            Err(e) => {
                out.failed(format!("probe {}: {e}", names[prefix]));
                break;
            }
        }
    }
    if prefix == 0 {
        return 0;
    }
    let bufs: Vec<&mut [u8]> = buf.chunks_mut(shape.block_bytes).take(prefix).collect();
    let results = match shape.mode {
        Mode::Batch => client.get_batch_into(&names[..prefix], bufs).await,
        Mode::Single => {
            let mut results = Vec::with_capacity(prefix);
            for (name, b) in names[..prefix].iter().zip(bufs) {
                results.push(client.get_into(name, b).await);
            }
            results
        }
    };
    let mut loaded = 0;
    for (i, res) in results.into_iter().enumerate() {
        let id = r.blocks[i];
        let bytes = &buf[i * shape.block_bytes..(i + 1) * shape.block_bytes];
        match res {
            Ok(n) if n == shape.block_bytes && blocks::holds(id, bytes) => loaded += 1,
            Ok(n) => {
                out.corrupt(format!("get {}: {n} bytes, not the block's", names[i]));
                break;
            }
            Err(ClientError::NotFound(_)) => {
                out.lost_after_lookup += 1;
                break;
            }
            Err(e) => {
                out.failed(format!("get {}: {e}", names[i]));
                break;
            }
        }
    }
    loaded
}

/// Stores `ids` under `keys` (the time of the puts, not of deriving their
/// bytes, goes to `store_ns`).
async fn store(client: &Client, ids: &[u64], keys: &[String], shape: Shape, buf: &mut [u8], out: &mut Outcome) {
    let bufs: Vec<&mut [u8]> = buf.chunks_mut(shape.block_bytes).take(ids.len()).collect();
    let mut items: Vec<(&str, &[u8])> = Vec::with_capacity(ids.len());
    for ((id, key), b) in ids.iter().zip(keys).zip(bufs) {
        blocks::fill(*id, b);
        items.push((key.as_str(), &*b));
    }
    let opts = PutOptions::default();
    let t = Instant::now();
    let results = match shape.mode {
        Mode::Batch => client.put_batch(&items, &opts).await,
        Mode::Single => {
            let mut results = Vec::with_capacity(items.len());
            for (key, bytes) in &items {
                results.push(client.put(key, bytes, &opts).await);
            }
            results
        }
    };
    out.store_ns.push(t.elapsed().as_nanos() as u64);
    for (res, (key, _)) in results.into_iter().zip(&items) {
        match res {
            Ok(PutOutcome::Stored) => out.stored += 1,
            Ok(PutOutcome::KeptExisting) => out.kept_existing += 1,
            Err(e) => out.failed(format!("put {key}: {e}")),
        }
    }
}
