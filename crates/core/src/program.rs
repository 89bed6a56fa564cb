//! Finding the program a spec names, and the files the kernel needs to
//! load it.
//!
//! A sandboxed child is granted its program file and what the **kernel**
//! opens to load it — a `#!` script's interpreter and an ELF program's
//! dynamic loader (`PT_INTERP`) — each as a single file, and only if it is
//! an executable regular file (the kernel would refuse anything else).
//! Never the program's directory (`$HOME/a.out` must not open `$HOME/.ssh`
//! to the program), and never anything a `#!` line names as an
//! *argument*: the line is read exactly as the kernel's `binfmt_script`
//! reads it ([`shebang`]: the interpreter path, then at most one argument,
//! the rest of the line, untouched), and an argument grants nothing.
//!
//! `#!/usr/bin/env NAME` is followed in its plain form only (one word, no
//! option, no assignment): `env` looks NAME up on the sandbox's `PATH`
//! itself, so the kernel never opens it. NAME is not granted; when it
//! resolves into a directory the sandbox may already execute from, its
//! own `#!` chain is followed from there, and otherwise
//! [`LoadRequirements::notes`] says which `--ro` would grant it. Any other
//! `env` form (`-S`, `-u`, `-i`, `VAR=value`) grants nothing beyond `env`
//! and gets a note.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use std::os::unix::ffi::OsStrExt;

use sha2::{Digest, Sha256};

use crate::error::SpawnError;
use crate::spec::ChildSpec;

/// How many interpreters deep a chain is followed: Linux's own bound was 4
/// (`BINPRM_MAX_RECURSION`) and is 5 since 5.9 (`exec_binprm`); the
/// smaller grants less.
const MAX_INTERPRETER_DEPTH: usize = 4;

/// `BINPRM_BUF_SIZE`: the kernel reads this many bytes of a file to find
/// its `#!` line.
const BINPRM_BUF_SIZE: usize = 256;

/// Resolves `program` to an absolute, canonical path: names without a `/`
/// are looked up on the child's `PATH`.
pub(crate) fn resolve(program: &Path, env: &[(OsString, OsString)]) -> Result<PathBuf, SpawnError> {
    if program.as_os_str().is_empty() {
        return Err(SpawnError::InvalidSpec("program is empty".into()));
    }
    let not_found = || SpawnError::ProgramNotFound {
        program: program.to_path_buf(),
    };
    let candidate = if program.as_os_str().as_encoded_bytes().contains(&b'/') {
        program.to_path_buf()
    } else {
        find_on_path(program.as_os_str(), child_path(env)).ok_or_else(not_found)?
    };
    let canonical = candidate.canonicalize().map_err(|_| not_found())?;
    if !canonical.is_file() {
        return Err(not_found());
    }
    Ok(canonical)
}

