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
        let mounts = Mounts::read();
        let places: Vec<(Place, &Path)> = self
            .read_write
            .iter()
            .map(|e| e.value.as_path())
            .chain(scratch)
            .chain(extra.iter().map(PathBuf::as_path))
            .filter_map(|w| Place::of(w, &mounts).map(|p| (p, w)))
            .collect();
        for f in &self.files {
            for step in lookup_chain(f) {
                let Some(here) = Place::of(&step, &mounts) else {
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
    id: (u64, u64),
    /// The mount's device (`major:minor`) and the path inside that
    /// filesystem.
    in_fs: Option<(String, PathBuf)>,
}

impl Place {
    fn of(path: &Path, mounts: &Mounts) -> Option<Place> {
        let m = std::fs::symlink_metadata(path).ok()?;
        let real = match path.canonicalize() {
            Ok(r) => r,
            Err(_) => path.to_path_buf(), // a dangling link: where it lies
        };
        Some(Place {
            id: (m.dev(), m.ino()),
            in_fs: mounts.locate(&real),
        })
    }

    /// Whether this is `dir`, or inside it.
    fn is_within(&self, dir: &Place) -> bool {
        if self.id == dir.id {
            return true;
        }
        match (&self.in_fs, &dir.in_fs) {
            (Some((dev, p)), Some((d, w))) => dev == d && p.starts_with(w),
            _ => false,
        }
    }
}

/// This process's mounts: `(device, root in its fs, mount point)`.
struct Mounts(Vec<(String, PathBuf, PathBuf)>);

impl Mounts {
    fn read() -> Mounts {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Mounts(
            text.lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    Some((
                        f.get(2)?.to_string(),
                        PathBuf::from(unescape(f.get(3)?)),
                        PathBuf::from(unescape(f.get(4)?)),
                    ))
                })
                .collect(),
        )
    }

    /// The device and the path inside its filesystem of a real path: by
    /// the deepest mount point above it (the last listed: it is on top).
    fn locate(&self, real: &Path) -> Option<(String, PathBuf)> {
        let (dev, root, at) = self
            .0
            .iter()
            .filter(|(_, _, at)| real.starts_with(at))
            .max_by_key(|(_, _, at)| at.components().count())?;
        let rest = real.strip_prefix(at).ok()?;
        Some((dev.clone(), root.join(rest)))
    }
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}
