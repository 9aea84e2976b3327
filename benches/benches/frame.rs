//! Encode/decode of the data path's request (104-byte, with its capability)
//! and response (24-byte) headers, and the checks a store node makes per
//! request: the capability, and for a WRITE its arena against the
//! segment's fence (admitted and counted in flight, then ended).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use mooncake_segment::SegmentId;
use mooncake_transfer::capability::{self, Access, Requested, SegmentKey};
use mooncake_transfer::frame::{
    Op, RequestHeader, ResponseHeader, Status, decode_request, decode_response, encode_request, encode_response,
};

fn bench_frame(c: &mut Criterion) {
    let key = SegmentKey::new(&[7; capability::SEGMENT_KEY_BYTES]);
    let requested = Requested { segment_id: 0x5e60_0001, offset: 3 << 30, len: 4 << 20, access: Access::Write };
    // Far enough ahead to stay valid, near enough to pass the TTL bound.
    let now_unix_ms = 1_700_000_000_000;
    let grant = capability::issue_in_arena(&key, &requested, 41, now_unix_ms + 60_000);
    let request = RequestHeader {
        op: Op::Write,
        request_id: 0x0123_4567_89ab_cdef,
        segment_id: SegmentId(0x5e60_0001),
        offset: 3 << 30,
        length: 4 << 20,
        capability: grant.encode(),
    };
    let response = ResponseHeader { status: Status::Ok, request_id: 0x0123_4567_89ab_cdef, length: 4 << 20 };
    let request_bytes = encode_request(&request);
    let response_bytes = encode_response(&response);
    assert_eq!(decode_request(&request_bytes), Ok(request));
    assert_eq!(decode_response(&response_bytes), Ok(response));

    let mut g = c.benchmark_group("frame");
    g.bench_function("encode_request", |b| b.iter(|| encode_request(black_box(&request))));
    g.bench_function("decode_request", |b| b.iter(|| decode_request(black_box(&request_bytes[..]))));
    g.bench_function("encode_response", |b| b.iter(|| encode_response(black_box(&response))));
    g.bench_function("decode_response", |b| b.iter(|| decode_response(black_box(&response_bytes[..]))));
    assert!(capability::verify(&key, &request.capability, &requested, now_unix_ms).is_ok());
    g.bench_function("verify_capability", |b| {
        b.iter(|| capability::verify(&key, black_box(&request.capability), black_box(&requested), now_unix_ms))
    });
    let fence = mooncake_transfer::SharedFence::default();
    fence.install(mooncake_transfer::Fence { version: 1 << 32, live: [7, 12, 40, 41].into(), next: 42 });
    g.bench_function("fence_write", |b| b.iter(|| drop(fence.begin_write(black_box(41)))));
    g.finish();
}

criterion_group!(benches, bench_frame);
criterion_main!(benches);
