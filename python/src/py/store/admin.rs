//! `MooncakeDistributedStore`'s calls over many objects or the cluster:
//! `remove_all`, `remove_by_regex`, upstream 0.3.14's copy, move and query
//! tasks (crate::tasks), `record_prefetched_tokens`, and the test-only
//! `_client_stats` and `_segment_shm_path`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::MooncakeDistributedStore;
use crate::codes::{self, Code};
use crate::py::tasks::{QueryTaskResponse, task_answer, task_id as task_id_of};
use crate::tasks::TaskPair;

#[pymethods]
impl MooncakeDistributedStore {
    /// Objects removed, or a negative code.
    #[pyo3(signature = (force=false))]
    fn remove_all(&self, py: Python<'_>, force: bool) -> PyResult<Code> {
        let s = session!(self, codes::INVALID_PARAMS);
        Ok(py.detach(|| s.remove_all(force)))
    }

    /// Removes the objects whose key matches `regex_pattern` (Python's
    /// `re.search`); the count removed, `INVALID_PARAMS` for a bad pattern.
    #[pyo3(signature = (regex_pattern, force=false))]
    fn remove_by_regex(&self, py: Python<'_>, regex_pattern: &str, force: bool) -> PyResult<Code> {
        let s = session!(self, codes::INVALID_PARAMS);
        let Ok(pattern) = py.import("re")?.call_method1("compile", (regex_pattern,)) else {
            return Ok(codes::INVALID_PARAMS);
        };
        let keys = match py.detach(|| s.list_keys()) {
            Ok(keys) => keys,
            Err(code) => return Ok(code),
        };
        let mut matching = Vec::new();
        for key in keys {
            if !pattern.call_method1("search", (key.as_str(),))?.is_none() {
                matching.push(key);
            }
        }
        Ok(py.detach(|| s.remove_keys(&matching, force)))
    }

    /// `create_copy_task(key, targets)` (upstream 0.3.14): a replica of
    /// the object on each segment named (a store's `get_hostname()`);
    /// `((hi, lo), 0)`, or `((0, 0), code)` (docs/PYTHON.md, "Copy, move
    /// and query tasks (0.3.14)").
    fn create_copy_task(&self, py: Python<'_>, key: String, targets: Vec<String>) -> PyResult<(TaskPair, Code)> {
        let s = session!(self, ((0, 0), codes::INVALID_PARAMS));
        Ok(task_answer(py.detach(|| s.create_copy_task(&key, targets))))
    }

    /// `create_move_task(key, source, target)` (upstream 0.3.14): the
    /// source replica copied to the target, then dropped; as
    /// `create_copy_task` answers.
    fn create_move_task(
        &self,
        py: Python<'_>,
        key: String,
        source: String,
        target: String,
    ) -> PyResult<(TaskPair, Code)> {
        let s = session!(self, ((0, 0), codes::INVALID_PARAMS));
        Ok(task_answer(py.detach(|| s.create_move_task(&key, &source, &target))))
    }

    /// `query_task(task_id)` (upstream 0.3.14): `(QueryTaskResponse, 0)`,
    /// or `(None, code)` (-1400 for an id the leader does not know).
    fn query_task(&self, py: Python<'_>, task_id: &Bound<'_, PyAny>) -> PyResult<(Option<QueryTaskResponse>, Code)> {
        let id = task_id_of(task_id)?;
        let s = session!(self, (None, codes::INVALID_PARAMS));
        Ok(match py.detach(|| s.query_task(id)) {
            Ok(state) => (Some(QueryTaskResponse::new(state)), codes::OK),
            Err(code) => (None, code),
        })
    }

    /// `record_prefetched_tokens(total_tokens)`: SGLang reports the tokens a
    /// load brought in; counted in the log at debug level, nothing else.
    fn record_prefetched_tokens(&self, total_tokens: i64) {
        tracing::debug!(total_tokens, "prefetched tokens");
    }

    /// Not Mooncake API: this store's client counters (gets found, objects
    /// and ranges whose bytes landed, bytes read, failed reads, puts), for
    /// tests that must see a load happen, not only its outcome. Empty
    /// before setup.
    fn _client_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        if let Ok(s) = self.state.session() {
            let st = s.client().stats();
            for (name, v) in [
                ("gets_found", &st.gets_found),
                ("gets_not_found", &st.gets_not_found),
                ("gets_failed", &st.gets_failed),
                ("objects_read", &st.objects_read),
                ("ranges_read", &st.ranges_read),
                ("bytes_read", &st.bytes_read),
                ("reads_failed", &st.reads_failed),
                ("puts_ok", &st.puts_ok),
                ("puts_failed", &st.puts_failed),
            ] {
                out.set_item(name, v.load(std::sync::atomic::Ordering::Relaxed))?;
            }
        }
        Ok(out)
    }

    /// Not Mooncake API: the /dev/shm file of this process's segment ("" if none).
    fn _segment_shm_path(&self) -> String {
        let spec = self.state.session().ok().and_then(|s| s.client().local_segment().map(|l| l.spec()));
        spec.map(|s| s.shm_path).unwrap_or_default()
    }
}
