//! Process faults: crash ([`kill9`]) and pause ([`pause`] / [`resume`]) of a
//! master or store node, by pid.
//!
//! Pids come from [`std::process::Child::id`]. Processes started through
//! [`crate::net::Network::command`] run under `ip netns exec`, which execs the
//! program directly, so the child's pid is the program's own pid. The harness
//! is the parent and must reap its children ([`kill9_and_reap`], or
//! `Child::wait`) or they stay zombies.
//!
//! A stopped (SIGSTOP) process keeps its sockets: peers' requests queue in the
//! kernel and complete after [`resume`], like a long GC pause or a VM freeze.

use std::io;
use std::process::{Child, ExitStatus};

use crate::host::HostError;

/// Crashes the process: SIGKILL, which it cannot catch. Data it already
/// handed to the kernel (even without fsync) survives; see
/// [`crate::power::LoopFs::power_cut`] for losing that too.
pub fn kill9(pid: u32) -> Result<(), HostError> {
    send(pid, libc::SIGKILL, "SIGKILL")
}

/// Asks the process to stop (SIGTERM).
pub fn terminate(pid: u32) -> Result<(), HostError> {
    send(pid, libc::SIGTERM, "SIGTERM")
}

/// Freezes the process (SIGSTOP) until [`resume`].
pub fn pause(pid: u32) -> Result<(), HostError> {
    send(pid, libc::SIGSTOP, "SIGSTOP")
}

/// Lets a process frozen by [`pause`] continue (SIGCONT).
pub fn resume(pid: u32) -> Result<(), HostError> {
    send(pid, libc::SIGCONT, "SIGCONT")
}

/// SIGKILLs `child` and waits for it, so no zombie remains. A child that has
/// already exited is only reaped.
pub fn kill9_and_reap(child: &mut Child) -> Result<ExitStatus, HostError> {
    let pid = child.id();
    if let Some(status) = child.try_wait().map_err(|e| HostError::io(format!("checking pid {pid}"), e))? {
        return Ok(status);
    }
    kill9(pid)?;
    child.wait().map_err(|e| HostError::io(format!("reaping pid {pid}"), e))
}

/// Whether `err` means the process does not exist (any more).
pub fn is_no_such_process(err: &HostError) -> bool {
    matches!(err, HostError::Signal { source, .. } if source.raw_os_error() == Some(libc::ESRCH))
}

fn send(pid: u32, signal: libc::c_int, name: &'static str) -> Result<(), HostError> {
    // pid 0 and negative values address process groups (and -1 every process):
    // never what a fault on one node means, so they are refused.
    let raw = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0).ok_or_else(|| HostError::Signal {
        pid,
        signal: name,
        source: io::Error::new(io::ErrorKind::InvalidInput, "not a single-process pid"),
    })?;
    // SAFETY: kill has no memory-safety preconditions; `raw` is a positive pid.
    let rc = unsafe { libc::kill(raw, signal) };
    if rc == 0 { Ok(()) } else { Err(HostError::Signal { pid, signal: name, source: io::Error::last_os_error() }) }
}
