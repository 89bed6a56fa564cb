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
//! [`deny_list_programs`] is the deny-list pair (a deny-list and
//! `clone3` → `ENOSYS`), kept for `Layers::BASE` and compiled by the
//! same code. README.md gives the reason behind every rule.

// `libc`'s syscall-number and ioctl types differ between targets and C
// libraries (`c_long`, `c_int`, `c_ulong`); the casts keep this portable.
#![allow(clippy::unnecessary_cast)]

use std::collections::BTreeMap;

/// One compiled filter, ready for `seccomp(SECCOMP_SET_MODE_FILTER)`.
pub(crate) type Program = Vec<libc::sock_filter>;

/// The most instructions one filter may have (`BPF_MAXINSNS`).
pub(crate) const MAX_INSNS: usize = 4096;
/// The most instructions the filters of one process may have together,
/// each counted with 4 more (the kernel's `MAX_INSNS_PER_PATH`).
pub(crate) const MAX_INSNS_PER_PROCESS: usize = 32768;

/// The filters of a sandbox with every layer, in install order: a single
/// program (the allowlist with its explicit `EPERM` denials and argument
/// checks). It is meant for `seccomp(SECCOMP_SET_MODE_FILTER, 0, &prog)`;
/// callers install whatever the `Vec` holds, in order.
pub(crate) fn programs() -> Result<Vec<Program>, String> {
    Ok(vec![full_filter(false)?])
}

/// [`programs`] for a sandbox with an egress allowlist (its own network
/// namespace, whose only way out is the host's proxy): `socket` is allowed
/// for TCP over IPv4 and IPv6 only ([`egress_socket`]), and `connect` is
/// allowed; `sendto`/`sendmsg`/`sendmmsg` with `MSG_FASTOPEN` (a connect
/// Landlock does not see) are refused ([`egress_send`]). UDP, raw,
/// packet, netlink and UNIX sockets stay refused.
pub(crate) fn egress_programs() -> Result<Vec<Program>, String> {
    Ok(vec![full_filter(true)?])
}

/// [`egress_programs`] for a sandbox whose network is a namespace of its
/// own (`Network::Namespace`): TCP sockets may also `bind`, `listen` and
/// `accept` ([`Tables::own_network`]). UDP, raw, packet, netlink and UNIX
/// sockets stay refused.
pub(crate) fn own_network_programs() -> Result<Vec<Program>, String> {
    Ok(vec![Tables::own_network().compile("sandbox")?])
}

/// The deny-list filters, in install order: the deny-list (default
/// allow, `setsid`/`setpgid` still refused) and `clone3` → `ENOSYS`. Used
/// by `Layers::BASE` only.
pub(crate) fn deny_list_programs() -> Result<Vec<Program>, String> {
    Ok(vec![deny_list()?, clone3()?])
}

// First: its `sys!` macro is used by the modules after it.
#[macro_use]
mod tables;
mod asm;
mod codegen;
pub(crate) mod emulate;
pub(crate) mod landlock_tier;
pub(crate) mod pools;
mod rules;
pub(crate) mod stacked;

pub(crate) use codegen::*;
// The tables, rules and constants are also what the tests check against.
pub(crate) use rules::*;
pub(crate) use tables::*;

// The filters: the full allowlist and the deny-list pair.

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

/// A filter's tables: the syscalls it allows whatever their arguments,
/// the ones it refuses with `EPERM`, and the argument-checked ones; every
/// other number gets `ENOSYS`. No number is in two of them (compiling
/// refuses a duplicate).
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    /// Allowed, whatever the arguments.
    pub(crate) allowed: Vec<Sys>,
    /// Refused with `EPERM`, whatever the arguments.
    pub(crate) denied: Vec<Sys>,
    /// Allowed when one of their rules matches, else `EPERM`.
    pub(crate) checked: Vec<Checked>,
}

impl Tables {
    /// Tier namespaces with every layer: [`allowed`], [`denied`],
    /// [`checked`]. `egress`: TCP sockets and `connect` too, the sends
    /// checked for Fast Open ([`egress_programs`]).
    pub(crate) fn namespaces(egress: bool) -> Tables {
        let socket = sys![SYS_socket][0];
        let mut checked = checked();
        let mut allowed = allowed();
        let mut denied = denied();
        if egress {
            checked.push(egress_socket());
            checked.extend(egress_send());
            // The sends are argument-checked instead.
            allowed.retain(|s| !checked.iter().any(|c| c.sys.nr == s.nr));
            allowed.push(sys![SYS_connect][0]);
            denied.retain(|s| s.nr != socket.nr);
        }
        Tables {
            allowed,
            denied,
            checked,
        }
    }

