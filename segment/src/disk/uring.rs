//! The io_uring backend: one thread per segment owns a ring and serves the
//! segment's jobs.
//!
//! Setup ([`start`]) creates the ring, checks that the kernel supports every
//! opcode used, registers the pool's buffers (reads and writes of pool
//! buffers then use `ReadFixed`/`WriteFixed`; when registration is refused,
//! e.g. by `RLIMIT_MEMLOCK`, plain `Read`/`Write` on the same buffers), and
//! reads the header block through the ring once: any failure is the reason
//! [`super::BackendChoice::Auto`] falls back to pread.
//!
//! The thread's loop: take every queued job there is room for, push all
//! their SQEs, then one `submit_and_wait(1)` submits the lot and sleeps until
//! something completes; reap every completion, resubmit short or
//! interrupted transfers, start a job's fdatasync once its ops are done, and
//! answer finished jobs. A submitter wakes the thread by writing an eventfd
//! that the ring always has a read pending on, so a new job never waits for
//! an unrelated completion. Closing the job channel (dropping the segment)
//! makes the thread finish what it holds and exit.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use io_uring::{IoUring, Probe, opcode, squeue, types};
use tokio::sync::mpsc::{self, error::TryRecvError};

use super::DISK_BLOCK_BYTES;
use super::buf::BufPool;
use super::engine::{IoKind, JOB_OPS_MAX, Job};

/// Submission queue size. Bounded in-flight work ([`FLIGHTS_MAX`] jobs of
/// at most [`JOB_OPS_MAX`] SQEs each, plus the wake read) always fits, and
/// the kernel's completion queue (twice this) can never overflow.
const RING_ENTRIES: u32 = 128;

/// Jobs in flight on the ring at once; more wait in the channel.
const FLIGHTS_MAX: usize = 24;

/// `user_data` of the eventfd read that wakes the thread.
const WAKE_TOKEN: u64 = u64::MAX;

/// Op index (low byte of `user_data`) of a job's fdatasync.
const SYNC_OP: usize = 0xFF;

/// Resubmissions of one job after EINTR/EAGAIN before its error stands.
const RETRIES_MAX: u32 = 8;

/// Consecutive failed `io_uring_enter` calls (other than EINTR/EBUSY)
/// before the thread gives up on the ring; its segment then answers
/// `Stopped` and the node must restart.
const ENTER_FAILURES_MAX: u32 = 100;

/// A running ring thread.
pub(crate) struct Started {
    pub(crate) thread: JoinHandle<()>,
    /// The eventfd that wakes it ([`wake`]).
    pub(crate) wake: OwnedFd,
    /// How it runs, for the log line.
    pub(crate) note: String,
}

