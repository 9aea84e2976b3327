//! [`find_binary`]: where the `mooncake` and `mooncake-master` binaries are.

use std::path::PathBuf;

/// Where the binaries are: `MOONCAKE_BIN_DIR`, else next to this executable,
/// else one level up (test executables live in `target/<profile>/deps`).
pub fn find_binary(name: &str) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("MOONCAKE_BIN_DIR") {
        return Ok(PathBuf::from(dir).join(name));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("executable has no directory")?;
    for candidate in [dir.join(name), dir.parent().map(|p| p.join(name)).unwrap_or_default()] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!("{name} not found next to {}; build it (cargo build --release --bin {name})", exe.display()))
}
