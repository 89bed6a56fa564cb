//! One uid (and gid) of its own for every sandbox of a root host.
//!
//! A sandbox that shares its uid with anything else on the host shares a
//! trust domain with it: every process of that uid may trace it, open its
//! `/proc/<pid>/{root,mem,environ}`, take its fds, enter its user
//! namespace, signal it, and use up the quotas the kernel keeps per uid
//! (pending signals, epoll watches, pipe buffers). So a root host gives
//! each sandbox a uid that nothing else has: one from a [`UidPool`] range
//! that no account, no subordinate-id range and no running process uses.
//!
//! **Allocation** ([`UidLease::acquire`]): the uids are tried in order
//! from a start that moves one uid on with every search, round the lowest
//! 64 of the range (the uid just released is the likeliest still to have
//! a zombie, and the lock dir then holds about 64 files); a uid is taken
//! when this process can hold an
//! exclusive `flock` on its file in the pool's lock dir (`/run/cordon/uids`
//! by default: root's own, 0700; the lock dies with its holder, so a
//! killed host leaves nothing locked) **and** the kernel knows no process
//! of that uid (`getpriority(PRIO_USER, uid)` fails with `ESRCH`: one
//! syscall that walks every task). The second test is what makes reuse
//! safe after a host was killed: its sandbox's processes, zombies
//! included, keep the uid busy until the last one is gone. The lease is
//! released when the sandbox's resources are dropped, which the runner
//! does only once every process of the sandbox is gone; its cgroup is then
//! empty. In tier namespaces nothing else of the uid outlives the
//! sandbox: its files on the host's disk are written through idmapped
//! mounts as the caller's (`mounts.rs`), its SysV IPC and message queues
//! die with its IPC namespace, its private scratch with its mount
//! namespace. In tier landlock (no namespaces) the fresh scratch dir is
//! owned by the sandbox's uid while it runs (`wrap.rs`); before its uid is
//! released the host hands the scratch back (its top dir chowned to the
//! caller) and removes it, and the uid stays leased for the host's life
//! if the handback fails. A host that is killed leaves that scratch, of
//! the uid, on disk, and its lock dies with it: so the scratch is
//! recorded in the uid's lock file before the uid gets it
//! ([`UidLease::record_scratch`]), and [`UidLease::acquire`] hands a
//! recorded one back to root before it gives the uid out again (a uid
//! whose leftover cannot be handed back is skipped).
//!
//! **Checks at start** ([`UidPool::check`], once per process and pool):
//! the range must not hold 0, the 16-bit ids (`nobody` and `(uid_t)-1`
//! included) or `(uid_t)-1`, no user or group of `/etc/passwd` or
//! `/etc/group`, and overlap no range of `/etc/subuid` or `/etc/subgid`.
//! Accounts served by other NSS sources (LDAP, SSSD) are not read.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The uids a root host gives its sandboxes, one each, and the directory
/// that records which are in use. See the crate's README for the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UidPool {
    first: u32,
    count: u32,
    lock_dir: PathBuf,
}

/// The environment variable `cordon` reads a pool's range from
/// (`FIRST-LAST`, inclusive).
pub const UID_RANGE_ENV: &str = "CORDON_UID_RANGE";

impl Default for UidPool {
    fn default() -> Self {
        UidPool {
            first: UidPool::DEFAULT_FIRST,
            count: UidPool::DEFAULT_COUNT,
            lock_dir: PathBuf::from(UidPool::DEFAULT_LOCK_DIR),
        }
    }
}

impl UidPool {
    /// The first uid of the default range: 2 000 000 000, inside the block
    /// systemd's `UIDS-GIDS.md` lists as unused (1879048192–2147352575),
    /// above shadow's default subordinate ranges (up to 600 100 000) and
    /// below 2³¹ (tools that take uids as signed numbers).
    pub const DEFAULT_FIRST: u32 = 2_000_000_000;
    /// The number of uids in the default range (so at most this many
    /// sandboxes at once on one host).
    pub const DEFAULT_COUNT: u32 = 65_536;
    /// Where the locks live by default: root's own, on a tmpfs that a
    /// reboot empties.
    pub const DEFAULT_LOCK_DIR: &'static str = "/run/cordon/uids";