/// The program of a container's child, as a path inside its root: a path
/// with a `/` as given (relative to the root's `cwd`), a bare name the
/// first regular file of that name on the `PATH` of `env`, looked up
/// inside the root ([`hostfs::is_file_in_root`](crate::hostfs::is_file_in_root)).
#[cfg(target_os = "linux")]
pub(crate) fn resolve_in_container(
    root: &crate::policy::ContainerRoot,
    program: &Path,
    env: &[(OsString, OsString)],
) -> Result<PathBuf, SpawnError> {
    if program.as_os_str().is_empty() {
        return Err(SpawnError::InvalidSpec("program is empty".into()));
    }
    if program.as_os_str().as_encoded_bytes().contains(&b'/') {
        return Ok(root.cwd.join(program));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == OsStr::new("PATH"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| {
            OsString::from("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        });
    std::env::split_paths(&path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|p| crate::hostfs::is_file_in_root(&root.rootfs, p).unwrap_or(false))
        .ok_or_else(|| SpawnError::ProgramNotFound {
            program: program.to_path_buf(),
        })
}

fn child_path(env: &[(OsString, OsString)]) -> OsString {
    env.iter()
        .find(|(k, _)| k == OsStr::new("PATH"))
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"))
}

fn find_on_path(name: &OsStr, path: OsString) -> Option<PathBuf> {
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable_file(p))
}

fn is_executable_file(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated string.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

/// What loading a program needs, and what was not granted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadRequirements {
    /// The files to grant read + execute, each canonical: the program's
    /// interpreter chain and ELF loaders, as the kernel opens them.
    pub files: Vec<PathBuf>,
    /// Why something a `#!` line names was not granted, and how to grant
    /// it (`--ro PATH`), one sentence each.
    pub notes: Vec<String>,
}

/// The program `program` names, resolved as the spawner resolves it (on
/// the `PATH` in `env` when it has no `/`), followed by the files loading
/// it needs ([`LoadRequirements`]; `exec_dirs` are the directories the
/// sandbox may already execute from, for `#!/usr/bin/env NAME`). A
/// sandboxed child is granted exactly these (read + execute); tools use
/// this to explain why a program cannot start.
pub fn resolve_program(
    program: &Path,
    env: &[(OsString, OsString)],
    exec_dirs: &[PathBuf],
) -> Result<LoadRequirements, SpawnError> {
    let resolved = resolve(program, env)?;
    let mut req = load_requirements(&resolved, env, exec_dirs);
    req.files.insert(0, resolved);
    Ok(req)
}

/// The files loading `program` needs besides itself (see
/// [`LoadRequirements`]). Best effort: a file that cannot be read adds
/// nothing (the exec then fails inside the sandbox, which is the
/// fail-closed outcome).
pub(crate) fn load_requirements(
    program: &Path,
    env: &[(OsString, OsString)],
    exec_dirs: &[PathBuf],
) -> LoadRequirements {
    let mut req = LoadRequirements::default();
    let mut current = program.to_path_buf();
    for _ in 0..MAX_INTERPRETER_DEPTH {
        let Some(head) = read_head(&current) else {
            break;
        };
        if let Some(loader) = elf_interpreter(&head) {
            grant(&mut req, Path::new(&loader));
            break;
        }
        let Some(line) = shebang(&head) else {
            break;
        };
        let interp = PathBuf::from(OsStr::from_bytes(&line.interpreter));
        if !interp.is_absolute() {
            req.notes.push(format!(
                "{} names a relative interpreter `{}`, which the kernel looks up from the \
                 sandbox's working directory: nothing was granted for it",
                current.display(),
                interp.display()
            ));
            break;
        }
        let Some(interp) = grant(&mut req, &interp) else {
            break;
        };
        // The interpreter is an ELF program (its loader), or a script
        // itself: the kernel runs it the same way.
        let is_env = interp.file_name() == Some(OsStr::new("env"));
        if !is_env {
            current = interp;
            continue;
        }
        // `env` is the interpreter: the kernel also loads env's loader.
        if let Some(loader) = read_head(&interp).and_then(|h| elf_interpreter(&h)) {
            grant(&mut req, Path::new(&loader));
        }
        match env_target(line.argument.as_deref(), env) {
            EnvTarget::Plain(Some(target)) if is_under(&target, exec_dirs) => current = target,
            EnvTarget::Plain(Some(target)) => {
                req.notes.push(format!(
                    "{}'s `#!{} {}` runs {}, which the sandbox cannot execute from where it \
                     is: grant it with --ro {}",
                    current.display(),
                    OsStr::from_bytes(&line.interpreter).to_string_lossy(),
                    String::from_utf8_lossy(line.argument.as_deref().unwrap_or_default()),
                    target.display(),
                    target.display()
                ));
                break;
            }
            EnvTarget::Plain(None) => break,
            EnvTarget::Other(arg) => {
                req.notes.push(format!(
                    "{}'s `#!{} {}` is not the plain `#!/usr/bin/env NAME` form: only env \
                     itself was granted, nothing its arguments name; grant what it runs with \
                     --ro PATH, or run the interpreter directly",
                    current.display(),
                    OsStr::from_bytes(&line.interpreter).to_string_lossy(),
                    String::from_utf8_lossy(&arg)
                ));
                break;
            }
        }
    }
    req.files.retain(|p| p != program);
    req
}

/// Adds `p` (canonical) to the grants if it is an executable regular file
/// (the kernel runs nothing else); the canonical path, or `None`.
fn grant(req: &mut LoadRequirements, p: &Path) -> Option<PathBuf> {
    let c = p.canonicalize().ok()?;
    if !is_executable_file(&c) {
        return None;
    }
    if !req.files.contains(&c) {
        req.files.push(c.clone());
    }
    Some(c)
}

/// Whether canonical `p` lies under one of `dirs` (canonicalised here).
fn is_under(p: &Path, dirs: &[PathBuf]) -> bool {
    dirs.iter()
        .filter_map(|d| d.canonicalize().ok())
        .any(|d| p.starts_with(d))
}

/// What `#!/usr/bin/env ARG` runs.
enum EnvTarget {
    /// The plain form: NAME, resolved (on `PATH` unless it has a `/`),
    /// canonical; `None` when nothing executable is found.
    Plain(Option<PathBuf>),
    /// Any other form (options, assignments, several words), or no NAME.
    Other(Vec<u8>),
}

fn env_target(arg: Option<&[u8]>, env: &[(OsString, OsString)]) -> EnvTarget {
    let Some(arg) = arg else {
        return EnvTarget::Other(Vec::new());
    };
    // The kernel passes the rest of the line as one argument: `env` (with
    // no -S) then takes all of it, spaces included, as one name.
    let plain = !arg.is_empty()
        && !arg.starts_with(b"-")
        && !arg.contains(&b'=')
        && !arg.iter().any(|b| *b == b' ' || *b == b'\t');
    if !plain {
        return EnvTarget::Other(arg.to_vec());
    }
    let name = OsStr::from_bytes(arg);
    let found = if arg.contains(&b'/') {
        Some(PathBuf::from(name)).filter(|p| is_executable_file(p))
    } else {
        find_on_path(name, child_path(env))
    };
    EnvTarget::Plain(found.and_then(|p| p.canonicalize().ok()))
}

/// The first 4 KiB of a file (enough for `#!` lines and ELF program
/// headers of ordinary binaries).
fn read_head(path: &Path) -> Option<Vec<u8>> {
    let mut f = File::open(path).ok()?;
    let mut buf = vec![0u8; 4096];
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    buf.truncate(n);
    Some(buf)
}

/// A `#!` line as the kernel reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shebang {
    /// The interpreter path, as written.
    pub interpreter: Vec<u8>,
    /// The one optional argument: the rest of the line after the
    /// interpreter and the blanks that follow it, trailing blanks removed.
    pub argument: Option<Vec<u8>>,
}

/// Parses the start of a file as Linux's `binfmt_script` does
/// (`load_script`, fs/binfmt_script.c, Linux ≥ 5.0): only the first
/// [`BINPRM_BUF_SIZE`] bytes count (zero-padded, as the kernel's buffer
/// is); the line ends at the first `\n`; blanks are spaces and tabs only
/// (a `\r` is part of the text); the interpreter ends at the first blank
/// or NUL; the argument is everything after the blanks that follow,
/// up to a NUL. A line with no newline whose interpreter fills the buffer
/// is refused (the kernel assumes it truncated), and so is an empty one.
pub(crate) fn shebang(head: &[u8]) -> Option<Shebang> {
    if !head.starts_with(b"#!") {
        return None;
    }
    let mut buf = [0u8; BINPRM_BUF_SIZE];
    let n = head.len().min(BINPRM_BUF_SIZE);
    buf[..n].copy_from_slice(&head[..n]);
    let blank = |c: u8| c == b' ' || c == b'\t';
    let terminator = |c: u8| blank(c) || c == 0;
    // Inclusive ranges [first, last], as the kernel's helpers scan.
    let next_non_blank = |first: usize, last: usize| (first..=last).find(|&i| !blank(buf[i]));
    let next_terminator = |first: usize, last: usize| (first..=last).find(|&i| terminator(buf[i]));
    let buf_end = BINPRM_BUF_SIZE - 1;
    let mut end = match buf.iter().position(|&c| c == b'\n') {
        Some(i) => i,
        None => {
            let start = next_non_blank(2, buf_end)?;
            next_terminator(start, buf_end)?;
            buf_end
        }
    };
    while end > 2 && blank(buf[end - 1]) {
        end -= 1;
    }
    let name = next_non_blank(2, end)?;
    if name == end {
        return None;
    }
    let sep = next_terminator(name, end);
    let arg = match sep {
        Some(i) if buf[i] != 0 => next_non_blank(i, end),
        _ => None,
    };
    // The kernel writes NULs at `end` and `sep`, then reads C strings.
    let c_str = |from: usize, to: usize| -> Vec<u8> {
        let s = &buf[from..to];
        s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())].to_vec()
    };
    let interpreter = c_str(name, sep.unwrap_or(end).min(end));
    if interpreter.is_empty() {
        return None;
    }
    let argument = arg.filter(|&a| a < end).map(|a| c_str(a, end));
    Some(Shebang {
        interpreter,
        argument,
    })
}

