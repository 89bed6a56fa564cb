//! A child's scratch dir: made for it (or the caller's, kept), and
//! removed with the child unless kept.

use std::path::{Path, PathBuf};

/// The scratch directory of one child; removed on drop unless kept.
#[derive(Debug)]
pub(crate) struct ScratchGuard {
    path: PathBuf,
    owned: Option<tempfile::TempDir>,
    fresh: bool,
    /// A fresh dir the caller keeps: it persists once the child is
    /// launched ([`launched`](Self::launched)); a spawn that fails before
    /// removes it (nothing ran in it).
    keep: bool,
    /// A discarded scratch's dir, open and `flock`ed while the child may
    /// use it: a sweep skips a dir it cannot lock ([`sweep_dead_scratches`]),
    /// which holds across PID namespaces where a pid does not.
    _lock: Option<std::os::fd::OwnedFd>,
}

impl ScratchGuard {
    pub(crate) fn borrowed(path: PathBuf) -> Self {
        ScratchGuard {
            path,
            owned: None,
            fresh: false,
            keep: false,
            _lock: None,
        }
    }

    /// A mount point the backend covers with a private filesystem in the
    /// sandbox: fresh for the child, nothing to remove on the host.
    pub(crate) fn private(mountpoint: PathBuf) -> Self {
        ScratchGuard {
            path: mountpoint,
            owned: None,
            fresh: true,
            keep: false,
            _lock: None,
        }
    }

    pub(crate) fn owned(dir: tempfile::TempDir, canonical: PathBuf, keep: bool) -> Self {
        ScratchGuard {
            _lock: if keep {
                None
            } else {
                lock_dir(dir.path(), libc::LOCK_EX).ok().flatten()
            },
            path: canonical,
            owned: Some(dir),
            fresh: true,
            keep,
        }
    }

    /// The child runs: a kept scratch is the caller's from now on.
    pub(crate) fn launched(&mut self) {
        if self.keep {
            if let Some(dir) = self.owned.take() {
                let _ = dir.keep();
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// True when the runner created the directory for this child.
    pub(crate) fn is_fresh(&self) -> bool {
        self.fresh
    }

    pub(crate) fn remove(&mut self) {
        if let Some(dir) = self.owned.take() {
            let path = dir.path().to_path_buf();
            // `keep`: the dir is ours to remove from here on, also if
            // the first try fails.
            let path_kept = dir.keep();
            if let Err(e) = remove_tree(&path_kept) {
                tracing::warn!(path = %path.display(), error = %e, "could not remove scratch dir");
            }
        }
    }
}

/// How every fresh scratch dir's name starts; a discarded one's goes on
/// with its creator's pid and `-` (`cordon-scratch-4242-Xy3…`), a kept
/// one's with the random part only.
pub(crate) const SCRATCH_PREFIX: &str = "cordon-scratch-";

/// Removes `dir` and everything under it, links not followed. The sandbox
/// may have left a dir it cannot be entered or emptied through (mode 0500,
/// say): it is the caller's (or root's) own, so each dir gets its owner's
/// rights back and the removal is tried once more.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    let first = std::fs::remove_dir_all(dir);
    // SAFETY: geteuid has no preconditions.
    if first.is_ok() || unsafe { libc::geteuid() } == 0 {
        // Root needs no permission bits, and must not chmod by path what
        // someone else may have planted.
        return first;
    }
    make_dirs_removable(dir);
    std::fs::remove_dir_all(dir)
}

/// `dir` opened (never through a link) and `flock`ed with `how`
/// (`LOCK_EX`, with `LOCK_NB` to try): `Ok(None)` when someone else holds
/// the lock; also the dir's owner for the caller's check.
fn lock_dir(dir: &Path, how: libc::c_int) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(f.as_raw_fd(), how) } != 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(Some(f.into()))
}

/// Removes, once per process and `base`, the discarded scratch dirs in
/// `base` that nobody uses any more: a host killed before it could remove
/// its child's scratch (a SIGKILL, a power cut before `/tmp` is not a
/// tmpfs) leaves it behind, with whatever the sandbox wrote. Only real
/// dirs (not links) named `cordon-scratch-<pid>-…` whose `<pid>` is no
/// live process here, that no live host holds `flock`ed (its creator
/// holds that lock while the child may use it: the pid alone would not
/// tell a host in another PID namespace sharing `base`), owned by this
/// user — or, for root, by root or by a uid above 65535, where the Linux
/// backend's sandbox uids are (its tier landlock gives a root host's
/// scratch to the sandbox's uid). On a background thread, off the spawn's
/// path: a huge or slow tree (a FUSE mount in a planted dir) delays only
/// the sweep.
pub(crate) fn sweep_dead_scratches(base: &Path) {
    static SWEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    {
        let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
        if swept.iter().any(|b| b == base) {
            return;
        }
        swept.push(base.to_path_buf());
    }
    let base = base.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("cordon-scratch-sweep".into())
        .spawn(move || sweep(&base));
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no scratch sweep: cannot start its thread");
    }
}

fn sweep(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<libc::pid_t>().ok())
            .filter(|pid| *pid > 0)
        else {
            continue;
        };
        // SAFETY: signal 0 only checks existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive {
            continue;
        }
        let path = entry.path();
        // Held until the removal is done: a host that reuses the name
        // meanwhile cannot lock it either.
        let Ok(Some(lock)) = lock_dir(&path, libc::LOCK_EX | libc::LOCK_NB) else {
            continue;
        };
        let Ok(meta) = std::fs::File::from(lock.try_clone().expect("dup")).metadata() else {
            continue;
        };
        let ours = meta.uid() == me || (me == 0 && meta.uid() > 65535);
        if meta.is_dir() && ours {
            match remove_tree(&path) {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "removed a scratch dir a killed host left behind")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "could not remove a scratch dir a killed host left behind")
                }
            }
        }
        drop(lock);
    }
}
/// Gives every dir under `dir` (itself included) `rwx` for its owner, on
/// its own fd (opened without following a link), so that a tree a sandbox
/// left can be removed.
fn make_dirs_removable(dir: &Path) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
    else {
        return;
    };
    let Ok(meta) = f.metadata() else { return };
    let _ = f.set_permissions(std::fs::Permissions::from_mode(
        (meta.permissions().mode() & 0o7777) | 0o700,
    ));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            make_dirs_removable(&entry.path());
        }
    }
}

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        self.remove();
    }
}