    /// The pool of `count` uids from `first`, with the default lock dir.
    /// Refused: an empty range, one that wraps, and one holding a uid
    /// below 65536 (root, system and 16-bit ids, `nobody`) or
    /// `(uid_t)-1`.
    pub fn new(first: u32, count: u32) -> Result<UidPool, String> {
        let last = first
            .checked_add(count.checked_sub(1).ok_or("a uid range cannot be empty")?)
            .ok_or_else(|| format!("the uid range {first}+{count} goes past 2^32"))?;
        if first < 65_536 {
            return Err(format!(
                "the uid range {first}-{last} holds ids below 65536 (root, system and \
                 16-bit ids, nobody): start it at 65536 or above"
            ));
        }
        if last == u32::MAX {
            return Err(format!(
                "the uid range {first}-{last} holds {} ((uid_t)-1, which means \"no change\" \
                 to the kernel): end it below",
                u32::MAX
            ));
        }
        Ok(UidPool {
            first,
            count,
            lock_dir: PathBuf::from(UidPool::DEFAULT_LOCK_DIR),
        })
    }

    /// Parses `FIRST-LAST` (inclusive, decimal), as in
    /// [`UID_RANGE_ENV`].
    pub fn parse(range: &str) -> Result<UidPool, String> {
        let bad =
            || format!("`{range}` is not a uid range FIRST-LAST (e.g. 2000000000-2000065535)");
        let (a, b) = range.trim().split_once('-').ok_or_else(bad)?;
        let first: u32 = a.trim().parse().map_err(|_| bad())?;
        let last: u32 = b.trim().parse().map_err(|_| bad())?;
        if last < first {
            return Err(format!("the uid range `{range}` ends before it starts"));
        }
        UidPool::new(first, last - first + 1)
    }

    /// The pool [`UID_RANGE_ENV`] names, or the default when it is unset.
    pub fn from_env() -> Result<UidPool, String> {
        match std::env::var(UID_RANGE_ENV) {
            Ok(v) => UidPool::parse(&v).map_err(|e| format!("{UID_RANGE_ENV}: {e}")),
            Err(std::env::VarError::NotPresent) => Ok(UidPool::default()),
            Err(e) => Err(format!("{UID_RANGE_ENV}: {e}")),
        }
    }

    /// The same range, recorded in another lock dir (an absolute path; it
    /// is created 0700 if missing, and must be root's and writable by no
    /// one else, as must every directory above it). Every cordon of a host
    /// that uses the same range must use the same lock dir.
    pub fn with_lock_dir(mut self, dir: impl Into<PathBuf>) -> UidPool {
        self.lock_dir = dir.into();
        self
    }

    /// The first uid.
    pub fn first(&self) -> u32 {
        self.first
    }

    /// The last uid (inclusive).
    pub fn last(&self) -> u32 {
        self.first + (self.count - 1)
    }

    /// The lock dir.
    pub fn lock_dir(&self) -> &Path {
        &self.lock_dir
    }

    /// Whether sandboxes can have uids from this pool on this host: the
    /// range passes [`UidPool::check`] and the lock dir can be used.
    pub(crate) fn usable(&self) -> Result<(), String> {
        self.check()?;
        lock_dir(&self.lock_dir).map(|_| ())
    }

    fn contains(&self, id: u32) -> bool {
        (self.first..=self.last()).contains(&id)
    }

