//! `MooncakeDistributedStore`: Mooncake's method names, arguments, return
//! values and error codes over [`Session`]. Each method converts its
//! arguments (a wrong type is a `TypeError`, as in Mooncake), checks the
//! caller's addresses against registered memory, then releases the GIL for
//! the call itself. Before `setup` and after `close` every call answers
//! `INVALID_PARAMS` (or `b""`, `None`, empty lists where Mooncake returns those).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use super::args::{HeldBuffer, unsigned, unsigned_all};
use super::config::{ReplicateConfig, setup_args_from_dict, spec_of};
use super::handle::BufferHandle;
use super::ranges::Ranged;
use super::replica::ReplicaDescriptor;
use super::tasks::{ExistOptions, QueryTaskResponse, task_answer, task_id as task_id_of};
use crate::batches::RangeReads;
use crate::buffers::{Region, carve};
use crate::codes::{self, Code};
use crate::probe::ProbePolicy;
use crate::session::StoreState;
use crate::setup::{SetupArgs, TlsPaths};
use crate::tasks::TaskPair;

/// Upstream's `MooncakeHostMemAllocator`: host memory for a standalone-mode
/// store's buffers (`alloc(size)` → address, `free(address)` → 0 or -1).
/// Register what it gives with `register_buffer` before passing it to a call.
#[pyclass(module = "mooncake_rs.store", frozen)]
#[derive(Default)]
pub struct MooncakeHostMemAllocator {
    memory: crate::standalone::HostMemory,
}

#[pymethods]
impl MooncakeHostMemAllocator {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// `size` bytes of page-aligned memory; their address (a `MemoryError`
    /// when the host has none to give).
    fn alloc(&self, size: i64) -> PyResult<usize> {
        let size = unsigned(size, "size")? as u64;
        self.memory.alloc(size).map_err(|e| pyo3::exceptions::PyMemoryError::new_err(e.to_string()))
    }

