//! The disk baseline of `bench disk`: what the file system and the device
//! give a program that does nothing but direct I/O. A preallocated file
//! opened with `O_DIRECT` is read or written sequentially in requests of one
//! size, with a fixed number of them in flight, through an io_uring of its
//! own (the `io-uring` crate directly) into registered, block-aligned
//! buffers: no checksums, no pool, no thread hand-off, no protocol. A write
//! pass ends with one `fdatasync`, counted in its time (the engine syncs
//! every write; this syncs once).
//!
//! Blocking: call from `spawn_blocking`.

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::time::Instant;

use anyhow::Context;
use io_uring::{IoUring, opcode, squeue, types};

use crate::stats::{Budget, Samples};

/// Alignment of buffers, offsets and lengths for `O_DIRECT` (covers 512-byte
/// and 4 KiB logical blocks).
pub const ALIGN_BYTES: usize = 4096;
/// Requests in flight at most (each holds a buffer of the request size).
pub const DEPTH_MAX: usize = 16;
/// Resubmissions of one request after EINTR/EAGAIN before it counts as failed.
const RETRIES_MAX: u32 = 8;

/// Which way the bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// File to memory.
    Read,
    /// Memory to file (one fdatasync at the end of the pass).
    Write,
}

impl Dir {
    pub fn name(self) -> &'static str {
        match self {
            Dir::Read => "read",
            Dir::Write => "write",
        }
    }
}

/// A preallocated file opened with `O_DIRECT`, removed on drop.
pub struct DirectFile {
    file: File,
    path: PathBuf,
    len_bytes: u64,
}

impl DirectFile {
    /// Creates `path` (it must not exist) and backs all `len_bytes` with
    /// `fallocate` (no holes: every write lands on allocated, unwritten
    /// blocks, as in a disk segment file).
    pub fn create(path: &Path, len_bytes: u64) -> anyhow::Result<DirectFile> {
        anyhow::ensure!(
            len_bytes > 0 && len_bytes.is_multiple_of(ALIGN_BYTES as u64),
            "{len_bytes} is not a whole number of blocks"
        );
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .with_context(|| format!("creating {} with O_DIRECT", path.display()))?;
        let made = DirectFile { file, path: path.to_path_buf(), len_bytes };
        let len = libc::off_t::try_from(len_bytes).context("file size")?;
        // SAFETY: fallocate on a descriptor `made` keeps open; no pointers.
        if unsafe { libc::fallocate(made.file.as_raw_fd(), 0, 0, len) } != 0 {
            let e = io::Error::last_os_error();
            anyhow::bail!("fallocate of {len_bytes} bytes for {}: {e}", path.display());
        }
        Ok(made)
    }

    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DirectFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether files in `dir` can be written and read with `O_DIRECT` (tmpfs and
/// some overlay setups refuse it); the reason when not.
pub fn probe_direct_io(dir: &Path) -> Result<(), String> {
    let path = dir.join(".direct-io-probe");
    let run = || -> anyhow::Result<()> {
        let f = DirectFile::create(&path, ALIGN_BYTES as u64)?;
        let mut buf = Aligned::patterned(ALIGN_BYTES, 1)?;
        let fd = f.file.as_raw_fd();
        // SAFETY: the buffer is ALIGN_BYTES of live, aligned memory we own.
        let n = unsafe { libc::pwrite(fd, buf.as_ptr().cast(), ALIGN_BYTES, 0) };
        anyhow::ensure!(n == ALIGN_BYTES as isize, "O_DIRECT write: {}", io::Error::last_os_error());
        // SAFETY: as above, written by the kernel.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), ALIGN_BYTES, 0) };
        anyhow::ensure!(n == ALIGN_BYTES as isize, "O_DIRECT read: {}", io::Error::last_os_error());
        Ok(())
    };
    run().map_err(|e| format!("{e:#}"))
}

/// The file system type of `path` (statfs magic), e.g. `ext4`, and its
/// device number (to tell whether two paths share a file system).
pub fn filesystem(path: &Path) -> (String, Option<u64>) {
    let dev = std::fs::metadata(path).ok().map(|m| m.dev());
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return ("unknown".into(), dev);
    };
    // SAFETY: statfs writes one `struct statfs` into zeroed memory we own.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `st` a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return ("unknown".into(), dev);
    }
    let name = match st.f_type as u64 {
        0xEF53 => "ext4".to_string(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        0x6969 => "nfs".into(),
        other => format!("statfs magic {other:#x}"),
    };
    (name, dev)
}

/// Reads or writes `file` sequentially from offset 0 (wrapping at its end)
/// in requests of `request_bytes`, `depth` of them in flight, until `budget`
/// ends. Latency per request from its submission to its completion; wall
/// time from the first submission to the last completion (writes: to the end
/// of the fdatasync).
pub fn measure(
    file: &DirectFile,
    dir: Dir,
    request_bytes: usize,
    depth: usize,
    budget: Budget,
) -> anyhow::Result<Samples> {
    anyhow::ensure!((1..=DEPTH_MAX).contains(&depth), "depth {depth} outside 1..={DEPTH_MAX}");
    anyhow::ensure!(
        request_bytes > 0 && request_bytes.is_multiple_of(ALIGN_BYTES) && request_bytes as u64 <= file.len_bytes,
        "request of {request_bytes} bytes on a file of {}",
        file.len_bytes
    );
    let mut ring = IoUring::new((depth * 2) as u32).context("io_uring setup")?;
    let mut bufs =
        (0..depth).map(|i| Aligned::patterned(request_bytes, i as u64)).collect::<anyhow::Result<Vec<_>>>()?;
    let iovecs: Vec<libc::iovec> =
        bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len }).collect();
    // SAFETY: the iovecs describe `bufs`, which outlive the ring (dropped first below).
    let fixed = unsafe { ring.submitter().register_buffers(&iovecs) }.is_ok();
    let mut run = Run {
        fd: file.file.as_raw_fd(),
        dir,
        request_bytes,
        requests_per_pass: file.len_bytes / request_bytes as u64,
        fixed,
        slots: vec![None; depth],
        samples: Samples::default(),
    };
    let start = Instant::now();
    let result = run.drive(&mut ring, &mut bufs, budget);
    // Dropping the ring waits for nothing in flight: on error, wait the
    // requests out before the buffers go.
    if result.is_err() {
        while run.slots.iter().any(Option::is_some) && ring.submit_and_wait(1).is_ok() {
            for c in ring.completion() {
                if let Some(slot) = run.slots.get_mut(c.user_data() as usize) {
                    *slot = None;
                }
            }
        }
    }
    drop(ring);
    result?;
    if dir == Dir::Write {
        file.file.sync_data().context("fdatasync")?;
    }
    run.samples.wall = start.elapsed();
    Ok(run.samples)
}