/// The `PT_INTERP` path of an ELF file (32- or 64-bit, either byte order).
fn elf_interpreter(head: &[u8]) -> Option<OsString> {
    if head.len() < 52 || &head[..4] != b"\x7fELF" {
        return None;
    }
    let is64 = head[4] == 2;
    let le = head[5] == 1;
    let u16_at = |o: usize| -> Option<u64> {
        let b: [u8; 2] = head.get(o..o + 2)?.try_into().ok()?;
        Some(u64::from(if le {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }))
    };
    let u32_at = |o: usize| -> Option<u64> {
        let b: [u8; 4] = head.get(o..o + 4)?.try_into().ok()?;
        Some(u64::from(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }))
    };
    let u64_at = |o: usize| -> Option<u64> {
        let b: [u8; 8] = head.get(o..o + 8)?.try_into().ok()?;
        Some(if le {
            u64::from_le_bytes(b)
        } else {
            u64::from_be_bytes(b)
        })
    };
    let (phoff, phentsize, phnum) = if is64 {
        (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?)
    } else {
        (u32_at(0x1c)?, u16_at(0x2a)?, u16_at(0x2c)?)
    };
    const PT_INTERP: u64 = 3;
    for i in 0..phnum.min(64) {
        let ph = usize::try_from(phoff + i * phentsize).ok()?;
        if u32_at(ph)? != PT_INTERP {
            continue;
        }
        let (off, size) = if is64 {
            (u64_at(ph + 0x08)?, u64_at(ph + 0x20)?)
        } else {
            (u32_at(ph + 0x04)?, u32_at(ph + 0x10)?)
        };
        let start = usize::try_from(off).ok()?;
        let end = start.checked_add(usize::try_from(size).ok()?)?;
        let raw = head.get(start..end)?;
        let raw = raw.split(|b| *b == 0).next()?;
        return Some(OsStr::from_bytes(raw).to_os_string());
    }
    None
}

