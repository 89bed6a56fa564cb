//! The one way the host touches a path that a sandbox or another local
//! user could shape.
//!
//! A sandbox with a read-write grant can put a symbolic link, a FIFO or a
//! directory chain of any depth where the host will later open, write or
//! remove; so can any user in a shared directory such as `/tmp`. Every
//! such touch by the host goes through this module (the tidy test
//! `host_paths_go_through_hostfs` keeps `std::fs` path calls out of the
//! places that must use it), and each function keeps these rules:
//!
//! - **No link is followed, in any component.** A path is walked from `/`
//!   (or the working directory) one component at a time with
//!   `openat(O_DIRECTORY | O_NOFOLLOW)`, each step relative to the fd of
//!   the one before; `..` is refused. A path with a symbolic link in it
//!   is refused with an error that names the link and says to give the
//!   real path ([`open_dir`]).
//! - **Outputs are regular files of the caller's own, never opened in
//!   place.** [`OutputFile`] writes a new file made exclusively
//!   (`O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK`, mode 0600) beside the
//!   target and renames it over the name only when done, so a FIFO cannot
//!   block the host, a link cannot redirect the write, and a file another
//!   user made (and may hold open) is neither written nor read through:
//!   an existing name that is not a regular file of the caller's uid is
//!   refused up front. [`open_append`] (a log that grows) opens in place,
//!   and takes only a regular file of the caller's with one link.
//! - **Removal is iterative, with bounded fds and stack, whatever the
//!   depth or width** ([`remove_tree`]): at most [`HELD_DIRS`] directories
//!   are held open; a directory deeper than that is first renamed up to
//!   the top of the tree being removed (which flattens any chain), so a
//!   tree deeper than `RLIMIT_NOFILE` or than any thread's stack is
//!   removed all the same. Every step is relative to a held fd; nothing
//!   is ever resolved through a link.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

/// How many directories a removal holds open at once, its top included:
/// below this depth it descends; a directory found deeper is renamed up to
/// the top and removed from there.
pub const HELD_DIRS: usize = 32;

/// The flags every directory is opened with here.
const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// A directory on the way to the one wanted: on Linux `O_PATH`, so that a
/// dir the caller may search but not read (mode 0711) can be passed.
#[cfg(target_os = "linux")]
const STEP: OFlags = DIR.union(OFlags::PATH);
#[cfg(not(target_os = "linux"))]
const STEP: OFlags = DIR;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The directory `path`, opened with no component followed if it is a
/// symbolic link (nor a `..`): relative paths from the working directory.
/// A link in the way fails with an error that names it.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let start = if path.is_absolute() { "/" } else { "." };
    let mut fd = rfs::open(start, STEP, Mode::empty())?;
    let mut walked = PathBuf::from(if path.is_absolute() { "/" } else { "" });
    let mut names = path.components().peekable();
    // The last component is opened for reading (a listing, a lock); the
    // others only to be passed.
    let mut last_opened = false;
    while let Some(c) = names.next() {
        let last = names.peek().is_none();
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "`{}` has a `..` in it, which Cordon does not resolve here: give the \
                         path without it",
                        path.display()
                    ),
                ))
            }
            Component::Normal(name) => {
                walked.push(name);
                check_name(name)?;
                let flags = if last { DIR } else { STEP };
                fd = rfs::openat(fd.as_fd(), name, flags, Mode::empty())
                    .map_err(|e| name_link(e.into(), &walked))?;
                last_opened = last;
            }
        }
    }
    if !last_opened {
        // `/`, `.`: the start itself, now for reading.
        fd = rfs::openat(fd.as_fd(), ".", DIR, Mode::empty())?;
    }
    Ok(fd)
}

/// `name` in the directory `dir`, opened as a directory without following
/// a link (`ELOOP` or `ENOTDIR` if it is one).
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    check_name(name)?;
    Ok(rfs::openat(dir, name, DIR, Mode::empty())?)
}

/// A failed step of a walk: when what failed is a link, says so.
fn name_link(e: io::Error, walked: &Path) -> io::Error {
    let link = matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR))
        && std::fs::symlink_metadata(walked).is_ok_and(|m| m.file_type().is_symlink());
    if !link {
        return io::Error::new(e.kind(), format!("`{}`: {e}", walked.display()));
    }
    let real = std::fs::canonicalize(walked)
        .map(|p| format!(" (it points to `{}` now)", p.display()))
        .unwrap_or_default();
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "`{}` is a symbolic link{real}: Cordon follows no link in a path it writes or \
             removes for a sandbox (one may have been put there to redirect it); give the real \
             path",
            walked.display()
        ),
    )
}

