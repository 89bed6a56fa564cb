//! What each probe must report on this host: its declared checks, each
//! once, with the evidence it is observed by.
//!
//! The host holds every run to this manifest ([`enforce`]): a check that
//! is missing (the child stopped early, printed `DONE` after skipping
//! some, or the host's own code took another branch), reported twice, not
//! declared, or with another evidence kind than declared, makes the probe
//! `Unreachable` with the names, as does a probe child that does not exit
//! cleanly after `DONE`. The report carries the manifest's size per probe
//! (`checks_expected`); a report whose probe reported another number of
//! checks never conforms.
//!
//! The lists are the probes' declarations, next to nothing but the
//! conditions that add a check on some hosts (root, several CPUs, a
//! sandbox-wide limit claimed, the host's own addresses). When a probe
//! gains or loses a check, this file changes with it.

use std::collections::BTreeMap;

use cordon_core::{CheckResult, Evidence, ProbeId, ProbeStatus};

use crate::verdict::unreachable;

/// What adds a check on some hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Conditions {
    /// The host runs as root.
    pub as_root: bool,
    /// The host may run on more than one CPU (a change of affinity shows).
    pub several_cpus: bool,
    /// The backend claims memory, CPU and disk limits sandbox-wide.
    pub sandbox_memory: bool,
    pub sandbox_cpu: bool,
    pub sandbox_disk: bool,
    /// The host's own non-loopback addresses, IPv4 and IPv6, as P8 names
    /// them (`fe80::1%2` with its interface for a link-local one).
    pub addrs: Vec<String>,
}

/// The positive controls every probe child runs first (`child.rs`).
const CONTROLS: [&str; 5] = [
    "control-scratch-rw",
    "control-package-read",
    "control-fork-wait",
    "control-pipe",
    "control-socketpair",
];

use Evidence::{Child as C, Host as H};

const P1: &[(&str, Evidence)] = &[
    ("host-process-alive", H),
    ("host-abstract-listener", H),
    ("host-pathname-listener", H),
    ("host-pty-unchanged", H),
    ("host-sysv-msg-empty", H),
    ("host-sysv-shm-unchanged", H),
    ("host-sysv-sem-unchanged", H),
    ("host-posix-mq-empty", H),
    ("host-ipc-left-behind", H),
    ("control-sacrificial-has-program-uid", H),
    ("own-uts-namespace", H),
    ("hostname-hidden", C),
    ("ptrace-attach", C),
    ("process-vm-readv", C),
    ("proc-environ", C),
    ("proc-mem", C),
    ("pidfd-open", C),
    ("getpgid", C),
    ("enumerate-host-pids", C),
    ("prlimit-cpu", C),
    ("prlimit-nofile", C),
    ("setpriority", C),
    ("sched-setscheduler", C),
    ("sched-setaffinity", C),
    ("ioprio-set", C),
    ("abstract-unix-connect", C),
    ("pathname-unix-connect", C),
    ("sysv-msgsnd", C),
    ("sysv-shmat", C),
    ("sysv-semop", C),
    ("posix-mq-send", C),
    ("open-host-pty", C),
    ("controlling-tty", H),
    ("not-root", H),
    ("host-not-traced", H),
    ("host-sacrificial-priority", H),
    ("host-sacrificial-scheduler", H),
    ("host-sacrificial-ioprio", H),
    ("host-sacrificial-rlimits", H),
    ("signal-0", C),
    ("signal-cont", C),
    ("signal-kill", C),
];

/// P1's attacks from a host process of another uid (a root host only).
pub(crate) const P1_OTHER_USER: &[&str] = &[
    "other-user-ptrace",
    "other-user-proc-mem",
    "other-user-proc-environ",
    "other-user-proc-root",
    "other-user-setns",
    "other-user-pidfd-getfd",
    "other-user-signal",
];

const P2: &[(&str, Evidence)] = &[
    ("env-canary", H),
    ("control-granted-env", C),
    ("read-tmp-canary", C),
    ("read-home-canary", C),
    ("read-host-environ", C),
];

