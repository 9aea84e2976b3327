//! The request/response shape both I/O backends serve, and [`Engine`], the
//! handle a segment submits through.
//!
//! A [`Job`] is a short list of reads and writes at file offsets, each into
//! or out of one of the buffers the job owns ([`Held`]), optionally followed
//! by an fdatasync once they all succeeded. The job carries its buffers (and
//! any table-page locks) to the I/O thread and back: if the caller's future
//! is dropped mid-flight, the buffers stay alive until the kernel is done
//! with them and are only then returned to the pool. Jobs travel through a
//! bounded channel ([`DISK_QUEUE_MAX`]); the answer comes back on a oneshot.
//!
//! [`BackendChoice::Auto`] sets up io_uring (ring, opcode probe, buffer
//! registration, one real read) and falls back to pread/pwrite threads when
//! any step fails, logging one line that says which backend serves the
//! segment and why.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::{OwnedMutexGuard, mpsc, oneshot};

use super::buf::{AlignedBuf, BufPool};
use super::{DiskBuf, DiskError, fallback, uring};

/// Jobs waiting for a segment's I/O thread. Each holds at most a pool buffer
/// or a few table pages, so 64 bound the queued memory; a full queue makes
/// submitters wait (backpressure) instead of growing.
pub(crate) const DISK_QUEUE_MAX: usize = 64;

/// Most reads and writes in one job: a data chunk is one op, and its table
/// pages are at most two (a chunk of 4 MiB spans at most two pages).
pub(crate) const JOB_OPS_MAX: usize = 4;

/// Which I/O backend serves a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiskBackend {
    /// io_uring: one ring per segment, registered buffers, batched submits.
    IoUring,
    /// pread/pwrite on a few threads per segment.
    Pread,
}

/// Which backend to use when opening or creating a segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BackendChoice {
    /// io_uring when it works here, else pread/pwrite (logged once).
    #[default]
    Auto,
    /// io_uring or an error ([`DiskError::IoUringUnavailable`]).
    IoUring,
    /// pread/pwrite.
    Pread,
}

/// Direction of one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IoKind {
    /// File to buffer.
    Read,
    /// Buffer to file.
    Write,
}

/// One read or write of `len` bytes at `file_offset`, into or out of
/// `held[buf]` starting `at` bytes into it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IoOp {
    pub(crate) kind: IoKind,
    pub(crate) file_offset: u64,
    pub(crate) buf: usize,
    pub(crate) at: usize,
    pub(crate) len: usize,
}

/// What a job owns while it is in flight.
pub(crate) enum Held {
    /// A pool buffer (registered with the ring: `ReadFixed`/`WriteFixed`).
    Pool(DiskBuf),
    /// An aligned buffer of its own (table pages, header).
    Own(AlignedBuf),
    /// A table-page lock, released when the job's writes are done.
    Lock {
        /// Held, never read.
        _guard: OwnedMutexGuard<()>,
    },
}

impl Held {
    /// Start and length of the memory an op may use, and the registered
    /// buffer index when it is a pool buffer.
    pub(crate) fn memory(&self) -> Option<(*mut u8, usize, Option<u16>)> {
        match self {
            Held::Pool(buf) => Some((buf.slot_ptr(), buf.slot().len(), u16::try_from(buf.index()).ok())),
            Held::Own(buf) => Some((buf.as_ptr(), buf.len(), None)),
            Held::Lock { .. } => None,
        }
    }
}

/// One request to an I/O thread. See the module doc.
pub(crate) struct Job {
    pub(crate) ops: Vec<IoOp>,
    /// fdatasync once every op succeeded.
    pub(crate) sync: bool,
    pub(crate) held: Vec<Held>,
    pub(crate) reply: oneshot::Sender<Done>,
}

impl Job {
    /// Where op `index` reads or writes: pointer, length, registered index.
    /// Checked against the buffer it names, so no op reaches past its buffer.
    pub(crate) fn target(&self, index: usize, done: usize) -> io::Result<(*mut u8, usize, Option<u16>)> {
        let op = &self.ops[index];
        let invalid = || io::Error::new(io::ErrorKind::InvalidInput, "disk op outside its buffer");
        let (base, size, fixed) = self.held.get(op.buf).and_then(Held::memory).ok_or_else(invalid)?;
        if op.at.checked_add(op.len).is_none_or(|end| end > size) || done > op.len {
            return Err(invalid());
        }
        // SAFETY: `op.at + done <= op.at + op.len <= size`: inside the buffer.
        Ok((unsafe { base.add(op.at + done) }, op.len - done, fixed))
    }

