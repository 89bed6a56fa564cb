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
    /// They run, but refused (`EPERM`) with the flag or command that
    /// takes from the pool (`POOL_FLAGS`, `FCNTL_ALLOWED` in `rules.rs`).
    FlagRefused,
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
    /// Tier namespaces with `Network::Namespace` (TCP servers too).
    pub own_network: Held,
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
/// pipe buffers); its entries must then agree on how each filter holds it,
/// except that a call refused only with one pool's flag runs for the
/// others.
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
        own_network: Unlisted,
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
        own_network: Refused,
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
        own_network: Runs,
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
        own_network: Runs,
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
        own_network: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "tier namespaces: 8192 in its own user namespace; tier landlock: its own uid's \
                (root host), or none to add to (the caller's uid: no instance)",
        test: "`filled_pools_leave_the_host_its_share` (`inotify-watches`: 8192 then `ENOSPC` in \
               tier namespaces; the uid's own limit, then `ENOSPC`, in tier landlock on a root \
               host)",
    },
    HostPool {
        pool: "fanotify groups and marks (per user namespace and uid)",
        syscalls: &["fanotify_init", "fanotify_mark"],
        namespaces: Refused,
        egress: Refused,
        own_network: Refused,
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
        own_network: Refused,
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
        own_network: Refused,
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
        own_network: Refused,
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
        own_network: Runs,
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
        own_network: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "`RLIMIT_NOFILE` = `open_files` per process, so `open_files` × `max_processes` \
                held (16 384 by default) plus those in flight (below)",
        test: "`filled_pools_leave_the_host_its_share` (`open-files`: `EMFILE` at the open-files limit; `fs.file-max` is millions)",
    },
    HostPool {
        pool: "pidfds (open files)",
        syscalls: &["pidfd_open"],
        namespaces: Runs,
        egress: Runs,
        own_network: Runs,
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
        own_network: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "a root host's sandbox counts under its own uid; an unprivileged host's under \
                the caller's: up to `open_files` + 253 (Kernel quotas), **so a second sandbox \
                of an unprivileged host is refused while one holds them**",
        test: "`filled_pools_leave_the_host_its_share` (`fds-in-flight`: `ETOOMANYREFS` at 506)",
    },
    HostPool {
        pool: "pipe buffers (`fs.pipe-user-pages-soft`, per uid)",
        syscalls: &["pipe2", "pipe", "fcntl"],
        namespaces: Runs,
        egress: Runs,
        own_network: Runs,
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
        own_network: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "a root host's sandbox: its own uid's count, each watch memory of its memory \
                cgroup; an unprivileged host's: **the caller's count**, which one process can \
                fill alone (a watch is kept per file and fd number, and closing a dup keeps \
                it), so the caller's own programs may then get `ENOSPC` from `epoll_ctl`",
        test: "`filled_pools_leave_the_host_its_share` (`epoll-watches`: killed at a 32 MiB \
               memory limit on a root host; as another user, with the caller's count filled \
               by the host but for 100 000, the sandbox takes those and gets `ENOSPC`, and so \
               do the host's own `epoll_ctl` and its next spawn until the sandbox ends)",
    },
    HostPool {
        pool: "AF_UNIX socket buffers (no count: each socket's queue is bounded by its send \
               buffer)",
        syscalls: &["socketpair", "sendto", "sendmsg", "sendmmsg", "setsockopt"],
        namespaces: Runs,
        egress: Runs,
        own_network: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "charged to the sandbox's memory cgroup where it has one (a root host: the fill \
                is killed at the memory limit); without one, `SO_SNDBUF` at most 2 × \
                `net.core.wmem_max` per socket (more takes `CAP_NET_ADMIN`), times the sockets \
                open files allow",
        test: "`filled_pools_leave_the_host_its_share` (`unix-buffers`)",
    },
    HostPool {
        pool: "TCP memory (`net.ipv4.tcp_mem`: one count for the host) and ports (per network \
               namespace)",
        syscalls: &["socket"],
        namespaces: Refused,
        egress: Runs,
        own_network: Runs,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "only with an egress allowlist or `Network::Namespace`, in a network namespace \
                that is not the host's (its own ports). With an allowlist, to the host's proxy \
                alone: at most `max_open` (32) tunnels, each holding the sandbox's own socket \
                (its namespace's `tcp_rmem`/`tcp_wmem`, or up to twice \
                `net.core.rmem_max`/`wmem_max` by `setsockopt`) and the proxy's two, fixed at \
                `SOCKET_BUFFER` (2 MiB) per direction, so no autotuning grows them. With \
                `Network::Namespace` (a pod's joined network namespace only; refused without \
                a cgroup that bounds TCP): the sockets it makes or accepts by the sandbox's \
                cgroup, 64 MiB of TCP buffers on v1 (`memory.kmem.tcp.limit_in_bytes`), its \
                `memory.max` on v2. Not bounded by Cordon: connections its listeners have not \
                accepted yet, which the kernel charges to no cgroup (it charges a socket when \
                it is accepted): at most the pod's `net.core.somaxconn` per listener, each \
                holding at most its receive buffer, the listeners bounded by the open-file \
                limits only. As under any runtime in that pod; set the pod's `somaxconn` and \
                `tcp_rmem` low where that matters",
        test: "`sockets_denied_socketpair_allowed`; egress: the egress crate's \
               `tunnels_hold_the_tcp_pool_to_the_proxys_fixed_buffers` (32 tunnels filled \
               both ways: no proxy socket past 2 MiB one way); own network: the OCI \
               runtime's `a_pods_tcp_buffers_stay_in_the_containers_share`",
    },
    HostPool {
        pool: "TCP listening sockets and their accept queues (ports per network namespace; an \
               accepted connection's buffers are TCP memory, above)",
        syscalls: &["bind", "listen", "accept", "accept4"],
        namespaces: Unlisted,
        egress: Unlisted,
        own_network: Runs,
        landlock: Unlisted,
        landlock_caller_uid: Unlisted,
        bound: "only with `Network::Namespace`, in a pod's network namespace, never the \
                host's: its ports are that namespace's, a backlog is capped by its \
                `net.core.somaxconn`, each accepted socket is an open file (the sandbox's \
                `RLIMIT_NOFILE`) holding TCP memory, and a connection not yet accepted holds \
                TCP memory no cgroup counts (above); `TCP_ULP` is refused on every socket",
        test: "`own_network_is_refused_without_a_joined_namespace`; the OCI runtime's \
               `a_pods_tcp_buffers_stay_in_the_containers_share`",
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
        own_network: Runs,
        landlock: Refused,
        landlock_caller_uid: Refused,
        bound: "tier namespaces: its own IPC namespace's (freed with it), message queue bytes \
                by `RLIMIT_MSGQUEUE` (Landlock refuses opening a queue, `EACCES`, but not \
                making one, which the rlimit counts), shared memory by the memory limit; \
                refused in tier landlock, where they would be the host's (and would outlive \
                the sandbox)",
        test: "`breach_sysv_ipc`; `filled_pools_leave_the_host_its_share` (`mq-bytes`: \
               262 080 bytes in 7 queues, then `EMFILE`, as root and as another user, whose \
               own queue still fits; the host finds none of them in its IPC namespace; \
               without the rlimit, the caller's whole count)",
    },
    HostPool {
        pool: "locked memory (`RLIMIT_MEMLOCK`)",
        syscalls: &["mlock", "mlock2", "mlockall"],
        namespaces: Runs,
        egress: Runs,
        own_network: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "8 MiB per process (Kernel quotas)",
        test: "`filled_pools_leave_the_host_its_share` (`locked-memory`: `ENOMEM` at 8 MiB)",
    },
    HostPool {
        pool: "the kernel's internal tmpfs behind memfds (no size or inode limit of its own)",
        syscalls: &["memfd_create"],
        namespaces: Runs,
        egress: Runs,
        own_network: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "the memory limit (`memory_bytes` at the scope `limit_memory` says) and \
                `RLIMIT_FSIZE` per file",
        test: "`limit_memory_memfd`",
    },
    HostPool {
        pool: "file locks (`flock`, and `fcntl`'s `F_SETLK`/`F_OFD_SETLK`: no count since \
               Linux 2.6; each is kernel memory of the memory cgroup)",
        syscalls: &["flock"],
        namespaces: Runs,
        egress: Runs,
        own_network: Runs,
        landlock: Runs,
        landlock_caller_uid: Runs,
        bound: "each lock (one per open file for `flock`, one per byte range for `fcntl`) is \
                kernel memory the memory cgroup charges (a root host); without one, the kernel \
                walks a file's whole list on every lock, so ranges pile up slowly (5 000 on one \
                file take a moment; 100 000 did not finish in 60 s). Advisory: a host program \
                that locks a file granted to a sandbox waits for the sandbox's lock, as for \
                any other process's",
        test: "`filled_pools_leave_the_host_its_share` (`file-locks`: 5 000 ranges, no count \
               stops them; the host and a second sandbox still lock)",
    },
    HostPool {
        pool: "file leases and dnotify (`fcntl`'s `F_SETLEASE`, `F_SETDELEG`: a host process \
               that opens the file, or changes the directory, waits up to \
               `fs.lease-break-time`; `F_NOTIFY`: watches no quota counts)",
        syscalls: &["fcntl"],
        namespaces: FlagRefused,
        egress: FlagRefused,
        own_network: FlagRefused,
        landlock: FlagRefused,
        landlock_caller_uid: FlagRefused,
        bound: "only the commands programs use run (`FCNTL_ALLOWED` in `rules.rs`: locks, \
                flags, ownership, pipe sizes, seals); every other, and any a later kernel adds, \
                is refused",
        test: "`seccomp_programs` `denials_hold` (`fcntl_setlease`, `fcntl_notify`)",
    },
    HostPool {
        pool: "interrupts of the host's CPUs and the expedited-membarrier mutex (one for the \
               host since Linux 6.7)",
        syscalls: &["membarrier"],
        namespaces: FlagRefused,
        egress: FlagRefused,
        own_network: FlagRefused,
        landlock: FlagRefused,
        landlock_caller_uid: FlagRefused,
        bound: "the global commands, which interrupt every CPU running a registered host \
                process, refused (`MEMBARRIER_ALLOWED` in `rules.rs`); the private ones \
                interrupt only the sandbox's own CPUs, each holding the host's one mutex while \
                it does: a loop of them delays other processes' expedited barriers by that \
                long (microseconds) each",
        test: "`seccomp_programs` `denials_hold` (`membarrier_global`, `membarrier_private`)",
    },
    HostPool {
        pool: "huge pages (`vm.nr_hugepages`: one pool for the host; not charged to a v1 \
               memory cgroup)",
        syscalls: &["mmap", "memfd_create", "shmget"],
        namespaces: FlagRefused,
        egress: FlagRefused,
        own_network: FlagRefused,
        landlock: FlagRefused,
        landlock_caller_uid: FlagRefused,
        bound: "`MAP_HUGETLB`, `MFD_HUGETLB` and `SHM_HUGETLB` refused (`shmget` is refused \
                whole in tier landlock); without them, `mmap` takes the sandbox's own memory, \
                under the memory limit; a hugetlbfs mount granted to a sandbox would still \
                reach the pool: grant none",
        test: "`seccomp_programs` `denials_hold` (`mmap_hugetlb`, `memfd_hugetlb`, \
               `shmget_hugetlb`)",
    },
];

mod none;
pub use none::NO_HOST_POOL;

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
mod tests;
