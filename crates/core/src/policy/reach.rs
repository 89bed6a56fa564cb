//! A policy file must lie out of the sandbox's reach: a program that can
//! write the file, a file it `extends`, or any symlink on the way to them
//! would choose the grants of its own next run.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::file::{PolicyError, PolicyFile, ScratchSetting};

/// How many symlinks a lookup follows (the kernel's limit).
const MAX_LINKS: usize = 40;

impl PolicyFile {
    /// No file this policy was read from may be reachable for writing by
    /// the sandbox: the file, each directory its lookup passes through,
    /// and each symlink on the way (by where the link itself lies) must
    /// lie outside its `rw` grants, its `scratch` dir and `extra` (the
    /// caller's other writable places). Compared by device and inode, and
    /// by the place in the filesystem each path's mount shows
    /// (`/proc/self/mountinfo`), so a symlink or a bind mount of a granted
    /// directory, or of a directory inside one, is caught too.
    /// [`PolicyFile::apply`] calls it; call it again when you add writable
    /// places afterwards. Another sandbox that may write there is not
    /// something this run can see: keep policy files where no sandbox
    /// writes.
    pub fn check_out_of_reach(&self, extra: &[PathBuf]) -> Result<(), PolicyError> {
        let scratch = self.scratch.iter().filter_map(|s| match &s.value {
            ScratchSetting::Dir(d) => Some(d.as_path()),
            _ => None,
        });
        let first = self.files.first().cloned().unwrap_or_default();
        let mounts = Mounts::read().map_err(|message| PolicyError {
            file: first,
            line: None,
            key: None,
            message,
        })?;
        let places: Vec<(Place, &Path)> = self
            .read_write
            .iter()
            .map(|e| e.value.as_path())
            .chain(scratch)
            .chain(extra.iter().map(PathBuf::as_path))
            .flat_map(|w| Place::writable(w, &mounts).into_iter().map(move |p| (p, w)))
            .collect();
        for f in &self.files {
            for step in lookup_chain(f) {
                let Some(here) = Place::step(&step, &mounts) else {
                    continue;
                };
                let Some((_, w)) = places.iter().find(|(p, _)| here.is_within(p)) else {
                    continue;
                };
                let by = self.read_write.iter().find(|e| e.value == *w);
                let (file, line, key, whence) = match by {
                    Some(e) => (&e.origin.file, Some(e.origin.line), Some("fs.rw"), ""),
                    None => (f, None, None, " (granted outside this policy)"),
                };
                return Err(PolicyError {
                    file: file.clone(),
                    line,
                    key: key.map(str::to_string),
                    message: format!(
                        "the policy file `{}` lies inside `{}` (by `{}`), which the sandbox \
                         may write{whence}: the program could rewrite the policy of its next \
                         run; keep policy files, and any symlink to them, outside every `rw` \
                         grant and the scratch dir",
                        f.display(),
                        w.display(),
                        step.display()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Every directory a lookup of `path` passes through (as real paths), the
/// symlinks it follows and the file it ends at.
fn lookup_chain(path: &Path) -> Vec<PathBuf> {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut todo: Vec<OsString> = Vec::new();
    let push = |todo: &mut Vec<OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(n.to_os_string()),
                Component::ParentDir => todo.push("..".into()),
                _ => {}
            }
        }
    };
    push(&mut todo, &path);
    let (mut cur, mut out, mut links) = (PathBuf::from("/"), Vec::new(), 0);
    while let Some(name) = todo.pop() {
        if name == ".." {
            cur.pop();
            continue;
        }
        out.push(cur.clone());
        let next = cur.join(&name);
        let link = std::fs::symlink_metadata(&next)
            .ok()
            .filter(|m| m.file_type().is_symlink() && links < MAX_LINKS)
            .and_then(|_| std::fs::read_link(&next).ok());
        match link {
            Some(target) => {
                links += 1;
                out.push(next);
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push(&mut todo, &target);
            }
            None => cur = next,
        }
    }
    out.push(cur);
    out
}

/// Where a path is: its inode, and its place in its filesystem.
struct Place {
    id: Option<(u64, u64)>,
    /// The mount's device (`major:minor`) and the path inside that
    /// filesystem.
    in_fs: Option<(String, PathBuf)>,
}

impl Place {
    /// A step of a lookup (a real path; a symlink is taken as itself:
    /// where it lies is what matters).
    fn step(path: &Path, mounts: &Mounts) -> Option<Place> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Some(Place {
            id: Some((m.dev(), m.ino())),
            in_fs: mounts.locate(path),
        })
    }

    /// A place the sandbox may write: what `path` names (a grant follows
    /// symlinks), and every mount below it (writable through it too).
    fn writable(path: &Path, mounts: &Mounts) -> Vec<Place> {
        let (Ok(m), Ok(real)) = (std::fs::metadata(path), path.canonicalize()) else {
            return Vec::new();
        };
        let mut out = vec![Place {
            id: Some((m.dev(), m.ino())),
            in_fs: mounts.locate(&real),
        }];
        for below in mounts
            .0
            .iter()
            .filter(|b| b.at.starts_with(&real) && b.at != real)
        {
            out.push(Place {
                id: None,
                in_fs: Some((below.dev.clone(), below.root.clone())),
            });
        }
        out
    }

    /// Whether this is `dir`, or inside it.
    fn is_within(&self, dir: &Place) -> bool {
        if self.id.is_some() && self.id == dir.id {
            return true;
        }
        match (&self.in_fs, &dir.in_fs) {
            (Some((dev, p)), Some((d, w))) => dev == d && p.starts_with(w),
            _ => false,
        }
    }
}

use crate::mountinfo::Mount;

/// This process's mounts, from `/proc/self/mountinfo`.
pub(super) struct Mounts(Vec<Mount>);

impl Mounts {
    /// Reads them. On Linux an unreadable mountinfo is an error (a check
    /// that needs it must not pass without it); elsewhere there is none,
    /// and only inodes are compared.
    pub(super) fn read() -> Result<Mounts, String> {
        match crate::mountinfo::read() {
            Ok(m) => Ok(Mounts(m)),
            Err(_) if !cfg!(target_os = "linux") => Ok(Mounts(Vec::new())),
            Err(e) => Err(format!("cannot read /proc/self/mountinfo: {e}")),
        }
    }

    /// The mount a real path is on: by its mount ID where the kernel says
    /// it (`statx`, Linux 5.8), else the deepest mount point above it (the
    /// last listed: it is on top).
    fn mount_of(&self, path: &Path) -> Option<&Mount> {
        if let Some(id) = mount_id(path) {
            if let Some(m) = self.0.iter().find(|m| m.id == id) {
                return Some(m);
            }
        }
        crate::mountinfo::holding(&self.0, path)
    }

    /// The device and the path inside its filesystem of a real path.
    pub(super) fn locate(&self, path: &Path) -> Option<(String, PathBuf)> {
        let m = self.mount_of(path)?;
        let rest = path.strip_prefix(&m.at).ok()?;
        Some((m.dev.clone(), m.root.join(rest)))
    }

    /// The other paths of this namespace that show the file at the real
    /// path `path`, or part of it: a bind mount of it or of a directory
    /// above it (the alias shows `path` itself), and a bind mount of a
    /// directory inside it. Each comes with the path under `path` it
    /// should show, for the caller to compare inodes.
    pub(super) fn aliases(&self, path: &Path) -> Vec<(PathBuf, PathBuf)> {
        let Some((dev, inner)) = self.locate(path) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for m in self.0.iter().filter(|m| m.dev == dev) {
            if let Ok(rest) = inner.strip_prefix(&m.root) {
                out.push((m.at.join(rest), path.to_path_buf()));
            } else if let Ok(rest) = m.root.strip_prefix(&inner) {
                out.push((m.at.clone(), path.join(rest)));
            }
        }
        out.retain(|(alias, _)| alias != path);
        out
    }
}

#[cfg(target_os = "linux")]
fn mount_id(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statx` is plain data; all-zero is a valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct we own.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_MNT_ID,
            &mut st,
        )
    };
    (r == 0 && st.stx_mask & libc::STATX_MNT_ID != 0).then_some(st.stx_mnt_id)
}

#[cfg(not(target_os = "linux"))]
fn mount_id(_: &Path) -> Option<u64> {
    None
}
