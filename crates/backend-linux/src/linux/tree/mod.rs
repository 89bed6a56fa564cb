//! The PID namespace's process tree: a minimal init as pid 1, and the
//! program.
//!
//! `unshare(CLONE_NEWPID)` only places the caller's *children* in the new
//! namespace. The process core launched (the *launcher*: a
//! `clone(CLONE_VM | CLONE_VFORK)` child running in the host's memory
//! while the spawning thread is suspended) has created the namespaces;
//! [`split`] then makes two processes and hands the launch over:
//!
//! ```text
//! host ─┬─ launcher (creates the namespaces; exits once the program runs)
//!       └─ init     (pid 1; the host's child through CLONE_PARENT; the
//!            │       process the runner waits for and kills)
//!            └── program  (pid 2: returns from `split`, is confined, execs)
//! ```
//!
//! - The **program** returns from [`split`]; the rest of the confinement
//!   (mounts, a fresh `/proc`, rlimits, capabilities, no_new_privs,
//!   Landlock, seccomp) runs in it, and core's launcher executes it.
//! - The **init** reaps whatever is reparented to it. When the program
//!   ends it records the program's wait status where the host reads it
//!   ([`TreeSlot::program_status`]: pid 1 cannot die of the program's
//!   signal) and exits; the kernel then kills every other process of the
//!   namespace, so background children and ones that called `setsid()`
//!   die with the program. It leads a session of its own, so the runner's
//!   group kill reaches it, and its parent-death signal fires when the
//!   host thread that spawned it dies (including by SIGKILL). The program
//!   is the init's child on purpose: when everything is SIGKILLed at once,
//!   the dying init reaps the program itself instead of waiting for a
//!   parent outside the namespace to do it.
//! - The **launcher** sleeps until the program has executed, then hands
//!   the launch over to the init ([`ChildContext::hand_over`]) and exits.
//!
//! ## Nothing of the host is copied (x86_64)
//!
//! `fork` copies the host's page tables (measured here: 120 µs for a
//! 1 MiB process, 1.5 ms for 50 MiB) and, while the copy lives, turns
//! every page the host writes into a copy-on-write fault. No process of
//! the tree is a `fork`:
//!
//! - the init is a `clone(CLONE_VM | CLONE_PARENT)` running on a stack of
//!   its own in a [`TreeSlot`] the parent reserved: it shares the host's
//!   memory for its whole life and touches nothing of it but that slot,
//!   with raw `syscall` instructions only (not even libc's `errno`, which
//!   lives in the spawning thread's thread-local storage). The kernel
//!   clears the slot's tid word when the init exits
//!   (`CLONE_CHILD_CLEARTID`): only then can the slot be reused;
//! - the program is a `clone(CLONE_VM | CLONE_VFORK)` by the init, which
//!   then is suspended until the program execs (or exits). The new process
//!   restores the launcher's registers and stack pointer, saved just
//!   before the init was created, and so *returns from [`split`] in the
//!   launcher's frames* — on to the rest of the confinement and the exec —
//!   while the launcher sleeps on a pipe that only the program's exec (its
//!   close-on-exec copy) and the init close. The launcher then never
//!   returns into those frames (the program has run over them): it hands
//!   over, which exits.
//!
//! Other architectures take the same steps with raw `fork`s, the status
//! in a shared mapping.
//!
//! The init closes every descriptor it holds once the program has
//! exec'd, so the launch's report pipe reports the program's exec, or its
//! failure, and the init holds none of the program's stdio.

use std::sync::atomic::{AtomicI32, Ordering};
#[cfg(target_arch = "x86_64")]
use std::sync::Mutex;

use cordon_core::ChildContext;

