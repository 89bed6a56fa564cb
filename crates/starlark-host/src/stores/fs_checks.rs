//! Opening the store's files only where no other user could have written
//! them: the directory is opened from `/` one component at a time
//! (`openat` with `O_NOFOLLOW`) with every component checked on its own
//! fd, the file is opened `O_NOFOLLOW` in that directory's fd and checked
//! on the fd it got (as the conformance report cache does).
//!
//! - every directory above the file: owned by the caller or root, and not
//!   writable by group or others unless sticky (`/tmp`);
//! - the file's own directory: owned by the caller or root and writable by
//!   nobody else, sticky or not (others could plant or swap the file, or
//!   SQLite's journal next to it);
//! - the file: a regular file (a symlink, even to a good file, is
//!   refused), owned by the caller or root, not writable by group or
//!   others; a key file also readable by nobody else.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// What a checked file is for: it decides the message and how private the
/// file must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// The store database: not writable by others.
    Database,
    /// The key file: neither writable nor readable by others.
    Key,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Database => "the store database",
            Kind::Key => "the store key file",
        }
    }
}

/// A file opened and checked, and the path it was found at (its directory
/// with symlinks resolved, and its name), which SQLite then opens.
pub(super) struct Checked {
    pub(super) file: File,
    pub(super) path: PathBuf,
    dir: OwnedFd,
    name: CString,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn fstat(fd: BorrowedFd<'_>) -> std::io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` is open and `st` is writable memory of the right size.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so the struct is initialised.
    Ok(unsafe { st.assume_init() })
}

fn openat(dir: BorrowedFd<'_>, name: &CString, flags: i32, mode: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: `dir` is open, `name` NUL-terminated; `mode` is read only
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
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: openat returned a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn mode_of(st: &libc::stat) -> u32 {
    st.st_mode & 0o7777
}

/// `path` made absolute (from the working directory) with its directory's
/// symlinks resolved as far as it exists (missing components follow as
/// plain names, created later); its last component is kept as it is.
fn resolve(path: &Path) -> Result<(PathBuf, CString), String> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot read the working directory: {e}"))?
            .join(path)
    };
    let name = abs
        .file_name()
        .filter(|n| !n.is_empty() && *n != OsStr::new(".."))
        .ok_or_else(|| format!("{} does not name a file", path.display()))?;
    let name = CString::new(name.as_bytes()).map_err(|_| "a NUL in the path".to_owned())?;
    let mut existing = abs.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut missing = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(mut dir) => {
                dir.extend(missing.iter().rev());
                return Ok((dir, name));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (Some(n), Some(parent)) = (existing.file_name(), existing.parent()) else {
                    return Err(format!("cannot resolve {}", existing.display()));
                };
                missing.push(n.to_os_string());
                existing = parent.to_path_buf();
            }
            Err(e) => return Err(format!("cannot resolve {}: {e}", existing.display())),
        }
    }
}

/// Opens `dir` from `/`, one checked component at a time, creating
/// missing components 0700.
fn open_dir(dir: &Path, me: u32) -> Result<OwnedFd, String> {
    let names: Vec<&OsStr> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let mut fd: OwnedFd = File::open("/")
        .map_err(|e| format!("cannot open /: {e}"))?
        .into();
    let mut at = PathBuf::from("/");
    let check = |fd: BorrowedFd<'_>, at: &Path, own: bool| -> Result<(), String> {
        let st = fstat(fd).map_err(|e| format!("cannot stat {}: {e}", at.display()))?;
        let mode = mode_of(&st);
        if st.st_uid != me && st.st_uid != 0 {
            return Err(format!(
                "its directory {} is owned by uid {}, not by you (uid {me}) or root",
                at.display(),
                st.st_uid
            ));
        }
        let sticky = mode & 0o1000 != 0;
        if mode & 0o022 != 0 && (own || !sticky) {
            return Err(format!(
                "its directory {} is writable by other users (mode {mode:04o}){}",
                at.display(),
                if own { "" } else { " and not sticky" }
            ));
        }
        Ok(())
    };
    check(fd.as_fd(), &at, names.is_empty())?;
    for (i, name) in names.iter().enumerate() {
        at.push(name);
        let c = CString::new(name.as_bytes()).map_err(|_| "a NUL in the path".to_owned())?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let next = match openat(fd.as_fd(), &c, flags, 0) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                // SAFETY: `fd` is an open directory, `c` NUL-terminated.
                if unsafe { libc::mkdirat(fd.as_raw_fd(), c.as_ptr(), 0o700) } != 0 {
                    let e = std::io::Error::last_os_error();
                    // EEXIST: made meanwhile; it is checked below like any.
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(format!("cannot create {}: {e}", at.display()));
                    }
                }
                openat(fd.as_fd(), &c, flags, 0)
            }
            other => other,
        }
        .map_err(|e| format!("cannot open {} as a directory: {e}", at.display()))?;
        check(next.as_fd(), &at, i + 1 == names.len())?;
        fd = next;
    }
    Ok(fd)
}

