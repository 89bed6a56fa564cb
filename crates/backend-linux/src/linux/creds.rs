//! Credentials: on a root host the launcher becomes the sandbox's own uid
//! and gid with no supplementary groups, and after any credential change
//! its parent-death signal is armed again.
//!
//! Raw syscalls: the launcher shares the host's memory, and glibc's
//! `setresuid`/`setgroups` signal every thread glibc knows of — the host's
//! — to change their credentials too.

use super::sys::check_long;

/// `setgroups(0)`, `setresgid(gid)`, `setresuid(uid)`. Async-signal-safe.
pub(crate) fn become_ids(uid: u32, gid: u32) -> std::io::Result<()> {
    // SAFETY: raw syscalls on integers and a null list.
    unsafe {
        check_long(libc::syscall(
            libc::SYS_setgroups,
            0usize,
            std::ptr::null::<libc::gid_t>(),
        ))?;
        check_long(libc::syscall(libc::SYS_setresgid, gid, gid, gid))?;
        check_long(libc::syscall(libc::SYS_setresuid, uid, uid, uid))
    }
}

/// Arms `PR_SET_PDEATHSIG(SIGKILL)` again (a credential change cleared
/// it) and checks the parent is still `parent`: had it died before the
/// signal was armed, nothing would kill this process. Async-signal-safe.
pub(crate) fn rearm_parent_death(parent: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl and getppid on integers.
    unsafe {
        check_long(
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            )
            .into(),
        )?;
        if libc::getppid() != parent {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}
