//! The per-boot conformance cache (behind `cordon run`, and for any
//! embedder: [`admit`]), trusted only where no other user could have
//! written it.
//!
//! Running P1–P7 before every spawn of a fresh process costs a fraction of
//! a second; a conforming report is cached for this boot, keyed by backend,
//! kernel release, Landlock ABI (or whatever the backend reports), uid,
//! boot id and the SHA-256 of the running binary (the one whose probes
//! ran). Hashing a 20 MB binary on every run
//! would cost more than the rest of `cordon run`, so the file also records
//! the binary's identity (device, inode, size and mtime: an upgrade either
//! replaces the file or rewrites it): while it is unchanged, the stored hash
//! is reused; otherwise the binary is hashed again. ctime is deliberately
//! not part of it: `cordon star run` hard-links the binary into the worker's
//! private dir, which changes ctime on every run. A cache file that is missing,
//! unreadable, malformed, for another key or not conforming is ignored and
//! the suite runs again.
//!
//! One backend's file keeps a report per variant of its key, up to
//! [`MAX_ENTRIES`] of this boot and binary: an operator who alternates
//! tiers (`--tier namespaces`, `--tier landlock`) or uid ranges changes the
//! backend's facts, and with one report per backend every switch would
//! replace the other's report and run the probes again.
//!
//! # Why a cached report can be trusted
//!
//! The cache decides whether untrusted code runs: a forged "conforms" report
//! for the `noop` backend would run a program unconfined. Whoever can write
//! the cache dir, or rename anything on the way to it, can forge one. So
//! every check is made on an open file descriptor, never on a path that can
//! be swapped between the check and the use:
//!
//! - **The dir.** Its path (`$XDG_CACHE_HOME/cordon`, else
//!   `$HOME/.cache/cordon`; symlinks resolved once, up front) is opened from
//!   `/` one component at a time, each with `openat(parent_fd, name,
//!   O_DIRECTORY|O_NOFOLLOW)` and checked with `fstat` on the new fd;
//!   missing components are created 0700. **Every** directory from `/` down
//!   is checked, not only those below `$HOME` or the cache root: whoever can
//!   write an ancestor can rename the whole subtree and put their own in its
//!   place, and the cache root can be anywhere (the reported attack used a
//!   shared `XDG_CACHE_HOME` under /tmp). An ancestor must be owned by root
//!   or by this user, and writable by nobody else unless it has the sticky
//!   bit (like `/tmp`: others then cannot rename or remove entries that are
//!   not theirs, and the next component is checked in turn). The cache dir
//!   itself must be owned by this user and writable by nobody else, sticky
//!   bit or not (anyone who may create entries in it may plant names).
//!   A refused dir costs one line on stderr and a probe run: no report is
//!   read from it or written to it.
//! - **The file** is opened relative to the dir fd with
//!   `O_NOFOLLOW|O_NONBLOCK`, then checked with `fstat` on that same fd (a
//!   regular file owned by this user, no group or other permission bits, at
//!   most [`MAX_CACHE_BYTES`]) and read from that fd.
//! - **No sandbox of the runner writes it.** [`admit`] adds the dir to
//!   [`RunnerConfig::protected`]: a grant or kept scratch that reaches it
//!   (`--rw ~`, say) is refused at spawn, or a program could plant a report.
//! - **Writing** creates a temp file with a random name, `O_CREAT|O_EXCL|
//!   O_NOFOLLOW`, mode 0600, relative to the dir fd, syncs it and
//!   `renameat`s it onto the cache name in the same dir fd.

use std::ffi::{CStr, CString, OsStr};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cordon_core::{
    ConformanceReport, ConformanceSuite, RunnerConfig, SandboxBackend, SandboxRunner,
    SandboxUnavailable,
};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The largest cache file that is read (a real one is a few KiB).
pub const MAX_CACHE_BYTES: u64 = 1 << 20;

/// How many reports (each for another key) one backend's file keeps.
pub const MAX_ENTRIES: usize = 8;

