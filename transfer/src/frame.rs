//! The binary wire protocol of the data path, as pure encode/decode functions.
//!
//! A client sends requests on a TCP connection and reads one response per
//! request; the server serves a connection's requests one at a time, in
//! order, so a client may pipeline READs (send several headers, then read
//! the responses in the same order). All integers are little-endian.
//!
//! Request header, [`REQUEST_HEADER_BYTES`] = 104 bytes:
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 4 | magic | [`FRAME_MAGIC`] (`"MCTF"`) |
//! | 4 | 1 | version | [`FRAME_VERSION`] (2) |
//! | 5 | 1 | op | 1 = READ, 2 = WRITE, 3 = UCX_KEY ([`Op`]) |
//! | 6 | 2 | reserved | must be 0 |
//! | 8 | 8 | request_id | echoed in the response |
//! | 16 | 8 | segment_id | the target segment |
//! | 24 | 8 | offset | first byte in the segment |
//! | 32 | 8 | length | bytes to read or write, at most [`FRAME_PAYLOAD_MAX_BYTES`] |
//! | 40 | 64 | capability | the master's grant for this range ([`mooncake_auth::capability`]); all zeros: none |
//!
//! A WRITE header is followed by `length` payload bytes. The server serves a
//! request only if its capability verifies under the segment's key, names
//! the segment and the op's access, covers `[offset, offset + length)` and
//! has not expired; otherwise it answers UNAUTHORIZED and moves no byte.
//!
//! Response header, [`RESPONSE_HEADER_BYTES`] = 24 bytes:
//!
//! | offset | size | field | meaning |
//! |---|---|---|---|
//! | 0 | 4 | magic | [`FRAME_MAGIC`] |
//! | 4 | 1 | version | [`FRAME_VERSION`] |
//! | 5 | 1 | status | [`Status`]: 0 OK, 1 UNKNOWN_SEGMENT, 2 OUT_OF_RANGE, 3 BAD_FRAME, 4 TOO_LARGE, 5 INTERNAL, 6 BUSY, 7 UNAUTHORIZED, 8 CORRUPT, 9 UNSUPPORTED |
//! | 6 | 2 | reserved | must be 0 |
//! | 8 | 8 | request_id | the request's id (0 if the request header was unreadable) |
//! | 16 | 8 | length | READ and UCX_KEY OK: payload bytes that follow; WRITE OK: bytes written; errors: 0 |
//!
//! Only a READ or UCX_KEY OK response is followed by payload. After an error response to
//! a WRITE (UNAUTHORIZED included), or after BAD_FRAME/TOO_LARGE, the server
//! closes the connection: it never reads a refused payload, so it never
//! writes a byte of it anywhere.
//!
//! CORRUPT answers a READ of a disk segment whose bytes failed the node's
//! per-block checksum verification; like every refused READ it leaves the
//! connection open. (A READ of several disk chunks whose later chunk fails
//! after its OK header went out is cut off by closing the connection.)
//!
//! BUSY is the one response not sent for a request: a server at its
//! connection limit (in total, or for the client's IP address) answers a new
//! connection with a BUSY header (request id 0, length 0) as soon as it
//! accepts it, then closes it. A client reads it in place of the response to
//! its first request.
//!
//! UCX_KEY asks for what a client needs to read the segment one-sided over
//! UCX: the node's UCX worker address, the segment's packed remote key (a
//! mapping for peers' reads) and the segment's base address in the node
//! ([`UcxKey`], encoded by [`encode_ucx_key`]). It is admitted exactly like
//! a READ of its range, so only a holder of a READ grant for the segment
//! learns the key. A node that cannot serve the segment over UCX answers
//! UNSUPPORTED and keeps the connection; an older node answers BAD_FRAME
//! and closes it. Either way the client reads over TCP.
//!
//! Decoding never panics on any input; it returns [`FrameError`].

