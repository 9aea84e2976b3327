//! Writer chunks on the client: small puts at one master round trip.
//!
//! The client holds, per replica count, one chunk the leader reserved for
//! it (ReserveChunk: one range per replica, with a WRITE capability for
//! each). A small put takes the next aligned slice of it (the same offset
//! in every range; a slice is never handed out twice, whatever becomes of
//! its put), writes its bytes there and sends only its PutEnd, naming the
//! chunk. A chunk is used until it is full or `valid_ms` has passed; then
//! it is retired, and returned to the leader once the last put placed in
//! it has its answer. A leader that refuses a chunk (no room without
//! eviction) is not asked again for [`REFUSED_BACKOFF`]: puts go the usual
//! way (PutStart), which evicts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use mooncake_proto::master::Replica;
use mooncake_segment::ALLOC_ALIGN_BYTES;

use crate::master_client::MasterClient;

/// How long after a refused ReserveChunk puts go the usual way without
/// asking again.
pub(super) const REFUSED_BACKOFF: Duration = Duration::from_secs(1);

/// A chunk this client holds.
pub(super) struct HeldChunk {
    pub id: u64,
    /// Each whole range with its capability.
    pub ranges: Vec<Replica>,
    len: u64,
    use_until: Instant,
    /// Puts placed in it whose PutEnd has no answer yet.
    in_flight: AtomicU32,
    /// No more puts are placed in it.
    retired: AtomicBool,
    /// Its ReturnChunk was sent.
    returned: AtomicBool,
}

/// Where one put was placed: its chunk and its ranges there.
pub(super) struct Placed {
    pub chunk: Arc<HeldChunk>,
    pub replicas: Vec<Replica>,
}

/// The chunk of one replica count and the next free offset in it.
struct Slot {
    chunk: Arc<HeldChunk>,
    next: u64,
}

/// The chunks of one client.
pub(super) struct WriterChunks {
    /// Bytes asked per chunk (0: never use chunks).
    chunk_bytes: u64,
    slots: Mutex<HashMap<u32, Slot>>,
    /// One ReserveChunk at a time.
    refill: tokio::sync::Mutex<()>,
    refused_until: Mutex<Option<Instant>>,
}

impl WriterChunks {
    pub fn new(chunk_bytes: u64) -> Self {
        WriterChunks {
            chunk_bytes,
            slots: Mutex::new(HashMap::new()),
            refill: tokio::sync::Mutex::new(()),
            refused_until: Mutex::new(None),
        }
    }

    /// Whether a put of `size` bytes goes through a chunk: small (at most a
    /// sixteenth of a chunk), and no recent refusal.
    pub fn suits(&self, size: u64) -> bool {
        let small = size > 0 && aligned(size) <= self.chunk_bytes / 16;
        small && lock(&self.refused_until).is_none_or(|t| Instant::now() >= t)
    }

    /// Bytes to ask a chunk for.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Places `size` bytes in the chunk of `replicas`, if it has room and
    /// time left; otherwise retires it (returned to `master` once idle) and
    /// answers `None`.
    pub fn place(&self, replicas: u32, size: u64, master: &Arc<MasterClient>, client_id: u64) -> Option<Placed> {
        let len = aligned(size);
        let mut slots = lock(&self.slots);
        let slot = slots.get_mut(&replicas)?;
        let fits = slot.next.checked_add(len).is_some_and(|end| end <= slot.chunk.len);
        if !fits || Instant::now() >= slot.chunk.use_until {
            let old = slots.remove(&replicas)?;
            drop(slots);
            retire(&old.chunk, master, client_id);
            return None;
        }
        let at = slot.next;
        slot.next += len;
        slot.chunk.in_flight.fetch_add(1, Ordering::SeqCst);
        let placed = slot.chunk.ranges.iter().map(|r| Replica { offset: r.offset + at, len, ..r.clone() }).collect();
        Some(Placed { chunk: slot.chunk.clone(), replicas: placed })
    }

    /// Holds one refill at a time: a caller that waited finds the chunk
    /// another one got.
    pub async fn refilling(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.refill.lock().await
    }

    /// Adopts a chunk the leader granted for `replicas`, valid `valid_ms`
    /// from now; the one it replaces is retired.
    pub fn adopt(
        &self,
        replicas: u32,
        id: u64,
        ranges: Vec<Replica>,
        valid_ms: u64,
        master: &Arc<MasterClient>,
        client_id: u64,
    ) {
        let len = ranges.iter().map(|r| r.len).min().unwrap_or(0);
        let chunk = Arc::new(HeldChunk {
            id,
            ranges,
            len,
            use_until: Instant::now() + Duration::from_millis(valid_ms),
            in_flight: AtomicU32::new(0),
            retired: AtomicBool::new(false),
            returned: AtomicBool::new(false),
        });
        let old = lock(&self.slots).insert(replicas, Slot { chunk, next: 0 });
        if let Some(old) = old {
            retire(&old.chunk, master, client_id);
        }
    }

    /// The leader refused a chunk: puts go the usual way for a while.
    pub fn refused(&self) {
        *lock(&self.refused_until) = Some(Instant::now() + REFUSED_BACKOFF);
    }

    /// No more puts go into `chunk` (its leader no longer knows it, or a
    /// write into it failed).
    pub fn drop_chunk(&self, chunk: &Arc<HeldChunk>, master: &Arc<MasterClient>, client_id: u64) {
        let mut slots = lock(&self.slots);
        slots.retain(|_, s| !Arc::ptr_eq(&s.chunk, chunk));
        drop(slots);
        retire(chunk, master, client_id);
    }

    /// The put placed in `placed` has its answer.
    pub fn done(&self, placed: &Placed, master: &Arc<MasterClient>, client_id: u64) {
        let left = placed.chunk.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
        if left == 0 && placed.chunk.retired.load(Ordering::SeqCst) {
            give_back(&placed.chunk, master, client_id);
        }
    }

    /// Retires every chunk (the client closes).
    pub fn retire_all(&self, master: &Arc<MasterClient>, client_id: u64) {
        let slots: Vec<Slot> = lock(&self.slots).drain().map(|(_, s)| s).collect();
        for s in slots {
            retire(&s.chunk, master, client_id);
        }
    }
}

/// No more puts go into `chunk`; returned once none is in flight.
fn retire(chunk: &Arc<HeldChunk>, master: &Arc<MasterClient>, client_id: u64) {
    chunk.retired.store(true, Ordering::SeqCst);
    if chunk.in_flight.load(Ordering::SeqCst) == 0 {
        give_back(chunk, master, client_id);
    }
}

/// Sends `chunk`'s ReturnChunk, once.
fn give_back(chunk: &Arc<HeldChunk>, master: &Arc<MasterClient>, client_id: u64) {
    if !chunk.returned.swap(true, Ordering::SeqCst) {
        send_return(master, client_id, chunk.id);
    }
}

/// Sends the ReturnChunk of chunk `id` in the background. A failure costs
/// only time: the leader lets the chunk go at its discard timeout.
pub(super) fn send_return(master: &Arc<MasterClient>, client_id: u64, id: u64) {
    let master = master.clone();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            if let Err(e) = master.return_chunk(client_id, id).await {
                tracing::debug!(chunk = id, error = %e, "writer chunk not returned; the leader lets it go at its discard timeout");
            }
        });
    }
}

fn aligned(len: u64) -> u64 {
    len.next_multiple_of(ALLOC_ALIGN_BYTES)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
