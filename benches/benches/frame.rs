//! Encode/decode of the data path's request (40-byte) and response (24-byte) headers.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use mooncake_segment::SegmentId;
use mooncake_transfer::frame::{
    Op, RequestHeader, ResponseHeader, Status, decode_request, decode_response, encode_request, encode_response,
};

fn bench_frame(c: &mut Criterion) {
    let request = RequestHeader {
        op: Op::Write,
        request_id: 0x0123_4567_89ab_cdef,
        segment_id: SegmentId(0x5e60_0001),
        offset: 3 << 30,
        length: 4 << 20,
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
    g.finish();
}

criterion_group!(benches, bench_frame);
criterion_main!(benches);
