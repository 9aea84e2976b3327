//! The pread/pwrite backend, for hosts where io_uring is missing or
//! forbidden (old kernels, `kernel.io_uring_disabled`, container seccomp
//! profiles), and the blocking positional I/O helpers the file code uses.
//!
//! Design: [`DISK_PREAD_THREADS`] plain threads per segment take jobs from
//! the segment's channel (one at a time, under a mutex) and run each with
//! blocking `pread`/`pwrite`/`fdatasync`, answering on the job's oneshot. The
//! tokio runtime is never involved (no `spawn_blocking`): the segment crate
//! does not depend on it, and a slow disk can never starve the runtime's
//! blocking pool. Several threads let independent requests overlap on the
//! device, as the ring does.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

use tokio::sync::mpsc;

use super::DiskError;
use super::engine::{IoKind, Job};

/// Threads per segment with the pread backend: enough to keep a few
/// requests on an SSD at once (each thread holds one), few enough that a
/// node with several segments runs a handful of threads.
pub(crate) const DISK_PREAD_THREADS: usize = 4;

/// Starts the threads serving `rx` on `file`.
pub(crate) fn start(file: Arc<File>, rx: mpsc::Receiver<Job>, path: &Path) -> Result<Vec<JoinHandle<()>>, DiskError> {
    let rx = Arc::new(Mutex::new(rx));
    (0..DISK_PREAD_THREADS)
        .map(|i| {
            let (file, rx) = (file.clone(), rx.clone());
            thread::Builder::new()
                .name(format!("disk-pread-{i}"))
                .spawn(move || serve(&file, &rx))
                .map_err(|source| DiskError::Io { op: "spawn I/O thread", path: path.to_path_buf(), source })
        })
        .collect()
}

/// Runs jobs until the channel is closed and empty.
fn serve(file: &File, rx: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).blocking_recv();
        let Some(job) = job else { return };
        let result = run(file.as_raw_fd(), &job);
        job.finish(result);
    }
}

fn run(fd: RawFd, job: &Job) -> io::Result<()> {
    for (index, op) in job.ops.iter().enumerate() {
        let (ptr, len, _) = job.target(index, 0)?;
        match op.kind {
            // SAFETY: `target` checked that `[ptr, ptr + len)` lies in a
            // buffer the job owns; nothing else touches it while it runs.
            IoKind::Read => unsafe { pread_raw(fd, ptr, len, op.file_offset) }?,
            // SAFETY: as above.
            IoKind::Write => unsafe { pwrite_raw(fd, ptr, len, op.file_offset) }?,
        }
    }
    if job.sync {
        fdatasync(fd)?;
    }
    Ok(())
}

/// Reads exactly `buf.len()` bytes at `offset`.
pub(crate) fn pread_exact(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<()> {
    // SAFETY: `buf` is a live, exclusive slice of `buf.len()` bytes.
    unsafe { pread_raw(fd, buf.as_mut_ptr(), buf.len(), offset) }
}

/// Writes all of `buf` at `offset`.
pub(crate) fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<()> {
    // SAFETY: `buf` is a live slice of `buf.len()` bytes; pwrite only reads it.
    unsafe { pwrite_raw(fd, buf.as_ptr().cast_mut(), buf.len(), offset) }
}

/// Reads exactly `len` bytes at `offset` into `ptr`, retrying interrupted
/// and short reads; end of file first is `UnexpectedEof`.
///
/// # Safety
///
/// `[ptr, ptr + len)` must be writable memory nobody else uses meanwhile.
unsafe fn pread_raw(fd: RawFd, ptr: *mut u8, len: usize, offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        let at = file_offset(offset, done)?;
        // SAFETY: `done < len`, so the rest lies inside the caller's memory.
        let n = unsafe { libc::pread(fd, ptr.add(done).cast(), len - done, at) };
        match n {
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "disk segment file ended early")),
            n if n > 0 => done += n as usize,
            _ => retry_or_fail()?,
        }
    }
    Ok(())
}

/// Writes `len` bytes from `ptr` at `offset`, retrying interrupted and short
/// writes.
///
/// # Safety
///
/// `[ptr, ptr + len)` must be readable memory nobody writes meanwhile.
unsafe fn pwrite_raw(fd: RawFd, ptr: *mut u8, len: usize, offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        let at = file_offset(offset, done)?;
        // SAFETY: `done < len`, so the rest lies inside the caller's memory.
        let n = unsafe { libc::pwrite(fd, ptr.add(done).cast(), len - done, at) };
        match n {
            0 => return Err(io::Error::new(io::ErrorKind::WriteZero, "disk segment write made no progress")),
            n if n > 0 => done += n as usize,
            _ => retry_or_fail()?,
        }
    }
    Ok(())
}

/// fdatasync, retried when interrupted.
pub(crate) fn fdatasync(fd: RawFd) -> io::Result<()> {
    loop {
        // SAFETY: fdatasync takes only a descriptor.
        if unsafe { libc::fdatasync(fd) } == 0 {
            return Ok(());
        }
        retry_or_fail()?;
    }
}

fn file_offset(offset: u64, done: usize) -> io::Result<libc::off_t> {
    offset
        .checked_add(done as u64)
        .and_then(|at| libc::off_t::try_from(at).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "disk offset overflows off_t"))
}

/// Ok to retry after EINTR; the error otherwise.
fn retry_or_fail() -> io::Result<()> {
    let err = io::Error::last_os_error();
    if err.kind() == io::ErrorKind::Interrupted { Ok(()) } else { Err(err) }
}
