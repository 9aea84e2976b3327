//! The bytes of a trace block, derived from its id alone, so every reader
//! can check what it got without remembering what was written: the 16-byte
//! unit `id` (little-endian u64) then `id * BLOCK_MIX` (wrapping), repeated
//! and cut at the block's length. `upstream_driver.py` and
//! `mooncake_rs.bench` derive the same bytes (any change here changes them
//! there too).

/// The multiplier of the unit's second word (the 64-bit golden ratio).
pub const BLOCK_MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// The key a block is stored under.
pub fn key(id: u64) -> String {
    format!("trace/{id}")
}

/// The unit the block of `id` repeats.
fn unit(id: u64) -> [u8; 16] {
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&id.to_le_bytes());
    u[8..].copy_from_slice(&id.wrapping_mul(BLOCK_MIX).to_le_bytes());
    u
}

/// Fills `buf` with the bytes of block `id`.
pub fn fill(id: u64, buf: &mut [u8]) {
    let u = unit(id);
    for chunk in buf.chunks_mut(16) {
        chunk.copy_from_slice(&u[..chunk.len()]);
    }
}

/// Whether `buf` holds exactly the bytes of block `id`.
pub fn holds(id: u64, buf: &[u8]) -> bool {
    let u = unit(id);
    buf.chunks(16).all(|chunk| chunk == &u[..chunk.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_holds_its_own_bytes_and_no_other_blocks() {
        let mut b = vec![0u8; 1000];
        fill(7, &mut b);
        assert!(holds(7, &b));
        assert!(!holds(8, &b));
        b[999] ^= 1;
        assert!(!holds(7, &b), "a flipped last byte is seen");
    }

    #[test]
    fn the_bytes_are_those_the_python_drivers_derive() {
        // `(struct.pack('<QQ', 1, 0x9E3779B97F4A7C15) * 2)[:20]` in Python.
        let mut b = vec![0u8; 20];
        fill(1, &mut b);
        let want = [1, 0, 0, 0, 0, 0, 0, 0, 0x15, 0x7C, 0x4A, 0x7F, 0xB9, 0x79, 0x37, 0x9E, 1, 0, 0, 0];
        assert_eq!(b, want);
    }
}
