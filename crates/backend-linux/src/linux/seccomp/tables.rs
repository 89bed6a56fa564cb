//! The tables: which syscall numbers are allowed, which are denied with
//! `EPERM`, and the argument values the checked ones accept.

#![allow(clippy::unnecessary_cast)]

/// A syscall: its number on the target architecture and its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sys {
    /// The number the filter sees in `seccomp_data.nr`.
    pub(crate) nr: i64,
    pub(super) ident: &'static str,
}

impl Sys {
    pub(super) const fn new(nr: i64, name: &'static str) -> Sys {
        Sys { nr, ident: name }
    }

    /// The syscall's name (`read`, not `SYS_read`).
    pub(crate) fn name(&self) -> &'static str {
        self.ident.strip_prefix("SYS_").unwrap_or(self.ident)
    }
}

/// `sys![SYS_read, SYS_write]`: syscalls by their `libc` constant, so a
/// name and its number cannot drift apart.
macro_rules! sys {
    ($($id:ident),* $(,)?) => {
        [$(Sys::new(libc::$id as i64, stringify!($id))),*]
    };
}

/// Syscall numbers `libc` does not define on every target this crate
/// builds for. From 424 up the kernel numbers new syscalls the same on
/// every architecture; the others are `include/uapi/asm-generic/unistd.h`
/// (aarch64, riscv64) or `arch/x86/entry/syscalls/syscall_64.tbl`.
pub(super) mod nr {
    pub(crate) const QUOTACTL_FD: i64 = 443;
    pub(crate) const FCHMODAT2: i64 = 452;
    pub(crate) const MAP_SHADOW_STACK: i64 = 453;
    pub(crate) const FUTEX_WAKE: i64 = 454;
    pub(crate) const FUTEX_WAIT: i64 = 455;
    pub(crate) const FUTEX_REQUEUE: i64 = 456;
    pub(crate) const MSEAL: i64 = 462;
    pub(crate) const SETXATTRAT: i64 = 463;
    pub(crate) const GETXATTRAT: i64 = 464;
    pub(crate) const LISTXATTRAT: i64 = 465;
    pub(crate) const REMOVEXATTRAT: i64 = 466;
    pub(crate) const OPEN_TREE_ATTR: i64 = 467;

    #[cfg(not(target_arch = "x86_64"))]
    pub(crate) const KEXEC_FILE_LOAD: i64 = 294;
    #[cfg(not(target_arch = "x86_64"))]
    pub(crate) const SYNC_FILE_RANGE: i64 = 84;
    #[cfg(not(target_arch = "x86_64"))]
    pub(crate) const GETRLIMIT: i64 = 163;
    #[cfg(not(target_arch = "x86_64"))]
    pub(crate) const SETRLIMIT: i64 = 164;
    /// aarch64 keeps `renameat` (`__ARCH_WANT_RENAMEAT`); riscv64 has only
    /// `renameat2`.
    #[cfg(target_arch = "aarch64")]
    pub(crate) const RENAMEAT: i64 = 38;
    /// `__NR_arch_specific_syscall + 14` and `+ 15`.
    #[cfg(target_arch = "riscv64")]
    pub(crate) const RISCV_HWPROBE: i64 = 258;
    #[cfg(target_arch = "riscv64")]
    pub(crate) const RISCV_FLUSH_ICACHE: i64 = 259;
}

