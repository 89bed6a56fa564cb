//! The probe child's side: it runs inside the sandbox, tries what it must
//! not be able to do, and reports one line per check on stdout:
//!
//! ```text
//! CHECK <tab> name <tab> pass|fail|unreachable <tab> detail
//! INFO  <tab> key  <tab> value
//! HOLD  <tab> label
//! DONE
//! ```
//!
//! `HOLD` is the hold protocol: the child stops, blocked reading one line
//! from stdin, while the host inspects it from outside (`/proc/<program>/
//! {status,fd,limits,environ,root,mountinfo}`, see `inspect.rs`); the host's
//! newline releases it. The harness treats missing `DONE`, garbage or
//! silence as `Unreachable`.

use std::ffi::CString;
use std::io::Write;

use cordon_core::ProbeStatus;

pub(crate) use crate::PROBE_ARG;

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOENT => "ENOENT",
        libc::ENOSYS => "ENOSYS",
        libc::EINVAL => "EINVAL",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EAGAIN => "EAGAIN",
        libc::EMFILE => "EMFILE",
        libc::ENOMEM => "ENOMEM",
        libc::ESRCH => "ESRCH",
        libc::EXDEV => "EXDEV",
        libc::EFAULT => "EFAULT",
        libc::ENXIO => "ENXIO",
        libc::EFBIG => "EFBIG",
        libc::EBADF => "EBADF",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EROFS => "EROFS",
        libc::EINTR => "EINTR",
        libc::EISCONN => "EISCONN",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOSPC => "ENOSPC",
        libc::EUSERS => "EUSERS",
        libc::EEXIST => "EEXIST",
        libc::ENOTCONN => "ENOTCONN",
        libc::EDQUOT => "EDQUOT",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

/// The denials every check accepts: a policy said no.
pub(crate) const DENIED: [i32; 2] = [libc::EPERM, libc::EACCES];

/// Denials for a syscall aimed at a host pid. `ESRCH` counts too: the
/// kernel resolves a pid in the caller's own pid namespace
/// (`find_task_by_vpid()`, kernel/pid.c), so a live host process (the host
/// confirms it is alive, in a check of its own) that yields `ESRCH` cannot
/// be named from inside the sandbox at all.
pub(crate) const HOST_PID_DENIED: [i32; 3] = [libc::EPERM, libc::EACCES, libc::ESRCH];

/// Denials for opening `/proc/<host pid>/...`. `ENOENT` counts too: procfs
/// looks a pid up in the pid namespace of its own mount
/// (`proc_pid_lookup()`, fs/proc/base.c), so a sandbox with its own pid
/// namespace and procfs (or with no procfs) has no entry for a host process
/// the host knows to be alive.
pub(crate) const PROC_PID_DENIED: [i32; 3] = [libc::EPERM, libc::EACCES, libc::ENOENT];

/// What a probe child reports to the host: one line per check on stdout
/// (the protocol above).
pub struct Reporter {
    out: std::io::Stdout,
}

impl Reporter {
    pub(crate) fn new() -> Self {
        Reporter {
            out: std::io::stdout(),
        }
    }

    /// Reports check `name` with `status` (`Unproven` and `GivenUp` are
    /// reported as unreachable: only the host can judge those) and a
    /// one-line detail.
    pub fn check(&mut self, name: &str, status: ProbeStatus, detail: impl AsRef<str>) {
        let s = match status {
            ProbeStatus::Pass => "pass",
            ProbeStatus::Fail => "fail",
            ProbeStatus::Unreachable | ProbeStatus::Unproven | ProbeStatus::GivenUp => {
                "unreachable"
            }
        };
        let detail = detail.as_ref().replace(['\t', '\n'], " ");
        let _ = writeln!(self.out, "CHECK\t{name}\t{s}\t{detail}");
        let _ = self.out.flush();
    }

    /// Reports a fact for the host (`INFO key value`), not a check.
    pub fn info(&mut self, key: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.out, "INFO\t{key}\t{value}");
        let _ = self.out.flush();
    }

    /// Stops until the host has inspected this process: prints
    /// `HOLD <label>` and blocks on one line from stdin. EOF (the host gave
    /// up) releases it too.
    pub(crate) fn hold(&mut self, label: &str) {
        let _ = writeln!(self.out, "HOLD\t{label}");
        let _ = self.out.flush();
        let mut b = 0u8;
        loop {
            // SAFETY: reading one byte into a local from fd 0.
            let n = unsafe { libc::read(0, (&mut b as *mut u8).cast(), 1) };
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 || b == b'\n' {
                return;
            }
        }
    }

    /// Ends the report (`DONE`); the harness then expects a clean exit.
    pub fn done(&mut self) {
        // For the host's message should the child not exit cleanly after
        // DONE (an RLIMIT_CPU kill shows as a CPU time near the limit).
        // SAFETY: rusage is plain integers; getrusage fills the local.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
            let ms = |t: libc::timeval| t.tv_sec * 1000 + t.tv_usec / 1000;
            eprintln!(
                "cordon probe child: DONE after {} ms user, {} ms system CPU",
                ms(ru.ru_utime),
                ms(ru.ru_stime)
            );
        }
        let _ = writeln!(self.out, "DONE");
        let _ = self.out.flush();
    }

    /// A forbidden action: `Ok` is a breach; an errno in `denials` is a pass;
    /// any other errno is inconclusive.
    pub fn forbidden(&mut self, name: &str, result: Result<String, i32>, denials: &[i32]) {
        match result {
            Ok(what) => self.check(name, ProbeStatus::Fail, format!("succeeded: {what}")),
            Err(e) if denials.contains(&e) => self.check(
                name,
                ProbeStatus::Pass,
                format!("denied ({})", errno_name(e)),
            ),
            Err(e) => self.check(
                name,
                ProbeStatus::Unreachable,
                format!(
                    "inconclusive: failed with {} rather than a denial",
                    errno_name(e)
                ),
            ),
        }
    }

    /// A positive control: it must work, or the probe cannot decide.
    pub fn control(&mut self, name: &str, result: Result<(), String>) {
        match result {
            Ok(()) => self.check(name, ProbeStatus::Pass, "works"),
            Err(e) => self.check(
                name,
                ProbeStatus::Unreachable,
                format!("positive control failed: {e}"),
            ),
        }
    }
}

