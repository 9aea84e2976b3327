//! `store.watch(prefix="", from_revision=0)`: a `KVEventWatch`, an iterator
//! of object events as dicts (`revision`, `kind`, `key`, `version`, `size`,
//! `replicas` as dicts of `segment_id`, `tier`, `host`, `zone`, and `cause`), in
//! commit order, following master failures. Iteration blocks until the next
//! event (Ctrl-C interrupts it); `poll(timeout)` waits at most `timeout`
//! seconds and returns `None` if none came. When the masters no longer hold
//! the revision needed, `WatchCompactedError` says so: list the keys, then
//! watch from the listing's revision + 1 (docs/EVENTS.md).

use std::sync::Arc;
use std::time::Duration;

use mooncake_client::WatchError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::events::{Event, EventStream, StreamError};

pyo3::create_exception!(
    mooncake_rs.store,
    WatchCompactedError,
    pyo3::exceptions::PyRuntimeError,
    "The masters no longer hold the events the watch needs: resync from a listing."
);

/// How long one wait of an iteration lasts before Python may handle a signal.
const ITER_WAIT: Duration = Duration::from_millis(200);

#[pyclass(module = "mooncake_rs.store", frozen)]
pub struct KVEventWatch {
    stream: Arc<EventStream>,
}

impl KVEventWatch {
    pub fn new(stream: EventStream) -> Self {
        KVEventWatch { stream: Arc::new(stream) }
    }
}

fn event_dict<'py>(py: Python<'py>, e: Event) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("revision", e.revision)?;
    d.set_item("kind", e.kind)?;
    d.set_item("key", e.key)?;
    d.set_item("version", e.version)?;
    d.set_item("size", e.size)?;
    let mut replicas = Vec::with_capacity(e.replicas.len());
    for (segment_id, tier, host, zone) in e.replicas {
        let r = PyDict::new(py);
        r.set_item("segment_id", segment_id)?;
        r.set_item("tier", tier)?;
        r.set_item("host", host)?;
        r.set_item("zone", zone)?;
        replicas.push(r);
    }
    d.set_item("replicas", replicas)?;
    d.set_item("cause", e.cause)?;
    Ok(d)
}

/// The Python exception of a watch that ended.
pub fn stream_error(e: StreamError) -> PyErr {
    match e {
        StreamError::Closed => pyo3::exceptions::PyRuntimeError::new_err(e.to_string()),
        StreamError::Watch(w @ WatchError::Compacted { .. }) => WatchCompactedError::new_err(w.to_string()),
        StreamError::Watch(w @ WatchError::Unavailable { .. }) => {
            pyo3::exceptions::PyConnectionError::new_err(w.to_string())
        }
    }
}

#[pymethods]
impl KVEventWatch {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        loop {
            let stream = self.stream.clone();
            if let Some(e) = py.detach(move || stream.next_event(ITER_WAIT)).map_err(stream_error)? {
                return event_dict(py, e);
            }
            py.check_signals()?;
        }
    }

    /// The next event within `timeout` seconds, or `None`.
    #[pyo3(signature = (timeout=1.0))]
    fn poll<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Option<Bound<'py, PyDict>>> {
        let wait = Duration::try_from_secs_f64(timeout.max(0.0))
            .map_err(|_| pyo3::exceptions::PyValueError::new_err("timeout must be a finite number of seconds"))?;
        let stream = self.stream.clone();
        match py.detach(move || stream.next_event(wait)).map_err(stream_error)? {
            Some(e) => Ok(Some(event_dict(py, e)?)),
            None => Ok(None),
        }
    }

    /// The revision to resume from (`store.watch(prefix, from_revision=...)`)
    /// after the events returned so far; events of that revision already
    /// returned come again.
    #[getter]
    fn next_revision(&self, py: Python<'_>) -> u64 {
        let stream = self.stream.clone();
        py.detach(move || stream.next_revision())
    }
}