/// Syscalls the allowlist allows whatever their arguments, on every
/// supported architecture. Grouped by purpose; README.md has the reasons.
pub(super) fn allowed_common() -> Vec<Sys> {
    let mut v = Vec::new();
    // Process and thread life cycle. `clone` is checked (see `checked`);
    // `clone3` is absent on purpose: ENOSYS makes libc fall back to `clone`.
    v.extend(sys![
        SYS_execve,
        SYS_execveat,
        SYS_exit,
        SYS_exit_group,
        SYS_wait4,
        SYS_waitid,
        SYS_set_tid_address,
        SYS_set_robust_list,
        SYS_get_robust_list,
        SYS_rseq,
        SYS_restart_syscall,
        SYS_getpid,
        SYS_getppid,
        SYS_gettid,
        SYS_getpgid,
        SYS_setpgid,
        SYS_getsid,
        SYS_setsid,
        SYS_futex,
        SYS_futex_waitv,
        SYS_membarrier,
    ]);
    // Credentials: reads, and changes the kernel allows only within what
    // the process already holds (it holds no capability).
    v.extend(sys![
        SYS_getuid,
        SYS_geteuid,
        SYS_getgid,
        SYS_getegid,
        SYS_getresuid,
        SYS_getresgid,
        SYS_getgroups,
        SYS_setuid,
        SYS_setgid,
        SYS_setreuid,
        SYS_setregid,
        SYS_setresuid,
        SYS_setresgid,
        SYS_setfsuid,
        SYS_setfsgid,
        SYS_setgroups,
        SYS_capget,
        SYS_capset,
    ]);
    // Self-restriction: each can only take rights away.
    v.extend(sys![
        SYS_seccomp,
        SYS_landlock_create_ruleset,
        SYS_landlock_add_rule,
        SYS_landlock_restrict_self,
    ]);
    // Signals. Which processes can be named is up to the PID namespace and
    // Landlock's signal scope.
    v.extend(sys![
        SYS_rt_sigaction,
        SYS_rt_sigprocmask,
        SYS_rt_sigreturn,
        SYS_rt_sigpending,
        SYS_rt_sigsuspend,
        SYS_rt_sigtimedwait,
        SYS_rt_sigqueueinfo,
        SYS_rt_tgsigqueueinfo,
        SYS_sigaltstack,
        SYS_kill,
        SYS_tkill,
        SYS_tgkill,
        SYS_pidfd_open,
        SYS_pidfd_send_signal,
    ]);
    // Own memory.
    v.extend(sys![
        SYS_brk,
        SYS_mmap,
        SYS_munmap,
        SYS_mremap,
        SYS_mprotect,
        SYS_madvise,
        SYS_msync,
        SYS_mincore,
        SYS_mlock,
        SYS_mlock2,
        SYS_munlock,
        SYS_mlockall,
        SYS_munlockall,
        SYS_pkey_alloc,
        SYS_pkey_free,
        SYS_pkey_mprotect,
        SYS_memfd_create,
    ]);
    // I/O on file descriptors already held.
    v.extend(sys![
        SYS_read,
        SYS_write,
        SYS_readv,
        SYS_writev,
        SYS_pread64,
        SYS_pwrite64,
        SYS_preadv,
        SYS_pwritev,
        SYS_preadv2,
        SYS_pwritev2,
        SYS_lseek,
        SYS_close,
        SYS_close_range,
        SYS_dup,
        SYS_dup3,
        SYS_fcntl,
        SYS_flock,
        SYS_pipe2,
        SYS_fsync,
        SYS_fdatasync,
        SYS_sync,
        SYS_syncfs,
        SYS_ftruncate,
        SYS_fadvise64,
        SYS_readahead,
        SYS_copy_file_range,
        SYS_sendfile,
        SYS_splice,
        SYS_tee,
        SYS_vmsplice,
    ]);
    // Paths: Landlock (and the mount namespace) decide which.
    v.extend(sys![
        SYS_newfstatat,
        SYS_fstat,
        SYS_statx,
        SYS_statfs,
        SYS_fstatfs,
        SYS_faccessat,
        SYS_faccessat2,
        SYS_getcwd,
        SYS_chdir,
        SYS_fchdir,
        SYS_getdents64,
        SYS_mkdirat,
        SYS_unlinkat,
        SYS_renameat2,
        SYS_linkat,
        SYS_symlinkat,
        SYS_readlinkat,
        SYS_truncate,
        SYS_fchown,
        SYS_fchownat,
        SYS_utimensat,
        SYS_umask,
        SYS_getxattr,
        SYS_lgetxattr,
        SYS_fgetxattr,
        SYS_listxattr,
        SYS_llistxattr,
        SYS_flistxattr,
        SYS_setxattr,
        SYS_lsetxattr,
        SYS_fsetxattr,
        SYS_removexattr,
        SYS_lremovexattr,
        SYS_fremovexattr,
        SYS_inotify_init1,
        SYS_inotify_add_watch,
        SYS_inotify_rm_watch,
    ]);
    // Waiting for events.
    v.extend(sys![
        SYS_epoll_create1,
        SYS_epoll_ctl,
        SYS_epoll_pwait,
        SYS_epoll_pwait2,
        SYS_ppoll,
        SYS_pselect6,
        SYS_eventfd2,
        SYS_signalfd4,
        SYS_timerfd_create,
        SYS_timerfd_settime,
        SYS_timerfd_gettime,
    ]);
    // Time (reading it, sleeping, timers; setting the clock is denied).
    v.extend(sys![
        SYS_clock_gettime,
        SYS_clock_getres,
        SYS_clock_nanosleep,
        SYS_nanosleep,
        SYS_gettimeofday,
        SYS_getitimer,
        SYS_setitimer,
        SYS_timer_create,
        SYS_timer_settime,
        SYS_timer_gettime,
        SYS_timer_getoverrun,
        SYS_timer_delete,
        SYS_times,
    ]);
    // Scheduling and accounting: reads (the setters are checked: self only).
    v.extend(sys![
        SYS_sched_yield,
        SYS_sched_getaffinity,
        SYS_sched_getparam,
        SYS_sched_getscheduler,
        SYS_sched_getattr,
        SYS_sched_get_priority_max,
        SYS_sched_get_priority_min,
        SYS_sched_rr_get_interval,
        SYS_getpriority,
        SYS_ioprio_get,
        SYS_getcpu,
        SYS_getrusage,
        SYS_uname,
        SYS_sysinfo,
        SYS_getrandom,
    ]);
    // Sockets already held: `socket` is denied and `socketpair` checked,
    // so these reach only a connected UNIX stream/seqpacket pair or an
    // inherited fd. `bind`, `connect`, `listen`, `accept*` are left out.
    v.extend(sys![
        SYS_sendto,
        SYS_recvfrom,
        SYS_sendmsg,
        SYS_recvmsg,
        SYS_sendmmsg,
        SYS_recvmmsg,
        SYS_shutdown,
        SYS_getsockname,
        SYS_getpeername,
        SYS_getsockopt,
        SYS_setsockopt,
    ]);
    // SysV and POSIX IPC: private to the sandbox's IPC namespace.
    v.extend(ipc());
    // Kernel AIO (io_setup, io_submit, ...) is left out: its events are
    // one pool for the whole host (`fs.aio-max-nr`), so ENOSYS, and
    // programs use their thread-pool I/O (`pools.rs`, decision 0014).
    v.extend([
        Sys::new(nr::MAP_SHADOW_STACK, "map_shadow_stack"),
        Sys::new(nr::FUTEX_WAKE, "futex_wake"),
        Sys::new(nr::FUTEX_WAIT, "futex_wait"),
        Sys::new(nr::FUTEX_REQUEUE, "futex_requeue"),
        Sys::new(nr::MSEAL, "mseal"),
        Sys::new(nr::SETXATTRAT, "setxattrat"),
        Sys::new(nr::GETXATTRAT, "getxattrat"),
        Sys::new(nr::LISTXATTRAT, "listxattrat"),
        Sys::new(nr::REMOVEXATTRAT, "removexattrat"),
    ]);
    v
}

