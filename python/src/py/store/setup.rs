//! `MooncakeDistributedStore`'s lifecycle: `setup`, `setup_dummy`,
//! `init_all`, `close`, `health_check`, `get_hostname`, `watch`, and the
//! registration of the caller's memory (`register_buffer`,
//! `unregister_buffer`).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::{HEALTH_NOT_OPEN, MooncakeDistributedStore};
use crate::codes::{self, Code};
use crate::py::args::unsigned;
use crate::py::config::setup_args_from_dict;
use crate::py::watch::{KVEventWatch, stream_error};
use crate::setup::{SetupArgs, TlsPaths};

#[pymethods]
impl MooncakeDistributedStore {
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
    fn watch(&self, py: Python<'_>, prefix: String, from_revision: u64) -> PyResult<KVEventWatch> {
        let state = self.state.clone();
        let stream = py.detach(move || crate::events::EventStream::open(state, &prefix, from_revision));
        Ok(KVEventWatch::new(stream.map_err(stream_error)?))
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
}
