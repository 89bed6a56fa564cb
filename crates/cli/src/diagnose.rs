//! Why a sandboxed program could not start, or died on a denied path: the
//! notes `cordon run` prints, naming the path and what would grant it.
//!
//! Two causes look alike from inside ("Permission denied") and need
//! different fixes: the sandbox's own rules (Landlock: only granted paths
//! are visible; fixed with `--ro`/`--rw`) and plain file permissions for the
//! uid the sandbox runs as (a uid of its own when cordon runs as root,
//! with no group but its own; no flag helps, the file must be readable by
//! that uid). The notes tell them apart by checking the permission bits
//! for that uid on the host.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Who the sandbox runs as on the host, from the admitted backend's
/// report.
#[derive(Debug, Clone, Copy)]
pub struct SandboxUser {
    /// The uid (for a root host, one of the sandbox uids: none has an
    /// account or a group, so any stands for all).
    pub uid: u32,
    /// Each sandbox has a uid of its own (a root host).
    pub own: bool,
}

impl SandboxUser {
    /// From the `sandbox_uid` / `sandbox_uids` host facts.
    pub fn from_facts(facts: &std::collections::BTreeMap<String, String>) -> Option<Self> {
        if let Some(uid) = facts.get("sandbox_uid").and_then(|u| u.parse().ok()) {
            return Some(SandboxUser { uid, own: false });
        }
        let first = facts.get("sandbox_uids")?.split(['-', ' ']).next()?;
        Some(SandboxUser {
            uid: first.parse().ok()?,
            own: true,
        })
    }
}

impl std::fmt::Display for SandboxUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.own {
            write!(f, "a uid of its own (such as {})", self.uid)
        } else {
            write!(f, "uid {}", self.uid)
        }
    }
}

/// How many denied paths one run's notes name at most.
const MAX_PATHS: usize = 3;

/// Notes for a program that could not be started: what `program` resolved
/// to (and its interpreter, for a script or shim), and the first file or
/// directory on the way that `sandbox_uid` cannot reach.
pub fn unstartable(
    program: &Path,
    sandbox: Option<SandboxUser>,
    exec_dirs: &[PathBuf],
) -> Vec<String> {
    let load = program_files(program, exec_dirs);
    let files = load.files;
    if files.is_empty() {
        return Vec::new();
    }
    let mut notes: Vec<String> = resolution(program, &files).into_iter().collect();
    notes.extend(load.notes);
    if let Some(user) = sandbox {
        for f in &files {
            if let Some(why) = unreachable_for(f, user.uid, true) {
                notes.push(format!(
                    "the sandbox runs as {user}, which cannot reach {}: {why}. No flag grants \
                     that: put the program where any user can read it (for a shim or wrapper, \
                     run the interpreter it wraps directly), or use --trusted only for code you \
                     trust",
                    f.display()
                ));
                break;
            }
        }
    }
    notes
}

/// What `program` resolved to, and for a script (a shim, a wrapper) the
/// interpreter that runs it; `None` when that says nothing new.
fn resolution(program: &Path, files: &[PathBuf]) -> Option<String> {
    let [resolved, interpreters @ ..] = files else {
        return None;
    };
    let script: Vec<String> = interpreters
        .iter()
        .filter(|p| !is_loader(p))
        .map(|p| p.display().to_string())
        .collect();
    let same = program.as_os_str() == resolved.as_os_str();
    if !script.is_empty() && same {
        Some(format!(
            "{} is a script run by {}",
            resolved.display(),
            script.join(" → ")
        ))
    } else if !script.is_empty() {
        Some(format!(
            "`{}` resolved to {}, a script run by {}",
            program.display(),
            resolved.display(),
            script.join(" → ")
        ))
    } else if !same {
        Some(format!(
            "`{}` resolved to {}",
            program.display(),
            resolved.display()
        ))
    } else {
        None
    }
}