    /// Answers the submitter (who may have gone: then the buffers drop here).
    pub(crate) fn finish(self, result: io::Result<()>) {
        let _ = self.reply.send(Done { result, held: self.held });
    }
}

/// The answer to a job: its outcome and its buffers back.
pub(crate) struct Done {
    pub(crate) result: io::Result<()>,
    pub(crate) held: Vec<Held>,
}

/// Why a job has no result.
pub(crate) enum JobError {
    /// An op or the sync failed.
    Io(io::Error),
    /// The I/O thread is gone.
    Stopped,
}

/// The handle of a segment's I/O thread(s). Dropping it lets the threads
/// finish the queued jobs and joins them.
pub(crate) struct Engine {
    backend: DiskBackend,
    tx: Option<mpsc::Sender<Job>>,
    /// io_uring only: written after every send, to wake the ring thread.
    wake: Option<OwnedFd>,
    threads: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Starts the backend `choice` asks for on `file`, logging which serves
    /// the segment and why.
    pub(crate) fn start(
        file: Arc<File>,
        pool: Arc<BufPool>,
        choice: BackendChoice,
        path: &Path,
    ) -> Result<Engine, DiskError> {
        let (mut tx, rx) = mpsc::channel(DISK_QUEUE_MAX);
        let (rx, reason) = match choice {
            BackendChoice::Pread => (rx, "the pread backend was chosen".to_owned()),
            BackendChoice::Auto | BackendChoice::IoUring => match uring::start(file.clone(), pool, rx, path) {
                Ok(started) => {
                    tracing::info!(path = %path.display(), backend = "io_uring",
                        "disk segment I/O through io_uring: {}", started.note);
                    let (wake, threads) = (Some(started.wake), vec![started.thread]);
                    return Ok(Engine { backend: DiskBackend::IoUring, tx: Some(tx), wake, threads });
                }
                Err((reason, _)) if choice == BackendChoice::IoUring => {
                    return Err(DiskError::IoUringUnavailable { path: path.to_path_buf(), reason });
                }
                Err((reason, rx)) => {
                    // A failed thread spawn took the receiver with it: start over.
                    let rx = rx.unwrap_or_else(|| {
                        let (fresh_tx, fresh_rx) = mpsc::channel(DISK_QUEUE_MAX);
                        tx = fresh_tx;
                        fresh_rx
                    });
                    (rx, format!("io_uring is not available ({reason})"))
                }
            },
        };
        let threads = fallback::start(file, rx, path)?;
        tracing::info!(path = %path.display(), backend = "pread", "disk segment I/O through pread/pwrite threads: {reason}");
        Ok(Engine { backend: DiskBackend::Pread, tx: Some(tx), wake: None, threads })
    }

    pub(crate) fn backend(&self) -> DiskBackend {
        self.backend
    }

    /// Runs `ops` (then an fdatasync if `sync`) on the buffers `held`;
    /// returns the buffers once the kernel is done with them.
    pub(crate) async fn run(&self, ops: Vec<IoOp>, sync: bool, held: Vec<Held>) -> Result<Vec<Held>, JobError> {
        assert!(ops.len() <= JOB_OPS_MAX, "a job has at most JOB_OPS_MAX ops");
        let (reply, answer) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or(JobError::Stopped)?;
        tx.send(Job { ops, sync, held, reply }).await.map_err(|_| JobError::Stopped)?;
        if let Some(wake) = &self.wake {
            uring::wake(wake.as_raw_fd());
        }
        let done = answer.await.map_err(|_| JobError::Stopped)?;
        done.result.map(|()| done.held).map_err(JobError::Io)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Closing the channel is the stop signal: the threads answer what is
        // queued, then see it closed and exit.
        drop(self.tx.take());
        if let Some(wake) = &self.wake {
            uring::wake(wake.as_raw_fd());
        }
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("a disk segment I/O thread panicked");
            }
        }
    }
}
