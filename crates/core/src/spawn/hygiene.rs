//! The baseline hygiene every child gets as its first hook: a new session, the parent-death signal, no inherited fd.

#[allow(unused_imports)]
use super::*;

pub(super) fn install_hygiene(cmd: &mut ChildCommand, hygiene: Hygiene) {
    // Computed in the parent: nothing below may allocate in the child.
    // SAFETY: getpid and getrlimit have no preconditions.
    let parent_pid = unsafe { libc::getpid() };
    let fd_limit = fd_scan_limit();
    let keep_fds = hygiene.keep_inherited_fds;
    // SAFETY: the closure only issues raw syscalls (setsid, prctl, getppid,
    // close_range, fcntl) and builds io::Error from errno, which does not
    // allocate: it is async-signal-safe.
    unsafe {
        cmd.pre_exec(move |_| {
            // New session: new process group led by the child (the runner
            // kills the group), and no controlling terminal (no TIOCSTI).
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // No parent-death signal outside Linux: there, a child
            // outlives a host that dies without dropping its runner.
            #[cfg(any(target_os = "linux", target_os = "android"))]
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before PDEATHSIG was armed (or,
            // elsewhere, before the child got here).
            if libc::getppid() != parent_pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            if !keep_fds {
                mark_fds_cloexec(fd_limit)?;
            }
            Ok(())
        });
    }
}

/// Marks every fd >= 3 close-on-exec. Async-signal-safe.
pub(super) fn mark_fds_cloexec(fd_limit: libc::c_int) -> std::io::Result<()> {
    // SAFETY: raw syscalls on integers.
    unsafe {
        #[cfg(target_os = "linux")]
        {
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
                return Ok(());
            }
        }
        // Kernels before 5.11: walk every possible fd.
        for fd in 3..fd_limit {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

pub(super) fn fd_scan_limit() -> libc::c_int {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into rl.
    let cur = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur
    } else {
        1 << 20
    };
    cur.min(1 << 20) as libc::c_int
}