/// One request in flight.
#[derive(Clone, Copy)]
struct Request {
    offset: u64,
    /// Bytes already transferred (a short transfer is resubmitted).
    done: usize,
    retries: u32,
    started: Instant,
}

struct Run {
    fd: i32,
    dir: Dir,
    request_bytes: usize,
    requests_per_pass: u64,
    fixed: bool,
    slots: Vec<Option<Request>>,
    samples: Samples,
}

impl Run {
    /// Keeps every slot busy with the next sequential request until
    /// `budget` ends and every request has completed.
    fn drive(&mut self, ring: &mut IoUring, bufs: &mut [Aligned], budget: Budget) -> anyhow::Result<()> {
        let bound = budget.start();
        let mut issued = 0;
        loop {
            for slot in 0..self.slots.len() {
                if self.slots[slot].is_none() && bound.go_on(issued) {
                    let offset = (issued % self.requests_per_pass) * self.request_bytes as u64;
                    self.slots[slot] = Some(Request { offset, done: 0, retries: 0, started: Instant::now() });
                    self.resubmit(ring, bufs, slot)?;
                    issued += 1;
                }
            }
            if self.slots.iter().all(Option::is_none) {
                return Ok(());
            }
            match ring.submit_and_wait(1) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(anyhow::Error::new(e).context("io_uring submit")),
                Ok(_) => {}
            }
            let done: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
            for (slot, res) in done {
                self.complete(ring, bufs, slot as usize, res)?;
            }
        }
    }

    /// Submits (the rest of) the request in `slot`, into or out of `bufs[slot]`.
    fn push(&mut self, ring: &mut IoUring, bufs: &mut [Aligned], slot: usize) -> anyhow::Result<()> {
        let r = self.slots[slot].context("no request in the slot")?;
        // SAFETY: `done < request_bytes = bufs[slot].len`.
        let ptr = unsafe { bufs[slot].as_mut_ptr().add(r.done) };
        let len = (self.request_bytes - r.done) as u32;
        let (fd, offset, index) = (types::Fd(self.fd), r.offset + r.done as u64, slot as u16);
        let entry: squeue::Entry = match (self.dir, self.fixed) {
            (Dir::Read, true) => opcode::ReadFixed::new(fd, ptr, len, index).offset(offset).build(),
            (Dir::Read, false) => opcode::Read::new(fd, ptr, len).offset(offset).build(),
            (Dir::Write, true) => opcode::WriteFixed::new(fd, ptr, len, index).offset(offset).build(),
            (Dir::Write, false) => opcode::Write::new(fd, ptr, len).offset(offset).build(),
        };
        // SAFETY: the buffer lives in `bufs`, which outlives the ring, and
        // this slot's buffer is used by no other request until it completes.
        unsafe { ring.submission().push(&entry.user_data(slot as u64)) }
            .map_err(|_| anyhow::anyhow!("io_uring submission queue full"))
    }

    /// [`push`](Self::push), and on failure the slot is empty again (nothing
    /// of it is in flight: the error drain must not wait for it).
    fn resubmit(&mut self, ring: &mut IoUring, bufs: &mut [Aligned], slot: usize) -> anyhow::Result<()> {
        self.push(ring, bufs, slot).inspect_err(|_| self.slots[slot] = None)
    }

    fn complete(&mut self, ring: &mut IoUring, bufs: &mut [Aligned], slot: usize, res: i32) -> anyhow::Result<()> {
        // Completed: nothing of it is in flight any more.
        let Some(mut r) = self.slots.get_mut(slot).and_then(Option::take) else {
            anyhow::bail!("a completion for no request (slot {slot})");
        };
        if res < 0 {
            let err = io::Error::from_raw_os_error(-res);
            if matches!(-res, libc::EINTR | libc::EAGAIN) && r.retries < RETRIES_MAX {
                r.retries += 1;
                self.slots[slot] = Some(r);
                return self.resubmit(ring, bufs, slot);
            }
            anyhow::bail!("{} of {} bytes at {}: {err}", self.dir.name(), self.request_bytes, r.offset);
        }
        anyhow::ensure!(res > 0, "{} at {} made no progress (end of file?)", self.dir.name(), r.offset);
        r.done += res as usize;
        if r.done < self.request_bytes {
            self.slots[slot] = Some(r);
            return self.resubmit(ring, bufs, slot);
        }
        self.samples.ok(r.started.elapsed(), self.request_bytes as u64, 1);
        Ok(())
    }
}

