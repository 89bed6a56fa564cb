//! P1's child side: inside the sandbox, every call aimed at the
//! sacrificial process, the enumeration around it, the UNIX socket
//! connects, and the IPC and terminal tries of `ipc.rs` and `tty.rs`.

use cordon_core::ProbeStatus;

use crate::child::{self, errno, Reporter, HOST_PID_DENIED, PROC_PID_DENIED};
use crate::registry::ProbeArgs;

use super::{host_user, ipc, tty};

/// Runs one call aimed at the sacrificial pid and reports it.
fn aimed(r: &mut Reporter, name: &str, what: &str, rc: i64) {
    r.forbidden(
        name,
        if rc >= 0 {
            Ok(what.to_string())
        } else {
            Err(errno())
        },
        &HOST_PID_DENIED,
    );
}

pub(super) fn child(r: &mut Reporter, args: &ProbeArgs) {
    let pid: i32 = args.get("pid").and_then(|p| p.parse().ok()).unwrap_or(0);
    if pid <= 1 {
        r.check("args", ProbeStatus::Unreachable, "no sacrificial pid given");
        return;
    }
    // The host learns our ids and gives them to the sacrificial first.
    r.hold("ready");
    host_user::hostname(r, args.get("hostname"));
    // SAFETY: PTRACE_ATTACH on the sacrificial pid; detached after the hold.
    let attached = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0, 0) } == 0;
    aimed(
        r,
        "ptrace-attach",
        "attached",
        if attached { 0 } else { -1 },
    );

    let mut buf = [0u8; 8];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: 0x10000 as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: local iovec points into buf.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    let e = errno();
    if n >= 0 || e == libc::EFAULT {
        r.check(
            "process-vm-readv",
            ProbeStatus::Fail,
            "reached the host process's memory",
        );
    } else {
        r.forbidden("process-vm-readv", Err(e), &HOST_PID_DENIED);
    }
    r.forbidden(
        "proc-environ",
        child::read_file(&format!("/proc/{pid}/environ")),
        &PROC_PID_DENIED,
    );
    r.forbidden(
        "proc-mem",
        child::open(&format!("/proc/{pid}/mem"), libc::O_RDONLY).map(|fd| {
            child::close(fd);
            "opened".into()
        }),
        &PROC_PID_DENIED,
    );
    // SAFETY: pidfd_open on an integer; closed if it succeeded.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd >= 0 {
        child::close(pidfd as i32);
    }
    aimed(r, "pidfd-open", "opened a pidfd to the host process", pidfd);
    // SAFETY: getpgid only reads.
    let pg = unsafe { libc::getpgid(pid) };
    aimed(
        r,
        "getpgid",
        &format!("learnt its process group {pg}"),
        pg as i64,
    );
    enumerate(r, pid, args.get("window"));
    control_calls(r, pid, args.get("cpu"));

    let denied = [libc::EPERM, libc::EACCES];
    if let Some(name) = args.get("abstract") {
        r.forbidden(
            "abstract-unix-connect",
            connect_unix(name.as_bytes(), true),
            &denied,
        );
    }
    if let Some(path) = args.get("unix_path") {
        r.forbidden(
            "pathname-unix-connect",
            connect_unix(path.as_bytes(), false),
            &denied,
        );
    }
    ipc::attack(r, args);
    let pty = tty::attack(r, args.get("pty"));

    // The host now looks at the sacrificial and at us.
    r.hold("attacked");
    if let Some(fd) = pty {
        child::close(fd);
    }
    if attached {
        // SAFETY: detaching what we attached.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0) };
    }

    // Signals last: a breach of SIGKILL ends the sacrificial process, which
    // would make the checks above inconclusive.
    for (name, sig) in [
        ("signal-0", 0),
        ("signal-cont", libc::SIGCONT),
        ("signal-kill", libc::SIGKILL),
    ] {
        // SAFETY: kill has no memory effects.
        let rc = unsafe { libc::kill(pid, sig) };
        aimed(r, name, &format!("kill({pid}, {sig})"), rc as i64);
    }
    if let Some(t) = args.get("token") {
        ipc::leave_own(r, t);
    }
}

