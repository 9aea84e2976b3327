//! Preconditions of the chaos harness, checked before it touches the host:
//! [`require_root`] and [`check_tools`].
//!
//! The harness creates network namespaces, nftables tables, loop devices and
//! mounts, so it must run as root and needs a few system tools. Both checks
//! fail with a message telling the operator what to do, instead of a cryptic
//! `ip` or `mount` error halfway through a run.

use std::env;
use std::path::{Path, PathBuf};

use crate::host::{HostError, MissingTool};

/// Tools the harness cannot run without, with the Debian package providing each.
pub const REQUIRED_TOOLS: &[(&str, &str)] =
    &[("ip", "iproute2"), ("nft", "nftables"), ("mkfs.xfs", "xfsprogs"), ("mount", "mount"), ("losetup", "mount")];

/// Directories searched in addition to `$PATH`: `sudo` and minimal
/// environments often leave the sbin directories (where `ip`, `nft`,
/// `losetup` live) out of `$PATH`.
const EXTRA_TOOL_DIRS: &[&str] = &["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"];

/// Fails with [`HostError::NotRoot`] unless the effective user is root.
pub fn require_root() -> Result<(), HostError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid == 0 { Ok(()) } else { Err(HostError::NotRoot) }
}

/// Fails with [`HostError::MissingTools`] naming every missing tool of
/// [`REQUIRED_TOOLS`] and the package to install. `faketime` is optional:
/// see [`crate::clock::find_libfaketime`].
pub fn check_tools() -> Result<(), HostError> {
    let missing: Vec<MissingTool> = REQUIRED_TOOLS
        .iter()
        .filter(|(tool, _)| find_tool(tool).is_none())
        .map(|&(tool, package)| MissingTool { tool, package })
        .collect();
    if missing.is_empty() { Ok(()) } else { Err(HostError::MissingTools(missing)) }
}

/// The path of executable `name` in `$PATH` or the usual system directories.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path_dirs: Vec<PathBuf> = env::var_os("PATH").map(|p| env::split_paths(&p).collect()).unwrap_or_default();
    path_dirs
        .into_iter()
        .chain(EXTRA_TOOL_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_name_their_packages() {
        let err = HostError::MissingTools(vec![MissingTool { tool: "nft", package: "nftables" }]);
        assert_eq!(err.to_string(), "missing tools: `nft` (apt-get install nftables)");
        assert!(find_tool("sh").is_some());
        assert!(find_tool("surely-not-a-tool-mcj").is_none());
    }
}
