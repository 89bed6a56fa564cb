//! Raw syscalls that never touch `errno` (Linux), for code that runs in
//! the host's memory beside a running host thread: the launcher's waiting
//! parent, and a backend's helper processes made with `CLONE_VM` (an init,
//! a map writer). libc's wrappers write `errno`, which lives in the
//! thread-local storage of the host thread that spawned them, and so is
//! shared with it.

/// A raw syscall that touches no memory but its arguments' targets and
/// never sets `errno`: returns the result or `-errno`.
///
/// # Safety
/// The arguments must be valid for `nr`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn raw(nr: libc::c_long, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
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

/// See the x86_64 version.
///
/// # Safety
/// The arguments must be valid for `nr`.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub unsafe fn raw(nr: libc::c_long, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller passes valid arguments for `nr`.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") a0 as isize => ret,
            in("x1") a1,
            in("x2") a2,
            in("x3") a3,
            options(nostack)
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
/// The arguments must be valid for `nr`.
#[cfg(target_arch = "riscv64")]
#[inline(always)]
pub unsafe fn raw(nr: libc::c_long, a0: usize, a1: usize, a2: usize, a3: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller passes valid arguments for `nr`.
    unsafe {
        std::arch::asm!(
            "ecall",
            in("a7") nr,
            inlateout("a0") a0 as isize => ret,
            in("a1") a1,
            in("a2") a2,
            in("a3") a3,
            options(nostack)
        );
    }
    ret
}

/// [`raw`] with a fifth argument (`fsconfig`'s `aux`, `mount`'s `data`).
///
/// # Safety
/// The arguments must be valid for `nr`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn raw5(nr: libc::c_long, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the caller passes valid arguments for `nr`.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack)
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
/// The arguments must be valid for `nr`.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub unsafe fn raw5(nr: libc::c_long, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the caller passes valid arguments for `nr`.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            options(nostack)
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
/// The arguments must be valid for `nr`.
#[cfg(target_arch = "riscv64")]
#[inline(always)]
pub unsafe fn raw5(nr: libc::c_long, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the caller passes valid arguments for `nr`.
    unsafe {
        std::arch::asm!(
            "ecall",
            in("a7") nr,
            inlateout("a0") a[0] as isize => ret,
            in("a1") a[1],
            in("a2") a[2],
            in("a3") a[3],
            in("a4") a[4],
            options(nostack)
        );
    }
    ret
}