/// Opens the program; if pinned, hashes it from the open fd and returns the
/// `/proc/self/fd/N` path to execute that very file.
pub(crate) fn open_pinned(
    program: &Path,
    spec: &ChildSpec,
) -> Result<(Option<File>, PathBuf), SpawnError> {
    let Some(pin) = spec.program_sha256 else {
        return Ok((None, program.to_path_buf()));
    };
    let open_err = |source| SpawnError::ProgramOpen {
        program: program.to_path_buf(),
        source,
    };
    let mut file = File::open(program).map_err(open_err)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).map_err(open_err)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let actual: [u8; 32] = hasher.finalize().into();
    if actual != pin.0 {
        tracing::warn!(
            program = %program.display(),
            expected = %pin.to_hex(),
            actual = %hex::encode(actual),
            "program does not match its pin; refusing to run it"
        );
        return Err(SpawnError::PinMismatch {
            program: program.to_path_buf(),
            expected: pin.to_hex(),
            actual: hex::encode(actual),
        });
    }
    // The fd is O_CLOEXEC: it stays open through pre_exec and the kernel
    // opens it for execve before closing it, so ELF programs run from the
    // hashed file. (`#!` scripts cannot run this way: pin their interpreter.)
    let fd_dir = if cfg!(target_os = "linux") {
        "/proc/self/fd"
    } else {
        "/dev/fd"
    };
    let exec_path = PathBuf::from(format!("{fd_dir}/{}", file.as_raw_fd()));
    Ok((Some(file), exec_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Vec<(OsString, OsString)> {
        vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())]
    }

    fn exec_dirs() -> Vec<PathBuf> {
        vec![PathBuf::from("/usr"), PathBuf::from("/bin")]
    }

    #[test]
    fn elf_program_needs_its_loader() {
        let sh = resolve(Path::new("sh"), &env()).unwrap();
        let req = load_requirements(&sh, &env(), &exec_dirs());
        if cfg!(target_os = "linux") {
            assert_eq!(req.files.len(), 1, "{req:?}");
            assert!(
                req.files[0].to_string_lossy().contains("ld-"),
                "not a dynamic loader: {req:?}"
            );
        }
    }

    fn line(text: &[u8]) -> Option<(String, Option<String>)> {
        shebang(text).map(|s| {
            (
                String::from_utf8_lossy(&s.interpreter).into_owned(),
                s.argument.map(|a| String::from_utf8_lossy(&a).into_owned()),
            )
        })
    }

    #[test]
    fn shebang_lines_are_read_as_the_kernel_reads_them() {
        let some = |i: &str, a: Option<&str>| Some((i.to_string(), a.map(str::to_string)));
        assert_eq!(line(b"#!/bin/sh\necho"), some("/bin/sh", None));
        assert_eq!(line(b"#! \t/bin/sh  \t\n"), some("/bin/sh", None));
        // One argument: the rest of the line, inner blanks kept.
        assert_eq!(
            line(b"#!/usr/bin/env -S -u /secret sh -c \"cat /secret\"\n"),
            some("/usr/bin/env", Some("-S -u /secret sh -c \"cat /secret\""))
        );
        assert_eq!(line(b"#!/bin/sh -e  \n"), some("/bin/sh", Some("-e")));
        // \r is not a blank; a NUL ends what the kernel reads.
        assert_eq!(line(b"#!/bin/sh\r\n"), some("/bin/sh\r", None));
        assert_eq!(line(b"#!/bin/s\0h arg\n"), some("/bin/s", None));
        assert_eq!(line(b"#!/bin/sh a\0b\n"), some("/bin/sh", Some("a")));
        // No newline: a short file ends in the buffer's zeros.
        assert_eq!(line(b"#!/bin/sh -x"), some("/bin/sh", Some("-x")));
        // Nothing, or an interpreter the buffer cut off: not a script.
        assert_eq!(line(b"#!   \n"), None);
        assert_eq!(line(b"#!"), None);
        let long = [b"#!/".as_slice(), &[b'a'; 300]].concat();
        assert_eq!(line(&long), None);
        // A newline past the buffer does not count.
        let late = [b"#!/bin/sh ".as_slice(), &[b'x'; 300], b"\n"].concat();
        let (i, a) = line(&late).unwrap();
        assert_eq!(i, "/bin/sh");
        assert_eq!(a.unwrap().len(), BINPRM_BUF_SIZE - 1 - 10);
        assert_eq!(line(b"no"), None);
    }

    #[test]
    fn scripts_need_their_interpreter_chain_and_no_argument_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let sh = Path::new("/bin/sh").canonicalize().unwrap();
        let env_bin = Path::new("/usr/bin/env").canonicalize().unwrap();
        let direct = dir.path().join("direct");
        std::fs::write(&direct, "#!/bin/sh -e\necho hi\n").unwrap();
        let req = load_requirements(&direct, &env(), &exec_dirs());
        assert_eq!(req.files.first(), Some(&sh), "{req:?}");
        // The plain env form is followed (sh is already executable).
        let via_env = dir.path().join("via-env");
        std::fs::write(&via_env, "#!/usr/bin/env sh\necho hi\n").unwrap();
        let req = load_requirements(&via_env, &env(), &exec_dirs());
        assert!(req.files.contains(&env_bin), "{req:?}");
        assert!(req.notes.is_empty(), "{req:?}");
        // A secret named on the line is never granted, whatever the form.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "#!/bin/sh\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let s = secret.display();
        for text in [
            format!("#!/usr/bin/env -S -u {s} sh -c \"cat {s}\"\n"),
            format!("#!/usr/bin/env -u {s}\n"),
            format!("#!/usr/bin/env X={s} sh\n"),
            format!("#!/bin/sh {s}\n"),
            format!("#!/usr/bin/env {s} sh\n"),
        ] {
            let script = dir.path().join("hostile");
            std::fs::write(&script, &text).unwrap();
            let req = load_requirements(&script, &env(), &exec_dirs());
            let secret = secret.canonicalize().unwrap();
            assert!(!req.files.contains(&secret), "{text}: {req:?}");
        }
        // `env NAME` outside the executable dirs: a note, no grant.
        let plain = dir.path().join("plain");
        std::fs::write(&plain, format!("#!/usr/bin/env {s}\n")).unwrap();
        let req = load_requirements(&plain, &env(), &exec_dirs());
        assert!(
            !req.files.contains(&secret.canonicalize().unwrap()),
            "{req:?}"
        );
        assert!(req.notes.iter().any(|n| n.contains("--ro")), "{req:?}");
        // A non-executable interpreter is not granted (the kernel would
        // not run it).
        let data = dir.path().join("data");
        std::fs::write(&data, "not a program").unwrap();
        let named = dir.path().join("named");
        std::fs::write(&named, format!("#!{}\n", data.display())).unwrap();
        assert!(load_requirements(&named, &env(), &exec_dirs())
            .files
            .is_empty());
        let no_shebang = dir.path().join("no-shebang");
        std::fs::write(&no_shebang, "no shebang").unwrap();
        assert!(load_requirements(&no_shebang, &env(), &exec_dirs())
            .files
            .is_empty());
        let garbage = dir.path().join("garbage");
        std::fs::write(&garbage, b"\x7fELF\x02\x01\x01").unwrap();
        assert!(load_requirements(&garbage, &env(), &exec_dirs())
            .files
            .is_empty());
    }
}
