//! P1 from the other side: what a host process of *another* uid can do to
//! the sandboxed program, and the sacrificial taking the program's uid.
//!
//! On a root host every sandbox must have a uid that no host process has.
//! The attacker is the probe binary in `reach` mode, run by the host as
//! uid 65534 (`nobody`: the uid daemons run as, and the one sandboxes of
//! root hosts used to share). It tries, against the program's host pid,
//! what a process of the program's uid could do: `PTRACE_SEIZE`, open
//! `/proc/<pid>/{mem,environ}` and `/proc/<pid>/root/`, `setns` into its
//! user namespace, `pidfd_getfd` its stdin, and `kill(pid, 0)`. Each must
//! fail; a backend that runs its sandboxes as 65534 fails them all. The
//! attacker is a host-side helper, not sandboxed: what it saw is the
//! host's evidence.
//!
//! An unprivileged host cannot run a process as another uid, and its
//! sandboxes are its own uid (the README names that as inherent): no
//! check is made there.
//!
//! The sacrificial process starts as the host's uid; once the program is
//! held at `ready`, the host tells it to become the program's uid and gid
//! (`become U G`), so that what P1 then tries against it is stopped by the
//! sandbox, not by the two uids differing.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use cordon_core::CheckResult;

use crate::harness::{unreachable, verdict, Ids};

/// The uid the attacker runs as.
pub(crate) const ATTACKER_UID: u32 = 65534;

/// The attempts, in the order the attacker reports them, with their check
/// names.
pub(crate) const ATTEMPTS: [(&str, &str); 7] = [
    ("ptrace", "other-user-ptrace"),
    ("mem", "other-user-proc-mem"),
    ("environ", "other-user-proc-environ"),
    ("root", "other-user-proc-root"),
    ("setns", "other-user-setns"),
    ("pidfd_getfd", "other-user-pidfd-getfd"),
    ("signal", "other-user-signal"),
];

/// The attacker (`reach` mode, on the host as [`ATTACKER_UID`]): one
/// `name=ok` or `name=errnoN` word per attempt on `pid=`. A successful
/// trace is detached at once; every fd it got is closed.
pub(crate) fn reach(args: &BTreeMap<String, String>) -> i32 {
    let Some(pid) = args.get("pid").and_then(|p| p.parse::<libc::pid_t>().ok()) else {
        println!("no pid");
        return 2;
    };
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    let mut out = Vec::new();
    let mut note = |name: &str, ok: bool| {
        out.push(if ok {
            format!("{name}=ok")
        } else {
            format!("{name}=errno{}", errno())
        })
    };
    let c = |p: String| crate::child::cstr(&p);
    // SAFETY: syscalls on a pid, paths and fds of this process; every
    // success is undone (detach, close).
    unsafe {
        let r = libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0);
        if r == 0 {
            libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
        }
        note("ptrace", r == 0);
        for (name, path, flags) in [
            ("mem", format!("/proc/{pid}/mem"), libc::O_RDONLY),
            ("environ", format!("/proc/{pid}/environ"), libc::O_RDONLY),
            (
                "root",
                format!("/proc/{pid}/root/"),
                libc::O_RDONLY | libc::O_DIRECTORY,
            ),
        ] {
            let fd = libc::open(c(path).as_ptr(), flags | libc::O_CLOEXEC);
            note(name, fd >= 0);
            if fd >= 0 {
                libc::close(fd);
            }
        }
        let ns = libc::open(
            c(format!("/proc/{pid}/ns/user")).as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        note(
            "setns",
            ns >= 0 && libc::setns(ns, libc::CLONE_NEWUSER) == 0,
        );
        if ns >= 0 {
            libc::close(ns);
        }
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as libc::c_int;
        let fd = if pidfd >= 0 {
            libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0) as libc::c_int
        } else {
            -1
        };
        note("pidfd_getfd", fd >= 0);
        if fd >= 0 {
            libc::close(fd);
        }
        if pidfd >= 0 {
            libc::close(pidfd);
        }
        note("signal", libc::kill(pid, 0) == 0);
    }
    println!("{}", out.join(" "));
    0
}

