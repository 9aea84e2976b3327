//! Test support shared by this crate's tests and the crates above it (the
//! transfer engine's conformance suite re-exports it): deterministic bytes
//! that name themselves, so a failed comparison says which data it was.

/// Deterministic bytes for `seed` (xorshift64*), so a failure names the data.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}
