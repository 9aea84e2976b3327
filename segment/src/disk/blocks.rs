//! The per-block checksum table: one CRC-32C per [`DISK_BLOCK_BYTES`] data
//! block, kept in memory ([`BlockTable`]) and on disk in table pages of
//! [`ENTRIES_PER_PAGE`] little-endian `u32`s each.
//!
//! Every entry starts as the CRC of a zero block: the file is preallocated
//! and reads as zeros until written, so never-written blocks verify with no
//! special case.
//!
//! A write updates its blocks' entries in memory and then writes the table
//! pages that hold them. Two writes to different blocks of one page must not
//! write stale snapshots of it in the wrong order (the later write would
//! carry the older entry of the other block). So the snapshot and the write
//! of a page happen under that page's lock, held until the page write
//! completes ([`BlockTable::lock_pages`]); the fdatasync after it needs no
//! lock. Pages share [`TABLE_LOCK_STRIPES`] locks (page index modulo), which
//! bounds the locks' memory whatever the segment's size.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock};

use tokio::sync::{Mutex, OwnedMutexGuard};

use super::DISK_BLOCK_BYTES;
use crate::checksum::crc32c;

/// Bytes of one table entry (a CRC-32C).
const ENTRY_BYTES: usize = 4;

/// Entries in one table page.
pub(crate) const ENTRIES_PER_PAGE: u64 = DISK_BLOCK_BYTES / ENTRY_BYTES as u64;

/// Locks shared by the table pages. 64 lets 64 writers to different 4 MiB
/// regions update the table at once; a collision only serialises two page
/// writes (microseconds), and the locks cost 64 small allocations.
pub(crate) const TABLE_LOCK_STRIPES: usize = 64;

/// CRC-32C of a block of zeros: the entry of every never-written block.
pub(crate) fn zero_block_crc() -> u32 {
    static CRC: LazyLock<u32> = LazyLock::new(|| crc32c(&[0u8; DISK_BLOCK_BYTES as usize]));
    *CRC
}

/// Number of table pages for `blocks` data blocks.
pub(crate) fn table_pages(blocks: u64) -> u64 {
    blocks.div_ceil(ENTRIES_PER_PAGE)
}

/// The checksum of every data block, in memory. See the module doc.
pub(crate) struct BlockTable {
    entries: Vec<AtomicU32>,
    stripes: Vec<Arc<Mutex<()>>>,
}

impl BlockTable {
    /// A table of `blocks` never-written blocks.
    pub(crate) fn fresh(blocks: usize) -> Self {
        let zero = zero_block_crc();
        Self::from_entries((0..blocks).map(|_| AtomicU32::new(zero)).collect())
    }

    /// A table of `blocks` blocks whose entries are filled by
    /// [`Self::load_pages`].
    pub(crate) fn empty(blocks: usize) -> Self {
        Self::from_entries((0..blocks).map(|_| AtomicU32::new(0)).collect())
    }

    fn from_entries(entries: Vec<AtomicU32>) -> Self {
        Self { entries, stripes: (0..TABLE_LOCK_STRIPES).map(|_| Arc::new(Mutex::new(()))).collect() }
    }

    /// Number of data blocks.
    pub(crate) fn blocks(&self) -> u64 {
        self.entries.len() as u64
    }

    /// The checksum recorded for `block`.
    pub(crate) fn get(&self, block: u64) -> u32 {
        self.entries[block as usize].load(Ordering::Acquire)
    }

    /// Records `crc` for `block`.
    pub(crate) fn set(&self, block: u64, crc: u32) {
        self.entries[block as usize].store(crc, Ordering::Release);
    }

