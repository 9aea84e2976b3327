//! Tests of [`DiskSegment`] through its public API, each I/O test on both
//! backends, in files under the system temp directory (ext4 here: it
//! supports O_DIRECT and fallocate).

use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::file::FileLayout;
use super::*;
use crate::ids::{ClientId, SegmentId};
use crate::testing::pattern;

/// Both backends, named for failure messages.
const BACKENDS: [(BackendChoice, DiskBackend); 2] =
    [(BackendChoice::IoUring, DiskBackend::IoUring), (BackendChoice::Pread, DiskBackend::Pread)];

const BLOCK: u64 = DISK_BLOCK_BYTES;
const CHUNK: usize = DISK_IO_CHUNK_BYTES;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A directory removed (with its files) on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("mooncake-disk-test-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn create(path: &Path, data_bytes: u64, choice: BackendChoice) -> DiskSegment {
    DiskSegment::create(path, SegmentId(0x5E6), ClientId(0xC11), data_bytes, choice)
        .unwrap_or_else(|e| panic!("create {} ({choice:?}): {e}", path.display()))
}

/// Writes `data` at `offset` in chunks, as the transfer server does.
async fn put(disk: &DiskSegment, offset: u64, data: &[u8]) {
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        let mut buf = disk.buffer(chunk.len()).await.unwrap();
        buf.as_mut_slice().copy_from_slice(chunk);
        let at = offset + (i * CHUNK) as u64;
        disk.write(at, buf).await.unwrap_or_else(|e| panic!("write of {} bytes at {at}: {e}", chunk.len()));
    }
}

/// Reads `[offset, offset + len)` in chunks.
async fn get(disk: &DiskSegment, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let at = offset + out.len() as u64;
        let n = (len - out.len()).min(CHUNK);
        let buf = disk.read(at, n).await.unwrap_or_else(|e| panic!("read of {n} bytes at {at}: {e}"));
        assert_eq!(buf.len(), n);
        out.extend_from_slice(buf.as_slice());
    }
    out
}

