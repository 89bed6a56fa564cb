//! The seccomp filters, compiled to classic BPF in the parent.
//!
//! [`programs`] is what a sandbox with every layer installs: **one**
//! filter that answers every syscall number from the tables below —
//!
//! - allowed ([`allowed`]) → the syscall runs;
//! - dangerous ([`denied`]) → `EPERM` (what the conformance probes accept
//!   as a denial);
//! - argument-checked ([`checked`]) → runs when one of its allow rules
//!   matches the arguments, else `EPERM`;
//! - anything else → `ENOSYS`, so a syscall the kernel adds later looks
//!   unimplemented and runtimes fall back (`clone3` → `clone`) instead of
//!   the sandbox failing open on it;
//! - a foreign architecture, or on x86_64 an x32 number → the process is
//!   killed.
//!
//! The filter is laid out for the kernel's install-time cost, not only its
//! per-call cost: since Linux 5.11, `seccomp(SECCOMP_SET_MODE_FILTER)`
//! emulates the new filter for every syscall number to fill its action
//! cache (`seccomp_cache_prepare`), so installing a linear chain of `n`
//! comparisons costs about (syscall count) × `n`. Here the number goes
//! through an architecture check, the x32 guard, then a **binary search**
//! over sorted intervals of numbers (runs of consecutive numbers with one
//! verdict collapsed into one interval); each leaf is a jump straight to a
//! shared `ret` (`ALLOW`, `EPERM`, `ENOSYS`) or to the argument checks
//! placed after the tree. Fewer instructions also matter: the kernel
//! converts and JIT-compiles every one. The code is produced by a small
//! assembler ([`asm`]) that resolves labels and turns conditional jumps
//! longer than the 255 instructions classic BPF can encode into `ja`
//! trampolines.
//!
//! [`legacy_programs`] is the first version's pair (a deny-list and
//! `clone3` → `ENOSYS`), kept for `Layers::LEGACY` and compiled by the
//! same code. README.md gives the reason behind every rule.

// `libc`'s syscall-number and ioctl types differ between targets and C
// libraries (`c_long`, `c_int`, `c_ulong`); the casts keep this portable.
#![allow(clippy::unnecessary_cast)]

use std::collections::BTreeMap;

/// One compiled filter, ready for `seccomp(SECCOMP_SET_MODE_FILTER)`.
pub(crate) type Program = Vec<libc::sock_filter>;

/// The filters of a sandbox with every layer, in install order: a single
/// program (the allowlist with its explicit `EPERM` denials and argument
/// checks). It is meant for `seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog)`;
/// callers install whatever the `Vec` holds, in order.
pub(crate) fn programs() -> Result<Vec<Program>, String> {
    Ok(vec![full_filter()?])
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

// ------------------------------------------------------------- the rules

/// How much of a 64-bit argument slot a condition reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Width {
    /// The low 32 bits: what the kernel reads for an `int`/`unsigned int`
    /// argument, so high bits cannot smuggle a value past the check.
    Low32,
    /// All 64 bits, for pointers.
    Full64,
}

/// A comparison of one argument with a constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `arg == value`.
    Eq(u64),
    /// `arg != value`.
    Ne(u64),
    /// `arg & mask == value`.
    MaskedEq {
        /// The bits compared.
        mask: u64,
        /// What they must be.
        value: u64,
    },
}

/// One condition on one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cond {
    /// The argument's index (0..=5) in `seccomp_data.args`.
    pub(crate) arg: u8,
    /// How much of the argument is compared.
    pub(crate) width: Width,
    /// The comparison.
    pub(crate) op: Op,
}

impl Cond {
    /// 32-bit `arg == value`.
    fn eq(arg: u8, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Low32,
            op: Op::Eq(value),
        }
    }

    /// 32-bit `arg != value`.
    fn ne(arg: u8, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Low32,
            op: Op::Ne(value),
        }
    }

    /// 32-bit `arg & mask == value`.
    fn masked_eq(arg: u8, mask: u64, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Low32,
            op: Op::MaskedEq { mask, value },
        }
    }

    /// 64-bit `arg == value`.
    fn eq64(arg: u8, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Full64,
            op: Op::Eq(value),
        }
    }

    /// 64-bit `arg != value`.
    fn ne64(arg: u8, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Full64,
            op: Op::Ne(value),
        }
    }
}

/// Conditions that must all hold. A rule set (`Vec<Rule>`) matches when
/// any of its rules does; an empty rule matches every call.
pub(crate) type Rule = Vec<Cond>;

/// A syscall allowed only with some arguments. `allow` (the call runs when
/// any of these rules matches) is what the filter is compiled from; `deny`
/// states the refused arguments independently, as the exact complement
/// (any rule matching ⇔ no `allow` rule matching). A unit test checks the
/// two against each other and against the compiled filter, so a slip in
/// either list shows up instead of silently allowing or refusing.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    /// The syscall.
    pub(crate) sys: Sys,
    /// Rules under which the call is allowed.
    pub(crate) allow: Vec<Rule>,
    /// Rules under which the call is refused with `EPERM` (the complement
    /// of `allow`; read by the tests, not compiled).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) deny: Vec<Rule>,
}

/// "arg is one of `values`" and its complement "arg is none of them".
fn one_of(arg: u8, values: &[u64]) -> (Vec<Rule>, Vec<Rule>) {
    let is = values.iter().map(|v| vec![Cond::eq(arg, *v)]).collect();
    let none = values.iter().map(|v| Cond::ne(arg, *v)).collect();
    (is, vec![none])
}

/// The syscalls allowed only with some arguments.
pub(crate) fn checked() -> Vec<Checked> {
    let mut v = Vec::new();

    // clone: no CLONE_NEW* flag (flags is argument 0 on every supported
    // arch; the kernel reads its low 32 bits). Refused: one masked-equality
    // rule per flag.
    let ns_mask = CLONE_NS_FLAGS.iter().fold(0, |m, (f, _)| m | f);
    v.push(Checked {
        sys: sys![SYS_clone][0],
        allow: vec![vec![Cond::masked_eq(0, ns_mask, 0)]],
        deny: CLONE_NS_FLAGS
            .iter()
            .map(|(f, _)| vec![Cond::masked_eq(0, *f, *f)])
            .collect(),
    });

    // socketpair: AF_UNIX with a stream or seqpacket type only.
    let types = socketpair_types();
    let unix = libc::AF_UNIX as u64;
    v.push(Checked {
        sys: sys![SYS_socketpair][0],
        allow: types
            .iter()
            .map(|t| vec![Cond::eq(0, unix), Cond::eq(1, *t)])
            .collect(),
        deny: vec![
            vec![Cond::ne(0, unix)],
            types.iter().map(|t| Cond::ne(1, *t)).collect(),
        ],
    });

    // ioctl: every command but the terminal-injection ones.
    let (is, none) = one_of(1, &IOCTL_DENIED);
    v.push(Checked {
        sys: sys![SYS_ioctl][0],
        allow: none,
        deny: is,
    });

    // personality: only the listed values.
    let (is, none) = one_of(0, &PERSONALITY_ALLOWED);
    v.push(Checked {
        sys: sys![SYS_personality][0],
        allow: is,
        deny: none,
    });

    // prctl: every option but the refused ones.
    let (is, none) = one_of(0, &PRCTL_DENIED);
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
            allow: vec![vec![Cond::eq(0, 0)]],
            deny: vec![vec![Cond::ne(0, 0)]],
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
            allow: vec![vec![Cond::eq(0, which), Cond::eq(1, 0)]],
            deny: vec![vec![Cond::ne(0, which)], vec![Cond::ne(1, 0)]],
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
            allow: vec![vec![Cond::masked_eq(arg, special, 0)]],
            deny: [libc::S_ISUID as u64, libc::S_ISGID as u64]
                .iter()
                .map(|bit| vec![Cond::masked_eq(arg, *bit, *bit)])
                .collect(),
        });
    }

    // prlimit64: any limit of the caller (pid 0), or a read (new_limit
    // NULL, a 64-bit pointer) of any process's.
    v.push(Checked {
        sys: sys![SYS_prlimit64][0],
        allow: vec![vec![Cond::eq(0, 0)], vec![Cond::eq64(2, 0)]],
        deny: vec![vec![Cond::ne(0, 0), Cond::ne64(2, 0)]],
    });

    v
}

// ----------------------------------------------------------- the filters