const P3: &[(&str, Evidence)] = &[
    ("inherited-fds", H),
    ("reopen-host-fd-via-proc", C),
    ("pidfd-getfd", C),
    ("host-fd-not-fetched", H),
];

const P4: &[(&str, Evidence)] = &[
    ("host-unix-dgram-listener", H),
    ("host-abstract-dgram-listener", H),
    ("host-tcp4-listener", H),
    ("host-tcp6-listener", H),
    ("host-udp-socket", H),
    ("tcp4-connect", C),
    ("tcp6-connect", C),
    ("udp-send", C),
    ("raw-socket", C),
    ("packet-socket", C),
    ("icmp-socket", C),
    ("io-uring-connect", C),
    ("unix-dgram-sendto", C),
    ("unix-dgram-connect", C),
    ("unix-dgram-sendto-abstract", C),
];

const P5: &[(&str, Evidence)] = &[
    ("host-out_tmp-absent", H),
    ("host-out_home-absent", H),
    ("host-out_pkg-absent", H),
    ("host-rename_to-absent", H),
    ("host-canary-unchanged", H),
    ("host-meta-unchanged", H),
    ("read-outside-canary", C),
    ("create-out_tmp", C),
    ("create-out_home", C),
    ("create-out_pkg", C),
    ("write-canary", C),
    ("truncate-canary", C),
    ("rename-out-of-scratch", C),
    ("read-via-symlink", C),
    ("write-via-symlink", C),
    ("hardlink-outside-file", C),
    ("chmod-outside", C),
    ("chmod-setid-outside", C),
    ("fchmodat-outside", C),
    ("utimensat-outside", C),
    ("setxattr-outside", C),
    ("chown-outside", C),
    ("host-canary-not-linked", H),
    ("host-setid-scratch-mount", H),
    ("control-package-exec", C),
];

const P6: &[(&str, Evidence)] = &[
    ("fd-limit", H),
    ("process-limit", H),
    ("cpu-limit", H),
    ("file-size-limit", H),
    ("memory-limit", H),
    ("deadline-kills-tree", H),
    ("parent-killed-leaves-nothing", H),
];

const P7: &[(&str, Evidence)] = &[
    ("no-new-privs", H),
    ("seccomp-filter", H),
    ("capability-sets", H),
    ("bounding-set", H),
    ("ambient-set", H),
    ("bpf", C),
    ("perf_event_open", C),
    ("userfaultfd", C),
    ("keyctl", C),
    ("kexec_load", C),
    ("init_module", C),
    ("mount", C),
    ("setuid-0", H),
    ("new-user-namespace", H),
];

const P8: &[(&str, Evidence)] = &[
    ("host-listed-target-reached", H),
    ("host-bystander-tcp", H),
    ("host-bystander-tcp6", H),
    ("host-udp-socket", H),
    ("control-proxy", C),
    ("proxy-unlisted-port", C),
    ("proxy-ip-literal", C),
    ("proxy-private-name", C),
    ("direct-tcp4", C),
    ("direct-tcp6", C),
    ("tcp-fast-open", C),
    ("udp-send", C),
    ("dns-udp", C),
    ("raw-socket", C),
    ("packet-socket", C),
    ("netlink-socket", C),
];

impl Conditions {
    /// This host's, for a backend claiming `scopes`.
    pub(crate) fn of_host(scopes: &crate::scope::LimitScopes) -> Conditions {
        // SAFETY: geteuid cannot fail.
        let as_root = unsafe { libc::geteuid() } == 0;
        let cpus = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .map(|v| v.trim().to_string())
            })
            .unwrap_or_default();
        Conditions {
            as_root,
            several_cpus: cpus.contains([',', '-']),
            sandbox_memory: scopes.memory.is_sandbox(),
            sandbox_cpu: scopes.cpu.is_sandbox(),
            sandbox_disk: scopes.disk.is_sandbox(),
            addrs: crate::inspect::host_addresses()
                .iter()
                .map(crate::inspect::HostAddr::name)
                .collect(),
        }
    }
}