/// What the launcher, the init and the host share for one sandbox.
#[repr(C)]
struct Shared {
    /// The init's tid while it lives: set by the kernel when it is created
    /// (`CLONE_PARENT_SETTID`), cleared when it exits
    /// (`CLONE_CHILD_CLEARTID`, x86_64).
    init_tid: AtomicI32,
    have_status: AtomicI32,
    status: AtomicI32,
    /// A pidfd of the host process (set by the launcher): the init checks
    /// through it that the host is alive once its parent-death signal is
    /// armed.
    host_fd: AtomicI32,
    /// The write end of the pipe the launcher sleeps on.
    exec_w: AtomicI32,
    /// The launch's report pipe (core's), on which the init reports a
    /// failure to start the program.
    report_fd: AtomicI32,
    /// 1 in tier landlock: no PID namespace, so the init is a subreaper
    /// with a warden beside it ([`start_warden`]), and it kills the
    /// sandbox's process group itself.
    subreaper: AtomicI32,
    /// The warden's tid while it lives (tier landlock): set by the kernel
    /// when it is created, cleared when it exits (x86_64), like
    /// `init_tid`.
    warden: AtomicI32,
    /// The warden's pid, as the init got it from `clone` (never cleared:
    /// the init compares what it reaps with it).
    warden_pid: AtomicI32,
    /// 1 when the program's stdio is a pty of its own
    /// ([`ChildCommand::controlling_terminal`]): the init, which leads the
    /// program's session, makes fd 0 its controlling terminal.
    ///
    /// [`ChildCommand::controlling_terminal`]: cordon_core::ChildCommand::controlling_terminal
    terminal: AtomicI32,
    /// The init's pid as it sees itself (set before the warden starts,
    /// which compares its parent with it): in a running container
    /// entered, the container's PID namespace's number, not the host's
    /// `init_tid`.
    init_self: AtomicI32,
    /// The launcher's saved registers (x86_64): rbx, rbp, r12–r15, rsp,
    /// and where to resume.
    context: [u64; 8],
}

/// The init's stack (x86_64, where it shares the host's memory), and
/// before it the map writer's (`maps.rs`): the top of the slot. Their
/// frames need a few hundred bytes (they call nothing but their own
/// raw-syscall functions).
const INIT_STACK: usize = 16 * 1024;

/// The warden's stack (tier landlock, x86_64), below the init's with a
/// guard page between: the warden runs beside the init.
const WARDEN_STACK: usize = 8 * 1024;

/// The memory of one sandbox's tree, reserved in the parent before the
/// launch: the [`Shared`] words and (x86_64) the init's stack. Never
/// unmapped on x86_64, where the init runs on it in the host's memory:
/// kept in a pool and reused once its init has exited and the host has
/// released it.
#[derive(Debug)]
pub(crate) struct TreeSlot {
    base: *mut u8,
}

// SAFETY: the slot is plain memory; its shared words are atomics.
unsafe impl Send for TreeSlot {}
// SAFETY: as above.
unsafe impl Sync for TreeSlot {}

#[cfg(target_arch = "x86_64")]
static FREE_SLOTS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The slot: a page of [`Shared`] words, a guard page (an overflow of a
/// stack faults instead of overwriting what is below it), the warden's
/// stack, another guard page, then the init's stack.
const SLOT_BYTES: usize = 4096 + GUARD_BYTES + WARDEN_STACK + GUARD_BYTES + INIT_STACK;
const GUARD_BYTES: usize = 4096;
/// Where the warden's stack ends (its top, from the slot's base).
const WARDEN_TOP: usize = 4096 + GUARD_BYTES + WARDEN_STACK;

impl TreeSlot {
    /// Reserves a slot: a free one from the pool, or a new mapping.
    pub(crate) fn reserve() -> std::io::Result<TreeSlot> {
        #[cfg(target_arch = "x86_64")]
        {
            let mut free = FREE_SLOTS.lock().unwrap_or_else(|p| p.into_inner());
            // Slots whose host is done with them, free once their init is
            // gone.
            if let Some(i) = free.iter().position(|&b| {
                // SAFETY: every pooled address is a live slot.
                let s = unsafe { &*(b as *const Shared) };
                s.init_tid.load(Ordering::Acquire) == 0 && s.warden.load(Ordering::Acquire) == 0
            }) {
                let base = free.swap_remove(i) as *mut u8;
                // SAFETY: a live slot no one else uses (its init is gone).
                unsafe { reset(base) };
                return Ok(TreeSlot { base });
            }
        }
        // SAFETY: a fresh anonymous mapping; shared (for the plain forks
        // elsewhere than x86_64), zeroed.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SLOT_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the guard pages lie inside the mapping just made.
        if unsafe {
            libc::mprotect(
                base.cast::<u8>().add(4096).cast(),
                GUARD_BYTES,
                libc::PROT_NONE,
            ) != 0
                || libc::mprotect(
                    base.cast::<u8>().add(WARDEN_TOP).cast(),
                    GUARD_BYTES,
                    libc::PROT_NONE,
                ) != 0
        } {
            let e = std::io::Error::last_os_error();
            // SAFETY: our own mapping, not yet used.
            unsafe { libc::munmap(base, SLOT_BYTES) };
            return Err(e);
        }
        Ok(TreeSlot { base: base.cast() })
    }

    fn shared(&self) -> &Shared {
        // SAFETY: the slot starts with a `Shared`, alive while `self` is.
        unsafe { &*(self.base as *const Shared) }
    }

    /// The address the launcher uses (the slot outlives the launch).
    pub(crate) fn addr(&self) -> usize {
        self.base as usize
    }

    /// The top of the slot's stack, 16-byte aligned: the map writer's, then
    /// the init's (one after the other, never both at once).
    pub(crate) fn stack_top(&self) -> usize {
        (self.base as usize + SLOT_BYTES) & !15
    }

    /// Whether the init takes the program's pty as its session's
    /// controlling terminal (set before every launch: slots are reused).
    pub(crate) fn set_terminal(&self, on: bool) {
        self.shared()
            .terminal
            .store(i32::from(on), Ordering::Relaxed);
    }

    /// The program's raw wait status, once the init has recorded it (after
    /// the init has been reaped).
    pub(crate) fn program_status(&self) -> Option<i32> {
        let s = self.shared();
        (s.have_status.load(Ordering::Acquire) == 1).then(|| s.status.load(Ordering::Relaxed))
    }
}

/// Zeroes a slot's shared words for its next use.
///
/// # Safety
/// `base` is a slot no process uses.
#[cfg(target_arch = "x86_64")]
unsafe fn reset(base: *mut u8) {
    // SAFETY: the caller's promise; `Shared` is plain data.
    unsafe { std::ptr::write_bytes(base, 0, std::mem::size_of::<Shared>()) };
}

impl Drop for TreeSlot {
    fn drop(&mut self) {
        // Back to the pool; reused once the init and the warden are gone
        // (their tid words 0).
        #[cfg(target_arch = "x86_64")]
        FREE_SLOTS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.base as usize);
        // Elsewhere the init is a fork with its own copy of the mapping.
        // SAFETY: our mapping, no longer used by this process.
        #[cfg(not(target_arch = "x86_64"))]
        unsafe {
            libc::munmap(self.base.cast(), SLOT_BYTES);
        }
    }
}