/// `SECCOMP_RET_ALLOW`: the syscall runs.
const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
/// `SECCOMP_RET_ERRNO | EPERM`: refused, the denial the probes accept.
const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
/// `SECCOMP_RET_ERRNO | ENOSYS`: looks unimplemented.
const RET_ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
/// `SECCOMP_RET_KILL_PROCESS`.
const RET_KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

/// What a filter answers for one syscall number.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// This `SECCOMP_RET_*` value, whatever the arguments.
    Ret(u32),
    /// `matched` when any of `rules` holds, else `otherwise`.
    Check {
        rules: Vec<Rule>,
        matched: u32,
        otherwise: u32,
    },
}

/// A filter before compilation: a verdict per listed number, one for
/// every other number.
struct Spec {
    /// The filter's name, for error messages.
    what: &'static str,
    /// The listed numbers' verdicts.
    verdicts: BTreeMap<u32, Verdict>,
    /// The `SECCOMP_RET_*` value of every unlisted number.
    default: u32,
    /// Kill x32 calls (on x86_64; a no-op elsewhere).
    x32_guard: bool,
}

impl Spec {
    fn new(what: &'static str, default: u32, x32_guard: bool) -> Spec {
        Spec {
            what,
            verdicts: BTreeMap::new(),
            default,
            x32_guard,
        }
    }

    /// Adds `sys`, refusing a syscall listed twice (one entry would
    /// silently replace the other) or a number outside `u32`.
    fn insert(&mut self, sys: Sys, verdict: Verdict) -> Result<(), String> {
        let nr = u32::try_from(sys.nr).map_err(|_| {
            format!(
                "seccomp tables list {} with the impossible number {}: fix cordon-backend-linux",
                sys.name(),
                sys.nr
            )
        })?;
        if self.verdicts.insert(nr, verdict).is_some() {
            return Err(format!(
                "seccomp tables list {} (nr {}) twice: fix cordon-backend-linux",
                sys.name(),
                sys.nr
            ));
        }
        Ok(())
    }
}

/// The filter of a sandbox with every layer: allowed → `ALLOW`, denied →
/// `EPERM`, checked → `ALLOW` when an allow rule matches, else `EPERM`;
/// everything else → `ENOSYS`; x32 guard on x86_64.
fn full_filter() -> Result<Program, String> {
    let mut spec = Spec::new("sandbox", RET_ENOSYS, true);
    for s in allowed() {
        spec.insert(s, Verdict::Ret(RET_ALLOW))?;
    }
    for s in denied() {
        spec.insert(s, Verdict::Ret(RET_EPERM))?;
    }
    for c in checked() {
        spec.insert(
            c.sys,
            Verdict::Check {
                rules: c.allow,
                matched: RET_ALLOW,
                otherwise: RET_EPERM,
            },
        )?;
    }
    compile(&spec)
}

/// What the filters are (`allowlist`: every layer, or the legacy pair),
/// for `host_facts()["seccomp"]`.
pub(crate) fn description(allowlist: bool) -> &'static str {
    if allowlist {
        "one filter: allowlist (unlisted syscalls return ENOSYS), listed dangerous syscalls \
         return EPERM, with argument checks (refused arguments return EPERM) on clone, \
         socketpair, ioctl, personality, prctl, the scheduler setters, prlimit64 and every \
         mode-setting call (no setuid/setgid bits)"
    } else {
        "deny-list only (listed syscalls return EPERM, clone3 returns ENOSYS)"
    }
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

/// The legacy deny-list filter (listed syscalls → `EPERM`, default
/// allow), with the x32 guard on x86_64.
fn deny_list() -> Result<Program, String> {
    let mut spec = Spec::new("legacy deny-list", RET_ALLOW, true);
    for (nr, name) in legacy_denied_syscalls() {
        spec.insert(Sys::new(nr as i64, name), Verdict::Ret(RET_EPERM))?;
    }
    let refused = |rules: Vec<Rule>| Verdict::Check {
        rules,
        matched: RET_EPERM,
        otherwise: RET_ALLOW,
    };
    // clone: refused when any CLONE_NEW* flag is set.
    spec.insert(
        sys![SYS_clone][0],
        refused(
            CLONE_NS_FLAGS
                .iter()
                .map(|(f, _)| vec![Cond::masked_eq(0, *f, *f)])
                .collect(),
        ),
    )?;
    // ioctl: terminal injection (32-bit compare, as the kernel reads it).
    spec.insert(
        sys![SYS_ioctl][0],
        refused(vec![
            vec![Cond::eq(1, libc::TIOCSTI as u64)],
            vec![Cond::eq(1, libc::TIOCLINUX as u64)],
        ]),
    )?;
    // personality: refuse everything but the allowlist.
    spec.insert(
        sys![SYS_personality][0],
        refused(vec![PERSONALITY_ALLOWED
            .iter()
            .map(|v| Cond::ne(0, *v))
            .collect()]),
    )?;
    compile(&spec)
}

/// The legacy `clone3` → `ENOSYS` filter (no x32 guard: the deny-list
/// installed with it has one, and the kernel runs both).
fn clone3() -> Result<Program, String> {
    let mut spec = Spec::new("legacy clone3", RET_ALLOW, false);
    spec.insert(sys![SYS_clone3][0], Verdict::Ret(RET_ENOSYS))?;
    compile(&spec)
}

// ----------------------------------------------------------- compilation

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

/// `offsetof(struct seccomp_data, nr)`.
const SECCOMP_DATA_NR: u32 = 0;
/// `offsetof(struct seccomp_data, arch)`.
const SECCOMP_DATA_ARCH: u32 = 4;
/// `offsetof(struct seccomp_data, args)`: six `u64`, in host byte order.
const SECCOMP_DATA_ARGS: u32 = 16;
/// `AUDIT_ARCH_X86_64`.
pub(crate) const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_AARCH64`.
const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
/// `AUDIT_ARCH_RISCV64`.
const AUDIT_ARCH_RISCV64: u32 = 243 | 0x8000_0000 | 0x4000_0000;
/// `__X32_SYSCALL_BIT`: x32 syscalls report the x86_64 arch with this bit
/// set in the number.
pub(crate) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The `seccomp_data.arch` value the tables' numbers belong to.
fn audit_arch() -> Result<u32, String> {
    if cfg!(target_arch = "x86_64") {
        Ok(AUDIT_ARCH_X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(AUDIT_ARCH_AARCH64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(AUDIT_ARCH_RISCV64)
    } else {
        Err(format!(
            "the seccomp filter cannot be built for the `{}` architecture (supported: x86_64, \
             aarch64 and riscv64)",
            std::env::consts::ARCH
        ))
    }
}

/// Where the search for one interval of numbers ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaf {
    /// Return this `SECCOMP_RET_*` value.
    Ret(u32),
    /// Continue in this argument-check block.
    Block(usize),
}

/// An argument-check block: `matched` when any rule holds, else
/// `otherwise`.
type Block<'a> = (&'a [Rule], u32, u32);

/// Compiles `spec` to:
///
/// ```text
///       ld   [arch]
///       jeq  AUDIT_ARCH, +1, +0
///       ret  KILL_PROCESS
///       ld   [nr]
///       jge  X32_SYSCALL_BIT, +0, +1     (x86_64, when guarded)
///       ret  KILL_PROCESS
///       binary search on nr: one `jge` per node, jumping to the next
///       node, to a shared `ret`, or to an argument-check block
///       ret ALLOW / ret ERRNO(EPERM) / … (one per verdict)
///       the argument-check blocks, one per distinct rule set
/// ```
///
/// Every jump is forward; the assembler adds a `ja` where a conditional
/// jump is too long for its 8-bit offset.
fn compile(spec: &Spec) -> Result<Program, String> {
    let arch = audit_arch()?;
    // One block per distinct rule set (the mode-setting calls share
    // theirs), so neighbours with the same block also share an interval.
    let mut blocks: Vec<Block> = Vec::new();
    let mut leaves = Vec::new();
    for (nr, verdict) in &spec.verdicts {
        let leaf = match verdict {
            Verdict::Ret(r) => Leaf::Ret(*r),
            Verdict::Check {
                rules,
                matched,
                otherwise,
            } => {
                for c in rules.iter().flatten() {
                    validate(c).map_err(|e| format!("the {} seccomp filter: {e}", spec.what))?;
                }
                let block = (rules.as_slice(), *matched, *otherwise);
                let i = match blocks.iter().position(|b| *b == block) {
                    Some(i) => i,
                    None => {
                        blocks.push(block);
                        blocks.len() - 1
                    }
                };
                Leaf::Block(i)
            }
        };
        leaves.push((*nr, leaf));
    }
    let intervals = intervals(&leaves, Leaf::Ret(spec.default));

    let mut a = asm::Asm::new();
    let native = a.label();
    a.load(SECCOMP_DATA_ARCH);
    a.jump(asm::Cmp::Eq, arch, asm::Dest::To(native), asm::Dest::Next);
    a.ret(RET_KILL);
    a.bind(native);
    a.load(SECCOMP_DATA_NR);
    if spec.x32_guard && arch == AUDIT_ARCH_X86_64 {
        let not_x32 = a.label();
        a.jump(
            asm::Cmp::Ge,
            X32_SYSCALL_BIT,
            asm::Dest::Next,
            asm::Dest::To(not_x32),
        );
        a.ret(RET_KILL);
        a.bind(not_x32);
    }
    let mut targets = Targets {
        blocks: blocks.iter().map(|_| a.label()).collect(),
        rets: BTreeMap::new(),
    };
    search(&mut a, &intervals, &mut targets);
    for (r, label) in &targets.rets {
        a.bind(*label);
        a.ret(*r);
    }
    for ((rules, matched, otherwise), label) in blocks.iter().zip(&targets.blocks) {
        a.bind(*label);
        check_block(&mut a, rules, *matched, *otherwise);
    }
    let prog = a
        .finish()
        .map_err(|e| format!("cannot assemble the {} seccomp filter: {e}", spec.what))?;
    check_len(&prog)?;
    Ok(prog)
}

