//! [`Thread`]: the state and loop of a [`UcxWorker`](super::UcxWorker)'s
//! thread, which makes every call on the UCP worker. It takes [`Command`]s
//! off the queue, progresses the worker, completes finished reads, and
//! sleeps on the worker's event fd when idle.
//!
//! It keeps one endpoint per peer worker address and the remote keys
//! unpacked on it. An endpoint whose error handler fired, or on which a
//! caller gave up a read ([`Command::Abort`]), is ended: closed with force
//! where it has peer-failure handling (its reads then complete with an
//! error during progress, and its keys are destroyed once they have), else
//! left unused with its reads given up (they wrote into bounce buffers,
//! which stay with UCX until the worker is destroyed). When the last
//! handle is gone it destroys the worker, then what had to outlive it
//! (exported memory, orphaned reads), then the context.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::{Command, Completion, Owner, Shared, UcxPtr};
use crate::ucx::error::UcxError;
use crate::ucx::ffi::{self, McEp, McOp};

/// Most endpoints kept open at once (one per store node process read from).
const ENDPOINTS_MAX: usize = 4096;
/// How many progress rounds one loop turn may take before the queue is
/// looked at again.
const PROGRESS_ROUNDS: u32 = 64;
/// Longest sleep of an idle worker thread between checks of its queue (a
/// safety net: a signal wakes it at once).
const IDLE_WAIT_MS: i32 = 100;
/// A read UCX never completed: its completion slot and bounce buffer.
type Orphan = (Box<McOp>, Option<Box<[u8]>>);
/// UCS_ERR_CANCELED: what a forced close completes operations with.
const UCS_ERR_CANCELED: i32 = -16;
/// UCS_ERR_UNREACHABLE: no transport reaches the peer as asked.
const UCS_ERR_UNREACHABLE: i32 = -6;

/// One endpoint and the keys unpacked on it.
struct Endpoint {
    ep: *mut McEp,
    /// Tells this endpoint from a later one to the same peer.
    generation: u64,
    rkeys: HashMap<Arc<[u8]>, *mut c_void>,
    /// Whether UCX reports the peer's failure on it. Without that a read
    /// of a dead peer never completes, not even when the endpoint is
    /// closed, so its reads land in a bounce buffer of the worker's own.
    peer_errors: bool,
}

/// A read handed to UCX and not yet complete.
struct Pending {
    op: Box<McOp>,
    peer: Arc<[u8]>,
    /// The endpoint it was issued on.
    generation: u64,
    done: Arc<Completion>,
    /// Where UCX writes when it is not the caller's buffer, and where the
    /// bytes go once it completes: the caller's buffer (`local`, `len`).
    bounce: Option<(Box<[u8]>, usize, usize)>,
    /// Set when its endpoint was closed: the status to report in place of
    /// the cancellation the close causes (the peer's failure).
    failure: Option<i32>,
}

impl Pending {
    /// Completes the caller's read with the op's final status, copying a
    /// bounced read into its buffer first.
    fn finish(self) {
        let status = match (self.op.status(), self.failure) {
            (UCS_ERR_CANCELED, Some(failure)) => failure,
            (status, _) => status,
        };
        if let (0, Some((bounce, local, len))) = (status, &self.bounce) {
            // SAFETY: the caller's Read keeps `local` (len bytes) alive and
            // unaliased until `done` completes, which is below.
            unsafe { std::ptr::copy_nonoverlapping(bounce.as_ptr(), *local as *mut u8, *len) };
        }
        self.done.complete(if status == 0 { Ok(()) } else { Err(UcxError::peer(status)) });
    }
}

/// The keys of a closed endpoint, destroyed once no read issued on it is
/// left (UCX may complete a closed endpoint's reads during later progress).
struct Retired {
    generation: u64,
    rkeys: Vec<*mut c_void>,
}

/// The worker thread's state: everything here is touched by it alone.
pub(super) struct Thread {
    ucx: UcxPtr,
    endpoints: HashMap<Arc<[u8]>, Endpoint>,
    next_generation: u64,
    pending: Vec<Pending>,
    retired: Vec<Retired>,
    /// Ended endpoints' wrappers (their error handler's argument), freed
    /// after the worker is destroyed. Those without peer-failure handling
    /// were never closed (UCP refuses to close them with force, and a
    /// flushing close of a dead peer never ends): the worker destroys them.
    ended: Vec<*mut McEp>,
    /// Reads UCX never completed (their endpoint lacked peer-failure
    /// handling and was given up): their op and bounce buffer stay until
    /// the worker is destroyed.
    orphans: Vec<Orphan>,
    /// Exported regions and their owners: unmapped, and the owners
    /// dropped, only after the worker is gone.
    exported: Vec<(usize, Owner)>,
}