/// Flips one bit of byte `at` of the data region, through a plain write to the file.
fn flip_data_byte(path: &Path, data_bytes: u64, at: u64) {
    let layout = FileLayout::new(data_bytes).unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, layout.data_offset + at).unwrap();
    byte[0] ^= 0x10;
    file.write_all_at(&byte, layout.data_offset + at).unwrap();
    file.sync_all().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_read_back_equal_on_both_backends() {
    let dir = TempDir::new("roundtrip");
    let size = (16 << 20) + 3 * BLOCK;
    for (choice, backend) in BACKENDS {
        let path = dir.file(&format!("{backend:?}"));
        let disk = create(&path, size, choice);
        assert_eq!(disk.backend(), backend);
        assert_eq!(disk.data_bytes(), size);
        // Why: unaligned lengths (padded to a block), a whole chunk, several
        // chunks, and objects flush with the end of the region.
        let cases: [(u64, usize); 7] = [
            (0, 1),
            (BLOCK, 4095),
            (3 * BLOCK, 4097),
            (1 << 20, CHUNK),
            (5 << 20, 2 * CHUNK + 17),
            (size - BLOCK, BLOCK as usize),
            (size - 2 * BLOCK, 5000),
        ];
        for (index, (offset, len)) in cases.into_iter().enumerate() {
            let data = pattern(index as u64, len);
            put(&disk, offset, &data).await;
            assert!(get(&disk, offset, len).await == data, "{backend:?}: case {index} ({len} bytes at {offset})");
            // An unaligned window inside the object.
            if len > 100 {
                let (from, n) = (offset + 33, len - 66);
                assert!(get(&disk, from, n).await[..] == data[33..33 + n], "{backend:?}: window of case {index}");
            }
        }
        // The padding of a short write is zeros, not stale bytes.
        put(&disk, 8 * BLOCK, &vec![0xAB; 3 * BLOCK as usize]).await;
        put(&disk, 8 * BLOCK, &[7u8; 10]).await;
        let tail = get(&disk, 8 * BLOCK, 2 * BLOCK as usize).await;
        let (first, second) = tail.split_at(BLOCK as usize);
        assert!(first[..10].iter().all(|b| *b == 7) && first[10..].iter().all(|b| *b == 0), "{backend:?}");
        assert!(second.iter().all(|b| *b == 0xAB), "{backend:?}: the block after the write is untouched");
        // Never-written blocks read as zeros and verify.
        assert!(get(&disk, 15 << 20, 8192).await.iter().all(|b| *b == 0), "{backend:?}");
        assert!(disk.read(size, 0).await.unwrap().is_empty());
        assert_eq!(disk.scrub().await.unwrap(), vec![], "{backend:?}: nothing corrupt");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_and_renewed_ids_survive_a_reopen() {
    let dir = TempDir::new("reopen");
    let size = 1 << 20;
    for (choice, backend) in BACKENDS {
        let path = dir.file(&format!("{backend:?}"));
        let data = pattern(7, 300_000);
        let disk = create(&path, size, choice);
        put(&disk, 64 * BLOCK, &data).await;
        disk.renew(SegmentId(0xBEEF)).unwrap();
        assert_eq!(disk.segment_id(), SegmentId(0xBEEF));
        drop(disk);
        // Reopened with the other backend too: one file format.
        for (reopen, _) in BACKENDS {
            let disk = DiskSegment::open(&path, reopen).unwrap();
            assert_eq!(
                disk.header(),
                DiskHeader { segment: SegmentId(0xBEEF), owner: ClientId(0xC11), data_bytes: size },
                "{backend:?} reopened with {reopen:?}"
            );
            assert!(get(&disk, 64 * BLOCK, data.len()).await == data, "{backend:?} reopened with {reopen:?}");
            assert_eq!(disk.scrub().await.unwrap(), vec![]);
        }
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "segment files are private to their owner");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_is_corrupt_on_read_and_found_by_scrub() {
    let dir = TempDir::new("corrupt");
    let size = 10 << 20;
    let bad_block = (4 << 20) / BLOCK + 5;
    for (choice, backend) in BACKENDS {
        let path = dir.file(&format!("{backend:?}"));
        let disk = create(&path, size, choice);
        put(&disk, 4 << 20, &pattern(3, 64 * 1024)).await;
        flip_data_byte(&path, size, bad_block * BLOCK + 17);

        // Why: any read that covers the block fails and names exactly it,
        // even one that asks for a single byte of a neighbouring block.
        for (offset, len) in [(4 << 20, 64 * 1024), (bad_block * BLOCK + 4000, 200), ((4 << 20) - 10, CHUNK)] {
            match disk.read(offset, len).await {
                Err(DiskError::Corrupt { offset, len }) => assert_eq!((offset, len), (bad_block * BLOCK, BLOCK)),
                other => panic!("{backend:?}: read of {len} at {offset}: {other:?}"),
            }
        }
        assert!(disk.read((bad_block + 1) * BLOCK, 100).await.is_ok(), "the next block is fine");
        assert!(disk.read(bad_block * BLOCK - 100, 100).await.is_ok(), "the block before is fine");
        assert_eq!(disk.scrub().await.unwrap(), vec![(bad_block * BLOCK, BLOCK)], "{backend:?}");
        // After a restart too; and rewriting the block heals it.
        drop(disk);
        let disk = DiskSegment::open(&path, choice).unwrap();
        assert_eq!(disk.scrub().await.unwrap(), vec![(bad_block * BLOCK, BLOCK)], "{backend:?} reopened");
        put(&disk, bad_block * BLOCK, b"fresh").await;
        assert_eq!(disk.scrub().await.unwrap(), vec![]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_with_the_right_error() {
    let dir = TempDir::new("refuse");
    let size = 1 << 20;
    for (choice, backend) in BACKENDS {
        let disk = create(&dir.file(&format!("{backend:?}")), size, choice);
        let other = create(&dir.file(&format!("{backend:?}-other")), size, choice);
        let buf = disk.buffer(10).await.unwrap();
        assert!(matches!(disk.write(100, buf).await, Err(DiskError::Unaligned { offset: 100 })), "{backend:?}");
        let buf = disk.buffer(BLOCK as usize + 1).await.unwrap();
        let err = disk.write(size - BLOCK, buf).await.unwrap_err();
        assert!(matches!(err, DiskError::OutOfBounds { .. }), "{backend:?}: {err}");
        assert!(matches!(disk.read(size - 10, 11).await, Err(DiskError::OutOfBounds { .. })));
        assert!(matches!(disk.read(u64::MAX, 2).await, Err(DiskError::OutOfBounds { .. })));
        assert!(matches!(disk.read(0, CHUNK + 1).await, Err(DiskError::ChunkTooLarge { .. })));
        assert!(matches!(disk.buffer(CHUNK + 1).await, Err(DiskError::ChunkTooLarge { .. })));
        let foreign = other.buffer(10).await.unwrap();
        assert!(matches!(disk.write(0, foreign).await, Err(DiskError::ForeignBuffer { .. })));
        let from_read = disk.read(5, 10).await.unwrap();
        assert!(matches!(disk.write(0, from_read).await, Err(DiskError::ForeignBuffer { .. })));
        assert!(get(&disk, 0, 8192).await.iter().all(|b| *b == 0), "{backend:?}: nothing was written");
    }
}

#[test]
fn files_that_are_not_segments_are_refused() {
    for (choice, backend) in BACKENDS {
        let dir = TempDir::new(&format!("files-{backend:?}"));
        refuse_non_segments(&dir, choice);
    }
}

fn refuse_non_segments(dir: &TempDir, choice: BackendChoice) {
    let size = 64 * BLOCK;
    let path = dir.file("seg");
    drop(create(&path, size, choice));

    let err = DiskSegment::open(dir.0.as_path(), choice).unwrap_err();
    assert!(matches!(&err, DiskError::NotRegularFile { reason, .. } if reason.contains("directory")), "{err}");
    let link = dir.file("link");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let err = DiskSegment::open(&link, choice).unwrap_err();
    assert!(matches!(&err, DiskError::NotRegularFile { reason, .. } if reason.contains("symlink")), "{err}");
    let err = DiskSegment::create(&link, SegmentId(1), ClientId(1), size, choice).unwrap_err();
    assert!(matches!(&err, DiskError::NotRegularFile { .. }), "{err}");
    let err = DiskSegment::create(&path, SegmentId(1), ClientId(1), size, choice).unwrap_err();
    assert!(matches!(err, DiskError::AlreadyExists { .. }), "{err}");
    for bad in [0, 4095, BLOCK + 1] {
        let err = DiskSegment::create(&dir.file("bad-size"), SegmentId(1), ClientId(1), bad, choice);
        assert!(matches!(err, Err(DiskError::BadSize { .. })), "size {bad}");
        assert!(!dir.file("bad-size").exists());
    }

    // A file that grew or shrank is refused, and so is a wrong magic.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let length = file.metadata().unwrap().len();
    file.set_len(length + BLOCK).unwrap();
    let err = DiskSegment::open(&path, choice).unwrap_err();
    assert!(matches!(err, DiskError::SizeMismatch { expected, actual, .. } if actual == expected + BLOCK), "{err}");
    file.set_len(length).unwrap();
    assert!(DiskSegment::open(&path, choice).is_ok());
    file.write_all_at(b"NOTASEGM", 0).unwrap();
    file.sync_all().unwrap();
    let err = DiskSegment::open(&path, choice).unwrap_err();
    assert!(matches!(&err, DiskError::BadHeader { reason, .. } if reason.contains("magic")), "{err}");
    assert!(err.to_string().contains("create the segment afresh"), "{err}");
    let err = DiskSegment::open(&dir.file("missing"), choice).unwrap_err();
    assert!(matches!(err, DiskError::Io { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_larger_than_the_free_space_is_refused_at_create() {
    let dir = TempDir::new("space");
    let free = crate::memory::free_bytes(&dir.0).unwrap();
    let size = (free + (1 << 30)).div_ceil(BLOCK) * BLOCK;
    let path = dir.file("huge");
    let err = DiskSegment::create(&path, SegmentId(1), ClientId(1), size, BackendChoice::Auto).unwrap_err();
    assert!(matches!(err, DiskError::NoSpace { .. }), "{err}");
    assert!(err.to_string().contains("bytes free"), "{err}");
    assert!(!path.exists(), "no file is left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_sharing_a_table_page_all_survive_a_reopen() {
    let dir = TempDir::new("concurrent");
    let size = 4 << 20;
    // Why: 128 one-block writes at once, all in table page 0 (1024 blocks):
    // a page written from a stale snapshot would lose another's entry,
    // which a reopen (table from disk) turns into Corrupt. Several rounds,
    // because a lost entry needs an unlucky interleaving.
    let blocks = 128u64;
    for (choice, backend) in BACKENDS {
        let path = dir.file(&format!("{backend:?}"));
        drop(create(&path, size, choice));
        for round in 0..4u64 {
            let disk = Arc::new(DiskSegment::open(&path, choice).unwrap());
            let mut tasks = Vec::new();
            for block in 0..blocks {
                let disk = disk.clone();
                tasks.push(tokio::spawn(async move {
                    let len = BLOCK as usize - (block as usize % 7);
                    put(&disk, block * BLOCK, &pattern(round << 32 | block, len)).await;
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
            drop(disk);
            let disk = DiskSegment::open(&path, choice).unwrap();
            let at = format!("{backend:?}, round {round}");
            assert_eq!(disk.scrub().await.unwrap(), vec![], "{at}: every table entry reached the disk");
            for block in 0..blocks {
                let len = BLOCK as usize - (block as usize % 7);
                assert!(
                    get(&disk, block * BLOCK, len).await == pattern(round << 32 | block, len),
                    "{at}: block {block}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_picks_a_backend_and_dropping_stops_it() {
    let dir = TempDir::new("auto");
    let path = dir.file("seg");
    let disk = create(&path, 1 << 20, BackendChoice::Auto);
    // io_uring works on this machine kind; Auto must not fall back needlessly.
    assert_eq!(disk.backend(), DiskBackend::IoUring);
    put(&disk, 0, b"hello").await;
    // A read in flight when its caller gives up still completes inside the
    // engine; the buffer goes back to the pool afterwards.
    for _ in 0..DISK_BUFFERS_MAX * 2 {
        let read = disk.read(0, CHUNK);
        let _ = tokio::time::timeout(std::time::Duration::from_micros(1), read).await;
    }
    assert_eq!(&get(&disk, 0, 5).await, b"hello");
    let started = Instant::now();
    drop(disk);
    assert!(started.elapsed().as_secs() < 5, "dropping the segment stops its thread promptly");
}

/// Throughput of 4 MiB reads and writes on each backend (run with
/// `cargo test -p mooncake-segment --release -- --ignored --nocapture throughput`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement, not a check"]
async fn throughput_of_4_mib_reads_and_writes() {
    let dir = TempDir::new("throughput");
    let size: u64 = 256 << 20;
    let rounds = (size / CHUNK as u64) as usize;
    // Context: every 4 MiB read and write checksums its blocks once.
    let block_data = pattern(2, CHUNK);
    let started = Instant::now();
    let crcs: u32 = block_data.chunks(BLOCK as usize).map(crate::checksum::crc32c).fold(0, |a, c| a ^ c);
    println!("crc32c of 4 MiB in 4 KiB blocks: {:?} (xor {crcs:#x})", started.elapsed());
    for (choice, backend) in BACKENDS {
        let data = pattern(1, CHUNK);
        for (label, depth) in [("1 at a time", 1usize), ("4 in flight", 4)] {
            let disk = Arc::new(create(&dir.file(&format!("{backend:?}-{depth}")), size, choice));
            // The first pass writes fresh (unwritten) extents, the second
            // overwrites: ext4 converts extents (a journal commit) only once.
            let started = Instant::now();
            run_depth(&disk, rounds, depth, Some(&data)).await;
            let write = mib_per_s(rounds, started);
            let started = Instant::now();
            run_depth(&disk, rounds, depth, Some(&data)).await;
            let rewrite = mib_per_s(rounds, started);
            let started = Instant::now();
            run_depth(&disk, rounds, depth, None).await;
            let read = mib_per_s(rounds, started);
            println!(
                "{backend:?} 4 MiB, {label}: write {write:.0} MiB/s, overwrite {rewrite:.0} MiB/s, read {read:.0} MiB/s"
            );
        }
    }
}

async fn run_depth(disk: &Arc<DiskSegment>, rounds: usize, depth: usize, data: Option<&Vec<u8>>) {
    let mut tasks = Vec::new();
    for lane in 0..depth {
        let (disk, data) = (disk.clone(), data.cloned());
        tasks.push(tokio::spawn(async move {
            for round in (lane..rounds).step_by(depth) {
                let offset = (round * CHUNK) as u64;
                match &data {
                    Some(data) => put(&disk, offset, data).await,
                    None => drop(disk.read(offset, CHUNK).await.unwrap()),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

fn mib_per_s(rounds: usize, started: Instant) -> f64 {
    (rounds * 4) as f64 / started.elapsed().as_secs_f64()
}