/// Sorted `(first number, leaf)` intervals covering `0..=u32::MAX`: every
/// listed number, the gaps between them as `default`, and neighbours with
/// the same leaf merged into one interval (most allowed syscalls are
/// neighbours).
fn intervals(leaves: &[(u32, Leaf)], default: Leaf) -> Vec<(u32, Leaf)> {
    fn push(out: &mut Vec<(u32, Leaf)>, start: u32, leaf: Leaf) {
        if out.last().map(|(_, l)| *l) != Some(leaf) {
            out.push((start, leaf));
        }
    }
    let mut out = Vec::new();
    // The first number not covered yet (u64: it can pass u32::MAX).
    let mut next: u64 = 0;
    for &(nr, leaf) in leaves {
        if u64::from(nr) > next {
            push(&mut out, next as u32, default);
        }
        push(&mut out, nr, leaf);
        next = u64::from(nr) + 1;
    }
    if next <= u64::from(u32::MAX) {
        push(&mut out, next as u32, default);
    }
    out
}

/// Where the search's leaves go: each argument-check block's label, and
/// one shared `ret` per verdict, placed right after the tree.
struct Targets {
    blocks: Vec<asm::Label>,
    rets: BTreeMap<u32, asm::Label>,
}

impl Targets {
    fn of(&mut self, a: &mut asm::Asm, leaf: Leaf) -> asm::Label {
        match leaf {
            Leaf::Block(b) => self.blocks[b],
            Leaf::Ret(r) => *self.rets.entry(r).or_insert_with(|| a.label()),
        }
    }
}

/// Emits the binary search over `iv` (the accumulator holds the number,
/// which lies in the intervals' range): each node splits the intervals in
/// half with one `jge` on the first number of the upper half. A half that
/// is a single interval is no code at all: the `jge` jumps straight to
/// its shared `ret` or to its argument-check block, so the tree is one
/// instruction per node and a number's verdict is one `jge` per level
/// and a `ret`.
fn search(a: &mut asm::Asm, iv: &[(u32, Leaf)], t: &mut Targets) {
    let (lower, upper) = iv.split_at(iv.len() / 2);
    if lower.is_empty() {
        // A tree of one interval (no node to jump from).
        match iv[0].1 {
            Leaf::Ret(r) => a.ret(r),
            leaf => {
                let l = t.of(a, leaf);
                a.ja(l);
            }
        }
        return;
    }
    let single = |half: &[(u32, Leaf)]| match half {
        [(_, leaf)] => Some(*leaf),
        _ => None,
    };
    let upper_label = match single(upper) {
        Some(leaf) => t.of(a, leaf),
        None => a.label(),
    };
    let lower_dest = match single(lower) {
        Some(leaf) => asm::Dest::To(t.of(a, leaf)),
        None => asm::Dest::Next,
    };
    a.jump(
        asm::Cmp::Ge,
        upper[0].0,
        asm::Dest::To(upper_label),
        lower_dest,
    );
    if single(lower).is_none() {
        search(a, lower, t);
    }
    if single(upper).is_none() {
        a.bind(upper_label);
        search(a, upper, t);
    }
}

/// Refuses a condition the filter cannot compare as written: an argument
/// index past 5, or a 32-bit comparison with a constant wider than 32
/// bits (it could never match, or would be silently truncated).
fn validate(c: &Cond) -> Result<(), String> {
    if c.arg > 5 {
        return Err(format!("argument index {} (syscalls have 6)", c.arg));
    }
    let (mask, value) = match c.op {
        Op::Eq(v) | Op::Ne(v) => (0, v),
        Op::MaskedEq { mask, value } => (mask, value),
    };
    if c.width == Width::Low32 && (mask | value) >> 32 != 0 {
        return Err(format!(
            "a 32-bit comparison of argument {} with {value:#x} (mask {mask:#x}) wider than 32 \
             bits",
            c.arg
        ));
    }
    Ok(())
}

/// The 32-bit words a condition compares: `(offset in seccomp_data, mask,
/// value)`, the low word first. `seccomp_data.args` are `u64` in host
/// byte order, so the low word is the first on little-endian machines.
fn words(c: &Cond) -> Vec<(u32, u32, u32)> {
    let (mask, value) = match c.op {
        Op::Eq(v) | Op::Ne(v) => (u64::MAX, v),
        Op::MaskedEq { mask, value } => (mask, value),
    };
    let slot = SECCOMP_DATA_ARGS + 8 * u32::from(c.arg);
    let (low, high) = if cfg!(target_endian = "little") {
        (slot, slot + 4)
    } else {
        (slot + 4, slot)
    };
    let mut w = vec![(low, mask as u32, value as u32)];
    if c.width == Width::Full64 {
        w.push((high, (mask >> 32) as u32, (value >> 32) as u32));
    }
    w
}

/// Emits one block: each rule's conditions in turn (a failed one jumps to
/// the next rule), `ret matched` after a rule that held, `ret otherwise`
/// after the last rule. Neighbouring rules that differ only in a last
/// 32-bit `==` on the same argument (`AF_UNIX` and one of eight socket
/// types; one of five personalities) are one set-membership test: their
/// common conditions once, the argument loaded once, one `jeq` per value.
fn check_block(a: &mut asm::Asm, rules: &[Rule], matched: u32, otherwise: u32) {
    use asm::{Cmp, Dest};
    let mut rest = rules;
    while let Some(first) = rest.first() {
        let group = 1 + rest[1..]
            .iter()
            .take_while(|r| same_but_value(first, r))
            .count();
        let fail = a.label();
        // Which argument word the accumulator holds, if known: consecutive
        // conditions on one word load it once.
        let mut acc = None;
        if group > 1 {
            let (last, common) = first
                .split_last()
                .expect("a rule in a group has conditions");
            for c in common {
                condition(a, c, fail, &mut acc);
            }
            let (offset, _, _) = words(last)[0];
            if acc != Some(offset) {
                a.load(offset);
            }
            let hit = a.label();
            for (i, rule) in rest[..group].iter().enumerate() {
                let value = match rule.last().map(|c| c.op) {
                    Some(Op::Eq(v)) => v as u32,
                    _ => unreachable!("same_but_value groups 32-bit `==` only"),
                };
                if i + 1 < group {
                    a.jump(Cmp::Eq, value, Dest::To(hit), Dest::Next);
                } else {
                    a.jump(Cmp::Eq, value, Dest::Next, Dest::To(fail));
                }
            }
            a.bind(hit);
        } else {
            for c in first {
                condition(a, c, fail, &mut acc);
            }
        }
        a.ret(matched);
        a.bind(fail);
        rest = &rest[group..];
    }
    a.ret(otherwise);
}

/// Whether `r` is `first` with only the value of its last condition
/// changed, that condition being a 32-bit `==` (so `first OR r` is "the
/// common conditions, and that argument is one of the values").
fn same_but_value(first: &Rule, r: &Rule) -> bool {
    let is_eq32 = |c: &Cond| c.width == Width::Low32 && matches!(c.op, Op::Eq(_));
    match (first.split_last(), r.split_last()) {
        (Some((a, common_a)), Some((b, common_b))) => {
            common_a == common_b && is_eq32(a) && is_eq32(b) && a.arg == b.arg
        }
        _ => false,
    }
}

