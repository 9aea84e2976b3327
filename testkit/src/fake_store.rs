//! A stand-in for a store node's arena-fence loop, for tests that mount
//! segments by hand (metadata only, no transfer server): the masters return
//! an arena only once the segment's owner acknowledged a fence without it
//! (docs/SECURITY.md, "A WRITE grant dies with its arena"), so a hand-made
//! owner must acknowledge too, or freed space comes back only after every
//! grant expired (over a minute).

use std::sync::Arc;
use std::time::Duration;

use mooncake_client::MasterClient;
use mooncake_proto::master::FenceAck;
use tokio::task::JoinHandle;

/// How long each TakeCopies call is held (a moved fence answers at once).
const HELD: Duration = Duration::from_millis(500);

/// Acknowledges every arena fence the leader sends for `owner`'s segments,
/// as a store node with no WRITE in flight does, until the handle is
/// aborted (or dropped with the runtime). `client` must carry `owner`'s
/// credential: the `MasterClient` that registered it.
pub fn acknowledge_fences(client: Arc<MasterClient>, owner: u64) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut acks: Vec<FenceAck> = Vec::new();
        loop {
            match client.take_copies_fenced(owner, HELD, acks.clone()).await {
                Ok(reply) => {
                    for f in reply.fences {
                        acks.retain(|a| a.segment_id != f.segment_id);
                        acks.push(FenceAck { segment_id: f.segment_id, version: f.version });
                    }
                }
                Err(_) => tokio::time::sleep(HELD).await,
            }
        }
    })
}
