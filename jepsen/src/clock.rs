//! Clock skew for one process through libfaketime (Debian package `faketime`).
//!
//! [`FakeClock::new`] prepares an offset file and the environment that makes a
//! program started with it (`LD_PRELOAD`) read its wall clock as the real
//! clock plus the offset in that file; [`FakeClock::set_offset`] changes the
//! offset while the program runs (`FAKETIME_NO_CACHE=1` makes libfaketime
//! re-read the file on every call).
//!
//! Only the wall clock is skewed: `DONT_FAKE_MONOTONIC=1` is always set,
//! because with a faked monotonic clock tokio programs hang in futex waits.
//! Monotonic-clock faults must be injected in-process.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::host::HostError;

/// Where Debian-like distributions install the library (multiarch first).
const LIBFAKETIME_CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/lib64/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// Name of the offset file inside the directory given to [`FakeClock::new`].
const OFFSET_FILE: &str = "faketime-offset";

/// The path of libfaketime, if installed.
pub fn find_libfaketime() -> Option<PathBuf> {
    LIBFAKETIME_CANDIDATES.iter().map(PathBuf::from).find(|p| p.is_file())
}

/// A skewable wall clock for one process. Keep it alive while the process runs.
#[derive(Debug, Clone)]
pub struct FakeClock {
    library: PathBuf,
    offset_file: PathBuf,
}

impl FakeClock {
    /// Creates `dir` (if needed) and an offset file in it with offset 0.
    /// Fails with [`HostError::FaketimeMissing`] if libfaketime is not
    /// installed: the caller should skip its clock-skew scenario.
    pub fn new(dir: &Path) -> Result<FakeClock, HostError> {
        let library = find_libfaketime().ok_or_else(|| HostError::FaketimeMissing {
            searched: LIBFAKETIME_CANDIDATES.iter().map(PathBuf::from).collect(),
        })?;
        fs::create_dir_all(dir).map_err(|e| HostError::io(format!("creating {}", dir.display()), e))?;
        let clock = FakeClock { library, offset_file: dir.join(OFFSET_FILE) };
        clock.set_offset(0)?;
        Ok(clock)
    }

    /// The environment variables to add to the skewed program's command.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("LD_PRELOAD", self.library.clone().into_os_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.offset_file.clone().into_os_string()),
            ("FAKETIME_NO_CACHE", OsString::from("1")),
            ("DONT_FAKE_MONOTONIC", OsString::from("1")),
        ]
    }

    /// Adds [`FakeClock::env`] to `cmd`.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.envs(self.env());
    }

    /// Sets the skew: the program's wall clock becomes real time + `secs`
    /// (negative: behind). Takes effect on the program's next clock read.
    pub fn set_offset(&self, secs: i64) -> Result<(), HostError> {
        // Written to a temporary file and renamed, so libfaketime never reads a half-written offset.
        let tmp = self.offset_file.with_extension("tmp");
        fs::write(&tmp, offset_spec(secs)).map_err(|e| HostError::io(format!("writing {}", tmp.display()), e))?;
        fs::rename(&tmp, &self.offset_file)
            .map_err(|e| HostError::io(format!("renaming {} to {}", tmp.display(), self.offset_file.display()), e))
    }

    /// The offset file (`FAKETIME_TIMESTAMP_FILE`).
    pub fn offset_file(&self) -> &Path {
        &self.offset_file
    }

    /// The libfaketime library preloaded into the program.
    pub fn library(&self) -> &Path {
        &self.library
    }
}

/// libfaketime's relative-offset syntax: "+5s", "-3s", "+0s".
fn offset_spec(secs: i64) -> String {
    if secs < 0 { format!("-{}s\n", secs.unsigned_abs()) } else { format!("+{secs}s\n") }
}

#[cfg(test)]
mod tests {
    use super::offset_spec;

    #[test]
    fn offset_spec_has_sign_and_unit() {
        assert_eq!(offset_spec(5), "+5s\n");
        assert_eq!(offset_spec(-3), "-3s\n");
        assert_eq!(offset_spec(0), "+0s\n");
        assert_eq!(offset_spec(i64::MIN), "-9223372036854775808s\n");
    }
}