/// Emits `c`: falls through when it holds, jumps to `fail` when not.
fn condition(a: &mut asm::Asm, c: &Cond, fail: asm::Label, acc: &mut Option<u32>) {
    use asm::{Cmp, Dest};
    let words = words(c);
    match c.op {
        // Every word must be equal (under its mask).
        Op::Eq(_) | Op::MaskedEq { .. } => {
            for (offset, mask, value) in words {
                if *acc != Some(offset) {
                    a.load(offset);
                }
                *acc = Some(offset);
                if mask != u32::MAX {
                    a.and(mask);
                    *acc = None;
                }
                a.jump(Cmp::Eq, value, Dest::Next, Dest::To(fail));
            }
        }
        // Some word must differ: a differing word before the last one
        // settles it (jump past the rest), the last one decides.
        Op::Ne(_) => {
            let holds = a.label();
            let last = words.len() - 1;
            for (i, (offset, _, value)) in words.into_iter().enumerate() {
                if *acc != Some(offset) {
                    a.load(offset);
                }
                *acc = Some(offset);
                if i == last {
                    a.jump(Cmp::Eq, value, Dest::To(fail), Dest::Next);
                } else {
                    a.jump(Cmp::Eq, value, Dest::Next, Dest::To(holds));
                }
            }
            a.bind(holds);
            if last > 0 {
                // Reached from two places holding different words.
                *acc = None;
            }
        }
    }
}

/// A classic-BPF assembler: instructions with labels, resolved to the
/// kernel's relative offsets when the program is finished.
///
/// Classic BPF only jumps forward (seccomp refuses anything else), and a
/// conditional jump's targets are 8-bit offsets: at most 255 instructions
/// ahead. `finish` gives a conditional jump whose target is farther a
/// `ja` (32-bit offset) right after it — a trampoline — and repeats until
/// every offset fits, since each trampoline lengthens the jumps over it.
mod asm {
    use super::Program;

    /// `BPF_LD | BPF_W | BPF_ABS`: load a 32-bit word of `seccomp_data`.
    pub(super) const LD_W_ABS: u16 = 0x20;
    /// `BPF_ALU | BPF_AND | BPF_K`.
    pub(super) const ALU_AND_K: u16 = 0x54;
    /// `BPF_JMP | BPF_JA`: unconditional, 32-bit offset.
    pub(super) const JA: u16 = 0x05;
    /// `BPF_JMP | BPF_JEQ | BPF_K`.
    pub(super) const JEQ_K: u16 = 0x15;
    /// `BPF_JMP | BPF_JGE | BPF_K` (unsigned).
    pub(super) const JGE_K: u16 = 0x35;
    /// `BPF_RET | BPF_K`.
    pub(super) const RET_K: u16 = 0x06;
    /// The farthest a conditional jump reaches (`jt`/`jf` are `u8`).
    pub(super) const MAX_COND_JUMP: usize = 255;

    /// A position in the program, bound with [`Asm::bind`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) struct Label(usize);

