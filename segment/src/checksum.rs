//! The object checksum: CRC-32C (Castagnoli, the iSCSI polynomial), which a
//! client computes before PutEnd and verifies on every get. One place owns
//! the implementation, `crc-fast`: it folds with carry-less multiplication
//! (PCLMULQDQ) next to the `crc32` instruction and runs 1.4–2× faster than
//! the `crc32` instruction alone (7.4 vs 5.3 GB/s on an AMD Zen 1 VM,
//! `cargo bench -p mooncake-benches -- 4MiB`). The values are the standard
//! CRC-32C, so checksums stored by earlier builds stay valid.

use crc_fast::CrcAlgorithm;

const ALGORITHM: CrcAlgorithm = CrcAlgorithm::Crc32Iscsi;

/// CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    narrow(crc_fast::checksum(ALGORITHM, data))
}

/// CRC-32C of `a ++ b` from `crc32c(a)`, `crc32c(b)` and `b`'s length, without
/// reading the bytes again (chunks checksummed apart, then joined).
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    narrow(crc_fast::checksum_combine(ALGORITHM, u64::from(crc_a), u64::from(crc_b), len_b as u64))
}

/// CRC-32C over bytes that arrive in pieces (the same value as [`crc32c`]
/// of them joined): lets a copy checksum each piece while it is still in
/// cache instead of reading the whole buffer a second time.
pub struct Crc32c(crc_fast::Digest);

impl Crc32c {
    pub fn new() -> Self {
        Crc32c(crc_fast::Digest::new(ALGORITHM))
    }

    /// Adds the next piece.
    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    /// The CRC-32C of every piece so far, in order.
    pub fn finish(&self) -> u32 {
        narrow(self.0.finalize())
    }
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

/// A CRC-32 result always fits 32 bits; `crc-fast` returns every width as `u64`.
fn narrow(crc: u64) -> u32 {
    (crc & u64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn known_answers_of_crc32c() {
        // The check value of the CRC-32C catalogue entry, and RFC 3720's
        // 32 bytes of zeros and of 0xff.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        assert_eq!(crc32c(b""), 0);
    }

    proptest! {
        #[test]
        fn a_crc_fed_in_pieces_is_the_crc_of_the_whole(
            whole in proptest::collection::vec(any::<u8>(), 0..5000),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(whole.len() + 1)).collect();
            at.sort_unstable();
            let mut crc = Crc32c::new();
            let mut from = 0;
            for to in at.into_iter().chain([whole.len()]) {
                crc.update(&whole[from..to]);
                from = to;
            }
            prop_assert_eq!(crc.finish(), crc32c(&whole));
        }

        #[test]
        fn combining_the_crcs_of_two_parts_gives_the_crc_of_the_whole(
            whole in proptest::collection::vec(any::<u8>(), 0..5000),
            cut in any::<prop::sample::Index>(),
        ) {
            let at = cut.index(whole.len() + 1);
            let (a, b) = whole.split_at(at);
            prop_assert_eq!(crc32c_combine(crc32c(a), crc32c(b), b.len()), crc32c(&whole));
        }
    }
}