/// How the init holds the sandbox together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Tier namespaces: pid 1 of the sandbox's PID namespace, whose exit
    /// kills every other process of it.
    PidNamespace,
    /// Tier landlock, no PID namespace: a subreaper (every orphan of the
    /// sandbox becomes its child) with a warden beside it; the sandbox
    /// cannot leave their process group (seccomp refuses `setsid` and
    /// `setpgid`), and that group is killed when the program ends (the
    /// init does it), when the init dies however it dies, the host's
    /// death included (the warden does it: its parent-death signal), or
    /// when the warden dies (the init does it). Neither is in the
    /// sandbox's Landlock domain, so the program cannot signal them.
    Subreaper,
}

/// In the launcher, with the namespaces made (if any): creates the init
/// and the program. Returns only in the program (pid 2 of the new PID
/// namespace, or the init's child in tier landlock); the launcher hands
/// the launch over to the init once the program runs. On error no
/// process was made.
///
/// # Safety
/// `slot` is the address of a [`TreeSlot`] that outlives the launch.
pub(crate) unsafe fn split(slot: usize, mode: Mode, ctx: &ChildContext) -> std::io::Result<()> {
    // SAFETY: the caller's promise.
    let shared: &'static Shared = unsafe { &*(slot as *const Shared) };
    shared
        .subreaper
        .store(i32::from(mode == Mode::Subreaper), Ordering::Relaxed);
    // The init checks through this that the host is alive once its
    // parent-death signal is armed (it cannot name the host's pid: that is
    // outside its PID namespace).
    // SAFETY: pidfd_open of our parent, the host.
    let host_fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getppid(), 0) };
    if host_fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    shared.host_fd.store(host_fd as i32, Ordering::Relaxed);
    shared.report_fd.store(ctx.report_fd(), Ordering::Relaxed);
    // SAFETY: as promised by the caller.
    unsafe { start(slot, shared, ctx) }
}

pub(crate) use super::sys::raw;