/// `prlimit`, `setpriority`, `sched_setscheduler`, `sched_setaffinity` and
/// `ioprio_set` on the sacrificial pid. Each change is harmless to a
/// sleeping process, and the host checks none took effect.
fn control_calls(r: &mut Reporter, pid: i32, cpu: Option<&String>) {
    for (name, resource, value) in [
        ("prlimit-cpu", libc::RLIMIT_CPU, 1),
        ("prlimit-nofile", libc::RLIMIT_NOFILE, 4),
    ] {
        let new = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: prlimit with a valid new limit and no old-limit buffer.
        let rc = unsafe { libc::prlimit(pid, resource, &new, std::ptr::null_mut()) };
        aimed(r, name, &format!("set its limit to {value}"), rc as i64);
    }
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, pid as libc::id_t, 19) };
    aimed(r, "setpriority", "set its nice value to 19", rc as i64);
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: param is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(pid, libc::SCHED_IDLE, &param) };
    aimed(r, "sched-setscheduler", "made it SCHED_IDLE", rc as i64);
    let cpu: usize = cpu.and_then(|c| c.parse().ok()).unwrap_or(0);
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    aimed(
        r,
        "sched-setaffinity",
        &format!("pinned it to CPU {cpu}"),
        rc as i64,
    );
    // IOPRIO_WHO_PROCESS, class IDLE (3) << IOPRIO_CLASS_SHIFT (13).
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_set, 1, pid, 3 << 13) };
    aimed(r, "ioprio-set", "made its I/O class idle", rc);
}

/// Counts the pids of `window` (`lo-hi`) that the child can tell exist:
/// `getpgid` works, `kill(pid, 0)` works or says `EPERM` (which also means
/// it exists), or `/proc/<pid>` can be `stat`ed. Signal 0 sends nothing.
fn enumerate(r: &mut Reporter, sacrificial: i32, window: Option<&String>) {
    const NAME: &str = "enumerate-host-pids";
    let Some((lo, hi)) = window
        .and_then(|w| w.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<i32>().ok()?, b.parse::<i32>().ok()?)))
    else {
        r.check(NAME, ProbeStatus::Unreachable, "no pid window given");
        return;
    };
    let mut seen = 0;
    let mut sacrificial_by = Vec::new();
    for p in lo..=hi {
        // SAFETY: getpgid and kill(p, 0) only query.
        let by_pgid = unsafe { libc::getpgid(p) } >= 0;
        // SAFETY: as above (signal 0 sends nothing).
        let by_kill = unsafe { libc::kill(p, 0) } == 0 || errno() == libc::EPERM;
        let by_proc = std::fs::symlink_metadata(format!("/proc/{p}")).is_ok();
        if by_pgid || by_kill || by_proc {
            seen += 1;
        }
        if p == sacrificial {
            for (hit, how) in [
                (by_pgid, "getpgid"),
                (by_kill, "kill(pid, 0)"),
                (by_proc, "stat /proc/<pid>"),
            ] {
                if hit {
                    sacrificial_by.push(how);
                }
            }
        }
    }
    if sacrificial_by.is_empty() {
        r.check(
            NAME,
            ProbeStatus::Pass,
            format!("the host process is invisible; {seen} pids of {lo}..{hi} are visible"),
        );
    } else {
        r.check(
            NAME,
            ProbeStatus::Fail,
            format!(
                "sees the host process (by {}) and {seen} pids of {lo}..{hi}",
                sacrificial_by.join(", ")
            ),
        );
    }
}

/// Connects an AF_UNIX stream socket to a pathname or abstract address.
fn connect_unix(name: &[u8], abstract_ns: bool) -> Result<String, i32> {
    // SAFETY: plain socket calls on a zeroed sockaddr_un we fill in bounds.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let (addr, len) = unix_addr(name, abstract_ns);
        let rc = libc::connect(fd, (&addr as *const libc::sockaddr_un).cast(), len);
        let e = errno();
        libc::close(fd);
        if rc == 0 {
            Ok("connected".into())
        } else {
            Err(e)
        }
    }
}

/// A `sockaddr_un` for a pathname or abstract name, and its length.
pub(crate) fn unix_addr(name: &[u8], abstract_ns: bool) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let offset = usize::from(abstract_ns);
    let n = name.len().min(addr.sun_path.len() - 1 - offset);
    for (i, b) in name[..n].iter().enumerate() {
        addr.sun_path[i + offset] = *b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + offset + n + usize::from(!abstract_ns);
    (addr, len as libc::socklen_t)
}