/// A heap buffer aligned to [`ALIGN_BYTES`], filled with non-repeating bytes
/// (never zeros: a virtual disk may treat zero blocks specially).
struct Aligned {
    ptr: NonNull<u8>,
    len: usize,
    /// The allocation's layout (for `dealloc`).
    layout: Layout,
}

impl Aligned {
    fn patterned(len: usize, seed: u64) -> anyhow::Result<Aligned> {
        let layout = Layout::from_size_align(len.max(ALIGN_BYTES), ALIGN_BYTES)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc::alloc(layout) }).context("out of memory for a disk buffer")?;
        let mut buf = Aligned { ptr, len: layout.size(), layout };
        let pattern = crate::data::pattern(buf.len, seed);
        // SAFETY: `len` bytes of our own allocation, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.len) }.copy_from_slice(&pattern);
        Ok(buf)
    }

    fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `patterned` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_write_pass_then_a_read_pass_move_whole_requests() {
        let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
        if let Err(why) = probe_direct_io(dir.path()) {
            eprintln!("skipped: no O_DIRECT in {}: {why}", dir.path().display());
            return;
        }
        let f = DirectFile::create(&dir.path().join("raw"), 1 << 20).unwrap();
        let budget = Budget { ops_min: 1, ops_max: 8, time: Duration::from_secs(10) };
        let w = match measure(&f, Dir::Write, 64 << 10, 2, budget) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("skipped: io_uring not usable here: {e:#}");
                return;
            }
        };
        assert_eq!((w.ops(), w.bytes), (8, 8 << 16));
        let r = measure(&f, Dir::Read, 256 << 10, 3, Budget { ops_max: 6, ..budget }).unwrap();
        assert_eq!((r.ops(), r.bytes), (6, 6 << 18), "wraps at the end of the file");
        assert!(r.gb_per_s() > 0.0);
        assert_eq!(filesystem(dir.path()).1, filesystem(f.path()).1);
    }
}
