//! Real checks of what the host offers: each one issues the syscall the
//! backend will depend on, never a guess from the kernel version.

use std::io;

use super::maps::IdMaps;
use super::{mounts, namespace_names, unshare_flags};
use crate::{Layers, SANDBOX_GID, SANDBOX_UID};

/// `LANDLOCK_CREATE_RULESET_VERSION`.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;
/// `SECCOMP_GET_ACTION_AVAIL`.
const SECCOMP_GET_ACTION_AVAIL: libc::c_ulong = 2;

/// The lowest Landlock ABI with signal and abstract-socket scoping.
pub(crate) const SCOPING_ABI: i32 = 6;

/// The Landlock ABI version of the running kernel, or why there is none.
pub(crate) fn landlock_abi() -> Result<i32, String> {
    // SAFETY: with a NULL attr and size 0 the kernel only reads `flags`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r >= 1 {
        return Ok(r as i32);
    }
    let err = io::Error::last_os_error();
    Err(match err.raw_os_error() {
        Some(libc::ENOSYS) => "Landlock is not built into this kernel (landlock_create_ruleset \
             returned ENOSYS): run Linux >= 5.13 built with CONFIG_SECURITY_LANDLOCK=y"
            .to_string(),
        Some(libc::EOPNOTSUPP) => "Landlock is built into this kernel but not enabled: boot with \
             `lsm=landlock,...` (add landlock to the lsm= kernel parameter or to CONFIG_LSM)"
            .to_string(),
        _ => format!("cannot query the Landlock ABI version: {err}"),
    })
}

/// Whether seccomp filters (with the `ERRNO` and `KILL_PROCESS` actions we
/// use) can be installed.
pub(crate) fn seccomp() -> Result<(), String> {
    for (action, name) in [
        (libc::SECCOMP_RET_ERRNO, "SECCOMP_RET_ERRNO"),
        (libc::SECCOMP_RET_KILL_PROCESS, "SECCOMP_RET_KILL_PROCESS"),
    ] {
        let action: u32 = action;
        // SAFETY: the kernel reads one u32 from the pointer.
        let r = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                SECCOMP_GET_ACTION_AVAIL,
                0 as libc::c_ulong,
                &action as *const u32,
            )
        };
        if r != 0 {
            let err = io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::ENOSYS) | Some(libc::EINVAL) => format!(
                    "seccomp filters are not available ({err}): run a kernel built with \
                     CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y"
                ),
                Some(libc::EOPNOTSUPP) => format!(
                    "the seccomp action {name} is not supported by this kernel: run Linux >= 4.14"
                ),
                _ => format!("cannot query seccomp support: {err}"),
            });
        }
    }
    // PR_GET_SECCOMP fails with EINVAL on kernels without seccomp.
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } < 0 {
        let err = io::Error::last_os_error();
        return Err(format!(
            "seccomp is not available (prctl(PR_GET_SECCOMP): {err}): run a kernel built with \
             CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y"
        ));
    }
    Ok(())
}

/// Whether the child can set up its namespaces, tried for real: a forked
/// child takes the same path as a sandboxed child (drop to 65534 when
/// root, `unshare` of the same namespaces, its own uid/gid maps, a private
/// mount tree made read-only with `mount_setattr`) and reports which step
/// failed, if any.
///
/// A success is remembered for the rest of the process (per set of
/// layers): the kernel does not lose namespaces while a process runs, a
/// second `SandboxRunner` (or `cordon run`'s cache check and gate) need
/// not fork again, and should the host change anyway, the child's own
/// `unshare` fails and nothing is spawned. A failure is tried again.
pub(crate) fn namespaces(layers: Layers) -> Result<(), String> {
    static PASSED: std::sync::Mutex<Vec<Layers>> = std::sync::Mutex::new(Vec::new());
    let passed = || PASSED.lock().unwrap_or_else(|p| p.into_inner());
    if passed().contains(&layers) {
        return Ok(());
    }
    try_namespaces(layers)?;
    passed().push(layers);
    Ok(())
}