mod fail;
#[allow(unused_imports)]
use fail::*;
/// The init before the program exists: it announces itself to the host
/// (which kills it should the launch not finish in time), arms its
/// parent-death signal, checks that the host is still alive, and leads a
/// session of its own. Raw syscalls only.
///
/// # Safety
/// Only in the freshly created init.
unsafe fn init_prologue(shared: &Shared) {
    // SAFETY: raw syscalls on integers and on this frame's own locals.
    unsafe {
        // Nothing may end it early: with the program's pty its terminal
        // (below), ^C or ^\ typed now would reach it (SIGKILL cannot be
        // blocked; init_loop keeps this mask).
        let all: u64 = !0;
        raw(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as usize,
            &all as *const u64 as usize,
            0,
            8,
        );
        // Its pid as the host sees it, stored by the kernel before the init
        // ran (`CLONE_PARENT_SETTID`).
        let me = shared.init_tid.load(Ordering::Acquire);
        let rec = ChildContext::started_record(me);
        let fd = shared.report_fd.load(Ordering::Relaxed);
        if me <= 0
            || raw(
                libc::SYS_write,
                fd as usize,
                rec.as_ptr() as usize,
                rec.len(),
                0,
            ) != rec.len() as isize
        {
            init_fail(shared, libc::EPROTO as isize);
        }
        let r = raw(
            libc::SYS_prctl,
            libc::PR_SET_PDEATHSIG as usize,
            libc::SIGKILL as usize,
            0,
            0,
        );
        if r < 0 {
            init_fail(shared, -r);
        }
        // The host may have died before the signal was armed: its pidfd
        // then polls readable.
        let fd = shared.host_fd.load(Ordering::Relaxed);
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let ready = raw(
            libc::SYS_ppoll,
            &mut pfd as *mut libc::pollfd as usize,
            1,
            &now as *const libc::timespec as usize,
            0,
        );
        raw(libc::SYS_close, fd as usize, 0, 0, 0);
        if ready != 0 {
            init_fail(shared, libc::ESRCH as isize);
        }
        // The runner kills the sandbox by process group: the init leads
        // one (the program and its children join it).
        let r = raw(libc::SYS_setsid, 0, 0, 0, 0);
        if r < 0 {
            init_fail(shared, -r);
        }
        // A session leader without a terminal: the program's pty becomes
        // the session's, its foreground group the init's (the program's).
        if shared.terminal.load(Ordering::Relaxed) == 1 {
            let r = raw(libc::SYS_ioctl, 0, libc::TIOCSCTTY as usize, 0, 0);
            if r < 0 {
                init_fail(shared, -r);
            }
        }
        if shared.subreaper.load(Ordering::Relaxed) == 1 {
            // Every orphan of the sandbox becomes the init's child.
            let r = raw(
                libc::SYS_prctl,
                libc::PR_SET_CHILD_SUBREAPER as usize,
                1,
                0,
                0,
            );
            if r < 0 {
                init_fail(shared, -r);
            }
            let me = raw(libc::SYS_getpid, 0, 0, 0, 0);
            shared.init_self.store(me as i32, Ordering::Release);
            let warden = start_warden(shared);
            if warden < 0 {
                init_fail(shared, -warden);
            }
            // (x86_64: the kernel has stored it already.)
            shared.warden.store(warden as i32, Ordering::Release);
            shared.warden_pid.store(warden as i32, Ordering::Release);
        }
    }
}

/// The init once the program has exec'd: closes everything, reaps every
/// child, and when the program ends records its status and exits (which
/// kills the rest of the namespace). Raw syscalls only.
fn init_loop(program: libc::pid_t, shared: &Shared) -> ! {
    const SIGSET_BYTES: usize = 8;
    // SAFETY: raw syscalls on integers and on this frame's own locals.
    unsafe {
        raw(libc::SYS_close_range, 0, u32::MAX as usize, 0, 0);
        // Block everything (SIGKILL cannot be), then wait for SIGCHLD and
        // reap. A blocked signal is queued even though SIGCHLD's default
        // action is to ignore it.
        let all: u64 = !0;
        raw(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as usize,
            &all as *const u64 as usize,
            0,
            SIGSET_BYTES,
        );
        let chld: u64 = 1 << (libc::SIGCHLD - 1);
        let subreaper = shared.subreaper.load(Ordering::Relaxed) == 1;
        // Not `warden`: on x86_64 the kernel clears that word when the
        // warden exits, before the init can reap it and compare.
        let warden = shared.warden_pid.load(Ordering::Acquire);
        loop {
            loop {
                let mut status: libc::c_int = 0;
                let pid = raw(
                    libc::SYS_wait4,
                    usize::MAX, // -1: any child
                    &mut status as *mut libc::c_int as usize,
                    (libc::WNOHANG | libc::__WALL) as usize,
                    0,
                );
                if pid <= 0 {
                    break;
                }
                if pid == program as isize {
                    shared.status.store(status, Ordering::Relaxed);
                    shared.have_status.store(1, Ordering::Release);
                    if subreaper {
                        // No namespace to end: the group goes, the init
                        // with it. The warden first, reaped here: killed
                        // with the group it would be left, a zombie, to
                        // the host's pid 1, and a container's pid 1 may
                        // never reap (one pid per spawn, until none are
                        // left). Without the warden, nothing but this
                        // init ends the group: its parent-death signal is
                        // cleared first, so that a host dying meanwhile
                        // cannot stop it half way.
                        raw(libc::SYS_prctl, libc::PR_SET_PDEATHSIG as usize, 0, 0, 0);
                        if warden > 0 {
                            raw(
                                libc::SYS_kill,
                                warden as usize,
                                libc::SIGKILL as usize,
                                0,
                                0,
                            );
                            let mut ws: libc::c_int = 0;
                            raw(
                                libc::SYS_wait4,
                                warden as usize,
                                &mut ws as *mut libc::c_int as usize,
                                libc::__WALL as usize,
                                0,
                            );
                        }
                        raw(libc::SYS_kill, 0, libc::SIGKILL as usize, 0, 0);
                    }
                    raw(libc::SYS_exit_group, 0, 0, 0, 0);
                }
                if subreaper && warden > 0 && pid == warden as isize {
                    // Without its warden the init's death would leave the
                    // sandbox running: it ends now.
                    raw(libc::SYS_kill, 0, libc::SIGKILL as usize, 0, 0);
                    raw(libc::SYS_exit_group, 1, 0, 0, 0);
                }
            }
            raw(
                libc::SYS_rt_sigtimedwait,
                &chld as *const u64 as usize,
                0,
                0,
                SIGSET_BYTES,
            );
        }
    }
}

