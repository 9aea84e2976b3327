//! Storage failures the process cannot survive. After a failed `fdatasync`
//! the kernel may have dropped the dirty pages it could not write, and a
//! later sync can then report success for data that is gone: nothing this
//! process still holds in memory about its log may be trusted. Crash-only:
//! the process ends at once with one line naming the cause, and a restart
//! recovers from what is really on disk and from the leader.

use std::fmt::Display;

/// Exit status of a process whose storage failed (EX_IOERR).
pub const EXIT_STORAGE_FAILED: i32 = 74;

/// Ends the process: `op` failed with `error`.
pub fn storage_failed(op: &str, error: &dyn Display) -> ! {
    tracing::error!(op, error = %error, "storage failed; exiting");
    eprintln!(
        "mooncake: fatal: {op} failed: {error}. Exiting (status {EXIT_STORAGE_FAILED}): after a failed sync \
         the log in memory cannot be trusted. Fix the disk (full, read-only, failing) and restart; the node \
         recovers from its data dir and the leader, and the other masters keep serving meanwhile."
    );
    std::process::exit(EXIT_STORAGE_FAILED)
}