/// A single, plain name: no `/`, not empty, not `.` or `..`.
fn check_name(name: &OsStr) -> io::Result<()> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` is not a plain file name", name.to_string_lossy()),
        ));
    }
    Ok(())
}

/// `path` as the fd of its directory (walked by [`open_dir`]) and its
/// last component.
pub fn split(path: &Path) -> io::Result<(OwnedFd, OsString)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{}` names no file", path.display()),
        )
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((open_dir(parent)?, name.to_os_string()))
}

/// What sits at `name` in `dir` now (not followed): `None` if nothing.
fn entry(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<rfs::Stat>> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Refuses anything at the output's name but a regular file of the
/// caller's own.
fn check_replaceable(dir: BorrowedFd<'_>, name: &OsStr, shown: &Path) -> io::Result<()> {
    let Some(st) = entry(dir, name)? else {
        return Ok(());
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "`{}` exists and is {}, not a regular file: Cordon writes its output only as a \
                 new regular file; remove it or name another file",
                shown.display(),
                kind_name(kind)
            ),
        ));
    }
    if st.st_uid != euid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "`{}` exists and belongs to uid {}, not to this user ({}): Cordon neither writes \
                 into nor replaces another user's file; remove it or name another file",
                shown.display(),
                st.st_uid,
                euid()
            ),
        ));
    }
    Ok(())
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "not a regular file",
    }
}

/// An output file the host writes for the operator (`--explain-json`):
/// its path checked (and its directory opened) by
/// [`create`](Self::create) before the program runs; the file itself made
/// only by [`commit`](Self::commit), once the program has ended, as a
/// new 0600 file beside its name that is moved over the name. Nothing of
/// it exists while the program runs, so a program that may write that
/// directory has nothing to write into, swap or replace with a FIFO.
#[derive(Debug)]
pub struct OutputFile {
    dir: OwnedFd,
    name: OsString,
    shown: PathBuf,
}

impl OutputFile {
    /// Checks `path`: refused, a path with a link or `..` in it, and a
    /// name that holds anything but a regular file of this user's (a
    /// FIFO, a link, a directory, another user's file).
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        let (dir, name) = split(path)?;
        check_replaceable(dir.as_fd(), &name, path)?;
        Ok(OutputFile {
            dir,
            name,
            shown: path.to_path_buf(),
        })
    }

    /// Writes `bytes` as a new file beside the name (in the directory
    /// opened at [`create`](Self::create), whatever the path names now)
    /// and moves it over the name, after checking once more that the name
    /// holds nothing it must not replace. A file found in its place
    /// afterwards (swapped by a process that may write the directory) is
    /// an error.
    pub fn commit(self, bytes: &[u8]) -> io::Result<()> {
        check_replaceable(self.dir.as_fd(), &self.name, &self.shown)?;
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC;
        let mut made = None;
        for attempt in 0..16u32 {
            let mut temp = OsString::from(".");
            temp.push(&self.name);
            temp.push(format!(".cordon-{}-{}", std::process::id(), nonce(attempt)));
            match rfs::openat(self.dir.as_fd(), &temp, flags, Mode::from_raw_mode(0o600)) {
                Ok(fd) => {
                    made = Some((temp, File::from(fd)));
                    break;
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let Some((temp, mut file)) = made else {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "cannot make a temporary file beside `{}`",
                    self.shown.display()
                ),
            ));
        };
        let written = io::Write::write_all(&mut file, bytes)
            .and_then(|()| same_file(self.dir.as_fd(), &temp, &file))
            .and_then(|()| {
                Ok(rfs::renameat(
                    self.dir.as_fd(),
                    &temp,
                    self.dir.as_fd(),
                    &self.name,
                )?)
            });
        if let Err(e) = written {
            let _ = rfs::unlinkat(self.dir.as_fd(), &temp, AtFlags::empty());
            return Err(e);
        }
        same_file(self.dir.as_fd(), &self.name, &file).map_err(|_| {
            io::Error::other(format!(
                "`{}` was replaced while cordon wrote it (a process that may write its \
                 directory): do not trust what it holds",
                self.shown.display()
            ))
        })
    }
}

/// Whether `name` in `dir` is `file` (the same inode, one link).
fn same_file(dir: BorrowedFd<'_>, name: &OsStr, file: &File) -> io::Result<()> {
    let at = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let ours = rfs::fstat(file)?;
    if (at.st_dev, at.st_ino) != (ours.st_dev, ours.st_ino) || ours.st_nlink != 1 {
        return Err(io::Error::other("not the file written"));
    }
    Ok(())
}