/// x86_64's older entry points (the generic table dropped them), and
/// `arch_prctl` (thread-local storage).
#[cfg(target_arch = "x86_64")]
pub(super) fn allowed_arch() -> Vec<Sys> {
    sys![
        SYS_arch_prctl,
        SYS_fork,
        SYS_vfork,
        SYS_stat,
        SYS_lstat,
        SYS_access,
        SYS_readlink,
        SYS_mkdir,
        SYS_rmdir,
        SYS_unlink,
        SYS_rename,
        SYS_renameat,
        SYS_link,
        SYS_symlink,
        SYS_chown,
        SYS_lchown,
        SYS_utime,
        SYS_utimes,
        SYS_futimesat,
        SYS_getdents,
        SYS_dup2,
        SYS_pipe,
        SYS_poll,
        SYS_select,
        SYS_epoll_create,
        SYS_epoll_wait,
        SYS_eventfd,
        SYS_signalfd,
        SYS_inotify_init,
        SYS_alarm,
        SYS_pause,
        SYS_time,
        SYS_getpgrp,
        SYS_getrlimit,
        SYS_setrlimit,
        SYS_sync_file_range,
    ]
    .to_vec()
}

#[cfg(target_arch = "aarch64")]
pub(super) fn allowed_arch() -> Vec<Sys> {
    vec![
        Sys::new(nr::RENAMEAT, "renameat"),
        Sys::new(nr::GETRLIMIT, "getrlimit"),
        Sys::new(nr::SETRLIMIT, "setrlimit"),
        Sys::new(nr::SYNC_FILE_RANGE, "sync_file_range"),
    ]
}

