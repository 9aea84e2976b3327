//! Pids of every process the harness started, so a Ctrl-C or a panic can
//! still kill them before the namespaces are removed.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

static PIDS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

pub fn track(pid: u32) {
    PIDS.lock().unwrap_or_else(PoisonError::into_inner).insert(pid);
}

pub fn untrack(pid: u32) {
    PIDS.lock().unwrap_or_else(PoisonError::into_inner).remove(&pid);
}

/// SIGCONT then SIGKILL to every tracked process (best effort).
pub fn kill_all() {
    let pids: Vec<u32> = PIDS.lock().unwrap_or_else(PoisonError::into_inner).iter().copied().collect();
    for pid in pids {
        let _ = crate::faults::resume(pid);
        let _ = crate::faults::kill9(pid);
    }
}

/// Lazily unmounts every filesystem mounted below `root` and detaches its
/// loop device (Ctrl-C path: the normal path uses `LoopFs::destroy`).
pub fn unmount_all_under(root: &std::path::Path) {
    let Ok(root) = std::fs::canonicalize(root) else { return };
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else { return };
    for line in mounts.lines() {
        let mut it = line.split_whitespace();
        let (Some(dev), Some(mnt)) = (it.next(), it.next()) else { continue };
        if std::path::Path::new(mnt).starts_with(&root) {
            let _ = std::process::Command::new("umount").args(["-l", mnt]).status();
            if dev.starts_with("/dev/loop") {
                let _ = std::process::Command::new("losetup").args(["-d", dev]).status();
            }
        }
    }
}
