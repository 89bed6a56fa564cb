//! Finding the program a spec names, and the files the kernel needs to
//! load it.
//!
//! A sandboxed child is granted its program file and what loading it needs
//! — a `#!` script's interpreter (followed through `/usr/bin/env NAME` and
//! nested scripts) and an ELF program's dynamic loader (`PT_INTERP`) — each
//! as a single file. Never the program's directory: `$HOME/a.out` must not
//! open `$HOME/.ssh` to the program.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::SpawnError;
use crate::spec::ChildSpec;

/// How many `#!` levels are followed (Linux itself stops at 4).
const MAX_INTERPRETER_DEPTH: usize = 4;

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
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated string.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

/// The program `program` names, resolved as the spawner resolves it (on
/// the `PATH` in `env` when it has no `/`), followed by the files loading
/// it needs: its `#!` interpreter chain and the ELF dynamic loader, each
/// canonical. A sandboxed child is granted exactly these (read +
/// execute); tools use this to explain why a program cannot start.
pub fn resolve_program(
    program: &Path,
    env: &[(OsString, OsString)],
) -> Result<Vec<PathBuf>, SpawnError> {
    let resolved = resolve(program, env)?;
    let mut files = vec![resolved.clone()];
    files.extend(load_requirements(&resolved, env));
    Ok(files)
}

/// The files loading `program` needs besides itself: its `#!` interpreter
/// chain and the ELF dynamic loader of whatever is finally executed, each
/// canonical. Best effort: a file that cannot be read adds nothing (the
/// exec then fails inside the sandbox, which is the fail-closed outcome).
pub(crate) fn load_requirements(program: &Path, env: &[(OsString, OsString)]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut current = program.to_path_buf();
    for _ in 0..MAX_INTERPRETER_DEPTH {
        let Some(head) = read_head(&current) else {
            break;
        };
        if let Some(interp) = elf_interpreter(&head) {
            push_canonical(&mut out, Path::new(&interp));
            break;
        }
        let Some((interp, via_env)) = shebang_interpreter(&head, env) else {
            break;
        };
        if !push_canonical(&mut out, &interp) {
            break;
        }
        // `#!/usr/bin/env NAME`: the kernel runs env (an ELF program whose
        // loader is needed too), which then runs NAME.
        if let Some(loader) = read_head(&interp).and_then(|h| elf_interpreter(&h)) {
            push_canonical(&mut out, Path::new(&loader));
        }
        let Some(next) = via_env.or(Some(interp)) else {
            break;
        };
        if !push_canonical(&mut out, &next) {
            break;
        }
        current = next;
    }
    out.retain(|p| p != program);
    out
}

fn push_canonical(out: &mut Vec<PathBuf>, p: &Path) -> bool {
    match p.canonicalize() {
        Ok(c) if c.is_file() => {
            if !out.contains(&c) {
                out.push(c);
            }
            true
        }
        _ => false,
    }
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

/// The interpreter of a `#!` script and, for `#!/usr/bin/env NAME`, NAME
/// resolved on the child's `PATH` as `env` would.
fn shebang_interpreter(
    head: &[u8],
    env: &[(OsString, OsString)],
) -> Option<(PathBuf, Option<PathBuf>)> {
    use std::os::unix::ffi::OsStrExt;
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|b| *b == b'\n').next()?;
    let mut words = line
        .split(|b| *b == b' ' || *b == b'\t' || *b == b'\r')
        .filter(|w| !w.is_empty());
    let interp = PathBuf::from(OsStr::from_bytes(words.next()?));
    if interp.file_name() == Some(OsStr::new("env")) {
        // `env -S ...` and option parsing are not followed: the first word
        // that is not an option names the program.
        let target = words.find(|w| !w.starts_with(b"-")).and_then(|name| {
            if name.contains(&b'/') {
                Some(PathBuf::from(OsStr::from_bytes(name)))
            } else {
                find_on_path(OsStr::from_bytes(name), child_path(env))
            }
        });
        return Some((interp, target));
    }
    Some((interp, None))
}

/// The `PT_INTERP` path of an ELF file (32- or 64-bit, either byte order).
fn elf_interpreter(head: &[u8]) -> Option<OsString> {
    use std::os::unix::ffi::OsStrExt;
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

    #[test]
    fn elf_program_needs_its_loader() {
        let sh = resolve(Path::new("sh"), &env()).unwrap();
        let req = load_requirements(&sh, &env());
        if cfg!(target_os = "linux") {
            assert_eq!(req.len(), 1, "{req:?}");
            assert!(
                req[0].to_string_lossy().contains("ld-"),
                "not a dynamic loader: {req:?}"
            );
        }
    }

    #[test]
    fn scripts_need_their_interpreter_chain() {
        let dir = tempfile::tempdir().unwrap();
        let direct = dir.path().join("direct");
        std::fs::write(&direct, "#!/bin/sh -e\necho hi\n").unwrap();
        let req = load_requirements(&direct, &env());
        let sh = Path::new("/bin/sh").canonicalize().unwrap();
        assert_eq!(req.first(), Some(&sh), "{req:?}");
        let via_env = dir.path().join("via-env");
        std::fs::write(&via_env, "#!/usr/bin/env -S sh\necho hi\n").unwrap();
        let req = load_requirements(&via_env, &env());
        assert!(req.contains(&Path::new("/usr/bin/env").canonicalize().unwrap()));
        assert!(req.contains(&sh), "{req:?}");
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "no shebang").unwrap();
        assert!(load_requirements(&plain, &env()).is_empty());
        let garbage = dir.path().join("garbage");
        std::fs::write(&garbage, b"\x7fELF\x02\x01\x01").unwrap();
        assert!(load_requirements(&garbage, &env()).is_empty());
    }
}
