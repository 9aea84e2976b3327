//! Data-path capabilities: what lets a client READ or WRITE a byte range of
//! a store node's segment over TCP.
//!
//! With each placement (PutStart: write; GetReplicaList: read) the master
//! issues one [`Capability`] per replica: segment, byte range, access and an
//! expiry (unix ms, the master's wall clock), MACed with the segment's key.
//! The store node serving the segment holds the same key and serves a
//! request only if a capability it verifies covers it ([`verify`]).
//!
//! **Keys.** A segment's key is derived from the masters' root key
//! (`ClusterSecret::key("capability")`) and binds the segment id *and* its
//! owner's client id ([`segment_key`]): whoever later mounts the same
//! segment id under another client id gets another key, so capabilities
//! for one never open the other. Masters derive keys on demand and store
//! nothing; a store node gets its segment's key in the MountSegment /
//! RemountSegment answer.
//!
//! **Encoding** ([`CAPABILITY_BYTES`] = 64 bytes, little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | version, [`CAPABILITY_VERSION`] (0 with all bytes 0: no capability) |
//! | 1 | 1 | access: 1 READ, 2 WRITE |
//! | 2 | 6 | expiry, unix ms (48 bits: until the year 10889) |
//! | 8 | 8 | segment id |
//! | 16 | 8 | offset of the range |
//! | 24 | 8 | length of the range |
//! | 32 | 8 | arena id (WRITE: the arena the range was handed out in; READ: 0) |
//! | 40 | 24 | HMAC-SHA256 of bytes 0..40 under the segment's key, first 24 bytes |
//!
//! **Arenas.** A range is handed out to one writer in an arena's life, and
//! a freed range is handed out again only in a newer arena (arena ids only
//! grow). A WRITE names its arena, so the store node can refuse writes
//! under arenas the masters have taken back (`mooncake_transfer`'s arena
//! fence), however long the capability itself still has to live.
//!
//! The MAC is HMAC-SHA256 cut to 192 bits (as HMAC's truncation rules
//! allow): forging one takes 2^192 tries at one request each.
//!
//! **Time.** A store node accepts a capability until
//! `expiry + CAPABILITY_CLOCK_SKEW_MS` on its own clock, and refuses one
//! that expires further ahead than the longest TTL a master issues plus
//! that skew (a master whose clock runs far ahead cannot mint long-lived
//! capabilities). Clocks must agree within [`CAPABILITY_CLOCK_SKEW_MS`].

use ring::hmac;

use crate::secret::MacKey;

/// Size of an encoded capability.
pub const CAPABILITY_BYTES: usize = 64;
/// The capability format this build issues and accepts (2: with the arena).
pub const CAPABILITY_VERSION: u8 = 2;
/// Size of a capability's MAC (HMAC-SHA256, truncated).
pub const CAPABILITY_MAC_BYTES: usize = CAPABILITY_BYTES - BODY_BYTES;
/// Size of a segment key.
pub const SEGMENT_KEY_BYTES: usize = 32;
/// How far a store node's clock may differ from the masters'. A capability
/// stays valid this long past its expiry, and may expire this much later
/// than the longest TTL. NTP or chrony keeps a cluster's clocks within
/// milliseconds; 5 s also covers a node whose sync just resumed.
pub const CAPABILITY_CLOCK_SKEW_MS: u64 = 5_000;
/// Longest capability lifetime a master issues (its `--capability_ttl_sec`
/// is at most this). Bounds how long a leaked capability is good for, even
/// from a master whose clock runs ahead.
pub const CAPABILITY_TTL_MAX_MS: u64 = 3_600_000;

/// The bytes the MAC covers.
const BODY_BYTES: usize = 40;
/// Largest expiry the 48-bit field holds.
const EXPIRY_MAX_UNIX_MS: u64 = (1 << 48) - 1;

/// What a capability allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Access {
    /// Copy bytes out of the range.
    Read = 1,
    /// Copy bytes into the range.
    Write = 2,
}

impl Access {
    fn from_u8(byte: u8) -> Option<Access> {
        match byte {
            1 => Some(Access::Read),
            2 => Some(Access::Write),
            _ => None,
        }
    }
}

impl std::fmt::Display for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Access::Read => "READ",
            Access::Write => "WRITE",
        })
    }
}

/// One grant: `access` to `[offset, offset + len)` of segment `segment_id`
/// until `expires_unix_ms`, for a WRITE inside arena `arena`, signed by `mac`. `Debug` leaves the MAC out: a
/// capability is a bearer token, and logs are not the place for it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Capability {
    pub segment_id: u64,
    pub offset: u64,
    pub len: u64,
    pub access: Access,
    pub expires_unix_ms: u64,
    /// The arena a WRITE's range was handed out in (0 for a READ).
    pub arena: u64,
    pub mac: [u8; CAPABILITY_MAC_BYTES],
}