    /// Checks the range against the host's accounts and subordinate ids
    /// (once per process and pool; see the module docs).
    pub(crate) fn check(&self) -> Result<(), String> {
        static CHECKED: Mutex<Vec<(UidPool, Result<(), String>)>> = Mutex::new(Vec::new());
        let mut done = CHECKED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, r)) = done.iter().find(|(p, _)| p == self) {
            return r.clone();
        }
        let r = self.check_files(Path::new("/etc"));
        done.push((self.clone(), r.clone()));
        r
    }

    /// [`UidPool::check`] against the files under `etc`.
    fn check_files(&self, etc: &Path) -> Result<(), String> {
        let range = format!("{}-{}", self.first, self.last());
        let fix = format!("pick another range ({UID_RANGE_ENV}=FIRST-LAST)");
        for (file, what) in [("passwd", "user"), ("group", "group")] {
            let path = etc.join(file);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for line in text.lines() {
                let mut f = line.split(':');
                let (Some(name), Some(_), Some(id)) = (f.next(), f.next(), f.next()) else {
                    continue;
                };
                if let Ok(id) = id.trim().parse::<u32>() {
                    if self.contains(id) {
                        return Err(format!(
                            "the sandbox uid range {range} holds {what} `{name}` ({id}) of {}: \
                             a sandbox would share its id; {fix}",
                            path.display()
                        ));
                    }
                }
            }
        }
        for file in ["subuid", "subgid"] {
            let path = etc.join(file);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for line in text.lines() {
                let mut f = line.split(':');
                let (Some(owner), Some(start), Some(count)) = (f.next(), f.next(), f.next()) else {
                    continue;
                };
                let (Ok(start), Ok(count)) =
                    (start.trim().parse::<u64>(), count.trim().parse::<u64>())
                else {
                    continue;
                };
                let (lo, hi) = (u64::from(self.first), u64::from(self.last()));
                if count > 0 && start <= hi && start + count > lo {
                    return Err(format!(
                        "the sandbox uid range {range} overlaps `{owner}`'s subordinate ids \
                         {start}-{} in {}: that user's containers could run as a sandbox's \
                         uid; {fix}",
                        start + count - 1,
                        path.display()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The uids this process holds now (a lock is per open file, so this
/// process could otherwise take its own uid twice).
static HELD: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// One sandbox's uid, held until dropped.
#[derive(Debug)]
pub(crate) struct UidLease {
    uid: u32,
    /// The locked file; closing it releases the lock.
    _lock: OwnedFd,
}

impl UidLease {
    /// The first uid of `pool` from this search's start (module docs) that
    /// no other holder has locked and no process has. An error says why
    /// none could be taken.
    pub(crate) fn acquire(pool: &UidPool) -> Result<UidLease, String> {
        pool.check()?;
        let dir = lock_dir(&pool.lock_dir)?;
        let mut busy_processes = 0u32;
        // Each search starts one uid further into the lowest WINDOW of the
        // range, wrapping: the uid just released is the likeliest to have
        // a zombie left for a moment, and each busy uid costs a walk of
        // every task. Bounded, so the lock dir holds about WINDOW files,
        // not one per uid of the range.
        const WINDOW: u32 = 64;
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let offset =
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % WINDOW.min(pool.count);
        let start = pool.first + offset;
        for uid in (start..=pool.last()).chain(pool.first..start) {
            if HELD
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&uid)
            {
                continue;
            }
            let name = CString::new(uid.to_string()).expect("digits");
            // SAFETY: openat on our dir fd and a NUL-terminated name.
            let fd = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if fd < 0 {
                return Err(format!(
                    "cannot open the lock of uid {uid} in {}: {}",
                    pool.lock_dir.display(),
                    std::io::Error::last_os_error()
                ));
            }
            // SAFETY: a fresh fd we own.
            let lock = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: flock on our fd.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                continue;
            }
            if process_of_uid_exists(uid) {
                busy_processes += 1;
                continue;
            }
            // A scratch an earlier holder was given and never handed back
            // (its host was killed): handed to root first, wherever it is;
            // a uid whose leftover cannot be is not free.
            if let Err(e) = reclaim_recorded_scratch(&lock, uid) {
                tracing::warn!(uid, error = %e, "a sandbox uid's leftover scratch cannot be handed back: the uid is skipped");
                busy_processes += 1;
                continue;
            }
            let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
            if held.contains(&uid) {
                continue;
            }
            held.push(uid);
            return Ok(UidLease { uid, _lock: lock });
        }
        Err(format!(
            "no free sandbox uid in {}-{} ({} in use by other sandboxes{}): wait for \
             sandboxes to end, or give cordon a larger range ({UID_RANGE_ENV}=FIRST-LAST)",
            pool.first,
            pool.last(),
            pool.count - busy_processes,
            if busy_processes > 0 {
                format!(", {busy_processes} held by processes that no lock names")
            } else {
                String::new()
            }
        ))
    }

    /// The uid (also the sandbox's gid).
    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }

    /// Records in the uid's lock file (root's own dir) that `scratch` is
    /// given to the uid, before it is: if the host is killed before the
    /// handback, the next holder's [`acquire`](Self::acquire) hands it
    /// back first, wherever it is.
    pub(crate) fn record_scratch(&self, scratch: &Path) -> std::io::Result<()> {
        rustix::fs::ftruncate(&self._lock, 0)?;
        let bytes = scratch.as_os_str().as_bytes();
        if rustix::io::pwrite(&self._lock, bytes, 0)? != bytes.len() {
            return Err(std::io::Error::other("short write to the uid's lock file"));
        }
        Ok(())
    }

    /// The recorded scratch was handed back.
    pub(crate) fn clear_scratch(&self) {
        let _ = rustix::fs::ftruncate(&self._lock, 0);
    }
}

/// Hands the scratch recorded in a uid's lock file back to root (if it is
/// still there and the uid's) and clears the record.
fn reclaim_recorded_scratch(lock: &OwnedFd, uid: u32) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::io::pread(lock, &mut buf, 0)?;
    if n == 0 {
        return Ok(());
    }
    let path = Path::new(std::ffi::OsStr::from_bytes(&buf[..n]));
    cordon_core::hostfs::hand_over_dir(path, uid, (0, 0))?;
    rustix::fs::ftruncate(lock, 0)?;
    Ok(())
}

impl Drop for UidLease {
    fn drop(&mut self) {
        HELD.lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&u| u != self.uid);
        // The lock goes with the fd.
    }
}

/// Whether the kernel knows a task (thread, zombie) whose real uid is
/// `uid`, in this process's PID namespace: `getpriority(PRIO_USER)` walks
/// every task and fails with `ESRCH` when none matches.
pub(crate) fn process_of_uid_exists(uid: u32) -> bool {
    // SAFETY: getpriority on integers; the raw syscall returns 20 - nice
    // or fails.
    let r = unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_USER, uid) };
    !(r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
}

/// The lock dir, opened once per process per path: created 0700 where
/// missing, every component a real directory owned by root and writable
/// by no one else (as the report cache checks its dir).
fn lock_dir(path: &Path) -> Result<&'static OwnedFd, String> {
    static DIRS: Mutex<Vec<(PathBuf, &'static OwnedFd)>> = Mutex::new(Vec::new());
    let mut dirs = DIRS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, fd)) = dirs.iter().find(|(p, _)| p == path) {
        return Ok(fd);
    }
    let fd: &'static OwnedFd = Box::leak(Box::new(open_lock_dir(path)?));
    dirs.push((path.to_path_buf(), fd));
    Ok(fd)
}