/// `program` resolved as the child's spawn resolves it (on cordon's own
/// `PATH`, which the child inherits), with its interpreters and loader;
/// empty when it does not resolve.
fn program_files(program: &Path, exec_dirs: &[PathBuf]) -> cordon_core::LoadRequirements {
    let env = [(
        OsString::from("PATH"),
        std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
    )];
    cordon_core::resolve_program(program, &env, exec_dirs).unwrap_or_default()
}

/// Notes for `program`, which ended in failure after printing `stderr`:
/// each absolute path on a line that says permission was denied (other
/// than the program's own files, which prefix many messages), with the
/// flag that would grant it, or why no flag would.
pub fn denied_paths(
    stderr: &[u8],
    program: &Path,
    sandbox: Option<SandboxUser>,
    exec_dirs: &[PathBuf],
) -> Vec<String> {
    let own = program_files(program, exec_dirs).files;
    let is_own = |p: &Path| {
        own.iter()
            .any(|o| o == p || p.canonicalize().is_ok_and(|c| &c == o))
    };
    let text = String::from_utf8_lossy(stderr);
    let mut seen: Vec<PathBuf> = Vec::new();
    for line in text.lines() {
        let lower = line.to_ascii_lowercase();
        if !(lower.contains("permission denied")
            || lower.contains("eacces")
            || lower.contains("operation not permitted"))
        {
            continue;
        }
        for p in absolute_paths(line) {
            if !is_own(&p) && !seen.contains(&p) && seen.len() < MAX_PATHS {
                seen.push(p);
            }
        }
    }
    if seen.is_empty() {
        return Vec::new();
    }
    let script = own.len() > 1 && own[1..].iter().any(|p| !is_loader(p));
    let head = resolution(program, &own).filter(|_| script);
    head.into_iter()
        .chain(seen.iter().map(|p| {
            let dac =
                sandbox.and_then(|user| unreachable_for(p, user.uid, false).map(|w| (user, w)));
            if let Some(what) = sensitive(p) {
                return format!(
                    "the program was denied {}, {what}: no sandbox gets it by default; grant it \
                     only if you mean this program to have it",
                    p.display()
                );
            }
            match dac {
                Some((user, why)) => format!(
                    "the program was denied {}: the sandbox, which runs as {user}, cannot read it \
                     ({why}); no flag grants that",
                    p.display()
                ),
                None => format!(
                    "the program was denied {}; if it should read it, grant it with --ro {} \
                     (--rw to write)",
                    p.display(),
                    grant_for(p).display()
                ),
            }
        }))
        .collect()
}

/// What a denied path is when it is one no note should offer to grant
/// as if it were harmless: the host's terminals (reading one reads what
/// someone types) and its secrets.
fn sensitive(p: &Path) -> Option<&'static str> {
    const TERMINALS: &[&str] = &["/dev/pts", "/dev/ptmx", "/dev/console"];
    const SECRETS: &[&str] = &[
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/ssl/private",
        "/etc/sudoers",
        "/etc/sudoers.d",
        "/etc/ssh",
    ];
    let s = p.to_string_lossy();
    if TERMINALS.iter().any(|t| p.starts_with(t)) || s.starts_with("/dev/tty") {
        return Some("the host's terminals (whoever reads one reads what is typed there)");
    }
    SECRETS
        .iter()
        .any(|t| p.starts_with(t))
        .then_some("one of the host's secrets")
}

/// The absolute paths on a line: tokens starting with `/`, cut at
/// whitespace, quotes, `:` `,` `(` `)`.
fn absolute_paths(line: &str) -> Vec<PathBuf> {
    let stop = |c: char| c.is_whitespace() || "'\"`:,()[]{}<>".contains(c);
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find('/') {
        let before = rest[..i].chars().last();
        let tail = &rest[i..];
        let end = tail.find(stop).unwrap_or(tail.len());
        let token = tail[..end].trim_end_matches('.');
        // A path starts a token (not `a/b` or `http://`).
        if before.is_none_or(stop) && token.len() > 1 && !token.starts_with("//") {
            out.push(PathBuf::from(token));
        }
        rest = &tail[end.max(1)..];
    }
    out
}

