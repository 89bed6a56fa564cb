//! The seccomp filters, compiled to classic BPF in the parent.
//!
//! [`programs`] is what a sandbox with every layer installs, in this order:
//!
//! 1. the **allowlist**: the syscalls ordinary programs need are allowed
//!    (a few only with safe arguments); every other syscall returns
//!    `ENOSYS`, so one the kernel adds later looks unimplemented and
//!    runtimes fall back (`clone3` → `clone`) instead of the sandbox
//!    failing open on it;
//! 2. the **explicit-deny** filter: dangerous syscalls, and the unsafe
//!    arguments of the checked ones, return `EPERM`.
//!
//! The kernel runs every installed filter and takes the most severe action;
//! between two `ERRNO` results the most recently installed filter's errno
//! wins. So a listed dangerous call gets `EPERM` (what the conformance
//! probes accept as a denial) and an unknown one gets `ENOSYS`.
//!
//! [`legacy_programs`] is the first version's pair (a deny-list and
//! `clone3` → `ENOSYS`), kept for `Layers::LEGACY`. README.md gives the
//! reason behind every rule.

// `libc`'s syscall-number and ioctl types differ between targets and C
// libraries (`c_long`, `c_int`, `c_ulong`); the casts keep this portable.
#![allow(clippy::unnecessary_cast)]

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// One compiled filter, ready for `seccomp(SECCOMP_SET_MODE_FILTER)`.
pub(crate) type Program = Vec<libc::sock_filter>;

/// The filters of a sandbox with every layer, **in install order**: the
/// allowlist (default `ENOSYS`), then the explicit-deny filter (`EPERM`).
/// Each is meant for `seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog)`; the
/// second call is itself allowed by the first filter.
pub(crate) fn programs() -> Result<Vec<Program>, String> {
    Ok(vec![allowlist()?, explicit_deny()?])
}

/// The first version's filters, in install order: the deny-list (default
/// allow, `setsid`/`setpgid` still refused) and `clone3` → `ENOSYS`. Used
/// by `Layers::LEGACY` only.
pub(crate) fn legacy_programs() -> Result<Vec<Program>, String> {
    Ok(vec![deny_list()?, clone3()?])
}

// ------------------------------------------------------------ the tables

/// A syscall: its number on the target architecture and its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sys {
    /// The number the filter sees in `seccomp_data.nr`.
    pub(crate) nr: i64,
    ident: &'static str,
}

impl Sys {
    const fn new(nr: i64, name: &'static str) -> Sys {
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
mod nr {
    pub(super) const QUOTACTL_FD: i64 = 443;
    pub(super) const FCHMODAT2: i64 = 452;
    pub(super) const MAP_SHADOW_STACK: i64 = 453;
    pub(super) const FUTEX_WAKE: i64 = 454;
    pub(super) const FUTEX_WAIT: i64 = 455;
    pub(super) const FUTEX_REQUEUE: i64 = 456;
    pub(super) const MSEAL: i64 = 462;
    pub(super) const SETXATTRAT: i64 = 463;
    pub(super) const GETXATTRAT: i64 = 464;
    pub(super) const LISTXATTRAT: i64 = 465;
    pub(super) const REMOVEXATTRAT: i64 = 466;
    pub(super) const OPEN_TREE_ATTR: i64 = 467;

    #[cfg(target_arch = "x86_64")]
    pub(super) const IO_PGETEVENTS: i64 = 333;
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) const IO_PGETEVENTS: i64 = 292;
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) const KEXEC_FILE_LOAD: i64 = 294;
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) const SYNC_FILE_RANGE: i64 = 84;
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) const GETRLIMIT: i64 = 163;
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) const SETRLIMIT: i64 = 164;
    /// aarch64 keeps `renameat` (`__ARCH_WANT_RENAMEAT`); riscv64 has only
    /// `renameat2`.
    #[cfg(target_arch = "aarch64")]
    pub(super) const RENAMEAT: i64 = 38;
    /// `__NR_arch_specific_syscall + 14` and `+ 15`.
    #[cfg(target_arch = "riscv64")]
    pub(super) const RISCV_HWPROBE: i64 = 258;
    #[cfg(target_arch = "riscv64")]
    pub(super) const RISCV_FLUSH_ICACHE: i64 = 259;
}