/// What a cached report is valid for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    /// The backend's name (`linux`, `macos`, `noop`).
    pub backend: String,
    /// `uname -r`.
    pub kernel_release: String,
    /// What the backend reports about the host (e.g. the Landlock ABI).
    pub backend_facts: std::collections::BTreeMap<String, String>,
    /// The effective uid the probes ran as.
    pub uid: u32,
    /// This boot's id: a reboot invalidates the report.
    pub boot_id: String,
    /// SHA-256 of cordon's own binary.
    pub exe_sha256: String,
    /// The confinement the host process itself runs under (an outer
    /// seccomp filter, no_new_privs, capabilities, cgroup): which checks
    /// can tell a sandbox from none depends on it, so a report made in
    /// one state is not reused in another.
    #[serde(default)]
    pub host_confinement: crate::host_state::HostConfinement,
}

/// What identifies cordon's binary on disk without reading it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExeIdentity {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_mtime` in nanoseconds.
    pub mtime_ns: i128,
}

impl ExeIdentity {
    fn of(path: &Path) -> std::io::Result<ExeIdentity> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path)?;
        Ok(ExeIdentity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }
}

impl CacheKey {
    /// The key for `backend` on this host. `known` is a previously hashed
    /// binary: its hash is reused when the identity still matches.
    pub fn for_backend(
        backend: &dyn SandboxBackend,
        known: Option<(&ExeIdentity, &str)>,
    ) -> std::io::Result<(CacheKey, ExeIdentity)> {
        let path = std::env::current_exe()?;
        let identity = ExeIdentity::of(&path)?;
        let exe_sha256 = match known {
            Some((id, hash)) if *id == identity => hash.to_string(),
            _ => hex::encode(sha2::Sha256::digest(std::fs::read(&path)?)),
        };
        let key = CacheKey {
            backend: backend.name().to_string(),
            kernel_release: cordon_core::kernel_release(),
            backend_facts: backend.host_facts(),
            uid: euid(),
            boot_id: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            exe_sha256,
            host_confinement: crate::host_state::HostConfinement::current(),
        };
        Ok((key, identity))
    }
}

#[derive(Serialize, Deserialize)]
struct CacheFile {
    key: CacheKey,
    exe: ExeIdentity,
    report: ConformanceReport,
}

/// How the last lookup went (for `-v` output and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// A valid conforming report was found and used.
    Hit,
    /// No usable report: the suite ran (and its report was stored if it conformed).
    Miss,
    /// No cache dir configured: the suite ran.
    Disabled,
    /// The cache dir is not private to this user: the suite ran, nothing
    /// stored. Says why in one line (show it to the user).
    Refused(String),
}

/// Admits `backend` through the standard suite (the probes it must pass:
/// P1–P7, and P8 if it claims the egress allowlist), answered from the
/// per-boot cache in [`default_dir`] when a trustworthy conforming report
/// is there (`recheck` runs the suite anyway); returns the runner, or why
/// not with the report, and how the cache was used. This is `cordon run`'s
/// gate, for embedders that start many short-lived processes: call it once
/// per process, not per spawn. Its sandboxes may not write the cache dir
/// ([`RunnerConfig::protected`]).
pub async fn admit(
    backend: Arc<dyn SandboxBackend>,
    recheck: bool,
    accept_unproven: &[cordon_core::ProbeId],
    mut config: RunnerConfig,
) -> (Result<SandboxRunner, SandboxUnavailable>, CacheOutcome) {
    let dir = default_dir();
    // No sandbox of this runner may write where this run, or a later one
    // with another environment, reads reports from.
    config
        .protected
        .extend(dir.iter().cloned().chain(other_dirs()));
    let mut suite = CachedSuite::new(
        crate::StandardSuite::new().accept_unproven(accept_unproven.to_vec()),
        dir,
        recheck,
    );
    suite.accept_unproven = accept_unproven.to_vec();
    let admitted = SandboxRunner::new(backend, &suite, config).await;
    let outcome = suite
        .outcome
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    tracing::info!(cache = ?outcome, admitted = admitted.is_ok(), "conformance gate");
    (admitted, outcome)
}

