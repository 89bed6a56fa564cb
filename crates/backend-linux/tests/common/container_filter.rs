//! Filters that make this host look like a host without user namespaces,
//! for tests that run the backend there ([`Host`]): by default the part
//! of a container runtime's default seccomp profile (Docker's, Podman's)
//! that takes user namespaces away — `clone` and `unshare` with any
//! namespace flag and `setns` fail with `EPERM`, `clone3` with `ENOSYS`
//! (its flags are behind a pointer, so the profile refuses it whole and
//! glibc falls back to `clone`); every other call is allowed. Installed
//! with no_new_privs on a test's own child process ([`install_on`],
//! [`install_for`]), before it execs.

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

/// The kind of host a filter makes of this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // each test binary uses the kinds it needs
pub enum Host {
    /// A container under its runtime's default seccomp profile (above).
    ContainerProfile,
    /// Ubuntu 23.10+ with `kernel.apparmor_restrict_unprivileged_userns=1`:
    /// a user namespace (and the others with it) can be made, but its
    /// capabilities are refused, so every mount call, `pivot_root` and
    /// `sethostname`/`setdomainname` fail with `EPERM` (AppArmor's answer;
    /// the id-map writes it refuses too cannot be told apart by seccomp).
    UbuntuRestricted,
    /// `user.max_user_namespaces=0`: `clone` and `unshare` with
    /// `CLONE_NEWUSER` fail with `ENOSPC`, the kernel's answer at a zero
    /// maximum (and `clone3` with `ENOSYS`, as above).
    NoUserNamespaces,
}

/// The calls the Ubuntu restriction makes fail: the ones that need the
/// user namespace's capabilities.
fn capability_calls() -> Vec<u32> {
    [
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_mount_setattr,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
    ]
    .iter()
    .map(|n| *n as u32)
    .collect()
}

/// The BPF program that makes this host `host` (x86_64 and aarch64
/// numbers; calls of any other architecture are allowed).
pub fn program_for(host: Host) -> Vec<libc::sock_filter> {
    const LD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    const JSET: u32 = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
    const RET: u32 = libc::BPF_RET | libc::BPF_K;
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xc000_00b7;
    let allow = libc::SECCOMP_RET_ALLOW;
    match host {
        Host::ContainerProfile => program(),
        Host::UbuntuRestricted => {
            let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
            let calls = capability_calls();
            let n = calls.len() as u8;
            let mut p = vec![
                stmt(LD, 4),
                jump(JEQ, ARCH, 1, 0),
                stmt(RET, allow),
                stmt(LD, 0),
            ];
            // Call i matches: jump over the calls after it and the allow.
            for (i, nr) in calls.iter().enumerate() {
                p.push(jump(JEQ, *nr, n - i as u8, 0));
            }
            p.push(stmt(RET, allow));
            p.push(stmt(RET, eperm));
            p
        }
        Host::NoUserNamespaces => {
            let enospc = libc::SECCOMP_RET_ERRNO | libc::ENOSPC as u32;
            let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
            vec![
                stmt(LD, 4),
                jump(JEQ, ARCH, 1, 0),
                stmt(RET, allow),
                stmt(LD, 0),
                jump(JEQ, libc::SYS_clone3 as u32, 0, 1),
                stmt(RET, enosys),
                jump(JEQ, libc::SYS_clone as u32, 1, 0),
                jump(JEQ, libc::SYS_unshare as u32, 0, 3),
                stmt(LD, 16),
                jump(JSET, libc::CLONE_NEWUSER as u32, 0, 1),
                stmt(RET, enospc),
                stmt(RET, allow),
            ]
        }
    }
}

/// The container profile's BPF program (x86_64 and aarch64 numbers; calls
/// of any other architecture are allowed).
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

/// Makes `cmd` start under the container profile's filter.
#[allow(dead_code)] // each test binary uses the kinds it needs
pub fn install_on(cmd: &mut Command) -> &mut Command {
    install_for(cmd, Host::ContainerProfile)
}

/// Makes `cmd` start on a host like `host`: its child sets no_new_privs
/// and installs the filter after any uid change and before it execs.
pub fn install_for(cmd: &mut Command, host: Host) -> &mut Command {
    let prog = program_for(host);
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