fn try_namespaces(layers: Layers) -> Result<(), String> {
    // SAFETY: geteuid/getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let is_root = euid == 0;
    let (uid, gid) = if is_root {
        (SANDBOX_UID, SANDBOX_GID)
    } else {
        (euid, egid)
    };
    let maps = IdMaps::new((uid, gid), (uid, gid));
    let flags = unshare_flags(layers);
    // SAFETY: the child only issues raw syscalls and `_exit`s; it never
    // returns into Rust code, allocates or takes a lock.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!(
            "cannot fork to test namespaces: {}",
            io::Error::last_os_error()
        ));
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe { probe_child(is_root, flags, layers.mount_namespace, &maps) }
    }
    let mut status = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(format!("cannot wait for the namespace test child: {err}"));
        }
    }
    if !libc::WIFEXITED(status) {
        return Err("the namespace test child was killed".into());
    }
    let code = libc::WEXITSTATUS(status);
    let (step, errno) = (code / 50, code % 50);
    let err = io::Error::from_raw_os_error(errno);
    match step {
        0 if errno == 0 => Ok(()),
        1 => Err(format!(
            "cannot drop from root to uid/gid {SANDBOX_UID}: the process lacks \
             CAP_SETUID/CAP_SETGID ({err})"
        )),
        2 => Err(format!(
            "unprivileged user namespaces (with {}) are not available (unshare: {err}): \
             allow them (sysctl user.max_user_namespaces > 0, \
             kernel.unprivileged_userns_clone=1 on Debian-patched kernels, \
             kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu) and make sure no \
             seccomp policy of a container runtime blocks unshare",
            namespace_names(layers).join(", ")
        )),
        3 => Err(format!(
            "cannot write the sandbox's uid/gid map in its user namespace ({err})"
        )),
        4 if errno == libc::EPERM => Err(format!(
            "the user namespace gives no capability to mount ({err}): a security module \
             confines unprivileged user namespaces (Ubuntu 23.10+: \
             kernel.apparmor_restrict_unprivileged_userns=1; set it to 0 or give cordon an \
             AppArmor profile that allows userns)"
        )),
        4 => Err(format!(
            "cannot make the sandbox's mount tree private and read-only: mount_setattr(2) \
             needs Linux >= 5.12 ({err})"
        )),
        _ => Err(format!("the namespace test child failed ({err})")),
    }
}

/// The forked child of [`namespaces`]: exits with `step * 50 + errno`.
///
/// # Safety
/// Only for a freshly forked child; never returns.
unsafe fn probe_child(is_root: bool, flags: libc::c_int, mounts: bool, maps: &IdMaps) -> ! {
    let fail = |step: i32| -> ! {
        let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: _exit ends the child.
        unsafe { libc::_exit(step * 50 + e.clamp(1, 49)) }
    };
    // SAFETY: raw syscalls on integers and on memory owned by the caller.
    unsafe {
        if is_root
            && (libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID) != 0
                || libc::setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID) != 0)
        {
            fail(1);
        }
        if libc::unshare(flags) != 0 {
            fail(2);
        }
        if mounts {
            if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
                fail(3);
            }
            if maps.write().is_err() {
                fail(3);
            }
            if mounts::make_host_read_only().is_err() {
                fail(4);
            }
        }
        libc::_exit(0);
    }
}

/// The highest capability number of the running kernel (read once per
/// process: it is fixed for the kernel's lifetime).
pub(crate) fn last_cap() -> libc::c_ulong {
    static LAST: std::sync::OnceLock<libc::c_ulong> = std::sync::OnceLock::new();
    *LAST.get_or_init(read_last_cap)
}

fn read_last_cap() -> libc::c_ulong {
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap") {
        if let Ok(n) = s.trim().parse::<libc::c_ulong>() {
            return n;
        }
    }
    // Probe: PR_CAPBSET_READ fails with EINVAL past the last capability.
    let mut cap: libc::c_ulong = 0;
    // SAFETY: prctl with integer arguments.
    while cap < 256 && unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap + 1, 0, 0, 0) } >= 0 {
        cap += 1;
    }
    cap
}