use mooncake_auth::capability::CAPABILITY_BYTES;
use mooncake_segment::SegmentId;

/// `"MCTF"` read as a little-endian u32: marks every header of this protocol.
pub const FRAME_MAGIC: u32 = 0x4D43_5446;
/// The only protocol version this build speaks (2: requests carry a
/// capability).
pub const FRAME_VERSION: u8 = 2;
/// Size of the fixed fields of a request header, before the capability.
const REQUEST_FIELDS_BYTES: usize = 40;
/// Size of an encoded request header: the fields and the capability.
pub const REQUEST_HEADER_BYTES: usize = REQUEST_FIELDS_BYTES + CAPABILITY_BYTES;
/// The capability of a request that has none (the server refuses it).
pub const NO_CAPABILITY: [u8; CAPABILITY_BYTES] = [0; CAPABILITY_BYTES];
/// Size of an encoded response header.
pub const RESPONSE_HEADER_BYTES: usize = 24;
/// Largest payload of one request: 1 GiB. Objects larger than this are split
/// by the client anyway; the cap bounds how long one request can hold a lane
/// (about 0.2 s at loopback speed) and rejects absurd lengths from a corrupt
/// header before any byte is moved.
pub const FRAME_PAYLOAD_MAX_BYTES: u64 = 1 << 30;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Copy bytes from the segment to the client.
    Read = 1,
    /// Copy the payload into the segment.
    Write = 2,
    /// Send the UCX key of the segment ([`encode_ucx_key`]): admitted like a
    /// READ of `[offset, offset + length)`, answered OK with the key as
    /// payload, or UNSUPPORTED where the node cannot serve the segment over
    /// UCX.
    UcxKey = 3,
}

/// Outcome of a request, as sent on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Done.
    Ok = 0,
    /// No segment with that id is registered on the server.
    UnknownSegment = 1,
    /// `offset + length` is beyond the segment (or overflows).
    OutOfRange = 2,
    /// The header could not be decoded (magic, version, op, reserved).
    BadFrame = 3,
    /// `length` exceeds [`FRAME_PAYLOAD_MAX_BYTES`].
    TooLarge = 4,
    /// The server failed for a reason of its own.
    Internal = 5,
    /// The server is at its connection limit and closes this connection
    /// unserved (sent once, at accept; see the module doc).
    Busy = 6,
    /// The request's capability is missing, forged, expired, for another
    /// segment, range or access, or the segment has no key yet.
    Unauthorized = 7,
    /// The segment is on disk and a block of the range failed checksum
    /// verification there: this replica's bytes are lost.
    Corrupt = 8,
    /// The node does not serve this segment over UCX (built without it,
    /// UCX off or failed to start, or a disk segment): use TCP.
    Unsupported = 9,
}

impl Status {
    /// The wire name, as in the protocol table.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::UnknownSegment => "UNKNOWN_SEGMENT",
            Status::OutOfRange => "OUT_OF_RANGE",
            Status::BadFrame => "BAD_FRAME",
            Status::TooLarge => "TOO_LARGE",
            Status::Internal => "INTERNAL",
            Status::Busy => "BUSY",
            Status::Unauthorized => "UNAUTHORIZED",
            Status::Corrupt => "CORRUPT",
            Status::Unsupported => "UNSUPPORTED",
        }
    }

    fn from_u8(byte: u8) -> Option<Self> {
        Some(match byte {
            0 => Status::Ok,
            1 => Status::UnknownSegment,
            2 => Status::OutOfRange,
            3 => Status::BadFrame,
            4 => Status::TooLarge,
            5 => Status::Internal,
            6 => Status::Busy,
            7 => Status::Unauthorized,
            8 => Status::Corrupt,
            9 => Status::Unsupported,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())?;
        match self {
            Status::Unauthorized => f.write_str(
                " (no valid capability for this segment, range and access: missing, expired, forged, or for \
                 another range; the store node's log says which)",
            ),
            Status::Corrupt => {
                f.write_str(" (the store node's disk copy failed checksum verification; read another replica)")
            }
            _ => Ok(()),
        }
    }
}

