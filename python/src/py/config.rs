//! `ReplicateConfig` and `SoftPinAction` (Mooncake's names, fields and
//! defaults), and `setup`'s dict form.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use mooncake_client::Pin;

/// A soft pin's TTL when `ENABLE` names none (upstream's `default_kv_soft_pin_ttl`, 30 minutes).
pub const DEFAULT_SOFT_PIN_TTL_MS: u64 = 30 * 60 * 1000;
/// Longest soft-pin TTL (a day; the masters refuse longer).
pub const SOFT_PIN_TTL_MAX_MS: u64 = 86_400_000;

use crate::session::ReplicaSpec;
use crate::setup::{SetupArgs, TLS_KEYS, TlsPaths};

/// Mooncake's default `global_segment_size` and `local_buffer_size` of the
/// dict form of `setup` (16 MiB each).
const DICT_DEFAULT_SIZE_BYTES: u64 = 16 << 20;

/// What a soft pin does on a put: keep the existing choice, pin, unpin.
#[pyclass(module = "mooncake_rs.store", eq, eq_int, frozen, hash, from_py_object)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[allow(clippy::upper_case_acronyms)]
pub enum SoftPinAction {
    #[default]
    PRESERVE = 0,
    ENABLE = 1,
    DISABLE = 2,
}

#[pymethods]
impl SoftPinAction {
    #[getter]
    fn name(&self) -> &'static str {
        match self {
            SoftPinAction::PRESERVE => "PRESERVE",
            SoftPinAction::ENABLE => "ENABLE",
            SoftPinAction::DISABLE => "DISABLE",
        }
    }

    #[getter]
    fn value(&self) -> i64 {
        *self as i64
    }
}

/// How a put places its replicas. Fields Mooncake has and we do not use
/// (disk and NoF replicas, groups, data types) are kept so code that sets
/// them runs; docs/PYTHON.md lists them.
#[pyclass(module = "mooncake_rs.store", get_all)]
#[derive(Clone, Debug)]
pub struct ReplicateConfig {
    #[pyo3(set)]
    pub replica_num: u64,
    #[pyo3(set)]
    pub with_hard_pin: bool,
    #[pyo3(set)]
    pub soft_pin_action: SoftPinAction,
    /// With `ENABLE`: the soft pin lapses this long after the object becomes
    /// readable (`None`: upstream's default, 30 minutes; 0: no soft pin).
    /// Set without `ENABLE`, a put is `INVALID_PARAMS`, as upstream's. Its
    /// setter raises `TypeError` for a value that is no `uint64`, as
    /// upstream's does.
    pub soft_pin_ttl_ms: Option<u64>,
    #[pyo3(set)]
    pub preferred_segment: String,
    #[pyo3(set)]
    pub preferred_segments: Vec<String>,
    #[pyo3(set)]
    pub prefer_alloc_in_same_node: bool,
    #[pyo3(set)]
    pub nof_replica_num: u64,
    #[pyo3(set)]
    pub dfs_replica_num: u64,
    #[pyo3(set)]
    pub preferred_nof_segments: Vec<String>,
    #[pyo3(set)]
    pub group_ids: Option<Vec<String>>,
    #[pyo3(set)]
    pub data_type: i64,
}

impl Default for ReplicateConfig {
    fn default() -> Self {
        ReplicateConfig {
            replica_num: 1,
            with_hard_pin: false,
            soft_pin_action: SoftPinAction::PRESERVE,
            soft_pin_ttl_ms: None,
            preferred_segment: String::new(),
            preferred_segments: Vec::new(),
            prefer_alloc_in_same_node: false,
            nof_replica_num: 0,
            dfs_replica_num: 0,
            preferred_nof_segments: Vec::new(),
            group_ids: None,
            data_type: 0,
        }
    }
}

#[pymethods]
impl ReplicateConfig {
    #[new]
    fn new() -> Self {
        ReplicateConfig::default()
    }

    /// Mooncake's older boolean form of `soft_pin_action`.
    #[getter]
    fn get_with_soft_pin(&self) -> bool {
        self.soft_pin_action == SoftPinAction::ENABLE
    }

    #[setter]
    fn set_soft_pin_ttl_ms(&mut self, value: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        self.soft_pin_ttl_ms = match value {
            None => None,
            Some(v) if v.is_none() => None,
            Some(v) => Some(v.extract::<u64>().map_err(|_| {
                PyTypeError::new_err(format!("soft_pin_ttl_ms must be an integer in 0..2**64 or None, got {v}"))
            })?),
        };
        Ok(())
    }

    #[setter]
    fn set_with_soft_pin(&mut self, on: bool) {
        self.soft_pin_action = if on { SoftPinAction::ENABLE } else { SoftPinAction::DISABLE };
    }

    fn __str__(&self) -> String {
        format!(
            "ReplicateConfig: {{ replica_num: {}, soft_pin_action: {}, with_hard_pin: {}, preferred_segments: {:?} }}",
            self.replica_num,
            self.soft_pin_action.name(),
            u8::from(self.with_hard_pin),
            self.preferred()
        )
    }

    fn __repr__(&self) -> String {
        self.__str__()
    }
}

impl ReplicateConfig {
    fn preferred(&self) -> Vec<String> {
        let one = Some(self.preferred_segment.clone()).filter(|s| !s.is_empty());
        one.into_iter().chain(self.preferred_segments.iter().cloned()).collect()
    }

