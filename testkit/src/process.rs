//! [`KillOnDrop`]: a process a test started by hand, killed and reaped when
//! the test ends, whether it passed or panicked.

use std::process::Child;

/// A child process that is killed and waited for when dropped, so a failed
/// test leaves no server running (a leaked child also holds the test's
/// stdout open and keeps `cargo test | ...` from ending).
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// The child, for `try_wait`, its pipes and the like.
    pub fn child(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropping_kills_and_reaps_the_child() {
        let child = std::process::Command::new("sleep").arg("600").spawn().expect("spawn sleep");
        let pid = child.id();
        drop(KillOnDrop(child));
        // Reaped: no process (not even a zombie) has the pid any more.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} still exists");
    }
}