impl std::fmt::Debug for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capability")
            .field("segment_id", &self.segment_id)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("access", &self.access)
            .field("expires_unix_ms", &self.expires_unix_ms)
            .field("arena", &self.arena)
            .finish_non_exhaustive()
    }
}

/// What a request asks to do, checked against a capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Requested {
    pub segment_id: u64,
    pub offset: u64,
    pub len: u64,
    pub access: Access,
}

/// Why a capability was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    #[error("a capability is {expected} bytes, got {actual}")]
    WrongSize { expected: usize, actual: usize },
    #[error("the request carries no capability")]
    Missing,
    #[error("capability version {0}; this build speaks {CAPABILITY_VERSION}")]
    BadVersion(u8),
    #[error("unknown capability access {0}; expected 1 (READ) or 2 (WRITE)")]
    BadAccess(u8),
    #[error("capability range [{offset}, {offset} + {len}) overflows")]
    BadRange { offset: u64, len: u64 },
    #[error("a segment key is {SEGMENT_KEY_BYTES} bytes, got {0}")]
    BadKey(usize),
    #[error("capability for segment {capability}, request for segment {requested}")]
    WrongSegment { capability: u64, requested: u64 },
    #[error("capability MAC does not verify under this segment's key (forged, altered, or from another cluster)")]
    Forged,
    #[error("capability grants {capability}, request is a {requested}")]
    WrongAccess { capability: Access, requested: Access },
    #[error(
        "request [{offset}, {offset} + {len}) is outside the capability's range [{cap_offset}, {cap_offset} + {cap_len})"
    )]
    OutsideRange { cap_offset: u64, cap_len: u64, offset: u64, len: u64 },
    #[error(
        "capability expired at {expires_unix_ms} (unix ms), now {now_unix_ms} on this node; a slow transfer, or \
         this node's clock is ahead of the masters'"
    )]
    Expired { expires_unix_ms: u64, now_unix_ms: u64 },
    #[error(
        "capability expires at {expires_unix_ms} (unix ms), further ahead of now ({now_unix_ms}) than any master \
         issues; the master's clock is ahead of this node's"
    )]
    TooFarAhead { expires_unix_ms: u64, now_unix_ms: u64 },
}

/// A segment's key, ready to sign and verify (no allocation per use).
/// `Debug` shows nothing of it.
#[derive(Clone)]
pub struct SegmentKey(hmac::Key);

impl std::fmt::Debug for SegmentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SegmentKey(..)")
    }
}

