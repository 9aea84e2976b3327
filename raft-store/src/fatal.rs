//! Failures the process cannot survive. After a failed `fdatasync` the
//! kernel may have dropped the dirty pages it could not write, and a later
//! sync can then report success for data that is gone: nothing this process
//! still holds in memory about its log may be trusted. A state machine that
//! finds its own state inconsistent (a range freed twice, bytes handed out
//! beyond a segment, a lock poisoned by a panic inside apply) must not
//! serve that state or build snapshots of it. Crash-only: the process ends
//! at once with one line naming the cause, and a restart recovers from what
//! is really on disk and from the leader.

use std::fmt::Display;
use std::io::Write;

/// Exit status of a process whose storage failed (EX_IOERR).
pub const EXIT_STORAGE_FAILED: i32 = 74;

/// Exit status of a process whose state machine found its own state
/// inconsistent (EX_SOFTWARE, as a master whose Raft core stopped).
pub const EXIT_INVARIANT_BROKEN: i32 = 70;

/// Ends the process: `op` failed with `error`.
pub fn storage_failed(op: &str, error: &dyn Display) -> ! {
    tracing::error!(op, error = %error, "storage failed; exiting");
    eprintln!(
        "mooncake: fatal: {op} failed: {error}. Exiting (status {EXIT_STORAGE_FAILED}): after a failed sync \
         the log in memory cannot be trusted. Fix the disk (full, read-only, failing) or the file descriptor \
         limit (ulimit -n) and restart; the node \
         recovers from its data dir and the leader, and the other masters keep serving meanwhile."
    );
    std::process::exit(EXIT_STORAGE_FAILED)
}

/// The line [`invariant_broken`] prints for `what`.
pub fn invariant_broken_line(what: &str) -> String {
    format!(
        "mooncake: fatal: the state machine found its own state inconsistent: {what}. Exiting (status \
         {EXIT_INVARIANT_BROKEN}) rather than serve or replicate it; a restart rebuilds the state from the last \
         snapshot, the log and the leader, and the other masters keep serving meanwhile. If it repeats at the \
         same log index, keep the data dir and report this line."
    )
}

/// Ends the process: the state machine broke its invariant `what`.
pub fn invariant_broken(what: &str) -> ! {
    tracing::error!(what, "state machine invariant broken; exiting");
    // Straight to the stderr stream, not through `eprintln!`: a test
    // harness capturing output would drop the line with the process.
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{}", invariant_broken_line(what));
    let _ = stderr.flush();
    std::process::exit(EXIT_INVARIANT_BROKEN)
}
