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
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{self as rfs, FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};

use super::{check_name, euid, open_dir};

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
    /// Takes the layer for this process (an exclusive `flock` on its
    /// directory, held until the fd is dropped): a run holds its layers
    /// until the program has ended and they are dealt with, so no one
    /// lists, applies or discards a layer a program may still write.
    /// Fails at once when another holds it.
    pub fn lock(&self) -> io::Result<OwnedFd> {
        let fd = open_dir(&self.path)?;
        rfs::flock(&fd, FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            if e == rustix::io::Errno::WOULDBLOCK {
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "review layer `{}` is in use (its run has not ended)",
                        self.id
                    ),
                )
            } else {
                e.into()
            }
        })?;
        Ok(fd)
    }

    /// After the run: the layer's directory 0700, so the sandbox's uid
    /// (which a passable store let through while it mounted the overlay)
    /// has no way in any more, whoever gets that uid next.
    pub fn seal(&self) -> io::Result<()> {
        let fd = open_dir(&self.path)?;
        rfs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
        Ok(())
    }

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
            // The kernel's generator, a fixed system device (no user
            // shapes it).
            std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
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

#[path = "review_walk.rs"]
mod walk;
use walk::walk_layer;

#[cfg(test)]
mod tests {
    use super::walk::link_stays_inside;

    #[test]
    fn links_are_judged_by_where_they_sit() {
        assert!(link_stays_inside(b"a/b", 0));
        assert!(link_stays_inside(b"../x", 1));
        assert!(!link_stays_inside(b"../x", 0));
        assert!(!link_stays_inside(b"a/../../x", 0));
        assert!(!link_stays_inside(b"/etc/shadow", 3));
        assert!(!link_stays_inside(b"", 0));
        // `..` only leading: after a name it could climb through a link.
        assert!(!link_stays_inside(b"sub/q/../../x", 3));
        assert!(link_stays_inside(b"../../a/b", 2));
    }
}