pub(crate) fn cstr(s: &str) -> CString {
    CString::new(s).expect("probe paths have no NUL")
}

/// `open(path, flags)`; returns the fd or errno.
pub(crate) fn open(path: &str, flags: i32) -> Result<i32, i32> {
    let c = cstr(path);
    // SAFETY: valid C string.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

pub(crate) fn close(fd: i32) {
    // SAFETY: closing an fd we own.
    unsafe {
        libc::close(fd);
    }
}

/// Reads a whole file through libc so the errno is kept.
pub(crate) fn read_file(path: &str) -> Result<String, i32> {
    let fd = open(path, libc::O_RDONLY)?;
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for 256 bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    let e = errno();
    close(fd);
    if n < 0 {
        return Err(e);
    }
    Ok(format!("read {n} bytes"))
}

/// Creates (or truncates) and writes a file.
pub(crate) fn write_file(path: &str, flags: i32) -> Result<String, i32> {
    let fd = open(path, libc::O_WRONLY | flags)?;
    // SAFETY: writing 5 bytes from a static.
    let n = unsafe { libc::write(fd, b"pwned".as_ptr().cast(), 5) };
    let e = errno();
    close(fd);
    if n < 0 {
        return Err(e);
    }
    Ok(format!("wrote {n} bytes to {path}"))
}

/// Positive controls every probe runs: the sandbox must still let a normal
/// program work in its scratch dir and package dir.
pub(crate) fn common_controls(r: &mut Reporter, package_file: &str) {
    r.control("control-scratch-rw", scratch_rw());
    r.control(
        "control-package-read",
        read_file(package_file).map(|_| ()).map_err(errno_name),
    );
    r.control("control-fork-wait", fork_wait());
    r.control("control-pipe", pipe_roundtrip());
    r.control("control-socketpair", socketpair_roundtrip());
}

fn scratch_rw() -> Result<(), String> {
    std::fs::create_dir("ctl-dir").map_err(|e| format!("mkdir in scratch: {e}"))?;
    std::fs::write("ctl-dir/f", b"x").map_err(|e| format!("write in scratch: {e}"))?;
    let back = std::fs::read("ctl-dir/f").map_err(|e| format!("read in scratch: {e}"))?;
    if back != b"x" {
        return Err("read back wrong bytes".into());
    }
    std::fs::remove_file("ctl-dir/f").map_err(|e| format!("delete in scratch: {e}"))?;
    std::fs::remove_dir("ctl-dir").map_err(|e| format!("rmdir in scratch: {e}"))?;
    Ok(())
}

fn fork_wait() -> Result<(), String> {
    // SAFETY: the child only calls _exit.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Err(format!("fork: {}", errno_name(errno())));
        }
        if pid == 0 {
            libc::_exit(7);
        }
        let mut status = 0;
        if libc::waitpid(pid, &mut status, 0) != pid {
            return Err(format!("waitpid: {}", errno_name(errno())));
        }
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 7 {
            return Err(format!("child status {status}"));
        }
    }
    Ok(())
}

fn pipe_roundtrip() -> Result<(), String> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two fds.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(format!("pipe: {}", errno_name(errno())));
        }
        roundtrip(fds[1], fds[0])
    }
}

fn socketpair_roundtrip() -> Result<(), String> {
    let mut fds = [0i32; 2];
    // SAFETY: fds has room for two fds.
    unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        ) != 0
        {
            return Err(format!("socketpair(AF_UNIX): {}", errno_name(errno())));
        }
        roundtrip(fds[0], fds[1])
    }
}

/// Writes two bytes to `w`, reads them from `r`, and closes both (fds
/// this process owns and passes in).
fn roundtrip(w: i32, r: i32) -> Result<(), String> {
    let mut b = [0u8; 2];
    // SAFETY: read/write on fds the caller owns, with buffers of the
    // stated size; the fds are closed once, here.
    let ok = unsafe {
        let ok = libc::write(w, b"ok".as_ptr().cast(), 2) == 2;
        let ok = ok && libc::read(r, b.as_mut_ptr().cast(), 2) == 2;
        libc::close(w);
        libc::close(r);
        ok
    } && &b == b"ok";
    if ok {
        Ok(())
    } else {
        Err("data did not round-trip".into())
    }
}

/// Parses `key=value` arguments.
pub(crate) fn arg_map(args: &[String]) -> std::collections::BTreeMap<String, String> {
    args.iter()
        .filter_map(|a| a.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
