//! The inventory of kernel pools shared beyond the sandbox: for every
//! syscall the filters let run, whether it takes from something the
//! kernel counts for the whole host or for a uid, and what bounds the
//! sandbox's part. [`HOST_POOLS`] names each pool, the calls that take
//! from it and what each tier's filter does with them; [`NO_HOST_POOL`]
//! lists every other call the filters let run, each group with the
//! reason it takes from no such pool. Unit tests hold both to the filters'
//! tables in both directions (a call the filters let run that is in
//! neither list fails them, and so does an entry whose calls are not
//! handled as it says), and the backend README's table is generated from
//! [`HOST_POOLS`] (`cargo xtask docs`).

/// What a filter does with a pool's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// They run (allowed, or argument-checked); a quota or a limit bounds
    /// the pool.
    Runs,
    /// Refused with `EPERM` (the explicit denials).
    Refused,
    /// Not listed: `ENOSYS`, as if the kernel lacked them, so programs
    /// take their fallback.
    Unlisted,
}

/// One pool, the calls that take from it, and how each filter holds it.
#[derive(Debug)]
pub struct HostPool {
    /// What the kernel counts, and the knob that sets its size.
    pub pool: &'static str,
    /// The calls that take from it (names as in `SYS_<name>`).
    pub syscalls: &'static [&'static str],
    /// Tier namespaces without an egress allowlist.
    pub namespaces: Held,
    /// Tier namespaces with `Network::Allow`.
    pub egress: Held,
    /// Tier landlock on a root host (the sandbox has a uid of its own).
    pub landlock: Held,
    /// Tier landlock on an unprivileged host (the caller's uid).
    pub landlock_caller_uid: Held,
    /// What bounds the sandbox's part, in each tier.
    pub bound: &'static str,
    /// The test that shows it, or why none fills it.
    pub test: &'static str,
}

use Held::*;

