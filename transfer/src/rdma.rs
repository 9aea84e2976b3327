//! RDMA support, behind the off-by-default `rdma` cargo feature, on the
//! maintained `sideway` verbs binding (MPL-2.0; `async-rdma` is GPL-3.0-only,
//! unmaintained and depends on a yanked crate). Today this module finds out
//! whether an RDMA device can be opened; the verbs data path itself is not
//! implemented yet, so the engine always moves bytes over TCP and says why
//! in one log line. See docs/TRANSFER.md.

/// Why RDMA cannot carry transfers on this host.
pub fn unavailable_reason() -> String {
    probe().err().unwrap_or_else(|| "the verbs data path is not implemented yet".into())
}

#[cfg(feature = "rdma")]
fn probe() -> Result<(), String> {
    use sideway::ibverbs::device::{DeviceInfo, DeviceList};
    let list = DeviceList::new().map_err(|e| format!("no RDMA device list: {e}"))?;
    let Some(device) = list.iter().next() else {
        return Err("no RDMA device on this host".into());
    };
    let name = device.name();
    device.open().map_err(|e| format!("cannot open RDMA device {name}: {e}"))?;
    tracing::info!(device = %name, "RDMA device found");
    Ok(())
}

#[cfg(not(feature = "rdma"))]
fn probe() -> Result<(), String> {
    Err("built without the `rdma` feature".into())
}
