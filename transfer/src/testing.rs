//! The conformance suite every [`Transport`] runs (TCP, shm, the engine).
//!
//! An implementation's test builds a [`Fixture`]: a target segment of at
//! least [`SUITE_SEGMENT_MIN_BYTES`] that the transport reaches (twice: under
//! a WRITE and under a READ capability for all of it), the memory behind it
//! (to check what really landed), and a target that names no segment. Then
//! it calls [`run_all`]. The checks panic on failure, like
//! any test. Data is a deterministic function of a seed, printed on failure.

use mooncake_segment::SegmentMemory;
pub use mooncake_segment::testing::pattern;

use crate::transport::{RemoteSegment, Transport};

/// Smallest segment the suite needs (its largest transfer is 4 MiB + 7 at
/// several offsets).
pub const SUITE_SEGMENT_MIN_BYTES: u64 = 16 << 20;

/// What the suite needs from an implementation.
pub struct Fixture<'a, T: Transport> {
    /// The transport under test.
    pub transport: &'a T,
    /// A segment it can reach, with a WRITE capability for all of it.
    pub writer: RemoteSegment,
    /// The same segment with a READ capability for all of it.
    pub reader: RemoteSegment,
    /// The memory behind the targets (the server's or the owner's mapping).
    pub memory: &'a SegmentMemory,
    /// A target naming a segment that does not exist (unknown id, or a
    /// missing shm file).
    pub unknown: RemoteSegment,
}

/// Runs every check.
pub async fn run_all<T: Transport>(fixture: &Fixture<'_, T>) {
    assert!(fixture.memory.len() >= SUITE_SEGMENT_MIN_BYTES, "the suite needs a segment of 16 MiB or more");
    round_trips_at_several_offsets_and_sizes(fixture).await;
    out_of_range_is_refused_and_changes_nothing(fixture).await;
    unknown_segment_is_refused(fixture).await;
}

/// Write then read back identical bytes: 1 B, 4 KiB and 4 MiB + 7, at the
/// start, at an unaligned offset and flush with the end of the segment.
pub async fn round_trips_at_several_offsets_and_sizes<T: Transport>(fixture: &Fixture<'_, T>) {
    let size = fixture.memory.len();
    for (index, len) in [1usize, 4096, (4 << 20) + 7].into_iter().enumerate() {
        for offset in [0, 4097, size - len as u64] {
            let seed = (index as u64) << 32 | offset;
            let data = pattern(seed, len);
            let at = format!("len {len} at offset {offset} (seed {seed})");
            if let Err(err) = fixture.transport.write(&fixture.writer, offset, &data).await {
                panic!("write of {at} failed: {err}");
            }
            let mut landed = vec![0u8; len];
            fixture.memory.read_at(offset, &mut landed).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert!(landed == data, "segment bytes differ after write of {at}");
            let mut back = vec![0u8; len];
            if let Err(err) = fixture.transport.read(&fixture.reader, offset, &mut back).await {
                panic!("read of {at} failed: {err}");
            }
            assert!(back == data, "read-back bytes differ for {at}");
        }
    }
}

/// A write that crosses the end of the segment (or overflows u64) is an
/// error that retrying cannot fix, and leaves the segment unchanged; an
/// out-of-range read is an error too.
pub async fn out_of_range_is_refused_and_changes_nothing<T: Transport>(fixture: &Fixture<'_, T>) {
    let size = fixture.memory.len();
    let tail_bytes: usize = 4 << 20;
    let tail_at = size - tail_bytes as u64;
    let before = pattern(0xE0F, tail_bytes);
    fixture.memory.write_at(tail_at, &before).unwrap_or_else(|e| panic!("{e}"));
    // The last case spans the end with its leading 3 MiB inside: a transport
    // that splits must refuse it whole, not land the chunks that fit.
    let cases = [(size - 10, 20usize), (size, 1), (u64::MAX - 1, 4096), (size - (3 << 20), 4 << 20)];
    for (offset, len) in cases {
        let result = fixture.transport.write(&fixture.writer, offset, &pattern(offset, len)).await;
        match result {
            Ok(()) => panic!("write of {len} bytes at {offset} into a segment of {size} bytes succeeded"),
            Err(err) => assert!(!err.is_retryable(), "out-of-range write must not be retryable: {err}"),
        }
    }
    let mut after = vec![0u8; tail_bytes];
    fixture.memory.read_at(tail_at, &mut after).unwrap_or_else(|e| panic!("{e}"));
    assert!(after == before, "a refused write changed the segment");
    let mut buf = vec![0u8; 20];
    assert!(fixture.transport.read(&fixture.reader, size - 10, &mut buf).await.is_err(), "out-of-range read succeeded");
}

/// Reads and writes to a segment that does not exist fail without retry.
pub async fn unknown_segment_is_refused<T: Transport>(fixture: &Fixture<'_, T>) {
    let data = pattern(7, 4096);
    match fixture.transport.write(&fixture.unknown, 0, &data).await {
        Ok(()) => panic!("write to unknown segment {:?} succeeded", fixture.unknown),
        Err(err) => assert!(!err.is_retryable(), "unknown segment must not be retryable: {err}"),
    }
    let mut buf = vec![0u8; 4096];
    assert!(
        fixture.transport.read(&fixture.unknown, 0, &mut buf).await.is_err(),
        "read from unknown segment succeeded"
    );
    // The transport must still work for the known segment afterwards.
    fixture.transport.write(&fixture.writer, 0, &data).await.unwrap_or_else(|e| panic!("write after refusal: {e}"));
}
