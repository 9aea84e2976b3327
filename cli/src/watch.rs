//! `mooncake watch`: one line per object event, in commit order, following
//! master failures by itself (docs/EVENTS.md). Ends at Ctrl-C (or after
//! `--count` events) with a summary on stderr.

use std::sync::Arc;

use mooncake_client::{WatchItem, Watcher};
use mooncake_proto::master::ObjectEvent;
use mooncake_proto::master::object_event::Kind;

use crate::MastersArg;

#[derive(clap::Args)]
pub struct WatchArgs {
    #[command(flatten)]
    masters: MastersArg,
    /// Only keys that start with this.
    #[arg(long, default_value = "")]
    prefix: String,
    /// The first revision to show (0: from the next change). A watcher that
    /// stopped resumes from the revision after the last it printed.
    #[arg(long = "from-revision", default_value_t = 0)]
    from_revision: u64,
    /// Stop after this many events.
    #[arg(long)]
    count: Option<u64>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

fn kind_name(e: &ObjectEvent) -> &'static str {
    match Kind::try_from(e.kind) {
        Ok(Kind::Stored) => "stored",
        Ok(Kind::Removed) => "removed",
        Ok(Kind::Replicas) => "replicas",
        Err(_) => "unknown",
    }
}

fn line(revision: u64, e: &ObjectEvent, json: bool) -> String {
    if json {
        let replicas: Vec<serde_json::Value> = e
            .replicas
            .iter()
            .map(|r| serde_json::json!({ "segment_id": r.segment_id, "tier": r.tier, "host": r.host, "zone": r.zone }))
            .collect();
        return serde_json::json!({
            "revision": revision,
            "kind": kind_name(e),
            "key": e.key,
            "version": e.version,
            "size": e.size,
            "replicas": replicas,
            "cause": e.cause,
        })
        .to_string();
    }
    let where_: Vec<String> = e.replicas.iter().map(|r| format!("{}@{}", r.tier, r.host)).collect();
    match Kind::try_from(e.kind) {
        Ok(Kind::Stored) => {
            format!("{revision:>8}  stored    {}  v{}  {} B  {}", e.key, e.version, e.size, where_.join(","))
        }
        Ok(Kind::Removed) => format!("{revision:>8}  removed   {}  v{}  ({})", e.key, e.version, e.cause),
        _ => format!("{revision:>8}  replicas  {}  v{}  {}  ({})", e.key, e.version, where_.join(","), e.cause),
    }
}

pub async fn run(a: WatchArgs) -> anyhow::Result<()> {
    let master = Arc::new(a.masters.client()?);
    let mut watcher = Watcher::new(master, a.prefix.clone(), a.from_revision);
    let (mut events, mut first, mut last) = (0u64, None, 0u64);
    let ended = loop {
        let item = tokio::select! {
            item = watcher.next() => item,
            _ = tokio::signal::ctrl_c() => break None,
        };
        match item {
            Ok(WatchItem::Revision { revision, events: evs }) => {
                first.get_or_insert(revision);
                last = revision;
                for e in &evs {
                    println!("{}", line(revision, e, a.json));
                    events += 1;
                    if a.count.is_some_and(|c| events >= c) {
                        break;
                    }
                }
                if a.count.is_some_and(|c| events >= c) {
                    break None;
                }
            }
            Ok(WatchItem::Progress { through }) => last = last.max(through),
            Err(e) => break Some(e),
        }
    };
    let resume = watcher.next_revision();
    match first {
        Some(first) => {
            eprintln!("watched {events} events, revisions {first}..={last}; resume with --from-revision {resume}")
        }
        None => eprintln!("watched no events (through revision {last}); resume with --from-revision {resume}"),
    }
    match ended {
        None => Ok(()),
        Some(e) => Err(anyhow::anyhow!("{e}")),
    }
}
