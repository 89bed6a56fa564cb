//! The PID namespace's process tree: a monitor, a minimal init as pid 1,
//! and the program.
//!
//! `unshare(CLONE_NEWPID)` only places the caller's *children* in the new
//! namespace, so after the child std forked (the *monitor*) has created
//! the namespaces, [`split`] makes two more processes:
//!
//! ```text
//! host ── monitor  (the pid the host spawned and kills; host PID namespace)
//!           └── init     (pid 1 of the sandbox: reaps, nothing else)
//!                 └── program  (pid 2: returns from `split`, is confined, execs)
//! ```
//!
//! - The **program** returns from [`split`]; the rest of the confinement
//!   (mounts, a fresh `/proc`, rlimits, capabilities, no_new_privs,
//!   Landlock, seccomp) runs in it, and std executes it.
//! - The **init** reaps whatever is reparented to it. When the program
//!   ends it records the program's wait status for the monitor and exits;
//!   the kernel then kills every other process of the namespace, so
//!   background children and ones that called `setsid()` die with the
//!   program. Its parent-death signal kills it, and so the whole namespace,
//!   when the monitor dies. The program is the init's child on purpose:
//!   when everything is SIGKILLed at once (the runner's group kill), the
//!   dying init reaps the program itself instead of waiting for a parent
//!   outside the namespace to do it (which would leave the init stuck in
//!   the kernel's namespace teardown on a host whose pid 1 never reaps).
//! - The **monitor** waits for the init and exits the way the program did
//!   (same code, or the same signal re-raised). The host sees only it; its
//!   own parent-death signal (core's hygiene) fires when the host dies,
//!   including by SIGKILL, and the init's chain takes the sandbox with it.
//!
//! ## Why not two more `fork`s (x86_64)
//!
//! `fork` copies the host's page tables: measured here, 120 µs for a 1 MiB
//! process, 360 µs for 10 MiB, 1.5 ms for 50 MiB. Two more per sandbox
//! would make every spawn cost grow with the embedding application's size.
//! So on x86_64 neither is a `fork`:
//!
//! - the init is a `clone(CLONE_VM)` running on a small stack of its own
//!   ([`init_main`]): it shares the monitor's memory (a private copy of the
//!   host's, made by std's fork) and touches nothing of it but that stack
//!   and two shared words, with raw `syscall` instructions only (not even
//!   libc's `errno`, which lives in thread-local storage it would share);
//! - the program is a `clone(CLONE_VM | CLONE_VFORK)` by the init, which
//!   then is suspended until the program execs (or exits). The new process
//!   restores the monitor's registers and stack pointer, saved just before
//!   the init was created, and so *returns from [`split`] in the
//!   monitor's frames* — on to the rest of the confinement and std's exec —
//!   while the monitor sleeps on a pipe that only the program's exec (its
//!   close-on-exec copy) and the init close. The monitor then never
//!   returns into those frames (the program has run over them): it goes on
//!   in [`monitor`], which never returns.
//!
//! No two of these processes run on the same memory at once, except the
//! init and the monitor after the program has exec'd, which share nothing
//! but the two words the init writes before it exits.
//!
//! Other architectures take the same steps with plain `fork`s.
//!
//! Monitor and init close every descriptor they hold once the program has
//! exec'd, so std's exec-status pipe reports the program's exec, or its
//! failure, exactly as without the namespace, and neither holds the
//! program's stdio.

use std::sync::atomic::{AtomicI32, Ordering};

/// What the init leaves for the monitor: the program's wait status, and
/// whether it is set. In a `MAP_SHARED` page, so that it is shared however
/// the init was created.
#[repr(C)]
struct Shared {
    have_status: AtomicI32,
    status: AtomicI32,
    /// Set by the monitor before the init starts.
    monitor_fd: AtomicI32,
    /// The write end of the pipe the monitor sleeps on (x86_64).
    exec_w: AtomicI32,
    /// The monitor's saved registers (x86_64): rbx, rbp, r12–r15, rsp,
    /// and where to resume.
    context: [u64; 8],
}

