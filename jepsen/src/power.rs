//! Power loss for one node's data directory: [`LoopFs`], an XFS filesystem in
//! a sparse image file, attached to a loop device and mounted where the node
//! keeps its data.
//!
//! [`LoopFs::power_cut`] shuts the filesystem down without flushing its log
//! (`FS_IOC_SHUTDOWN` with `XFS_FSOP_GOING_FLAGS_NOLOGFLUSH`), unmounts it and
//! mounts it again: XFS log recovery then brings back what was fsynced, while
//! un-fsynced writes (data still in the page cache, file tails, metadata only
//! in the in-memory log) are gone, as after a real power cut. A plain
//! `kill -9` loses nothing the kernel already has; this does.
//!
//! **The caller must SIGKILL every process using the filesystem first**
//! ([`crate::faults::kill9`]): a live process would see I/O errors from the
//! shut-down filesystem and keep it busy.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::host::{self, HostError};

/// `FS_IOC_SHUTDOWN` = `_IOR('X', 125, __u32)` (also `EXT4_IOC_SHUTDOWN`);
/// the libc crate does not export it.
const FS_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587D;

/// `XFS_FSOP_GOING_FLAGS_NOLOGFLUSH`: shut down without writing the in-memory
/// log to disk, i.e. lose everything not yet durable, as after a power cut
/// (flag 0 would flush data first, flag 1 only the log).
const XFS_FSOP_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

/// mkfs.xfs (xfsprogs ≥ 5.19) refuses filesystems of 300 MiB or less. The
/// image is sparse, so a bigger size costs no disk space until written.
pub const MIN_XFS_BYTES: u64 = 300 * 1024 * 1024 + 1;

/// The file [`LoopFs::fill`] writes to fill the disk.
const FILLER: &str = "disk-full-filler";

/// A comfortable default image size for one node's data directory.
pub const DEFAULT_IMAGE_BYTES: u64 = 512 * 1024 * 1024;

/// A loop-mounted XFS image. Dropping it unmounts it, detaches the loop device
/// and removes the image (see [`LoopFs::destroy`]).
#[derive(Debug)]
pub struct LoopFs {
    image: PathBuf,
    mountpoint: PathBuf,
    device: Option<PathBuf>,
    mounted: bool,
    created_mountpoint: bool,
}

impl LoopFs {
    /// Creates a sparse image of `size_bytes` at `image_path` (replacing a
    /// leftover of a crashed run, see [`LoopFs::cleanup_leftovers`]), makes an
    /// XFS filesystem in it, attaches it to a free loop device and mounts it
    /// at `mountpoint` (created if missing).
    pub fn create(image_path: &Path, size_bytes: u64, mountpoint: &Path) -> Result<LoopFs, HostError> {
        if size_bytes < MIN_XFS_BYTES {
            return Err(HostError::InvalidArgument(format!(
                "XFS image of {size_bytes} bytes is too small; mkfs.xfs needs at least {MIN_XFS_BYTES}"
            )));
        }
        LoopFs::cleanup_leftovers(image_path, mountpoint)?;
        // From here on, Drop undoes whatever was done if a later step fails.
        let mut fs = LoopFs {
            image: image_path.to_path_buf(),
            mountpoint: mountpoint.to_path_buf(),
            device: None,
            mounted: false,
            created_mountpoint: false,
        };
        let file =
            File::create(image_path).map_err(|e| HostError::io(format!("creating {}", image_path.display()), e))?;
        file.set_len(size_bytes).map_err(|e| HostError::io(format!("sizing {}", image_path.display()), e))?;
        drop(file);
        host::run(Command::new("mkfs.xfs").arg("-q").arg("-f").arg(image_path))?;
        if !mountpoint.exists() {
            fs::create_dir_all(mountpoint)
                .map_err(|e| HostError::io(format!("creating {}", mountpoint.display()), e))?;
            fs.created_mountpoint = true;
        }
        fs.attach()?;
        fs.mount()?;
        Ok(fs)
    }

    /// The mounted directory.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The image file.
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// The loop device currently backing the mount, if attached.
    pub fn device(&self) -> Option<&Path> {
        self.device.as_deref()
    }