    /// Where a conditional jump goes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Dest {
        /// The next instruction emitted.
        Next,
        /// A label, bound before or after the jump (it must end up
        /// after it).
        To(Label),
    }

    /// A conditional jump's comparison of the accumulator with `k`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) enum Cmp {
        /// `A == k`.
        Eq,
        /// `A >= k`, unsigned.
        Ge,
    }

    enum Insn {
        /// An instruction without a target (`ld`, `and`, `ret`).
        Plain { code: u16, k: u32 },
        /// A conditional jump.
        Cond {
            code: u16,
            k: u32,
            jt: Dest,
            jf: Dest,
        },
        /// `ja`.
        Ja(Label),
    }

    /// A program being assembled.
    #[derive(Default)]
    pub(super) struct Asm {
        insns: Vec<Insn>,
        /// Each label's instruction index, once bound.
        labels: Vec<Option<usize>>,
        /// The first misuse (a label bound twice), reported by `finish`.
        error: Option<String>,
    }

    impl Asm {
        /// An empty program.
        pub(super) fn new() -> Asm {
            Asm::default()
        }

        /// A new, unbound label.
        pub(super) fn label(&mut self) -> Label {
            self.labels.push(None);
            Label(self.labels.len() - 1)
        }

        /// Binds `l` to the next instruction emitted.
        pub(super) fn bind(&mut self, l: Label) {
            if self.labels[l.0].is_some() {
                self.error
                    .get_or_insert_with(|| format!("label {} bound twice", l.0));
            }
            self.labels[l.0] = Some(self.insns.len());
        }

        /// `A = seccomp_data[offset..offset + 4]`.
        pub(super) fn load(&mut self, offset: u32) {
            self.insns.push(Insn::Plain {
                code: LD_W_ABS,
                k: offset,
            });
        }

        /// `A &= mask`.
        pub(super) fn and(&mut self, mask: u32) {
            self.insns.push(Insn::Plain {
                code: ALU_AND_K,
                k: mask,
            });
        }

        /// Returns `k` (a `SECCOMP_RET_*` value).
        pub(super) fn ret(&mut self, k: u32) {
            self.insns.push(Insn::Plain { code: RET_K, k });
        }

        /// Jumps to `jt` when `A cmp k`, else to `jf`.
        pub(super) fn jump(&mut self, cmp: Cmp, k: u32, jt: Dest, jf: Dest) {
            let code = match cmp {
                Cmp::Eq => JEQ_K,
                Cmp::Ge => JGE_K,
            };
            self.insns.push(Insn::Cond { code, k, jt, jf });
        }

        /// Jumps to `to`.
        pub(super) fn ja(&mut self, to: Label) {
            self.insns.push(Insn::Ja(to));
        }

        /// The instruction index a jump at `at` goes to.
        fn target(&self, at: usize, dest: Dest) -> Result<usize, String> {
            let t = match dest {
                Dest::Next => at + 1,
                Dest::To(l) => self.labels[l.0].ok_or_else(|| {
                    format!("instruction {at} jumps to label {}, never bound", l.0)
                })?,
            };
            if t <= at {
                return Err(format!("instruction {at} jumps backwards (to {t})"));
            }
            if t >= self.insns.len() {
                return Err(format!("instruction {at} jumps past the end"));
            }
            Ok(t)
        }

        /// Resolves every label to a relative offset, with a `ja`
        /// trampoline after each conditional jump whose target is more than
        /// [`MAX_COND_JUMP`] instructions ahead. Errors: a label never
        /// bound or bound twice, a backward jump or one past the end, a
        /// last instruction that is not a `ret` (the kernel refuses it).
        pub(super) fn finish(self) -> Result<Program, String> {
            if let Some(e) = self.error {
                return Err(e);
            }
            let n = self.insns.len();
            match self.insns.last() {
                Some(Insn::Plain { code: RET_K, .. }) => {}
                _ => return Err("the program does not end with a ret".into()),
            }
            // Targets as instruction indexes: [jt, jf] (a `ja`'s twice).
            let mut targets = vec![[0usize; 2]; n];
            for (i, insn) in self.insns.iter().enumerate() {
                targets[i] = match insn {
                    Insn::Plain { .. } => [0, 0],
                    Insn::Cond { jt, jf, .. } => [self.target(i, *jt)?, self.target(i, *jf)?],
                    Insn::Ja(l) => {
                        let t = self.target(i, Dest::To(*l))?;
                        [t, t]
                    }
                };
            }
            // far[i][side]: that side of conditional jump i goes through a
            // trampoline. Only ever set, so this ends (at most 2n rounds).
            let mut far = vec![[false; 2]; n];
            let pos = loop {
                let pos = positions(&far);
                let mut changed = false;
                for (i, insn) in self.insns.iter().enumerate() {
                    if let Insn::Cond { .. } = insn {
                        for side in 0..2 {
                            let offset = pos[targets[i][side]] - pos[i] - 1;
                            if !far[i][side] && offset > MAX_COND_JUMP {
                                far[i][side] = true;
                                changed = true;
                            }
                        }
                    }
                }
                if !changed {
                    break pos;
                }
            };
            let mut out = Program::with_capacity(pos[n]);
            let offset = |from: usize, to: usize| to - from - 1;
            for (i, insn) in self.insns.iter().enumerate() {
                let p = pos[i];
                match insn {
                    Insn::Plain { code, k } => out.push(stmt(*code, *k)),
                    Insn::Ja(_) => {
                        let k = u32::try_from(offset(p, pos[targets[i][0]]))
                            .map_err(|_| "a ja offset beyond 32 bits".to_string())?;
                        out.push(stmt(JA, k));
                    }
                    Insn::Cond { code, k, .. } => {
                        let [far_t, far_f] = far[i];
                        // The trampolines' slots, right after the jump.
                        let ja_t = p + 1;
                        let ja_f = p + 1 + usize::from(far_t);
                        let [t, f] = targets[i];
                        let jt = if far_t {
                            offset(p, ja_t)
                        } else {
                            offset(p, pos[t])
                        };
                        let jf = if far_f {
                            offset(p, ja_f)
                        } else {
                            offset(p, pos[f])
                        };
                        let short = |o: usize| {
                            u8::try_from(o).map_err(|_| format!("jump offset {o} left unresolved"))
                        };
                        out.push(libc::sock_filter {
                            code: *code,
                            jt: short(jt)?,
                            jf: short(jf)?,
                            k: *k,
                        });
                        for (is_far, slot, target) in [(far_t, ja_t, t), (far_f, ja_f, f)] {
                            if is_far {
                                let k = u32::try_from(offset(slot, pos[target]))
                                    .map_err(|_| "a ja offset beyond 32 bits".to_string())?;
                                out.push(stmt(JA, k));
                            }
                        }
                    }
                }
            }
            debug_assert_eq!(out.len(), pos[n]);
            Ok(out)
        }
    }

    /// Where each instruction lands once the trampolines in `far` are in:
    /// `pos[i]` for `i` in `0..=n` (`pos[n]` is the length).
    fn positions(far: &[[bool; 2]]) -> Vec<usize> {
        let mut pos = Vec::with_capacity(far.len() + 1);
        let mut p = 0;
        for f in far {
            pos.push(p);
            p += 1 + usize::from(f[0]) + usize::from(f[1]);
        }
        pos.push(p);
        pos
    }

    fn stmt(code: u16, k: u32) -> libc::sock_filter {
        libc::sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::asm::{Asm, Cmp, Dest, ALU_AND_K, JA, JEQ_K, JGE_K, LD_W_ABS, MAX_COND_JUMP, RET_K};
    use super::*;

    // A classic-BPF interpreter for every instruction the assembler
    // emits, so the compiled programs themselves are checked against an
    // independent model of the tables (the integration test
    // `seccomp_programs` checks the kernel agrees).

    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = AUDIT_ARCH_X86_64;
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = AUDIT_ARCH_AARCH64;
    #[cfg(target_arch = "riscv64")]
    const ARCH: u32 = AUDIT_ARCH_RISCV64;
    /// `AUDIT_ARCH_I386`: `int 0x80` on x86_64.
    const AUDIT_ARCH_I386: u32 = 3 | 0x4000_0000;

    const ALLOW: u32 = RET_ALLOW;
    const KILL: u32 = RET_KILL;
    const EPERM: u32 = RET_EPERM;
    const ENOSYS: u32 = RET_ENOSYS;

    /// `struct seccomp_data` as the kernel fills it: `nr`, `arch`,
    /// `instruction_pointer`, `args`, all in host byte order.
    fn data(arch: u32, nr: u32, args: [u64; 6]) -> [u8; 64] {
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&nr.to_ne_bytes());
        d[4..8].copy_from_slice(&arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_ne_bytes());
        }
        d
    }

    /// One run of a program: its verdict, how many instructions ran, and
    /// whether it read an argument (then the kernel's action cache cannot
    /// answer that number without running the filter).
    struct Trace {
        verdict: u32,
        steps: usize,
        read_args: bool,
    }

    /// Runs `prog` on `d` as the kernel's classic-BPF interpreter does.
    /// Panics on an instruction the assembler never emits, a load outside
    /// `seccomp_data`, a jump out of the program or running off its end.
    fn trace(prog: &[libc::sock_filter], d: &[u8; 64]) -> Trace {
        let (mut pc, mut acc, mut steps, mut read_args) = (0usize, 0u32, 0usize, false);
        loop {
            assert!(pc < prog.len(), "ran off the end of the program");
            let i = prog[pc];
            let k = i.k;
            pc += 1;
            steps += 1;
            match i.code {
                LD_W_ABS => {
                    let o = k as usize;
                    assert!(o % 4 == 0 && o + 4 <= d.len(), "load at offset {o}");
                    read_args |= o >= SECCOMP_DATA_ARGS as usize;
                    acc = u32::from_ne_bytes(d[o..o + 4].try_into().unwrap());
                }
                ALU_AND_K => acc &= k,
                JA => pc += k as usize,
                JEQ_K | JGE_K => {
                    let taken = if i.code == JEQ_K { acc == k } else { acc >= k };
                    pc += if taken { i.jt } else { i.jf } as usize;
                }
                RET_K => {
                    return Trace {
                        verdict: k,
                        steps,
                        read_args,
                    }
                }
                c => panic!("instruction {c:#x} not understood by the test interpreter"),
            }
        }
    }

    fn run(prog: &[libc::sock_filter], d: &[u8; 64]) -> u32 {
        trace(prog, d).verdict
    }

    /// What the kernel checks when a filter is installed
    /// (`bpf_check_classic`, `seccomp_check_filter`), for the instructions
    /// used here: a length in 1..=4096, known instructions, aligned loads
    /// inside `seccomp_data`, every jump inside the program, a `ret` last.
    fn assert_valid(prog: &[libc::sock_filter]) {
        assert!(!prog.is_empty() && prog.len() <= BPF_MAXINSNS);
        for (pc, i) in prog.iter().enumerate() {
            let inside = |offset: usize| pc + 1 + offset < prog.len();
            match i.code {
                LD_W_ABS => assert!(i.k % 4 == 0 && i.k < 64, "load at {pc}: {}", i.k),
                ALU_AND_K | RET_K => {}
                JA => assert!(inside(i.k as usize), "ja at {pc} leaves the program"),
                JEQ_K | JGE_K => assert!(
                    inside(i.jt.max(i.jf) as usize),
                    "jump at {pc} leaves the program"
                ),
                c => panic!("instruction {c:#x} at {pc}"),
            }
        }
        assert_eq!(prog.last().unwrap().code, RET_K, "the last instruction");
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

    // ------------------------------------------------------------ model

    /// Whether `c` holds for `args`, by plain Rust comparison.
    fn cond_holds(c: &Cond, args: &[u64; 6]) -> bool {
        let a = args[c.arg as usize];
        let a = match c.width {
            Width::Low32 => a & 0xffff_ffff,
            Width::Full64 => a,
        };
        match c.op {
            Op::Eq(v) => a == v,
            Op::Ne(v) => a != v,
            Op::MaskedEq { mask, value } => a & mask == value,
        }
    }

    /// Whether any of `rules` holds (all of one rule's conditions).
    fn any_holds(rules: &[Rule], args: &[u64; 6]) -> bool {
        rules.iter().any(|r| r.iter().all(|c| cond_holds(c, args)))
    }

    /// The verdicts the tables define, computed straight from
    /// `allowed()`, `denied()` and `checked()`: no intervals, no BPF.
    struct Model {
        allowed: Vec<i64>,
        denied: Vec<i64>,
        checked: Vec<Checked>,
    }

    impl Model {
        fn new() -> Model {
            Model {
                allowed: allowed().iter().map(|s| s.nr).collect(),
                denied: denied().iter().map(|s| s.nr).collect(),
                checked: checked(),
            }
        }

        fn verdict(&self, arch: u32, nr: u32, args: &[u64; 6]) -> u32 {
            if arch != ARCH || (cfg!(target_arch = "x86_64") && nr >= X32_SYSCALL_BIT) {
                return KILL;
            }
            let nr = i64::from(nr);
            if self.allowed.contains(&nr) {
                ALLOW
            } else if self.denied.contains(&nr) {
                EPERM
            } else if let Some(c) = self.checked.iter().find(|c| c.sys.nr == nr) {
                if any_holds(&c.allow, args) {
                    ALLOW
                } else {
                    EPERM
                }
            } else {
                ENOSYS
            }
        }
    }

    /// The legacy pair's verdicts, straight from the first version's
    /// rules.
    fn legacy_model(arch: u32, nr: u32, args: &[u64; 6]) -> u32 {
        if arch != ARCH || (cfg!(target_arch = "x86_64") && nr >= X32_SYSCALL_BIT) {
            return KILL;
        }
        let nr = i64::from(nr);
        let low = |i: usize| args[i] & 0xffff_ffff;
        let refused = legacy_denied_syscalls()
            .iter()
            .any(|(n, _)| *n as i64 == nr)
            || (nr == libc::SYS_clone as i64
                && CLONE_NS_FLAGS.iter().any(|(f, _)| low(0) & f != 0))
            || (nr == libc::SYS_ioctl as i64
                && [libc::TIOCSTI as u64, libc::TIOCLINUX as u64].contains(&low(1)))
            || (nr == libc::SYS_personality as i64 && !PERSONALITY_ALLOWED.contains(&low(0)));
        if nr == libc::SYS_clone3 as i64 {
            ENOSYS
        } else if refused {
            EPERM
        } else {
            ALLOW
        }
    }

    /// splitmix64: a fixed seed gives the same vectors on every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Every constant and mask bit the checked rules mention, and the
    /// usual edge values.
    fn rule_constants() -> Vec<u64> {
        let mut v = vec![0, 1, 2, 3, 5, 8, 10, 0x7fff_ffff, 0xffff_ffff, u64::MAX];
        v.push(libc::SIGCHLD as u64);
        for c in checked() {
            for cond in c.allow.iter().chain(&c.deny).flatten() {
                match cond.op {
                    Op::Eq(x) | Op::Ne(x) => v.push(x),
                    Op::MaskedEq { mask, value } => {
                        v.extend([mask, value]);
                        v.extend((0..64).filter(|b| mask >> b & 1 == 1).map(|b| 1u64 << b));
                    }
                }
            }
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// A random argument, biased towards the rules' constants, their
    /// neighbours, combinations and high halves.
    fn random_arg(rng: &mut Rng, pool: &[u64]) -> u64 {
        let pick = |rng: &mut Rng| pool[rng.below(pool.len())];
        match rng.below(7) {
            0 => rng.next(),
            1 => rng.next() & 0xffff_ffff,
            2 => pick(rng),
            3 => pick(rng) | pick(rng),
            4 => pick(rng) | (rng.next() << 32),
            5 => pick(rng) ^ (1 << rng.below(64)),
            _ => pick(rng).wrapping_add(rng.below(3) as u64).wrapping_sub(1),
        }
    }

    /// Arguments that satisfy `rule` (the others random): so both the
    /// allow and the deny side of every checked call are reached often.
    fn satisfying(rule: &[Cond], rng: &mut Rng, pool: &[u64]) -> [u64; 6] {
        let mut args = [0u64; 6];
        for a in &mut args {
            *a = random_arg(rng, pool);
        }
        for c in rule {
            let high = if c.width == Width::Low32 && rng.below(2) == 0 {
                rng.next() << 32
            } else {
                0
            };
            let a = &mut args[c.arg as usize];
            match c.op {
                Op::Eq(v) => *a = v | high,
                Op::MaskedEq { mask, value } => *a = (rng.next() & !mask) | value | high,
                Op::Ne(_) => {}
            }
        }
        // A `Ne` left unsatisfied by chance is fine: the model decides.
        args
    }

    // ------------------------------------------------------------ tests

    #[test]
    fn the_filter_compiles_with_the_x32_guard() {
        let progs = programs().unwrap();
        assert_eq!(progs.len(), 1, "one filter");
        let legacy = legacy_programs().unwrap();
        // The full filter and the legacy deny-list are guarded.
        for p in [&progs[0], &legacy[0]] {
            assert_valid(p);
            assert!(p.len() > 40 && p.len() <= BPF_MAXINSNS);
            if cfg!(target_arch = "x86_64") {
                assert_eq!(p[3].code, LD_W_ABS);
                assert_eq!(p[3].k, SECCOMP_DATA_NR);
                assert_eq!(p[4].code, JGE_K);
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
        // Without the guard, an x32 call would be matched against x86_64
        // numbers: a filter refusing `socket` would let an x32 `socket`
        // through. The guard is what makes it a kill.
        let mut spec = Spec::new("test", RET_ALLOW, false);
        spec.insert(sys![SYS_socket][0], Verdict::Ret(RET_EPERM))
            .unwrap();
        let unguarded = compile(&spec).unwrap();
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
        let checked: Vec<Sys> = checked().into_iter().map(|c| c.sys).collect();
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
            .chain(checked().iter().map(|c| c.sys.nr))
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
    /// of its rules, ±1, with high bits, with flag bits): exactly one of
    /// "an allow rule holds" and "a deny rule holds" is true (the two
    /// lists, written independently, are complements), and the filter —
    /// compiled from the allow rules only — answers `ALLOW` for the first
    /// and `EPERM` for the second: a refused argument never ends as
    /// `ENOSYS`, an allowed one never `EPERM`.
    #[test]
    fn checked_rules_are_exact_complements() {
        let prog = &programs().unwrap()[0];
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
        let vectors = || {
            values.iter().flat_map(|a0| {
                values.iter().flat_map(move |a1| {
                    [0u64, 1, 1 << 32, 0x7fff_1000].map(|a2| [*a0, *a1, a2, 0, 0, 0])
                })
            })
        };
        for c in checked() {
            for args in vectors() {
                let allow = any_holds(&c.allow, &args);
                let deny = any_holds(&c.deny, &args);
                let got = run(prog, &data(ARCH, c.sys.nr as u32, args));
                assert!(
                    allow != deny && got == if allow { ALLOW } else { EPERM },
                    "{}({:#x}, {:#x}, {:#x}): allow rules {allow}, deny rules {deny}, filter {}",
                    c.sys.name(),
                    args[0],
                    args[1],
                    args[2],
                    name_of(got)
                );
            }
        }
        // The check has teeth: socketpair's deny list without its first
        // rule (`domain != AF_UNIX`) is no longer the complement.
        let sp = checked()
            .into_iter()
            .find(|c| c.sys.nr == libc::SYS_socketpair as i64)
            .unwrap();
        assert!(
            vectors().any(|args| !any_holds(&sp.allow, &args) && !any_holds(&sp.deny[1..], &args))
        );
    }

    #[test]
    fn every_number_gets_the_models_verdict() {
        let prog = &programs().unwrap()[0];
        let model = Model::new();
        let pool = rule_constants();
        let mut rng = Rng(0x5eed_0001);
        let edges = [
            0x3fff_ffff,
            X32_SYSCALL_BIT,
            X32_SYSCALL_BIT | libc::SYS_getpid as u32,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_fffe,
            u32::MAX,
        ];
        let mut failures = Vec::new();
        let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
        for nr in (0..1024).chain(edges) {
            let mut vectors = vec![[0u64; 6], [u64::MAX; 6]];
            for _ in 0..4 {
                vectors.push(std::array::from_fn(|_| random_arg(&mut rng, &pool)));
            }
            for arch in [ARCH, AUDIT_ARCH_I386, 0, ARCH ^ 1] {
                for args in &vectors {
                    let want = model.verdict(arch, nr, args);
                    let got = run(prog, &data(arch, nr, *args));
                    *seen.entry(want).or_default() += 1;
                    if got != want {
                        failures.push(format!(
                            "arch {arch:#x} nr {nr:#x} {args:#x?}: want {}, got {}",
                            name_of(want),
                            name_of(got)
                        ));
                    }
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} differences, the first: {:#?}",
            failures.len(),
            &failures[..failures.len().min(20)]
        );
        for v in [ALLOW, EPERM, ENOSYS, KILL] {
            let n = seen.get(&v).copied().unwrap_or(0);
            assert!(n > 50, "only {n} calls expected {}", name_of(v));
        }
    }

    #[test]
    fn checked_calls_get_the_models_verdict_on_random_arguments() {
        let prog = &programs().unwrap()[0];
        let model = Model::new();
        let pool = rule_constants();
        let mut rng = Rng(0x5eed_0002);
        for c in checked() {
            let (mut allowed, mut refused) = (0, 0);
            for i in 0..4000 {
                // Half the vectors satisfy an allow or a deny rule on
                // purpose, half are random.
                let args = match i % 4 {
                    0 => satisfying(&c.allow[rng.below(c.allow.len())], &mut rng, &pool),
                    1 => satisfying(&c.deny[rng.below(c.deny.len())], &mut rng, &pool),
                    _ => std::array::from_fn(|_| random_arg(&mut rng, &pool)),
                };
                let nr = c.sys.nr as u32;
                let got = run(prog, &data(ARCH, nr, args));
                let want = model.verdict(ARCH, nr, &args);
                assert_eq!(
                    got,
                    want,
                    "{}({args:#x?}): want {}, got {}",
                    c.sys.name(),
                    name_of(want),
                    name_of(got)
                );
                // The deny list, written separately, agrees.
                assert_eq!(
                    any_holds(&c.deny, &args),
                    got == EPERM,
                    "deny rules of {} on {args:#x?}",
                    c.sys.name()
                );
                if got == ALLOW {
                    allowed += 1;
                } else {
                    refused += 1;
                }
            }
            assert!(
                allowed >= 100 && refused >= 100,
                "{}: {allowed} allowed, {refused} refused: the vectors miss a side",
                c.sys.name()
            );
        }
    }

    #[test]
    fn legacy_filters_get_their_models_verdict() {
        let progs = legacy_programs().unwrap();
        for p in &progs {
            assert_valid(p);
        }
        let pool = rule_constants();
        let mut rng = Rng(0x5eed_0003);
        let argument_checked = [
            libc::SYS_clone as u32,
            libc::SYS_ioctl as u32,
            libc::SYS_personality as u32,
        ];
        let mut sides: BTreeMap<(u32, u32), usize> = BTreeMap::new();
        for nr in (0..1024).chain([0x3fff_ffff, X32_SYSCALL_BIT, u32::MAX]) {
            let n = if argument_checked.contains(&nr) {
                3000
            } else {
                3
            };
            let mut vectors = vec![[0u64; 6]];
            for _ in 0..n {
                vectors.push(std::array::from_fn(|_| random_arg(&mut rng, &pool)));
            }
            for arch in [ARCH, AUDIT_ARCH_I386] {
                for args in &vectors {
                    let want = legacy_model(arch, nr, args);
                    let got = run_all(&progs, &data(arch, nr, *args));
                    assert_eq!(
                        got,
                        want,
                        "arch {arch:#x} nr {nr} {args:#x?}: want {}, got {}",
                        name_of(want),
                        name_of(got)
                    );
                    *sides.entry((nr, got)).or_default() += 1;
                }
            }
        }
        for nr in argument_checked {
            for v in [ALLOW, EPERM] {
                let n = sides.get(&(nr, v)).copied().unwrap_or(0);
                assert!(n >= 20, "nr {nr}: only {n} vectors got {}", name_of(v));
            }
        }
    }

    /// The kernel emulates a new filter for every syscall number when it
    /// is installed (to fill its action cache), so the instructions run
    /// before a number's verdict bound the install cost. The search is a
    /// balanced tree: logarithmic in the number of listed syscalls. The
    /// same bound catches a linear chain (what seccompiler emitted).
    #[test]
    fn numbers_are_found_by_binary_search() {
        let prog = &programs().unwrap()[0];
        let model = Model::new();
        let listed = model.allowed.len() + model.denied.len() + model.checked.len();
        // At most 2·listed + 1 intervals. Prologue (arch and x32 checks:
        // 4 instructions run), one `jge` per level, at most one
        // trampoline per level, the `ret`.
        let levels = (2 * listed + 1).next_power_of_two().trailing_zeros() as usize;
        let bound = 4 + 2 * levels + 1;
        let is_checked = |nr: u32| model.checked.iter().any(|c| c.sys.nr == i64::from(nr));
        let steps = |p: &[libc::sock_filter], nrs: &mut dyn Iterator<Item = u32>| -> Vec<usize> {
            nrs.map(|nr| trace(p, &data(ARCH, nr, [0; 6])).steps)
                .collect()
        };
        let stats = |s: &[usize]| {
            let max = *s.iter().max().unwrap();
            (max, s.iter().sum::<usize>() as f64 / s.len() as f64)
        };
        let (all_max, all_avg) = stats(&steps(prog, &mut (0..1024)));
        let plain = steps(prog, &mut (0..1024).filter(|nr| !is_checked(*nr)));
        let (max, avg) = stats(&plain);
        let top = model.allowed.iter().chain(&model.denied).max().unwrap();
        let (table_max, table_avg) = stats(&steps(prog, &mut (0..=*top as u32)));
        println!(
            "filter: {} instructions; instructions run per number (zero arguments): \
             0..1024 max {all_max} avg {all_avg:.1}; 0..={top} max {table_max} avg \
             {table_avg:.1}; numbers not argument-checked max {max} avg {avg:.1} (bound {bound})",
            prog.len()
        );
        assert!(
            max <= bound,
            "a number ran {max} instructions (bound {bound})"
        );

        // A linear chain of the same verdicts: one `jeq` per number.
        let mut a = Asm::new();
        a.load(SECCOMP_DATA_NR);
        for nr in model.allowed.iter().chain(&model.denied) {
            let next = a.label();
            a.jump(Cmp::Eq, *nr as u32, Dest::Next, Dest::To(next));
            a.ret(model.verdict(ARCH, *nr as u32, &[0; 6]));
            a.bind(next);
        }
        a.ret(ENOSYS);
        let chain = a.finish().unwrap();
        let (chain_max, chain_avg) = stats(&steps(&chain, &mut (0..1024)));
        println!(
            "a linear chain: {} instructions; max {chain_max} avg {chain_avg:.1}",
            chain.len()
        );
        assert!(chain_max > bound, "the bound does not tell a chain apart");
    }

    /// Every number whose verdict does not depend on the arguments is
    /// decided from `nr` and `arch` alone: the kernel's action cache then
    /// answers an allowed syscall without running the filter
    /// (`seccomp_is_const_allow` gives up at the first argument load).
    #[test]
    fn only_checked_calls_read_arguments() {
        let prog = &programs().unwrap()[0];
        let checked: Vec<i64> = checked().iter().map(|c| c.sys.nr).collect();
        for nr in 0..1024u32 {
            let t = trace(prog, &data(ARCH, nr, [0; 6]));
            assert_eq!(
                t.read_args,
                checked.contains(&i64::from(nr)),
                "nr {nr} ({})",
                name_of(t.verdict)
            );
        }
    }

    /// A random condition on a random argument: any comparison, either
    /// width, with a constant taken from `base` (that argument's value
    /// for this rule, sometimes one bit off), so that several conditions
    /// on one argument can hold together.
    fn random_cond(rng: &mut Rng, base: &[u64; 6]) -> Cond {
        let arg = rng.below(6) as u8;
        let (width, bits) = if rng.below(2) == 0 {
            (Width::Full64, u64::MAX)
        } else {
            (Width::Low32, 0xffff_ffff)
        };
        let mut value = base[arg as usize];
        if rng.below(4) == 0 {
            value ^= 1 << rng.below(64);
        }
        let op = match rng.below(3) {
            0 => Op::Eq(value & bits),
            1 => Op::Ne(value & bits),
            _ => {
                let mask = rng.next() & bits;
                Op::MaskedEq {
                    mask,
                    value: value & mask,
                }
            }
        };
        Cond { arg, width, op }
    }

    /// An argument close to `base`: equal, one half replaced, one bit
    /// flipped, or random.
    fn near(rng: &mut Rng, base: u64) -> u64 {
        match rng.below(5) {
            0 | 1 => base,
            2 => (base & 0xffff_ffff) | (rng.next() << 32),
            3 => base ^ (1 << rng.below(64)),
            _ => rng.next(),
        }
    }

    /// Every comparison the compiler supports, at both widths, alone and
    /// several in one rule (on the same argument too, where a load is
    /// shared or a mask changes the accumulator), against plain Rust on
    /// arguments near the constants — including kinds the tables do not
    /// use today (a 64-bit `!=`).
    #[test]
    fn every_kind_of_condition_means_what_it_says() {
        let mut rng = Rng(0x5eed_0004);
        let test = Sys::new(7, "test");
        let mut outcomes = [0usize; 2];
        for _ in 0..1000 {
            let base: [u64; 6] = std::array::from_fn(|_| rng.next());
            let mut rules: Vec<Rule> = (0..1 + rng.below(2))
                .map(|_| {
                    (0..1 + rng.below(4))
                        .map(|_| random_cond(&mut rng, &base))
                        .collect()
                })
                .collect();
            // Half the time, rules that differ only in a last 32-bit `==`
            // (compiled as one membership test), before or after others.
            if rng.below(2) == 0 {
                let common: Rule = (0..rng.below(3))
                    .map(|_| random_cond(&mut rng, &base))
                    .collect();
                let arg = rng.below(6) as u8;
                let group: Vec<Rule> = (0..2 + rng.below(4))
                    .map(|_| {
                        let value = (base[arg as usize] ^ (1 << rng.below(3))) & 0xffff_ffff;
                        let mut r = common.clone();
                        r.push(Cond::eq(arg, value));
                        r
                    })
                    .collect();
                let at = rng.below(rules.len() + 1);
                rules.splice(at..at, group);
            }
            let mut spec = Spec::new("test", RET_ENOSYS, false);
            let check = Verdict::Check {
                rules: rules.clone(),
                matched: ALLOW,
                otherwise: EPERM,
            };
            spec.insert(test, check).unwrap();
            let prog = compile(&spec).unwrap();
            assert_valid(&prog);
            for _ in 0..100 {
                let args: [u64; 6] = std::array::from_fn(|i| near(&mut rng, base[i]));
                let holds = any_holds(&rules, &args);
                outcomes[usize::from(holds)] += 1;
                let want = if holds { ALLOW } else { EPERM };
                let got = run(&prog, &data(ARCH, 7, args));
                assert_eq!(got, want, "{rules:?} on {args:#x?}");
            }
        }
        assert!(outcomes.iter().all(|n| *n > 10_000), "{outcomes:?}");
    }

    #[test]
    fn intervals_merge_neighbours_and_cover_every_number() {
        let (a, b, d) = (Leaf::Ret(1), Leaf::Block(0), Leaf::Ret(9));
        assert_eq!(
            intervals(&[(2, a), (3, a), (5, b), (6, b)], d),
            vec![(0, d), (2, a), (4, d), (5, b), (7, d)]
        );
        assert_eq!(
            intervals(&[(0, a), (u32::MAX, b)], d),
            vec![(0, a), (1, d), (u32::MAX, b)]
        );
        assert_eq!(intervals(&[], d), vec![(0, d)]);
        // A listed number with the default verdict merges into the gap.
        assert_eq!(intervals(&[(4, d)], d), vec![(0, d)]);
    }

    /// `jeq 1` to a `ret 0xA` `distance` instructions ahead (unreachable
    /// fillers in between), else `ret 0xB`.
    fn jump_over(distance: usize) -> Program {
        let mut a = Asm::new();
        let far = a.label();
        a.load(SECCOMP_DATA_NR);
        a.jump(Cmp::Eq, 1, Dest::To(far), Dest::Next);
        a.ret(0xB);
        for _ in 1..distance {
            a.load(SECCOMP_DATA_NR);
        }
        a.bind(far);
        a.ret(0xA);
        a.finish().unwrap()
    }

    #[test]
    fn a_jump_of_255_is_direct_and_256_takes_a_trampoline() {
        let near = jump_over(MAX_COND_JUMP);
        assert_valid(&near);
        assert_eq!((near[1].jt as usize, near[1].jf), (MAX_COND_JUMP, 0));
        assert!(!near.iter().any(|i| i.code == JA));
        let far = jump_over(MAX_COND_JUMP + 1);
        assert_valid(&far);
        // jeq → the `ja` right after it; else skip the `ja`.
        assert_eq!((far[1].jt, far[1].jf, far[2].code), (0, 1, JA));
        assert_eq!(far.len(), near.len() + 2, "one filler and one ja more");
        for p in [&near, &far] {
            assert_eq!(run(p, &data(ARCH, 1, [0; 6])), 0xA);
            assert_eq!(run(p, &data(ARCH, 2, [0; 6])), 0xB);
        }
    }

    #[test]
    fn both_sides_of_a_jump_can_be_far() {
        let mut a = Asm::new();
        let (t, f) = (a.label(), a.label());
        a.load(SECCOMP_DATA_NR);
        a.jump(Cmp::Ge, 10, Dest::To(t), Dest::To(f));
        for _ in 0..300 {
            a.load(SECCOMP_DATA_NR);
        }
        a.bind(f);
        a.ret(0xF);
        for _ in 0..300 {
            a.load(SECCOMP_DATA_NR);
        }
        a.bind(t);
        a.ret(0x7);
        let p = a.finish().unwrap();
        assert_valid(&p);
        assert_eq!((p[1].jt, p[1].jf, p[2].code, p[3].code), (0, 1, JA, JA));
        for (nr, want) in [(10, 0x7), (u32::MAX, 0x7), (9, 0xF), (0, 0xF)] {
            assert_eq!(run(&p, &data(ARCH, nr, [0; 6])), want, "nr {nr}");
        }
    }

    /// One jump reaches exactly 255 ahead; a later jump's trampoline lands
    /// between it and its target, so it needs one too.
    #[test]
    fn a_trampoline_that_pushes_another_jump_out_of_reach_gives_it_one_too() {
        let build = |with_far_jump: bool| {
            let mut a = Asm::new();
            let (near, far) = (a.label(), a.label());
            a.load(SECCOMP_DATA_NR); // 0
            a.jump(Cmp::Eq, 1, Dest::To(near), Dest::Next); // 1
            if with_far_jump {
                a.jump(Cmp::Eq, 2, Dest::To(far), Dest::Next); // 2
            } else {
                a.load(SECCOMP_DATA_NR);
            }
            for _ in 3..256 {
                a.load(SECCOMP_DATA_NR);
            }
            a.ret(0xC); // 256
            a.bind(near);
            a.ret(0xA); // 257: 255 after the jump at 1
            for _ in 0..300 {
                a.load(SECCOMP_DATA_NR);
            }
            a.bind(far);
            a.ret(0xB);
            a.finish().unwrap()
        };
        let alone = build(false);
        assert_valid(&alone);
        assert_eq!(alone[1].jt, 255);
        assert_eq!(alone.iter().filter(|i| i.code == JA).count(), 0);
        let both = build(true);
        assert_valid(&both);
        assert_eq!(both.iter().filter(|i| i.code == JA).count(), 2);
        assert_eq!((both[1].jt, both[2].code), (0, JA));
        for (nr, want) in [(1, 0xA), (2, 0xB), (3, 0xC)] {
            assert_eq!(run(&both, &data(ARCH, nr, [0; 6])), want, "nr {nr}");
        }
    }

    #[test]
    fn the_assembler_refuses_what_the_kernel_would() {
        // A label never bound.
        let mut a = Asm::new();
        let l = a.label();
        a.load(0);
        a.jump(Cmp::Eq, 0, Dest::To(l), Dest::Next);
        a.ret(0);
        assert!(a.finish().is_err());
        // A backward jump.
        let mut a = Asm::new();
        let l = a.label();
        a.bind(l);
        a.load(0);
        a.jump(Cmp::Eq, 0, Dest::To(l), Dest::Next);
        a.ret(0);
        assert!(a.finish().is_err());
        // A label bound twice.
        let mut a = Asm::new();
        let l = a.label();
        a.load(0);
        a.jump(Cmp::Eq, 0, Dest::To(l), Dest::Next);
        a.bind(l);
        a.ret(0);
        a.bind(l);
        a.ret(1);
        assert!(a.finish().is_err());
        // A jump past the end.
        let mut a = Asm::new();
        let l = a.label();
        a.load(0);
        a.jump(Cmp::Eq, 0, Dest::To(l), Dest::Next);
        a.ret(0);
        a.bind(l);
        assert!(a.finish().is_err());
        // No `ret` last.
        let mut a = Asm::new();
        a.ret(0);
        a.load(0);
        assert!(a.finish().is_err());
        // The control: the smallest program assembles.
        let mut a = Asm::new();
        a.ret(0);
        assert_eq!(a.finish().unwrap().len(), 1);
    }

    #[test]
    fn wide_constants_and_bad_argument_indexes_are_refused() {
        let spec_with = |cond: Cond| {
            let mut spec = Spec::new("test", RET_ENOSYS, true);
            let rules = vec![vec![cond]];
            let check = Verdict::Check {
                rules,
                matched: ALLOW,
                otherwise: EPERM,
            };
            spec.insert(sys![SYS_ioctl][0], check).unwrap();
            spec
        };
        for cond in [
            Cond::eq(0, 1 << 32),
            Cond::ne(0, u64::MAX),
            Cond::masked_eq(1, 1 << 40, 0),
            Cond::eq(6, 0),
        ] {
            assert!(compile(&spec_with(cond)).is_err(), "{cond:?}");
        }
        // The control: a 64-bit comparison with the same constant compiles.
        assert!(compile(&spec_with(Cond::eq64(0, 1 << 32))).is_ok());
        // A syscall listed twice is refused.
        let mut spec = Spec::new("test", RET_ENOSYS, true);
        let getpid = sys![SYS_getpid][0];
        spec.insert(getpid, Verdict::Ret(ALLOW)).unwrap();
        assert!(spec.insert(getpid, Verdict::Ret(EPERM)).is_err());
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
        assert!(progs[1].iter().any(|i| i.code == RET_K && i.k == ENOSYS));
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