/// A few random-enough characters for a temporary name (the name is made
/// with `O_EXCL`, so a guess by someone else only costs a retry).
fn nonce(attempt: u32) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(attempt);
    format!("{:08x}", h.finish() as u32)
}

/// `name` in `dir` opened with `flags` (which hold `O_NOFOLLOW`), and its
/// status, if it is a regular file; a link there is refused with an error
/// that names `shown`.
fn open_regular(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlags,
    mode: Mode,
    shown: &Path,
) -> io::Result<(OwnedFd, rfs::Stat)> {
    let fd = rfs::openat(dir, name, flags, mode)
        .map_err(io::Error::from)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "`{}` is a symbolic link: give the real path",
                    shown.display()
                ),
            ),
            _ => e,
        })?;
    let st = rfs::fstat(&fd)?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if kind != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "`{}` is {}, not a regular file",
                shown.display(),
                kind_name(kind)
            ),
        ));
    }
    Ok((fd, st))
}

/// A log the host appends to (`--notify-file`): opened (or made, 0600) in
/// place, never through a link, without blocking, and only if it is a
/// regular file of this user's with no second name.
pub fn open_append(path: &Path) -> io::Result<File> {
    let (dir, name) = split(path)?;
    let flags = OFlags::WRONLY
        | OFlags::APPEND
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC;
    let (fd, st) = open_regular(dir.as_fd(), &name, flags, Mode::from_raw_mode(0o600), path)?;
    if st.st_uid != euid() || st.st_nlink != 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "`{}` belongs to uid {} or has another name ({} links): Cordon appends only to a \
                 file of this user's ({}) with one name; remove it or name another file",
                path.display(),
                st.st_uid,
                st.st_nlink,
                euid()
            ),
        ));
    }
    Ok(File::from(fd))
}

/// A small private file the host reads (a secret's source): walked with
/// no link followed, opened without blocking, and read only if it is a
/// regular file of this user's, readable by no one else, with one name;
/// at most `max` bytes (a longer one is an error, not cut).
pub fn read_private(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let (dir, name) = split(path)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let (fd, st) = open_regular(dir.as_fd(), &name, flags, Mode::empty(), path)?;
    if st.st_uid != euid() || st.st_mode & 0o077 != 0 || st.st_nlink != 1 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "`{}` must be yours (uid {}), readable by no one else (chmod 600) and have one \
                 name (no hard link)",
                path.display(),
                euid()
            ),
        ));
    }
    let mut out = Vec::new();
    File::from(fd).take(max as u64 + 1).read_to_end(&mut out)?;
    if out.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("`{}` is longer than {max} bytes", path.display()),
        ));
    }
    Ok(out)
}

/// Whether `inside` names a regular file in the directory tree `root`,
/// resolved as a process whose root is `root` would resolve it: an
/// absolute link, or `..`, stays inside `root` (`RESOLVE_IN_ROOT`), and
/// no `/proc` magic link is followed. `root` itself is walked as
/// [`open_dir`] does. For a container's root, which the container shapes:
/// finding its program on its `PATH`.
#[cfg(target_os = "linux")]
pub fn is_file_in_root(root: &Path, inside: &Path) -> io::Result<bool> {
    use rustix::fs::ResolveFlags;
    let dir = open_dir(root)?;
    let rel = inside.strip_prefix("/").unwrap_or(inside);
    let fd = match rfs::openat2(
        dir.as_fd(),
        rel,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(e) if e == rustix::io::Errno::NOENT || e == rustix::io::Errno::NOTDIR => {
            return Ok(false)
        }
        Err(e) => return Err(e.into()),
    };
    Ok(FileType::from_raw_mode(rfs::fstat(&fd)?.st_mode) == FileType::RegularFile)
}

/// Gives the directory `path` (walked as [`open_dir`] does) to `owner`
/// if it belongs to `from` now; `Ok(false)` when it is gone or belongs to
/// someone else already.
pub fn hand_over_dir(path: &Path, from: u32, owner: (u32, u32)) -> io::Result<bool> {
    let fd = match open_dir(path) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let st = rfs::fstat(&fd)?;
    if st.st_uid != from {
        return Ok(false);
    }
    let (uid, gid) = (rfs::Uid::from_raw(owner.0), rfs::Gid::from_raw(owner.1));
    rfs::fchown(&fd, Some(uid), Some(gid))?;
    rfs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
    Ok(true)
}

#[path = "hostfs/remove.rs"]
mod remove;
pub use remove::{remove_tree, remove_tree_at, Budget};

#[path = "hostfs/review.rs"]
pub mod review;

#[cfg(test)]
#[path = "hostfs_tests.rs"]
mod tests;