/// A suite that answers from the cache when it can.
pub struct CachedSuite<S> {
    /// The suite that runs on a miss.
    pub inner: S,
    /// The cache dir, as configured (checked on every run).
    pub dir: Option<PathBuf>,
    /// Ignore a cached report (it is still replaced by the new one).
    pub recheck: bool,
    /// How the last run went.
    pub outcome: std::sync::Mutex<CacheOutcome>,
    /// The unproven probes this run accepts: applied to a cached report as
    /// to a fresh one (acceptance is the caller's, not the report's).
    pub accept_unproven: Vec<cordon_core::ProbeId>,
}

impl<S> CachedSuite<S> {
    /// A cache in `dir` (none if `None`) in front of `inner`.
    pub fn new(inner: S, dir: Option<PathBuf>, recheck: bool) -> Self {
        CachedSuite {
            inner,
            dir,
            recheck,
            outcome: std::sync::Mutex::new(CacheOutcome::Disabled),
            accept_unproven: Vec::new(),
        }
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The cache file's name for `backend`; `None` for a name that is not a
/// plain file name (backend names are fixed words, this is a guard).
fn file_name(backend: &str) -> Option<CString> {
    let ok = !backend.is_empty()
        && backend
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then(|| CString::new(format!("conformance-{backend}.json")).ok())
        .flatten()
}

/// Mode bits as `u32`: `mode_t` is `u32` on Linux but `u16` on macOS.
#[allow(clippy::useless_conversion)]
fn bits(mode: libc::mode_t) -> u32 {
    u32::from(mode)
}

fn os_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn fstat(fd: BorrowedFd<'_>) -> std::io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` is an open descriptor and `st` points to writable memory
    // of the right size; fstat fills all of it on success.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(os_err());
    }
    // SAFETY: fstat returned 0, so the struct is initialised.
    Ok(unsafe { st.assume_init() })
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::c_uint,
) -> std::io::Result<OwnedFd> {
    // SAFETY: `dir` is open, `name` is NUL-terminated; `mode` is only read
    // with O_CREAT.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(os_err());
    }
    // SAFETY: openat returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Why a cache dir is not used. Displays as one line.
#[derive(Debug)]
pub struct Refused {
    /// The cache dir as configured.
    pub dir: PathBuf,
    /// What is wrong, naming the offending directory.
    pub why: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "not using the conformance cache in {:?}: {}; running the probes instead \
             (make it private to you, or set XDG_CACHE_HOME to a private dir)",
            self.dir, self.why
        )
    }
}

/// `dir` made absolute with symlinks resolved, as far as it exists; the
/// missing tail is appended as plain names (they are created later).
fn resolve(dir: &Path) -> Result<PathBuf, String> {
    if !dir.is_absolute() {
        return Err("the path is not absolute".into());
    }
    let mut existing = dir.to_path_buf();
    let mut missing = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(mut path) => {
                path.extend(missing.iter().rev());
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(name), Some(parent)) = (existing.file_name(), existing.parent()) else {
                    return Err(format!("cannot resolve {existing:?}"));
                };
                missing.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            Err(e) => return Err(format!("cannot resolve {existing:?}: {e}")),
        }
    }
}

/// Checks one directory on the way to the cache (see the module docs).
fn check_dir(st: &libc::stat, path: &Path, is_cache_dir: bool, me: u32) -> Result<(), String> {
    let owner = st.st_uid;
    let mode = bits(st.st_mode) & 0o7777;
    let sticky = mode & bits(libc::S_ISVTX) != 0;
    let others_write = mode & 0o022 != 0;
    if is_cache_dir {
        if owner != me {
            return Err(format!("{path:?} is owned by uid {owner}, not by uid {me}"));
        }
        if others_write {
            return Err(format!(
                "{path:?} is writable by other users (mode {mode:04o})"
            ));
        }
    } else {
        if owner != 0 && owner != me {
            return Err(format!("{path:?} is owned by uid {owner}"));
        }
        if others_write && !sticky {
            return Err(format!(
                "{path:?} is writable by other users (mode {mode:04o}, no sticky bit)"
            ));
        }
    }
    Ok(())
}