/// The host's side: runs the attacker against the program `pid` (a root
/// host only) and turns its report into one check per attempt.
pub(crate) fn attack(exe: &std::path::Path, pid: i32) -> Vec<CheckResult> {
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(exe)
        .arg(crate::child::PROBE_ARG)
        .arg("P1-reach")
        .arg(format!("pid={pid}"))
        .env_clear()
        .current_dir("/")
        .uid(ATTACKER_UID)
        .gid(ATTACKER_UID)
        .stdin(std::process::Stdio::null())
        .output();
    let line = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Err(e) => {
            return ATTEMPTS
                .iter()
                .map(|(_, n)| unreachable(n, format!("cannot run the attacker: {e}")))
                .collect()
        }
    };
    let words: BTreeMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    ATTEMPTS
        .iter()
        .map(|(attempt, name)| match words.get(attempt) {
            None => unreachable(name, format!("the attacker did not report it: {line:?}")),
            Some(&"ok") => verdict(
                name,
                false,
                format!(
                    "a host process of uid {ATTACKER_UID} succeeded ({attempt}) against the \
                     program: it shares that process's uid"
                ),
            ),
            Some(e) => verdict(
                name,
                true,
                format!("a host process of uid {ATTACKER_UID} was refused ({attempt}: {e})"),
            ),
        })
        .collect()
}

/// The program's uid and gid as the host sees them.
pub(crate) fn program_ids(pid: i32) -> Option<Ids> {
    let st = crate::inspect::status(pid)?;
    let first = |k: &str| -> Option<u32> { st.get(k)?.split_whitespace().next()?.parse().ok() };
    Some(Ids {
        uid: first("Uid")?,
        gid: first("Gid")?,
    })
}

/// The sacrificial's side of `become U G`: every IPC target it made is
/// given to U/G, then it becomes them (credentials last: as U it could not
/// change the objects any more).
pub(crate) fn become_ids(token: &str, ids: Ids) -> Result<(), String> {
    super::ipc::give_targets(token, ids)?;
    // SAFETY: credential changes of this single-threaded helper process.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(ids.gid, ids.gid, ids.gid) != 0
            || libc::setresuid(ids.uid, ids.uid, ids.uid) != 0
        {
            return Err(std::io::Error::last_os_error().to_string());
        }
    }
    Ok(())
}

/// One line from `fd` (blocking, at most `timeout`), without its newline.
pub(crate) fn read_line(fd: &OwnedFd, timeout: Duration) -> Option<String> {
    let deadline = std::time::Instant::now() + timeout;
    let mut line = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd on this frame.
        if unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(60_000) as libc::c_int) } <= 0 {
            continue;
        }
        let mut b = 0u8;
        // SAFETY: a one-byte read into a local from our fd.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&mut b as *mut u8).cast(), 1) };
        if n <= 0 {
            return None;
        }
        if b == b'\n' {
            return Some(String::from_utf8_lossy(&line).into_owned());
        }
        line.push(b);
    }
}

/// The sacrificial process's side: make the IPC targets, say so, then on
/// the host's `become U G` give them to U/G and become U/G
/// ([`become_ids`]), and sleep.
pub(crate) fn sacrificial(args: &BTreeMap<String, String>) {
    use std::io::{BufRead, Write};
    let token = args.get("token").map(String::as_str).unwrap_or("none");
    let line = super::ipc::create_targets(token);
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    let mut order = String::new();
    if std::io::stdin().lock().read_line(&mut order).is_ok() {
        let words: Vec<&str> = order.split_whitespace().collect();
        if let ["become", uid, gid] = words[..] {
            let reply = match (uid.parse(), gid.parse()) {
                (Ok(uid), Ok(gid)) => match become_ids(token, Ids { uid, gid }) {
                    Ok(()) => "became".to_string(),
                    Err(e) => format!("cannot become {uid}/{gid}: {e}"),
                },
                _ => "bad ids".to_string(),
            };
            let _ = writeln!(out, "{reply}");
            let _ = out.flush();
        }
    }
    std::thread::sleep(Duration::from_secs(60));
}

