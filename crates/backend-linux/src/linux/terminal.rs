//! A pty of the sandbox's own for `StdioMode::Terminal` (`cordon run
//! -t`), from a devpts instance no path leads to.
//!
//! A pty from the host's `/dev/pts` is owned by the caller, and in tier
//! namespaces an unprivileged caller's sandbox has the caller's uid in its
//! user namespace: it could `chmod` its slave open, and another local user
//! could then open `/dev/pts/N` to read what the caller types or to carry
//! data out of a sandbox with no network. Here the pair comes from a new
//! devpts instance (mode 0600, at most one pty), mounted nowhere: a helper
//! process makes a user and mount namespace of its own, creates the
//! instance with `fsopen`/`fsmount` (a detached mount), opens its `ptmx`
//! and the slave (`TIOCGPTPEER`), and exits. The fds stay in this process
//! (the helper shares the fd table, `CLONE_FILES`); the instance lives as
//! long as they do, and no other process can name it.

use std::os::fd::{FromRawFd, OwnedFd};

use super::sys::raw;
use cordon_core::sys::raw5;

/// What the helper reports (on this thread's stack, alive until it is
/// reaped).
#[repr(C)]
struct Args {
    master: libc::c_int,
    slave: libc::c_int,
    /// The failed step (0: none) and its errno.
    step: libc::c_int,
    errno: libc::c_int,
}

const HELPER_STACK: usize = 16 * 1024;
const FSOPEN_CLOEXEC: usize = 1;
const FSCONFIG_SET_STRING: usize = 1;
const FSCONFIG_CMD_CREATE: usize = 6;
const FSMOUNT_CLOEXEC: usize = 1;
const TIOCGPTPEER: usize = 0x5441;

/// The helper: raw syscalls only (it shares the host's memory and the
/// spawning thread's thread-local storage).
extern "C" fn helper_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Args`, alive until we are reaped;
    // raw syscalls on integers, static strings and locals.
    unsafe {
        let a = &mut *(arg as *mut Args);
        let fail = |a: &mut Args, step: i32, r: isize| -> ! {
            a.step = step;
            a.errno = (-r) as i32;
            raw(libc::SYS_exit, 0, 0, 0, 0);
            unreachable!("exit returned")
        };
        let flags = (libc::CLONE_NEWUSER | libc::CLONE_NEWNS) as usize;
        let r = raw(libc::SYS_unshare, flags, 0, 0, 0);
        if r < 0 {
            fail(a, 1, r);
        }
        let fs = raw(
            libc::SYS_fsopen,
            c"devpts".as_ptr() as usize,
            FSOPEN_CLOEXEC,
            0,
            0,
        );
        if fs < 0 {
            fail(a, 2, fs);
        }
        for (key, value) in [(c"ptmxmode", c"0666"), (c"mode", c"0600"), (c"max", c"1")] {
            let r = raw5(
                libc::SYS_fsconfig,
                [
                    fs as usize,
                    FSCONFIG_SET_STRING,
                    key.as_ptr() as usize,
                    value.as_ptr() as usize,
                    0,
                ],
            );
            if r < 0 {
                fail(a, 3, r);
            }
        }
        let r = raw5(
            libc::SYS_fsconfig,
            [fs as usize, FSCONFIG_CMD_CREATE, 0, 0, 0],
        );
        if r < 0 {
            fail(a, 4, r);
        }
        let mnt = raw(libc::SYS_fsmount, fs as usize, FSMOUNT_CLOEXEC, 0, 0);
        if mnt < 0 {
            fail(a, 5, mnt);
        }
        let open = (libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) as usize;
        let master = raw(
            libc::SYS_openat,
            mnt as usize,
            c"ptmx".as_ptr() as usize,
            open,
            0,
        );
        if master < 0 {
            fail(a, 6, master);
        }
        let unlocked: libc::c_int = 0;
        let r = raw(
            libc::SYS_ioctl,
            master as usize,
            libc::TIOCSPTLCK as usize,
            &unlocked as *const libc::c_int as usize,
            0,
        );
        if r < 0 {
            fail(a, 7, r);
        }
        let slave = raw(libc::SYS_ioctl, master as usize, TIOCGPTPEER, open, 0);
        if slave < 0 {
            fail(a, 8, slave);
        }
        raw(libc::SYS_close, mnt as usize, 0, 0, 0);
        raw(libc::SYS_close, fs as usize, 0, 0, 0);
        a.master = master as i32;
        a.slave = slave as i32;
        raw(libc::SYS_exit, 0, 0, 0, 0);
    }
    0
}

/// A pty pair (master, slave) from a devpts instance of its own.
pub(crate) fn private_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut args = Args {
        master: -1,
        slave: -1,
        step: 0,
        errno: 0,
    };
    let stack = vec![0u8; HELPER_STACK];
    let top = (stack.as_ptr() as usize + HELPER_STACK) & !15;
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: every signal is blocked around the clone and stays blocked in
    // the helper; it runs `helper_main` on `stack` with `args`, both alive
    // until it is reaped below.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &all as *const u64,
            &mut old as *mut u64,
            8usize,
        );
        let pid = libc::clone(
            helper_main,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_FILES | libc::SIGCHLD,
            &mut args as *mut Args as *mut libc::c_void,
        );
        let e = std::io::Error::last_os_error();
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &old as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
        if pid < 0 {
            return Err(e);
        }
        pid
    };
    let mut status = 0;
    // SAFETY: reaping our own child; its stack is freed only after.
    while unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } < 0 {
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // Whether it still runs on `stack` is unknown: never free it.
            std::mem::forget(stack);
            return Err(std::io::Error::other("lost the pty helper"));
        }
    }
    drop(stack);
    // SAFETY: fds the helper opened in our shared table, ours alone now.
    let take = |fd: libc::c_int| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
    let (master, slave) = (take(args.master), take(args.slave));
    match (master, slave, args.step) {
        (Some(m), Some(s), 0) => Ok((m, s)),
        _ => {
            const STEPS: [&str; 9] = [
                "",
                "unshare",
                "fsopen",
                "fsconfig",
                "create",
                "fsmount",
                "open ptmx",
                "unlock",
                "open the slave",
            ];
            let step = STEPS.get(args.step as usize).copied().unwrap_or("?");
            Err(std::io::Error::new(
                std::io::Error::from_raw_os_error(args.errno).kind(),
                format!(
                    "cannot make a pty of the sandbox's own ({step}: {})",
                    std::io::Error::from_raw_os_error(args.errno)
                ),
            ))
        }
    }
}