/// The launcher, once the program has exec'd (or died): the init is the
/// child from now on. Never returns.
extern "C" fn hand_over(ctx: *const ChildContext, init: libc::pid_t) -> ! {
    // SAFETY: `ctx` is the launch's context, alive for the whole launch.
    unsafe { &*ctx }.hand_over(init)
}

mod warden;
#[cfg(target_arch = "x86_64")]
mod x86_64;

#[cfg(not(target_arch = "x86_64"))]
use warden::start_warden;
use warden::warden_main;
#[cfg(target_arch = "x86_64")]
use x86_64::{start, start_warden};

/// Other architectures: the same tree with raw `fork`s (libc's `fork` would
/// run the host's atfork handlers): the init is a copy of the launcher
/// made a child of the host, the program a copy of the init, each
/// returning from `clone` in the same frames. The status reaches the host
/// through the slot, a shared mapping.
///
/// # Safety
/// As for the x86_64 `start`.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn start(_slot: usize, shared: &'static Shared, ctx: &ChildContext) -> std::io::Result<()> {
    // A clone without CLONE_VM or a new stack is a fork; the init's pid
    // goes to the slot (`CLONE_PARENT_SETTID`: the third argument on every
    // architecture), from where it announces itself.
    let tid = shared.init_tid.as_ptr() as usize;
    let fork = |flags: libc::c_int| -> isize {
        // SAFETY: see above; `tid` is in the shared slot.
        unsafe { raw(libc::SYS_clone, (flags | libc::SIGCHLD) as usize, 0, tid, 0) }
    };
    let mut pipe = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [exec_r, exec_w] = pipe;
    let init = fork(libc::CLONE_PARENT | libc::CLONE_PARENT_SETTID);
    if init < 0 {
        // SAFETY: closing our own fds; no init exists.
        unsafe {
            libc::close(exec_r);
            libc::close(exec_w);
        }
        return Err(std::io::Error::from_raw_os_error(-init as i32));
    }
    if init > 0 {
        // The launcher: wait for the program's exec, then hand over.
        // SAFETY: raw syscalls on our own fds and a local buffer.
        unsafe {
            libc::close(exec_w);
            let mut b = 0u8;
            while libc::read(exec_r, (&mut b as *mut u8).cast(), 1) != 0 {
                if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    break;
                }
            }
        }
        hand_over(ctx, init as libc::pid_t)
    }
    // SAFETY: the freshly created init.
    unsafe { init_prologue(shared) };
    let program = fork(0);
    if program < 0 {
        init_fail(shared, -program);
    }
    if program > 0 {
        // SAFETY: our copy of the pipe's write end.
        unsafe { libc::close(exec_w) };
        init_loop(program as libc::pid_t, shared)
    }
    // The program: the pipe's ends are close-on-exec.
    // SAFETY: closing our copy of the read end.
    unsafe { libc::close(exec_r) };
    Ok(())
}