/// A decoded request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// READ or WRITE.
    pub op: Op,
    /// Chosen by the client, echoed by the server.
    pub request_id: u64,
    /// Target segment.
    pub segment_id: SegmentId,
    /// First byte in the segment.
    pub offset: u64,
    /// Bytes to move; at most [`FRAME_PAYLOAD_MAX_BYTES`].
    pub length: u64,
    /// The encoded capability, as sent; the server verifies it against the
    /// segment's key ([`NO_CAPABILITY`]: none).
    pub capability: [u8; CAPABILITY_BYTES],
}

/// A decoded response header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHeader {
    /// Outcome.
    pub status: Status,
    /// The request's id.
    pub request_id: u64,
    /// See the module doc.
    pub length: u64,
}

/// Why bytes are not a valid header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The slice is not exactly one header long.
    #[error("header must be {expected} bytes, got {actual}")]
    WrongSize {
        /// Header size.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// Not a frame of this protocol.
    #[error("bad magic {0:#010x}; expected {FRAME_MAGIC:#010x} (is the peer a transfer engine?)")]
    BadMagic(u32),
    /// A protocol version this build does not speak.
    #[error("unsupported protocol version {0}; this build speaks {FRAME_VERSION}")]
    BadVersion(u8),
    /// Unknown op code.
    #[error("unknown op {0}; expected 1 (READ), 2 (WRITE) or 3 (UCX_KEY)")]
    BadOp(u8),
    /// Unknown status code.
    #[error("unknown status {0}")]
    BadStatus(u8),
    /// The reserved field is not zero.
    #[error("reserved field is {0:#06x}; must be 0")]
    ReservedNonZero(u16),
    /// `length` exceeds [`FRAME_PAYLOAD_MAX_BYTES`].
    #[error("length {0} exceeds the frame payload limit of {FRAME_PAYLOAD_MAX_BYTES} bytes")]
    TooLarge(u64),
}

impl FrameError {
    /// The status a server answers a request with this error.
    pub fn status(self) -> Status {
        match self {
            FrameError::TooLarge(_) => Status::TooLarge,
            FrameError::WrongSize { .. }
            | FrameError::BadMagic(_)
            | FrameError::BadVersion(_)
            | FrameError::BadOp(_)
            | FrameError::BadStatus(_)
            | FrameError::ReservedNonZero(_) => Status::BadFrame,
        }
    }
}

