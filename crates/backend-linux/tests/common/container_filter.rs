//! The part of a container runtime's default seccomp profile (Docker's,
//! Podman's) that takes user namespaces away, for tests that make this
//! host such a container: `clone` and `unshare` with any namespace flag
//! and `setns` fail with `EPERM`, `clone3` with `ENOSYS` (its flags are
//! behind a pointer, so the profile refuses it whole and glibc falls back
//! to `clone`); every other call is allowed. Installed with no_new_privs
//! on a test's own child process ([`install_on`]), before it execs.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Every `CLONE_NEW*` flag Docker's profile checks `clone`'s for.
const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWCGROUP) as u32;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The filter's BPF program (x86_64 and aarch64 numbers; calls of any
/// other architecture are allowed).
pub fn program() -> Vec<libc::sock_filter> {
    const LD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    const JSET: u32 = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
    const RET: u32 = libc::BPF_RET | libc::BPF_K;
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xc000_00b7;
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let allow = libc::SECCOMP_RET_ALLOW;
    // seccomp_data: nr at 0, arch at 4, args[0]'s low word at 16.
    vec![
        stmt(LD, 4),
        jump(JEQ, ARCH, 1, 0),
        stmt(RET, allow),
        stmt(LD, 0),
        jump(JEQ, libc::SYS_clone3 as u32, 0, 1),
        stmt(RET, enosys),
        jump(JEQ, libc::SYS_setns as u32, 0, 1),
        stmt(RET, eperm),
        jump(JEQ, libc::SYS_clone as u32, 1, 0),
        jump(JEQ, libc::SYS_unshare as u32, 0, 3),
        stmt(LD, 16),
        jump(JSET, NAMESPACE_FLAGS, 0, 1),
        stmt(RET, eperm),
        stmt(RET, allow),
    ]
}

/// Makes `cmd` start under the filter: its child sets no_new_privs and
/// installs it after any uid change and before it execs.
pub fn install_on(cmd: &mut Command) -> &mut Command {
    let prog = program();
    // SAFETY: the hook runs in the forked child: two raw syscalls on the
    // program built above (moved into the closure, not allocated there).
    unsafe {
        cmd.pre_exec(move || {
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    &fprog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}