    /// Frees a block `alloc` gave: 0, or -1 for an address it did not give.
    fn free(&self, ptr: i64) -> PyResult<Code> {
        let ptr = unsigned(ptr, "ptr")?;
        Ok(if self.memory.free(ptr) { codes::OK } else { codes::INTERNAL_ERROR })
    }
}

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

    /// `setup(local_hostname, metadata_server, global_segment_size,
    /// local_buffer_size, protocol, rdma_devices, master_server_addr, ...)`
    /// or `setup(config: dict)`. 0 on success, else a negative code (the
    /// reason is logged).
    #[pyo3(signature = (
        local_hostname, metadata_server=None, global_segment_size=None, local_buffer_size=None,
        protocol=None, rdma_devices=None, master_server_addr=None, engine=None,
        enable_ssd_offload=false, ssd_offload_path=String::new(), tenant_id=String::new(),
        enable_client_http_server=false, client_http_port=9300
    ))]
    #[allow(clippy::too_many_arguments)]
    fn setup(
        &self,
        py: Python<'_>,
        local_hostname: &Bound<'_, PyAny>,
        metadata_server: Option<String>,
        global_segment_size: Option<i64>,
        local_buffer_size: Option<i64>,
        protocol: Option<String>,
        rdma_devices: Option<String>,
        master_server_addr: Option<String>,
        engine: Option<&Bound<'_, PyAny>>,
        enable_ssd_offload: bool,
        ssd_offload_path: String,
        tenant_id: String,
        enable_client_http_server: bool,
        client_http_port: i64,
    ) -> PyResult<Code> {
        let mut args = match local_hostname.cast::<PyDict>() {
            Ok(dict) => match setup_args_from_dict(dict)? {
                Ok(args) => args,
                Err(why) => {
                    tracing::error!(code = codes::INVALID_PARAMS, "setup failed: {why}");
                    return Ok(codes::INVALID_PARAMS);
                }
            },
            Err(_) => {
                let missing = || {
                    PyTypeError::new_err(
                        "setup() takes 7 arguments (local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol, rdma_devices, master_server_addr) or one dict",
                    )
                };
                SetupArgs {
                    local_hostname: local_hostname.extract()?,
                    metadata_server: metadata_server.ok_or_else(missing)?,
                    global_segment_size: unsigned(global_segment_size.ok_or_else(missing)?, "global_segment_size")?
                        as u64,
                    local_buffer_size: unsigned(local_buffer_size.ok_or_else(missing)?, "local_buffer_size")? as u64,
                    protocol: protocol.ok_or_else(missing)?,
                    rdma_devices: rdma_devices.ok_or_else(missing)?,
                    master_server_addr: master_server_addr.ok_or_else(missing)?,
                    tls: TlsPaths::default(),
                    tenant: String::new(),
                    enable_ssd_prefetch: false,
                }
            }
        };
        let ignored = [
            (engine.is_some(), "engine"),
            (enable_ssd_offload, "enable_ssd_offload"),
            (!ssd_offload_path.is_empty(), "ssd_offload_path"),
            (enable_client_http_server, "enable_client_http_server"),
        ];
        for (_, name) in ignored.iter().filter(|(set, _)| *set) {
            tracing::warn!(argument = name, "setup: not supported by mooncake-rs; ignored (see docs/PYTHON.md)");
        }
        let _ = client_http_port;
        if !tenant_id.is_empty() {
            args.tenant = tenant_id;
        }
        match py.detach(|| self.state.setup(&args)) {
            Ok(()) => Ok(codes::OK),
            Err(e) => {
                tracing::error!(code = e.code, "setup failed: {}", e.message);
                Ok(e.code)
            }
        }
    }

    /// `setup_dummy(mem_pool_size, local_buffer_size, server_address)`:
    /// standalone mode. `server_address` is the `--http` address of a store
    /// node on this host (`mooncake store --http …`); this process holds no
    /// segment, the store node holds the cache (it outlives this process).
    /// `mem_pool_size` is accepted and unused (as in upstream's current
    /// client). 0, or -1 with the reason logged (as upstream).
    fn setup_dummy(
        &self,
        py: Python<'_>,
        mem_pool_size: i64,
        local_buffer_size: i64,
        server_address: String,
    ) -> PyResult<Code> {
        let _ = unsigned(mem_pool_size, "mem_pool_size")?;
        let local_buffer_size = unsigned(local_buffer_size, "local_buffer_size")? as u64;
        let opened = py.detach(|| {
            let info = crate::standalone::fetch(&server_address)?;
            self.state.setup(&info.setup_args(local_buffer_size)).map_err(|e| e.message)
        });
        match opened {
            Ok(()) => Ok(codes::OK),
            Err(why) => {
                tracing::error!("setup_dummy failed: {why}");
                Ok(codes::INTERNAL_ERROR)
            }
        }
    }

    /// `init_all(protocol, device_name, mount_segment_size=16 MiB)`:
    /// upstream's all-defaults setup (this host, masters at
    /// `$MOONCAKE_MASTER` or 127.0.0.1:50051, a segment of
    /// `mount_segment_size`, a 16 MiB local buffer). 0, a code, or
    /// `INVALID_PARAMS` when the store is set up already (as upstream).
    #[pyo3(signature = (protocol, device_name, mount_segment_size=16 << 20))]
    fn init_all(
        &self,
        py: Python<'_>,
        protocol: String,
        device_name: String,
        mount_segment_size: i64,
    ) -> PyResult<Code> {
        let size = unsigned(mount_segment_size, "mount_segment_size")? as u64;
        if self.state.is_open() {
            return Ok(codes::INVALID_PARAMS);
        }
        let masters = std::env::var("MOONCAKE_MASTER").ok().filter(|m| !m.trim().is_empty());
        let args = SetupArgs {
            local_hostname: "127.0.0.1".into(),
            metadata_server: "P2PHANDSHAKE".into(),
            global_segment_size: size,
            local_buffer_size: 16 << 20,
            protocol,
            rdma_devices: device_name,
            master_server_addr: masters.unwrap_or_else(|| "127.0.0.1:50051".into()),
            tls: TlsPaths::default(),
            tenant: String::new(),
            enable_ssd_prefetch: false,
        };
        match py.detach(|| self.state.setup(&args)) {
            Ok(()) => Ok(codes::OK),
            Err(e) => {
                tracing::error!(code = e.code, "init_all failed: {}", e.message);
                Ok(e.code)
            }
        }
    }

    /// Unmounts this process's segment and disconnects; 0 (also when closed).
    fn close(&self, py: Python<'_>) -> Code {
        py.detach(|| self.state.close());
        codes::OK
    }

    /// The object events of the masters from `from_revision` (0: from now),
    /// for keys under `prefix`: a `KVEventWatch` iterator (docs/EVENTS.md).
    /// A `RuntimeError` before `setup` and after `close`.
    #[pyo3(signature = (prefix=String::new(), from_revision=0))]
    fn watch(&self, py: Python<'_>, prefix: String, from_revision: u64) -> PyResult<super::watch::KVEventWatch> {
        let state = self.state.clone();
        let stream = py.detach(move || crate::events::EventStream::open(state, &prefix, from_revision));
        Ok(super::watch::KVEventWatch::new(stream.map_err(super::watch::stream_error)?))
    }

    /// 0 healthy, 1 not set up or closed, 2 no master answers.
    fn health_check(&self, py: Python<'_>) -> PyResult<Code> {
        let s = session!(self, HEALTH_NOT_OPEN);
        Ok(py.detach(|| s.health()))
    }

    /// `host:port` of this process's transfer server ("" before setup).
    fn get_hostname(&self) -> String {
        self.state.session().map(|s| s.hostname().to_string()).unwrap_or_default()
    }

    fn register_buffer(&self, buffer_ptr: i64, size: i64) -> PyResult<Code> {
        let (ptr, len) = (unsigned(buffer_ptr, "buffer_ptr")?, unsigned(size, "size")?);
        let s = session!(self, codes::INVALID_PARAMS);
        // GPU memory is accepted and staged through host memory by each call
        // that uses it (buffers.rs): the routes move host bytes only.
        let memory = mooncake_transfer::address_kind(ptr);
        if memory == mooncake_transfer::AddressKind::Device {
            tracing::info!(
                ptr,
                len,
                "registered a GPU buffer: calls on it copy through host memory with the CUDA driver \
                 (docs/TRANSFER.md, \"Device (GPU) memory\")"
            );
        }
        Ok(match s.registry().register(ptr, len, memory) {
            Ok(()) => codes::OK,
            Err(e) => {
                tracing::warn!(ptr, len, reason = ?e, "register_buffer refused");
                codes::INVALID_PARAMS
            }
        })
    }

    fn unregister_buffer(&self, buffer_ptr: i64) -> PyResult<Code> {
        let ptr = unsigned(buffer_ptr, "buffer_ptr")?;
        let s = session!(self, codes::INVALID_PARAMS);
        Ok(if s.registry().unregister(ptr) { codes::OK } else { codes::INVALID_PARAMS })
    }

    #[pyo3(signature = (key, value, config=None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_value(py, key, value, config, false)
    }

    #[pyo3(signature = (key, value, config=None))]
    fn upsert(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_value(py, key, value, config, true)
    }

    /// One object from several bytes-like parts, written from where they lie.
    #[pyo3(signature = (key, *parts, config=None))]
    fn put_parts(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_parts_of(py, key, parts, config, false)
    }

    /// `put_parts` that replaces an existing object (as `upsert`).
    #[pyo3(signature = (key, *parts, config=None))]
    fn upsert_parts(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_parts_of(py, key, parts, config, true)
    }

    #[pyo3(signature = (key, buffer_ptr, size, config=None))]
    fn put_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer_ptr: i64,
        size: i64,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_registered(py, key, buffer_ptr, size, config, false)
    }

    #[pyo3(signature = (key, buffer_ptr, size, config=None))]
    fn upsert_from(
        &self,
        py: Python<'_>,
        key: &str,
        buffer_ptr: i64,
        size: i64,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.put_registered(py, key, buffer_ptr, size, config, true)
    }

    /// The object's bytes, or `b""` when it is missing (or on any error).
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyBytes>> {
        let s = session!(self, PyBytes::new(py, b""));
        let got = py.detach(|| s.get_staged(key));
        Ok(PyBytes::new(py, got.as_ref().map_or(&[][..], |b| b.as_ref())))
    }

    /// The object in a `BufferHandle` (no copy), or `None`.
    fn get_buffer(&self, py: Python<'_>, key: &str) -> PyResult<Option<BufferHandle>> {
        let s = session!(self, None);
        Ok(py.detach(|| s.get_staged(key)).ok().map(BufferHandle::new))
    }

    /// Reads the object into registered memory; its size, or a negative code.
    fn get_into(&self, py: Python<'_>, key: &str, buffer_ptr: i64, size: i64) -> PyResult<Code> {
        let (ptr, len) = (unsigned(buffer_ptr, "buffer_ptr")?, unsigned(size, "size")?);
        let s = session!(self, codes::INVALID_PARAMS);
        let Some(region) = s.region(ptr, len) else { return Ok(codes::INVALID_PARAMS) };
        Ok(py.detach(|| s.get_into(key, region)))
    }

    /// Byte ranges of objects into registered buffers (buffer-major: for
    /// buffer `i`, key `j`, fragment `k`). Per fragment: bytes read or a code.
    fn get_into_ranges(
        &self,
        py: Python<'_>,
        buffer_ptrs: Vec<i64>,
        all_keys: Vec<Vec<String>>,
        all_dst_offsets: Vec<Vec<Vec<i64>>>,
        all_src_offsets: Vec<Vec<Vec<i64>>>,
        all_sizes: Vec<Vec<Vec<i64>>>,
    ) -> PyResult<Vec<Vec<Vec<Code>>>> {
        let plan = RangePlan::new(&buffer_ptrs, &all_keys, &all_dst_offsets, &all_src_offsets, &all_sizes)?;
        let s = session!(self, plan.refused());
        let regions = carve(&plan.destinations, |p, l| s.usable(p, l));
        let (keys, ranges) = plan.reads(regions);
        let results = py.detach(|| s.get_ranges(&keys, ranges));
        Ok(plan.shape(results))
    }

    /// `put_batch(keys, values, config)`: 0 when every item was stored (or
    /// kept), else the first item's error code.
    #[pyo3(signature = (keys, values, config=None))]
    fn put_batch(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.values_batch(py, keys, values, config, false)
    }

    /// `upsert_batch(keys, values, config)`: as `put_batch`, replacing the
    /// objects of keys that exist (readers see old or new bytes, never a mix).
    #[pyo3(signature = (keys, values, config=None))]
    fn upsert_batch(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        self.values_batch(py, keys, values, config, true)
    }

    /// Each object's bytes, `b""` for a missing one.
    fn get_batch<'py>(&self, py: Python<'py>, keys: Vec<String>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let s = session!(self, keys.iter().map(|_| PyBytes::new(py, b"")).collect());
        let got = py.detach(|| s.get_batch_staged(&keys));
        Ok(got.iter().map(|r| PyBytes::new(py, r.as_ref().map_or(&[][..], |b| b.as_ref()))).collect())
    }

    /// A `BufferHandle` per key, `None` for a missing one.
    fn batch_get_buffer(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<Vec<Option<BufferHandle>>> {
        let s = session!(self, keys.iter().map(|_| None).collect());
        let got = py.detach(|| s.get_batch_staged(&keys));
        Ok(got.into_iter().map(|r| r.ok().map(BufferHandle::new)).collect())
    }

    #[pyo3(signature = (keys, buffer_ptrs, sizes, config=None))]
    fn batch_put_from(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffer_ptrs: Vec<i64>,
        sizes: Vec<i64>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Vec<Code>> {
        self.put_from_parts(py, keys, one_each(buffer_ptrs), one_each(sizes), config, false)
    }

    /// `batch_upsert_from(keys, buffer_ptrs, sizes, config)`: as
    /// `batch_put_from`, replacing the objects of keys that exist.
    #[pyo3(signature = (keys, buffer_ptrs, sizes, config=None))]
    fn batch_upsert_from(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffer_ptrs: Vec<i64>,
        sizes: Vec<i64>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Vec<Code>> {
        self.put_from_parts(py, keys, one_each(buffer_ptrs), one_each(sizes), config, true)
    }

    /// Reads `keys[i]` into `buffer_ptrs[i]`; each object's size or a code.
    fn batch_get_into(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        buffer_ptrs: Vec<i64>,
        sizes: Vec<i64>,
    ) -> PyResult<Vec<Code>> {
        let requests: Vec<(usize, usize)> =
            unsigned_all(&buffer_ptrs, "buffer_ptrs")?.into_iter().zip(unsigned_all(&sizes, "sizes")?).collect();
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        if keys.len() != buffer_ptrs.len() || keys.len() != sizes.len() {
            return Ok(vec![codes::INVALID_PARAMS; keys.len()]);
        }
        let regions = carve(&requests, |p, l| s.usable(p, l));
        Ok(py.detach(|| s.get_batch_into(&keys, regions)))
    }

    #[pyo3(signature = (keys, all_buffer_ptrs, all_sizes, config=None))]
    fn batch_put_from_multi_buffers(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        all_buffer_ptrs: Vec<Vec<i64>>,
        all_sizes: Vec<Vec<i64>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Vec<Code>> {
        self.put_from_parts(py, keys, all_buffer_ptrs, all_sizes, config, false)
    }

    /// Reads `keys[i]` scattered over `all_buffer_ptrs[i]`, in order.
    #[pyo3(signature = (keys, all_buffer_ptrs, all_sizes, prefer_alloc_in_same_node=false))]
    fn batch_get_into_multi_buffers(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        all_buffer_ptrs: Vec<Vec<i64>>,
        all_sizes: Vec<Vec<i64>>,
        prefer_alloc_in_same_node: bool,
    ) -> PyResult<Vec<Code>> {
        let _ = prefer_alloc_in_same_node;
        let shape = Parts::new(&keys, &all_buffer_ptrs, &all_sizes)?;
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        let regions = shape.regions(carve(&shape.flat, |p, l| s.usable(p, l)));
        Ok(py.detach(|| s.get_batch_into_parts(&keys, regions)))
    }

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

    fn get_size(&self, py: Python<'_>, key: &str) -> PyResult<Code> {
        let s = session!(self, codes::INVALID_PARAMS);
        Ok(py.detach(|| s.get_size(key)))
    }

    #[pyo3(signature = (key, force=false))]
    fn remove(&self, py: Python<'_>, key: &str, force: bool) -> PyResult<Code> {
        let s = session!(self, codes::INVALID_PARAMS);
        Ok(py.detach(|| s.remove(key, force)))
    }

    #[pyo3(signature = (keys, force=false))]
    fn batch_remove(&self, py: Python<'_>, keys: Vec<String>, force: bool) -> PyResult<Vec<Code>> {
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        Ok(py.detach(|| s.remove_each(&keys, force)))
    }

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

    /// `put_from_with_metadata(key, buffer_ptr, metadata_buffer_ptr, size,
    /// metadata_size, config)`: one object, the metadata bytes followed by
    /// the data bytes, both from registered memory. `size == 0` stores
    /// nothing (0), as upstream.
    #[pyo3(signature = (key, buffer_ptr, metadata_buffer_ptr, size, metadata_size, config=None))]
    #[allow(clippy::too_many_arguments)]
    fn put_from_with_metadata(
        &self,
        py: Python<'_>,
        key: String,
        buffer_ptr: i64,
        metadata_buffer_ptr: i64,
        size: i64,
        metadata_size: i64,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Code> {
        let (ptr, len) = (unsigned(buffer_ptr, "buffer_ptr")?, unsigned(size, "size")?);
        let (meta_ptr, meta_len) =
            (unsigned(metadata_buffer_ptr, "metadata_buffer_ptr")?, unsigned(metadata_size, "metadata_size")?);
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        if len == 0 {
            return Ok(codes::OK);
        }
        let parts = match meta_len {
            0 => s.region(ptr, len).map(|d| vec![d]),
            _ => s.region(meta_ptr, meta_len).zip(s.region(ptr, len)).map(|(m, d)| vec![m, d]),
        };
        let Some(parts) = parts else { return Ok(codes::INVALID_PARAMS) };
        let keys = [key];
        Ok(py
            .detach(|| s.put_batch_from(&keys, vec![Some(parts)], &spec, false))
            .first()
            .copied()
            .unwrap_or(codes::INTERNAL_ERROR))
    }

    /// `batch_put_session_start(keys, sizes, config)`: reserves each
    /// object's space; nothing is readable until `batch_put_session_end`.
    /// Per key 0 or a code; `[]` before `setup`.
    #[pyo3(signature = (keys, sizes, config=None))]
    fn batch_put_session_start(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        sizes: Vec<i64>,
        config: Option<&Bound<'_, ReplicateConfig>>,
    ) -> PyResult<Vec<Code>> {
        let sizes = unsigned_all(&sizes, "sizes")?;
        let spec = spec_of(config);
        let s = session!(self, Vec::new());
        if keys.len() != sizes.len() {
            return Ok(vec![codes::INVALID_PARAMS; keys.len()]);
        }
        let items: Vec<(String, u64)> = keys.into_iter().zip(sizes.into_iter().map(|n| n as u64)).collect();
        Ok(py.detach(|| s.put_sessions_start(&items, &spec)))
    }

    /// `batch_put_from_multi_buffer_ranges(keys, all_buffer_ptrs, all_sizes,
    /// all_dst_offsets)`: writes range j of key i (`all_sizes[i][j]` bytes
    /// from `all_buffer_ptrs[i][j]`) at `all_dst_offsets[i][j]` of the
    /// object its put session reserved. Per key the bytes written or a code.
    fn batch_put_from_multi_buffer_ranges(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        all_buffer_ptrs: Vec<Vec<i64>>,
        all_sizes: Vec<Vec<i64>>,
        all_dst_offsets: Vec<Vec<i64>>,
    ) -> PyResult<Vec<Code>> {
        let ranged = Ranged::new(&keys, &all_buffer_ptrs, &all_sizes, &all_dst_offsets)?;
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        let sources = ranged.sources(&s);
        Ok(py.detach(|| s.put_sessions_write(&keys, sources)))
    }

    /// `batch_put_session_end(keys)`: makes each session's object readable.
    /// Per key 0 (the session is gone) or a code (it stays: end it again or
    /// revoke it); `[]` before `setup`.
    fn batch_put_session_end(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<Vec<Code>> {
        let s = session!(self, Vec::new());
        Ok(py.detach(|| s.put_sessions_end(&keys)))
    }

    /// `batch_put_session_revoke(keys)`: frees each session's reservation;
    /// nothing is stored. Per key 0 or a code; `[]` before `setup`.
    fn batch_put_session_revoke(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<Vec<Code>> {
        let s = session!(self, Vec::new());
        Ok(py.detach(|| s.put_sessions_revoke(&keys)))
    }

    /// `batch_get_session_start(keys)`: resolves each object's replicas
    /// once, for ranged reads under its KV lease. Per key 0 or a code.
    fn batch_get_session_start(&self, py: Python<'_>, keys: Vec<String>) -> PyResult<Vec<Code>> {
        let s = session!(self, Vec::new());
        Ok(py.detach(|| s.get_sessions_start(&keys).0))
    }

    /// `batch_get_session_start_with_sources(keys)`: as
    /// `batch_get_session_start`, and per key where the bytes come from
    /// (`"memory"` or `"local_disk"`; `""` for a key that failed).
    fn batch_get_session_start_with_sources(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
    ) -> PyResult<(Vec<Code>, Vec<String>)> {
        let s = session!(self, (Vec::new(), Vec::new()));
        Ok(py.detach(|| s.get_sessions_start(&keys)))
    }

    /// `batch_get_into_multi_buffer_ranges(keys, all_buffer_ptrs, all_sizes,
    /// all_src_offsets)`: reads `all_sizes[i][j]` bytes at
    /// `all_src_offsets[i][j]` of key i's object into `all_buffer_ptrs[i][j]`,
    /// from the replica its get session resolved. Per key the bytes read or
    /// a code (`LEASE_EXPIRED`: start the session again).
    fn batch_get_into_multi_buffer_ranges(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        all_buffer_ptrs: Vec<Vec<i64>>,
        all_sizes: Vec<Vec<i64>>,
        all_src_offsets: Vec<Vec<i64>>,
    ) -> PyResult<Vec<Code>> {
        let ranged = Ranged::new(&keys, &all_buffer_ptrs, &all_sizes, &all_src_offsets)?;
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        let destinations = ranged.destinations(&s);
        Ok(py.detach(|| s.get_sessions_read(&keys, destinations)))
    }

    /// `batch_get_session_end(keys)`: drops the get sessions; 0 (-1 before
    /// `setup`, as upstream).
    fn batch_get_session_end(&self, keys: Vec<String>) -> Code {
        match self.state.session() {
            Ok(s) => {
                s.get_sessions_end(&keys);
                codes::OK
            }
            Err(_) => codes::INTERNAL_ERROR,
        }
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

impl MooncakeDistributedStore {
    fn put_parts_of(
        &self,
        py: Python<'_>,
        key: &str,
        parts: &Bound<'_, PyTuple>,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Code> {
        let held: Vec<HeldBuffer> = parts.iter().map(|p| HeldBuffer::of(&p)).collect::<PyResult<_>>()?;
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        let slices: Vec<&[u8]> = held.iter().map(HeldBuffer::bytes).collect();
        if slices.iter().all(|p| p.is_empty()) {
            return Ok(codes::OK); // Mooncake: nothing to store, nothing stored.
        }
        if let Err(code) = s.copying_put_allowed() {
            return Ok(code);
        }
        Ok(py.detach(|| s.put(key, &slices, &spec, upsert)))
    }

    fn put_value(
        &self,
        py: Python<'_>,
        key: &str,
        value: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Code> {
        let held = HeldBuffer::of(value)?;
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        if let Err(code) = s.copying_put_allowed() {
            return Ok(code);
        }
        let data = held.bytes();
        Ok(py.detach(|| s.put(key, &[data], &spec, upsert)))
    }

    fn put_registered(
        &self,
        py: Python<'_>,
        key: &str,
        buffer_ptr: i64,
        size: i64,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Code> {
        let (ptr, len) = (unsigned(buffer_ptr, "buffer_ptr")?, unsigned(size, "size")?);
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        let Some(region) = s.region(ptr, len) else { return Ok(codes::INVALID_PARAMS) };
        Ok(py.detach(|| s.put_from(key, region, &spec, upsert)))
    }

    fn put_from_parts(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        ptrs: Vec<Vec<i64>>,
        sizes: Vec<Vec<i64>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Vec<Code>> {
        let shape = Parts::new(&keys, &ptrs, &sizes)?;
        let spec = spec_of(config);
        let s = session!(self, vec![codes::INVALID_PARAMS; keys.len()]);
        // Sources may overlap (they are only read): each is checked alone.
        let regions = shape.regions(shape.flat.iter().map(|&(p, l)| s.region(p, l)).collect());
        Ok(py.detach(|| s.put_batch_from(&keys, regions, &spec, upsert)))
    }

    /// `put_batch` and `upsert_batch`: 0 when every item was stored (or,
    /// for a put, kept), else the first item's error code.
    fn values_batch(
        &self,
        py: Python<'_>,
        keys: Vec<String>,
        values: Vec<Bound<'_, PyAny>>,
        config: Option<&Bound<'_, ReplicateConfig>>,
        upsert: bool,
    ) -> PyResult<Code> {
        let held: Vec<HeldBuffer> = values.iter().map(HeldBuffer::of).collect::<PyResult<_>>()?;
        let spec = spec_of(config);
        let s = session!(self, codes::INVALID_PARAMS);
        if keys.len() != held.len() {
            return Ok(codes::INVALID_PARAMS);
        }
        if let Err(code) = s.copying_put_allowed() {
            return Ok(code);
        }
        let items = keys.iter().zip(&held).map(|(k, v)| Some((k.as_str(), vec![v.bytes()]))).collect();
        let results = py.detach(|| s.put_batch(items, &spec, upsert));
        Ok(results.into_iter().find(|c| *c != codes::OK).unwrap_or(codes::OK))
    }
}

impl Drop for MooncakeDistributedStore {
    /// A store dropped while open unmounts its segment, as `close` does.
    fn drop(&mut self) {
        // The unmount waits on the network: not with the GIL held.
        Python::attach(|py| py.detach(|| self.state.close()));
    }
}

/// One buffer per key, in the shape of the multi-buffer calls.
fn one_each(values: Vec<i64>) -> Vec<Vec<i64>> {
    values.into_iter().map(|v| vec![v]).collect()
}

/// The buffers of each key of a multi-buffer call, flattened for [`carve`].
struct Parts {
    /// `(address, size)` of every buffer of every accepted key.
    flat: Vec<(usize, usize)>,
    /// Per key: how many of `flat` are its buffers (`None`: refused).
    counts: Vec<Option<usize>>,
}

impl Parts {
    fn new(keys: &[String], ptrs: &[Vec<i64>], sizes: &[Vec<i64>]) -> PyResult<Parts> {
        let mut flat = Vec::new();
        let mut counts = Vec::with_capacity(keys.len());
        let lists_match = keys.len() == ptrs.len() && keys.len() == sizes.len();
        for i in 0..keys.len() {
            let (Some(p), Some(n)) = (ptrs.get(i), sizes.get(i)) else {
                counts.push(None);
                continue;
            };
            let (p, n) = (unsigned_all(p, "buffer_ptrs")?, unsigned_all(n, "sizes")?);
            if !lists_match || p.len() != n.len() || p.is_empty() {
                counts.push(None);
                continue;
            }
            counts.push(Some(p.len()));
            flat.extend(p.into_iter().zip(n));
        }
        Ok(Parts { flat, counts })
    }

    /// Regroups checked buffers per key; a key with any refused buffer is refused.
    fn regions(&self, checked: Vec<Option<Region>>) -> Vec<Option<Vec<Region>>> {
        let mut checked = checked.into_iter();
        self.counts
            .iter()
            .map(|count| {
                let parts: Vec<Option<Region>> = checked.by_ref().take(count.unwrap_or(0)).collect();
                count.and_then(|_| parts.into_iter().collect())
            })
            .collect()
    }
}

/// One (buffer, key) of `get_into_ranges`: its fragments `(src offset,
/// index into the destinations)`, or `None` when its shape is wrong.
type Fragments = Option<Vec<(u64, usize)>>;

/// `get_into_ranges`' nested arguments: the destination of every fragment,
/// and which fragments belong to which (buffer, key).
struct RangePlan {
    /// Per buffer, per key: the key and its fragments `(src offset, index
    /// into destinations)`, or `None` when its shape is wrong.
    items: Vec<Vec<(String, Fragments)>>,
    destinations: Vec<(usize, usize)>,
}

impl RangePlan {
    fn new(
        ptrs: &[i64],
        keys: &[Vec<String>],
        dst: &[Vec<Vec<i64>>],
        src: &[Vec<Vec<i64>>],
        sizes: &[Vec<Vec<i64>>],
    ) -> PyResult<RangePlan> {
        let top = [keys.len(), dst.len(), src.len(), sizes.len()].iter().all(|n| *n == ptrs.len());
        let mut destinations = Vec::new();
        let mut items = Vec::with_capacity(keys.len());
        for (i, buffer_keys) in keys.iter().enumerate() {
            let mut per_buffer = Vec::with_capacity(buffer_keys.len());
            // A buffer whose keys and range groups differ in count is refused
            // whole, as upstream 0.3.14 refuses it.
            let groups = |v: &[Vec<Vec<i64>>]| v.get(i).map(Vec::len) == Some(buffer_keys.len());
            let whole = top && groups(dst) && groups(src) && groups(sizes);
            for (j, key) in buffer_keys.iter().enumerate() {
                let frag = |v: &[Vec<Vec<i64>>]| v.get(i).and_then(|b| b.get(j)).cloned();
                let fragments = match (whole, ptrs.get(i), frag(dst), frag(src), frag(sizes)) {
                    (true, Some(base), Some(d), Some(s), Some(n)) if d.len() == s.len() && d.len() == n.len() => {
                        let base = unsigned(*base, "buffer_ptrs")?;
                        let (d, s, n) = (
                            unsigned_all(&d, "all_dst_offsets")?,
                            unsigned_all(&s, "all_src_offsets")?,
                            unsigned_all(&n, "all_sizes")?,
                        );
                        let mut frags = Vec::with_capacity(d.len());
                        for k in 0..d.len() {
                            // An address that wraps can never be registered: it is refused by `carve`.
                            destinations.push((base.saturating_add(d[k]), n[k]));
                            frags.push((s[k] as u64, destinations.len() - 1));
                        }
                        Some(frags)
                    }
                    _ => None,
                };
                per_buffer.push((key.clone(), fragments));
            }
            items.push(per_buffer);
        }
        Ok(RangePlan { items, destinations })
    }

    /// The keys and ranges to read (accepted shapes only).
    fn reads(&self, regions: Vec<Option<Region>>) -> (Vec<String>, RangeReads) {
        let accepted = self.items.iter().flatten().filter_map(|(key, f)| f.as_ref().map(|f| (key, f)));
        accepted.map(|(key, frags)| (key.clone(), frags.iter().map(|(src, d)| (*src, regions[*d])).collect())).unzip()
    }

    /// The results in the arguments' shape; refused shapes get `INVALID_PARAMS`.
    fn shape(&self, results: Vec<Vec<Code>>) -> Vec<Vec<Vec<Code>>> {
        let mut results = results.into_iter();
        self.items
            .iter()
            .map(|per_buffer| {
                per_buffer
                    .iter()
                    .map(|(_, frags)| match frags {
                        Some(f) => results.next().unwrap_or_else(|| vec![codes::INTERNAL_ERROR; f.len()]),
                        None => vec![codes::INVALID_PARAMS],
                    })
                    .collect()
            })
            .collect()
    }

    /// Every result `INVALID_PARAMS` (before setup, after close).
    fn refused(&self) -> Vec<Vec<Vec<Code>>> {
        self.shape(Vec::new())
            .into_iter()
            .map(|b| b.into_iter().map(|k| vec![codes::INVALID_PARAMS; k.len()]).collect())
            .collect()
    }
}
