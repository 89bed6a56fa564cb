//! Masks: paths inside granted trees that the sandbox must not see.
//!
//! A [`MaskPattern`] is an absolute path whose components may hold `*`
//! (any run of characters but `/`) and `?` (one character), and whose
//! component `**` stands for any number of directories. [`resolve`] turns
//! the patterns into the paths that exist when a sandbox starts
//! ([`SandboxPolicy::masked`](crate::SandboxPolicy::masked)); a backend
//! covers each with an empty file or directory. A file created later under
//! a matching name is not masked: grant the tree read-only, so that
//! nothing can be created there, or mask its directory.

use std::path::{Component, Path, PathBuf};

/// How many directory entries [`resolve`] looks at, at most, for one
/// spawn: a pattern that would walk more fails the spawn (narrow it).
pub const MAX_MASK_WALK: usize = 100_000;

/// One mask: an absolute path or pattern (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MaskPattern {
    path: PathBuf,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Part {
    Literal(String),
    Glob(String),
    AnyDirs,
}

impl MaskPattern {
    /// Parses an absolute pattern; `.` and `..` components, a relative
    /// path and a non-UTF-8 path are refused.
    pub fn new(path: impl Into<PathBuf>) -> Result<MaskPattern, String> {
        let path: PathBuf = path.into();
        if !path.is_absolute() {
            return Err(format!("mask `{}` is not an absolute path", path.display()));
        }
        let mut parts = Vec::new();
        for c in path.components() {
            match c {
                Component::RootDir => {}
                Component::Normal(s) => {
                    let s = s
                        .to_str()
                        .ok_or_else(|| format!("mask `{}` is not UTF-8", path.display()))?;
                    parts.push(if s == "**" {
                        Part::AnyDirs
                    } else if s.contains(['*', '?']) {
                        if s.contains("**") {
                            return Err(format!(
                                "mask `{}`: `**` must be a whole component",
                                path.display()
                            ));
                        }
                        Part::Glob(s.to_string())
                    } else {
                        Part::Literal(s.to_string())
                    });
                }
                _ => {
                    return Err(format!(
                        "mask `{}` holds `.` or `..`: write the path plainly",
                        path.display()
                    ))
                }
            }
        }
        if parts.is_empty() {
            return Err("a mask of `/` would hide everything".into());
        }
        Ok(MaskPattern { path, parts })
    }

    /// The pattern as written.
    pub fn as_path(&self) -> &Path {
        &self.path
    }

    /// The directory the pattern's walk starts at: its components before
    /// the first wildcard (the whole path when it has none).
    pub fn literal_prefix(&self) -> PathBuf {
        let mut p = PathBuf::from("/");
        for part in &self.parts {
            match part {
                Part::Literal(s) => p.push(s),
                _ => break,
            }
        }
        p
    }

    /// Whether `path` (absolute, plain) matches the pattern.
    pub fn matches(&self, path: &Path) -> bool {
        let names: Vec<&str> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => s.to_str(),
                _ => None,
            })
            .collect();
        match_parts(&self.parts, &names)
    }
}

impl std::fmt::Display for MaskPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.path.display().fmt(f)
    }
}

fn match_parts(parts: &[Part], names: &[&str]) -> bool {
    match (parts.first(), names.first()) {
        (None, None) => true,
        (Some(Part::AnyDirs), _) => {
            match_parts(&parts[1..], names)
                || (!names.is_empty() && match_parts(parts, &names[1..]))
        }
        (Some(Part::Literal(l)), Some(n)) => l == n && match_parts(&parts[1..], &names[1..]),
        (Some(Part::Glob(g)), Some(n)) => {
            glob(g.as_bytes(), n.as_bytes()) && match_parts(&parts[1..], &names[1..])
        }
        _ => false,
    }
}

/// `*` and `?` within one name.
fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

/// The paths `patterns` match now, each inside one of `grants` (the
/// policy's granted trees, canonical): what a backend must cover.
///
/// A match that is a symlink is refused (the link's target is what the
/// sandbox would read: mask the target), and so is a file with more than
/// one hard link (its other names would still show it: mask those, or
/// remove the links). A match inside another match is dropped (covering
/// the outer one hides it). The paths are canonical (a backend may refuse
/// any symlink on the way). A walk never follows a symlink and looks at
/// most at [`MAX_MASK_WALK`] entries in all.
pub fn resolve(patterns: &[MaskPattern], grants: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut found = Vec::new();
    let mut budget = MAX_MASK_WALK;
    for pattern in patterns {
        let start = pattern.literal_prefix();
        if !grants.iter().any(|g| start.starts_with(g)) {
            return Err(format!(
                "mask `{pattern}` lies outside every granted tree: a mask hides a path inside \
                 a grant (`ro`, `rw` or `exec`), grant its tree or drop the mask"
            ));
        }
        let mut stack = vec![start];
        while let Some(path) = stack.pop() {
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(format!(
                        "mask `{pattern}`: cannot inspect `{}`: {e}",
                        path.display()
                    ))
                }
            };
            if pattern.matches(&path) {
                check_match(pattern, &path, &meta)?;
                found.push(canonical_parent(&path).map_err(|e| {
                    format!("mask `{pattern}`: cannot resolve `{}`: {e}", path.display())
                })?);
                continue;
            }
            if !meta.is_dir() || !could_match_below(pattern, &path) {
                continue;
            }
            let entries = std::fs::read_dir(&path)
                .map_err(|e| format!("mask `{pattern}`: cannot list `{}`: {e}", path.display()))?;
            for entry in entries {
                let entry = entry.map_err(|e| {
                    format!("mask `{pattern}`: cannot list `{}`: {e}", path.display())
                })?;
                budget = budget.checked_sub(1).ok_or_else(|| {
                    format!(
                        "mask `{pattern}` would look at more than {MAX_MASK_WALK} entries: \
                         narrow it (start it deeper than `{}`)",
                        pattern.literal_prefix().display()
                    )
                })?;
                stack.push(entry.path());
            }
        }
    }
    found.sort();
    found.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in found {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p);
        }
    }
    Ok(out)
}

