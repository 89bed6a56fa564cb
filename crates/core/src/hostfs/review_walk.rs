//! A review layer walked against the host's directory: listed, or
//! applied (see the module docs of `review` for the rules). The program
//! shaped the layer; the host's directory may have changed meanwhile, and
//! may hold mount points the program never saw (an overlay does not show
//! its lower's submounts): nothing across a mount is entered, written or
//! removed.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
use rustix::fs::StatxFlags;
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};

use super::{Change, ChangeKind, ReviewLayer, MAX_DEPTH};
use crate::hostfs::{euid, open_dir, open_dir_at, remove_tree_at, Budget};

pub(super) fn walk_layer(layer: &ReviewLayer, write: bool) -> io::Result<Vec<Change>> {
    let upper = open_dir(&layer.upper())?;
    let host = open_dir(&layer.record.dir)?;
    let mnt = mount_id(host.as_fd(), OsStr::new(""))?;
    let mut w = Walk {
        started_ns: layer.record.started_ns,
        write,
        out: Vec::new(),
        tmp: 0,
        mnt,
    };
    let top = HostDir::existing(host.as_fd(), w.started_ns)?;
    w.dir(upper.as_fd(), Some(top), Path::new(""), 0)?;
    Ok(w.out)
}

/// A host directory the walk is in: its fd, and whether names in it
/// that the layer adds might have been deleted by the host meanwhile
/// (it changed since the run started; never for one the apply made).
#[derive(Clone, Copy)]
struct HostDir<'a> {
    fd: BorrowedFd<'a>,
    changed: bool,
}