/// Sets up a ring for `file` (see the module doc) and starts its thread.
/// On failure: why, and the job receiver back unless a failed thread spawn
/// consumed it.
pub(crate) fn start(
    file: Arc<File>,
    pool: Arc<BufPool>,
    rx: mpsc::Receiver<Job>,
    path: &Path,
) -> Result<Started, (String, Option<mpsc::Receiver<Job>>)> {
    let setup = match setup(&file, &pool) {
        Ok(setup) => setup,
        Err(reason) => return Err((reason, Some(rx))),
    };
    let wake_fd = match setup.wake.try_clone() {
        Ok(fd) => fd,
        Err(e) => return Err((format!("cannot duplicate the wake eventfd: {e}"), Some(rx))),
    };
    let note = if setup.fixed {
        "registered buffers, batched submissions".to_owned()
    } else {
        format!("batched submissions; buffers not registered ({})", setup.unregistered_why)
    };
    let fd = file.as_raw_fd();
    let ring = Ring {
        ring: setup.ring,
        wake_buf: Box::new(0),
        fd,
        fixed: setup.fixed,
        wake_fd,
        rx,
        flights: (0..FLIGHTS_MAX).map(|_| None).collect(),
        free: (0..FLIGHTS_MAX).rev().collect(),
        wake_armed: false,
        closing: false,
        completions: Vec::with_capacity(RING_ENTRIES as usize * 2),
        _file: file,
        _pool: pool,
    };
    let name = format!("disk-uring-{}", path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
    let name: String = name.chars().take(15).collect();
    match thread::Builder::new().name(name).spawn(move || ring.run()) {
        Ok(thread) => Ok(Started { thread, wake: setup.wake, note }),
        Err(e) => Err((format!("cannot start the ring thread: {e}"), None)),
    }
}

/// Wakes a ring thread (adds 1 to its eventfd).
pub(crate) fn wake(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd. Failure (a
    // counter at its maximum) already means a wake is pending.
    let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

struct Setup {
    ring: IoUring,
    fixed: bool,
    unregistered_why: String,
    wake: OwnedFd,
}

fn setup(file: &File, pool: &Arc<BufPool>) -> Result<Setup, String> {
    let ring = IoUring::new(RING_ENTRIES).map_err(|e| format!("ring setup failed: {e}"))?;
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| format!("opcode probe failed: {e}"))?;
    let needed = [
        ("READ", opcode::Read::CODE),
        ("WRITE", opcode::Write::CODE),
        ("READ_FIXED", opcode::ReadFixed::CODE),
        ("WRITE_FIXED", opcode::WriteFixed::CODE),
        ("FSYNC", opcode::Fsync::CODE),
    ];
    if let Some((name, _)) = needed.iter().find(|(_, code)| !probe.is_supported(*code)) {
        return Err(format!("the kernel's io_uring lacks {name}"));
    }
    let iovecs = pool.iovecs();
    // SAFETY: the iovecs describe the pool's slots, which stay allocated and
    // unmoved while the pool lives; the ring thread holds the pool and drops
    // the ring (unregistering them) first.
    let (fixed, unregistered_why) = match unsafe { ring.submitter().register_buffers(&iovecs) } {
        Ok(()) => (true, String::new()),
        Err(e) => (false, e.to_string()),
    };
    // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if raw < 0 {
        return Err(format!("eventfd failed: {}", io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a fresh descriptor that nothing else owns.
    let wake = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut setup = Setup { ring, fixed, unregistered_why, wake };
    probe_read(&mut setup, file, pool)?;
    Ok(setup)
}

/// Reads the header block through the ring, as the segment will read data.
fn probe_read(setup: &mut Setup, file: &File, pool: &Arc<BufPool>) -> Result<(), String> {
    let len = DISK_BLOCK_BYTES as u32;
    let buf = pool.try_take(len as usize).ok_or("no free buffer for the probe")?;
    let fd = types::Fd(file.as_raw_fd());
    let entry = match (setup.fixed, u16::try_from(buf.index())) {
        (true, Ok(index)) => opcode::ReadFixed::new(fd, buf.slot_ptr(), len, index).offset(0).build(),
        _ => opcode::Read::new(fd, buf.slot_ptr(), len).offset(0).build(),
    };
    // SAFETY: `buf` outlives the read: this function waits for its
    // completion (or the ring is dropped, cancelling it, before `buf`).
    unsafe { setup.ring.submission().push(&entry.user_data(1)) }.map_err(|_| "submission queue full")?;
    setup.ring.submit_and_wait(1).map_err(|e| format!("probe submit failed: {e}"))?;
    let cqe = setup.ring.completion().next().ok_or("probe read did not complete")?;
    match cqe.result() {
        n if n == len as i32 => Ok(()),
        n if n < 0 => Err(format!("probe read failed: {}", io::Error::from_raw_os_error(-n))),
        n => Err(format!("probe read returned {n} of {len} bytes")),
    }
}

/// One job on the ring.
struct Flight {
    job: Job,
    /// Bytes done per op.
    done: [usize; JOB_OPS_MAX],
    /// SQEs of this job not yet completed.
    pending: usize,
    retries: u32,
    error: Option<io::Error>,
    synced: bool,
}

/// The ring thread's state. The ring is declared first so it is dropped
/// (cancelling anything pending and unregistering the buffers) before the
/// memory it points at.
struct Ring {
    ring: IoUring,
    /// Target of the pending eventfd read.
    wake_buf: Box<u64>,
    fd: RawFd,
    fixed: bool,
    wake_fd: OwnedFd,
    rx: mpsc::Receiver<Job>,
    flights: Vec<Option<Flight>>,
    free: Vec<usize>,
    wake_armed: bool,
    closing: bool,
    /// Reaped (user_data, result) pairs, reused across loops.
    completions: Vec<(u64, i32)>,
    /// Keeps the descriptor open while the ring uses it.
    _file: Arc<File>,
    /// Keeps the registered buffers allocated while the ring lives.
    _pool: Arc<BufPool>,
}

impl Ring {
    fn run(mut self) {
        let mut failures = 0;
        loop {
            if !self.closing {
                self.take_jobs();
            }
            let idle = self.free.len() == FLIGHTS_MAX;
            if self.closing && idle {
                if !self.wake_armed {
                    return;
                }
                // Complete our own pending read so nothing is left in flight.
                wake(self.wake_fd.as_raw_fd());
            } else if !self.closing && !self.wake_armed {
                self.arm_wake();
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => failures = 0,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)) => {}
                Err(e) => {
                    failures += 1;
                    tracing::error!("disk segment io_uring submit failed ({failures} in a row): {e}");
                    if failures >= ENTER_FAILURES_MAX {
                        self.abandon();
                        return;
                    }
                }
            }
            self.reap();
        }
    }

    /// Starts queued jobs while there is room on the ring.
    fn take_jobs(&mut self) {
        while !self.free.is_empty() {
            match self.rx.try_recv() {
                Ok(job) => self.begin(job),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.closing = true;
                    return;
                }
            }
        }
    }

    fn begin(&mut self, job: Job) {
        // Check every op against its buffer before any is submitted.
        if let Some(Err(err)) = (0..job.ops.len()).map(|i| job.target(i, 0)).find(Result::is_err) {
            job.finish(Err(err));
            return;
        }
        let Some(slot) = self.free.pop() else {
            job.finish(Err(io::Error::other("no room on the ring")));
            return;
        };
        let ops = job.ops.len();
        let flight = Flight { job, done: [0; JOB_OPS_MAX], pending: 0, retries: 0, error: None, synced: false };
        self.flights[slot] = Some(flight);
        for op in 0..ops {
            self.submit_op(slot, op);
        }
        // A job of no ops (a bare fdatasync) starts its sync here.
        self.settle(slot);
    }

    /// Pushes (the rest of) op `op` of the job in `slot`.
    fn submit_op(&mut self, slot: usize, op: usize) {
        let entry = self.op_entry(slot, op);
        let pushed = entry.and_then(|entry| self.push(entry.user_data(user_data(slot, op))));
        let flight = flight_mut(&mut self.flights, slot);
        match pushed {
            Ok(()) => flight.pending += 1,
            Err(err) => {
                flight.error.get_or_insert(err);
            }
        }
    }

    /// The SQE for what is left of op `op` of the job in `slot`.
    fn op_entry(&mut self, slot: usize, op: usize) -> io::Result<squeue::Entry> {
        let flight = flight_mut(&mut self.flights, slot);
        let io_op = flight.job.ops[op];
        let (ptr, len, index) = flight.job.target(op, flight.done[op])?;
        let len = u32::try_from(len).map_err(|_| io::Error::other("disk op longer than 4 GiB"))?;
        let offset = io_op.file_offset + flight.done[op] as u64;
        let fd = types::Fd(self.fd);
        let fixed = if self.fixed { index } else { None };
        Ok(match (io_op.kind, fixed) {
            (IoKind::Read, Some(i)) => opcode::ReadFixed::new(fd, ptr, len, i).offset(offset).build(),
            (IoKind::Read, None) => opcode::Read::new(fd, ptr, len).offset(offset).build(),
            (IoKind::Write, Some(i)) => opcode::WriteFixed::new(fd, ptr, len, i).offset(offset).build(),
            (IoKind::Write, None) => opcode::Write::new(fd, ptr, len).offset(offset).build(),
        })
    }

    fn submit_sync(&mut self, slot: usize) {
        let entry = opcode::Fsync::new(types::Fd(self.fd)).flags(types::FsyncFlags::DATASYNC).build();
        let pushed = self.push(entry.user_data(user_data(slot, SYNC_OP)));
        let flight = flight_mut(&mut self.flights, slot);
        flight.synced = true;
        match pushed {
            Ok(()) => flight.pending += 1,
            Err(err) => {
                flight.error.get_or_insert(err);
            }
        }
    }

    /// Pushes one SQE. The queue has room by construction (see
    /// [`RING_ENTRIES`]); if it ever had not, submit what is there and retry.
    fn push(&mut self, entry: squeue::Entry) -> io::Result<()> {
        // SAFETY: every buffer an SQE points at is owned by its flight's job
        // (or is `wake_buf`) and stays alive until its completion is reaped.
        if unsafe { self.ring.submission().push(&entry) }.is_ok() {
            return Ok(());
        }
        self.ring.submit()?;
        // SAFETY: as above.
        unsafe { self.ring.submission().push(&entry) }.map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    fn arm_wake(&mut self) {
        let ptr: *mut u64 = &mut *self.wake_buf;
        let entry = opcode::Read::new(types::Fd(self.wake_fd.as_raw_fd()), ptr.cast(), 8).build();
        if self.push(entry.user_data(WAKE_TOKEN)).is_ok() {
            self.wake_armed = true;
        }
    }

    fn reap(&mut self) {
        let mut completions = std::mem::take(&mut self.completions);
        completions.extend(self.ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
        for &(data, result) in &completions {
            self.complete(data, result);
        }
        completions.clear();
        self.completions = completions;
    }

    fn complete(&mut self, data: u64, result: i32) {
        if data == WAKE_TOKEN {
            self.wake_armed = false;
            return;
        }
        let (slot, op) = ((data >> 8) as usize, (data & 0xFF) as usize);
        let Some(flight) = self.flights.get_mut(slot).and_then(Option::as_mut) else {
            tracing::error!(slot, op, "io_uring completion for no job; ignored");
            return;
        };
        flight.pending -= 1;
        let errno = (result < 0).then_some(-result);
        if op == SYNC_OP {
            if let Some(errno) = errno {
                flight.error.get_or_insert(io::Error::from_raw_os_error(errno));
            }
        } else if let Some(errno) = errno {
            if matches!(errno, libc::EINTR | libc::EAGAIN) && flight.retries < RETRIES_MAX {
                flight.retries += 1;
                self.submit_op(slot, op);
            } else {
                flight.error.get_or_insert(io::Error::from_raw_os_error(errno));
            }
        } else if result == 0 {
            let short = match flight.job.ops[op].kind {
                IoKind::Read => io::Error::new(io::ErrorKind::UnexpectedEof, "disk segment file ended early"),
                IoKind::Write => io::Error::new(io::ErrorKind::WriteZero, "disk segment write made no progress"),
            };
            flight.error.get_or_insert(short);
        } else {
            flight.done[op] += result as usize;
            if flight.done[op] < flight.job.ops[op].len {
                self.submit_op(slot, op);
            }
        }
        self.settle(slot);
    }

    /// Once nothing of the job in `slot` is pending: start its fdatasync,
    /// or answer it and free the slot.
    fn settle(&mut self, slot: usize) {
        let flight = flight_mut(&mut self.flights, slot);
        if flight.pending > 0 {
            return;
        }
        if flight.error.is_none() && flight.job.sync && !flight.synced {
            self.submit_sync(slot);
            if flight_mut(&mut self.flights, slot).pending > 0 {
                return;
            }
        }
        let Some(flight) = self.flights[slot].take() else { return };
        self.free.push(slot);
        flight.job.finish(flight.error.map_or(Ok(()), Err));
    }

    /// Gives up on a ring that cannot submit: answers every job `Stopped` but
    /// leaks its buffers (the kernel may still be using them).
    fn abandon(&mut self) {
        for flight in self.flights.iter_mut().filter_map(Option::take) {
            let Job { held, reply, .. } = flight.job;
            std::mem::forget(held);
            drop(reply);
        }
        std::mem::forget(std::mem::replace(&mut self.wake_buf, Box::new(0)));
    }
}

fn user_data(slot: usize, op: usize) -> u64 {
    (slot as u64) << 8 | op as u64
}

#[allow(
    clippy::expect_used,
    reason = "a completion names a slot this thread filled; anything else is a kernel or ring bug"
)]
fn flight_mut(flights: &mut [Option<Flight>], slot: usize) -> &mut Flight {
    flights[slot].as_mut().expect("a slot with pending work holds a flight")
}