impl SegmentKey {
    pub fn new(bytes: &[u8; SEGMENT_KEY_BYTES]) -> SegmentKey {
        SegmentKey(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// A key received from a peer: exactly [`SEGMENT_KEY_BYTES`] bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<SegmentKey, CapabilityError> {
        let bytes: &[u8; SEGMENT_KEY_BYTES] = bytes.try_into().map_err(|_| CapabilityError::BadKey(bytes.len()))?;
        Ok(SegmentKey::new(bytes))
    }
}

/// The key of segment `segment_id` owned by client `owner_client_id`, under
/// the masters' capability root key.
pub fn segment_key(root: &MacKey, segment_id: u64, owner_client_id: u64) -> [u8; SEGMENT_KEY_BYTES] {
    let tag = root.sign(&[b"segment", &segment_id.to_le_bytes(), &owner_client_id.to_le_bytes()]);
    let mut key = [0u8; SEGMENT_KEY_BYTES];
    key.copy_from_slice(&tag[..SEGMENT_KEY_BYTES]);
    key
}

/// A capability for `requested` until `expires_unix_ms`, outside any arena
/// (a READ), signed with `key`. Expiries beyond the 48-bit field are
/// clamped to its largest value.
pub fn issue(key: &SegmentKey, requested: &Requested, expires_unix_ms: u64) -> Capability {
    issue_in_arena(key, requested, 0, expires_unix_ms)
}

/// A capability for `requested` in arena `arena` (a WRITE names the arena
/// its range was handed out in) until `expires_unix_ms`, signed with `key`.
pub fn issue_in_arena(key: &SegmentKey, requested: &Requested, arena: u64, expires_unix_ms: u64) -> Capability {
    let mut capability = Capability {
        segment_id: requested.segment_id,
        offset: requested.offset,
        len: requested.len,
        access: requested.access,
        expires_unix_ms: expires_unix_ms.min(EXPIRY_MAX_UNIX_MS),
        arena,
        mac: [0; CAPABILITY_MAC_BYTES],
    };
    capability.mac = mac_of(key, &capability.body());
    capability
}

/// The truncated HMAC of `body` under `key`.
fn mac_of(key: &SegmentKey, body: &[u8; BODY_BYTES]) -> [u8; CAPABILITY_MAC_BYTES] {
    let tag = hmac::sign(&key.0, body);
    let mut mac = [0u8; CAPABILITY_MAC_BYTES];
    mac.copy_from_slice(&tag.as_ref()[..CAPABILITY_MAC_BYTES]);
    mac
}

/// Compares two MACs in time that does not depend on where they differ.
fn same_mac(a: &[u8; CAPABILITY_MAC_BYTES], b: &[u8]) -> bool {
    b.len() == CAPABILITY_MAC_BYTES && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks the encoded capability `raw` against what a request asks: the
/// MAC under `key`, the segment, the access, that the request's range lies
/// inside the capability's, and the expiry against `now_unix_ms` (with
/// [`CAPABILITY_CLOCK_SKEW_MS`] of slack). Allocates nothing.
pub fn verify(
    key: &SegmentKey,
    raw: &[u8],
    requested: &Requested,
    now_unix_ms: u64,
) -> Result<Capability, CapabilityError> {
    let capability = Capability::decode(raw)?;
    if capability.segment_id != requested.segment_id {
        return Err(CapabilityError::WrongSegment {
            capability: capability.segment_id,
            requested: requested.segment_id,
        });
    }
    // The MAC covers the body as encoded: recompute it from the decoded
    // fields, so no byte the MAC does not cover can change what is granted.
    if !same_mac(&mac_of(key, &capability.body()), &raw[BODY_BYTES..]) {
        return Err(CapabilityError::Forged);
    }
    if capability.access != requested.access {
        return Err(CapabilityError::WrongAccess { capability: capability.access, requested: requested.access });
    }
    if !capability.covers(requested.offset, requested.len) {
        return Err(CapabilityError::OutsideRange {
            cap_offset: capability.offset,
            cap_len: capability.len,
            offset: requested.offset,
            len: requested.len,
        });
    }
    let expires_unix_ms = capability.expires_unix_ms;
    if now_unix_ms > expires_unix_ms.saturating_add(CAPABILITY_CLOCK_SKEW_MS) {
        return Err(CapabilityError::Expired { expires_unix_ms, now_unix_ms });
    }
    if expires_unix_ms > now_unix_ms.saturating_add(CAPABILITY_TTL_MAX_MS + CAPABILITY_CLOCK_SKEW_MS) {
        return Err(CapabilityError::TooFarAhead { expires_unix_ms, now_unix_ms });
    }
    Ok(capability)
}

impl Capability {
    /// The fixed 64-byte encoding (see the module doc).
    pub fn encode(&self) -> [u8; CAPABILITY_BYTES] {
        let mut out = [0u8; CAPABILITY_BYTES];
        out[..BODY_BYTES].copy_from_slice(&self.body());
        out[BODY_BYTES..].copy_from_slice(&self.mac);
        out
    }

    /// Decodes an encoded capability; checks its form, not its MAC.
    pub fn decode(raw: &[u8]) -> Result<Capability, CapabilityError> {
        let raw: &[u8; CAPABILITY_BYTES] =
            raw.try_into().map_err(|_| CapabilityError::WrongSize { expected: CAPABILITY_BYTES, actual: raw.len() })?;
        if raw.iter().all(|b| *b == 0) {
            return Err(CapabilityError::Missing);
        }
        if raw[0] != CAPABILITY_VERSION {
            return Err(CapabilityError::BadVersion(raw[0]));
        }
        let access = Access::from_u8(raw[1]).ok_or(CapabilityError::BadAccess(raw[1]))?;
        let mut expiry = [0u8; 8];
        expiry[..6].copy_from_slice(&raw[2..8]);
        let (offset, len) = (u64_at(raw, 16), u64_at(raw, 24));
        if offset.checked_add(len).is_none() {
            return Err(CapabilityError::BadRange { offset, len });
        }
        let mut mac = [0u8; CAPABILITY_MAC_BYTES];
        mac.copy_from_slice(&raw[BODY_BYTES..]);
        Ok(Capability {
            segment_id: u64_at(raw, 8),
            offset,
            len,
            access,
            expires_unix_ms: u64::from_le_bytes(expiry),
            arena: u64_at(raw, 32),
            mac,
        })
    }

    /// Whether `[offset, offset + len)` lies inside the capability's range.
    pub fn covers(&self, offset: u64, len: u64) -> bool {
        let end = offset.checked_add(len);
        let cap_end = self.offset.checked_add(self.len);
        matches!((end, cap_end), (Some(end), Some(cap_end)) if offset >= self.offset && end <= cap_end)
    }

    /// Bytes 0..40 of the encoding: what the MAC covers.
    fn body(&self) -> [u8; BODY_BYTES] {
        let mut body = [0u8; BODY_BYTES];
        body[0] = CAPABILITY_VERSION;
        body[1] = self.access as u8;
        body[2..8].copy_from_slice(&self.expires_unix_ms.min(EXPIRY_MAX_UNIX_MS).to_le_bytes()[..6]);
        body[8..16].copy_from_slice(&self.segment_id.to_le_bytes());
        body[16..24].copy_from_slice(&self.offset.to_le_bytes());
        body[24..32].copy_from_slice(&self.len.to_le_bytes());
        body[32..40].copy_from_slice(&self.arena.to_le_bytes());
        body
    }
}

/// A little-endian u64 at `at` of a fixed-size capability.
fn u64_at(raw: &[u8; CAPABILITY_BYTES], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&raw[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;
    const SEGMENT: u64 = 0x5E6;
    const OWNER: u64 = 42;

    fn key() -> SegmentKey {
        SegmentKey::new(&[9; SEGMENT_KEY_BYTES])
    }

    fn grant(access: Access) -> Requested {
        Requested { segment_id: SEGMENT, offset: 4096, len: 1 << 20, access }
    }

    fn issued(access: Access) -> [u8; CAPABILITY_BYTES] {
        issue(&key(), &grant(access), NOW + 60_000).encode()
    }

    #[test]
    fn an_issued_capability_round_trips_and_verifies_for_its_range() {
        let cap = issue(&key(), &grant(Access::Write), NOW + 60_000);
        assert_eq!(Capability::decode(&cap.encode()), Ok(cap));
        let raw = cap.encode();
        assert_eq!(verify(&key(), &raw, &grant(Access::Write), NOW), Ok(cap));
        // Any range inside the grant: a chunk of a larger transfer.
        let chunk = Requested { offset: 4096 + 1000, len: 5000, ..grant(Access::Write) };
        assert_eq!(verify(&key(), &raw, &chunk, NOW), Ok(cap));
        let empty_at_end = Requested { offset: 4096 + (1 << 20), len: 0, ..grant(Access::Write) };
        assert!(verify(&key(), &raw, &empty_at_end, NOW).is_ok());
        assert!(!format!("{cap:?}").contains("mac"), "Debug leaves the MAC out");
    }

    #[test]
    fn every_tampered_byte_is_refused() {
        let raw = issued(Access::Read);
        for index in 0..CAPABILITY_BYTES {
            let mut bad = raw;
            bad[index] ^= 0x01;
            let result = verify(&key(), &bad, &grant(Access::Read), NOW);
            assert!(result.is_err(), "byte {index} flipped still verifies");
        }
        // A widened range with the original MAC is a forgery, not a grant.
        let mut wider = Capability::decode(&raw).unwrap();
        wider.len *= 2;
        let request = Requested { len: 2 << 20, ..grant(Access::Read) };
        assert_eq!(verify(&key(), &wider.encode(), &request, NOW), Err(CapabilityError::Forged));
    }

    #[test]
    fn another_key_another_segment_or_another_access_is_refused() {
        let raw = issued(Access::Read);
        let other = SegmentKey::new(&[8; SEGMENT_KEY_BYTES]);
        assert_eq!(verify(&other, &raw, &grant(Access::Read), NOW), Err(CapabilityError::Forged));
        let elsewhere = Requested { segment_id: SEGMENT + 1, ..grant(Access::Read) };
        assert!(matches!(verify(&key(), &raw, &elsewhere, NOW), Err(CapabilityError::WrongSegment { .. })));
        assert_eq!(
            verify(&key(), &raw, &grant(Access::Write), NOW),
            Err(CapabilityError::WrongAccess { capability: Access::Read, requested: Access::Write })
        );
    }

    #[test]
    fn ranges_outside_the_grant_are_refused() {
        let raw = issued(Access::Write);
        for (offset, len) in [(0, 10), (4095, 2), (4096, (1 << 20) + 1), (4096 + (1 << 20), 1), (u64::MAX, 1)] {
            let request = Requested { offset, len, ..grant(Access::Write) };
            let result = verify(&key(), &raw, &request, NOW);
            assert!(matches!(result, Err(CapabilityError::OutsideRange { .. })), "[{offset}, +{len}): {result:?}");
        }
    }

    #[test]
    fn expiry_allows_the_clock_skew_and_no_more() {
        let raw = issued(Access::Read);
        let expires = NOW + 60_000;
        assert!(verify(&key(), &raw, &grant(Access::Read), expires + CAPABILITY_CLOCK_SKEW_MS).is_ok());
        let late = expires + CAPABILITY_CLOCK_SKEW_MS + 1;
        assert_eq!(
            verify(&key(), &raw, &grant(Access::Read), late),
            Err(CapabilityError::Expired { expires_unix_ms: expires, now_unix_ms: late })
        );
        // A capability that expires further ahead than any master issues.
        let far = issue(&key(), &grant(Access::Read), NOW + CAPABILITY_TTL_MAX_MS + CAPABILITY_CLOCK_SKEW_MS + 1);
        assert!(matches!(
            verify(&key(), &far.encode(), &grant(Access::Read), NOW),
            Err(CapabilityError::TooFarAhead { .. })
        ));
    }

    #[test]
    fn malformed_encodings_are_named() {
        let raw = issued(Access::Read);
        assert_eq!(Capability::decode(&raw[..63]), Err(CapabilityError::WrongSize { expected: 64, actual: 63 }));
        assert_eq!(Capability::decode(&[]), Err(CapabilityError::WrongSize { expected: 64, actual: 0 }));
        assert_eq!(Capability::decode(&[0; CAPABILITY_BYTES]), Err(CapabilityError::Missing));
        let mut bad = raw;
        bad[0] = 1;
        assert_eq!(Capability::decode(&bad), Err(CapabilityError::BadVersion(1)), "the format before arenas");
        let mut bad = raw;
        bad[1] = 3;
        assert_eq!(Capability::decode(&bad), Err(CapabilityError::BadAccess(3)));
        let mut bad = raw;
        bad[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(Capability::decode(&bad), Err(CapabilityError::BadRange { .. })));
        assert_eq!(SegmentKey::from_slice(&[1; 31]).map(drop), Err(CapabilityError::BadKey(31)));
        assert!(SegmentKey::from_slice(&[1; 32]).is_ok());
    }

    #[test]
    fn decode_never_panics_on_any_bytes() {
        // A cheap exhaustive-ish sweep: every length up to two capabilities,
        // and every value of the version and access bytes.
        for len in 0..=2 * CAPABILITY_BYTES {
            let _ = Capability::decode(&vec![0xA5; len]);
        }
        let mut raw = issued(Access::Write);
        for version in 0..=255u8 {
            for access in 0..=255u8 {
                raw[0] = version;
                raw[1] = access;
                let _ = verify(&key(), &raw, &grant(Access::Write), NOW);
            }
        }
    }

    #[test]
    fn a_write_names_its_arena_and_the_mac_covers_it() {
        let cap = issue_in_arena(&key(), &grant(Access::Write), 77, NOW + 60_000);
        let raw = cap.encode();
        assert_eq!(verify(&key(), &raw, &grant(Access::Write), NOW).map(|c| c.arena), Ok(77));
        // Claiming a newer arena with the old MAC is a forgery.
        let mut newer = cap;
        newer.arena = 78;
        assert_eq!(verify(&key(), &newer.encode(), &grant(Access::Write), NOW), Err(CapabilityError::Forged));
        assert_eq!(Capability::decode(&issued(Access::Read)).map(|c| c.arena), Ok(0), "a READ names no arena");
    }

    #[test]
    fn segment_keys_bind_the_segment_and_its_owner() {
        let root = MacKey::from_bytes(&[7; 32]);
        let k = segment_key(&root, SEGMENT, OWNER);
        assert_eq!(k, segment_key(&root, SEGMENT, OWNER), "derived, not stored: every master agrees");
        assert_ne!(k, segment_key(&root, SEGMENT + 1, OWNER));
        assert_ne!(k, segment_key(&root, SEGMENT, OWNER + 1), "a remount under another client gets another key");
        let other_cluster = MacKey::from_bytes(&[6; 32]);
        assert_ne!(k, segment_key(&other_cluster, SEGMENT, OWNER));
        // A capability from the owner's key does not open the same segment id under another owner.
        let cap = issue(&SegmentKey::new(&k), &grant(Access::Read), NOW + 1_000).encode();
        let stranger = SegmentKey::new(&segment_key(&root, SEGMENT, OWNER + 1));
        assert_eq!(verify(&stranger, &cap, &grant(Access::Read), NOW), Err(CapabilityError::Forged));
    }
}
