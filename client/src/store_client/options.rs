//! What a put is asked with ([`PutOptions`], [`Pin`]) and what it answers
//! ([`PutOutcome`]), and the counters a client keeps ([`ClientStats`]).

use std::sync::atomic::AtomicU64;

use mooncake_segment::SegmentId;

/// Options of one put.
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    /// Replicas wanted (0 = the client's default). Fewer are placed when
    /// fewer segments have room, down to `min_replicas`.
    pub replicas: u32,
    /// Fewest replicas the put accepts (0 = 1): when fewer segments have
    /// room, the put fails with `NO_AVAILABLE_HANDLE` rather than store
    /// fewer copies. Set it to `replicas` for a put that must survive the
    /// loss of all but one of its segments.
    pub min_replicas: u32,
    /// Segments to try first.
    pub preferred_segments: Vec<SegmentId>,
    /// How eviction treats the object.
    pub pin: Pin,
}

/// How eviction treats an object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Pin {
    /// Evicted in its turn (oldest first, KV leases respected).
    #[default]
    None,
    /// Evicted only after every unpinned candidate.
    Soft,
    /// Never evicted: removed only by Remove/RemoveAll or the loss of its
    /// segments.
    Hard,
    /// As `Soft` for `ttl_ms` (1..=86,400,000) after the object becomes
    /// readable, then as `None`.
    SoftFor { ttl_ms: u64 },
}

impl Pin {
    /// The value on the wire (`mooncake_proto::master::Pin`).
    pub fn wire(self) -> i32 {
        use mooncake_proto::master::Pin as Wire;
        match self {
            Pin::None => Wire::None as i32,
            Pin::Soft => Wire::Soft as i32,
            Pin::Hard => Wire::Hard as i32,
            Pin::SoftFor { .. } => Wire::Soft as i32,
        }
    }

    /// The soft-pin TTL on the wire (`soft_pin_ttl_ms`; 0: none).
    pub fn soft_pin_ttl_ms(self) -> u64 {
        match self {
            Pin::SoftFor { ttl_ms } => ttl_ms,
            Pin::None | Pin::Soft | Pin::Hard => 0,
        }
    }
}

impl std::str::FromStr for Pin {
    type Err = String;

    /// `none`, `soft`, `hard`, or `soft:<ttl ms>`.
    fn from_str(s: &str) -> Result<Pin, String> {
        match s {
            "none" => Ok(Pin::None),
            "soft" => Ok(Pin::Soft),
            "hard" => Ok(Pin::Hard),
            other => match other.strip_prefix("soft:").map(str::parse::<u64>) {
                Some(Ok(ttl_ms)) if ttl_ms > 0 => Ok(Pin::SoftFor { ttl_ms }),
                _ => Err(format!("{other:?} is not a pin; use none, soft, soft:<ttl ms> or hard")),
            },
        }
    }
}

/// The ids of `segments` on the wire.
pub(super) fn wire_segments(segments: &[SegmentId]) -> Vec<u64> {
    segments.iter().map(|s| s.0).collect()
}

/// What a successful put did. As in Mooncake, putting a key that exists
/// (or that another client is writing) succeeds and keeps the existing
/// object: the first writer wins. Replace a value with `upsert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutOutcome {
    /// The bytes were stored under the key.
    Stored,
    /// The key already held an object (or one was being written); it is
    /// kept and nothing was written.
    KeptExisting,
}

/// Counters of one client: cache hits and misses of gets, the reads whose
/// bytes landed, put outcomes.
#[derive(Debug, Default)]
pub struct ClientStats {
    pub gets_found: AtomicU64,
    pub gets_not_found: AtomicU64,
    pub gets_failed: AtomicU64,
    /// Whole objects whose bytes landed in the caller's buffers and matched
    /// their checksum (a get found whose read then failed is not counted).
    pub objects_read: AtomicU64,
    /// Ranges of objects read (`get_into_ranges`, read sessions).
    pub ranges_read: AtomicU64,
    /// Bytes of the objects and ranges read.
    pub bytes_read: AtomicU64,
    /// Reads of objects or ranges that no replica could serve.
    pub reads_failed: AtomicU64,
    pub puts_ok: AtomicU64,
    pub puts_failed: AtomicU64,
    /// Puts of a key that existed: nothing written, the object kept.
    pub puts_kept_existing: AtomicU64,
    /// Puts placed in a writer chunk: one master round trip (their PutEnd).
    pub puts_in_chunks: AtomicU64,
}