/// Opens the store file at `path` after every check of the module docs,
/// creating it (0600, never through a planted name) when `create` is
/// given: then its contents are written by `create`'s caller. `Ok(None)`:
/// it does not exist and was not to be created.
pub(super) fn open_checked(
    path: &Path,
    kind: Kind,
    create: bool,
) -> Result<Option<Checked>, String> {
    let refuse = |why: String| format!("refusing {} {}: {why}", kind.name(), path.display());
    let me = euid();
    let (dir, name) = resolve(path).map_err(refuse)?;
    let dir_fd = open_dir(&dir, me).map_err(refuse)?;
    let access = match kind {
        Kind::Database => libc::O_RDWR,
        Kind::Key => libc::O_RDONLY,
    };
    // O_NONBLOCK: a FIFO planted under the name must not hang the open.
    let flags = access | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let fd = match openat(dir_fd.as_fd(), &name, flags, 0) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create => {
            let create_flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW;
            openat(dir_fd.as_fd(), &name, create_flags, 0o600)
                .map_err(|e| refuse(format!("cannot create it: {e}")))?
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse(
                "it is a symlink; give the path of the file itself (a link could be pointed \
                 at a file of someone else)"
                    .into(),
            ))
        }
        Err(e) => return Err(refuse(format!("cannot open it: {e}"))),
    };
    let st = fstat(fd.as_fd()).map_err(|e| refuse(format!("cannot stat it: {e}")))?;
    let mode = mode_of(&st);
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(refuse("it is not a regular file".into()));
    }
    if st.st_uid != me && st.st_uid != 0 {
        return Err(refuse(format!(
            "it is owned by uid {}, not by you (uid {me}) or root: another user could have \
             written anything in it",
            st.st_uid
        )));
    }
    let others = match kind {
        Kind::Database => 0o022,
        Kind::Key => 0o077,
    };
    if mode & others != 0 {
        let what = match kind {
            Kind::Database => "writable by group or others",
            Kind::Key => "readable or writable by group or others",
        };
        return Err(refuse(format!(
            "it is {what} (mode {mode:04o}); chmod 600 it"
        )));
    }
    // Back to a blocking descriptor for the reads and writes to come.
    // SAFETY: fcntl on an fd we own.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    Ok(Some(Checked {
        file: File::from(fd),
        path: dir.join(OsStr::from_bytes(name.as_bytes())),
        dir: dir_fd,
        name,
    }))
}

impl Checked {
    /// Whether the name still leads to the checked file (no symlink, same
    /// inode): what SQLite opened by path is what was checked. The
    /// directory is one nobody else can write, so this holds afterwards.
    pub(super) fn still_there(&self) -> Result<(), String> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: the dir fd is open, the name NUL-terminated, `st` writable.
        let rc = unsafe {
            libc::fstatat(
                self.dir.as_raw_fd(),
                self.name.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(format!(
                "{} vanished while it was opened: {}",
                self.path.display(),
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: fstatat returned 0.
        let now = unsafe { st.assume_init() };
        let was = fstat(self.file.as_fd()).map_err(|e| e.to_string())?;
        if (now.st_dev, now.st_ino) != (was.st_dev, was.st_ino) {
            return Err(format!(
                "{} was replaced while it was opened; refusing it",
                self.path.display()
            ));
        }
        Ok(())
    }
}
