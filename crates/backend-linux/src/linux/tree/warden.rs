//! The warden of tier landlock's process tree: the init's child, which
//! kills the sandbox's process group when the init dies, however it dies.

use std::sync::atomic::Ordering;

use super::{raw, Shared};

/// The signal the warden's parent (the init) dying sends it.
const WARDEN_SIGNAL: libc::c_int = libc::SIGTERM;

/// The warden (tier landlock): the init's child, in its process group,
/// outside the Landlock domain. It only waits for its parent-death
/// signal (blocked, so it queues), which the init's death sends however
/// the init died, and then kills the whole process group, itself with
/// it. Raw syscalls only.
pub(super) extern "C" fn warden_main(shared: *const Shared) -> ! {
    const SIGSET_BYTES: usize = 8;
    // SAFETY: the slot outlives the warden (it is reused only once the
    // init, which the warden outlives only by its own kill, is gone).
    let shared = unsafe { &*shared };
    // SAFETY: raw syscalls on integers and on this frame's own locals.
    unsafe {
        let all: u64 = !0;
        raw(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as usize,
            &all as *const u64 as usize,
            0,
            SIGSET_BYTES,
        );
        raw(libc::SYS_close_range, 0, u32::MAX as usize, 0, 0);
        let r = raw(
            libc::SYS_prctl,
            libc::PR_SET_PDEATHSIG as usize,
            WARDEN_SIGNAL as usize,
            0,
            0,
        );
        // The init died before the signal was armed (or it cannot be):
        // the group goes now.
        let init = shared.init_self.load(Ordering::Acquire);
        if r == 0 && raw(libc::SYS_getppid, 0, 0, 0, 0) == init as isize {
            let set: u64 = 1 << (WARDEN_SIGNAL - 1);
            while raw(
                libc::SYS_rt_sigtimedwait,
                &set as *const u64 as usize,
                0,
                0,
                SIGSET_BYTES,
            ) != WARDEN_SIGNAL as isize
            {}
        }
        raw(libc::SYS_kill, 0, libc::SIGKILL as usize, 0, 0);
        raw(libc::SYS_exit_group, 1, 0, 0, 0);
    }
    unreachable!("exit_group returned")
}

/// Other architectures: the warden is a raw fork of the init.
#[cfg(not(target_arch = "x86_64"))]
pub(super) fn start_warden(shared: &Shared) -> isize {
    // SAFETY: a fork (no CLONE_VM, no new stack): the child has its own
    // copy of everything and never returns from `warden_main`.
    let pid = unsafe { raw(libc::SYS_clone, libc::SIGCHLD as usize, 0, 0, 0) };
    if pid == 0 {
        warden_main(shared)
    }
    pid
}