#[cfg(target_arch = "riscv64")]
pub(super) fn allowed_arch() -> Vec<Sys> {
    vec![
        Sys::new(nr::GETRLIMIT, "getrlimit"),
        Sys::new(nr::SETRLIMIT, "setrlimit"),
        Sys::new(nr::SYNC_FILE_RANGE, "sync_file_range"),
        Sys::new(nr::RISCV_HWPROBE, "riscv_hwprobe"),
        Sys::new(nr::RISCV_FLUSH_ICACHE, "riscv_flush_icache"),
    ]
}

/// Syscalls the allowlist allows whatever their arguments.
pub(crate) fn allowed() -> Vec<Sys> {
    let mut v = allowed_common();
    v.extend(allowed_arch());
    // Argument-checked for the flags that take from a host pool instead.
    let pooled = super::pool_checks();
    v.retain(|s| !pooled.iter().any(|c| c.sys.nr == s.nr));
    v
}

/// Syscalls the explicit-deny filter refuses with `EPERM`, whatever their
/// arguments. None is on the allowlist (they would get `ENOSYS` without
/// this filter); listing them turns that into the `EPERM` a denial is.
pub(crate) fn denied() -> Vec<Sys> {
    let mut v = Vec::new();
    v.extend(sys![
        // Network: no socket at all (see `checked` for socketpair).
        SYS_socket,
        // io_uring does socket/connect/open without the syscalls.
        SYS_io_uring_setup,
        SYS_io_uring_enter,
        SYS_io_uring_register,
        // Other processes' memory and fds.
        SYS_ptrace,
        SYS_process_vm_readv,
        SYS_process_vm_writev,
        SYS_pidfd_getfd,
        // Namespaces and the mount table.
        SYS_unshare,
        SYS_setns,
        SYS_mount,
        SYS_umount2,
        SYS_pivot_root,
        SYS_chroot,
        SYS_move_mount,
        SYS_open_tree,
        SYS_fsopen,
        SYS_fsmount,
        SYS_fsconfig,
        SYS_fspick,
        SYS_mount_setattr,
        // Kernel attack surface and side channels.
        SYS_bpf,
        SYS_perf_event_open,
        SYS_userfaultfd,
        SYS_fanotify_init,
        SYS_fanotify_mark,
        SYS_lookup_dcookie,
        // Keyrings are not namespaced.
        SYS_keyctl,
        SYS_add_key,
        SYS_request_key,
        // Host administration.
        SYS_kexec_load,
        SYS_init_module,
        SYS_finit_module,
        SYS_delete_module,
        SYS_reboot,
        SYS_swapon,
        SYS_swapoff,
        SYS_acct,
        SYS_quotactl,
        SYS_syslog,
        SYS_sethostname,
        SYS_setdomainname,
        SYS_vhangup,
        // The clock is the host's.
        SYS_settimeofday,
        SYS_clock_settime,
        SYS_clock_adjtime,
        SYS_adjtimex,
        // File handles bypass path-based checks.
        SYS_name_to_handle_at,
        SYS_open_by_handle_at,
    ]);
    v.extend([
        Sys::new(nr::QUOTACTL_FD, "quotactl_fd"),
        Sys::new(nr::OPEN_TREE_ATTR, "open_tree_attr"),
    ]);
    #[cfg(target_arch = "x86_64")]
    v.extend(sys![SYS_kexec_file_load, SYS_iopl, SYS_ioperm]);
    #[cfg(not(target_arch = "x86_64"))]
    v.push(Sys::new(nr::KEXEC_FILE_LOAD, "kexec_file_load"));
    v
}

/// The `CLONE_NEW*` flags: `clone` with any of them is refused.
pub(crate) const CLONE_NS_FLAGS: [(u64, &str); 8] = [
    (libc::CLONE_NEWUSER as u64, "CLONE_NEWUSER"),
    (libc::CLONE_NEWNS as u64, "CLONE_NEWNS"),
    (libc::CLONE_NEWPID as u64, "CLONE_NEWPID"),
    (libc::CLONE_NEWNET as u64, "CLONE_NEWNET"),
    (libc::CLONE_NEWUTS as u64, "CLONE_NEWUTS"),
    (libc::CLONE_NEWIPC as u64, "CLONE_NEWIPC"),
    (libc::CLONE_NEWCGROUP as u64, "CLONE_NEWCGROUP"),
    (0x80, "CLONE_NEWTIME"),
];