/// The checks `id` must report on a host with `c`, and the evidence of
/// each.
pub(crate) fn checks(id: ProbeId, c: &Conditions) -> BTreeMap<String, Evidence> {
    let mut out: BTreeMap<String, Evidence> = BTreeMap::new();
    let mut add = |name: &str, e: Evidence| {
        out.insert(name.to_string(), e);
    };
    for name in CONTROLS {
        add(name, C);
    }
    let table = match id {
        ProbeId::P1 => P1,
        ProbeId::P2 => P2,
        ProbeId::P3 => P3,
        ProbeId::P4 => P4,
        ProbeId::P5 => P5,
        ProbeId::P6 => P6,
        ProbeId::P7 => P7,
        ProbeId::P8 => P8,
    };
    for (name, e) in table {
        add(name, *e);
    }
    match id {
        ProbeId::P1 => {
            if c.as_root {
                for name in P1_OTHER_USER {
                    add(name, H);
                }
            }
            if c.several_cpus {
                add("host-sacrificial-affinity", H);
            }
        }
        ProbeId::P5 if c.as_root => add("host-setid-scratch-exec", H),
        ProbeId::P6 => {
            if c.sandbox_memory {
                add("sandbox-memory-limit", H);
            }
            if c.sandbox_cpu {
                add("sandbox-cpu-limit", H);
            }
            if c.sandbox_disk {
                add("sandbox-disk-limit", H);
            }
        }
        ProbeId::P8 => {
            for ip in &c.addrs {
                add(&format!("direct-{ip}"), C);
                add(&format!("proxy-port-{ip}"), C);
            }
        }
        _ => {}
    }
    out
}

/// Holds `checks` to the manifest `expected`: one `Unreachable` check
/// `manifest` naming every missing, repeated, undeclared or mislabelled
/// check (the probe then cannot pass).
pub(crate) fn enforce(expected: &BTreeMap<String, Evidence>, checks: &mut Vec<CheckResult>) {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for c in checks.iter() {
        *seen.entry(c.name.as_str()).or_default() += 1;
    }
    let mut problems = Vec::new();
    let missing: Vec<&str> = expected
        .keys()
        .map(String::as_str)
        .filter(|n| !seen.contains_key(n))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("missing: {}", missing.join(", ")));
    }
    let twice: Vec<&str> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(name, _)| *name)
        .collect();
    if !twice.is_empty() {
        problems.push(format!("reported more than once: {}", twice.join(", ")));
    }
    // An undeclared check that is itself `Unreachable` is the harness
    // saying why a run broke (`spawn`, `child-report`): the probe cannot
    // pass anyway, and the name says more than "not declared".
    let extra: Vec<&str> = checks
        .iter()
        .filter(|c| !expected.contains_key(&c.name) && c.status != ProbeStatus::Unreachable)
        .map(|c| c.name.as_str())
        .collect();
    if !extra.is_empty() {
        problems.push(format!("not declared: {}", extra.join(", ")));
    }
    // Stronger evidence than declared is a mislabel; weaker is allowed (a
    // host check that had to rely on the child says so).
    let mislabelled: Vec<String> = checks
        .iter()
        .filter(|c| c.evidence == Evidence::Host && expected.get(&c.name) == Some(&Evidence::Child))
        .map(|c| {
            format!(
                "{} ({:?}, declared {:?})",
                c.name, c.evidence, expected[&c.name]
            )
        })
        .collect();
    if !mislabelled.is_empty() {
        problems.push(format!(
            "evidence not as declared: {}",
            mislabelled.join(", ")
        ));
    }
    if !problems.is_empty() {
        checks.push(unreachable(
            "manifest",
            format!(
                "the checks reported are not the probe's declared ones: {}",
                problems.join("; ")
            ),
        ));
    }
}