impl Thread {
    pub(super) fn new(ucx: UcxPtr) -> Self {
        Self {
            ucx,
            endpoints: HashMap::new(),
            next_generation: 0,
            pending: Vec::new(),
            retired: Vec::new(),
            ended: Vec::new(),
            orphans: Vec::new(),
            exported: Vec::new(),
        }
    }

    pub(super) fn run(mut self, shared: &std::sync::Weak<Shared>) {
        loop {
            let (commands, stopping) = match shared.upgrade() {
                Some(shared) => {
                    let commands = std::mem::take(&mut *shared.queue.lock().unwrap_or_else(PoisonError::into_inner));
                    (commands, shared.stopping.load(Ordering::Acquire))
                }
                None => (Vec::new(), true),
            };
            if stopping {
                break;
            }
            let busy = !commands.is_empty();
            for command in commands {
                self.handle(command);
            }
            // SAFETY: the live context, on its own thread.
            let events = unsafe { ffi::mc_ucx_progress(self.ucx.0, PROGRESS_ROUNDS) };
            self.reap();
            if busy || events > 0 {
                continue;
            }
            // SAFETY: as above.
            let status = unsafe { ffi::mc_ucx_wait(self.ucx.0, IDLE_WAIT_MS) };
            if status != 0 {
                tracing::warn!(status = %ffi::status_string(status), "UCX worker wait failed");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.shut_down();
    }

    /// Destroys the worker (no peer is served and no read completes after
    /// it), then what had to outlive it, then the context.
    fn shut_down(mut self) {
        // No read is left: every Read holds a handle, and the thread stops
        // only when every handle is gone. Whatever is, ends here.
        for pending in self.pending.drain(..) {
            pending.done.complete(Err(UcxError::WorkerGone));
        }
        // Remote keys go before the endpoints they were unpacked on.
        let live = self.endpoints.values_mut().flat_map(|e| e.rkeys.drain().map(|(_, key)| key));
        let retired = self.retired.drain(..).flat_map(|r| r.rkeys);
        for key in live.chain(retired).collect::<Vec<_>>() {
            // SAFETY: unpacked on an endpoint of this worker, destroyed once;
            // no read is in flight any more.
            unsafe { ffi::mc_ucx_rkey_destroy(key) };
        }
        // SAFETY: nothing else uses the worker; it destroys its endpoints.
        unsafe { ffi::mc_ucx_worker_destroy(self.ucx.0) };
        for ep in self.ended.drain(..) {
            // SAFETY: a wrapper whose endpoint the worker destroyed above.
            unsafe { ffi::mc_ucx_ep_free(ep) };
        }
        for endpoint in self.endpoints.drain().map(|(_, e)| e) {
            // SAFETY: as above.
            unsafe { ffi::mc_ucx_ep_free(endpoint.ep) };
        }
        self.orphans.clear();
        for (memh, owner) in self.exported.drain(..) {
            // SAFETY: a handle mc_ucx_map returned, unmapped once, after the
            // worker that served it is gone; its memory is freed only then.
            let status = unsafe { ffi::mc_ucx_unmap(self.ucx.0, memh as *mut c_void) };
            if status != 0 {
                tracing::warn!(status = %ffi::status_string(status), "UCX unmap failed");
            }
            drop(owner);
        }
        // SAFETY: worker destroyed, keys destroyed, everything unmapped.
        unsafe { ffi::mc_ucx_free(self.ucx.0) };
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Map { addr, len, owner, reply } => {
                let mapped = self.map(addr, len).map(|(memh, rkey, kind)| {
                    self.exported.push((memh, owner));
                    (rkey, kind)
                });
                let _ = reply.send(mapped);
            }
            Command::Get { peer, rkey, remote, local, len, done } => {
                if let Err(err) = self.get(&peer, &rkey, remote, local, len, &done) {
                    done.complete(Err(err));
                }
            }
            Command::Abort { done } => self.abort(&done),
        }
    }

    /// A caller gave up on the read `done`: closes its endpoint if the read
    /// is still in flight there (else there is nothing to end).
    fn abort(&mut self, done: &Arc<Completion>) {
        let Some(pending) = self.pending.iter().find(|p| Arc::ptr_eq(&p.done, done)) else { return };
        let (peer, generation) = (pending.peer.clone(), pending.generation);
        if self.endpoints.get(&peer).is_some_and(|e| e.generation == generation) {
            self.close(&peer, None);
        }
    }

    fn map(&mut self, addr: usize, len: usize) -> Result<(usize, Vec<u8>, i32), UcxError> {
        let mut memh: *mut c_void = std::ptr::null_mut();
        // SAFETY: the caller keeps [addr, addr + len) valid while mapped.
        let status = unsafe { ffi::mc_ucx_map(self.ucx.0, addr as *mut c_void, len, 0, &mut memh) };
        if status != 0 {
            return Err(UcxError::status("mem_map", status));
        }
        let mut buf: *mut c_void = std::ptr::null_mut();
        let mut packed = 0usize;
        // SAFETY: a handle just mapped; valid out-pointers.
        let status = unsafe { ffi::mc_ucx_rkey_pack(self.ucx.0, memh, &mut buf, &mut packed) };
        if status != 0 {
            // SAFETY: mapped above, never handed out.
            unsafe { ffi::mc_ucx_unmap(self.ucx.0, memh) };
            return Err(UcxError::status("rkey_pack", status));
        }
        // SAFETY: the shim returned a malloc'd buffer of `packed` bytes.
        let rkey = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), packed) }.to_vec();
        // SAFETY: from mc_ucx_rkey_pack.
        unsafe { ffi::mc_ucx_free_buf(buf) };
        // SAFETY: a live handle.
        let kind = unsafe { ffi::mc_ucx_mem_type(memh) };
        Ok((memh as usize, rkey, kind))
    }

    fn endpoint(&mut self, peer: &Arc<[u8]>) -> Result<&mut Endpoint, UcxError> {
        if !self.endpoints.contains_key(peer) && self.endpoints.len() >= ENDPOINTS_MAX {
            // Peers come and go (a restarted store node has a new worker):
            // end one with no read in flight to make room.
            let idle = self
                .endpoints
                .iter()
                .find(|(_, e)| !self.pending.iter().any(|p| p.generation == e.generation))
                .map(|(peer, _)| peer.clone());
            if let Some(idle) = idle {
                self.close(&idle, None);
            }
        }
        if !self.endpoints.contains_key(peer) {
            let mut ep: *mut McEp = std::ptr::null_mut();
            // SAFETY: `peer` is a worker address of at most
            // UCX_BLOB_MAX_BYTES from a store node (trusted: it serves the
            // bytes); UCX parses it.
            let status_first = unsafe { ffi::mc_ucx_ep_new(self.ucx.0, peer.as_ptr().cast(), 1, &mut ep) };
            let mut status = status_first;
            if status == UCS_ERR_UNREACHABLE {
                // Reachable only over transports without peer-failure
                // handling (UCX 1.13's shared memory): a dead peer is then
                // noticed by the caller's timeout.
                tracing::debug!("UCX peer reachable only without peer-failure handling");
                // SAFETY: as above.
                status = unsafe { ffi::mc_ucx_ep_new(self.ucx.0, peer.as_ptr().cast(), 0, &mut ep) };
            }
            if status != 0 {
                return Err(UcxError::peer(status));
            }
            let generation = self.next_generation;
            self.next_generation += 1;
            let peer_errors = status_first == 0;
            self.endpoints.insert(peer.clone(), Endpoint { ep, generation, rkeys: HashMap::new(), peer_errors });
        }
        self.endpoints.get_mut(peer).ok_or(UcxError::WorkerGone)
    }

    fn get(
        &mut self,
        peer: &Arc<[u8]>,
        rkey: &Arc<[u8]>,
        remote: u64,
        local: usize,
        len: usize,
        done: &Arc<Completion>,
    ) -> Result<(), UcxError> {
        let endpoint = self.endpoint(peer)?;
        let (ep, generation, peer_errors) = (endpoint.ep, endpoint.generation, endpoint.peer_errors);
        let key = match endpoint.rkeys.get(rkey) {
            Some(key) => *key,
            None => {
                let mut key: *mut c_void = std::ptr::null_mut();
                // SAFETY: a live endpoint; `rkey` is a packed key of at most
                // UCX_BLOB_MAX_BYTES from a store node (trusted, as above).
                let status = unsafe { ffi::mc_ucx_rkey_unpack(ep, rkey.as_ptr().cast(), &mut key) };
                if status != 0 {
                    return Err(UcxError::status("rkey_unpack", status));
                }
                endpoint.rkeys.insert(rkey.clone(), key);
                key
            }
        };
        let op = Box::new(McOp::default());
        let mut bounce = (!peer_errors).then(|| (vec![0u8; len].into_boxed_slice(), local, len));
        let into = bounce.as_mut().map_or(local as *mut c_void, |(buf, _, _)| buf.as_mut_ptr().cast());
        // SAFETY: `into` is the caller's buffer of `len` bytes, kept alive
        // by its Read until `done` completes, or the bounce buffer, kept in
        // `pending` (or `orphans`) as long as UCX may write it; the op's
        // heap slot too (moving the Box does not move it).
        let status = unsafe { ffi::mc_ucx_get(ep, into, len, remote, key, std::ptr::null_mut(), op.as_ptr()) };
        let pending = Pending { op, peer: peer.clone(), generation, done: done.clone(), bounce, failure: None };
        match status {
            0 | 1 if pending.op.is_done() => pending.finish(),
            1 => self.pending.push(pending),
            status => return Err(UcxError::status("get", status)),
        }
        Ok(())
    }

    /// Completes finished reads, closes endpoints whose peer failed, and
    /// destroys the keys of closed endpoints whose reads are all done.
    fn reap(&mut self) {
        let (finished, pending) = std::mem::take(&mut self.pending).into_iter().partition(|p| p.op.is_done());
        self.pending = pending;
        for pending in finished {
            pending.finish();
        }
        let failed: Vec<(Arc<[u8]>, i32)> = self
            .endpoints
            .iter()
            // SAFETY: live endpoints.
            .filter_map(|(peer, e)| match unsafe { ffi::mc_ucx_ep_failed(e.ep) } {
                0 => None,
                status => Some((peer.clone(), status)),
            })
            .collect();
        for (peer, status) in failed {
            tracing::debug!(status = %ffi::status_string(status), "UCX endpoint failed; closing it");
            self.close(&peer, Some(status));
        }
        let pending = &self.pending;
        self.retired.retain(|retired| {
            if pending.iter().any(|p| p.generation == retired.generation) {
                return true;
            }
            for key in &retired.rkeys {
                // SAFETY: unpacked on the retired endpoint, destroyed once,
                // after every read that used it is done.
                unsafe { ffi::mc_ucx_rkey_destroy(*key) };
            }
            false
        });
    }

    /// Ends the endpoint to `peer` (after its peer failed, with `failure`,
    /// or because a caller gave up on a read). One with peer-failure
    /// handling is closed with force, and its reads complete with an error
    /// during progress; one without cannot be closed, so it is left unused
    /// and its unfinished reads are given up at once (they wrote into
    /// bounce buffers, which stay with UCX).
    fn close(&mut self, peer: &Arc<[u8]>, failure: Option<i32>) {
        let Some(endpoint) = self.endpoints.remove(peer) else { return };
        if endpoint.peer_errors {
            // SAFETY: a live endpoint, closed once.
            let status = unsafe { ffi::mc_ucx_ep_close(self.ucx.0, endpoint.ep) };
            if status != 0 {
                tracing::warn!(status = %ffi::status_string(status), "UCX endpoint close failed; left to the worker");
            }
        }
        self.ended.push(endpoint.ep);
        let failure = failure.unwrap_or(UCS_ERR_CANCELED);
        let (ours, others): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut self.pending).into_iter().partition(|p| p.generation == endpoint.generation);
        self.pending = others;
        for mut pending in ours {
            pending.failure = Some(failure);
            if pending.op.is_done() {
                pending.finish();
            } else if pending.bounce.is_some() {
                pending.done.complete(Err(UcxError::peer(failure)));
                self.orphans.push((pending.op, pending.bounce.map(|(buf, _, _)| buf)));
            } else {
                // Completes during progress, cancelled by the close.
                self.pending.push(pending);
            }
        }
        self.retired.push(Retired { generation: endpoint.generation, rkeys: endpoint.rkeys.into_values().collect() });
    }
}