/// Personalities `personality(2)` may still set (Docker's list):
/// `PER_LINUX`, `PER_LINUX32`, each with `UNAME26`, and `0xffffffff` (the
/// query). Anything else (e.g. `READ_IMPLIES_EXEC`, `MMAP_PAGE_ZERO`,
/// `ADDR_NO_RANDOMIZE`) is refused.
pub(super) const PERSONALITY_ALLOWED: [u64; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// `ioctl` commands refused on any fd: `TIOCSTI` (type into a terminal),
/// `TIOCLINUX` (console selection/paste), `TIOCSETD` (switch a tty's line
/// discipline: loads rarely used kernel code), `TIOCCONS` (redirect the
/// console).
pub(super) const IOCTL_DENIED: [u64; 4] = [
    libc::TIOCSTI as u64,
    libc::TIOCLINUX as u64,
    libc::TIOCSETD as u64,
    libc::TIOCCONS as u64,
];

/// `prctl` options refused (README.md: "prctl"): `PR_SET_MM` (35,
/// rewrites the memory map's descriptors: checkpoint/restore only),
/// `PR_SET_IO_FLUSHER` (57, storage daemons), `PR_SET_SYSCALL_USER_DISPATCH`
/// (59, emulators; redirects syscalls ahead of seccomp), `PR_SCHED_CORE`
/// (62, acts on other processes' core-scheduling cookies),
/// `PR_SET_MEMORY_MERGE` (67, KSM for the whole process: page-dedup side
/// channel). Not all are in `libc` for every target, hence the numbers.
pub(super) const PRCTL_DENIED: [u64; 5] = [35, 57, 59, 62, 67];

/// `PRIO_PROCESS` (`setpriority`'s `which`).
pub(super) const PRIO_PROCESS: u64 = 0;
/// `IOPRIO_WHO_PROCESS` (`ioprio_set`'s `which`).
pub(super) const IOPRIO_WHO_PROCESS: u64 = 1;

/// `socketpair` types allowed with `AF_UNIX`: `SOCK_STREAM` and
/// `SOCK_SEQPACKET`, each with any of `SOCK_CLOEXEC`/`SOCK_NONBLOCK`. A
/// datagram pair could `sendto` a pathname socket of the host; stream
/// sockets refuse an address (`EISCONN`) and seqpacket ones ignore it
/// (`unix_seqpacket_sendmsg` zeroes `msg_namelen`). `SOCK_RAW` is listed
/// nowhere because AF_UNIX turns it into `SOCK_DGRAM`.
pub(super) fn socketpair_types() -> [u64; 8] {
    let flags = [
        0,
        libc::SOCK_CLOEXEC as u64,
        libc::SOCK_NONBLOCK as u64,
        (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64,
    ];
    let mut out = [0u64; 8];
    for (i, base) in [libc::SOCK_STREAM as u64, libc::SOCK_SEQPACKET as u64]
        .into_iter()
        .enumerate()
    {
        for (j, f) in flags.into_iter().enumerate() {
            out[i * 4 + j] = base | f;
        }
    }
    out
}

/// The syscalls that set a file's mode, with the index of the mode
/// argument.
pub(super) fn mode_arguments() -> Vec<(Sys, u8)> {
    let mut v = vec![
        (sys![SYS_openat][0], 3),
        (sys![SYS_mknodat][0], 2),
        (sys![SYS_fchmod][0], 1),
        (sys![SYS_fchmodat][0], 2),
        (Sys::new(nr::FCHMODAT2, "fchmodat2"), 2),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (sys![SYS_open][0], 2),
        (sys![SYS_creat][0], 1),
        (sys![SYS_chmod][0], 1),
        (sys![SYS_mknod][0], 1),
    ]);
    v
}

/// SysV IPC and POSIX message queues: allowed in tier namespaces (the
/// sandbox's IPC namespace holds them), refused in tier landlock (they
/// would be the host's).
pub(crate) fn ipc() -> Vec<Sys> {
    sys![
        SYS_msgget,
        SYS_msgsnd,
        SYS_msgrcv,
        SYS_msgctl,
        SYS_semget,
        SYS_semop,
        SYS_semtimedop,
        SYS_semctl,
        SYS_shmget,
        SYS_shmat,
        SYS_shmdt,
        SYS_shmctl,
        SYS_mq_open,
        SYS_mq_unlink,
        SYS_mq_timedsend,
        SYS_mq_timedreceive,
        SYS_mq_notify,
        SYS_mq_getsetattr,
    ]
    .to_vec()
}
