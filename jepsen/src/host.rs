//! Host-side plumbing shared by the fault primitives: the [`HostError`] type
//! and [`run`], the one helper through which every external command
//! (`ip`, `nft`, `mkfs.xfs`, `mount`, `losetup`, …) is executed.
//!
//! [`run`] captures stdout and stderr, so a failing command is reported as
//! [`HostError::Command`] with the command line, its exit status and what it
//! printed on stderr, instead of interleaving with the harness's own output.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};

/// Why a host primitive (namespaces, nftables, loop mounts, signals, clocks) failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("mooncake-jepsen needs root (network namespaces, nftables, loop mounts); run it with sudo")]
    NotRoot,
    #[error("missing tools: {}", format_missing(.0))]
    MissingTools(Vec<MissingTool>),
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Command { cmd: String, status: ExitStatus, stderr: String },
    #[error("could not start `{cmd}`: {source}")]
    Spawn { cmd: String, source: io::Error },
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("invalid {what} {name:?}: {reason}")]
    InvalidName { what: &'static str, name: String, reason: &'static str },
    #[error("unknown host {0:?} (not part of this network)")]
    UnknownHost(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("sending {signal} to pid {pid} failed: {source}")]
    Signal { pid: u32, signal: &'static str, source: io::Error },
    #[error("libfaketime not found (looked at {}); install the Debian package `faketime`", format_paths(.searched))]
    FaketimeMissing { searched: Vec<PathBuf> },
    #[error("cleanup left things behind: {}", .0.join("; "))]
    Cleanup(Vec<String>),
}

impl HostError {
    /// Wraps an I/O error with a description of what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        HostError::Io { what: what.into(), source }
    }
}

/// A required tool that is not installed, and the Debian package providing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingTool {
    pub tool: &'static str,
    pub package: &'static str,
}

fn format_missing(missing: &[MissingTool]) -> String {
    let items: Vec<String> = missing.iter().map(|m| format!("`{}` (apt-get install {})", m.tool, m.package)).collect();
    items.join(", ")
}

fn format_paths(paths: &[PathBuf]) -> String {
    let items: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    items.join(", ")
}

/// The command line of `cmd`, for error messages and logs.
pub fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Runs `cmd` to completion with stdin closed; returns its stdout.
pub fn run(cmd: &mut Command) -> Result<String, HostError> {
    run_with_stdin(cmd, None)
}

/// Runs `cmd` to completion, feeding it `input` on stdin (if any); returns its stdout.
/// A non-zero exit becomes [`HostError::Command`] carrying the captured stderr.
pub fn run_with_stdin(cmd: &mut Command, input: Option<&str>) -> Result<String, HostError> {
    let line = describe(cmd);
    cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| HostError::Spawn { cmd: line.clone(), source })?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        // A write error (EPIPE) means the program exited early; its status and stderr say why.
        let _ = stdin.write_all(text.as_bytes());
    }
    let output = child.wait_with_output().map_err(|source| HostError::Spawn { cmd: line.clone(), source })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        Err(HostError::Command { cmd: line, status: output.status, stderr })
    }
}

/// Shorthand: runs `program args…` through [`run`].
pub fn run_args<I, S>(program: &str, args: I) -> Result<String, HostError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run(Command::new(program).args(args))
}
