//! [`UcxWorker`]: one UCP context and worker, owned by one thread that does
//! every UCX call (the worker is created single-threaded). Other threads
//! hand it [`Command`]s through a queue and wake it with `ucp_worker_signal`.
//!
//! This module is the handle side: starting the thread, exporting memory,
//! and reads as [`Read`] futures. The thread itself, its endpoints and
//! what it does when a peer fails or a caller gives up, is [`thread`]; the
//! transports a context opened are read in [`transports`].
//!
//! Memory safety of a read's buffer: UCX writes into it until the read
//! completes. A [`Read`] future that is dropped first (a timeout, a sibling
//! failing) aborts its endpoint and waits for that completion before the
//! buffer can be freed; if it never comes (a UCX bug) the process aborts
//! rather than let UCX write into freed memory.

mod thread;
mod transports;

use std::ffi::c_void;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use super::error::UcxError;
use super::ffi::{self, McUcx};
use thread::Thread;
use transports::{context_transports, hardware_rma};

/// How long a dropped read waits for UCX to let go of its buffer.
const ABORT_WAIT: Duration = Duration::from_secs(10);
/// Largest worker address or packed remote key accepted from a peer.
pub(crate) const UCX_BLOB_MAX_BYTES: usize = 16 << 10;
/// What keeps exported memory alive (the worker thread holds it).
pub type Owner = Arc<dyn std::any::Any + Send + Sync>;

/// The memory behind a mapping, as UCX classifies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Ordinary host memory.
    Host,
    /// Memory of a device (a GPU): UCX moves it only where its build
    /// supports the device.
    Device(i32),
}

/// One read's completion: set once by the worker thread.
#[derive(Debug, Default)]
struct Completion {
    slot: Mutex<Slot>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct Slot {
    result: Option<Result<(), UcxError>>,
    waker: Option<Waker>,
}

impl Completion {
    fn complete(&self, result: Result<(), UcxError>) {
        let waker = {
            let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
            if slot.result.is_some() {
                return;
            }
            slot.result = Some(result);
            slot.waker.take()
        };
        self.done.notify_all();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// What the worker thread is asked to do.
enum Command {
    /// Export a region: it stays mapped, and `owner` alive, until the
    /// worker thread has destroyed its worker.
    Map {
        addr: usize,
        len: usize,
        owner: Owner,
        reply: tokio::sync::oneshot::Sender<Result<(Vec<u8>, i32), UcxError>>,
    },
    Get {
        peer: Arc<[u8]>,
        rkey: Arc<[u8]>,
        remote: u64,
        local: usize,
        len: usize,
        done: Arc<Completion>,
    },
    Abort {
        done: Arc<Completion>,
    },
}

/// The raw context pointer, shared only for `ucp_worker_signal` (thread-safe).
#[derive(Clone, Copy, Debug)]
struct UcxPtr(*mut McUcx);
// SAFETY: the pointer is used off the worker thread only for
// mc_ucx_signal, which UCP documents as thread-safe; the worker thread
// frees it only after every handle (and so every signaller) is gone.
unsafe impl Send for UcxPtr {}
// SAFETY: as above.
unsafe impl Sync for UcxPtr {}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Vec<Command>>,
    ucx: UcxPtr,
    address: Arc<[u8]>,
    /// The transports UCX opened (`tl/device`), read once at start.
    transports: Vec<String>,
    stopping: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Map { .. } => "Map",
            Command::Get { .. } => "Get",
            Command::Abort { .. } => "Abort",
        })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
        // SAFETY: the thread frees the context only after seeing `stopping`
        // (and, but for the case below, it is joined first), so the
        // pointer is still valid here.
        unsafe { ffi::mc_ucx_signal(self.ucx.0) };
        let Some(thread) = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take() else { return };
        // The worker thread holds `Shared` for a moment each turn: if the
        // last handle went meanwhile, this runs there, and the thread ends
        // by itself once this returns.
        if thread.thread().id() == std::thread::current().id() {
            return;
        }
        if thread.join().is_err() {
            tracing::error!("the UCX worker thread panicked");
        }
    }
}

/// A UCP worker on its own thread. Cheap to clone; the thread stops when the
/// last clone is gone.
#[derive(Clone, Debug)]
pub struct UcxWorker {
    shared: Arc<Shared>,
}

