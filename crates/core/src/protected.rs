//! [`RunnerConfig::protected`](crate::RunnerConfig::protected): host paths
//! no sandbox may write, and the check each sandboxed spawn makes of its
//! writable places against them.
//!
//! Paths are compared by what they are, not how they are spelled: a
//! writable place is refused when it is the protected dir, lies inside
//! it, or holds it, as the filesystem says by device and inode along
//! each one's ancestors, so a bind mount of an ancestor (`/mnt/h` of
//! `~`), a symlink or `..` in either spelling changes nothing. A
//! protected path that goes through a symlink which itself sits in a
//! writable place is refused too: the sandbox could point it elsewhere,
//! and the next run would use what it points to. A protected path that
//! does not exist yet is checked by its nearest existing ancestor.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::SpawnError;

/// A directory's identity: device and inode.
type Id = (u64, u64);

fn id(path: &Path) -> Option<Id> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// `path` made real: canonical where it exists, else its nearest existing
/// ancestor's canonical path with the rest appended.
fn real_path(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(c) = at.canonicalize() {
            return rest.iter().rev().fold(c, |p, name| p.join(name));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The identities of the existing dirs from real path `path` up to `/`.
fn ancestry(path: &Path) -> Vec<Id> {
    path.ancestors().filter_map(id).collect()
}

/// Whether the dir with identity `dir` is `path` or one of its
/// ancestors (by identity: a bind mount of one counts).
fn holds(dir: Id, path_ancestry: &[Id]) -> bool {
    path_ancestry.contains(&dir)
}

/// Refuses a writable place of a sandbox (`writable`: what it is, its
/// path) that reaches one of `protected` (see the module docs).
pub(crate) fn refuse<'a>(
    protected: &[PathBuf],
    writable: impl Iterator<Item = (&'static str, &'a Path)>,
) -> Result<(), SpawnError> {
    if protected.is_empty() {
        return Ok(());
    }
    let writable: Vec<(&str, &Path, Option<Id>, Vec<Id>)> = writable
        .map(|(what, w)| {
            let real = real_path(w);
            (what, w, id(&real), ancestry(&real))
        })
        .collect();
    for p in protected {
        let real = real_path(p);
        let p_ancestry = ancestry(&real);
        let p_id = id(&real);
        for (what, w, w_id, w_ancestry) in &writable {
            // The writable place is the protected dir or holds it, or
            // lies inside it.
            let reaches = w_id.is_some_and(|w| holds(w, &p_ancestry))
                || p_id.is_some_and(|p| holds(p, w_ancestry));
            // A symlink on the protected path's way that a sandbox could
            // re-point: one that sits in a writable place.
            let relinkable = symlinks_on_the_way(p)
                .into_iter()
                .find(|link| w_id.is_some_and(|w| holds(w, &ancestry(&real_path(link)))));
            if reaches || relinkable.is_some() {
                let how = match relinkable {
                    Some(link) if !reaches => format!(
                        " through the symlink `{}` it could point elsewhere",
                        link.display()
                    ),
                    _ => String::new(),
                };
                return Err(SpawnError::InvalidSpec(format!(
                    "the {what} `{}` reaches `{}`{how}, which no sandbox may write (the \
                     conformance report cache: a sandbox that wrote there could plant a report \
                     admitting a backend that does not conform); grant a narrower path, or point \
                     XDG_CACHE_HOME somewhere no grant reaches",
                    w.display(),
                    p.display()
                )));
            }
        }
    }
    Ok(())
}

/// The dir each symlink on `path`'s way sits in, as spelled (each prefix
/// of `path` that is a symlink gives its parent dir).
fn symlinks_on_the_way(path: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut at = PathBuf::new();
    for c in path.components() {
        at.push(c);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            if let Some(parent) = at.parent() {
                out.push(parent.to_path_buf());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(protected: &Path, writable: &Path) -> bool {
        refuse(
            &[protected.to_path_buf()],
            std::iter::once(("read-write grant", writable)),
        )
        .is_err()
    }

    #[test]
    fn ancestors_insides_and_aliases_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        let cache = home.join(".cache/cordon");
        std::fs::create_dir_all(cache.join("sub")).unwrap();
        let beside = home.join("beside");
        std::fs::create_dir(&beside).unwrap();
        assert!(refused(&cache, &home));
        assert!(refused(&cache, &cache));
        assert!(refused(&cache, &cache.join("sub")));
        assert!(refused(&cache, &home.join(".cache/cordon/../cordon/sub")));
        assert!(!refused(&cache, &beside));
        // A symlink to an ancestor is the ancestor.
        let alias = d.path().join("alias");
        std::os::unix::fs::symlink(&home, &alias).unwrap();
        assert!(refused(&cache, &alias));
        // Not there yet: its nearest existing ancestor stands in.
        let later = home.join(".cache/later/cordon");
        assert!(refused(&later, &home.join(".cache")));
        assert!(!refused(&later, &beside));
    }

    #[test]
    fn a_symlink_on_the_way_that_a_grant_holds_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let project = d.path().join("project");
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(elsewhere.join("cordon")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, project.join("cache")).unwrap();
        let cache = project.join("cache/cordon");
        // The grant does not hold the cache's real dir, but holds the link.
        assert!(refused(&cache, &project));
        assert!(!refused(&elsewhere.join("cordon"), &project));
    }
}
