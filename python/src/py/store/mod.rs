//! `MooncakeDistributedStore`: Mooncake's method names, arguments, return
//! values and error codes over [`Session`]. Each method converts its
//! arguments (a wrong type is a `TypeError`, as in Mooncake), checks the
//! caller's addresses against registered memory, then releases the GIL for
//! the call itself. Before `setup` and after `close` every call answers
//! `INVALID_PARAMS` (or `b""`, `None`, empty lists where Mooncake returns those).
//!
//! The class is split by concern, one `#[pymethods]` block a file (PyO3's
//! `multiple-pymethods`): this file owns the type, its `new` and `Drop`, the
//! registry of open stores and the `session!` guard; [`setup`] the
//! lifecycle and registered memory, [`objects`] the single-object calls,
//! [`batches`] the batch calls (over the argument shapes of [`shapes`]),
//! [`sessions`] the put and get sessions, [`queries`] existence, probes and
//! replicas, [`admin`] removal of many objects, copy and move tasks and the
//! counters.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use pyo3::prelude::*;

use crate::codes::Code;
use crate::session::StoreState;

/// Mooncake's `health_check` answer before `setup` and after `close`.
const HEALTH_NOT_OPEN: Code = 1;

#[pyclass(module = "mooncake_rs.store", frozen, weakref, subclass)]
pub struct MooncakeDistributedStore {
    state: Arc<StoreState>,
}

/// Every store of this process, so the interpreter's exit closes those left
/// open (unmounting their segments and removing their /dev/shm files, which
/// would otherwise outlive the process). Pruned of dropped stores on insert,
/// so it holds at most the live ones.
static STORES: Mutex<Vec<Weak<StoreState>>> = Mutex::new(Vec::new());

/// Closes every store still open (registered with `atexit`).
#[pyfunction]
pub fn _close_all_stores(py: Python<'_>) {
    let stores: Vec<Arc<StoreState>> =
        STORES.lock().unwrap_or_else(PoisonError::into_inner).iter().filter_map(Weak::upgrade).collect();
    py.detach(|| stores.iter().for_each(|s| s.close()));
}

/// The open session, or `$closed` from the method.
macro_rules! session {
    ($self:ident, $closed:expr) => {
        match $self.state.session() {
            Ok(s) => s,
            Err(_) => return Ok($closed),
        }
    };
}

mod admin;
mod batches;
mod objects;
mod queries;
mod sessions;
mod setup;
mod shapes;

#[pymethods]
impl MooncakeDistributedStore {
    #[new]
    fn new() -> Self {
        let state = Arc::new(StoreState::default());
        let mut stores = STORES.lock().unwrap_or_else(PoisonError::into_inner);
        stores.retain(|s| s.strong_count() > 0);
        stores.push(Arc::downgrade(&state));
        MooncakeDistributedStore { state }
    }
}

impl Drop for MooncakeDistributedStore {
    /// A store dropped while open unmounts its segment, as `close` does.
    fn drop(&mut self) {
        // The unmount waits on the network: not with the GIL held.
        Python::attach(|py| py.detach(|| self.state.close()));
    }
}