/// Encodes a request header.
pub fn encode_request(header: &RequestHeader) -> [u8; REQUEST_HEADER_BYTES] {
    let mut out = [0u8; REQUEST_HEADER_BYTES];
    out[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    out[4] = FRAME_VERSION;
    out[5] = header.op as u8;
    out[8..16].copy_from_slice(&header.request_id.to_le_bytes());
    out[16..24].copy_from_slice(&header.segment_id.0.to_le_bytes());
    out[24..32].copy_from_slice(&header.offset.to_le_bytes());
    out[32..40].copy_from_slice(&header.length.to_le_bytes());
    out[REQUEST_FIELDS_BYTES..].copy_from_slice(&header.capability);
    out
}

/// Decodes a request header from exactly [`REQUEST_HEADER_BYTES`] bytes.
pub fn decode_request(bytes: &[u8]) -> Result<RequestHeader, FrameError> {
    let bytes: &[u8; REQUEST_HEADER_BYTES] =
        bytes.try_into().map_err(|_| FrameError::WrongSize { expected: REQUEST_HEADER_BYTES, actual: bytes.len() })?;
    check_preamble(bytes)?;
    let op = match bytes[5] {
        1 => Op::Read,
        2 => Op::Write,
        3 => Op::UcxKey,
        other => return Err(FrameError::BadOp(other)),
    };
    let length = u64_at(bytes, 32);
    if length > FRAME_PAYLOAD_MAX_BYTES {
        return Err(FrameError::TooLarge(length));
    }
    let mut capability = NO_CAPABILITY;
    capability.copy_from_slice(&bytes[REQUEST_FIELDS_BYTES..]);
    Ok(RequestHeader {
        op,
        request_id: u64_at(bytes, 8),
        segment_id: SegmentId(u64_at(bytes, 16)),
        offset: u64_at(bytes, 24),
        length,
        capability,
    })
}

/// The request id of a (possibly malformed) request header, so that an error
/// response can still name it; 0 when the bytes are too short.
pub fn request_id_of(bytes: &[u8]) -> u64 {
    match bytes.get(8..16) {
        Some(id) => id.try_into().map(u64::from_le_bytes).unwrap_or(0),
        None => 0,
    }
}

/// Encodes a response header.
pub fn encode_response(header: &ResponseHeader) -> [u8; RESPONSE_HEADER_BYTES] {
    let mut out = [0u8; RESPONSE_HEADER_BYTES];
    out[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
    out[4] = FRAME_VERSION;
    out[5] = header.status as u8;
    out[8..16].copy_from_slice(&header.request_id.to_le_bytes());
    out[16..24].copy_from_slice(&header.length.to_le_bytes());
    out
}

/// Decodes a response header from exactly [`RESPONSE_HEADER_BYTES`] bytes.
pub fn decode_response(bytes: &[u8]) -> Result<ResponseHeader, FrameError> {
    let bytes: &[u8; RESPONSE_HEADER_BYTES] =
        bytes.try_into().map_err(|_| FrameError::WrongSize { expected: RESPONSE_HEADER_BYTES, actual: bytes.len() })?;
    check_preamble(bytes)?;
    let status = Status::from_u8(bytes[5]).ok_or(FrameError::BadStatus(bytes[5]))?;
    let length = u64_at(bytes, 16);
    if length > FRAME_PAYLOAD_MAX_BYTES {
        return Err(FrameError::TooLarge(length));
    }
    Ok(ResponseHeader { status, request_id: u64_at(bytes, 8), length })
}

/// Checks magic, version and reserved, shared by both header kinds.
fn check_preamble<const N: usize>(bytes: &[u8; N]) -> Result<(), FrameError> {
    let magic = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if magic != FRAME_MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    if bytes[4] != FRAME_VERSION {
        return Err(FrameError::BadVersion(bytes[4]));
    }
    let reserved = u16::from_le_bytes([bytes[6], bytes[7]]);
    if reserved != 0 {
        return Err(FrameError::ReservedNonZero(reserved));
    }
    Ok(())
}

/// Reads a little-endian u64 at `at`; callers pass offsets inside a
/// fixed-size header, so the indexing is checked by the array type's size.
fn u64_at<const N: usize>(bytes: &[u8; N], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Largest encoded [`UcxKey`] a client accepts.
pub const UCX_KEY_MAX_BYTES: u64 = 64 << 10;

/// What a UCX_KEY answer carries: enough for one-sided reads of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UcxKey {
    /// The store node's UCX worker address.
    pub worker: Vec<u8>,
    /// The segment's packed remote key.
    pub rkey: Vec<u8>,
    /// The address of the segment's first byte in the store node.
    pub base: u64,
}

/// Encodes a [`UcxKey`]: `worker_len u32, worker, rkey_len u32, rkey, base u64`.
pub fn encode_ucx_key(key: &UcxKey) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + key.worker.len() + key.rkey.len());
    for blob in [&key.worker, &key.rkey] {
        out.extend_from_slice(&u32::try_from(blob.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(blob);
    }
    out.extend_from_slice(&key.base.to_le_bytes());
    out
}

/// Decodes a [`UcxKey`]; `None` if the bytes are not exactly one.
pub fn decode_ucx_key(bytes: &[u8]) -> Option<UcxKey> {
    fn blob<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
        let (len, rest) = bytes.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        if len == 0 || len > rest.len() {
            return None;
        }
        let (blob, rest) = rest.split_at(len);
        *bytes = rest;
        Some(blob)
    }
    let mut rest = bytes;
    let worker = blob(&mut rest)?.to_vec();
    let rkey = blob(&mut rest)?.to_vec();
    let base: [u8; 8] = rest.try_into().ok()?;
    Some(UcxKey { worker, rkey, base: u64::from_le_bytes(base) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_request() -> impl Strategy<Value = RequestHeader> {
        let fields = (any::<bool>(), any::<u64>(), any::<u64>(), any::<u64>(), 0..=FRAME_PAYLOAD_MAX_BYTES);
        let capability = proptest::collection::vec(any::<u8>(), CAPABILITY_BYTES);
        (fields, capability).prop_map(|((write, request_id, segment, offset, length), capability)| {
            let mut header = RequestHeader {
                op: if write { Op::Write } else { Op::Read },
                request_id,
                segment_id: SegmentId(segment),
                offset,
                length,
                capability: NO_CAPABILITY,
            };
            header.capability.copy_from_slice(&capability);
            header
        })
    }

    fn arb_response() -> impl Strategy<Value = ResponseHeader> {
        (0u8..=8, any::<u64>(), 0..=FRAME_PAYLOAD_MAX_BYTES).prop_map(|(status, request_id, length)| ResponseHeader {
            status: Status::from_u8(status).unwrap(),
            request_id,
            length,
        })
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_request(&bytes);
            let _ = decode_response(&bytes);
            let _ = request_id_of(&bytes);
        }

        #[test]
        fn near_valid_headers_never_panic(
            mut raw in proptest::collection::vec(any::<u8>(), REQUEST_HEADER_BYTES..=REQUEST_HEADER_BYTES),
            flip in 0usize..REQUEST_HEADER_BYTES,
        ) {
            // Random bytes almost never pass the magic check; start from a
            // valid preamble so the later fields are exercised too.
            raw[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
            raw[4] = FRAME_VERSION;
            raw[flip] ^= 0xff;
            let _ = decode_request(&raw);
            let _ = decode_response(&raw[..RESPONSE_HEADER_BYTES]);
        }

        #[test]
        fn request_round_trips(header in arb_request()) {
            prop_assert_eq!(decode_request(&encode_request(&header)), Ok(header));
        }

        #[test]
        fn response_round_trips(header in arb_response()) {
            prop_assert_eq!(decode_response(&encode_response(&header)), Ok(header));
        }
    }

    #[test]
    fn malformed_fields_are_named() {
        let good = RequestHeader {
            op: Op::Read,
            request_id: 7,
            segment_id: SegmentId(1),
            offset: 0,
            length: 1,
            capability: NO_CAPABILITY,
        };
        let mut raw = encode_request(&good);
        raw[5] = 9;
        assert_eq!(decode_request(&raw), Err(FrameError::BadOp(9)));
        let mut raw = encode_request(&good);
        raw[6] = 1;
        assert_eq!(decode_request(&raw), Err(FrameError::ReservedNonZero(1)));
        let mut raw = encode_request(&good);
        raw[4] = 1;
        assert_eq!(decode_request(&raw), Err(FrameError::BadVersion(1)), "version 1 had no capability");
        let raw = encode_request(&RequestHeader { length: FRAME_PAYLOAD_MAX_BYTES + 1, ..good });
        assert_eq!(decode_request(&raw).map_err(FrameError::status), Err(Status::TooLarge));
        assert_eq!(request_id_of(&raw), 7);
        assert_eq!(decode_request(&raw[..40]), Err(FrameError::WrongSize { expected: 104, actual: 40 }));
    }
}