/// Syscalls the allowlist allows whatever their arguments, on every
/// supported architecture. Grouped by purpose; README.md has the reasons.
fn allowed_common() -> Vec<Sys> {
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
        SYS_fallocate,
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
    v.extend(sys![
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
    ]);
    // Kernel AIO on own fds (databases use it; Docker allows it).
    v.extend(sys![
        SYS_io_setup,
        SYS_io_destroy,
        SYS_io_submit,
        SYS_io_cancel,
        SYS_io_getevents,
    ]);
    v.extend([
        Sys::new(nr::IO_PGETEVENTS, "io_pgetevents"),
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
fn allowed_arch() -> Vec<Sys> {
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
fn allowed_arch() -> Vec<Sys> {
    vec![
        Sys::new(nr::RENAMEAT, "renameat"),
        Sys::new(nr::GETRLIMIT, "getrlimit"),
        Sys::new(nr::SETRLIMIT, "setrlimit"),
        Sys::new(nr::SYNC_FILE_RANGE, "sync_file_range"),
    ]
}

#[cfg(target_arch = "riscv64")]
fn allowed_arch() -> Vec<Sys> {
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
const PERSONALITY_ALLOWED: [u64; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// `ioctl` commands refused on any fd: `TIOCSTI` (type into a terminal),
/// `TIOCLINUX` (console selection/paste), `TIOCSETD` (switch a tty's line
/// discipline: loads rarely used kernel code), `TIOCCONS` (redirect the
/// console).
const IOCTL_DENIED: [u64; 4] = [
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
const PRCTL_DENIED: [u64; 5] = [35, 57, 59, 62, 67];

/// `PRIO_PROCESS` (`setpriority`'s `which`).
const PRIO_PROCESS: u64 = 0;
/// `IOPRIO_WHO_PROCESS` (`ioprio_set`'s `which`).
const IOPRIO_WHO_PROCESS: u64 = 1;

/// `socketpair` types allowed with `AF_UNIX`: `SOCK_STREAM` and
/// `SOCK_SEQPACKET`, each with any of `SOCK_CLOEXEC`/`SOCK_NONBLOCK`. A
/// datagram pair could `sendto` a pathname socket of the host; stream
/// sockets refuse an address (`EISCONN`) and seqpacket ones ignore it
/// (`unix_seqpacket_sendmsg` zeroes `msg_namelen`). `SOCK_RAW` is listed
/// nowhere because AF_UNIX turns it into `SOCK_DGRAM`.
fn socketpair_types() -> [u64; 8] {
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
fn mode_arguments() -> Vec<(Sys, u8)> {
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

/// A syscall allowed only with some arguments. `allow` (any rule matching
/// lets the call through the allowlist) and `deny` (any rule matching makes
/// the explicit-deny filter return `EPERM`) are exact complements, so the
/// refused arguments get `EPERM`, never `ENOSYS`; a unit test checks it.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    /// The syscall.
    pub(crate) sys: Sys,
    allow: Vec<SeccompRule>,
    deny: Vec<SeccompRule>,
}

/// A 32-bit comparison: what the kernel reads for an `int`/`unsigned int`
/// argument (high bits cannot smuggle a value past it).
fn cmp(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| format!("invalid seccomp condition: {e}"))
}

/// A 64-bit comparison, for pointer arguments.
fn cmp64(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value)
        .map_err(|e| format!("invalid seccomp condition: {e}"))
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| format!("invalid seccomp rule: {e}"))
}

/// "arg is one of `values`" and its complement "arg is none of them".
fn one_of(arg: u8, values: &[u64]) -> Result<(Vec<SeccompRule>, Vec<SeccompRule>), String> {
    let is = values
        .iter()
        .map(|v| rule(vec![cmp(arg, SeccompCmpOp::Eq, *v)?]))
        .collect::<Result<Vec<_>, _>>()?;
    let none = rule(
        values
            .iter()
            .map(|v| cmp(arg, SeccompCmpOp::Ne, *v))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    Ok((is, vec![none]))
}

/// The syscalls allowed only with some arguments.
pub(crate) fn checked() -> Result<Vec<Checked>, String> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let mut v = Vec::new();

    // clone: no CLONE_NEW* flag (flags is argument 0 on every supported
    // arch; the kernel reads its low 32 bits). Refused: one masked-equality
    // rule per flag.
    let ns_mask = CLONE_NS_FLAGS.iter().fold(0, |m, (f, _)| m | f);
    v.push(Checked {
        sys: sys![SYS_clone][0],
        allow: vec![rule(vec![cmp(0, MaskedEq(ns_mask), 0)?])?],
        deny: CLONE_NS_FLAGS
            .iter()
            .map(|(f, _)| rule(vec![cmp(0, MaskedEq(*f), *f)?]))
            .collect::<Result<_, _>>()?,
    });

    // socketpair: AF_UNIX with a stream or seqpacket type only.
    let types = socketpair_types();
    let unix = libc::AF_UNIX as u64;
    v.push(Checked {
        sys: sys![SYS_socketpair][0],
        allow: types
            .iter()
            .map(|t| rule(vec![cmp(0, Eq, unix)?, cmp(1, Eq, *t)?]))
            .collect::<Result<_, _>>()?,
        deny: vec![
            rule(vec![cmp(0, Ne, unix)?])?,
            rule(
                types
                    .iter()
                    .map(|t| cmp(1, Ne, *t))
                    .collect::<Result<_, _>>()?,
            )?,
        ],
    });

    // ioctl: every command but the terminal-injection ones.
    let (is, none) = one_of(1, &IOCTL_DENIED)?;
    v.push(Checked {
        sys: sys![SYS_ioctl][0],
        allow: none,
        deny: is,
    });

    // personality: only the listed values.
    let (is, none) = one_of(0, &PERSONALITY_ALLOWED)?;
    v.push(Checked {
        sys: sys![SYS_personality][0],
        allow: is,
        deny: none,
    });

    // prctl: every option but the refused ones.
    let (is, none) = one_of(0, &PRCTL_DENIED)?;
    v.push(Checked {
        sys: sys![SYS_prctl][0],
        allow: none,
        deny: is,
    });

    // Scheduler setters: the calling thread only (pid 0). Another pid,
    // even a sibling thread's, is refused: seccomp cannot tell which pids
    // are the sandbox's own.
    for s in sys![
        SYS_sched_setaffinity,
        SYS_sched_setscheduler,
        SYS_sched_setparam,
        SYS_sched_setattr,
    ] {
        v.push(Checked {
            sys: s,
            allow: vec![rule(vec![cmp(0, Eq, 0)?])?],
            deny: vec![rule(vec![cmp(0, Ne, 0)?])?],
        });
    }

    // setpriority / ioprio_set: (PRIO_PROCESS / IOPRIO_WHO_PROCESS, 0),
    // i.e. the caller. PRIO_USER with who 0 would reach every process of
    // the uid.
    for (s, which) in [
        (sys![SYS_setpriority][0], PRIO_PROCESS),
        (sys![SYS_ioprio_set][0], IOPRIO_WHO_PROCESS),
    ] {
        v.push(Checked {
            sys: s,
            allow: vec![rule(vec![cmp(0, Eq, which)?, cmp(1, Eq, 0)?])?],
            deny: vec![rule(vec![cmp(0, Ne, which)?])?, rule(vec![cmp(1, Ne, 0)?])?],
        });
    }

    // Calls that set a file mode: never a setuid or setgid bit. Such a file
    // left in a writable place that outlives the sandbox (a caller's
    // scratch dir, a read-write grant) would run with the sandbox's uid —
    // or root's, through the idmapped mount a root host uses for those —
    // for any local user, outside the sandbox's nosuid mounts. `openat2`
    // carries its mode in a struct seccomp cannot read, so it is not on
    // the allowlist at all (ENOSYS: callers fall back to `openat`).
    // `mkdir` is not checked: a set-gid directory only passes on its group,
    // and Linux ignores set-uid on directories.
    let special = (libc::S_ISUID | libc::S_ISGID) as u64;
    for (s, arg) in mode_arguments() {
        v.push(Checked {
            sys: s,
            allow: vec![rule(vec![cmp(arg, MaskedEq(special), 0)?])?],
            deny: [libc::S_ISUID as u64, libc::S_ISGID as u64]
                .iter()
                .map(|bit| rule(vec![cmp(arg, MaskedEq(*bit), *bit)?]))
                .collect::<Result<_, _>>()?,
        });
    }

    // prlimit64: any limit of the caller (pid 0), or a read (new_limit
    // NULL, a 64-bit pointer) of any process's.
    v.push(Checked {
        sys: sys![SYS_prlimit64][0],
        allow: vec![rule(vec![cmp(0, Eq, 0)?])?, rule(vec![cmp64(2, Eq, 0)?])?],
        deny: vec![rule(vec![cmp(0, Ne, 0)?, cmp64(2, Ne, 0)?])?],
    });

    Ok(v)
}

// ----------------------------------------------------------- the filters

/// Adds `nr` to a filter's map, refusing a syscall listed twice (a later
/// entry would silently replace the earlier one's rules).
fn insert(
    rules: &mut BTreeMap<i64, Vec<SeccompRule>>,
    sys: Sys,
    chain: Vec<SeccompRule>,
) -> Result<(), String> {
    if rules.insert(sys.nr, chain).is_some() {
        return Err(format!(
            "seccomp tables list {} (nr {}) twice: fix cordon-backend-linux",
            sys.name(),
            sys.nr
        ));
    }
    Ok(())
}

/// The allowlist: listed → allow (checked calls only with their safe
/// arguments), everything else → `ENOSYS`; x32 guard on x86_64.
pub(crate) fn allowlist() -> Result<Program, String> {
    let mut rules = BTreeMap::new();
    for s in allowed() {
        // An empty chain matches every call of that syscall.
        insert(&mut rules, s, Vec::new())?;
    }
    for c in checked()? {
        insert(&mut rules, c.sys, c.allow)?;
    }
    compile(
        rules,
        SeccompAction::Errno(libc::ENOSYS as u32),
        SeccompAction::Allow,
        true,
        "allowlist",
    )
}

/// The explicit-deny filter: listed syscalls and the refused arguments of
/// the checked ones → `EPERM`, everything else → allow (the allowlist has
/// decided already); x32 guard on x86_64.
pub(crate) fn explicit_deny() -> Result<Program, String> {
    let mut rules = BTreeMap::new();
    for s in denied() {
        insert(&mut rules, s, Vec::new())?;
    }
    for c in checked()? {
        insert(&mut rules, c.sys, c.deny)?;
    }
    compile(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        true,
        "explicit-deny",
    )
}

/// What the filters are (`allowlist`: every layer, or the legacy pair),
/// for `host_facts()["seccomp"]`.
pub(crate) fn description(allowlist: bool) -> &'static str {
    if allowlist {
        "allowlist (unlisted syscalls return ENOSYS) + explicit deny-list (EPERM), with \
         argument checks on clone, socketpair, ioctl, personality, prctl, the scheduler \
         setters, prlimit64 and every mode-setting call (no setuid/setgid bits)"
    } else {
        "deny-list only (listed syscalls return EPERM, clone3 returns ENOSYS)"
    }
}

fn target_arch() -> Result<TargetArch, String> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        Err(format!(
            "the seccomp filter cannot be built for the `{}` architecture (seccompiler supports \
             x86_64, aarch64 and riscv64)",
            std::env::consts::ARCH
        ))
    }
}

/// Compiles one filter; with `guard`, x32 calls are killed on x86_64.
fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    mismatch: SeccompAction,
    matched: SeccompAction,
    guard: bool,
    what: &str,
) -> Result<Program, String> {
    let arch = target_arch()?;
    let filter = SeccompFilter::new(rules, mismatch, matched, arch)
        .map_err(|e| format!("cannot build the {what} seccomp filter: {e}"))?;
    let bpf: BpfProgram = BpfProgram::try_from(filter)
        .map_err(|e| format!("cannot compile the {what} seccomp filter: {e}"))?;
    let mut prog = convert(bpf);
    if guard && arch == TargetArch::x86_64 {
        insert_x32_guard(&mut prog)?;
    }
    check_len(&prog)?;
    Ok(prog)
}

// ------------------------------------------------ the legacy filters

/// The first version's deny-list, refused with `EPERM` (default allow).
/// Unchanged, `setsid` and `setpgid` included: `Layers::LEGACY` has no PID
/// namespace to contain a new session.
pub(crate) fn legacy_denied_syscalls() -> Vec<(libc::c_long, &'static str)> {
    vec![
        (libc::SYS_socket, "socket"),
        (libc::SYS_io_uring_setup, "io_uring_setup"),
        (libc::SYS_io_uring_enter, "io_uring_enter"),
        (libc::SYS_io_uring_register, "io_uring_register"),
        (libc::SYS_ptrace, "ptrace"),
        (libc::SYS_process_vm_readv, "process_vm_readv"),
        (libc::SYS_process_vm_writev, "process_vm_writev"),
        (libc::SYS_unshare, "unshare"),
        (libc::SYS_setns, "setns"),
        (libc::SYS_mount, "mount"),
        (libc::SYS_umount2, "umount2"),
        (libc::SYS_pivot_root, "pivot_root"),
        (libc::SYS_move_mount, "move_mount"),
        (libc::SYS_open_tree, "open_tree"),
        (libc::SYS_fsopen, "fsopen"),
        (libc::SYS_fsmount, "fsmount"),
        (libc::SYS_fsconfig, "fsconfig"),
        (libc::SYS_fspick, "fspick"),
        (libc::SYS_mount_setattr, "mount_setattr"),
        (libc::SYS_bpf, "bpf"),
        (libc::SYS_perf_event_open, "perf_event_open"),
        (libc::SYS_userfaultfd, "userfaultfd"),
        (libc::SYS_keyctl, "keyctl"),
        (libc::SYS_add_key, "add_key"),
        (libc::SYS_request_key, "request_key"),
        (libc::SYS_kexec_load, "kexec_load"),
        (libc::SYS_kexec_file_load, "kexec_file_load"),
        (libc::SYS_init_module, "init_module"),
        (libc::SYS_finit_module, "finit_module"),
        (libc::SYS_delete_module, "delete_module"),
        (libc::SYS_reboot, "reboot"),
        (libc::SYS_swapon, "swapon"),
        (libc::SYS_swapoff, "swapoff"),
        (libc::SYS_acct, "acct"),
        (libc::SYS_name_to_handle_at, "name_to_handle_at"),
        (libc::SYS_open_by_handle_at, "open_by_handle_at"),
        (libc::SYS_pidfd_getfd, "pidfd_getfd"),
        (libc::SYS_setsid, "setsid"),
        (libc::SYS_setpgid, "setpgid"),
    ]
}

/// The legacy deny-list filter (listed syscalls → `EPERM`), with the x32
/// guard on x86_64.
fn deny_list() -> Result<Program, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _) in legacy_denied_syscalls() {
        rules.insert(nr as i64, Vec::new());
    }
    // clone: refused when any CLONE_NEW* flag is set.
    let mut clone_rules = Vec::new();
    for (flag, _) in CLONE_NS_FLAGS {
        clone_rules.push(rule(vec![cmp(0, SeccompCmpOp::MaskedEq(flag), flag)?])?);
    }
    rules.insert(libc::SYS_clone as i64, clone_rules);
    // ioctl: terminal injection (32-bit compare, as the kernel reads it).
    rules.insert(
        libc::SYS_ioctl as i64,
        vec![
            rule(vec![cmp(1, SeccompCmpOp::Eq, libc::TIOCSTI as u64)?])?,
            rule(vec![cmp(1, SeccompCmpOp::Eq, libc::TIOCLINUX as u64)?])?,
        ],
    );
    // personality: refuse everything but the allowlist.
    let conds = PERSONALITY_ALLOWED
        .iter()
        .map(|v| cmp(0, SeccompCmpOp::Ne, *v))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_personality as i64, vec![rule(conds)?]);
    compile(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        true,
        "deny-list",
    )
}