/// Opens the cache dir `dir` from `/`, one checked component at a time,
/// creating missing components 0700. The fd is the only handle used on
/// the cache afterwards.
pub fn open_private_dir(dir: &Path) -> Result<OwnedFd, Refused> {
    let refuse = |why: String| Refused {
        dir: dir.to_path_buf(),
        why,
    };
    let path = resolve(dir).map_err(refuse)?;
    let me = euid();
    let names: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    if names.is_empty() {
        return Err(refuse("the cache cannot be `/`".into()));
    }
    let mut fd: OwnedFd = std::fs::File::open("/")
        .map_err(|e| refuse(format!("cannot open /: {e}")))?
        .into();
    let mut at = PathBuf::from("/");
    let st = fstat(fd.as_fd()).map_err(|e| refuse(format!("cannot stat /: {e}")))?;
    check_dir(&st, &at, false, me).map_err(refuse)?;
    for (i, name) in names.iter().enumerate() {
        at.push(name);
        let c_name = CString::new(name.as_bytes()).map_err(|_| refuse("NUL in path".into()))?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let next = match openat(fd.as_fd(), &c_name, flags, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // SAFETY: `fd` is an open directory, `c_name` NUL-terminated.
                if unsafe { libc::mkdirat(fd.as_raw_fd(), c_name.as_ptr(), 0o700) } != 0 {
                    let e = os_err();
                    // EEXIST: someone made it meanwhile; it is checked below.
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(refuse(format!("cannot create {at:?}: {e}")));
                    }
                }
                openat(fd.as_fd(), &c_name, flags, 0)
            }
            other => other,
        }
        .map_err(|e| refuse(format!("cannot open {at:?} as a directory: {e}")))?;
        let st = fstat(next.as_fd()).map_err(|e| refuse(format!("cannot stat {at:?}: {e}")))?;
        check_dir(&st, &at, i + 1 == names.len(), me).map_err(refuse)?;
        fd = next;
    }
    Ok(fd)
}

/// Opens `name` in `dir` if it is a private regular file of this user of
/// at most [`MAX_CACHE_BYTES`], checked on the opened fd itself.
fn open_private(dir: BorrowedFd<'_>, name: &CStr) -> Option<std::fs::File> {
    // O_NONBLOCK: a FIFO planted under the name must not hang the open.
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let fd = match openat(dir, name, flags, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return None,
        Err(e) => {
            tracing::warn!(file = ?name, error = %e, "ignoring a conformance cache that cannot be opened (a symlink?)");
            return None;
        }
    };
    let st = fstat(fd.as_fd()).ok()?;
    let mode = bits(st.st_mode);
    let regular = mode & bits(libc::S_IFMT) == bits(libc::S_IFREG);
    let size = u64::try_from(st.st_size).unwrap_or(u64::MAX);
    // One link: a second name elsewhere would be a way to write it that
    // the dir's checks never saw.
    let one_name = st.st_nlink == 1;
    if !regular || !one_name || st.st_uid != euid() || mode & 0o077 != 0 || size > MAX_CACHE_BYTES {
        tracing::warn!(file = ?name, "ignoring a conformance cache that is not a private regular file of this user with one name");
        return None;
    }
    Some(std::fs::File::from(fd))
}

/// Reads the entries of a cache file in `dir` that is private to this user
/// and well formed.
fn read_private(dir: BorrowedFd<'_>, name: &CStr) -> Option<Vec<CacheFile>> {
    let mut text = String::new();
    open_private(dir, name)?
        .take(MAX_CACHE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    match entries::parse(&text) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(file = ?name, error = %e, "ignoring unreadable conformance cache");
            None
        }
    }
}

