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

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
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

    /// Whether `path` (absolute, plain) matches the pattern. Names are
    /// compared as bytes: a name that is not UTF-8 matches `*` and `?`
    /// like any other.
    pub fn matches(&self, path: &Path) -> bool {
        let mut states = self.closure(vec![0]);
        for c in path.components() {
            if let Component::Normal(name) = c {
                states = self.step(&states, name.as_bytes());
            }
        }
        states.contains(&self.parts.len())
    }

    /// How many leading components are literal.
    fn literal_len(&self) -> usize {
        self.parts
            .iter()
            .take_while(|p| matches!(p, Part::Literal(_)))
            .count()
    }

    /// The same pattern with its literal prefix's symlinks resolved where
    /// it exists (a plain path's last component stays as written), as
    /// [`resolve`] walks it: what a canonical path is matched against.
    pub fn resolved(&self) -> MaskPattern {
        let prefix = self.literal_prefix();
        let real = if self.literal_len() == self.parts.len() {
            canonical_parent(&prefix)
        } else {
            prefix.canonicalize()
        };
        let Ok(real) = real else {
            return self.clone();
        };
        // The real prefix stays literal (a directory may be named `a*`).
        let mut parts = Vec::new();
        for c in real.components() {
            if let Component::Normal(n) = c {
                let Some(n) = n.to_str() else {
                    return self.clone(); // a literal part is UTF-8
                };
                parts.push(Part::Literal(n.to_string()));
            }
        }
        let mut path = real;
        for c in self.path.components().skip(1 + self.literal_len()) {
            path.push(c);
        }
        parts.extend(self.parts[self.literal_len()..].iter().cloned());
        MaskPattern { path, parts }
    }

    /// `states` with every state that can skip a `**` (matching no
    /// directory) added: a state is how many parts the names so far have
    /// matched.
    fn closure(&self, mut states: Vec<usize>) -> Vec<usize> {
        let mut i = 0;
        while i < states.len() {
            let s = states[i];
            if matches!(self.parts.get(s), Some(Part::AnyDirs)) && !states.contains(&(s + 1)) {
                states.push(s + 1);
            }
            i += 1;
        }
        states.sort_unstable();
        states
    }

    /// The states after one more name.
    fn step(&self, states: &[usize], name: &[u8]) -> Vec<usize> {
        let mut next = Vec::new();
        for &s in states {
            let to = match self.parts.get(s) {
                Some(Part::Literal(l)) if l.as_bytes() == name => s + 1,
                Some(Part::Glob(g)) if glob(g.as_bytes(), name) => s + 1,
                Some(Part::AnyDirs) => s,
                _ => continue,
            };
            if !next.contains(&to) {
                next.push(to);
            }
        }
        self.closure(next)
    }

    /// Whether a path below one in `states` could still match.
    fn goes_deeper(&self, states: &[usize]) -> bool {
        states.iter().any(|&s| s < self.parts.len())
    }
}

impl std::fmt::Display for MaskPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.path.display().fmt(f)
    }
}