/// The legacy `clone3` → `ENOSYS` filter (no x32 guard: the deny-list
/// installed with it has one, and the kernel runs both).
fn clone3() -> Result<Program, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_clone3 as i64, Vec::new());
    compile(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        false,
        "clone3",
    )
}

// ------------------------------------------------------------ BPF details

fn convert(bpf: BpfProgram) -> Program {
    bpf.into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// `BPF_MAXINSNS`: the kernel refuses a longer filter.
const BPF_MAXINSNS: usize = 4096;

fn check_len(prog: &Program) -> Result<(), String> {
    if prog.is_empty() || prog.len() > BPF_MAXINSNS {
        return Err(format!(
            "the seccomp filter has {} instructions (must be 1..={BPF_MAXINSNS})",
            prog.len()
        ));
    }
    Ok(())
}

/// `BPF_LD | BPF_W | BPF_ABS` (both `BPF_LD` and `BPF_W` are 0).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;
/// `offsetof(struct seccomp_data, arch)`.
const SECCOMP_DATA_ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, nr)`.
const SECCOMP_DATA_NR: u32 = 0;
/// `AUDIT_ARCH_X86_64`.
pub(crate) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `__X32_SYSCALL_BIT`: x32 syscalls report the x86_64 arch with this bit
/// set in the number.
pub(crate) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// seccompiler starts with `ld arch; jeq ARCH, +1; ret KILL_PROCESS`. On
/// x86_64 that lets x32 syscalls (same arch value, `nr | 0x40000000`)
/// through to rules keyed on x86_64 numbers, so a prefix kills them too.
/// The prologue's shape is checked: if seccompiler ever changes it we
/// refuse rather than guess.
fn insert_x32_guard(prog: &mut Program) -> Result<(), String> {
    let ok = prog.len() > 3
        && prog[0].code == BPF_LD_W_ABS
        && prog[0].k == SECCOMP_DATA_ARCH
        && prog[1].code == BPF_JMP_JEQ_K
        && prog[1].k == AUDIT_ARCH_X86_64
        && prog[1].jt == 1
        && prog[1].jf == 0
        && prog[2].code == BPF_RET_K
        && prog[2].k == libc::SECCOMP_RET_KILL_PROCESS;
    if !ok {
        return Err(
            "unexpected seccomp filter prologue from seccompiler: refusing to add the x32 guard \
             blindly (update cordon-backend-linux)"
                .into(),
        );
    }
    let guard = [
        libc::sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: SECCOMP_DATA_NR,
        },
        libc::sock_filter {
            code: BPF_JMP_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        libc::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_KILL_PROCESS,
        },
    ];
    // Jumps are relative and no jump crosses index 3, so inserting here
    // keeps every existing offset valid.
    prog.splice(3..3, guard);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A classic-BPF interpreter for the instructions seccompiler and the
    // guard emit, so the compiled programs themselves are checked (the
    // integration test `seccomp_programs` checks the kernel agrees).

    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = AUDIT_ARCH_X86_64;
    /// `AUDIT_ARCH_AARCH64`.
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000;
    /// `AUDIT_ARCH_RISCV64`.
    #[cfg(target_arch = "riscv64")]
    const ARCH: u32 = 243 | 0x8000_0000 | 0x4000_0000;

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

    /// `struct seccomp_data` as the filter reads it (little endian).
    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_le_bytes());
        d[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        d
    }

    fn run(prog: &[libc::sock_filter], d: &[u8; 64]) -> u32 {
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            let k = i.k;
            pc += 1;
            match i.code {
                BPF_LD_W_ABS => {
                    let o = k as usize;
                    acc = u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
                }
                0x54 => acc &= k,         // ALU AND K
                0x05 => pc += k as usize, // JA
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match i.code {
                        0x15 => acc == k,
                        0x25 => acc > k,
                        0x35 => acc >= k,
                        _ => acc & k != 0,
                    };
                    pc += if taken { i.jt } else { i.jf } as usize;
                }
                BPF_RET_K => return k,
                c => panic!("instruction {c:#x} not understood by the test interpreter"),
            }
        }
    }

    /// The kernel's combination (`seccomp_run_filters`): newest filter
    /// first, the lowest action value (as s32) wins, ties keep the newer.
    fn run_all(progs: &[Program], d: &[u8; 64]) -> u32 {
        let mut ret = ALLOW;
        for p in progs.iter().rev() {
            let cur = run(p, d);
            let action = |r: u32| (r & libc::SECCOMP_RET_ACTION_FULL) as i32;
            if action(cur) < action(ret) {
                ret = cur;
            }
        }
        ret
    }

    fn verdict(nr: i64, args: [u64; 6]) -> u32 {
        run_all(&programs().unwrap(), &data(ARCH, nr as u32, args))
    }

    fn name_of(r: u32) -> String {
        match r {
            ALLOW => "ALLOW".into(),
            KILL => "KILL".into(),
            EPERM => "EPERM".into(),
            ENOSYS => "ENOSYS".into(),
            r => format!("{r:#x}"),
        }
    }

    #[test]
    fn both_filters_compile_with_the_x32_guard() {
        let progs = programs().unwrap();
        assert_eq!(progs.len(), 2, "allowlist then explicit-deny");
        for p in &progs {
            assert!(p.len() > 40 && p.len() <= BPF_MAXINSNS);
            if cfg!(target_arch = "x86_64") {
                assert_eq!(p[3].code, BPF_LD_W_ABS);
                assert_eq!(p[3].k, SECCOMP_DATA_NR);
                assert_eq!(p[4].code, BPF_JMP_JGE_K);
                assert_eq!(p[4].k, X32_SYSCALL_BIT);
                assert_eq!(p[5].k, KILL);
                // Behaviour, not just shape: an x32 getpid is killed.
                let x32 = (libc::SYS_getpid as u32) | X32_SYSCALL_BIT;
                assert_eq!(run(p, &data(ARCH, x32, [0; 6])), KILL);
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_guard_is_what_kills_x32() {
        // Without the guard, an x32 call of an allowed syscall would only
        // get the allowlist's ENOSYS, and the explicit-deny filter would
        // let an x32 `socket` through: the guard is what makes it a kill.
        let mut rules = BTreeMap::new();
        rules.insert(libc::SYS_socket as i64, Vec::new());
        let unguarded = compile(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            false,
            "test",
        )
        .unwrap();
        let x32_socket = (libc::SYS_socket as u32) | X32_SYSCALL_BIT;
        assert_eq!(run(&unguarded, &data(ARCH, x32_socket, [0; 6])), ALLOW);
        assert_eq!(verdict(x32_socket as i64, [0; 6]), KILL);
    }

    #[test]
    fn foreign_arch_is_killed() {
        // AUDIT_ARCH_I386 (int 0x80 on x86_64) / any other value.
        let d = data(3 | 0x4000_0000, libc::SYS_getpid as u32, [0; 6]);
        assert_eq!(run_all(&programs().unwrap(), &d), KILL);
    }

    #[test]
    fn lists_have_no_duplicates_and_are_disjoint() {
        let mut seen: BTreeMap<i64, &str> = BTreeMap::new();
        let checked: Vec<Sys> = checked().unwrap().into_iter().map(|c| c.sys).collect();
        for (list, s) in allowed()
            .into_iter()
            .map(|s| ("allowed", s))
            .chain(denied().into_iter().map(|s| ("denied", s)))
            .chain(checked.into_iter().map(|s| ("checked", s)))
        {
            if let Some(prev) = seen.insert(s.nr, list) {
                panic!("{} (nr {}) is in `{prev}` and `{list}`", s.name(), s.nr);
            }
        }
        assert!(seen.len() > 250, "only {} syscalls listed", seen.len());
        // clone3 must stay unlisted (ENOSYS → libc falls back to clone).
        assert!(!seen.contains_key(&(libc::SYS_clone3 as i64)));
    }

    #[test]
    fn unified_numbers_match_libc_where_it_has_them() {
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(nr::FCHMODAT2, libc::SYS_fchmodat2 as i64);
            assert_eq!(nr::MSEAL, libc::SYS_mseal as i64);
            assert_eq!(nr::QUOTACTL_FD, libc::SYS_quotactl_fd as i64);
        }
        #[cfg(target_arch = "aarch64")]
        {
            assert_eq!(nr::MSEAL, libc::SYS_mseal as i64);
            assert_eq!(nr::QUOTACTL_FD, libc::SYS_quotactl_fd as i64);
            assert_eq!(nr::KEXEC_FILE_LOAD, libc::SYS_kexec_file_load as i64);
        }
    }

    #[test]
    fn every_listed_syscall_gets_its_action() {
        for s in allowed() {
            let r = verdict(s.nr, [0; 6]);
            assert_eq!(r, ALLOW, "{} gets {}", s.name(), name_of(r));
        }
        for s in denied() {
            let r = verdict(s.nr, [0; 6]);
            assert_eq!(r, EPERM, "{} gets {}", s.name(), name_of(r));
        }
    }

    #[test]
    fn unlisted_syscalls_get_enosys() {
        let listed: Vec<i64> = allowed()
            .iter()
            .chain(denied().iter())
            .map(|s| s.nr)
            .chain(checked().unwrap().iter().map(|c| c.sys.nr))
            .collect();
        let mut unlisted = 0;
        for nr in (0..600).chain([1000, 4095, 0x3fff_ffff]) {
            if listed.contains(&nr) {
                continue;
            }
            unlisted += 1;
            let r = verdict(nr, [0; 6]);
            assert_eq!(r, ENOSYS, "unlisted nr {nr} gets {}", name_of(r));
        }
        assert!(unlisted > 200);
        assert_eq!(verdict(libc::SYS_clone3 as i64, [0; 6]), ENOSYS);
    }

    /// The calls the sandbox's own helpers (monitor, pid-1 init) make
    /// after the filters are in force.
    #[test]
    fn helper_process_calls_are_allowed() {
        let sigchld = libc::SIGCHLD as u64;
        let mut calls: Vec<(i64, [u64; 6])> = vec![
            (libc::SYS_clone as i64, [sigchld, 0, 0, 0, 0, 0]),
            (
                libc::SYS_clone as i64,
                [
                    (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID) as u64 | sigchld,
                    0,
                    0,
                    0,
                    0,
                    0,
                ],
            ),
            (
                libc::SYS_prctl as i64,
                [libc::PR_SET_PDEATHSIG as u64, 9, 0, 0, 0, 0],
            ),
        ];
        for s in sys![
            SYS_wait4,
            SYS_pipe2,
            SYS_read,
            SYS_write,
            SYS_close,
            SYS_close_range,
            SYS_ppoll,
            SYS_rt_sigaction,
            SYS_rt_sigprocmask,
            SYS_kill,
            SYS_getpid,
            SYS_chdir,
            SYS_exit_group,
        ] {
            calls.push((s.nr, [0; 6]));
        }
        #[cfg(target_arch = "x86_64")]
        for s in sys![SYS_fork, SYS_poll] {
            calls.push((s.nr, [0; 6]));
        }
        for (nr, args) in calls {
            assert_eq!(verdict(nr, args), ALLOW, "nr {nr} {args:x?}");
        }
    }

    #[test]
    fn argument_checks_decide_as_documented() {
        let hi = 1u64 << 32;
        let (unix, inet) = (libc::AF_UNIX as u64, libc::AF_INET as u64);
        let (stream, dgram, seq, raw) = (
            libc::SOCK_STREAM as u64,
            libc::SOCK_DGRAM as u64,
            libc::SOCK_SEQPACKET as u64,
            libc::SOCK_RAW as u64,
        );
        let cloexec = libc::SOCK_CLOEXEC as u64;
        let nonblock = libc::SOCK_NONBLOCK as u64;
        let sp = libc::SYS_socketpair as i64;
        let cases: Vec<(&str, i64, [u64; 6], u32)> = vec![
            ("pair stream", sp, [unix, stream, 0, 0, 0, 0], ALLOW),
            ("pair seqpacket", sp, [unix, seq, 0, 0, 0, 0], ALLOW),
            (
                "pair stream+flags",
                sp,
                [unix, stream | cloexec | nonblock, 0, 0, 0, 0],
                ALLOW,
            ),
            ("pair dgram", sp, [unix, dgram, 0, 0, 0, 0], EPERM),
            (
                "pair dgram+cloexec",
                sp,
                [unix, dgram | cloexec, 0, 0, 0, 0],
                EPERM,
            ),
            ("pair raw (= dgram)", sp, [unix, raw, 0, 0, 0, 0], EPERM),
            ("pair inet", sp, [inet, stream, 0, 0, 0, 0], EPERM),
            // The kernel reads `int type`: high bits change nothing.
            ("pair stream|hi", sp, [unix, stream | hi, 0, 0, 0, 0], ALLOW),
            ("pair dgram|hi", sp, [unix, dgram | hi, 0, 0, 0, 0], EPERM),
            ("pair unix|hi", sp, [unix | hi, stream, 0, 0, 0, 0], ALLOW),
            (
                "ioctl FIONREAD",
                libc::SYS_ioctl as i64,
                [0, libc::FIONREAD as u64, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "ioctl TCGETS",
                libc::SYS_ioctl as i64,
                [0, libc::TCGETS as u64, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "ioctl TIOCSTI",
                libc::SYS_ioctl as i64,
                [0, libc::TIOCSTI as u64, 0, 0, 0, 0],
                EPERM,
            ),
            (
                "ioctl TIOCSTI|hi",
                libc::SYS_ioctl as i64,
                [0, libc::TIOCSTI as u64 | hi, 0, 0, 0, 0],
                EPERM,
            ),
            (
                "ioctl TIOCSETD",
                libc::SYS_ioctl as i64,
                [0, libc::TIOCSETD as u64, 0, 0, 0, 0],
                EPERM,
            ),
            (
                "personality query",
                libc::SYS_personality as i64,
                [0xffff_ffff, 0, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "personality READ_IMPLIES_EXEC",
                libc::SYS_personality as i64,
                [0x0040_0000, 0, 0, 0, 0, 0],
                EPERM,
            ),
            (
                "prctl PR_SET_MM",
                libc::SYS_prctl as i64,
                [35, 0, 0, 0, 0, 0],
                EPERM,
            ),
            (
                "prctl PR_SET_NAME",
                libc::SYS_prctl as i64,
                [libc::PR_SET_NAME as u64, 0, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "prctl PR_SET_NO_NEW_PRIVS",
                libc::SYS_prctl as i64,
                [libc::PR_SET_NO_NEW_PRIVS as u64, 1, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "clone thread",
                libc::SYS_clone as i64,
                [
                    (libc::CLONE_VM
                        | libc::CLONE_FS
                        | libc::CLONE_FILES
                        | libc::CLONE_SIGHAND
                        | libc::CLONE_THREAD
                        | libc::CLONE_SYSVSEM
                        | libc::CLONE_SETTLS
                        | libc::CLONE_PARENT_SETTID
                        | libc::CLONE_CHILD_CLEARTID) as u64,
                    0,
                    0,
                    0,
                    0,
                    0,
                ],
                ALLOW,
            ),
            (
                "clone vfork",
                libc::SYS_clone as i64,
                [
                    (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64,
                    0,
                    0,
                    0,
                    0,
                    0,
                ],
                ALLOW,
            ),
            (
                "sched_setaffinity self",
                libc::SYS_sched_setaffinity as i64,
                [0, 8, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "sched_setaffinity other",
                libc::SYS_sched_setaffinity as i64,
                [1234, 8, 0, 0, 0, 0],
                EPERM,
            ),
            (
                "setpriority self",
                libc::SYS_setpriority as i64,
                [0, 0, 10, 0, 0, 0],
                ALLOW,
            ),
            (
                "setpriority PRIO_USER",
                libc::SYS_setpriority as i64,
                [2, 0, 10, 0, 0, 0],
                EPERM,
            ),
            (
                "setpriority other",
                libc::SYS_setpriority as i64,
                [0, 1234, 10, 0, 0, 0],
                EPERM,
            ),
            (
                "ioprio_set self",
                libc::SYS_ioprio_set as i64,
                [1, 0, 0, 0, 0, 0],
                ALLOW,
            ),
            (
                "ioprio_set other",
                libc::SYS_ioprio_set as i64,
                [1, 1234, 0, 0, 0, 0],
                EPERM,
            ),
            (
                "prlimit64 self set",
                libc::SYS_prlimit64 as i64,
                [0, 7, 0x7fff_0000, 0, 0, 0],
                ALLOW,
            ),
            (
                "prlimit64 other read",
                libc::SYS_prlimit64 as i64,
                [1234, 7, 0, 0x7fff_0000, 0, 0],
                ALLOW,
            ),
            (
                "prlimit64 other set",
                libc::SYS_prlimit64 as i64,
                [1234, 7, 0x7fff_0000, 0, 0, 0],
                EPERM,
            ),
            // A pointer is 64 bits: a non-NULL one with a zero low half
            // is still a set.
            (
                "prlimit64 other set hi",
                libc::SYS_prlimit64 as i64,
                [1234, 7, hi, 0, 0, 0],
                EPERM,
            ),
        ];
        let mut failures = Vec::new();
        for (what, nr, args, want) in &cases {
            let got = verdict(*nr, *args);
            if got != *want {
                failures.push(format!(
                    "{what}: want {}, got {}",
                    name_of(*want),
                    name_of(got)
                ));
            }
        }
        for (flag, name) in CLONE_NS_FLAGS {
            let got = verdict(
                libc::SYS_clone as i64,
                [flag | libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
            );
            if got != EPERM {
                failures.push(format!("clone {name}: got {}", name_of(got)));
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }

    /// For every checked syscall and many argument values (each constant
    /// of its rules, ±1, with high bits, with flag bits), exactly one of
    /// "the allowlist allows" and "the explicit-deny filter refuses" holds:
    /// a refused argument never ends as ENOSYS, an allowed one never EPERM.
    #[test]
    fn checked_rules_are_exact_complements() {
        let progs = programs().unwrap();
        let mut consts: Vec<u64> = vec![0, 1, 2, 3, 5, 8, 10, 0x7fff_ffff, 0xffff_ffff, u64::MAX];
        consts.extend(PERSONALITY_ALLOWED);
        consts.extend(IOCTL_DENIED);
        consts.extend(PRCTL_DENIED);
        consts.extend(socketpair_types());
        consts.extend(CLONE_NS_FLAGS.iter().map(|(f, _)| *f));
        let mut values: Vec<u64> = Vec::new();
        for c in consts {
            for v in [
                c,
                c.wrapping_add(1),
                c.wrapping_sub(1),
                c | (1 << 32),
                c | 0x80,
                c | libc::SIGCHLD as u64,
                c | libc::SOCK_CLOEXEC as u64,
            ] {
                if !values.contains(&v) {
                    values.push(v);
                }
            }
        }
        for c in checked().unwrap() {
            for a0 in &values {
                for a1 in &values {
                    for a2 in [0u64, 1, 1 << 32, 0x7fff_1000] {
                        let d = data(ARCH, c.sys.nr as u32, [*a0, *a1, a2, 0, 0, 0]);
                        let allow = run(&progs[0], &d);
                        let deny = run(&progs[1], &d);
                        assert!(
                            (allow == ALLOW) != (deny == EPERM)
                                && (allow == ALLOW || allow == ENOSYS)
                                && (deny == ALLOW || deny == EPERM),
                            "{}({a0:#x}, {a1:#x}, {a2:#x}): allowlist {}, explicit-deny {}",
                            c.sys.name(),
                            name_of(allow),
                            name_of(deny)
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn legacy_programs_are_the_first_versions() {
        let progs = legacy_programs().unwrap();
        assert_eq!(progs.len(), 2);
        let v = |nr: i64| run_all(&progs, &data(ARCH, nr as u32, [0; 6]));
        assert_eq!(v(libc::SYS_setsid as i64), EPERM);
        assert_eq!(v(libc::SYS_setpgid as i64), EPERM);
        assert_eq!(v(libc::SYS_socket as i64), EPERM);
        assert_eq!(v(libc::SYS_clone3 as i64), ENOSYS);
        // Default allow: an unlisted call goes through (what the allowlist
        // exists to change).
        assert_eq!(v(libc::SYS_kcmp as i64), ALLOW);
        assert!(progs[1]
            .iter()
            .any(|i| i.code == BPF_RET_K && i.k == ENOSYS));
        let mut nrs: Vec<_> = legacy_denied_syscalls()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let len = nrs.len();
        nrs.sort();
        nrs.dedup();
        assert_eq!(nrs.len(), len);
    }

    #[test]
    fn setsid_and_setpgid_are_allowed_now() {
        assert_eq!(verdict(libc::SYS_setsid as i64, [0; 6]), ALLOW);
        assert_eq!(verdict(libc::SYS_setpgid as i64, [0; 6]), ALLOW);
    }
}