fn check_match(pattern: &MaskPattern, path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if meta.file_type().is_symlink() {
        return Err(format!(
            "mask `{pattern}` matches the symlink `{}`: the sandbox would read its target \
             through other names; mask the target instead, or remove the link",
            path.display()
        ));
    }
    if !meta.is_dir() && meta.nlink() > 1 {
        return Err(format!(
            "mask `{pattern}` matches `{}`, which has {} hard links: its other names would \
             still show it; mask them too, or remove the extra links",
            path.display(),
            meta.nlink()
        ));
    }
    Ok(())
}

/// `path` with its parent dir's symlinks resolved (the last component is
/// no symlink, `check_match` made sure): a backend can then open it
/// refusing every symlink, so none put there later moves the mask.
fn canonical_parent(path: &Path) -> std::io::Result<PathBuf> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok(parent.canonicalize()?.join(name)),
        _ => Ok(path.to_path_buf()),
    }
}

/// Whether some path below `dir` could match (prunes the walk).
fn could_match_below(pattern: &MaskPattern, dir: &Path) -> bool {
    let depth = dir.components().count() - 1;
    let mut i = 0;
    for part in &pattern.parts {
        if i >= depth {
            return true;
        }
        match part {
            Part::AnyDirs => return true,
            _ => i += 1,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_documented() {
        let p = MaskPattern::new("/h/**/.env").unwrap();
        assert!(p.matches(Path::new("/h/.env")));
        assert!(p.matches(Path::new("/h/a/b/.env")));
        assert!(!p.matches(Path::new("/h/a/.envrc")));
        assert!(!p.matches(Path::new("/x/.env")));
        let q = MaskPattern::new("/h/*.pem").unwrap();
        assert!(q.matches(Path::new("/h/key.pem")));
        assert!(!q.matches(Path::new("/h/a/key.pem")));
        assert_eq!(q.literal_prefix(), Path::new("/h"));
        assert!(MaskPattern::new("h/x").is_err());
        assert!(MaskPattern::new("/h/../x").is_err());
        assert!(MaskPattern::new("/h/a**").is_err());
        assert!(MaskPattern::new("/").is_err());
    }

    #[test]
    fn resolve_finds_what_exists_and_refuses_what_it_cannot_hide() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("p/sub")).unwrap();
        std::fs::write(root.join("p/.env"), "A=1").unwrap();
        std::fs::write(root.join("p/sub/.env"), "B=2").unwrap();
        std::fs::create_dir(root.join(".ssh")).unwrap();
        std::fs::write(root.join(".ssh/id_rsa"), "k").unwrap();
        let pats = [
            MaskPattern::new(root.join("**/.env")).unwrap(),
            MaskPattern::new(root.join(".ssh")).unwrap(),
            MaskPattern::new(root.join(".ssh/id_rsa")).unwrap(),
            MaskPattern::new(root.join(".aws")).unwrap(),
        ];
        let got = resolve(&pats, std::slice::from_ref(&root)).unwrap();
        assert_eq!(
            got,
            vec![
                root.join(".ssh"),
                root.join("p/.env"),
                root.join("p/sub/.env")
            ]
        );
        // Outside every grant.
        let e = resolve(&pats[..1], &[PathBuf::from("/nonexistent-grant")]).unwrap_err();
        assert!(e.contains("outside every granted tree"), "{e}");
        // A symlink and a hard-linked file are refused.
        std::os::unix::fs::symlink(root.join("p/.env"), root.join("p/sub/link.env")).unwrap();
        let e = resolve(
            &[MaskPattern::new(root.join("p/sub/link.env")).unwrap()],
            std::slice::from_ref(&root),
        )
        .unwrap_err();
        assert!(e.contains("symlink"), "{e}");
        std::fs::hard_link(root.join("p/.env"), root.join("copy")).unwrap();
        let e = resolve(&pats[..1], std::slice::from_ref(&root)).unwrap_err();
        assert!(e.contains("hard links"), "{e}");
    }
}
