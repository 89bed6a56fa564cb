//! The two clones without `fork` (x86_64): see the module docs of `tree`.

use std::sync::atomic::Ordering;

use super::{
    hand_over, init_loop, init_prologue, raw, warden_main, Shared, INIT_STACK, WARDEN_STACK,
    WARDEN_TOP,
};
use cordon_core::ChildContext;

/// In the launcher: saves its registers, creates the init, and sleeps
/// until the program has exec'd, then hands over. Returns in the
/// program (resumed by the init's clone with the saved registers), or
/// an error in the launcher when the init could not be created.
///
/// # Safety
/// `slot` is a reserved [`super::TreeSlot`]'s address; `shared` is its
/// start.
pub(super) unsafe fn start(
    slot: usize,
    shared: &'static Shared,
    ctx: &ChildContext,
) -> std::io::Result<()> {
    let mut pipe = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [exec_r, exec_w] = pipe;
    shared.exec_w.store(exec_w, Ordering::Relaxed);
    // The init's stack: the end of the slot, 16-byte aligned.
    let top = (slot + super::SLOT_BYTES) & !15;
    let flags = (libc::CLONE_VM
        | libc::CLONE_PARENT
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID
        | libc::SIGCHLD) as usize;
    let tid = shared.init_tid.as_ptr() as usize;
    let context = shared.context.as_ptr() as usize;
    let ret: isize;
    // SAFETY: see the module docs of `tree`. The block saves the
    // callee-saved registers, the stack pointer and the resume address
    // (label 5) in `context`, then clones the init onto its own stack
    // (label 4: it calls `init_main` with `shared`, which never
    // returns; r8 is the clone's unused tls argument and survives into
    // the child). In the launcher (label 2) it closes its copy of the
    // pipe's write end, sleeps until the pipe reports EOF (the program
    // exec'd or died, and the init closed its copy), and hands over
    // (which never returns) on a freshly aligned stack below the
    // frames the program has used. The program arrives at label 5 with
    // the saved registers restored by the init, and leaves the block
    // with rax = 0. On a clone error the block is left with -errno and
    // nothing changed. Caller-saved registers are declared clobbered;
    // the callee-saved ones hold the same values on every path that
    // leaves the block; no `nostack`, so the red zone is not in use
    // across it.
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
            // The launcher; rax = the init's pid.
            "2:",
            "mov r15, rax",
            "mov eax, {close}",
            "mov edi, r13d",
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
            "mov rdi, r14",
            "mov esi, r15d",
            "and rsp, -16",
            "call {hand_over}",
            "ud2",
            // The init, on its own stack.
            "4:",
            "mov rdi, r8",
            "and rsp, -16",
            "call {init_main}",
            "ud2",
            // The program, resumed with the launcher's registers.
            "5:",
            "xor eax, eax",
            "6:",
            close = const libc::SYS_close,
            read = const libc::SYS_read,
            hand_over = sym hand_over,
            init_main = sym init_main,
            in("r9") context,
            in("r12") exec_r,
            in("r13") exec_w,
            in("r14") ctx as *const ChildContext,
            in("rdi") flags,
            in("rsi") top,
            in("rdx") tid,
            in("r10") tid,
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
            libc::close(shared.host_fd.load(Ordering::Relaxed));
        }
        return Err(std::io::Error::from_raw_os_error(-ret as i32));
    }
    // The program: the pipe's read end is close-on-exec (and closed by
    // the init once the program has exec'd).
    Ok(())
}

const _: () = assert!(INIT_STACK >= 8 * 1024);

/// The init's whole life, on its own stack. Raw syscalls only.
extern "C" fn init_main(shared: *const Shared) -> ! {
    // SAFETY: the slot outlives the init (it is reused only once the
    // kernel has cleared the init's tid word).
    let shared = unsafe { &*shared };
    // SAFETY: the freshly created init.
    unsafe { init_prologue(shared) };
    let context = shared.context.as_ptr() as usize;
    let flags = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as usize;
    let ret: isize;
    // SAFETY: clone(CLONE_VM | CLONE_VFORK): this init is suspended
    // until the child execs or exits. The child restores the
    // launcher's saved registers and stack pointer from `context` and
    // jumps to the saved resume address, where it leaves `start`'s
    // block as the program. This init continues with the child's pid
    // or -errno, its own registers untouched.
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
        // Wake the launcher: the program has exec'd (or exited).
        raw(
            libc::SYS_close,
            shared.exec_w.load(Ordering::Relaxed) as usize,
            0,
            0,
            0,
        );
    }
    if ret < 0 {
        super::init_fail(shared, -ret);
    }
    init_loop(ret as libc::pid_t, shared)
}

const _: () = assert!(WARDEN_STACK >= 4 * 1024);

/// In the init (tier landlock): creates the warden, a `clone(CLONE_VM)`
/// on its own stack in the slot, which runs `warden_main` and never
/// returns. The kernel stores its tid in the slot and clears it when it
/// exits, so the slot is not reused while it runs. Returns its pid or
/// -errno. Raw syscalls only.
pub(super) fn start_warden(shared: &Shared) -> isize {
    let top = (shared as *const Shared as usize + WARDEN_TOP) & !15;
    let tid = shared.warden.as_ptr() as usize;
    let flags = (libc::CLONE_VM
        | libc::CLONE_UNTRACED
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID
        | libc::SIGCHLD) as usize;
    let ret: isize;
    // SAFETY: the child starts on its own stack (the slot's warden stack,
    // used by no one else while the slot is held) with this init's
    // registers; it calls `warden_main` with `shared` (r8, the clone's
    // unused tls argument, survives into it), which never returns. The
    // parent leaves the block with the pid or -errno; the syscall
    // clobbers only rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r8",
            "and rsp, -16",
            "call {warden_main}",
            "ud2",
            "2:",
            warden_main = sym warden_main,
            in("rdi") flags,
            in("rsi") top,
            in("rdx") tid,
            in("r10") tid,
            in("r8") shared as *const Shared,
            inlateout("rax") libc::SYS_clone as isize => ret,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    ret
}
