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

    /// A fresh dir of this runner's; a discarded one is locked first, and
    /// a lock that cannot be taken fails the spawn: without it a host in
    /// another PID namespace, to whom the pid in the name is dead, could
    /// sweep a scratch in use.
    pub(crate) fn owned(
        dir: tempfile::TempDir,
        canonical: PathBuf,
        keep: bool,
    ) -> std::io::Result<Self> {
        let lock = if keep {
            None
        } else {
            let fd = lock_dir(&canonical, libc::LOCK_EX | libc::LOCK_NB)?.ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    "the fresh scratch dir is locked by someone else",
                )
            })?;
            // The dir locked is the one made: ours and 0700 (a sweep that
            // removed it meanwhile, and another user who made the name
            // again, would leave a dir that is neither).
            let st = rustix::fs::fstat(&fd)?;
            // SAFETY: geteuid cannot fail.
            let me = unsafe { libc::geteuid() };
            if st.st_uid != me || st.st_mode & 0o7777 != 0o700 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "the fresh scratch dir was replaced by one that is not this user's own",
                ));
            }
            Some(fd)
        };
        Ok(ScratchGuard {
            _lock: lock,
            path: canonical,
            owned: Some(dir),
            fresh: true,
            keep,
        })
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
            // `keep`: the dir is ours to remove from here on, by its
            // canonical path (no link in it to refuse), also if this try
            // fails (a later sweep comes back for it).
            let _ = dir.keep();
            if let Err(e) = crate::hostfs::remove_tree(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove scratch dir");
            }
        }
    }
}

/// How every fresh scratch dir's name starts; a discarded one's goes on
/// with its creator's pid, `-` and six random letters or digits
/// (`cordon-scratch-4242-Xy3aB9`), a kept one's with the random part only.
pub const SCRATCH_PREFIX: &str = "cordon-scratch-";

/// The most names one sweep removes (from all the dead scratches it finds
/// together): a planted tree of any size delays the sweep's thread by a
/// bounded amount of work, and the rest waits for the next process.
const SWEEP_BUDGET: u64 = 1_000_000;

/// The pid a discarded scratch's name carries, if `name` has exactly the
/// shape the spawner gives one.
fn scratch_pid(name: &[u8]) -> Option<libc::pid_t> {
    let rest = name.strip_prefix(SCRATCH_PREFIX.as_bytes())?;
    let dash = rest.iter().position(|&b| b == b'-')?;
    let (pid, random) = (&rest[..dash], &rest[dash + 1..]);
    if random.len() != 6 || !random.iter().all(u8::is_ascii_alphanumeric) {
        return None;
    }
    std::str::from_utf8(pid)
        .ok()?
        .parse::<libc::pid_t>()
        .ok()
        .filter(|p| *p > 0)
}

/// `dir` (a dir fd) `flock`ed with `how` (`LOCK_EX`, with `LOCK_NB` to
/// try): `Ok(None)` when someone else holds the lock.
fn lock_fd(
    dir: std::os::fd::OwnedFd,
    how: libc::c_int,
) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(dir.as_raw_fd(), how) } != 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(None)
        } else {
            Err(e)
        };
    }
    Ok(Some(dir))
}

/// `dir` opened (no link followed anywhere in it) and `flock`ed.
fn lock_dir(dir: &Path, how: libc::c_int) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    lock_fd(crate::hostfs::open_dir(dir)?, how)
}

/// Removes, once per process and `base`, the discarded scratch dirs in
/// `base` that nobody uses any more: a host killed before it could remove
/// its child's scratch (a SIGKILL, a power cut before `/tmp` is not a
/// tmpfs) leaves it behind, with whatever the sandbox wrote. Only real
/// dirs (not links) named exactly as the spawner names a discarded
/// scratch (`cordon-scratch-<pid>-` and six letters or digits) whose
/// `<pid>` is no live process here, that no live host holds `flock`ed
/// (its creator holds that lock while the child may use it: the pid alone
/// would not tell a host in another PID namespace sharing `base`), owned
/// by this user — or, for root, by a uid in `sandbox_uids`, the range the
/// backend gives a root host's sandboxes (tier landlock gives such a
/// scratch to the sandbox's uid while it runs). On a background thread,
/// off the spawn's path; the removal is iterative and bounded
/// ([`SWEEP_BUDGET`], `hostfs`), so no tree, however deep or wide, makes
/// it abort or run on.
pub(crate) fn sweep_dead_scratches(
    base: &Path,
    sandbox_uids: Option<std::ops::RangeInclusive<u32>>,
) {
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
        .spawn(move || sweep(&base, sandbox_uids));
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "no scratch sweep: cannot start its thread");
    }
}

/// One sweep of `base` (see [`sweep_dead_scratches`]); what it removed.
pub(crate) fn sweep(base: &Path, sandbox_uids: Option<std::ops::RangeInclusive<u32>>) -> usize {
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    // The base is the operator's (its own links resolved); what is in it
    // may be anyone's.
    let Ok(base_fd) = std::fs::canonicalize(base).and_then(|b| crate::hostfs::open_dir(&b)) else {
        return 0;
    };
    let Ok(mut entries) = rustix::io::fcntl_dupfd_cloexec(&base_fd, 0)
        .map_err(std::io::Error::from)
        .and_then(|fd| Ok(rustix::fs::Dir::new(fd)?))
    else {
        return 0;
    };
    let mut budget = crate::hostfs::Budget {
        entries: SWEEP_BUDGET,
    };
    let mut removed = 0;
    while let Some(Ok(entry)) = entries.read() {
        let name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
        let Some(pid) = scratch_pid(name.as_bytes()) else {
            continue;
        };
        // SAFETY: signal 0 only checks existence.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if alive {
            continue;
        }
        // Held until the removal is done: a host that reuses the name
        // meanwhile cannot lock it either.
        let Ok(Some(lock)) = crate::hostfs::open_dir_at(base_fd.as_fd(), &name)
            .and_then(|fd| lock_fd(fd, libc::LOCK_EX | libc::LOCK_NB))
        else {
            continue;
        };
        let Ok(st) = rustix::fs::fstat(&lock) else {
            continue;
        };
        let ours = st.st_uid == me
            || (me == 0
                && sandbox_uids
                    .as_ref()
                    .is_some_and(|r| r.contains(&st.st_uid)));
        if !ours {
            continue;
        }
        let shown = base.join(&name);
        match crate::hostfs::remove_tree_at(base_fd.as_fd(), &name, &mut budget) {
            Ok(()) => {
                removed += 1;
                tracing::info!(path = %shown.display(), "removed a scratch dir a killed host left behind")
            }
            Err(e) => {
                tracing::warn!(path = %shown.display(), error = %e, "could not remove a scratch dir a killed host left behind")
            }
        }
        drop(lock);
        if budget.entries == 0 {
            break;
        }
    }
    removed
}

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        self.remove();
    }
}
