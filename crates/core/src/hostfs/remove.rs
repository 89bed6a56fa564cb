//! `hostfs`'s removal: iterative, with at most [`HELD_DIRS`] directories
//! open whatever the depth (a deeper one is renamed up to the top), every
//! step on a held fd, bounded by a [`Budget`] and by the passes a refilled
//! tree may cost.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode};

#[cfg(target_os = "linux")]
use super::STEP;
use super::{check_name, entry, euid, split, DIR, HELD_DIRS};

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
