//! [`Node`]: one child process of a local cluster (a master or a store
//! node) and how to start, stop and kill it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kind of a child process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Master,
    Store,
}

/// One child process and how to start it again.
pub struct Node {
    pub role: Role,
    pub id: u64,
    /// gRPC address of a master; transfer address of a store ("" until known).
    pub addr: String,
    pub http: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    pub(crate) bin: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) child: Option<Child>,
}

impl Node {
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub(crate) fn launch(&mut self) -> std::io::Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let filter = std::env::var("MOONCAKE_CHILD_LOG").unwrap_or_else(|_| "info,openraft=warn".into());
        let child = Command::new(&self.bin)
            .args(&self.args)
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| std::io::Error::new(e.kind(), format!("starting {}: {e}", self.bin.display())))?;
        self.child = Some(child);
        Ok(())
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Asks the process to stop (SIGTERM) and waits up to `grace`, then kills it.
    pub(crate) fn stop(&mut self, grace: Duration) {
        let Some(mut c) = self.child.take() else { return };
        // SAFETY: kill(2) with a pid we own and a valid signal number.
        unsafe {
            libc::kill(c.id() as i32, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < grace {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}