/// What to grant for a denied path: the path itself when it exists,
/// otherwise its nearest existing ancestor (a file the program wanted to
/// create).
fn grant_for(p: &Path) -> PathBuf {
    p.ancestors()
        .find(|a| a.exists())
        .unwrap_or(p)
        .to_path_buf()
}

/// Why `uid` (with only its own group, as the sandbox runs) cannot reach
/// `path` by the permission bits: the first directory on the way it
/// cannot search, or the file itself not readable (and, for a program,
/// executable). `None` when it can, or when `uid` is this process's own
/// (the kernel's own check then already said so).
fn unreachable_for(path: &Path, uid: u32, program: bool) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if uid == unsafe { libc::geteuid() } {
        return None;
    }
    let allows = |m: &std::fs::Metadata, bit: u32| {
        let shift = if m.uid() == uid {
            6
        } else if m.gid() == uid {
            3
        } else {
            0
        };
        (m.mode() >> shift) & bit != 0
    };
    let describe = |p: &Path, m: &std::fs::Metadata| {
        format!(
            "{} is mode {:04o}, owned by uid {}",
            p.display(),
            m.mode() & 0o7777,
            m.uid()
        )
    };
    let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
    ancestors.reverse();
    for dir in ancestors {
        let m = std::fs::metadata(dir).ok()?;
        if !allows(&m, 0o1) {
            return Some(describe(dir, &m));
        }
    }
    let m = std::fs::metadata(path).ok()?;
    if !allows(&m, 0o4) || (program && !allows(&m, 0o1)) {
        return Some(describe(path, &m));
    }
    None
}

/// An ELF dynamic loader (`ld-linux…`, `ld-musl…`): granted with the
/// program, but not what a user means by its interpreter.
fn is_loader(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("ld-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_found_on_denial_lines() {
        let got = absolute_paths(
            "80AC:error:BIO_new_file:Permission denied:../bss_file.c:67:calling fopen(/etc/ssl/openssl.cnf, rb)",
        );
        assert_eq!(got, vec![PathBuf::from("/etc/ssl/openssl.cnf")]);
        let got = absolute_paths(
            "/root/.pyenv/shims/python3: line 21: /root/.pyenv/libexec/pyenv: Permission denied",
        );
        assert_eq!(
            got,
            vec![
                PathBuf::from("/root/.pyenv/shims/python3"),
                PathBuf::from("/root/.pyenv/libexec/pyenv")
            ]
        );
        assert!(absolute_paths("see https://example.com/x and a/b").is_empty());
    }

    #[test]
    fn denials_name_the_flag_or_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let f = dir.path().join("secret");
        std::fs::write(&f, "x").unwrap();
        let line = format!("cat: {}: Permission denied\n", f.display());
        let notes = denied_paths(line.as_bytes(), Path::new("/bin/cat"), None, &[]);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains(&format!("--ro {}", f.display())),
            "{notes:?}"
        );
        // As root, for a uid the temp dir (0700) shuts out: no flag helps.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let notes = denied_paths(
                line.as_bytes(),
                Path::new("/bin/cat"),
                Some(SandboxUser {
                    uid: 65534,
                    own: false,
                }),
                &[],
            );
            assert!(notes[0].contains("no flag grants that"), "{notes:?}");
            assert!(notes[0].contains("mode 0700"), "{notes:?}");
        }
        assert!(denied_paths(b"all fine\n", Path::new("/bin/cat"), None, &[]).is_empty());
    }

    #[test]
    fn terminals_and_secrets_are_never_offered_as_a_grant() {
        for p in [
            "/dev/pts/",
            "/dev/pts/3",
            "/dev/tty1",
            "/etc/shadow",
            "/etc/ssh/ssh_host_ed25519_key",
        ] {
            let line = format!("ls: cannot open directory '{p}': Permission denied\n");
            let notes = denied_paths(line.as_bytes(), Path::new("/bin/ls"), None, &[]);
            assert_eq!(notes.len(), 1, "{p}: {notes:?}");
            assert!(!notes[0].contains("--ro"), "{p}: {notes:?}");
            assert!(
                notes[0].contains("no sandbox gets it by default"),
                "{p}: {notes:?}"
            );
        }
    }
}
