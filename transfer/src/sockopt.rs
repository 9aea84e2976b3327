//! Socket options the data path sets on every connection, client and server.
//!
//! The perf notes of this machine kind: the default congestion control (bbr)
//! halves loopback throughput against reno; `TCP_CONGESTION` is a per-socket
//! option that needs no privilege for the algorithms the kernel allows.

use std::os::fd::AsRawFd;

use tokio::net::TcpStream;

/// Longest congestion control name: the kernel's `TCP_CA_NAME_MAX` (16,
/// including the terminating NUL).
pub const CONGESTION_NAME_MAX_BYTES: usize = 15;

/// Sets `TCP_NODELAY` and, if given, the congestion control algorithm.
/// Failures are logged and ignored: they cost speed, not correctness.
pub fn tune(stream: &TcpStream, congestion: Option<&str>) {
    if let Err(err) = stream.set_nodelay(true) {
        tracing::warn!("cannot set TCP_NODELAY: {err}");
    }
    if let Some(name) = congestion
        && let Err(err) = set_congestion(stream, name)
    {
        tracing::warn!(congestion = name, "cannot set TCP_CONGESTION, keeping the default: {err}");
    }
}

/// Sets `TCP_CONGESTION` on one socket.
pub fn set_congestion(socket: &impl AsRawFd, name: &str) -> std::io::Result<()> {
    let bytes = name.as_bytes();
    let len = libc::socklen_t::try_from(bytes.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "congestion name too long"))?;
    // SAFETY: the fd is a live TCP socket borrowed for the call; the kernel
    // copies `len` bytes from `bytes`, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(socket.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_CONGESTION, bytes.as_ptr().cast(), len)
    };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// Checks a congestion control name before it reaches the kernel.
pub fn validate_congestion(name: &str) -> Result<(), String> {
    let plain = name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if name.is_empty() || name.len() > CONGESTION_NAME_MAX_BYTES || !plain {
        return Err(format!(
            "congestion control {name:?} must be 1..={CONGESTION_NAME_MAX_BYTES} ASCII letters, digits, '_' or '-' (e.g. \"reno\", \"cubic\")"
        ));
    }
    Ok(())
}
