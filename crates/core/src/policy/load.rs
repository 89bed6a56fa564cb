//! Reading policy files from disk (`extends`, ownership), merging them,
//! and what a merged policy means: [`PolicyFile::apply`] and
//! [`PolicyFile::check`].

use std::ffi::{CString, OsString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::file::{
    parse, EnvValue, Expansions, Origin, PolicyError, PolicyFile, ScratchSetting,
    MAX_EXTENDS_DEPTH, MAX_POLICY_BYTES,
};
use super::LimitScope;
use crate::spawn::RunnerConfig;
use crate::spec::{ChildSpec, Scratch};

fn error(file: &Path, line: Option<usize>, key: Option<&str>, message: String) -> PolicyError {
    PolicyError {
        file: file.to_path_buf(),
        line,
        key: key.map(str::to_string),
        message,
    }
}

impl PolicyFile {
    /// Reads `path` and the files it `extends` (depth first, each before
    /// the file that extends it; at most [`MAX_EXTENDS_DEPTH`] deep, a
    /// cycle is an error) and merges them. A file, or any directory above
    /// it, that a user other than this one and root could write is
    /// refused (group- or world-writable, or owned by another user; a
    /// sticky directory such as `/tmp` may hold it): whoever can write
    /// the policy decides what the sandbox may touch. Masks are checked
    /// against the grants by [`PolicyFile::apply`] (which knows every
    /// grant) or [`PolicyFile::check_masks`].
    pub fn load(path: &Path, vars: &Expansions) -> Result<PolicyFile, PolicyError> {
        load_one(path, vars, &mut Vec::new())
    }

    /// Adds `later` on top of `self`: lists add up (a repeated entry is
    /// kept once, with its first line), a setting `later` makes wins.
    pub fn merge(&mut self, later: PolicyFile) {
        fn add<T: PartialEq>(
            to: &mut Vec<super::file::Entry<T>>,
            from: Vec<super::file::Entry<T>>,
        ) {
            for e in from {
                if !to.iter().any(|t| t.value == e.value) {
                    to.push(e);
                }
            }
        }
        self.files.extend(later.files);
        add(&mut self.read_only, later.read_only);
        add(&mut self.read_write, later.read_write);
        add(&mut self.read_write_review, later.read_write_review);
        add(&mut self.executable, later.executable);
        add(&mut self.masks, later.masks);
        add(&mut self.env_pass, later.env_pass);
        add(&mut self.network, later.network);
        add(&mut self.rules, later.rules);
        if later.upstream_ca.is_some() {
            self.upstream_ca = later.upstream_ca;
        }
        self.secrets.extend(later.secrets);
        self.env_set.extend(later.env_set);
        let (l, n) = (&mut self.limits, later.limits);
        for (to, from) in [
            (&mut l.memory_bytes, n.memory_bytes),
            (&mut l.cpu_ms, n.cpu_ms),
            (&mut l.max_processes, n.max_processes),
            (&mut l.disk_bytes, n.disk_bytes),
            (&mut l.open_files, n.open_files),
            (&mut l.file_size_bytes, n.file_size_bytes),
        ] {
            if from.is_some() {
                *to = from;
            }
        }
        l.scopes.extend(n.scopes);
        if later.tty.is_some() {
            self.tty = later.tty;
        }
        if later.timeout.is_some() {
            self.timeout = later.timeout;
        }
        if later.scratch.is_some() {
            self.scratch = later.scratch;
        }
    }

    /// Masks a program could move out of their pattern's reach for later
    /// runs, as warnings (one line each): a mask inside a place the
    /// sandbox may write (this policy's `rw` grants and `extra`) with a
    /// directory between the two that is not `**`. The mount itself cannot
    /// be renamed, but a directory above it can, with the mount inside;
    /// the next run's pattern then misses the new name.
    pub fn movable_masks(&self, extra: &[PathBuf]) -> Vec<String> {
        let writable: Vec<&Path> = self
            .read_write
            .iter()
            .map(|e| e.value.as_path())
            .chain(extra.iter().map(PathBuf::as_path))
            .collect();
        let mut out = Vec::new();
        for m in &self.masks {
            let path = m.value.as_path();
            let Some(w) = writable.iter().find(|w| path.starts_with(w)) else {
                continue;
            };
            let Ok(rest) = path.strip_prefix(w) else {
                continue;
            };
            let dirs: Vec<_> = rest.components().collect();
            let fixed = dirs
                .iter()
                .take(dirs.len().saturating_sub(1))
                .any(|c| c.as_os_str() != "**");
            if fixed {
                out.push(format!(
                    "{}: mask `{}` lies inside `{}`, which the sandbox may write: a program can \
                     rename a directory above what it hides, and a later run's mask then misses \
                     it; keep secrets out of writable trees, or write the mask as `{}/**/{}`",
                    m.origin,
                    m.value,
                    w.display(),
                    w.display(),
                    rest.file_name()
                        .map_or("NAME".into(), |n| n.to_string_lossy())
                ));
            }
        }
        out
    }

    /// Every mask must start inside a directory this policy (or `extra`,
    /// the caller's other grants) grants: a mask elsewhere hides nothing
    /// the sandbox could read, and is most likely a typo.
    pub fn check_masks(&self, extra: &[PathBuf]) -> Result<(), PolicyError> {
        let grants: Vec<&Path> = self
            .read_only
            .iter()
            .chain(&self.read_write)
            .chain(&self.executable)
            .map(|e| e.value.as_path())
            .chain(extra.iter().map(PathBuf::as_path))
            .collect();
        for m in &self.masks {
            let prefix = m.value.literal_prefix();
            if !grants.iter().any(|g| prefix.starts_with(g)) {
                return Err(error(
                    &m.origin.file,
                    Some(m.origin.line),
                    Some("fs.mask"),
                    format!(
                        "mask `{}` lies outside every grant: a mask hides a path inside an \
                         `ro`, `rw` or `exec` tree; grant its tree or drop the mask",
                        m.value
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Puts the policy into a runner's config and a spec: grants, masks
    /// and network into `config`; limits and the timeout as its ceilings
    /// (a limit the policy sets holds for the sandbox as a whole unless
    /// its `*_scope` says `process`); environment and scratch into `spec`.
    /// The masks are checked against every grant `config` then holds.
    pub fn apply(
        &self,
        config: &mut RunnerConfig,
        spec: &mut ChildSpec,
    ) -> Result<(), PolicyError> {
        let values = |v: &[super::file::Entry<PathBuf>]| {
            v.iter().map(|e| e.value.clone()).collect::<Vec<_>>()
        };
        config.read_only.extend(values(&self.read_only));
        config.read_write.extend(values(&self.read_write));
        config.executable.extend(values(&self.executable));
        config
            .masks
            .extend(self.masks.iter().map(|m| m.value.clone()));
        if !self.network.is_empty() {
            config.network = config
                .network
                .with_hosts(self.network.iter().map(|e| e.value.clone()));
        }
        let (c, l) = (&mut config.ceilings, &self.limits);
        let scope = |name: &str| l.scopes.get(name).map(|e| e.value);
        let set = |to: &mut Option<u64>, from: &Option<super::file::Entry<u64>>| {
            if let Some(e) = from {
                *to = Some(e.value);
            }
        };
        set(&mut c.memory_bytes, &l.memory_bytes);
        set(&mut c.cpu_ms, &l.cpu_ms);
        set(&mut c.max_processes, &l.max_processes);
        set(&mut c.disk_bytes, &l.disk_bytes);
        set(&mut c.open_files, &l.open_files);
        set(&mut c.file_size_bytes, &l.file_size_bytes);
        for (name, given, to) in [
            ("memory", l.memory_bytes.is_some(), &mut c.scopes.memory),
            ("cpu", l.cpu_ms.is_some(), &mut c.scopes.cpu),
            (
                "processes",
                l.max_processes.is_some(),
                &mut c.scopes.processes,
            ),
            ("disk", l.disk_bytes.is_some(), &mut c.scopes.disk),
        ] {
            match (scope(name), given) {
                (Some(s), _) => *to = s,
                (None, true) => *to = LimitScope::Sandbox,
                (None, false) => {}
            }
        }
        if let Some(t) = &self.timeout {
            c.deadline = Some(t.value);
        }
        for p in &self.env_pass {
            spec.pass_env.push(OsString::from(&p.value));
        }
        for (k, v) in &self.env_set {
            match &v.value {
                EnvValue::Text(t) => spec.env.push((k.into(), t.into())),
                EnvValue::InScratch(rel) => spec.env_in_scratch.push((k.into(), rel.clone())),
            }
        }
        if let Some(s) = &self.scratch {
            spec.scratch = match &s.value {
                ScratchSetting::Fresh => Scratch::Fresh,
                ScratchSetting::Keep => Scratch::FreshKept,
                ScratchSetting::Dir(d) => Scratch::Existing(d.clone()),
            };
        }
        let mut grants = config.read_only.clone();
        grants.extend(config.read_write.iter().cloned());
        grants.extend(config.executable.iter().cloned());
        self.check_masks(&grants)?;
        let mut writable = config.read_write.clone();
        if let Scratch::Existing(d) = &spec.scratch {
            writable.push(d.clone());
        }
        self.check_out_of_reach(&writable)
    }

    /// Would `path` be reachable with `access` under this policy, and by
    /// which line (or hidden by which mask)? Answers for the policy's own
    /// grants only: the scratch dir and the backend's system set (its
    /// docs list them) are granted apart from any policy. Symlinks are
    /// resolved where the path exists, as a backend resolves grants. The
    /// answer comes from the patterns: at spawn a mask also covers what a
    /// matched symlink names and other mounts of a match, which this does
    /// not report.
    pub fn check(&self, path: &Path, access: Access) -> Answer {
        let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let path = real(path);
        for m in &self.masks {
            let pattern = m.value.resolved();
            let hit = path.ancestors().find(|a| pattern.matches(a));
            if let Some(hit) = hit {
                return Answer {
                    allowed: false,
                    by: Some(m.origin.clone()),
                    why: format!(
                        "masked by `{}` (it covers `{}` if that exists when the sandbox \
                         starts)",
                        m.value,
                        hit.display()
                    ),
                };
            }
        }
        // The closest grant decides (a deeper rule is more specific), but
        // Landlock adds rights down the tree: any covering grant with the
        // access allows it.
        let covering = |list: &[super::file::Entry<PathBuf>]| {
            list.iter()
                .filter(|e| path.starts_with(real(&e.value)))
                .max_by_key(|e| e.value.components().count())
                .cloned()
        };
        let (ro, rw, ex) = (
            covering(&self.read_only),
            covering(&self.read_write),
            covering(&self.executable),
        );
        let pick = match access {
            Access::Read => [ex.clone(), rw.clone(), ro.clone()]
                .into_iter()
                .flatten()
                .next(),
            Access::Write => rw.clone(),
            // A read-only directory grant includes execute, a read-only
            // file grant does not; a read-write grant never does.
            Access::Execute => ex
                .clone()
                .or_else(|| ro.clone().filter(|e| real(&e.value).is_dir())),
        };
        match pick {
            Some(e) => Answer {
                allowed: true,
                by: Some(e.origin.clone()),
                why: format!("granted by `{}`", e.value.display()),
            },
            None => {
                let held = [("ro", &ro), ("rw", &rw), ("exec", &ex)]
                    .into_iter()
                    .find_map(|(k, e)| e.as_ref().map(|e| (k, e)));
                Answer {
                    allowed: false,
                    by: held.map(|(_, e)| e.origin.clone()),
                    why: match held {
                        Some((k, e)) => format!(
                            "`{}` is granted `{k}` only, which does not allow {}",
                            e.value.display(),
                            access.as_str()
                        ),
                        None => "no grant of this policy covers it (the scratch dir and the \
                                 backend's system set are granted apart from any policy)"
                            .into(),
                    },
                }
            }
        }
    }
}

/// What [`PolicyFile::check`] asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reading.
    Read,
    /// Writing (creating, removing).
    Write,
    /// Executing.
    Execute,
}

impl Access {
    fn as_str(self) -> &'static str {
        match self {
            Access::Read => "reading",
            Access::Write => "writing",
            Access::Execute => "executing",
        }
    }
}

/// [`PolicyFile::check`]'s answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Answer {
    /// Whether the access is allowed.
    pub allowed: bool,
    /// The line that decided (a grant, or the mask that hides it).
    pub by: Option<Origin>,
    /// Why, in words.
    pub why: String,
}

fn load_one(
    path: &Path,
    vars: &Expansions,
    stack: &mut Vec<PathBuf>,
) -> Result<PolicyFile, PolicyError> {
    let canonical = path.canonicalize().map_err(|e| {
        error(
            path,
            None,
            None,
            format!("cannot read the policy file: {e}"),
        )
    })?;
    if stack.contains(&canonical) {
        return Err(error(
            path,
            None,
            Some("extends"),
            format!(
                "`extends` makes a cycle: {} -> {}",
                stack
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" -> "),
                canonical.display()
            ),
        ));
    }
    if stack.len() >= MAX_EXTENDS_DEPTH {
        return Err(error(
            path,
            None,
            Some("extends"),
            format!("`extends` goes more than {MAX_EXTENDS_DEPTH} files deep"),
        ));
    }
    let text = read_trusted(&canonical).map_err(|m| error(path, None, None, m))?;
    let (own, extends) = parse(&text, path, vars)?;
    // Relative to the file's real directory: a symlink to a policy file
    // extends what sits beside the file, not beside the link.
    let dir = canonical.parent().unwrap_or(Path::new("/")).to_path_buf();
    stack.push(canonical);
    let mut merged = PolicyFile::default();
    for e in extends {
        let target = dir.join(&e.value);
        let base = load_one(&target, vars, stack).map_err(|mut err| {
            if err.line.is_none() && err.file == target {
                err.message = format!("{} (extended from {})", err.message, e.origin);
            }
            err
        })?;
        merged.merge(base);
    }
    stack.pop();
    merged.merge(own);
    Ok(merged)
}

/// Reads a policy file that only this user or root could have written:
/// opened from `/` one component at a time (`O_NOFOLLOW`), each directory
/// and the file checked on the fd that is then used.
fn read_trusted(path: &Path) -> Result<String, String> {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let open = |dir: Option<&OwnedFd>, name: &std::ffi::OsStr, flags: libc::c_int| {
        let c = CString::new(name.as_bytes()).map_err(|_| "a path with a NUL byte".to_string())?;
        let at = dir.map_or(libc::AT_FDCWD, std::os::fd::AsRawFd::as_raw_fd);
        // SAFETY: a NUL-terminated name and an fd we hold.
        let fd =
            unsafe { libc::openat(at, c.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) };
        if fd < 0 {
            Err(format!(
                "cannot open `{}`: {}",
                name.to_string_lossy(),
                std::io::Error::last_os_error()
            ))
        } else {
            // SAFETY: a fresh fd we own.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    };
    let stat = |fd: &OwnedFd| {
        // SAFETY: `stat` is plain data; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on an fd we hold into a zeroed struct.
        if unsafe { libc::fstat(std::os::fd::AsRawFd::as_raw_fd(fd), &mut st) } < 0 {
            Err(std::io::Error::last_os_error().to_string())
        } else {
            Ok(st)
        }
    };
    let mut dir = open(
        None,
        std::ffi::OsStr::new("/"),
        libc::O_DIRECTORY | libc::O_RDONLY,
    )?;
    let mut here = PathBuf::from("/");
    let names: Vec<_> = path.components().skip(1).collect();
    for (i, name) in names.iter().enumerate() {
        let st = stat(&dir)?;
        let mode = st.st_mode & 0o7777;
        if st.st_uid != 0 && st.st_uid != me {
            return Err(format!(
                "refusing the policy file: `{}` is owned by uid {}, who could replace it; move \
                 the file to a directory only you or root can write",
                here.display(),
                st.st_uid
            ));
        }
        if mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
            return Err(format!(
                "refusing the policy file: `{}` is writable by other users (mode {mode:04o}); \
                 move the file to a directory only you or root can write",
                here.display()
            ));
        }
        let last = i + 1 == names.len();
        let flags = if last {
            libc::O_RDONLY | libc::O_NONBLOCK
        } else {
            libc::O_DIRECTORY | libc::O_RDONLY
        };
        dir = open(Some(&dir), name.as_os_str(), flags)?;
        here.push(name);
    }
    let st = stat(&dir)?;
    let mode = st.st_mode & 0o7777;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(format!("`{}` is not a regular file", path.display()));
    }
    if st.st_uid != 0 && st.st_uid != me {
        return Err(format!(
            "refusing the policy file: it is owned by uid {}, not by you (uid {me}) or root; \
             whoever can write it decides what the sandbox may touch",
            st.st_uid
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "refusing the policy file: it is writable by other users (mode {mode:04o}); \
             `chmod go-w` it"
        ));
    }
    if st.st_nlink > 1 {
        return Err(format!(
            "refusing the policy file: it has {} names (hard links), and another name may lie \
             where a sandbox can write; copy it to a file of its own",
            st.st_nlink
        ));
    }
    if st.st_size as u64 > MAX_POLICY_BYTES {
        return Err(format!(
            "the policy file is larger than {MAX_POLICY_BYTES} bytes"
        ));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(dir), &mut text)
        .map_err(|e| format!("cannot read the policy file: {e}"))?;
    Ok(text)
}
