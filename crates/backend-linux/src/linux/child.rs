//! What runs in the child between `fork` and `exec`: credentials, the
//! namespaces, mounts, rlimits, capabilities, no_new_privs, Landlock,
//! seccomp, and — with a PID namespace — the process tree that keeps the
//! sandbox inside it.
//!
//! Everything here is async-signal-safe: raw syscalls on data prepared in
//! the parent ([`ChildPlan`]), `io::Error` built from errno, no allocation,
//! no locks. Any error returned from [`confine`] makes std report the spawn
//! as failed before the program is executed.
//!
//! ## The process tree with a PID namespace
//!
//! `unshare(CLONE_NEWPID)` only places the caller's *children* in the new
//! namespace, so three processes share the work:
//!
//! ```text
//! host ── monitor (the pid the host spawned; host PID namespace; never execs)
//!           └── init (pid 1 in the sandbox; never execs)
//!                 └── program (pid 2; the only one that execs)
//! ```
//!
//! The monitor forks the init right after the namespaces are created; the
//! init sets up everything else (mounts, including a fresh `/proc` for its
//! PID namespace, rlimits, capabilities, no_new_privs, Landlock, seccomp),
//! then forks the program, which inherits all of it.
//!
//! - The **program** returns from [`confine`] and std executes it.
//! - The **init** reaps orphans, and when the program ends writes the
//!   program's wait status to the monitor and exits. The kernel then kills
//!   every other process of the namespace: background children, and ones
//!   that called `setsid()`, die with the program. Its parent-death signal
//!   kills it, and so the whole namespace, when the monitor dies.
//! - The **monitor** is what the host sees: the process-group leader whose
//!   exit status mirrors the program's (a signal death is re-raised), and
//!   whose parent-death signal (set by core's hygiene) fires when the host
//!   dies, including by SIGKILL.
//!
//! Monitor and init close every descriptor they do not need right after
//! forking, so std's exec-status pipe reports the program's exec (or its
//! failure) exactly as without the namespace, and neither holds the
//! program's stdio.

use std::os::fd::{AsRawFd, OwnedFd};

use super::filter;
use super::mounts::MountPlan;
use crate::{SANDBOX_GID, SANDBOX_UID};

/// Everything the child needs, computed in the parent. Moved into the
/// pre-exec closure, so it lives exactly as long as the `Command`.
pub(crate) struct ChildPlan {
    pub drop_to_nobody: bool,
    pub parent_pid: libc::pid_t,
    /// `CLONE_NEWUSER` plus the namespaces of the enabled layers.
    pub unshare_flags: libc::c_int,
    /// Identity uid/gid maps for the new user namespace (needed for the
    /// mounts); `None` leaves it unmapped as the legacy layers did.
    pub id_maps: Option<IdMaps>,
    pub mounts: Option<MountPlan>,
    /// Landlock rights of the scratch dir, for the rule the child adds on a
    /// private tmpfs scratch: Landlock ignores rules on a mount point that
    /// is hidden under a mount, so the rule must name the tmpfs root, which
    /// exists only in the child.
    pub scratch_rights: u64,
    pub rlimits: [(libc::__rlimit_resource_t, Option<u64>); 6],
    pub last_cap: libc::c_ulong,
    pub ruleset: OwnedFd,
    /// seccomp filters, installed in this order (compiled once per
    /// process and shared).
    pub seccomp: std::sync::Arc<Vec<filter::Program>>,
    /// Fork into monitor, init and program (needs `CLONE_NEWPID`).
    pub pid_namespace: bool,
}

/// `"deny"` for `/proc/self/setgroups` and the one-line maps.
pub(crate) struct IdMaps {
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
}

impl IdMaps {
    /// Writes `setgroups` (`deny`, required before an unprivileged
    /// `gid_map`), then the uid and gid maps of the calling process.
    /// Async-signal-safe.
    pub(crate) fn write(&self) -> std::io::Result<()> {
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", &self.uid_map)?;
        write_file(c"/proc/self/gid_map", &self.gid_map)
    }