fn open_lock_dir(path: &Path) -> Result<OwnedFd, String> {
    use std::path::Component;
    let refuse = |why: String| {
        format!(
            "cannot use {} as the sandbox uids' lock dir: {why}",
            path.display()
        )
    };
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(refuse("it must be an absolute path without `..`".into()));
    }
    // SAFETY: open of a static path.
    let root = unsafe {
        libc::open(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if root < 0 {
        return Err(refuse(std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: a fresh fd we own.
    let mut dir = unsafe { OwnedFd::from_raw_fd(root) };
    check_dir(&dir, Path::new("/")).map_err(refuse)?;
    let mut at = PathBuf::from("/");
    for c in path.components().skip(1) {
        let Component::Normal(name) = c else { continue };
        at.push(name);
        let cname = CString::new(name.as_bytes()).map_err(|_| refuse("a NUL byte".into()))?;
        // SAFETY: mkdirat/openat on our dir fd and a NUL-terminated name.
        let fd = unsafe {
            if libc::mkdirat(dir.as_raw_fd(), cname.as_ptr(), 0o700) != 0
                && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
            {
                return Err(refuse(format!(
                    "cannot create {}: {}",
                    at.display(),
                    std::io::Error::last_os_error()
                )));
            }
            libc::openat(
                dir.as_raw_fd(),
                cname.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(refuse(format!(
                "cannot open {} (not a directory, or a symlink): {}",
                at.display(),
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: a fresh fd we own.
        dir = unsafe { OwnedFd::from_raw_fd(fd) };
        check_dir(&dir, &at).map_err(refuse)?;
    }
    // Locks need a descriptor that can be read: reopen the last one.
    // SAFETY: openat of "." under our O_PATH fd.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(refuse(std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A directory on the way to the lock dir: root's, and not writable by
/// group or others unless sticky (like `/tmp`, where only its owner can
/// replace an entry).
fn check_dir(fd: &OwnedFd, path: &Path) -> Result<(), String> {
    // SAFETY: fstat into a zeroed struct on our fd.
    let st = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(format!(
                "cannot stat {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        st
    };
    if st.st_uid != 0 {
        return Err(format!(
            "{} is owned by uid {}, not root",
            path.display(),
            st.st_uid
        ));
    }
    if st.st_mode & 0o022 != 0 && st.st_mode & libc::S_ISVTX == 0 {
        return Err(format!(
            "{} is writable by group or others (mode {:o})",
            path.display(),
            st.st_mode & 0o7777
        ));
    }
    Ok(())
}

/// The pool as `host_facts` states it.
pub(crate) fn describe(pool: &UidPool) -> String {
    format!(
        "{}-{} (one per sandbox, locked in {})",
        pool.first,
        pool.last(),
        pool.lock_dir.display()
    )
}

/// The process-wide default pool of `cordon`-style callers, read from
/// [`UID_RANGE_ENV`] once.
pub(crate) fn env_pool() -> &'static Result<UidPool, String> {
    static POOL: OnceLock<Result<UidPool, String>> = OnceLock::new();
    POOL.get_or_init(UidPool::from_env)
}

mod ids;
pub(crate) use ids::SandboxIds;

#[cfg(test)]
mod tests;
