//! The filter of tier landlock: tier namespaces' allowlist, with
//! refusals for what the namespaces it lacks would have contained. Each
//! rule stands in for one namespace's part of a protection (README.md:
//! "Tier landlock"):
//!
//! - **IPC namespace** → SysV message queues, semaphores and shared
//!   memory and POSIX message queues are refused (`EPERM`): without a
//!   namespace of its own they would be the host's. (`/dev/shm` is not
//!   granted by Landlock, as in tier namespaces.)
//! - **PID namespace** → every call that names another process by pid is
//!   limited to the caller (`pid == 0`, or `(PRIO_PROCESS, 0)`): the
//!   scheduler, priority and I/O-priority getters and setters,
//!   `prlimit64`, `getpgid`, `getsid`; `pidfd_open` is refused (with no
//!   PID namespace it opens any host process); `ptrace`,
//!   `process_vm_*` and `pidfd_getfd` stay refused and `kcmp`,
//!   `migrate_pages`, `move_pages` unlisted (`ENOSYS`). Signals are
//!   Landlock's (ABI 6 signal scoping). `setsid` and `setpgid` are
//!   refused: the sandbox cannot leave the process group its init kills
//!   (`tree/`); so is the `TIOCSPGRP` ioctl (no other group of its own
//!   exists to make a terminal's foreground group).
//! - **Mount namespace** (read-only host) → for a sandbox that runs as
//!   the caller's uid ([`programs`] with `caller_uid`), the path-based
//!   metadata writes Landlock does not govern — `chmod`, `chown`,
//!   `utimensat` with a path, `setxattr`, `removexattr` and their
//!   variants — are refused, and so are the fd-based ones (`fchmod`,
//!   `fchown`, `fsetxattr`, `fremovexattr`) and the inode-attribute
//!   `ioctl`s (`FS_IOC_SETFLAGS`, `FS_IOC_FSSETXATTR`): Landlock opens a
//!   read grant read-only, but the caller owns those files, and no
//!   Landlock right covers a metadata write on such a descriptor (P5's
//!   `*-read-grant` checks try it). Only `futimens` stays (a descriptor's
//!   times, no data or permission). On a root host the sandbox's uid owns
//!   nothing outside its scratch, and file permissions refuse those calls
//!   there.
//! - **User namespace** (its inotify quota) → for a sandbox of the
//!   caller's uid, `inotify_init` and `inotify_init1` are refused: tier
//!   namespaces bounds a sandbox's inotify instances in its own user
//!   namespace (32 of the caller's share), and without one a sandbox
//!   could take all of the uid's instances (128 by default), after which
//!   the caller's own watchers fail. (`fanotify_init` is refused in both
//!   tiers.) The counts an rlimit bounds (pending signals, …) are bounded
//!   by the sandbox's rlimits, as in tier namespaces.

#![allow(clippy::unnecessary_cast)]

use super::*;

/// `host_facts()["seccomp"]` for the root host's variant.
pub(crate) const DESCRIPTION: &str =
    "one filter (tier landlock): the allowlist of tier namespaces, with SysV IPC and POSIX \
     message queues, setsid, setpgid, pidfd_open and the TIOCSPGRP ioctl refused (EPERM), and \
     every pid-taking scheduler, priority, I/O-priority, rlimit and process-group call limited to the caller \
     (pid 0)";

/// `host_facts()["seccomp"]` for a sandbox of the caller's own uid.
pub(crate) const DESCRIPTION_CALLER_UID: &str =
    "one filter (tier landlock, the caller's uid): the allowlist of tier namespaces, with SysV \
     IPC and POSIX message queues, setsid, setpgid, pidfd_open and the TIOCSPGRP ioctl refused \
     (EPERM), every \
     pid-taking scheduler, priority, I/O-priority, rlimit and process-group call limited to \
     the caller (pid 0), and metadata writes (chmod, chown, utimensat with a path, setxattr, \
     removexattr, fchmod, fchown, fsetxattr, fremovexattr, the inode-flag ioctls) and \
     inotify_init, inotify_init1 (the caller's uid's instances) refused";

/// The programs of tier landlock, in install order: one filter.
pub(crate) fn programs(caller_uid: bool) -> Result<Vec<Program>, String> {
    Ok(vec![tables(caller_uid).compile("tier landlock")?])
}

/// Calls whose first argument is a pid (0: the caller): allowed for the
/// caller only.
pub(crate) fn own_pid_only() -> Vec<Sys> {
    sys![
        SYS_getpgid,
        SYS_getsid,
        SYS_prlimit64,
        SYS_sched_setaffinity,
        SYS_sched_setscheduler,
        SYS_sched_setparam,
        SYS_sched_setattr,
        SYS_sched_getaffinity,
        SYS_sched_getscheduler,
        SYS_sched_getparam,
        SYS_sched_getattr,
        SYS_sched_rr_get_interval,
    ]
    .to_vec()
}

