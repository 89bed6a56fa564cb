//! Review layers: a directory granted for writing (`--rw-review DIR`)
//! whose changes land in a layer the host keeps apart, shown and then
//! applied or discarded.
//!
//! A [`ReviewStore`] is a private directory of the caller's (0700, its
//! own); each [`ReviewLayer`] in it holds `upper/` and `work/` (an overlay
//! filesystem's upper and work dirs: the Linux backend mounts the overlay
//! over the granted directory, so the program sees the directory and
//! writes only the layer) and `review.json` (the directory and when the
//! run started). The program shapes `upper/` at will, so everything here
//! reads it as hostile:
//!
//! - every step is relative to a held fd, with no link followed
//!   (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`), on both sides: the layer and the
//!   host's directory;
//! - only regular files, directories, symbolic links that stay inside the
//!   directory, and whiteouts (a character device 0/0: a deletion) are
//!   applied; a device, FIFO or socket, a file with a setuid or setgid bit
//!   or more than one name (a hard link), a link out of the tree, or a
//!   tree deeper than [`MAX_DEPTH`] is refused with its name and reason;
//! - a name whose host entry changed since the run started (its `ctime`,
//!   which no user can set back, is later than the start recorded before
//!   the program ran) is a conflict: reported, never overwritten;
//! - a file is written as a new file beside its target (exclusive
//!   create, mode 0600 until done) and renamed over it, so a reader of the
//!   host's directory never sees half a file; its mode keeps only the
//!   permission bits (0o777).
//!
//! The metadata of directories that exist on both sides (their modes and
//! times) is not reviewed or applied: only names and contents.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::{check_name, euid, open_dir, remove_tree_at, Budget};

/// How deep a layer's tree may go; deeper trees are refused whole.
pub const MAX_DEPTH: usize = 64;

/// The name of a layer's record of what it is for.
const RECORD: &str = "review.json";

/// What a layer is for: written by the host before the program runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LayerRecord {
    /// The directory the layer's changes are for (canonical).
    pub dir: PathBuf,
    /// When the run started (ns since the Unix epoch, a little before the
    /// program could run): a host entry changed after it is a conflict.
    pub started_ns: i128,
}

/// A private directory of review layers, the caller's own.
///
/// A *passable* store (a root host's) is mode 0711 and so are its
/// layers: the sandbox's own uid, which mounts the overlay in its user
/// namespace, must pass through to the upper dir it is handed (its files
/// are then stored as that uid until the layer is applied or discarded),
/// while no one may list the store, and a layer's name (128 random bits)
/// cannot be guessed.
#[derive(Debug, Clone)]
pub struct ReviewStore {
    root: PathBuf,
    passable: bool,
}

/// One layer in a [`ReviewStore`].
#[derive(Debug, Clone)]
pub struct ReviewLayer {
    /// Its id: the name of its directory in the store.
    pub id: String,
    /// Its directory.
    pub path: PathBuf,
    /// What it is for.
    pub record: LayerRecord,
}

impl ReviewLayer {
    /// The overlay's upper dir: what the program wrote.
    pub fn upper(&self) -> PathBuf {
        self.path.join("upper")
    }