/// `*` and `?` within one name, each standing for whole characters (a
/// byte that is not UTF-8 counts as one). Linear with one backtrack point
/// (a name is the sandbox's to choose: no exponential backtracking).
fn glob(p: &[u8], s: &[u8]) -> bool {
    let char_len = |b: &[u8]| {
        let n = match b.first() {
            Some(&c) if c >= 0xF0 => 4,
            Some(&c) if c >= 0xE0 => 3,
            Some(&c) if c >= 0xC0 => 2,
            _ => 1,
        };
        if b.len() >= n && std::str::from_utf8(&b[..n]).is_ok() {
            n
        } else {
            1
        }
    };
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(b'?') => {
                pi += 1;
                si += char_len(&s[si..]);
            }
            Some(&c) if c == s[si] => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                // Let the last `*` take one more character.
                Some((sp, ss)) => {
                    let next = ss + char_len(&s[ss..]);
                    star = Some((sp, next));
                    pi = sp + 1;
                    si = next;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The paths `patterns` match now, inside `grants` (the policy's granted
/// trees): what a backend must cover, as canonical paths (a backend may
/// then refuse any symlink on the way, so none put there later moves a
/// mask). `scratch` is the sandbox's scratch dir.
///
/// - A pattern's literal prefix is resolved first (`${HOME}` may be a
///   symlink), and must lie inside a grant.
/// - The walk follows a symlinked directory that leads inside a grant (the
///   sandbox can read through it), once per real path and pattern state,
///   so a cycle ends; one that leads elsewhere shows nothing. A directory
///   mounted twice is two paths, each masked.
/// - A match that is a symlink masks its target when that lies inside a
///   grant (the link then shows the empty mask), and so does a symlink
///   inside a masked directory. A trailing `**` masks its directory.
/// - Each match is masked at every path of the granted trees that shows
///   it or part of it (`/proc/self/mountinfo`: a bind mount of it, of a
///   directory above it or of one inside it, checked by inode).
/// - `*` and `?` stand for whole characters, matched in linear time.
/// - A file with more than one hard link is refused, inside a masked
///   directory too (its other names would still show it: mask them too,
///   or remove the links).
/// - A mask at, inside or above the scratch dir is refused (scratch is
///   the sandbox's own, made at each spawn), and so is one under `/proc`
///   (a sandbox's procfs is its own).
/// - A match inside another is dropped (covering the outer one hides it).
/// - The walk, and the check of masked directories, look at most at
///   [`MAX_MASK_WALK`] entries in all; more fails the spawn.
pub fn resolve(
    patterns: &[MaskPattern],
    grants: &[PathBuf],
    scratch: &Path,
) -> Result<Vec<PathBuf>, String> {
    let grants: Vec<PathBuf> = grants
        .iter()
        .map(|g| g.canonicalize().unwrap_or_else(|_| g.clone()))
        .collect();
    let scratch = scratch
        .canonicalize()
        .unwrap_or_else(|_| scratch.to_path_buf());
    let mut walk = Walk {
        grants: &grants,
        budget: MAX_MASK_WALK,
        found: Vec::new(),
        checked: std::collections::HashSet::new(),
    };
    for pattern in patterns {
        walk.pattern(pattern)?;
    }
    let mut found = std::mem::take(&mut walk.found);
    // The same file at another path of a granted tree (a bind mount of it
    // or of a directory above it) is masked there too.
    let mounts = super::reach::Mounts::read()?;
    let mut aliases = Vec::new();
    let id = |p: &Path| {
        std::fs::symlink_metadata(p)
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    for p in &found {
        for (alias, shows) in mounts.aliases(p) {
            if walk.inside(&alias) && id(&alias).is_some() && id(&alias) == id(&shows) {
                aliases.push(alias);
            }
        }
    }
    found.extend(aliases);
    found.sort();
    found.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in found {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p);
        }
    }
    for p in &out {
        if p.starts_with(&scratch) || scratch.starts_with(p) {
            return Err(format!(
                "a mask covers `{}`, at or around the sandbox's scratch dir `{}`: scratch is \
                 the sandbox's own; mask paths inside the granted trees only",
                p.display(),
                scratch.display()
            ));
        }
        if p.starts_with("/proc") {
            return Err(format!(
                "a mask covers `{}`, under /proc: a sandbox sees a procfs of its own; drop the \
                 mask",
                p.display()
            ));
        }
        walk.check_inside(p)?;
    }
    Ok(out)
}

struct Walk<'a> {
    grants: &'a [PathBuf],
    budget: usize,
    found: Vec<PathBuf>,
    /// Masked directories already checked by `no_other_names`.
    checked: std::collections::HashSet<PathBuf>,
}

impl Walk<'_> {
    fn inside(&self, p: &Path) -> bool {
        self.grants.iter().any(|g| p.starts_with(g))
    }

    fn spend(&mut self, what: &dyn std::fmt::Display) -> Result<(), String> {
        self.budget = self.budget.checked_sub(1).ok_or_else(|| {
            format!(
                "{what} would look at more than {MAX_MASK_WALK} entries: narrow it (start it \
                 deeper)"
            )
        })?;
        Ok(())
    }

    fn pattern(&mut self, pattern: &MaskPattern) -> Result<(), String> {
        let prefix = pattern.literal_prefix();
        let outside = || {
            format!(
                "mask `{pattern}` lies outside every granted tree: a mask hides a path inside \
                 a grant (`ro`, `rw` or `exec`), grant its tree or drop the mask"
            )
        };
        let lexical = self.grants.iter().any(|g| prefix.starts_with(g));
        if pattern.literal_len() == pattern.parts.len() {
            // A plain path: the path itself (not what a link there names).
            let path = match canonical_parent(&prefix) {
                Ok(p) => p,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return if lexical { Ok(()) } else { Err(outside()) };
                }
                Err(e) => return Err(format!("mask `{pattern}`: cannot resolve it: {e}")),
            };
            return match std::fs::symlink_metadata(&path) {
                Ok(m) => self.matched(pattern, path, &m),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if lexical || self.inside(&path) {
                        Ok(())
                    } else {
                        Err(outside())
                    }
                }
                Err(e) => Err(format!(
                    "mask `{pattern}`: cannot inspect `{}`: {e}",
                    path.display()
                )),
            };
        }
        let root = match prefix.canonicalize() {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return if lexical { Ok(()) } else { Err(outside()) };
            }
            Err(e) => {
                return Err(format!(
                    "mask `{pattern}`: cannot resolve `{}`: {e}",
                    prefix.display()
                ))
            }
        };
        if !self.inside(&root) {
            return Err(outside());
        }
        let skip = pattern.literal_len();
        let states = pattern.closure(vec![skip]);
        if states.contains(&pattern.parts.len()) {
            // A trailing `**` matches its directory itself: masking it
            // hides what is in it and what would be created there.
            let m = std::fs::symlink_metadata(&root)
                .map_err(|e| cannot(pattern, "inspect", &root, e))?;
            return self.matched(pattern, root, &m);
        }
        // Keyed by path, not inode: a bind mount of a directory elsewhere
        // in the tree is another place the sandbox reads, and needs its
        // own mask. Paths are canonical, so a symlink cycle still ends.
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![(root, states)];
        while let Some((dir, states)) = stack.pop() {
            let meta = match std::fs::metadata(&dir) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(cannot(pattern, "inspect", &dir, e)),
            };
            if !meta.is_dir() || !seen.insert((dir.clone(), states.clone())) {
                continue;
            }
            let entries = std::fs::read_dir(&dir).map_err(|e| cannot(pattern, "list", &dir, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| cannot(pattern, "list", &dir, e))?;
                self.spend(&format_args!("mask `{pattern}`"))?;
                let next = pattern.step(&states, entry.file_name().as_bytes());
                if next.is_empty() {
                    continue;
                }
                let path = entry.path();
                let m = match std::fs::symlink_metadata(&path) {
                    Ok(m) => m,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(cannot(pattern, "inspect", &path, e)),
                };
                if next.contains(&pattern.parts.len()) {
                    self.matched(pattern, path, &m)?;
                } else if pattern.goes_deeper(&next) {
                    if m.file_type().is_symlink() {
                        // Through a link the sandbox reads what it names,
                        // if a grant covers that.
                        if let Ok(target) = path.canonicalize() {
                            if self.inside(&target) {
                                stack.push((target, next));
                            }
                        }
                    } else if m.is_dir() {
                        stack.push((path, next));
                    }
                }
            }
        }
        Ok(())
    }

    /// `path` (its parent canonical) matched: record what to cover.
    fn matched(
        &mut self,
        pattern: &MaskPattern,
        path: PathBuf,
        meta: &std::fs::Metadata,
    ) -> Result<(), String> {
        let (path, meta) = if meta.file_type().is_symlink() {
            let Ok(target) = path.canonicalize() else {
                return Ok(()); // names nothing: nothing to show
            };
            if !self.inside(&target) {
                return Ok(()); // the sandbox cannot read what it names
            }
            let m =
                std::fs::metadata(&target).map_err(|e| cannot(pattern, "inspect", &target, e))?;
            (target, m)
        } else {
            (path, meta.clone())
        };
        if meta.is_dir() {
            self.no_other_names(pattern, &path)?;
        } else if meta.nlink() > 1 {
            return Err(linked(pattern, &path, meta.nlink()));
        }
        self.found.push(path);
        Ok(())
    }

    /// No file inside a masked directory has a name outside it, and what
    /// a symlink inside it names is masked too (where a grant covers it).
    fn no_other_names(&mut self, pattern: &MaskPattern, dir: &Path) -> Result<(), String> {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            if !self.checked.insert(d.clone()) {
                continue;
            }
            for entry in std::fs::read_dir(&d).map_err(|e| cannot(pattern, "list", &d, e))? {
                let entry = entry.map_err(|e| cannot(pattern, "list", &d, e))?;
                self.spend(&format_args!("checking the links in mask `{pattern}`"))?;
                let path = entry.path();
                let mut m = std::fs::symlink_metadata(&path)
                    .map_err(|e| cannot(pattern, "inspect", &path, e))?;
                let mut path = path;
                if m.file_type().is_symlink() {
                    let Some(target) = path.canonicalize().ok().filter(|t| self.inside(t)) else {
                        continue; // names nothing the sandbox could read
                    };
                    m = std::fs::metadata(&target)
                        .map_err(|e| cannot(pattern, "inspect", &target, e))?;
                    self.found.push(target.clone());
                    path = target;
                }
                if m.is_dir() {
                    stack.push(path);
                } else if m.nlink() > 1 {
                    return Err(linked(pattern, &path, m.nlink()));
                }
            }
        }
        Ok(())
    }

    fn check_inside(&self, p: &Path) -> Result<(), String> {
        if self.inside(p) {
            Ok(())
        } else {
            Err(format!(
                "a mask resolved to `{}`, outside every granted tree",
                p.display()
            ))
        }
    }
}

fn cannot(pattern: &MaskPattern, what: &str, path: &Path, e: std::io::Error) -> String {
    format!("mask `{pattern}`: cannot {what} `{}`: {e}", path.display())
}

fn linked(pattern: &MaskPattern, path: &Path, n: u64) -> String {
    format!(
        "mask `{pattern}` covers `{}`, which has {n} hard links: its other names would still \
         show it; mask them too, or remove the extra links",
        path.display()
    )
}

/// `path` with its parent dir's symlinks resolved (the last component
/// stays as it is).
fn canonical_parent(path: &Path) -> std::io::Result<PathBuf> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok(parent.canonicalize()?.join(name)),
        _ => Ok(path.to_path_buf()),
    }
}

#[cfg(test)]
#[path = "mask_tests.rs"]
mod tests;