impl<'a> HostDir<'a> {
    fn existing(fd: BorrowedFd<'a>, started_ns: i128) -> io::Result<HostDir<'a>> {
        let st = rfs::fstat(fd)?;
        Ok(HostDir {
            fd,
            changed: ctime_ns(&st) > started_ns,
        })
    }
}

struct Walk {
    started_ns: i128,
    write: bool,
    out: Vec<Change>,
    tmp: u32,
    /// The mount of the host's directory: nothing on another is touched.
    mnt: u64,
}

fn ctime_ns(st: &rfs::Stat) -> i128 {
    st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128
}

fn lstat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Option<rfs::Stat>> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The mount ID of `name` in `dir` (`""`: `dir` itself), no link followed.
#[cfg(target_os = "linux")]
fn mount_id(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<u64> {
    let flags = if name.is_empty() {
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    let st = rfs::statx(dir, name, flags, StatxFlags::MNT_ID)?;
    Ok(st.stx_mnt_id)
}

/// Elsewhere (no mount IDs, and no overlay to review through): the
/// device, which tells another filesystem, not a bind mount of the same.
#[cfg(not(target_os = "linux"))]
fn mount_id(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<u64> {
    let st = if name.is_empty() {
        rfs::fstat(dir)?
    } else {
        rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?
    };
    Ok(st.st_dev as u64)
}

/// True when the directory `fd` of the layer is opaque (the program
/// deleted the host's and made it again).
fn opaque(fd: BorrowedFd<'_>) -> bool {
    let mut v = [0u8; 4];
    ["user.overlay.opaque", "trusted.overlay.opaque"]
        .iter()
        .any(|k| matches!(rfs::fgetxattr(fd, *k, &mut v), Ok(n) if n >= 1 && v[0] == b'y'))
}

/// A symlink's target stays inside the directory from where the link sits
/// (`depth` dirs down): relative, with `..` only as its first components
/// (at most `depth` of them). A `..` after a name could climb out through
/// a link the name is (`sub/q -> ..`, then `sub/q/sub/q/../../..`); a
/// name that is a link obeys the same rule where it sits.
pub(super) fn link_stays_inside(target: &[u8], depth: usize) -> bool {
    if target.first() == Some(&b'/') || target.is_empty() {
        return false;
    }
    let mut up = 0usize;
    let mut named = false;
    for part in target.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." if !named => up += 1,
            b".." => return false,
            _ => named = true,
        }
    }
    up <= depth
}

impl Walk {
    fn push(&mut self, path: PathBuf, kind: ChangeKind, link: Option<OsString>) {
        self.out.push(Change { path, kind, link });
    }

    fn refuse(&mut self, path: PathBuf, why: String, link: Option<OsString>) {
        self.push(path, ChangeKind::Refused { reason: why }, link);
    }

    /// True when the host's entry `name` (and, for a directory, all that
    /// is in it) is as it was when the run started: nothing changed since
    /// (`ctime`), nothing on another mount, no deeper than [`MAX_DEPTH`].
    fn host_unchanged(&self, dir: BorrowedFd<'_>, name: &OsStr, depth: usize) -> io::Result<bool> {
        let Some(st) = lstat_at(dir, name)? else {
            return Ok(true);
        };
        if ctime_ns(&st) > self.started_ns || mount_id(dir, name)? != self.mnt {
            return Ok(false);
        }
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Ok(true);
        }
        if depth >= MAX_DEPTH {
            return Ok(false);
        }
        let sub = open_dir_at(dir, name)?;
        for e in rfs::Dir::read_from(&sub)? {
            let e = e?;
            let n = e.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            if !self.host_unchanged(sub.as_fd(), OsStr::from_bytes(n), depth + 1)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A temp name in a host dir, unused so far.
    fn tmp_name(&mut self) -> OsString {
        self.tmp += 1;
        OsString::from(format!(
            ".cordon-review-{}-{}",
            std::process::id(),
            self.tmp
        ))
    }

    /// The layer's dir `upper` against the host's dir `host` (`None`: not
    /// on the host), at `rel`, `depth` levels down.
    fn dir(
        &mut self,
        upper: BorrowedFd<'_>,
        host: Option<HostDir<'_>>,
        rel: &Path,
        depth: usize,
    ) -> io::Result<()> {
        let mut names = Vec::new();
        for e in rfs::Dir::read_from(upper)? {
            let e = e?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                names.push(OsString::from(OsStr::from_bytes(n)));
            }
        }
        names.sort();
        for name in names {
            self.entry(upper, host, rel, &name, depth)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        upper: BorrowedFd<'_>,
        host: Option<HostDir<'_>>,
        rel: &Path,
        name: &OsStr,
        depth: usize,
    ) -> io::Result<()> {
        let path = rel.join(name);
        let Some(st) = lstat_at(upper, name)? else {
            return Ok(());
        };
        let on_host = match host {
            Some(h) => lstat_at(h.fd, name)?,
            None => None,
        };
        let ft = FileType::from_raw_mode(st.st_mode);
        let kind_name = match ft {
            FileType::CharacterDevice if st.st_rdev != 0 => Some("a device file"),
            FileType::BlockDevice => Some("a device file"),
            FileType::Fifo => Some("a FIFO"),
            FileType::Socket => Some("a socket"),
            FileType::Unknown => Some("a file of unknown type"),
            _ => None,
        };
        if let Some(what) = kind_name {
            self.refuse(path, what.into(), None);
            return Ok(());
        }
        // A name that is a mount point on the host: the program saw the
        // empty directory beneath it, not what is mounted there.
        if let (Some(h), Some(_)) = (host, on_host) {
            if mount_id(h.fd, name)? != self.mnt {
                self.refuse(path, "a mount point on the host".into(), None);
                return Ok(());
            }
        }
        match ft {
            FileType::CharacterDevice => {
                // A whiteout: the program deleted the host's entry.
                let Some(h) = host.filter(|_| on_host.is_some()) else {
                    return Ok(());
                };
                if !self.host_unchanged(h.fd, name, depth)? {
                    self.push(path, ChangeKind::Conflict, None);
                    return Ok(());
                }
                if self.write {
                    remove_tree_at(
                        h.fd,
                        name,
                        &mut Budget {
                            ..Budget::UNBOUNDED
                        },
                    )?;
                }
                self.push(path, ChangeKind::Deleted, None);
                Ok(())
            }
            FileType::RegularFile if st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0 => {
                self.refuse(path, "a setuid or setgid file".into(), None);
                Ok(())
            }
            FileType::RegularFile if st.st_nlink > 1 => {
                let why = format!("a hard link ({} names for one file)", st.st_nlink);
                self.refuse(path, why, None);
                Ok(())
            }
            FileType::Symlink => {
                let target = rfs::readlinkat(upper, name, Vec::new())?;
                let shown = Some(OsString::from(OsStr::from_bytes(target.to_bytes())));
                if !link_stays_inside(target.to_bytes(), depth) {
                    self.refuse(path, "a symbolic link out of the directory".into(), shown);
                    return Ok(());
                }
                self.replace(
                    host,
                    name,
                    path,
                    on_host.as_ref(),
                    st.st_size as u64,
                    shown,
                    depth,
                    |h, tmp| Ok(rfs::symlinkat(target.as_c_str(), h, tmp)?),
                )
            }
            FileType::RegularFile => {
                let src = rfs::openat(
                    upper,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                // What was opened is what was looked at (a live writer
                // could have swapped it for a FIFO or another file).
                let now = rfs::fstat(&src)?;
                if (now.st_dev, now.st_ino, now.st_mode, now.st_nlink)
                    != (st.st_dev, st.st_ino, st.st_mode, st.st_nlink)
                {
                    self.push(path, ChangeKind::Conflict, None);
                    return Ok(());
                }
                let size = st.st_size as u64;
                self.replace(
                    host,
                    name,
                    path,
                    on_host.as_ref(),
                    size,
                    None,
                    depth,
                    |h, tmp| write_copy(src, size, &st, h, tmp, on_host.as_ref()),
                )
            }
            FileType::Directory => self.directory(upper, host, on_host, path, name, &st, depth),
            _ => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn directory(
        &mut self,
        upper: BorrowedFd<'_>,
        host: Option<HostDir<'_>>,
        on_host: Option<rfs::Stat>,
        path: PathBuf,
        name: &OsStr,
        st: &rfs::Stat,
        depth: usize,
    ) -> io::Result<()> {
        if depth + 1 >= MAX_DEPTH {
            self.refuse(path, format!("a tree deeper than {MAX_DEPTH} levels"), None);
            return Ok(());
        }
        let sub = open_dir_at(upper, name)?;
        let is_opaque = opaque(sub.as_fd());
        let host_dir =
            on_host.is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory);
        if let (true, false, Some(h)) = (host_dir, is_opaque, host) {
            // Merged: only what is inside changed.
            let hd = open_dir_at(h.fd, name)?;
            let inner = HostDir::existing(hd.as_fd(), self.started_ns)?;
            return self.dir(sub.as_fd(), Some(inner), &path, depth + 1);
        }
        if self.conflicts(host, name, on_host.as_ref(), depth)? {
            self.push(path, ChangeKind::Conflict, None);
            return Ok(());
        }
        let kind = if on_host.is_some() {
            ChangeKind::Replaced
        } else {
            ChangeKind::Added { bytes: 0 }
        };
        let made: Option<OwnedFd> = match (self.write, host) {
            (true, Some(h)) => {
                if on_host.is_some() {
                    remove_tree_at(
                        h.fd,
                        name,
                        &mut Budget {
                            ..Budget::UNBOUNDED
                        },
                    )?;
                }
                rfs::mkdirat(h.fd, name, Mode::from_raw_mode(st.st_mode & 0o755))?;
                let fd = open_dir_at(h.fd, name)?;
                own_like_parent(&fd, h.fd)?;
                Some(fd)
            }
            _ => None,
        };
        self.push(path.clone(), kind, None);
        let made = made.as_ref().map(|fd| HostDir {
            fd: fd.as_fd(),
            changed: false,
        });
        self.dir(sub.as_fd(), made, &path, depth + 1)
    }

    /// Whether a change to `name` would overwrite something the host
    /// changed: the entry (and all in it) changed since the start, or the
    /// name is new to the layer in a host dir that changed (the host may
    /// have deleted it meanwhile).
    fn conflicts(
        &self,
        host: Option<HostDir<'_>>,
        name: &OsStr,
        on_host: Option<&rfs::Stat>,
        depth: usize,
    ) -> io::Result<bool> {
        let Some(h) = host else {
            return Ok(false);
        };
        Ok(match on_host {
            Some(_) => !self.host_unchanged(h.fd, name, depth)?,
            None => h.changed,
        })
    }

    /// Puts a new file or link (`make` writes it at a temp name) over
    /// `name` in the host dir, unless that would overwrite a change.
    #[allow(clippy::too_many_arguments)]
    fn replace(
        &mut self,
        host: Option<HostDir<'_>>,
        name: &OsStr,
        path: PathBuf,
        on_host: Option<&rfs::Stat>,
        bytes: u64,
        link: Option<OsString>,
        depth: usize,
        make: impl FnOnce(BorrowedFd<'_>, &OsStr) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.conflicts(host, name, on_host, depth)? {
            self.push(path, ChangeKind::Conflict, link);
            return Ok(());
        }
        let kind = match on_host {
            Some(_) => ChangeKind::Modified { bytes },
            None => ChangeKind::Added { bytes },
        };
        if let (true, Some(h)) = (self.write, host) {
            let tmp = self.tmp_name();
            if let Err(e) = make(h.fd, &tmp) {
                let _ = rfs::unlinkat(h.fd, &tmp, AtFlags::empty());
                return Err(e);
            }
            if on_host.is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory) {
                remove_tree_at(
                    h.fd,
                    name,
                    &mut Budget {
                        ..Budget::UNBOUNDED
                    },
                )?;
            }
            rfs::renameat(h.fd, &tmp, h.fd, name)?;
        }
        self.push(path, kind, link);
        Ok(())
    }
}

/// Writes a copy of `src` (at most `size` bytes: a writer still appending
/// cannot make it endless) at `tmp` in `dir`: the replaced file's mode and
/// owner when there was one, else the layer's permission bits less group
/// and other write, owned as the directory is (as root).
fn write_copy(
    src: OwnedFd,
    size: u64,
    st: &rfs::Stat,
    dir: BorrowedFd<'_>,
    tmp: &OsStr,
    replaced: Option<&rfs::Stat>,
) -> io::Result<()> {
    let dst = rfs::openat(
        dir,
        tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut out = std::fs::File::from(dst);
    io::copy(&mut std::fs::File::from(src).take(size), &mut out)?;
    let was_file = replaced.filter(|r| FileType::from_raw_mode(r.st_mode) == FileType::RegularFile);
    let mode = match was_file {
        Some(r) => r.st_mode & 0o777,
        None => st.st_mode & 0o755,
    };
    rfs::fchmod(&out, Mode::from_raw_mode(mode))?;
    if euid() == 0 {
        let (uid, gid) = match was_file {
            Some(r) => (r.st_uid, r.st_gid),
            None => {
                let d = rfs::fstat(dir)?;
                (d.st_uid, d.st_gid)
            }
        };
        rfs::fchown(
            &out,
            Some(rfs::Uid::from_raw(uid)),
            Some(rfs::Gid::from_raw(gid)),
        )?;
    }
    Ok(())
}

/// As root, a directory the apply made is owned as its parent is.
fn own_like_parent(fd: &OwnedFd, parent: BorrowedFd<'_>) -> io::Result<()> {
    if euid() == 0 {
        let p = rfs::fstat(parent)?;
        rfs::fchown(
            fd,
            Some(rfs::Uid::from_raw(p.st_uid)),
            Some(rfs::Gid::from_raw(p.st_gid)),
        )?;
    }
    Ok(())
}