    /// The overlay's work dir (same filesystem as the upper).
    pub fn work(&self) -> PathBuf {
        self.path.join("work")
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl ReviewStore {
    /// The store at `root`, made (0700) with its missing parents if need
    /// be. Refused unless it is a directory of the caller's uid that no
    /// one else may enter.
    pub fn open(root: &Path, passable: bool) -> io::Result<ReviewStore> {
        let mode = if passable { 0o711 } else { 0o700 };
        let mut at = PathBuf::new();
        for c in root.components() {
            at.push(c);
            if let Component::Normal(_) = c {
                let (parent, name) = super::split(&at)?;
                match rfs::mkdirat(&parent, &name, Mode::from_raw_mode(mode)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => {
                        return Err(io::Error::new(
                            io::Error::from(e).kind(),
                            format!("cannot make the review store `{}`: {e}", at.display()),
                        ))
                    }
                }
            }
        }
        let fd = open_dir(root)?;
        let st = rfs::fstat(&fd)?;
        if st.st_uid != euid() || st.st_mode & 0o777 & !mode != 0 {
            return Err(invalid(format!(
                "the review store `{}` must be a directory of yours that no one else may list \
                 or write (mode {mode:o})",
                root.display()
            )));
        }
        Ok(ReviewStore {
            root: root.to_path_buf(),
            passable,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// A new, empty layer for `dir` (canonical), its record written with
    /// the time now. `upper/` and `work/` are made 0755 so a backend can
    /// hand them to the sandbox's uid.
    pub fn create(&self, dir: &Path) -> io::Result<ReviewLayer> {
        let store = open_dir(&self.root)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(io::Error::other)?;
        // A change that lands within the clock's coarse tick before the
        // start still counts as during the run (a conflict, never lost).
        let started_ns = now.as_nanos() as i128 - 50_000_000;
        let mode = if self.passable { 0o711 } else { 0o700 };
        let mut n = 0u32;
        let (id, fd) = loop {
            // Sortable by time, then 128 random bits.
            let mut random = [0u8; 16];
            rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
            let id = format!("{:x}-{}", now.as_secs(), hex::encode(random));
            match rfs::mkdirat(&store, id.as_str(), Mode::from_raw_mode(mode)) {
                Ok(()) => {
                    break (
                        id.clone(),
                        super::open_dir_at(store.as_fd(), OsStr::new(&id))?,
                    )
                }
                Err(rustix::io::Errno::EXIST) if n < 10 => n += 1,
                Err(e) => return Err(e.into()),
            }
        };
        // Exactly that mode, whatever the umask.
        rfs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        for sub in ["upper", "work"] {
            rfs::mkdirat(&fd, sub, Mode::from_raw_mode(0o755))?;
        }
        let record = LayerRecord {
            dir: dir.to_path_buf(),
            started_ns,
        };
        let json = serde_json::to_vec(&record).map_err(io::Error::other)?;
        let out = rfs::openat(
            &fd,
            RECORD,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        std::fs::File::from(out).write_all(&json)?;
        Ok(ReviewLayer {
            path: self.root.join(&id),
            id,
            record,
        })
    }

    /// The layer `id`.
    pub fn get(&self, id: &str) -> io::Result<ReviewLayer> {
        check_name(OsStr::new(id))?;
        let fd = open_dir(&self.root.join(id))?;
        let f = rfs::openat(
            &fd,
            RECORD,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )?;
        let mut json = Vec::new();
        std::fs::File::from(f)
            .take(64 * 1024)
            .read_to_end(&mut json)?;
        let record: LayerRecord = serde_json::from_slice(&json).map_err(|e| {
            invalid(format!(
                "review layer `{id}`: its record is unreadable: {e}"
            ))
        })?;
        Ok(ReviewLayer {
            id: id.to_string(),
            path: self.root.join(id),
            record,
        })
    }

    /// Every layer in the store, oldest first.
    pub fn list(&self) -> io::Result<Vec<ReviewLayer>> {
        let fd = open_dir(&self.root)?;
        let mut ids = Vec::new();
        for e in rfs::Dir::read_from(&fd)? {
            let e = e?;
            let name = e.file_name().to_bytes();
            if name != b"." && name != b".." {
                ids.push(String::from_utf8_lossy(name).into_owned());
            }
        }
        ids.sort();
        Ok(ids.iter().filter_map(|id| self.get(id).ok()).collect())
    }
}

#[path = "review_change.rs"]
mod change;
pub use change::{Change, ChangeKind};
/// What the layer changes, without touching anything.
pub fn changes(layer: &ReviewLayer) -> io::Result<Vec<Change>> {
    walk_layer(layer, false)
}

/// Applies the layer's legitimate changes to its directory; returns every
/// change with what became of it (refusals and conflicts are left out of
/// the directory). The layer itself is left as it is.
pub fn apply(layer: &ReviewLayer) -> io::Result<Vec<Change>> {
    walk_layer(layer, true)
}

/// Removes the layer; the directory is untouched.
pub fn discard(layer: &ReviewLayer) -> io::Result<()> {
    super::remove_tree(&layer.path)
}

fn walk_layer(layer: &ReviewLayer, write: bool) -> io::Result<Vec<Change>> {
    let upper = open_dir(&layer.upper())?;
    let host = open_dir(&layer.record.dir)?;
    let mut w = Walk {
        started_ns: layer.record.started_ns,
        write,
        out: Vec::new(),
        tmp: 0,
    };
    w.dir(upper.as_fd(), Some(host.as_fd()), Path::new(""), 0)?;
    Ok(w.out)
}

struct Walk {
    started_ns: i128,
    write: bool,
    out: Vec<Change>,
    tmp: u32,
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

/// True when the directory `fd` of the layer is opaque (the program
/// deleted the host's and made it again).
fn opaque(fd: BorrowedFd<'_>) -> bool {
    let mut v = [0u8; 4];
    ["user.overlay.opaque", "trusted.overlay.opaque"]
        .iter()
        .any(|k| matches!(rfs::fgetxattr(fd, *k, &mut v), Ok(n) if n >= 1 && v[0] == b'y'))
}

/// A symlink's target stays inside the directory: relative, and never
/// above the directory's top from where the link sits (`depth` dirs down).
fn link_stays_inside(target: &[u8], depth: usize) -> bool {
    if target.first() == Some(&b'/') || target.is_empty() {
        return false;
    }
    let mut level = depth as isize;
    for part in target.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => level -= 1,
            _ => level += 1,
        }
        if level < 0 {
            return false;
        }
    }
    true
}

impl Walk {
    fn push(&mut self, path: PathBuf, kind: ChangeKind) {
        self.out.push(Change { path, kind });
    }

    fn conflict(&self, host: Option<&rfs::Stat>) -> bool {
        host.is_some_and(|st| ctime_ns(st) > self.started_ns)
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
        host: Option<BorrowedFd<'_>>,
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
        host: Option<BorrowedFd<'_>>,
        rel: &Path,
        name: &OsStr,
        depth: usize,
    ) -> io::Result<()> {
        let path = rel.join(name);
        let Some(st) = lstat_at(upper, name)? else {
            return Ok(());
        };
        let on_host = match host {
            Some(h) => lstat_at(h, name)?,
            None => None,
        };
        let host_type = on_host.map(|s| FileType::from_raw_mode(s.st_mode));
        let refuse = |w: &mut Walk, why: &str| {
            w.push(
                path.clone(),
                ChangeKind::Refused {
                    reason: why.to_string(),
                },
            );
            Ok(())
        };
        let ft = FileType::from_raw_mode(st.st_mode);
        match ft {
            FileType::CharacterDevice if st.st_rdev == 0 => {
                // A whiteout: the program deleted the host's entry.
                if on_host.is_none() {
                    return Ok(());
                }
                if self.conflict(on_host.as_ref()) {
                    self.push(path, ChangeKind::Conflict);
                    return Ok(());
                }
                if self.write {
                    let h = host.expect("an entry on the host has its dir");
                    remove_tree_at(
                        h,
                        name,
                        &mut Budget {
                            ..Budget::UNBOUNDED
                        },
                    )?;
                }
                self.push(path, ChangeKind::Deleted);
                Ok(())
            }
            FileType::CharacterDevice | FileType::BlockDevice => refuse(self, "a device file"),
            FileType::Fifo => refuse(self, "a FIFO"),
            FileType::Socket => refuse(self, "a socket"),
            FileType::Unknown => refuse(self, "a file of unknown type"),
            FileType::RegularFile if st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0 => {
                refuse(self, "a setuid or setgid file")
            }
            FileType::RegularFile if st.st_nlink > 1 => refuse(
                self,
                &format!("a hard link ({} names for one file)", st.st_nlink),
            ),
            FileType::Symlink => {
                let target = rfs::readlinkat(upper, name, Vec::new())?;
                if !link_stays_inside(target.to_bytes(), depth) {
                    return refuse(
                        self,
                        &format!(
                            "a symbolic link out of the directory (to `{}`)",
                            target.to_string_lossy()
                        ),
                    );
                }
                self.replace(
                    host,
                    name,
                    path,
                    on_host.as_ref(),
                    st.st_size as u64,
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
                let mode = st.st_mode & 0o777;
                self.replace(
                    host,
                    name,
                    path,
                    on_host.as_ref(),
                    st.st_size as u64,
                    |h, tmp| {
                        let dst = rfs::openat(
                            h,
                            tmp,
                            OFlags::WRONLY
                                | OFlags::CREATE
                                | OFlags::EXCL
                                | OFlags::NOFOLLOW
                                | OFlags::CLOEXEC,
                            Mode::from_raw_mode(0o600),
                        )?;
                        let mut dst = std::fs::File::from(dst);
                        io::copy(&mut std::fs::File::from(src.try_clone()?), &mut dst)?;
                        rfs::fchmod(&dst, Mode::from_raw_mode(mode))?;
                        Ok(())
                    },
                )
            }
            FileType::Directory => {
                if depth + 1 >= MAX_DEPTH {
                    return refuse(self, &format!("a tree deeper than {MAX_DEPTH} levels"));
                }
                let sub = super::open_dir_at(upper, name)?;
                let is_opaque = opaque(sub.as_fd());
                let host_dir = host_type == Some(FileType::Directory);
                if host_dir && !is_opaque {
                    // Merged: only what is inside changed.
                    let h = super::open_dir_at(host.expect("on the host"), name)?;
                    return self.dir(sub.as_fd(), Some(h.as_fd()), &path, depth + 1);
                }
                if self.conflict(on_host.as_ref()) {
                    self.push(path, ChangeKind::Conflict);
                    return Ok(());
                }
                let kind = if on_host.is_some() {
                    ChangeKind::Replaced
                } else {
                    ChangeKind::Added { bytes: 0 }
                };
                let made = match (self.write, host) {
                    (true, Some(h)) => {
                        if on_host.is_some() {
                            remove_tree_at(
                                h,
                                name,
                                &mut Budget {
                                    ..Budget::UNBOUNDED
                                },
                            )?;
                        }
                        rfs::mkdirat(h, name, Mode::from_raw_mode(st.st_mode & 0o777))?;
                        Some(super::open_dir_at(h, name)?)
                    }
                    _ => None,
                };
                self.push(path.clone(), kind);
                self.dir(
                    sub.as_fd(),
                    made.as_ref().map(|f| f.as_fd()),
                    &path,
                    depth + 1,
                )
            }
        }
    }

    /// Puts a new file or link (`make` writes it at a temp name) over
    /// `name` in the host dir, unless that entry changed during the run.
    fn replace(
        &mut self,
        host: Option<BorrowedFd<'_>>,
        name: &OsStr,
        path: PathBuf,
        on_host: Option<&rfs::Stat>,
        bytes: u64,
        make: impl FnOnce(BorrowedFd<'_>, &OsStr) -> io::Result<()>,
    ) -> io::Result<()> {
        if self.conflict(on_host) {
            self.push(path, ChangeKind::Conflict);
            return Ok(());
        }
        let kind = match on_host {
            Some(_) => ChangeKind::Modified { bytes },
            None => ChangeKind::Added { bytes },
        };
        if let (true, Some(h)) = (self.write, host) {
            let tmp = self.tmp_name();
            if let Err(e) = make(h, &tmp) {
                let _ = rfs::unlinkat(h, &tmp, AtFlags::empty());
                return Err(e);
            }
            if on_host.is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory) {
                remove_tree_at(
                    h,
                    name,
                    &mut Budget {
                        ..Budget::UNBOUNDED
                    },
                )?;
            }
            rfs::renameat(h, &tmp, h, name)?;
        }
        self.push(path, kind);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::link_stays_inside;

    #[test]
    fn links_are_judged_by_where_they_sit() {
        assert!(link_stays_inside(b"a/b", 0));
        assert!(link_stays_inside(b"../x", 1));
        assert!(!link_stays_inside(b"../x", 0));
        assert!(!link_stays_inside(b"a/../../x", 0));
        assert!(!link_stays_inside(b"/etc/shadow", 3));
        assert!(!link_stays_inside(b"", 0));
    }
}