    /// [`Tables::namespaces`] with egress, and TCP servers too: `bind`,
    /// `listen`, `accept`, `accept4` (`Network::Namespace`, whose network
    /// namespace is never the host's).
    pub(crate) fn own_network() -> Tables {
        let mut t = Tables::namespaces(true);
        t.allowed
            .extend(sys![SYS_bind, SYS_listen, SYS_accept, SYS_accept4]);
        t
    }

    /// Moves `sys` from wherever it was listed to the refused ones.
    pub(crate) fn deny(&mut self, sys: Sys) {
        self.allowed.retain(|s| s.nr != sys.nr);
        self.checked.retain(|c| c.sys.nr != sys.nr);
        self.denied.retain(|s| s.nr != sys.nr);
        self.denied.push(sys);
    }

    /// Makes `c` the rule of its syscall, wherever it was listed.
    pub(crate) fn check(&mut self, c: Checked) {
        self.allowed.retain(|s| s.nr != c.sys.nr);
        self.denied.retain(|s| s.nr != c.sys.nr);
        self.checked.retain(|x| x.sys.nr != c.sys.nr);
        self.checked.push(c);
    }

    /// The filter: allowed → `ALLOW`, denied → `EPERM`, checked → `ALLOW`
    /// when an allow rule matches, else `EPERM`; everything else →
    /// `ENOSYS`; x32 guard on x86_64.
    pub(crate) fn compile(&self, what: &'static str) -> Result<Program, String> {
        let mut spec = Spec::new(what, RET_ENOSYS, true);
        for s in &self.allowed {
            spec.insert(*s, Verdict::Ret(RET_ALLOW))?;
        }
        for s in &self.denied {
            spec.insert(*s, Verdict::Ret(RET_EPERM))?;
        }
        for c in &self.checked {
            spec.insert(
                c.sys,
                Verdict::Check {
                    rules: c.allow.clone(),
                    matched: RET_ALLOW,
                    otherwise: RET_EPERM,
                },
            )?;
        }
        compile(&spec)
    }
}

/// The filter of a sandbox with every layer in tier namespaces.
fn full_filter(egress: bool) -> Result<Program, String> {
    Tables::namespaces(egress).compile("sandbox")
}

/// Which filter a sandbox installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Filter {
    /// A layer set without the allowlist (`Layers::BASE`): the deny-list
    /// pair ([`deny_list_programs`]).
    DenyList,
    /// Tier namespaces: the allowlist.
    Namespaces {
        /// The variant of an egress allowlist ([`egress_programs`]).
        egress: bool,
    },
    /// Tier namespaces with a network namespace of the sandbox's own
    /// (`Network::Namespace`, [`own_network_programs`]).
    OwnNetwork,
    /// Tier landlock ([`landlock_tier`]): the allowlist, with refusals
    /// for what the missing namespaces would have contained.
    Landlock {
        /// The sandbox runs as the caller's own uid (an unprivileged
        /// host), so every file of the caller is its own: path-based
        /// metadata writes, which Landlock does not govern, are refused.
        caller_uid: bool,
    },
}

impl Filter {
    /// Every filter, for the once-per-process compilation.
    pub(crate) const ALL: [Filter; 6] = [
        Filter::DenyList,
        Filter::Namespaces { egress: false },
        Filter::Namespaces { egress: true },
        Filter::OwnNetwork,
        Filter::Landlock { caller_uid: false },
        Filter::Landlock { caller_uid: true },
    ];

    /// Its programs, in install order.
    pub(crate) fn programs(self) -> Result<Vec<Program>, String> {
        match self {
            Filter::DenyList => deny_list_programs(),
            Filter::Namespaces { egress: false } => programs(),
            Filter::Namespaces { egress: true } => egress_programs(),
            Filter::OwnNetwork => own_network_programs(),
            Filter::Landlock { caller_uid } => landlock_tier::programs(caller_uid),
        }
    }