/// Forks the init and the program. Returns only in the program (pid 2 of
/// the new PID namespace); the monitor continues in [`monitor`] and never
/// returns. On error no program exists.
pub(crate) fn split() -> std::io::Result<()> {
    reset_signal_handlers();
    // SAFETY: an anonymous shared mapping of one page, never unmapped (it
    // dies with these processes).
    let shared = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            std::mem::size_of::<Shared>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if shared == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh, zeroed, page-aligned mapping large enough; it is
    // never unmapped, so it lives as long as these processes.
    let shared: &'static Shared = unsafe { &*(shared as *const Shared) };
    // The init checks through this that the monitor is alive once its
    // parent-death signal is armed (it cannot name the monitor's pid: that
    // is outside its PID namespace).
    // SAFETY: pidfd_open of our own pid.
    let monitor_fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if monitor_fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    shared
        .monitor_fd
        .store(monitor_fd as i32, Ordering::Relaxed);
    start(shared)
}

/// Resets every catchable signal to its default action: monitor, init and
/// the program before exec are forks of the host and inherited its
/// handlers.
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

fn errno() -> libc::c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The monitor, once the program has exec'd (or failed to): waits for the
/// init, then mirrors the program's status. Never returns.
extern "C" fn monitor(init: libc::pid_t, shared: *const Shared) -> ! {
    // SAFETY: raw syscalls on integers and local buffers; `shared` is the
    // mapping made in `split`. Never returns.
    unsafe {
        // std's exec-status pipe, the program's stdio: nothing is needed.
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        let mut init_status = 0;
        while libc::waitpid(init, &mut init_status, 0) < 0 {
            if errno() != libc::EINTR {
                init_status = libc::SIGKILL;
                break;
            }
        }
        let shared = &*shared;
        if shared.have_status.load(Ordering::Acquire) == 1 {
            mirror(shared.status.load(Ordering::Relaxed))
        }
        // The init died before the program ended (killed by the host, or
        // it failed to start the program): mirror the init itself.
        mirror(init_status)
    }
}

