//! The argument checks: conditions on a syscall's arguments, and which
//! syscalls are allowed only when one of their rules matches.

#![allow(clippy::unnecessary_cast)]

use super::*;

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
    pub(super) fn eq(arg: u8, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Low32,
            op: Op::Eq(value),
        }
    }

    /// 32-bit `arg != value`.
    pub(super) fn ne(arg: u8, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Low32,
            op: Op::Ne(value),
        }
    }

    /// 32-bit `arg & mask == value`.
    pub(super) fn masked_eq(arg: u8, mask: u64, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Low32,
            op: Op::MaskedEq { mask, value },
        }
    }

    /// 64-bit `arg == value`.
    pub(super) fn eq64(arg: u8, value: u64) -> Cond {
        Cond {
            arg,
            width: Width::Full64,
            op: Op::Eq(value),
        }
    }

    /// 64-bit `arg != value`.
    pub(super) fn ne64(arg: u8, value: u64) -> Cond {
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
pub(super) fn one_of(arg: u8, values: &[u64]) -> (Vec<Rule>, Vec<Rule>) {
    let is = values.iter().map(|v| vec![Cond::eq(arg, *v)]).collect();
    let none = values.iter().map(|v| Cond::ne(arg, *v)).collect();
    (is, vec![none])
}

/// `fallocate`'s mode bit that allocates without growing the size.
pub(crate) const FALLOC_FL_KEEP_SIZE: u64 = 0x01;

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

    // fallocate: not FALLOC_FL_KEEP_SIZE (mode is argument 1). Blocks
    // allocated past the file's size are disk used that RLIMIT_FSIZE, the
    // per-file `disk_bytes` of a scratch on the host's disk, never sees:
    // it is checked only when the size grows. (Punching a hole needs
    // KEEP_SIZE too.)
    v.push(Checked {
        sys: sys![SYS_fallocate][0],
        allow: vec![vec![Cond::masked_eq(1, FALLOC_FL_KEEP_SIZE, 0)]],
        deny: vec![vec![Cond::masked_eq(
            1,
            FALLOC_FL_KEEP_SIZE,
            FALLOC_FL_KEEP_SIZE,
        )]],
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

    v.extend(pool_checks());
    v
}

/// The flags that take from a pool the whole host shares, each refused
/// (`EPERM`) on the call that carries it (the inventory's `FlagRefused`):
/// `MAP_HUGETLB` (`mmap`'s flags, argument 3), `MFD_HUGETLB`
/// (`memfd_create`'s, argument 1) and `SHM_HUGETLB` (`shmget`'s, argument
/// 2) take from the host's huge page pool (`vm.nr_hugepages`), which no
/// namespace or uid divides and a v1 memory cgroup does not charge;
/// `F_SETLEASE` (`fcntl`'s command, argument 1; see [`FCNTL_ALLOWED`])
/// makes every host process that opens the file for writing wait for the
/// lease holder (up to `fs.lease-break-time`). Each call runs without its
/// flag.
pub(crate) const POOL_FLAGS: [(&str, u8, u64); 3] = [
    ("mmap", 3, libc::MAP_HUGETLB as u64),
    ("memfd_create", 1, libc::MFD_HUGETLB as u64),
    ("shmget", 2, libc::SHM_HUGETLB as u64),
];

/// The `fcntl` commands that run; every other is refused (`EPERM`). A
/// list of what programs use rather than a list of refusals, so a command
/// a later kernel adds is refused until it is looked at: `F_SETLEASE`
/// (1024) and `F_SETDELEG` (Linux 6.19: a lease on a file or a directory)
/// stall host processes, `F_NOTIFY` (1026, dnotify) adds watches no quota
/// counts, `F_CANCELLK` is the kernel's own.
pub(crate) const FCNTL_ALLOWED: [(u64, &str); 30] = [
    (0, "F_DUPFD"),
    (1, "F_GETFD"),
    (2, "F_SETFD"),
    (3, "F_GETFL"),
    (4, "F_SETFL"),
    (5, "F_GETLK"),
    (6, "F_SETLK"),
    (7, "F_SETLKW"),
    (8, "F_SETOWN"),
    (9, "F_GETOWN"),
    (10, "F_SETSIG"),
    (11, "F_GETSIG"),
    (15, "F_SETOWN_EX"),
    (16, "F_GETOWN_EX"),
    (17, "F_GETOWNER_UIDS"),
    (36, "F_OFD_GETLK"),
    (37, "F_OFD_SETLK"),
    (38, "F_OFD_SETLKW"),
    (1025, "F_GETLEASE"),
    (1027, "F_DUPFD_QUERY"),
    (1028, "F_CREATED_QUERY"),
    (1030, "F_DUPFD_CLOEXEC"),
    (1031, "F_SETPIPE_SZ"),
    (1032, "F_GETPIPE_SZ"),
    (1033, "F_ADD_SEALS"),
    (1034, "F_GET_SEALS"),
    (1035, "F_GET_RW_HINT"),
    (1036, "F_SET_RW_HINT"),
    (1037, "F_GET_FILE_RW_HINT"),
    (1038, "F_SET_FILE_RW_HINT"),
];

/// The `membarrier` commands that run: `QUERY` and the private ones,
/// which interrupt only the CPUs running the caller's own threads.
/// Refused: `GLOBAL` (a host-wide RCU grace period per call) and
/// `GLOBAL_EXPEDITED`/`REGISTER_GLOBAL_EXPEDITED`, which interrupt every
/// CPU running a registered process of the host's.
pub(crate) const MEMBARRIER_ALLOWED: [(u64, &str); 8] = [
    (0, "MEMBARRIER_CMD_QUERY"),
    (1 << 3, "MEMBARRIER_CMD_PRIVATE_EXPEDITED"),
    (1 << 4, "MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED"),
    (1 << 5, "MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE"),
    (
        1 << 6,
        "MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE",
    ),
    (1 << 7, "MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ"),
    (1 << 8, "MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ"),
    (1 << 9, "MEMBARRIER_CMD_GET_REGISTRATIONS"),
];

/// The checks of [`POOL_FLAGS`], of `fcntl` ([`FCNTL_ALLOWED`]) and of
/// `membarrier` ([`MEMBARRIER_ALLOWED`]). Part of [`checked`]; `allowed`
/// leaves these calls out.
pub(crate) fn pool_checks() -> Vec<Checked> {
    let calls = sys![
        SYS_mmap,
        SYS_memfd_create,
        SYS_shmget,
        SYS_fcntl,
        SYS_membarrier
    ];
    let find = |name: &str| {
        *calls
            .iter()
            .find(|s| s.name() == name)
            .expect("listed above")
    };
    let mut v: Vec<Checked> = POOL_FLAGS
        .iter()
        .map(|(name, arg, flag)| Checked {
            sys: find(name),
            allow: vec![vec![Cond::masked_eq(*arg, *flag, 0)]],
            deny: vec![vec![Cond::masked_eq(*arg, *flag, *flag)]],
        })
        .collect();
    for (name, arg, list) in [
        ("fcntl", 1, &FCNTL_ALLOWED[..]),
        ("membarrier", 0, &MEMBARRIER_ALLOWED[..]),
    ] {
        let cmds: Vec<u64> = list.iter().map(|(c, _)| *c).collect();
        let (is, none) = one_of(arg, &cmds);
        v.push(Checked {
            sys: find(name),
            allow: is,
            deny: none,
        });
    }
    v
}

/// `socket` in a sandbox with an egress allowlist: `AF_INET` or `AF_INET6`,
/// `SOCK_STREAM` (with any of `SOCK_CLOEXEC`/`SOCK_NONBLOCK`), protocol 0
/// or `IPPROTO_TCP`. Everything else (UDP and so DNS of its own, raw,
/// packet, netlink, UNIX) is refused with `EPERM`.
pub(crate) fn egress_socket() -> Checked {
    let domains = [libc::AF_INET as u64, libc::AF_INET6 as u64];
    let base = libc::SOCK_STREAM as u64;
    let types = [
        base,
        base | libc::SOCK_CLOEXEC as u64,
        base | libc::SOCK_NONBLOCK as u64,
        base | (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64,
    ];
    let protocols = [0, libc::IPPROTO_TCP as u64];
    let mut allow = Vec::new();
    for d in domains {
        for t in types {
            for p in protocols {
                allow.push(vec![Cond::eq(0, d), Cond::eq(1, t), Cond::eq(2, p)]);
            }
        }
    }
    Checked {
        sys: sys![SYS_socket][0],
        allow,
        deny: vec![
            domains.iter().map(|d| Cond::ne(0, *d)).collect(),
            types.iter().map(|t| Cond::ne(1, *t)).collect(),
            protocols.iter().map(|p| Cond::ne(2, *p)).collect(),
        ],
    }
}

/// `MSG_FASTOPEN`: a `sendto`/`sendmsg` on an unconnected TCP socket that
/// connects first. Landlock's connect-port rule is not consulted on that
/// path (landlock-lsm/linux#41), so with an egress allowlist (the only
/// mode with TCP sockets) it is refused.
pub(crate) const MSG_FASTOPEN: u64 = 0x2000_0000;

/// `sendto`, `sendmsg` and `sendmmsg` in a sandbox with an egress
/// allowlist: allowed unless their flags have [`MSG_FASTOPEN`].
pub(crate) fn egress_send() -> Vec<Checked> {
    [
        (sys![SYS_sendto][0], 3),
        (sys![SYS_sendmsg][0], 2),
        (sys![SYS_sendmmsg][0], 3),
    ]
    .into_iter()
    .map(|(sys, arg)| Checked {
        sys,
        allow: vec![vec![Cond::masked_eq(arg, MSG_FASTOPEN, 0)]],
        deny: vec![vec![Cond::masked_eq(arg, MSG_FASTOPEN, MSG_FASTOPEN)]],
    })
    .collect()
}