    /// What it is, for `host_facts()["seccomp"]`.
    pub(crate) fn description(self) -> &'static str {
        match self {
            Filter::DenyList => {
                "deny-list only (listed syscalls return EPERM, clone3 returns ENOSYS)"
            }
            Filter::Namespaces { .. } | Filter::OwnNetwork => {
                "one filter: allowlist (unlisted syscalls return ENOSYS), listed dangerous \
                 syscalls return EPERM, with argument checks (refused arguments return EPERM) \
                 on clone, socketpair, ioctl, personality, prctl, the scheduler setters, \
                 prlimit64 and every mode-setting call (no setuid/setgid bits)"
            }
            Filter::Landlock { caller_uid: false } => landlock_tier::DESCRIPTION,
            Filter::Landlock { caller_uid: true } => landlock_tier::DESCRIPTION_CALLER_UID,
        }
    }
}

// ------------------------------------------------ the deny-list filters

/// The deny-list, refused with `EPERM` (default allow).
/// Unchanged, `setsid` and `setpgid` included: `Layers::BASE` has no PID
/// namespace to contain a new session.
pub(crate) fn deny_listed_syscalls() -> Vec<(libc::c_long, &'static str)> {
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

/// The deny-list filter (listed syscalls → `EPERM`, default
/// allow), with the x32 guard on x86_64.
fn deny_list() -> Result<Program, String> {
    let mut spec = Spec::new("deny-list", RET_ALLOW, true);
    for (nr, name) in deny_listed_syscalls() {
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

/// The deny-list pair's `clone3` → `ENOSYS` filter (no x32 guard: the deny-list
/// installed with it has one, and the kernel runs both).
/// Stacked after the filter of a sandbox that enters a running container:
/// `setsid` and `setpgid` refused (`EPERM`). Its init is a subreaper that
/// ends the sandbox by its process group, as tier landlock's is, and a
/// program that left the group would outlive it in the container.
pub(crate) fn same_group() -> Result<Program, String> {
    let mut spec = Spec::new("exec's process group", RET_ALLOW, false);
    for s in sys![SYS_setsid, SYS_setpgid] {
        spec.insert(s, Verdict::Ret(RET_EPERM))?;
    }
    compile(&spec)
}

/// Stacked after the filter of `Network::Namespace`: `setsockopt` of
/// `TCP_ULP` (an upper-layer protocol such as kTLS on a TCP socket)
/// refused (`EPERM`).
pub(crate) fn no_tcp_ulp() -> Result<Program, String> {
    const TCP_ULP: u64 = 31;
    let mut spec = Spec::new("no TCP_ULP", RET_ALLOW, false);
    spec.insert(
        sys![SYS_setsockopt][0],
        Verdict::Check {
            rules: vec![
                vec![Cond::ne(1, libc::IPPROTO_TCP as u64)],
                vec![Cond::ne(2, TCP_ULP)],
            ],
            matched: RET_ALLOW,
            otherwise: RET_EPERM,
        },
    )?;
    compile(&spec)
}

fn clone3() -> Result<Program, String> {
    let mut spec = Spec::new("deny-list clone3", RET_ALLOW, false);
    spec.insert(sys![SYS_clone3][0], Verdict::Ret(RET_ENOSYS))?;
    compile(&spec)
}

#[cfg(test)]
mod tests;

/// Installs `programs` in order (`SECCOMP_SET_MODE_FILTER`). Last of the
/// confinement, so nothing before it is itself filtered; the init, made
/// before, runs none. Async-signal-safe.
pub(crate) fn install(programs: &[Program]) -> std::io::Result<()> {
    for prog in programs {
        install_one(prog, 0)?;
    }
    Ok(())
}

/// Installs one program with `SECCOMP_FILTER_FLAG_*` `flags`; returns
/// what the kernel does (a listener's fd with `NEW_LISTENER`).
/// Async-signal-safe.
pub(crate) fn install_one(prog: &Program, flags: libc::c_ulong) -> std::io::Result<libc::c_long> {
    // The kernel's own bound (BPF_MAXINSNS); checked here too so that the
    // length below is never truncated.
    if prog.len() > MAX_INSNS {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let fprog = libc::sock_fprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: the kernel reads the program the sock_fprog points to,
    // which lives in `prog`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER as libc::c_ulong,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    };
    // (Self-contained: the seccomp test harness includes this module
    // on its own.)
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}