/// The path-based metadata writes, refused for a sandbox of the caller's
/// uid (Landlock has no right for them).
pub(crate) fn path_metadata_writes() -> Vec<Sys> {
    let mut v = vec![Sys::new(nr::FCHMODAT2, "fchmodat2")];
    v.extend(sys![
        SYS_fchmodat,
        SYS_fchownat,
        SYS_setxattr,
        SYS_lsetxattr,
        SYS_removexattr,
        SYS_lremovexattr,
    ]);
    v.extend([
        Sys::new(nr::SETXATTRAT, "setxattrat"),
        Sys::new(nr::REMOVEXATTRAT, "removexattrat"),
    ]);
    #[cfg(target_arch = "x86_64")]
    v.extend(sys![
        SYS_chmod,
        SYS_chown,
        SYS_lchown,
        SYS_utime,
        SYS_utimes,
        SYS_futimesat
    ]);
    v
}

/// The fd-based metadata writes, refused for a sandbox of the caller's
/// uid: a read-only descriptor of a file the caller owns is enough for
/// them.
pub(crate) fn fd_metadata_writes() -> Vec<Sys> {
    sys![SYS_fchmod, SYS_fchown, SYS_fsetxattr, SYS_fremovexattr].to_vec()
}

/// `FS_IOC_SETFLAGS` (`_IOW('f', 2, long)`: immutable, append-only, …)
/// and `FS_IOC_FSSETXATTR` (`_IOW('X', 32, struct fsxattr)`), and the
/// 32-bit `FS_IOC32_SETFLAGS`: an owner's inode-attribute writes.
pub(crate) const IOCTL_INODE_SETTERS: [u64; 3] = [0x4008_6602, 0x401c_5820, 0x4004_6602];

/// The calls that make an inotify instance, refused for a sandbox of the
/// caller's uid: the instances would count against the caller's quota,
/// with no user namespace of the sandbox's own to bound them.
pub(crate) fn inotify_instances() -> Vec<Sys> {
    #[allow(unused_mut)]
    let mut v = sys![SYS_inotify_init1].to_vec();
    #[cfg(target_arch = "x86_64")]
    v.extend(sys![SYS_inotify_init]);
    v
}

/// Tier landlock's tables: tier namespaces' with the changes above.
pub(crate) fn tables(caller_uid: bool) -> Tables {
    let mut t = Tables::namespaces(false);
    for s in ipc() {
        t.deny(s);
    }
    for s in sys![SYS_setsid, SYS_setpgid, SYS_pidfd_open] {
        t.deny(s);
    }
    // TIOCSPGRP: with setpgid refused no other group of its own exists;
    // a shell given a terminal (StdioMode::Terminal) that made a child's
    // pid the foreground group would leave ^C reaching no process.
    let refused: Vec<u64> = IOCTL_DENIED
        .iter()
        .copied()
        .chain([libc::TIOCSPGRP as u64])
        .chain(IOCTL_INODE_SETTERS.into_iter().filter(|_| caller_uid))
        .collect();
    let (is, none) = one_of(1, &refused);
    t.check(Checked {
        sys: sys![SYS_ioctl][0],
        allow: none,
        deny: is,
    });
    for s in own_pid_only() {
        t.check(Checked {
            sys: s,
            allow: vec![vec![Cond::eq(0, 0)]],
            deny: vec![vec![Cond::ne(0, 0)]],
        });
    }
    for (s, which) in [
        (sys![SYS_setpriority][0], PRIO_PROCESS),
        (sys![SYS_getpriority][0], PRIO_PROCESS),
        (sys![SYS_ioprio_set][0], IOPRIO_WHO_PROCESS),
        (sys![SYS_ioprio_get][0], IOPRIO_WHO_PROCESS),
    ] {
        t.check(Checked {
            sys: s,
            allow: vec![vec![Cond::eq(0, which), Cond::eq(1, 0)]],
            deny: vec![vec![Cond::ne(0, which)], vec![Cond::ne(1, 0)]],
        });
    }
    if caller_uid {
        for s in path_metadata_writes()
            .into_iter()
            .chain(fd_metadata_writes())
        {
            t.deny(s);
        }
        for s in inotify_instances() {
            t.deny(s);
        }
        // utimensat(fd, NULL, ...) is futimens: a descriptor Landlock let
        // the sandbox open. With a path (a 64-bit pointer), refused.
        t.check(Checked {
            sys: sys![SYS_utimensat][0],
            allow: vec![vec![Cond::eq64(1, 0)]],
            deny: vec![vec![Cond::ne64(1, 0)]],
        });
    }
    t
}