impl UcxWorker {
    /// Starts a context and worker (transports as UCX picks them, or as
    /// `UCX_TLS` and the other `UCX_*` variables say) on a new thread.
    pub fn start() -> Result<Self, UcxError> {
        let mut raw: *mut McUcx = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let status = unsafe { ffi::mc_ucx_new(&mut raw) };
        if status != 0 {
            return Err(UcxError::status("init", status));
        }
        let ucx = UcxPtr(raw);
        let address = match worker_address(ucx) {
            Ok(address) => address,
            Err(err) => {
                // SAFETY: made above, used by nobody else.
                unsafe { ffi::mc_ucx_free(raw) };
                return Err(err);
            }
        };
        // Read before the thread starts: afterwards only it uses the context.
        let transports = context_transports(ucx);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Vec::new()),
            ucx,
            address: address.into(),
            transports,
            stopping: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let weak = Arc::downgrade(&shared);
        let thread = std::thread::Builder::new()
            .name("mooncake-ucx".into())
            .spawn(move || Thread::new(ucx).run(&weak))
            .map_err(|_| UcxError::WorkerGone);
        let thread = match thread {
            Ok(thread) => thread,
            Err(err) => {
                // The thread never ran: `Shared::drop` signals the live
                // context (harmless) and finds no thread to join.
                drop(shared);
                // SAFETY: no thread uses it any more.
                unsafe { ffi::mc_ucx_free(raw) };
                return Err(err);
            }
        };
        *shared.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        tracing::info!(version = %ffi::version(), address_bytes = shared.address.len(), "UCX worker started");
        Ok(Self { shared })
    }

    /// This worker's address, which a peer connects to.
    pub fn address(&self) -> &Arc<[u8]> {
        &self.shared.address
    }

    /// The transports UCX opened, as `tl/device` (`tcp/eth0`,
    /// `rc_mlx5/mlx5_0:1`); empty if UCX would not say.
    pub fn transports(&self) -> &[String] {
        &self.shared.transports
    }

    /// Whether a peer's read of an exported region is done by a NIC that
    /// checks the region's key (RDMA: `rc_*`, `dc_*`, `gga_*`), rather than
    /// emulated by this worker (TCP, shared memory, UD), where a peer that
    /// reaches the worker can read any address of this process
    /// (docs/SECURITY.md).
    pub fn has_hardware_rma(&self) -> bool {
        hardware_rma(&self.shared.transports)
    }

    /// The UCX library's version.
    pub fn library_version() -> String {
        ffi::version()
    }

    /// Maps `[addr, addr + len)`, memory that `owner` keeps alive, for
    /// remote reads until this worker stops: the worker thread holds `owner`
    /// until then. For memory served to peers that may hold its key for
    /// ever: over transports where UCX emulates RMA (TCP, shared memory),
    /// the worker serves a peer's read itself and would touch unmapped
    /// memory if the region went away first. Returns the packed remote key
    /// and the memory's kind.
    pub fn export(
        &self,
        owner: Owner,
        addr: *const u8,
        len: usize,
    ) -> impl Future<Output = Result<(Vec<u8>, MemoryKind), UcxError>> + Send + use<> {
        let (worker, addr) = (self.clone(), addr as usize);
        async move {
            let (reply, answer) = tokio::sync::oneshot::channel();
            worker.send(Command::Map { addr, len, owner, reply });
            let (rkey, kind) = answer.await.map_err(|_| UcxError::WorkerGone)??;
            Ok((rkey, if kind <= 0 { MemoryKind::Host } else { MemoryKind::Device(kind) }))
        }
    }

    /// Reads `buf.len()` bytes at `remote` of the peer worker `peer`'s
    /// mapping whose packed key is `rkey`, into `buf`.
    pub fn get<'a>(&self, peer: Arc<[u8]>, rkey: Arc<[u8]>, remote: u64, buf: &'a mut [u8]) -> Read<'a> {
        let done = Arc::new(Completion::default());
        let blob_error = [("worker address", peer.len()), ("remote key", rkey.len())]
            .into_iter()
            .find(|(_, len)| *len == 0 || *len > UCX_BLOB_MAX_BYTES)
            .map(|(what, len)| UcxError::BadBlob { what, len });
        if let Some(err) = blob_error {
            done.complete(Err(err));
        } else if buf.is_empty() {
            done.complete(Ok(()));
        } else {
            let command = Command::Get {
                peer,
                rkey,
                remote,
                local: buf.as_mut_ptr() as usize,
                len: buf.len(),
                done: done.clone(),
            };
            self.send(command);
        }
        Read { worker: self.clone(), done, _buf: std::marker::PhantomData }
    }

    fn send(&self, command: Command) {
        self.shared.queue.lock().unwrap_or_else(PoisonError::into_inner).push(command);
        // SAFETY: the context lives as long as `shared` (see `Shared::drop`).
        unsafe { ffi::mc_ucx_signal(self.shared.ucx.0) };
    }
}

/// A read in flight; resolves when UCX completes it. Dropping it before
/// then ends its endpoint (failing the other reads on it, which their
/// callers retry on another replica) and waits until UCX no longer touches
/// the buffer.
#[derive(Debug)]
#[must_use = "a read does nothing useful unless awaited"]
pub struct Read<'a> {
    worker: UcxWorker,
    done: Arc<Completion>,
    _buf: std::marker::PhantomData<&'a mut [u8]>,
}

impl Future for Read<'_> {
    type Output = Result<(), UcxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.done.slot.lock().unwrap_or_else(PoisonError::into_inner);
        match &slot.result {
            Some(result) => Poll::Ready(result.clone()),
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for Read<'_> {
    fn drop(&mut self) {
        let slot = self.done.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.result.is_some() {
            return;
        }
        drop(slot);
        self.worker.send(Command::Abort { done: self.done.clone() });
        let slot = self.done.slot.lock().unwrap_or_else(PoisonError::into_inner);
        let (slot, waited) = self
            .done
            .done
            .wait_timeout_while(slot, ABORT_WAIT, |slot| slot.result.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        if waited.timed_out() && slot.result.is_none() {
            tracing::error!("UCX did not release an aborted read's buffer within {ABORT_WAIT:?}; aborting");
            std::process::abort();
        }
    }
}

/// The worker's address, copied out.
fn worker_address(ucx: UcxPtr) -> Result<Vec<u8>, UcxError> {
    let mut buf: *mut c_void = std::ptr::null_mut();
    let mut len = 0usize;
    // SAFETY: a live context, valid out-pointers.
    let status = unsafe { ffi::mc_ucx_address(ucx.0, &mut buf, &mut len) };
    if status != 0 {
        return Err(UcxError::status("worker address", status));
    }
    // SAFETY: the shim returned a malloc'd buffer of `len` bytes.
    let address = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec();
    // SAFETY: the buffer came from mc_ucx_address.
    unsafe { ffi::mc_ucx_free_buf(buf) };
    Ok(address)
}