/// Ends this process the way `status` ended: the same exit code, or the
/// same signal.
fn mirror(status: libc::c_int) -> ! {
    // SAFETY: raw syscalls; never returns.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            // Handlers were reset to SIG_DFL and std cleared the mask before
            // pre_exec. A core-dumping signal dumps nothing (RLIMIT_CORE 0).
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

/// A raw syscall that touches no memory but its arguments' targets and
/// never sets `errno`: returns the result or `-errno`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn raw(nr: libc::c_long, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller passes valid arguments for `nr`.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a0,
            in("rsi") a1,
            in("rdx") a2,
            in("r10") a3,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn raw(nr: libc::c_long, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
    // The init is a plain fork here: libc (and errno) are its own.
    // SAFETY: the caller passes valid arguments for `nr`.
    let r = unsafe { libc::syscall(nr, a0, a1, a2, a3) };
    if r < 0 {
        -(errno() as isize)
    } else {
        r as isize
    }
}

/// The init before the program exists: parent-death signal, and a check
/// that the monitor is still alive. Raw syscalls only.
///
/// # Safety
/// Only in the freshly created init.
unsafe fn init_prologue(shared: &Shared) {
    // SAFETY: raw syscalls on integers and on this frame's own locals.
    unsafe {
        if raw(
            libc::SYS_prctl,
            libc::PR_SET_PDEATHSIG as usize,
            libc::SIGKILL as usize,
            0,
            0,
        ) < 0
        {
            raw(libc::SYS_exit_group, 1, 0, 0, 0);
        }
        // The monitor may have died before the signal was armed: its pidfd
        // then polls readable.
        let fd = shared.monitor_fd.load(Ordering::Relaxed);
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
            raw(libc::SYS_exit_group, 1, 0, 0, 0);
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
                    raw(libc::SYS_exit_group, 0, 0, 0, 0);
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

#[cfg(target_arch = "x86_64")]
mod x86_64 {
    //! The two clones without `fork`: see the module docs of `tree`.

    use std::cell::UnsafeCell;
    use std::sync::atomic::{AtomicPtr, Ordering};

    use super::{init_loop, init_prologue, monitor, raw, Shared};

    const STACK_SIZE: usize = 32 * 1024;

    /// The init's own stack (it shares the monitor's memory). Its frames
    /// need a few hundred bytes.
    #[repr(C, align(16))]
    struct Stack(UnsafeCell<[u8; STACK_SIZE]>);

    // SAFETY: only the init uses it, one init per monitor process (each
    // process has its own copy of this static).
    unsafe impl Sync for Stack {}

    static INIT_STACK: Stack = Stack(UnsafeCell::new([0; STACK_SIZE]));

    /// The mapping `start` hands to the init (read once, at its start).
    static SHARED: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());

    /// In the monitor: saves its registers, creates the init, and sleeps
    /// until the program has exec'd. Returns in the program (resumed by
    /// the init's clone with the saved registers), or an error in the
    /// monitor when the init could not be created.
    pub(super) fn start(shared: &'static Shared) -> std::io::Result<()> {
        let mut pipe = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two fds.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let [exec_r, exec_w] = pipe;
        shared.exec_w.store(exec_w, Ordering::Relaxed);
        SHARED.store(shared as *const Shared as *mut Shared, Ordering::Release);
        let top = INIT_STACK.0.get() as usize + STACK_SIZE;
        let flags = (libc::CLONE_VM | libc::SIGCHLD) as usize;
        let context = shared.context.as_ptr() as usize;
        let ret: isize;
        // SAFETY: see the module docs of `tree`. The block saves the
        // callee-saved registers, the stack pointer and the resume address
        // (label 5) in `context`, then clones the init onto its own stack
        // (label 4: it calls `init_main`, which never returns). In the
        // monitor (label 2) it closes every fd but the pipe's read end,
        // sleeps until the pipe reports EOF (the
        // program exec'd or died, and the init closed its copy), and goes
        // on in `monitor`, which never returns, on a freshly aligned stack
        // below the frames the program has used. The program arrives at
        // label 5 with the saved registers restored by the init, and leaves
        // the block with rax = 0. On a clone error the block is left with
        // -errno and nothing changed. Caller-saved registers are declared
        // clobbered; the callee-saved ones hold the same values on every
        // path that leaves the block; no `nostack`, so the red zone is not
        // in use across it.
        unsafe {
            std::arch::asm!(
                "mov [r9], rbx",
                "mov [r9 + 8], rbp",
                "mov [r9 + 16], r12",
                "mov [r9 + 24], r13",
                "mov [r9 + 32], r14",
                "mov [r9 + 40], r15",
                "mov [r9 + 48], rsp",
                "lea rcx, [rip + 5f]",
                "mov [r9 + 56], rcx",
                "syscall",
                "test rax, rax",
                "jz 4f",
                "jg 2f",
                "jmp 6f",
                // The monitor; rax = the init's pid. Everything but the
                // pipe's read end is closed at once (std's exec-status
                // pipe above all: the init and the program hold their own
                // copies), then it sleeps until the program has exec'd.
                "2:",
                "mov r15, rax",
                "mov eax, {close_range}",
                "xor edi, edi",
                "lea esi, [r12d - 1]",
                "xor edx, edx",
                "test r12d, r12d",
                "jz 7f",
                "syscall",
                "7:",
                "mov eax, {close_range}",
                "lea edi, [r12d + 1]",
                "mov esi, -1",
                "xor edx, edx",
                "syscall",
                "3:",
                "mov eax, {read}",
                "mov edi, r12d",
                "lea rsi, [rsp - 64]",
                "mov edx, 1",
                "syscall",
                "cmp rax, -4", // EINTR
                "je 3b",
                "test rax, rax",
                "jg 3b",
                "mov eax, {close}",
                "mov edi, r12d",
                "syscall",
                "mov edi, r15d",
                "mov rsi, r8",
                "and rsp, -16",
                "call {monitor}",
                "ud2",
                // The init, on its own stack.
                "4:",
                "and rsp, -16",
                "call {init_main}",
                "ud2",
                // The program, resumed with the monitor's registers.
                "5:",
                "xor eax, eax",
                "6:",
                close = const libc::SYS_close,
                close_range = const libc::SYS_close_range,
                read = const libc::SYS_read,
                monitor = sym monitor,
                init_main = sym init_main,
                in("r9") context,
                in("r12") exec_r,
                in("r13") exec_w,
                in("r14") shared.monitor_fd.load(Ordering::Relaxed),
                in("rdi") flags,
                in("rsi") top,
                in("rdx") 0usize,
                in("r10") 0usize,
                in("r8") shared as *const Shared,
                inlateout("rax") libc::SYS_clone as isize => ret,
                clobber_abi("C"),
            );
        }
        if ret < 0 {
            // SAFETY: closing our own fds; no init exists.
            unsafe {
                libc::close(exec_r);
                libc::close(exec_w);
                libc::close(shared.monitor_fd.load(Ordering::Relaxed));
            }
            return Err(std::io::Error::from_raw_os_error(-ret as i32));
        }
        // The program: the pipe's read end and the pidfd are close-on-exec
        // (and closed by the init once the program has exec'd).
        Ok(())
    }

    /// The init's whole life, on its own stack. Raw syscalls only.
    extern "C" fn init_main() -> ! {
        // SAFETY: set by `start` before the clone; the mapping outlives us.
        let shared = unsafe { &*SHARED.load(Ordering::Acquire) };
        // SAFETY: the freshly created init.
        unsafe { init_prologue(shared) };
        let context = shared.context.as_ptr() as usize;
        let flags = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as usize;
        let ret: isize;
        // SAFETY: clone(CLONE_VM | CLONE_VFORK): this init is suspended
        // until the child execs or exits. The child restores the monitor's
        // saved registers and stack pointer from `context` and jumps to the
        // saved resume address, where it leaves `start`'s block as the
        // program. This init continues with the child's pid or -errno, its
        // own registers untouched.
        unsafe {
            std::arch::asm!(
                "syscall",
                "test rax, rax",
                "jnz 2f",
                "mov rbx, [r9]",
                "mov rbp, [r9 + 8]",
                "mov r12, [r9 + 16]",
                "mov r13, [r9 + 24]",
                "mov r14, [r9 + 32]",
                "mov r15, [r9 + 40]",
                "mov rsp, [r9 + 48]",
                "jmp qword ptr [r9 + 56]",
                "2:",
                in("r9") context,
                in("rdi") flags,
                in("rsi") 0usize,
                in("rdx") 0usize,
                in("r10") 0usize,
                in("r8") 0usize,
                inlateout("rax") libc::SYS_clone as isize => ret,
                lateout("rcx") _,
                lateout("r11") _,
            );
        }
        // SAFETY: raw syscalls on integers.
        unsafe {
            // Wake the monitor: the program has exec'd (or exited).
            raw(
                libc::SYS_close,
                shared.exec_w.load(Ordering::Relaxed) as usize,
                0,
                0,
                0,
            );
            if ret < 0 {
                raw(libc::SYS_exit_group, 1, 0, 0, 0);
            }
        }
        init_loop(ret as libc::pid_t, shared)
    }
}

#[cfg(target_arch = "x86_64")]
use x86_64::start;

/// Other architectures: the same tree with plain `fork`s (the init is a
/// copy of the monitor, the program a copy of the init, each returning
/// from `fork` in the same frames).
#[cfg(not(target_arch = "x86_64"))]
fn start(shared: &'static Shared) -> std::io::Result<()> {
    // SAFETY: fork in a single-threaded child.
    let init = unsafe { libc::fork() };
    if init < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if init > 0 {
        // SAFETY: closing our copy of the pidfd.
        unsafe { libc::close(shared.monitor_fd.load(Ordering::Relaxed)) };
        monitor(init, shared)
    }
    // SAFETY: the freshly created init.
    unsafe { init_prologue(shared) };
    // SAFETY: fork in a single-threaded child.
    let program = unsafe { libc::fork() };
    if program < 0 {
        // SAFETY: nothing to clean up but ourselves.
        unsafe { libc::_exit(1) };
    }
    if program > 0 {
        init_loop(program, shared)
    }
    Ok(())
}