/// A fresh unpredictable temp file name.
fn temp_name() -> std::io::Result<CString> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(CString::new(format!(".tmp-{}", hex::encode(bytes))).expect("hex has no NUL"))
}

/// Creates `name` in `dir` for writing: never an existing file, never
/// through a symlink.
fn create_new(dir: BorrowedFd<'_>, name: &CStr) -> std::io::Result<std::fs::File> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
    openat(dir, name, flags, 0o600).map(std::fs::File::from)
}

/// Stores `file` as `name` in `dir`: temp file, sync, rename.
fn write_private(dir: BorrowedFd<'_>, name: &CStr, file: &Stored) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(file)?;
    let tmp = temp_name()?;
    let mut f = create_new(dir, &tmp)?;
    let written = f
        .write_all(&json)
        .and_then(|()| f.sync_all())
        .and_then(|()| {
            // SAFETY: both names are NUL-terminated and relative to the same
            // open directory.
            let r = unsafe {
                libc::renameat(
                    dir.as_raw_fd(),
                    tmp.as_ptr(),
                    dir.as_raw_fd(),
                    name.as_ptr(),
                )
            };
            if r == 0 {
                Ok(())
            } else {
                Err(os_err())
            }
        });
    if written.is_err() {
        // SAFETY: as above; removing our own temp file, best effort.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    }
    written
}

#[async_trait::async_trait]
impl<S: ConformanceSuite> ConformanceSuite for CachedSuite<S> {
    async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport {
        let set = |o| *self.outcome.lock().unwrap_or_else(|p| p.into_inner()) = o;
        let name = file_name(backend.name());
        let dir = match (&self.dir, &name) {
            (Some(dir), Some(_)) => match open_private_dir(dir) {
                Ok(fd) => Some(fd),
                Err(refused) => {
                    // The caller shows it (CacheOutcome::Refused): one line.
                    tracing::debug!(%refused, "conformance cache refused");
                    set(CacheOutcome::Refused(refused.to_string()));
                    None
                }
            },
            _ => None,
        };
        let place = dir.as_ref().zip(name.as_deref());
        let cached = place
            .and_then(|(dir, name)| read_private(dir.as_fd(), name))
            .unwrap_or_default();
        // The binary's hash from an entry made by this very file, if any.
        let current = std::env::current_exe()
            .and_then(|p| ExeIdentity::of(&p))
            .ok();
        let known = cached
            .iter()
            .find(|f| Some(&f.exe) == current.as_ref())
            .map(|f| (&f.exe, f.key.exe_sha256.as_str()));
        let key = CacheKey::for_backend(backend.as_ref(), known).ok();
        if let (Some(_), Some((key, _))) = (place, &key) {
            if !self.recheck {
                let accepted = cached.iter().find(|f| f.key == *key).map(|f| {
                    f.report
                        .clone()
                        .accepting_unproven(self.accept_unproven.clone())
                });
                if let Some(report) = accepted.filter(ConformanceReport::conforms) {
                    set(CacheOutcome::Hit);
                    tracing::debug!(dir = ?self.dir, "conformance cache hit");
                    return report;
                }
            }
            set(CacheOutcome::Miss);
        }
        let report = self
            .inner
            .run(backend)
            .await
            .accepting_unproven(self.accept_unproven.clone());
        if let (Some((dir, name)), Some((key, exe))) = (place, key) {
            if report.conforms() {
                let file = entries::merged(
                    cached,
                    CacheFile {
                        key,
                        exe,
                        report: report.clone(),
                    },
                );
                if let Err(e) = write_private(dir.as_fd(), name, &file) {
                    tracing::warn!(dir = ?self.dir, error = %e, "could not write conformance cache");
                }
            }
        }
        report
    }
}

mod dirs;
pub use dirs::default_dir;
use dirs::other_dirs;
mod entries;
use entries::Stored;

#[cfg(test)]
mod tests;