    /// Fills entries from table pages as read from disk, `bytes` starting at
    /// page `first_page` (whole pages); entries past the last block are ignored.
    pub(crate) fn load_pages(&self, first_page: u64, bytes: &[u8]) {
        let first = first_page * ENTRIES_PER_PAGE;
        for (i, raw) in bytes.chunks_exact(ENTRY_BYTES).enumerate() {
            let block = first + i as u64;
            if block >= self.blocks() {
                break;
            }
            self.set(block, u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]));
        }
    }

    /// Encodes page `page` into `out` (one block): the entries of its blocks,
    /// zeros past the last block.
    pub(crate) fn encode_page(&self, page: u64, out: &mut [u8]) {
        let first = page * ENTRIES_PER_PAGE;
        for (i, raw) in out[..DISK_BLOCK_BYTES as usize].chunks_exact_mut(ENTRY_BYTES).enumerate() {
            let block = first + i as u64;
            let crc = if block < self.blocks() { self.get(block) } else { 0 };
            raw.copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// Locks the pages of `pages` (their stripes, in ascending order, each
    /// once), for a snapshot-and-write of them. The guards are owned, so
    /// they can travel with the page write and outlive a cancelled caller.
    pub(crate) async fn lock_pages(&self, pages: RangeInclusive<u64>) -> Vec<OwnedMutexGuard<()>> {
        let mut stripes: Vec<usize> = pages.map(|p| (p % TABLE_LOCK_STRIPES as u64) as usize).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            guards.push(self.stripes[stripe].clone().lock_owned().await);
        }
        guards
    }

    /// Checks the whole blocks of `data` (block `first_block` onwards)
    /// against their entries; returns the bad runs as (first block, count).
    pub(crate) fn verify(&self, first_block: u64, data: &[u8]) -> Vec<(u64, u64)> {
        let mut bad: Vec<(u64, u64)> = Vec::new();
        for (i, block_bytes) in data.chunks_exact(DISK_BLOCK_BYTES as usize).enumerate() {
            let block = first_block + i as u64;
            if crc32c(block_bytes) == self.get(block) {
                continue;
            }
            match bad.last_mut() {
                Some((start, count)) if *start + *count == block => *count += 1,
                _ => bad.push((block, 1)),
            }
        }
        bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_and_unwritten_blocks_verify() {
        let blocks = ENTRIES_PER_PAGE as usize + 3;
        let table = BlockTable::fresh(blocks);
        assert_eq!(table_pages(table.blocks()), 2);
        assert!(table.verify(0, &vec![0u8; 4 * DISK_BLOCK_BYTES as usize]).is_empty(), "zeros verify");
        table.set(ENTRIES_PER_PAGE + 1, 0xDEAD_BEEF);
        let mut page = vec![0xFFu8; DISK_BLOCK_BYTES as usize];
        table.encode_page(1, &mut page);
        let loaded = BlockTable::empty(blocks);
        loaded.load_pages(1, &page);
        assert_eq!(loaded.get(ENTRIES_PER_PAGE + 1), 0xDEAD_BEEF);
        assert_eq!(loaded.get(ENTRIES_PER_PAGE), zero_block_crc());
        assert_eq!(&page[3 * ENTRY_BYTES..], &vec![0u8; page.len() - 3 * ENTRY_BYTES][..], "zeros past the end");
    }

    #[test]
    fn bad_blocks_are_reported_as_runs() {
        let table = BlockTable::fresh(8);
        let mut data = vec![0u8; 8 * DISK_BLOCK_BYTES as usize];
        for block in [1usize, 2, 5] {
            data[block * DISK_BLOCK_BYTES as usize + 7] = 1;
        }
        assert_eq!(table.verify(0, &data), vec![(1, 2), (5, 1)]);
        assert_eq!(table.verify(4, &data[4 * DISK_BLOCK_BYTES as usize..]), vec![(5, 1)]);
    }

    #[tokio::test]
    async fn page_locks_are_taken_once_each_in_order() {
        let table = BlockTable::fresh(10);
        // Pages 0 and TABLE_LOCK_STRIPES share a stripe: taken once, no deadlock.
        let guards = table.lock_pages(0..=TABLE_LOCK_STRIPES as u64).await;
        assert_eq!(guards.len(), TABLE_LOCK_STRIPES);
        drop(guards);
        assert_eq!(table.lock_pages(3..=3).await.len(), 1);
    }
}