    /// Fills the filesystem: writes a filler file in the mounted directory
    /// until the disk is full (ENOSPC). Returns the bytes written.
    pub fn fill(&self) -> Result<u64, HostError> {
        use std::io::Write;
        let path = self.mountpoint.join(FILLER);
        let mut f = File::create(&path).map_err(|e| HostError::io(format!("create {}", path.display()), e))?;
        let chunk = vec![0u8; 1 << 20];
        let mut written = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => return Err(HostError::io(format!("write {}", path.display()), e)),
            }
        }
        // On disk, not only in the page cache: the space is really gone.
        match f.sync_all() {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {}
            Err(e) => return Err(HostError::io(format!("sync {}", path.display()), e)),
        }
        Ok(written)
    }

    /// Frees what [`LoopFs::fill`] took.
    pub fn unfill(&self) -> Result<(), HostError> {
        let path = self.mountpoint.join(FILLER);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(HostError::io(format!("remove {}", path.display()), e)),
        }
    }

    /// Simulates a power cut: shuts the filesystem down without flushing its
    /// log, unmounts it, and mounts it again (log recovery runs). Afterwards
    /// fsynced data is present and un-fsynced writes are gone.
    ///
    /// SIGKILL (and reap) every process using the filesystem before calling.
    /// The remount uses a fresh loop device and `-o nouuid`, so it works even
    /// if something kept the shut-down superblock alive (a lazy unmount).
    pub fn power_cut(&mut self) -> Result<(), HostError> {
        if !self.mounted {
            return Err(HostError::InvalidArgument(format!("{} is not mounted", self.mountpoint.display())));
        }
        self.shutdown()?;
        self.unmount()?;
        self.detach()?;
        self.attach()?;
        self.mount()
    }

    /// Unmounts, detaches the loop device, removes the image and the
    /// mountpoint directory if this created it. Idempotent; reports (and
    /// logs) what could not be removed.
    pub fn destroy(&mut self) -> Result<(), HostError> {
        let mut failures = Vec::new();
        if self.mounted
            && let Err(e) = self.unmount()
        {
            failures.push(e.to_string());
        }
        if let Err(e) = self.detach() {
            failures.push(e.to_string());
        }
        match fs::remove_file(&self.image) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                failures.push(format!("removing {}: {e}", self.image.display()));
            }
            _ => {}
        }
        if self.created_mountpoint && !self.mounted {
            // Only if empty: never delete data that is not ours.
            match fs::remove_dir(&self.mountpoint) {
                Ok(()) => self.created_mountpoint = false,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.created_mountpoint = false,
                Err(e) => failures.push(format!("removing {}: {e}", self.mountpoint.display())),
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            for failure in &failures {
                tracing::warn!(image = %self.image.display(), "loop fs cleanup: {failure}");
            }
            Err(HostError::Cleanup(failures))
        }
    }

    /// Removes what a crashed run may have left for this image: unmounts
    /// `mountpoint` if mounted, detaches every loop device backed by
    /// `image_path`, and deletes the image.
    pub fn cleanup_leftovers(image_path: &Path, mountpoint: &Path) -> Result<(), HostError> {
        if is_mounted(mountpoint)? {
            unmount_path(mountpoint)?;
        }
        if image_path.exists() {
            let listing = host::run(Command::new("losetup").arg("--associated").arg(image_path))?;
            // Lines look like "/dev/loop3: []: (/path/to/image)".
            for device in listing.lines().filter_map(|line| line.split(':').next()).filter(|d| !d.is_empty()) {
                host::run(Command::new("losetup").arg("--detach").arg(device))?;
            }
            fs::remove_file(image_path).map_err(|e| HostError::io(format!("removing {}", image_path.display()), e))?;
        }
        Ok(())
    }

    fn shutdown(&self) -> Result<(), HostError> {
        let dir = OpenOptions::new()
            .read(true)
            .open(&self.mountpoint)
            .map_err(|e| HostError::io(format!("opening {}", self.mountpoint.display()), e))?;
        let flags: u32 = XFS_FSOP_GOING_FLAGS_NOLOGFLUSH;
        // SAFETY: FS_IOC_SHUTDOWN reads one u32 through the pointer, which
        // points to a live local; the fd stays open for the call.
        let rc = unsafe { libc::ioctl(dir.as_raw_fd(), FS_IOC_SHUTDOWN as _, &flags as *const u32) };
        if rc == 0 {
            Ok(())
        } else {
            let what = format!("FS_IOC_SHUTDOWN on {}", self.mountpoint.display());
            Err(HostError::io(what, std::io::Error::last_os_error()))
        }
    }

    fn attach(&mut self) -> Result<(), HostError> {
        let out = host::run(Command::new("losetup").arg("--find").arg("--show").arg(&self.image))?;
        let device = out.trim();
        if device.is_empty() {
            return Err(HostError::InvalidArgument(format!("losetup printed no device for {}", self.image.display())));
        }
        self.device = Some(PathBuf::from(device));
        Ok(())
    }

    fn detach(&mut self) -> Result<(), HostError> {
        if let Some(device) = &self.device {
            host::run(Command::new("losetup").arg("--detach").arg(device))?;
            self.device = None;
        }
        Ok(())
    }

    fn mount(&mut self) -> Result<(), HostError> {
        let device =
            self.device.as_ref().ok_or_else(|| HostError::InvalidArgument("no loop device attached".into()))?;
        // nouuid: a superblock of the same filesystem kept alive elsewhere
        // (lazy unmount) would otherwise make XFS refuse a duplicate UUID.
        host::run(Command::new("mount").args(["-t", "xfs", "-o", "nouuid"]).arg(device).arg(&self.mountpoint))?;
        self.mounted = true;
        Ok(())
    }

    fn unmount(&mut self) -> Result<(), HostError> {
        unmount_path(&self.mountpoint)?;
        self.mounted = false;
        Ok(())
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // destroy() already logged what it could not remove.
        let _ = self.destroy();
    }
}

/// `umount`, falling back to a lazy `umount -l` if the mount is busy.
fn unmount_path(mountpoint: &Path) -> Result<(), HostError> {
    match host::run(Command::new("umount").arg(mountpoint)) {
        Ok(_) => Ok(()),
        Err(first) => {
            tracing::warn!("{first}; unmounting lazily");
            host::run(Command::new("umount").arg("-l").arg(mountpoint)).map(|_| ())
        }
    }
}

/// Whether `path` is a mount point in this process's mount namespace.
fn is_mounted(path: &Path) -> Result<bool, HostError> {
    let Ok(canonical) = path.canonicalize() else {
        return Ok(false);
    };
    let info =
        fs::read_to_string("/proc/self/mountinfo").map_err(|e| HostError::io("reading /proc/self/mountinfo", e))?;
    // Field 5 is the mount point, with space, tab, newline and backslash octal-escaped.
    Ok(info.lines().filter_map(|line| line.split(' ').nth(4)).any(|field| Path::new(&unescape(field)) == canonical))
}

fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(pos) = rest.find('\\') {
        out.push_str(&rest[..pos]);
        let code = rest.get(pos + 1..pos + 4).and_then(|oct| u8::from_str_radix(oct, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[pos + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[pos + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::unescape;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/odd\\"), "/odd\\");
    }
}