    /// The placement of a put. A hard pin wins; a soft pin is set by
    /// `ENABLE`, for `soft_pin_ttl_ms` (upstream's rules: unset is its
    /// default TTL, 0 no soft pin, above a day or set without `ENABLE` a
    /// refusal). `PRESERVE` and `DISABLE` put the object unpinned.
    pub fn spec(&self) -> ReplicaSpec {
        let soft = match (self.soft_pin_action, self.soft_pin_ttl_ms) {
            (SoftPinAction::ENABLE, None) => Ok(Pin::SoftFor { ttl_ms: DEFAULT_SOFT_PIN_TTL_MS }),
            (SoftPinAction::ENABLE, Some(0)) => Ok(Pin::None),
            (SoftPinAction::ENABLE, Some(ttl_ms)) if ttl_ms <= SOFT_PIN_TTL_MAX_MS => Ok(Pin::SoftFor { ttl_ms }),
            (SoftPinAction::ENABLE, Some(ttl_ms)) => {
                Err(format!("soft_pin_ttl_ms {ttl_ms} is above the longest soft pin ({SOFT_PIN_TTL_MAX_MS} ms, a day)"))
            }
            (action, Some(ttl_ms)) => Err(format!(
                "soft_pin_ttl_ms {ttl_ms} with soft_pin_action {}: a TTL needs SoftPinAction.ENABLE",
                action.name()
            )),
            (_, None) => Ok(Pin::None),
        };
        let (pin, refused) = match (self.with_hard_pin, soft) {
            (_, Err(why)) => (Pin::None, Some(why)),
            (true, Ok(_)) => (Pin::Hard, None),
            (false, Ok(pin)) => (pin, None),
        };
        ReplicaSpec {
            replica_num: i64::try_from(self.replica_num).unwrap_or(i64::MAX),
            pin,
            preferred: self.preferred(),
            refused,
        }
    }
}

/// The placement of an optional config argument (Mooncake's default otherwise).
pub fn spec_of(config: Option<&Bound<'_, ReplicateConfig>>) -> ReplicaSpec {
    config.map_or_else(|| ReplicateConfig::default().spec(), |c| c.borrow().spec())
}

/// A boolean key of the setup dict: a bool, or a string upstream reads as
/// true ("true", "1", "yes", "on"; any case). Missing or `None`: false.
fn flag(d: &Bound<'_, PyDict>, key: &str) -> PyResult<bool> {
    match d.get_item(key)? {
        Some(v) if v.is_none() => Ok(false),
        Some(v) => match v.extract::<bool>() {
            Ok(b) => Ok(b),
            Err(_) => {
                let text = v.extract::<String>()?;
                Ok(matches!(text.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on"))
            }
        },
        None => Ok(false),
    }
}

/// `setup(config: dict)`: Mooncake's keys; sizes as ints or strings ("4GB").
/// `Err` (a Python exception) for a wrong type, as upstream raises; `Ok(Err)`
/// for a value of the right type that is not usable (a size string such as
/// `"50%"`), which `setup` answers with `INVALID_PARAMS`, as upstream does.
pub fn setup_args_from_dict(d: &Bound<'_, PyDict>) -> PyResult<Result<SetupArgs, String>> {
    let text = |key: &str, default: &str| -> PyResult<String> {
        match d.get_item(key)? {
            Some(v) if !v.is_none() => v.extract::<String>(),
            _ => Ok(default.to_string()),
        }
    };
    let size = |key: &str| -> PyResult<Result<u64, String>> {
        match d.get_item(key)? {
            None => Ok(Ok(DICT_DEFAULT_SIZE_BYTES)),
            Some(v) => match v.extract::<u64>() {
                Ok(n) => Ok(Ok(n)),
                Err(_) => Ok(mooncake_client::parse_size(&v.extract::<String>()?).map_err(|e| format!("{key}: {e}"))),
            },
        }
    };
    let required = |key: &str| -> PyResult<String> {
        text(key, "").and_then(|v| match v.is_empty() {
            true => Err(PyTypeError::new_err(format!("setup(config): {key:?} is required"))),
            false => Ok(v),
        })
    };
    let master = match text("master_server_addr", "")? {
        m if m.is_empty() => text("master_server_address", "")?,
        m => m,
    };
    let (global_segment_size, local_buffer_size) = (size("global_segment_size")?, size("local_buffer_size")?);
    let (global_segment_size, local_buffer_size) = match (global_segment_size, local_buffer_size) {
        (Ok(g), Ok(l)) => (g, l),
        (Err(e), _) | (_, Err(e)) => return Ok(Err(e)),
    };
    Ok(Ok(SetupArgs {
        local_hostname: required("local_hostname")?,
        metadata_server: text("metadata_server", "")?,
        global_segment_size,
        local_buffer_size,
        protocol: text("protocol", "tcp")?,
        rdma_devices: text("rdma_devices", "")?,
        master_server_addr: master,
        tenant: text("tenant_id", "")?,
        enable_ssd_prefetch: flag(d, "enable_ssd_prefetch")?,
        tls: TlsPaths {
            cert: Some(text(TLS_KEYS[0], "")?).filter(|v| !v.is_empty()),
            key: Some(text(TLS_KEYS[1], "")?).filter(|v| !v.is_empty()),
            ca: Some(text(TLS_KEYS[2], "")?).filter(|v| !v.is_empty()),
        },
    }))
}
