//! Where a 4 MiB TCP get's time goes, without a cluster: a `TransferServer`
//! on its own runtime (as in a store node), and on another runtime (as in a
//! client) the same read done several ways. Compare the rows with the raw TCP
//! GET baseline of `mooncake bench data`.
//!
//!     cargo run --release -p mooncake-benches --example transport_probe [-- --json]
//!
//! Rows: a blocking std client speaking the frame protocol; `TcpTransport`
//! with 1 and 4 lanes; the same with the crc32c the client verifies on every
//! get; and the crc32c of 4 MiB alone. Objects rotate over 240 MiB, so the
//! server reads them from memory, as a store node does.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mooncake_segment::{SegmentId, SegmentMemory};
use mooncake_transfer::capability::{self, Access, Requested, SegmentKey};
use mooncake_transfer::frame::{Op, RESPONSE_HEADER_BYTES, RequestHeader, encode_request};
use mooncake_transfer::{SegmentRegistry, TcpConfig, TcpTransport, TransferServer};

const OBJECT_BYTES: usize = 4 << 20;
const OBJECTS: u64 = 60;
const ROUNDS: u64 = 300;
const SEGMENT: SegmentId = SegmentId(1);

fn offset(round: u64) -> u64 {
    (round % OBJECTS) * OBJECT_BYTES as u64
}

fn main() -> anyhow::Result<()> {
    let json = std::env::args().any(|a| a == "--json");
    let runtime = |name: &str| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name(name).enable_all().build()
    };
    let (server_rt, client_rt) = (runtime("probe-server")?, runtime("probe-client")?);
    let memory = Arc::new(SegmentMemory::anonymous(OBJECTS * OBJECT_BYTES as u64, true)?);
    let registry = Arc::new(SegmentRegistry::new());
    let size = memory.len();
    registry.register(SEGMENT, memory)?;
    // The probe plays the master too: it keys the segment and grants itself
    // READ of all of it (capabilities cost one HMAC per request).
    let key = SegmentKey::new(&[7; capability::SEGMENT_KEY_BYTES]);
    registry.set_key(SEGMENT, key.clone())?;
    let expires_unix_ms =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64 + 3_600_000;
    let requested = Requested { segment_id: SEGMENT.0, offset: 0, len: size, access: Access::Read };
    let read = capability::issue(&key, &requested, expires_unix_ms);
    let server = server_rt.block_on(TransferServer::bind("127.0.0.1:0".parse()?, registry))?;
    let endpoint = server.local_addr().to_string();
    let mut buf = vec![1u8; OBJECT_BYTES];
    let mut rows: Vec<(&str, Duration)> = Vec::new();

    let mut stream = std::net::TcpStream::connect(&endpoint)?;
    stream.set_nodelay(true)?;
    mooncake_transfer::set_congestion(&stream, "reno")?;
    rows.push((
        "blocking std client, frame protocol",
        p50((0..ROUNDS).map(|round| {
            let header = RequestHeader {
                op: Op::Read,
                request_id: round,
                segment_id: SEGMENT,
                offset: offset(round),
                length: OBJECT_BYTES as u64,
                capability: read.encode(),
            };
            let start = Instant::now();
            let mut response = [0u8; RESPONSE_HEADER_BYTES];
            stream.write_all(&encode_request(&header)).and_then(|()| stream.read_exact(&mut response))?;
            stream.read_exact(&mut buf)?;
            Ok(start.elapsed())
        }))?,
    ));

    for (name, lanes, checksum) in [
        ("TcpTransport, 1 lane", 1, false),
        ("TcpTransport, 4 lanes (default)", 4, false),
        ("TcpTransport, 1 lane, + crc32c", 1, true),
        ("TcpTransport, 4 lanes, + crc32c (a get's transfer)", 4, true),
    ] {
        let tcp = TcpTransport::new(TcpConfig { lanes, ..TcpConfig::default() })?;
        let times: Vec<anyhow::Result<Duration>> = client_rt.block_on(async {
            let mut times = Vec::new();
            for round in 0..ROUNDS {
                let start = Instant::now();
                let read = if checksum {
                    tcp.read_from_checksummed(&endpoint, SEGMENT, Some(&read), offset(round), &mut buf).await.map(drop)
                } else {
                    tcp.read_from(&endpoint, SEGMENT, Some(&read), offset(round), &mut buf).await
                };
                times.push(read.map(|()| start.elapsed()).map_err(anyhow::Error::from));
            }
            times
        });
        rows.push((name, p50(times.into_iter())?));
    }

    rows.push((
        "crc32c of 4 MiB alone",
        p50((0..ROUNDS).map(|_| {
            let start = Instant::now();
            std::hint::black_box(mooncake_segment::checksum::crc32c(std::hint::black_box(&buf)));
            Ok(start.elapsed())
        }))?,
    ));

    if json {
        let cells: Vec<_> =
            rows.iter().map(|(name, t)| serde_json::json!({"what": name, "p50_ms": t.as_secs_f64() * 1e3})).collect();
        println!("{}", serde_json::json!({"object_bytes": OBJECT_BYTES, "rows": cells}));
    } else {
        println!("4 MiB read, p50 of {ROUNDS}:");
        for (name, t) in rows {
            let gbps = OBJECT_BYTES as f64 / t.as_secs_f64() / 1e9;
            println!("  {name:<52} {:>7.3} ms  {gbps:>5.2} GB/s", t.as_secs_f64() * 1e3);
        }
    }
    Ok(())
}

/// Median of the samples; the first error ends the probe.
fn p50(samples: impl Iterator<Item = anyhow::Result<Duration>>) -> anyhow::Result<Duration> {
    let mut all = samples.collect::<anyhow::Result<Vec<_>>>()?;
    all.sort();
    all.get(all.len() / 2).copied().ok_or_else(|| anyhow::anyhow!("no samples"))
}
