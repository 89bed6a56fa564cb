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
    let fd = rfs::openat(dir.as_fd(), &name, flags, Mode::from_raw_mode(0o600))
        .map_err(io::Error::from)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "`{}` is a symbolic link: give the real path",
                    path.display()
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
                path.display(),
                kind_name(kind)
            ),
        ));
    }
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

/// How much one removal may do: at most `entries` names unlinked or moved
/// (`u64::MAX`: no bound). A sweep of others' leftovers bounds its work
/// with it; a removal of the host's own scratch does not.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Names still to be removed or moved before the removal gives up.
    pub entries: u64,
}

impl Budget {
    /// No bound.
    pub const UNBOUNDED: Budget = Budget { entries: u64::MAX };

    fn spend(&mut self) -> io::Result<()> {
        if self.entries == 0 {
            return Err(io::Error::other(
                "gave up: the tree holds more entries than this removal may remove",
            ));
        }
        self.entries -= 1;
        Ok(())
    }
}

/// Removes `path` and everything under it: its directory walked with no
/// link followed, the last component not followed either (a link there is
/// removed, not its target). See the module docs for the bounds.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let mut budget = Budget::UNBOUNDED;
    remove_tree_at(dir.as_fd(), &name, &mut budget)
}

/// Removes `name` in `parent` and everything under it (see
/// [`remove_tree`]), spending `budget`. Nothing there is no error.
pub fn remove_tree_at(parent: BorrowedFd<'_>, name: &OsStr, budget: &mut Budget) -> io::Result<()> {
    check_name(name)?;
    let Some(st) = entry(parent, name)? else {
        return Ok(());
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return ignore_gone(rfs::unlinkat(parent, name, AtFlags::empty()));
    }
    let top = open_for_removal(parent, name)?;
    // Each pass empties what it can reach; a pass that moved deep dirs up
    // to the top leaves them for the next, so a removal needs at most one
    // pass more than it moved dirs up. Past that (or after a pass that
    // removed nothing), something keeps refilling the tree (another user
    // with a cwd inside it): an error, not a loop.
    let mut hoists = Hoists::default();
    let mut passes = 0u64;
    loop {
        let before = budget.entries;
        empty(top.as_fd(), budget, &mut hoists)?;
        passes += 1;
        match rfs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(rustix::io::Errno::NOTEMPTY) | Err(rustix::io::Errno::EXIST)
                if budget.entries != before && passes <= hoists.moved + MAX_REFILLS => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// How many passes a removal makes beyond one per dir moved up before it
/// takes the tree as refilled by someone else and gives up.
const MAX_REFILLS: u64 = 16;

/// The dirs a removal moved up to its top: how many, and the next name.
#[derive(Default)]
struct Hoists {
    moved: u64,
    next: u64,
}

fn ignore_gone(r: rustix::io::Result<()>) -> io::Result<()> {
    match r {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A directory to empty, opened; for a caller other than root, one of its
/// own that the sandbox left without `rwx` for its owner gets them back
/// first (root needs no permission bits, and never changes a mode).
fn open_for_removal(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    let me = euid();
    let fd = match rfs::openat(parent, name, DIR, Mode::empty()) {
        Err(rustix::io::Errno::ACCESS) if me != 0 => {
            chmod_unreadable_dir(parent, name, me)?;
            rfs::openat(parent, name, DIR, Mode::empty())?
        }
        r => r?,
    };
    if me != 0 {
        let st = rfs::fstat(&fd)?;
        if st.st_uid == me && st.st_mode & 0o700 != 0o700 {
            rfs::fchmod(&fd, Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700))?;
        }
    }
    Ok(fd)
}

/// Gives a dir of `me`'s that cannot be opened for reading `rwx` for its
/// owner, never by name (`fchmodat` follows a link put there meanwhile):
/// on Linux it is opened `O_PATH` (no permission needed), checked on that
/// fd and changed through `/proc/self/fd`; elsewhere it is refused.
fn chmod_unreadable_dir(parent: BorrowedFd<'_>, name: &OsStr, me: u32) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let fd = rfs::openat(parent, name, STEP, Mode::empty())?;
        let st = rfs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory || st.st_uid != me {
            return Err(rustix::io::Errno::ACCESS.into());
        }
        rfs::chmod(
            format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
            Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700),
        )?;
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (parent, name, me);
        Err(rustix::io::Errno::ACCESS.into())
    }
}

/// One level of the walk: the directory and its name in the level above.
struct Level {
    dir: rfs::Dir,
    name: Option<OsString>,
}

/// Empties `top` as far as one pass goes: depth-first, at most
/// [`HELD_DIRS`] levels open; a directory below that is renamed up into
/// `top` under a fresh name.
fn empty(top: BorrowedFd<'_>, budget: &mut Budget, hoists: &mut Hoists) -> io::Result<()> {
    let top_dup = rustix::io::fcntl_dupfd_cloexec(top, 0)?;
    let mut first = rfs::Dir::new(top_dup)?;
    first.rewind();
    let mut stack = vec![Level {
        dir: first,
        name: None,
    }];
    loop {
        let depth = stack.len();
        let Some(level) = stack.last_mut() else {
            break;
        };
        let next = match level.dir.read() {
            None => None,
            Some(e) => Some(e?),
        };
        let Some(e) = next else {
            let done = stack.pop().expect("a level");
            if let (Some(name), Some(up)) = (done.name, stack.last()) {
                drop(done.dir);
                budget.spend()?;
                match rfs::unlinkat(up.dir.fd()?, &name, AtFlags::REMOVEDIR) {
                    // Refilled meanwhile: the next pass comes back for it.
                    Ok(()) | Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTEMPTY) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            continue;
        };
        let name = OsStr::from_bytes(e.file_name().to_bytes()).to_os_string();
        if name == "." || name == ".." {
            continue;
        }
        let fd = level.dir.fd()?;
        let is_dir = match e.file_type() {
            FileType::Directory => true,
            FileType::Unknown => entry(fd, &name)?
                .is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
            _ => false,
        };
        budget.spend()?;
        if !is_dir {
            match rfs::unlinkat(fd, &name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                // Became a dir meanwhile: the next pass sees it as one.
                Err(rustix::io::Errno::ISDIR) => {}
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        if depth >= HELD_DIRS {
            hoist(fd, &name, top, hoists, budget)?;
            continue;
        }
        let child = open_for_removal(fd, &name)?;
        stack.push(Level {
            dir: rfs::Dir::new(child)?,
            name: Some(name),
        });
    }
    Ok(())
}

/// Moves the directory `name` in `from` up into `top` under a name not in
/// use there (one counter for the whole removal, with this process's pid:
/// a name the tree already holds costs a try, charged to the budget).
fn hoist(
    from: BorrowedFd<'_>,
    name: &OsStr,
    top: BorrowedFd<'_>,
    hoists: &mut Hoists,
    budget: &mut Budget,
) -> io::Result<()> {
    loop {
        hoists.next += 1;
        let to = format!(".cordon-removing-{}-{}", std::process::id(), hoists.next);
        match rfs::renameat(from, name, top, to.as_str()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {
                hoists.moved += 1;
                return Ok(());
            }
            // A name the tree already holds: try the next.
            Err(rustix::io::Errno::NOTEMPTY)
            | Err(rustix::io::Errno::EXIST)
            | Err(rustix::io::Errno::NOTDIR)
            | Err(rustix::io::Errno::ISDIR) => budget.spend()?,
            Err(e) => return Err(e.into()),
        }
    }
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

#[cfg(test)]
#[path = "hostfs_tests.rs"]
mod tests;