/// The pools. A call may take from several (a pipe is an open file and
/// pipe buffers); its entries must then agree on how each filter holds it.
pub const HOST_POOLS: &[HostPool] = &[
    HostPool {
        pool: "kernel AIO events (`fs.aio-max-nr`: one count for the host)",
        syscalls: &[
            "io_setup",
            "io_destroy",
            "io_submit",
            "io_cancel",
            "io_getevents",
            "io_pgetevents",
        ],
        namespaces: Unlisted,
        egress: Unlisted,
        landlock: Unlisted,
        landlock_caller_uid: Unlisted,
        bound: "none can be taken: no namespace or uid holds a share, and a cap on `nr_events` \
                would not bound the number of calls; `ENOSYS` makes libaio users (databases, \
                QEMU, fio) use their thread-pool I/O (decision 0014)",
        test: "`aio_pool_stays_the_hosts` (the host's `io_setup` while a sandbox tries to \
               drain it)",
    },
    HostPool {
        pool: "io_uring rings (locked memory, kernel workers)",
        syscalls: &["io_uring_setup", "io_uring_enter", "io_uring_register"],
        namespaces: Refused,
        egress: Refused,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "refused (it also opens and connects without the syscalls)",
        test: "`seccomp_programs` `denials_hold` (`io_uring_setup`)",
    },
    HostPool {
        pool: "pending signals and POSIX timers (`RLIMIT_SIGPENDING`, counted per user \
               namespace and uid up to the host's)",
        syscalls: &[
            "rt_sigqueueinfo",
            "rt_tgsigqueueinfo",
            "kill",
            "tkill",
            "tgkill",
            "pidfd_send_signal",
            "timer_create",
        ],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "`RLIMIT_SIGPENDING` 1024 (a timer holds one); a root host's sandbox counts \
                under its own uid, an unprivileged host's under the caller's, at most 1024",
        test: "`concurrent_sandboxes_keep_their_own_quotas` (signals and timers)",
    },
    HostPool {
        pool: "inotify instances (`fs.inotify.max_user_instances`, per user namespace and uid)",
        syscalls: &["inotify_init1", "inotify_init"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Refused,
        bound: "tier namespaces: 32 in its own user namespace; tier landlock: its own uid's \
                (root host) or refused (the caller's uid)",
        test: "`concurrent_sandboxes_keep_their_own_quotas`",
    },
    HostPool {
        pool: "inotify watches (`fs.inotify.max_user_watches`, per user namespace and uid)",
        syscalls: &["inotify_add_watch"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "tier namespaces: 8192 in its own user namespace; tier landlock: its own uid's \
                (root host), or none to add to (the caller's uid: no instance)",
        test: "none fills it (the instances' test shows the same quota files hold)",
    },
    HostPool {
        pool: "fanotify groups and marks (per user namespace and uid)",
        syscalls: &["fanotify_init", "fanotify_mark"],
        namespaces: Refused,
        egress: Refused,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "refused; tier namespaces also sets both quotas to 0",
        test: "`seccomp_programs` `denials_hold` (`fanotify_init`)",
    },
    HostPool {
        pool: "keys and keyrings (`kernel.keys.maxkeys`/`maxbytes`: per uid, in no namespace)",
        syscalls: &["add_key", "request_key", "keyctl"],
        namespaces: Refused,
        egress: Refused,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "refused",
        test: "`seccomp_programs` `denials_hold` (`keyctl`, `add_key`)",
    },
    HostPool {
        pool: "userfaultfd contexts (no count; a fault can stall a kernel thread)",
        syscalls: &["userfaultfd"],
        namespaces: Refused,
        egress: Refused,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "refused",
        test: "`seccomp_programs` `denials_hold` (`userfaultfd`)",
    },
    HostPool {
        pool: "perf ring buffers (`kernel.perf_event_mlock_kb`, per uid)",
        syscalls: &["perf_event_open"],
        namespaces: Refused,
        egress: Refused,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "refused",
        test: "`seccomp_programs` `denials_hold` (`perf_event_open`)",
    },
    HostPool {
        pool: "process and thread ids (`kernel.pid_max`, `kernel.threads-max`: one count for \
               the host; a PID namespace's pids take one at every level)",
        syscalls: &["clone", "fork", "vfork"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "`RLIMIT_NPROC` = `max_processes` (+ 1 for the init), counted per user namespace \
                and uid (64 by default); `clone3` is unlisted",
        test: "`fork_bomb_stops_at_max_processes`",
    },
    HostPool {
        pool: "open files (`fs.file-max`: one count for the host, which root may exceed)",
        syscalls: &[
            "openat",
            "open",
            "creat",
            "dup",
            "dup2",
            "dup3",
            "fcntl",
            "pipe2",
            "pipe",
            "socketpair",
            "memfd_create",
            "eventfd2",
            "eventfd",
            "signalfd4",
            "signalfd",
            "timerfd_create",
            "epoll_create1",
            "epoll_create",
            "recvmsg",
            "recvmmsg",
        ],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "`RLIMIT_NOFILE` = `open_files` per process, so `open_files` × `max_processes` \
                held (16 384 by default) plus those in flight (below)",
        test: "none fills it (`fs.file-max` is millions; the bound is the limits')",
    },
    HostPool {
        pool: "pidfds (open files)",
        syscalls: &["pidfd_open"],
        namespaces: Runs,
        egress: Runs,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "as open files; refused in tier landlock, where any host pid could be named",
        test: "`every_pool_is_held_as_its_entry_says` (tier landlock's refusal, in the tables \
               the filter is compiled from)",
    },
    HostPool {
        pool: "descriptors in flight (`SCM_RIGHTS`, counted per uid against its \
               `RLIMIT_NOFILE`)",
        syscalls: &["sendmsg", "sendmmsg"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "a root host's sandbox counts under its own uid; an unprivileged host's under \
                the caller's: up to `open_files` + 253 (Kernel quotas)",
        test: "none fills it",
    },
    HostPool {
        pool: "pipe buffers (`fs.pipe-user-pages-soft`, per uid)",
        syscalls: &["pipe2", "pipe", "fcntl"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "a root host's sandbox: its own uid's; an unprivileged host's: the caller's, \
                past which new pipes get 2 pages (Kernel quotas)",
        test: "`concurrent_sandboxes_keep_their_own_quotas` (root host)",
    },
    HostPool {
        pool: "epoll watches (`fs.epoll.max_user_watches`, per uid)",
        syscalls: &["epoll_ctl"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "a root host's sandbox: its own uid's; an unprivileged host's: the caller's \
                (Kernel quotas)",
        test: "none fills it (5.5 million watches take about 1 GiB of kernel memory)",
    },
    HostPool {
        pool: "AF_UNIX socket buffers (no count: each socket's queue is bounded by its send \
               buffer)",
        syscalls: &["socketpair", "sendto", "sendmsg", "sendmmsg", "setsockopt"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "`SO_SNDBUF` at most 2 × `net.core.wmem_max` per socket (more takes \
                `CAP_NET_ADMIN`), times the sockets open files allow",
        test: "none fills it",
    },
    HostPool {
        pool: "TCP memory (`net.ipv4.tcp_mem`: one count for the host) and ports (per network \
               namespace)",
        syscalls: &["socket"],
        namespaces: Refused,
        egress: Runs,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "only with an egress allowlist, in the sandbox's own network namespace (its own \
                ports), to the host's proxy alone, which caps its connections",
        test: "`sockets_denied_socketpair_allowed`; egress: none fills it",
    },
    HostPool {
        pool: "SysV IPC ids and POSIX message queues (`kernel.msgmni`, `shmmni`, `shmall`, \
               `sem`, `fs.mqueue.*`)",
        syscalls: &[
            "msgget",
            "msgsnd",
            "msgrcv",
            "msgctl",
            "semget",
            "semop",
            "semtimedop",
            "semctl",
            "shmget",
            "shmat",
            "shmdt",
            "shmctl",
            "mq_open",
            "mq_unlink",
            "mq_timedsend",
            "mq_timedreceive",
            "mq_notify",
            "mq_getsetattr",
        ],
        namespaces: Runs,
        egress: Runs,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "tier namespaces: its own IPC namespace's (freed with it), message queue bytes \
                by `RLIMIT_MSGQUEUE`, shared memory by the memory limit; refused in tier \
                landlock, where they would be the host's",
        test: "`breach_sysv_ipc`",
    },
    HostPool {
        pool: "locked memory (`RLIMIT_MEMLOCK`)",
        syscalls: &["mlock", "mlock2", "mlockall"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "8 MiB per process (Kernel quotas)",
        test: "none fills it",
    },
    HostPool {
        pool: "the kernel's internal tmpfs behind memfds (no size or inode limit of its own)",
        syscalls: &["memfd_create"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "the memory limit (`memory_bytes` at the scope `limit_memory` says) and \
                `RLIMIT_FSIZE` per file",
        test: "`limit_memory_memfd`",
    },
    HostPool {
        pool: "file locks and leases (no count since Linux 2.6; each is kernel memory of the \
               memory cgroup)",
        syscalls: &["flock", "fcntl"],
        namespaces: Runs,
        egress: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "open files; a lease needs a file the sandbox owns",
        test: "none fills it",
    },
];

/// Every other call the filters let run, in groups, each with the reason
/// it takes from no pool shared beyond the sandbox.
pub const NO_HOST_POOL: &[(&str, &[&str])] = &[
    (
        "its own process, credentials and limits",
        &[
            "execve",
            "execveat",
            "exit",
            "exit_group",
            "wait4",
            "waitid",
            "set_tid_address",
            "set_robust_list",
            "get_robust_list",
            "rseq",
            "restart_syscall",
            "getpid",
            "getppid",
            "gettid",
            "getpgid",
            "setpgid",
            "getsid",
            "setsid",
            "getpgrp",
            "arch_prctl",
            "personality",
            "prctl",
            "prlimit64",
            "getrlimit",
            "setrlimit",
            "getuid",
            "geteuid",
            "getgid",
            "getegid",
            "getresuid",
            "getresgid",
            "getgroups",
            "setuid",
            "setgid",
            "setreuid",
            "setregid",
            "setresuid",
            "setresgid",
            "setfsuid",
            "setfsgid",
            "setgroups",
            "capget",
            "capset",
            "umask",
            "uname",
            "sysinfo",
            "getrandom",
            "getcpu",
            "getrusage",
            "times",
            "riscv_hwprobe",
            "riscv_flush_icache",
        ],
    ),
    (
        "futexes and barriers: keyed by its own addresses, nothing counted",
        &[
            "futex",
            "futex_waitv",
            "futex_wake",
            "futex_wait",
            "futex_requeue",
            "membarrier",
        ],
    ),
    (
        "self-restriction: kernel memory of its own memory cgroup, descriptors as open files",
        &[
            "seccomp",
            "landlock_create_ruleset",
            "landlock_add_rule",
            "landlock_restrict_self",
        ],
    ),
    (
        "its own signal handling (a signal that is not queued takes nothing)",
        &[
            "rt_sigaction",
            "rt_sigprocmask",
            "rt_sigreturn",
            "rt_sigpending",
            "rt_sigsuspend",
            "rt_sigtimedwait",
            "sigaltstack",
            "pause",
            "alarm",
            "getitimer",
            "setitimer",
        ],
    ),
    (
        "its own memory: the memory limit",
        &[
            "brk",
            "mmap",
            "munmap",
            "mremap",
            "mprotect",
            "madvise",
            "msync",
            "mincore",
            "munlock",
            "munlockall",
            "pkey_alloc",
            "pkey_free",
            "pkey_mprotect",
            "map_shadow_stack",
            "mseal",
        ],
    ),
    (
        "I/O on descriptors it holds: disk by the disk and file-size limits",
        &[
            "read",
            "write",
            "readv",
            "writev",
            "pread64",
            "pwrite64",
            "preadv",
            "pwritev",
            "preadv2",
            "pwritev2",
            "lseek",
            "close",
            "close_range",
            "fsync",
            "fdatasync",
            "sync",
            "syncfs",
            "sync_file_range",
            "ftruncate",
            "fallocate",
            "fadvise64",
            "readahead",
            "copy_file_range",
            "sendfile",
            "splice",
            "tee",
            "vmsplice",
            "ioctl",
            "recvfrom",
            "connect",
            "shutdown",
            "getsockname",
            "getpeername",
            "getsockopt",
        ],
    ),
    (
        "paths: Landlock and the mounts decide which; disk by the disk limit",
        &[
            "newfstatat",
            "fstat",
            "stat",
            "lstat",
            "statx",
            "statfs",
            "fstatfs",
            "faccessat",
            "faccessat2",
            "access",
            "getcwd",
            "chdir",
            "fchdir",
            "getdents64",
            "getdents",
            "mkdirat",
            "mkdir",
            "rmdir",
            "unlinkat",
            "unlink",
            "renameat2",
            "renameat",
            "rename",
            "linkat",
            "link",
            "symlinkat",
            "symlink",
            "readlinkat",
            "readlink",
            "truncate",
            "mknodat",
            "mknod",
            "fchmod",
            "fchmodat",
            "fchmodat2",
            "chmod",
            "fchown",
            "fchownat",
            "chown",
            "lchown",
            "utimensat",
            "utime",
            "utimes",
            "futimesat",
            "getxattr",
            "lgetxattr",
            "fgetxattr",
            "getxattrat",
            "listxattr",
            "llistxattr",
            "flistxattr",
            "listxattrat",
            "setxattr",
            "lsetxattr",
            "fsetxattr",
            "setxattrat",
            "removexattr",
            "lremovexattr",
            "fremovexattr",
            "removexattrat",
            "inotify_rm_watch",
        ],
    ),
    (
        "waiting on descriptors it holds, and time",
        &[
            "epoll_pwait",
            "epoll_pwait2",
            "epoll_wait",
            "ppoll",
            "pselect6",
            "poll",
            "select",
            "timerfd_settime",
            "timerfd_gettime",
            "clock_gettime",
            "clock_getres",
            "clock_nanosleep",
            "nanosleep",
            "gettimeofday",
            "time",
            "timer_settime",
            "timer_gettime",
            "timer_getoverrun",
            "timer_delete",
        ],
    ),
    (
        "scheduling of itself (pid 0)",
        &[
            "sched_yield",
            "sched_getaffinity",
            "sched_setaffinity",
            "sched_getparam",
            "sched_setparam",
            "sched_getscheduler",
            "sched_setscheduler",
            "sched_getattr",
            "sched_setattr",
            "sched_get_priority_max",
            "sched_get_priority_min",
            "sched_rr_get_interval",
            "getpriority",
            "setpriority",
            "ioprio_get",
            "ioprio_set",
        ],
    ),
];

/// How the filter of each column holds `sys`, from its tables.
#[cfg(test)]
pub(crate) fn held_by(tables: &super::Tables, name: &str) -> Held {
    if tables.allowed.iter().any(|s| s.name() == name)
        || tables.checked.iter().any(|c| c.sys.name() == name)
    {
        Runs
    } else if tables.denied.iter().any(|s| s.name() == name) {
        Refused
    } else {
        Unlisted
    }
}

#[cfg(test)]
mod tests {
    use super::super::{landlock_tier, Tables};
    use super::*;

    /// Calls only x86_64 has (the generic table dropped them): elsewhere
    /// they are in no table, whatever an entry says.
    const X86_64_ONLY: &[&str] = &[
        "fork",
        "vfork",
        "open",
        "creat",
        "dup2",
        "pipe",
        "eventfd",
        "signalfd",
        "epoll_create",
        "epoll_wait",
        "inotify_init",
        "getpgrp",
        "arch_prctl",
        "stat",
        "lstat",
        "access",
        "readlink",
        "mkdir",
        "rmdir",
        "unlink",
        "rename",
        "link",
        "symlink",
        "chown",
        "lchown",
        "chmod",
        "mknod",
        "utime",
        "utimes",
        "futimesat",
        "getdents",
        "poll",
        "select",
        "alarm",
        "pause",
        "time",
    ];

    /// The field of [`HostPool`] that says how one filter holds a pool.
    type Column = fn(&HostPool) -> Held;

    /// Each column's filter, with the field of [`HostPool`] that says
    /// how it holds a pool.
    fn filters() -> Vec<(&'static str, Tables, Column)> {
        fn namespaces(p: &HostPool) -> Held {
            p.namespaces
        }
        fn egress(p: &HostPool) -> Held {
            p.egress
        }
        fn landlock(p: &HostPool) -> Held {
            p.landlock
        }
        fn caller_uid(p: &HostPool) -> Held {
            p.landlock_caller_uid
        }
        vec![
            (
                "namespaces",
                Tables::namespaces(false),
                namespaces as Column,
            ),
            (
                "namespaces with egress",
                Tables::namespaces(true),
                egress as Column,
            ),
            ("landlock", landlock_tier::tables(false), landlock as Column),
            (
                "landlock, caller's uid",
                landlock_tier::tables(true),
                caller_uid as Column,
            ),
        ]
    }

    fn on_this_arch(name: &str) -> bool {
        cfg!(target_arch = "x86_64") || !X86_64_ONLY.contains(&name)
    }

    #[test]
    fn every_pool_is_held_as_its_entry_says() {
        let mut wrong = Vec::new();
        for (what, tables, column) in filters() {
            for p in HOST_POOLS {
                for name in p.syscalls.iter().filter(|n| on_this_arch(n)) {
                    let held = held_by(&tables, name);
                    if held != column(p) {
                        wrong.push(format!(
                            "{name} ({}): {what} {held:?}, the inventory says {:?}",
                            p.pool,
                            column(p)
                        ));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn every_call_a_filter_lets_run_is_in_the_inventory() {
        let listed = |name: &str| {
            HOST_POOLS.iter().any(|p| p.syscalls.contains(&name))
                || NO_HOST_POOL.iter().any(|(_, n)| n.contains(&name))
        };
        let mut missing = std::collections::BTreeSet::new();
        for (what, tables, _) in filters() {
            let runs = tables
                .allowed
                .iter()
                .copied()
                .chain(tables.checked.iter().map(|c| c.sys));
            for s in runs.filter(|s| !listed(s.name())) {
                missing.insert(format!("{} ({what})", s.name()));
            }
        }
        assert!(
            missing.is_empty(),
            "calls a filter lets run that the inventory (pools.rs) does not classify: {missing:?}"
        );
    }

    #[test]
    fn the_inventory_lists_no_call_twice_and_none_that_no_filter_runs() {
        let mut seen = std::collections::BTreeSet::new();
        let mut wrong = Vec::new();
        let all = filters();
        for (why, names) in NO_HOST_POOL {
            for name in *names {
                if !seen.insert(*name) {
                    wrong.push(format!("{name} is listed twice"));
                }
                if HOST_POOLS.iter().any(|p| p.syscalls.contains(name)) {
                    wrong.push(format!("{name} is in a pool and in `{why}`"));
                }
                let riscv = name.starts_with("riscv_");
                if on_this_arch(name)
                    && !riscv
                    && all.iter().all(|(_, t, _)| held_by(t, name) != Held::Runs)
                {
                    wrong.push(format!("{name} (`{why}`) runs under no filter"));
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// The test each entry names exists (a scenario's or a unit test's
    /// `fn`, a `seccomp_programs` case, or a test binary).
    #[test]
    fn every_named_test_exists() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = root.join("tests");
        let mut sources = String::new();
        for d in [
            dir.clone(),
            dir.join("confinement"),
            root.join("src/linux/seccomp"),
        ] {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                if e.path().extension() == Some(std::ffi::OsStr::new("rs")) {
                    sources.push_str(&std::fs::read_to_string(e.path()).unwrap());
                }
            }
        }
        for p in HOST_POOLS {
            for (i, word) in p.test.split('`').enumerate() {
                if i % 2 == 0 || !word.chars().all(|c| c == '_' || c.is_ascii_lowercase()) {
                    continue;
                }
                let found = sources.contains(&format!("fn {word}("))
                    || sources.contains(&format!("\"{word}\""))
                    || dir.join(format!("{word}.rs")).exists();
                assert!(found, "{}: no test `{word}` in tests/", p.pool);
            }
        }
    }
}
