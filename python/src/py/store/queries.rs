//! `MooncakeDistributedStore`'s questions about objects: `is_exist` and
//! `batch_is_exist` (KV-leased), `probe_key` and `batch_probe_key`
//! (crate::probe), `get_replica_desc` and `batch_get_replica_desc`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::MooncakeDistributedStore;
use crate::codes::Code;
use crate::probe::ProbePolicy;
use crate::py::replica::ReplicaDescriptor;
use crate::py::tasks::ExistOptions;

#[pymethods]
impl MooncakeDistributedStore {
    /// 1 exists, 0 does not, -1 error; a key found is KV-leased, as upstream's.
    /// With `options.prefetch_to_memory` (and `enable_ssd_prefetch` at
    /// setup) a key found only on disk is promoted to memory, best effort,
    /// after the answer (crate::tasks).
    #[pyo3(signature = (key, options=None))]
    fn is_exist(&self, py: Python<'_>, key: &str, options: Option<PyRef<'_, ExistOptions>>) -> PyResult<Code> {
        let s = session!(self, -1);
        let prefetch = options.is_some_and(|o| o.prefetch_to_memory);
        let found = py.detach(|| s.exists(key));
        if prefetch && found == 1 {
            s.prefetch(vec![key.to_string()]);
        }
        Ok(found)
    }

    /// 1 exists, 0 does not, -1 error; each key found is KV-leased
    /// (`default_kv_lease_ttl`), as upstream's. `options` as `is_exist`'s.
    #[pyo3(signature = (keys, options=None))]
    fn batch_is_exist(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        options: Option<PyRef<'_, ExistOptions>>,
    ) -> PyResult<Vec<Code>> {
        let s = session!(self, vec![-1; keys.len()]);
        let prefetch = options.is_some_and(|o| o.prefetch_to_memory);
        let found = py.detach(|| s.batch_exists(&keys));
        if prefetch {
            s.prefetch(keys.into_iter().zip(&found).filter(|(_, f)| **f == 1).map(|(k, _)| k).collect());
        }
        Ok(found)
    }

    /// `batch_probe_key(keys, policy="none", candidate_size=1)` (upstream
    /// 0.3.14): as `batch_is_exist` without KV leases; with `"LastHitOnly"`
    /// the last all-hit group of `candidate_size` keys of the leading hits
    /// is leased (crate::probe). `ValueError` for another policy or a
    /// `candidate_size` below 1.
    #[pyo3(signature = (keys, policy="none", candidate_size=1))]
    fn batch_probe_key(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        policy: &str,
        candidate_size: i64,
    ) -> PyResult<Vec<Code>> {
        let policy = ProbePolicy::parse(policy, candidate_size).map_err(PyValueError::new_err)?;
        let s = session!(self, vec![-1; keys.len()]);
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        Ok(py.detach(|| s.batch_probe(&keys, policy)))
    }

    /// `probe_key(key)` (upstream 0.3.14): 1 exists, 0 does not, -1 error;
    /// no KV lease.
    fn probe_key(&self, py: Python<'_>, key: String) -> PyResult<Code> {
        let s = session!(self, -1);
        let keys = [key];
        Ok(py.detach(|| s.batch_probe(&keys, ProbePolicy::None)).first().copied().unwrap_or(-1))
    }

    fn get_replica_desc(&self, py: Python<'_>, key: String) -> PyResult<Vec<ReplicaDescriptor>> {
        let s = session!(self, Vec::new());
        let mut lists = py.detach(|| s.replica_lists(&[key]));
        Ok(lists.pop().flatten().unwrap_or_default().into_iter().map(ReplicaDescriptor::new).collect())
    }

    /// Replicas of each key that exists (missing keys are left out).
    fn batch_get_replica_desc<'py>(&self, py: Python<'py>, keys: Vec<String>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let s = session!(self, out);
        let lists = py.detach(|| s.replica_lists(&keys));
        for (key, list) in keys.iter().zip(lists) {
            if let Some(list) = list {
                let descs: Vec<ReplicaDescriptor> = list.into_iter().map(ReplicaDescriptor::new).collect();
                out.set_item(key, descs)?;
            }
        }
        Ok(out)
    }
}