    /// Maps `uid`/`gid` to themselves: inside, the sandbox keeps the id it
    /// has outside (65534 when the host is root), and files it creates are
    /// owned by that id on the host.
    pub(crate) fn identity(uid: u32, gid: u32) -> IdMaps {
        IdMaps {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_long(r: libc::c_long) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn errno() -> libc::c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Writes `data` to the file at `path` (one `write`).
fn write_file(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: raw syscalls on a NUL-terminated path and a byte slice.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(if n < 0 {
                err
            } else {
                std::io::Error::from_raw_os_error(libc::EIO)
            });
        }
    }
    Ok(())
}

/// Runs in the child between fork and exec. Returns only in the process
/// that is to execute the program; with a PID namespace the monitor and
/// the init never return (they `_exit`).
pub(crate) fn confine(plan: &ChildPlan) -> std::io::Result<()> {
    // SAFETY: every call below is a raw syscall on integers or on memory
    // owned by `plan`, which outlives the call.
    unsafe {
        // Root host: become nobody, with no supplementary groups.
        if plan.drop_to_nobody {
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID))?;
            check(libc::setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID))?;
        }
        // A user namespace of our own (RLIMIT_NPROC then counts only the
        // sandbox's processes) and, created inside it, the other namespaces.
        check(libc::unshare(plan.unshare_flags))?;
        if let Some(maps) = &plan.id_maps {
            // The uid change above made the process non-dumpable, which
            // hands its /proc/self files to root; writing its own maps needs
            // them to be its own. exec resets dumpability anyway.
            check(libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0))?;
            maps.write()?;
        }
        // Credential changes cleared the parent-death signal.
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        if libc::getppid() != plan.parent_pid {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    // From here on, with a PID namespace, this is the init (pid 1): the
    // process std forked stays behind as the monitor.
    let status_w = if plan.pid_namespace {
        Some(become_init()?)
    } else {
        None
    };
    // SAFETY: as above.
    unsafe {
        if let Some(mounts) = &plan.mounts {
            mounts.apply(plan.pid_namespace)?;
            if mounts.scratch_is_private() {
                add_scratch_rule(plan)?;
            }
        }
        // Resource limits (soft = hard), never above the current hard limit
        // (raising it would need CAP_SYS_RESOURCE on the host).
        for (resource, value) in plan.rlimits {
            let Some(value) = value else { continue };
            let mut cur = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            check(libc::getrlimit(resource, &mut cur))?;
            let v = (value as libc::rlim_t).min(cur.rlim_max);
            let new = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            check(libc::setrlimit(resource, &new))?;
        }
        // No capabilities: ambient, bounding set, then the sets.
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        let mut cap: libc::c_ulong = 0;
        while cap <= plan.last_cap {
            check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
            cap += 1;
        }
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        check_long(libc::syscall(
            libc::SYS_capset,
            &header as *const CapHeader,
            data.as_ptr(),
        ))?;
        // No privilege gain through exec (setuid, file caps).
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        check_long(libc::syscall(
            libc::SYS_landlock_restrict_self,
            plan.ruleset.as_raw_fd(),
            0u32,
        ))?;
        // seccomp last, so nothing above is itself filtered. Monitor and
        // init are confined by all of it too.
        for prog in plan.seccomp.iter() {
            let fprog = libc::sock_fprog {
                len: prog.len() as libc::c_ushort,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            check_long(libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
                0 as libc::c_ulong,
                &fprog as *const libc::sock_fprog,
            ))?;
        }
    }
    if let Some(status_w) = status_w {
        fork_program(status_w)?;
    }
    Ok(())
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's UAPI).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const LANDLOCK_RULE_PATH_BENEATH: libc::c_uint = 1;

/// Adds the scratch rule for the tmpfs now mounted on the cwd to the
/// ruleset (before `landlock_restrict_self`, which snapshots it).
fn add_scratch_rule(plan: &ChildPlan) -> std::io::Result<()> {
    // SAFETY: raw syscalls on a NUL-terminated string, an fd we own and a
    // struct the kernel reads `size_of` bytes from.
    unsafe {
        let dir = libc::open(
            c".".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let attr = PathBeneathAttr {
            allowed_access: plan.scratch_rights,
            parent_fd: dir,
        };
        let r = libc::syscall(
            libc::SYS_landlock_add_rule,
            plan.ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        );
        let err = std::io::Error::last_os_error();
        libc::close(dir);
        if r < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// Resets every catchable signal to its default action: monitor and init
/// are forks of the host and inherited its handlers. For the init this
/// also means that signals sent from inside the namespace are ignored (the
/// kernel protects a PID namespace's init from signals it has no handler
/// for).
fn reset_signal_handlers() {
    // SAFETY: sigaction with a zeroed struct (SIG_DFL, empty mask).
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}

/// Closes every descriptor except `keep`.
fn close_all_but(keep: libc::c_int) {
    // SAFETY: close_range on integer ranges.
    unsafe {
        if keep > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (keep - 1) as u32, 0u32);
        }
        libc::syscall(libc::SYS_close_range, (keep + 1) as u32, u32::MAX, 0u32);
    }
}

/// Forks the monitor/init pair (see the module docs). Returns in the init,
/// the first process of the new PID namespace, with the write end of the
/// status pipe; the monitor never returns.
fn become_init() -> std::io::Result<libc::c_int> {
    let mut status_pipe = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds into the array.
    check(unsafe { libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) })?;
    let [status_r, status_w] = status_pipe;
    reset_signal_handlers();
    // SAFETY: fork in a single-threaded child; both sides continue with
    // raw syscalls only.
    let init = unsafe { libc::fork() };
    if init < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if init > 0 {
        monitor(init, status_r, status_w)
    }
    // SAFETY: raw syscalls on integers.
    unsafe {
        libc::close(status_r);
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        // The monitor may have died before the signal was armed: then the
        // read end of the status pipe is closed and the write end polls as
        // an error.
        let mut pfd = libc::pollfd {
            fd: status_w,
            events: libc::POLLOUT,
            revents: 0,
        };
        if libc::poll(&mut pfd, 1, 0) < 0 || pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(status_w)
}

/// In the init, once it is confined: forks the program (which returns and
/// is executed by std) and becomes the reaping loop.
fn fork_program(status_w: libc::c_int) -> std::io::Result<()> {
    // SAFETY: fork in a single-threaded process.
    let program = unsafe { libc::fork() };
    if program < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if program > 0 {
        init_loop(program, status_w)
    }
    // The program: its copy of the status pipe is close-on-exec.
    Ok(())
}

/// The monitor: waits for the init, then mirrors the program's status.
fn monitor(init: libc::pid_t, status_r: libc::c_int, status_w: libc::c_int) -> ! {
    // SAFETY: raw syscalls on integers and local buffers; never returns.
    unsafe {
        libc::close(status_w);
        close_all_but(status_r);
        let mut init_status = 0;
        while libc::waitpid(init, &mut init_status, 0) < 0 {
            if errno() != libc::EINTR {
                libc::_exit(127);
            }
        }
        let mut buf = [0u8; 4];
        let n = libc::read(status_r, buf.as_mut_ptr().cast(), 4);
        let status = if n == 4 {
            libc::c_int::from_ne_bytes(buf)
        } else {
            // The init died without reporting (killed by the host or by its
            // parent-death signal): mirror the init itself.
            init_status
        };
        mirror(status)
    }
}

/// Ends this process the way `status` ended: the same exit code, or the
/// same signal.
fn mirror(status: libc::c_int) -> ! {
    // SAFETY: raw syscalls; never returns.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            // Handlers were reset to SIG_DFL; the mask was cleared by std
            // before pre_exec. A core-dumping signal dumps nothing
            // (RLIMIT_CORE is 0).
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            127
        })
    }
}

/// The init: reaps every child until the program ends, reports its status
/// and exits (which kills the rest of the namespace).
fn init_loop(program: libc::pid_t, status_w: libc::c_int) -> ! {
    close_all_but(status_w);
    // SAFETY: raw syscalls on integers and local buffers; never returns.
    unsafe {
        loop {
            let mut status = 0;
            let pid = libc::waitpid(-1, &mut status, 0);
            if pid == program {
                let buf = status.to_ne_bytes();
                libc::write(status_w, buf.as_ptr().cast(), 4);
                libc::_exit(0);
            }
            if pid < 0 && errno() != libc::EINTR {
                libc::_exit(127);
            }
        }
    }
}