/// At the `ready` hold, before the child attacks: the host reads the
/// program's ids, has a process of another uid attack the program (a root
/// host), makes the sacrificial take the program's ids, and checks the
/// program's UTS namespace is not the host's.
pub(crate) fn at_ready(
    ctx: &crate::harness::ProbeContext,
    h: &crate::harness::Hold<'_>,
    sacrificial: i32,
    order: &mut Option<std::fs::File>,
    answer: &std::os::fd::OwnedFd,
    program: &mut Option<crate::harness::Ids>,
) -> Vec<CheckResult> {
    use std::io::Write;
    let mut out = Vec::new();
    let Some(pid) = h.pid else {
        return vec![unreachable("ready", "cannot find the program on the host")];
    };
    let Some(ids) = program_ids(pid) else {
        return vec![unreachable("ready", "cannot read the program's ids")];
    };
    *program = Some(ids);
    if let Err(e) = ctx.guard_ids(ids) {
        out.push(unreachable("ready", e));
    }
    if ctx.host_uid == 0 {
        out.extend(attack(&ctx.exe, pid));
    }
    let same = ids.uid == ctx.host_uid;
    let told = match order.take() {
        Some(mut w) if !same => writeln!(w, "become {} {}", ids.uid, ids.gid)
            .map_err(|e| e.to_string())
            .and_then(|()| read_line(answer, ctx.timeout).ok_or_else(|| "no answer".to_string())),
        Some(_) => Ok("became".to_string()),
        None => Err("told twice".to_string()),
    };
    let now = program_ids(sacrificial);
    out.push(match told {
        Ok(a) if a == "became" && now == Some(ids) => verdict(
            "control-sacrificial-has-program-uid",
            true,
            format!(
                "the sacrificial runs as the program's uid {} gid {}",
                ids.uid, ids.gid
            ),
        ),
        Ok(a) => unreachable(
            "control-sacrificial-has-program-uid",
            format!("the sacrificial could not take the program's ids: {a} (now {now:?})"),
        ),
        Err(e) => unreachable("control-sacrificial-has-program-uid", e),
    });
    let ns = |p: &str| std::fs::read_link(p).ok();
    out.push(
        match (ns(&format!("/proc/{pid}/ns/uts")), ns("/proc/self/ns/uts")) {
            (Some(a), Some(b)) => verdict(
                "own-uts-namespace",
                a != b,
                format!("the program's UTS namespace {a:?}, the host's {b:?}"),
            ),
            _ => unreachable("own-uts-namespace", "cannot read the UTS namespaces"),
        },
    );
    out
}

pub(crate) fn pipe() -> Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd), String> {
    use std::os::fd::FromRawFd;
    let mut p = [0; 2];
    // SAFETY: pipe2 into a local array; the fds are ours.
    unsafe {
        if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        Ok((
            std::os::fd::OwnedFd::from_raw_fd(p[0]),
            std::os::fd::OwnedFd::from_raw_fd(p[1]),
        ))
    }
}

/// The host's hostname must not be ours (a UTS namespace of our own).
pub(crate) fn hostname(r: &mut crate::child::Reporter, host: Option<&String>) {
    // SAFETY: uname into a zeroed struct.
    let ours = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        (libc::uname(&mut u) == 0).then(|| {
            std::ffi::CStr::from_ptr(u.nodename.as_ptr())
                .to_string_lossy()
                .into_owned()
        })
    };
    match (ours, host) {
        (Some(ours), Some(host)) if !host.is_empty() => r.check(
            "hostname-hidden",
            if ours != *host {
                cordon_core::ProbeStatus::Pass
            } else {
                cordon_core::ProbeStatus::Fail
            },
            format!("the program's hostname is {ours:?}"),
        ),
        _ => r.check(
            "hostname-hidden",
            cordon_core::ProbeStatus::Unreachable,
            "no hostname to compare",
        ),
    }
}
