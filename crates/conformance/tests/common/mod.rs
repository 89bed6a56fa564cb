//! The expected per-check statuses the integration tests share: every
//! check of the suite under the no-op backend (as root and as another
//! user), and the checks the Linux backend's base layers
//! (`Layers::BASE`) fail.

// Each test file uses part of this module.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

/// The probe ids as bare names, for the tables below.
#[allow(dead_code)]
mod probe_ids {
    use cordon_core::ProbeId;
    pub const P1: ProbeId = ProbeId::P1;
    pub const P2: ProbeId = ProbeId::P2;
    pub const P3: ProbeId = ProbeId::P3;
    pub const P4: ProbeId = ProbeId::P4;
    pub const P5: ProbeId = ProbeId::P5;
    pub const P6: ProbeId = ProbeId::P6;
    pub const P7: ProbeId = ProbeId::P7;
    pub const P8: ProbeId = ProbeId::P8;
}

use cordon_conformance::{ProbeExecutable, StandardSuite};
use cordon_core::{ConformanceReport, ProbeId, ProbeStatus};

/// A check: its probe and name.
pub type Check = (ProbeId, String);

/// The suite with the probe binary this crate builds.
pub fn suite() -> StandardSuite {
    StandardSuite::new().with_probe_executable(ProbeExecutable::Path(
        env!("CARGO_BIN_EXE_cordon-probe").into(),
    ))
}

/// Runs the suite against `backend`.
pub async fn run(
    suite: StandardSuite,
    backend: Arc<dyn cordon_core::SandboxBackend>,
) -> ConformanceReport {
    use cordon_core::ConformanceSuite;
    suite.run(backend).await
}

/// Whether this process is root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Every non-control check of a report with its status.
pub fn statuses(report: &ConformanceReport) -> BTreeMap<Check, ProbeStatus> {
    report
        .probes
        .iter()
        .flat_map(|p| {
            p.checks
                .iter()
                .filter(|c| !c.name.starts_with("control-"))
                .map(move |c| ((p.id, c.name.clone()), c.status))
        })
        .collect()
}

fn set(pairs: &[(ProbeId, &str)]) -> BTreeSet<Check> {
    pairs.iter().map(|(p, n)| (*p, n.to_string())).collect()
}

/// Whether the sacrificial process may run on more than one CPU (else a
/// change of its affinity cannot be seen and that check is not made).
fn several_cpus() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .is_some_and(|v| v.contains([',', '-']))
}

/// Every non-control check the suite makes on this host.
pub fn all_checks(as_root: bool) -> BTreeSet<Check> {
    use probe_ids::*;
    let mut all = set(&[
        (P1, "host-process-alive"),
        (P1, "host-abstract-listener"),
        (P1, "host-pathname-listener"),
        (P1, "host-pty-unchanged"),
        (P1, "host-sysv-msg-empty"),
        (P1, "host-sysv-shm-unchanged"),
        (P1, "host-sysv-sem-unchanged"),
        (P1, "host-posix-mq-empty"),
        (P1, "host-ipc-left-behind"),
        (P1, "ptrace-attach"),
        (P1, "process-vm-readv"),
        (P1, "proc-environ"),
        (P1, "proc-mem"),
        (P1, "pidfd-open"),
        (P1, "getpgid"),
        (P1, "enumerate-host-pids"),
        (P1, "prlimit-cpu"),
        (P1, "prlimit-nofile"),
        (P1, "setpriority"),
        (P1, "sched-setscheduler"),
        (P1, "sched-setaffinity"),
        (P1, "ioprio-set"),
        (P1, "abstract-unix-connect"),
        (P1, "pathname-unix-connect"),
        (P1, "sysv-msgsnd"),
        (P1, "sysv-shmat"),
        (P1, "sysv-semop"),
        (P1, "posix-mq-send"),
        (P1, "open-host-pty"),
        (P1, "controlling-tty"),
        (P1, "not-root"),
        (P1, "host-not-traced"),
        (P1, "host-sacrificial-priority"),
        (P1, "host-sacrificial-scheduler"),
        (P1, "host-sacrificial-ioprio"),
        (P1, "host-sacrificial-rlimits"),
        (P1, "signal-0"),
        (P1, "signal-cont"),
        (P1, "signal-kill"),
        (P1, "own-uts-namespace"),
        (P1, "hostname-hidden"),
        (P2, "env-canary"),
        (P2, "read-tmp-canary"),
        (P2, "read-home-canary"),
        (P2, "read-host-environ"),
        (P3, "inherited-fds"),
        (P3, "reopen-host-fd-via-proc"),
        (P3, "pidfd-getfd"),
        (P3, "host-fd-not-fetched"),
        (P4, "host-unix-dgram-listener"),
        (P4, "host-abstract-dgram-listener"),
        (P4, "host-tcp4-listener"),
        (P4, "host-tcp6-listener"),
        (P4, "host-udp-socket"),
        (P4, "tcp4-connect"),
        (P4, "tcp6-connect"),
        (P4, "udp-send"),
        (P4, "raw-socket"),
        (P4, "packet-socket"),
        (P4, "icmp-socket"),
        (P4, "io-uring-connect"),
        (P4, "unix-dgram-sendto"),
        (P4, "unix-dgram-connect"),
        (P4, "unix-dgram-sendto-abstract"),
        (P5, "host-out_tmp-absent"),
        (P5, "host-out_home-absent"),
        (P5, "host-out_pkg-absent"),
        (P5, "host-rename_to-absent"),
        (P5, "host-canary-unchanged"),
        (P5, "host-meta-unchanged"),
        (P5, "read-outside-canary"),
        (P5, "create-out_tmp"),
        (P5, "create-out_home"),
        (P5, "create-out_pkg"),
        (P5, "write-canary"),
        (P5, "truncate-canary"),
        (P5, "rename-out-of-scratch"),
        (P5, "read-via-symlink"),
        (P5, "write-via-symlink"),
        (P5, "hardlink-outside-file"),
        (P5, "chmod-outside"),
        (P5, "chmod-setid-outside"),
        (P5, "fchmodat-outside"),
        (P5, "utimensat-outside"),
        (P5, "setxattr-outside"),
        (P5, "chown-outside"),
        (P5, "fchmod-read-grant"),
        (P5, "fsetxattr-read-grant"),
        (P5, "host-canary-not-linked"),
        (P5, "host-setid-scratch-mount"),
        (P6, "fd-limit"),
        (P6, "process-limit"),
        (P6, "cpu-limit"),
        (P6, "file-size-limit"),
        (P6, "memory-limit"),
        (P6, "deadline-kills-tree"),
        (P6, "parent-killed-leaves-nothing"),
        (P7, "bpf"),
        (P7, "perf_event_open"),
        (P7, "userfaultfd"),
        (P7, "keyctl"),
        (P7, "kexec_load"),
        (P7, "init_module"),
        (P7, "mount"),
        (P7, "no-new-privs"),
        (P7, "seccomp-filter"),
        (P7, "capability-sets"),
        (P7, "bounding-set"),
        (P7, "ambient-set"),
        (P7, "setuid-0"),
        (P7, "new-user-namespace"),
    ]);
    if several_cpus() {
        all.insert((P1, "host-sacrificial-affinity".into()));
    }
    // Only root can run the planted file as another uid, or a process of
    // another uid against the sandbox.
    if as_root {
        all.insert((P5, "host-setid-scratch-exec".into()));
        all.extend(other_user_checks());
    }
    all
}

/// P1's checks of a host process of another uid (a root host only).
pub fn other_user_checks() -> BTreeSet<Check> {
    [
        "other-user-ptrace",
        "other-user-proc-mem",
        "other-user-proc-environ",
        "other-user-proc-root",
        "other-user-setns",
        "other-user-pidfd-getfd",
        "other-user-signal",
    ]
    .into_iter()
    .map(|n| (ProbeId::P1, n.to_string()))
    .collect()
}

/// Whether the running kernel was built with kexec / loadable modules.
fn kernel_has(sysctl_or_proc: &str) -> bool {
    Path::new(sysctl_or_proc).exists()
}

/// Whether our gid may open ICMP echo sockets (`ping_group_range`).
fn may_ping() -> bool {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ping_group_range").unwrap_or_default();
    let mut it = range
        .split_whitespace()
        .filter_map(|v| v.parse::<u64>().ok());
    // SAFETY: getegid has no preconditions.
    let gid = u64::from(unsafe { libc::getegid() });
    matches!((it.next(), it.next()), (Some(lo), Some(hi)) if lo <= gid && gid <= hi)
}

/// The checks that pass under the no-op backend on this host: the kernel,
/// file modes or the runner's hygiene refuse them, not a sandbox. Every
/// other check of [`all_checks`] fails under noop.
pub fn noop_passes(as_root: bool) -> BTreeSet<Check> {
    use probe_ids::*;
    let mut pass = set(&[
        // Hygiene: an allowlisted environment and no inherited fd, with or
        // without a sandbox.
        (P2, "env-canary"),
        (P3, "inherited-fds"),
        // Nothing held an ambient capability to begin with.
        (P7, "ambient-set"),
    ]);
    if !may_ping() {
        pass.insert((P4, "icmp-socket".into()));
    }
    if !kernel_has("/proc/sys/kernel/kexec_load_disabled") {
        pass.insert((P7, "kexec_load".into()));
    }
    if !kernel_has("/proc/modules") {
        pass.insert((P7, "init_module".into()));
    }
    if as_root {
        // The unconfined program is root's: uid 65534 cannot reach it.
        pass.extend(other_user_checks());
    }
    if !as_root {
        // No capability, no uid 0: the kernel refuses these to any user.
        pass.extend(set(&[
            (P1, "not-root"),
            (P4, "raw-socket"),
            (P4, "packet-socket"),
            (P7, "mount"),
            (P7, "setuid-0"),
            (P7, "capability-sets"),
        ]));
    }
    pass
}

/// The checks `Layers::BASE` (user namespace, rlimits, no capabilities,
/// no_new_privs, Landlock, the seccomp deny-list; every optional layer
/// off) fails: what the optional layers close, which the probes catch.
/// Every other check passes under it.
pub fn base_fails(as_root: bool) -> BTreeSet<Check> {
    use probe_ids::*;
    let mut fails = set(&[
        // The host's hostname (no UTS namespace).
        (P1, "own-uts-namespace"),
        (P1, "hostname-hidden"),
        // Same-uid host processes can be named and controlled.
        (P1, "pidfd-open"),
        (P1, "getpgid"),
        (P1, "enumerate-host-pids"),
        (P1, "prlimit-cpu"),
        (P1, "prlimit-nofile"),
        (P1, "setpriority"),
        (P1, "sched-setscheduler"),
        (P1, "sched-setaffinity"),
        (P1, "ioprio-set"),
        (P1, "host-sacrificial-priority"),
        (P1, "host-sacrificial-scheduler"),
        (P1, "host-sacrificial-ioprio"),
        (P1, "host-sacrificial-rlimits"),
        // SysV IPC is the host's, and a POSIX queue the sandbox creates
        // stays behind although Landlock refuses to open it.
        (P1, "sysv-msgsnd"),
        (P1, "sysv-shmat"),
        (P1, "sysv-semop"),
        (P1, "host-sysv-msg-empty"),
        (P1, "host-sysv-shm-unchanged"),
        (P1, "host-sysv-sem-unchanged"),
        (P1, "host-ipc-left-behind"),
        // Pathname datagrams without socket().
        (P4, "host-unix-dgram-listener"),
        (P4, "unix-dgram-sendto"),
        (P4, "unix-dgram-connect"),
        // Metadata writes outside the grants.
        (P5, "host-meta-unchanged"),
        (P5, "chmod-outside"),
        (P5, "chmod-setid-outside"),
        (P5, "fchmodat-outside"),
        (P5, "utimensat-outside"),
        (P5, "setxattr-outside"),
        (P5, "chown-outside"),
        // Setuid planting in scratch.
        (P5, "host-setid-scratch-mount"),
        // Outliving the host.
        (P6, "parent-killed-leaves-nothing"),
    ]);
    if several_cpus() {
        fails.insert((P1, "host-sacrificial-affinity".into()));
    }
    if !as_root {
        // No read-only mount, and the sandbox is the file's owner.
        fails.insert((P5, "fchmod-read-grant".into()));
        fails.insert((P5, "fsetxattr-read-grant".into()));
    }
    if as_root {
        fails.insert((P5, "host-setid-scratch-exec".into()));
        // Every sandbox is uid 65534, as is the attacker.
        fails.extend(other_user_checks());
    }
    fails
}

/// Compares a report's statuses with "`fails` fail, the rest of
/// [`all_checks`] pass"; returns the differences, one per line.
pub fn differences(
    report: &ConformanceReport,
    all: &BTreeSet<Check>,
    fails: &BTreeSet<Check>,
) -> Vec<String> {
    let got = statuses(report);
    let mut out = Vec::new();
    for check in all {
        let want = if fails.contains(check) {
            ProbeStatus::Fail
        } else {
            ProbeStatus::Pass
        };
        match got.get(check) {
            Some(s) if *s == want => {}
            Some(s) => out.push(format!("{} {}: {s:?}, expected {want:?}", check.0, check.1)),
            None => out.push(format!("{} {}: missing", check.0, check.1)),
        }
    }
    for check in got.keys().filter(|c| !all.contains(*c)) {
        out.push(format!(
            "{} {}: not in the table (add it to tests/common)",
            check.0, check.1
        ));
    }
    out
}

/// A report's checks, one line each, for assertion messages.
pub fn dump(report: &ConformanceReport) -> String {
    report
        .probes
        .iter()
        .flat_map(|p| {
            p.checks.iter().map(move |c| {
                format!(
                    "{} {} {:?} [{:?}{}] {}",
                    p.id,
                    c.name,
                    c.status,
                    c.evidence,
                    if c.passes_without_sandbox {
                        ", passes without sandbox"
                    } else {
                        ""
                    },
                    c.detail
                )
            })
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The sandbox-wide checks of P6, each with the host fact that claims its
/// scope and the per-process check made for every backend.
pub const SANDBOX_CHECKS: [(&str, &str, &str); 3] = [
    ("sandbox-memory-limit", "limit_memory", "memory-limit"),
    ("sandbox-cpu-limit", "limit_cpu", "cpu-limit"),
    ("sandbox-disk-limit", "limit_disk", "file-size-limit"),
];

/// Whether the report's backend claims `sandbox` scope in fact `key`.
pub fn claims_sandbox(report: &ConformanceReport, key: &str) -> bool {
    report
        .host
        .backend_facts
        .get(key)
        .is_some_and(|v| v.starts_with("sandbox:"))
}

/// One of P6's checks, if it was made.
pub fn p6_check<'a>(
    report: &'a ConformanceReport,
    name: &str,
) -> Option<&'a cordon_core::CheckResult> {
    report
        .probes
        .iter()
        .find(|p| p.id == ProbeId::P6)?
        .checks
        .iter()
        .find(|c| c.name == name)
}

/// Each sandbox-wide check is made exactly when the backend claims its
/// limit sandbox-wide (and then passes: on the host's measurement where it
/// can, labelled `child` where its verdict rests on the workers' own
/// reports, as the memory and CPU ones do); otherwise
/// the per-process check's detail says that the limit was not claimed
/// sandbox-wide. Returns the problems, one per line.
pub fn scope_problems(report: &ConformanceReport) -> Vec<String> {
    let mut out = Vec::new();
    for (name, key, per_process) in SANDBOX_CHECKS {
        let claimed = claims_sandbox(report, key);
        match (claimed, p6_check(report, name)) {
            (true, Some(c)) if c.status == ProbeStatus::Pass => {}
            (true, Some(c)) => out.push(format!(
                "{name}: {:?} [{:?}] {} ({key} claims sandbox)",
                c.status, c.evidence, c.detail
            )),
            (true, None) => out.push(format!("{name}: missing, though {key} claims sandbox")),
            (false, Some(c)) => out.push(format!(
                "{name}: made ({:?}), though {key} does not claim sandbox",
                c.status
            )),
            (false, None) => {
                let said = p6_check(report, per_process).map(|c| c.detail.as_str());
                if !said.is_some_and(|d| d.contains("per-process (not claimed sandbox-wide")) {
                    out.push(format!(
                        "{per_process}: does not say that {key} is not claimed sandbox-wide: {said:?}"
                    ));
                }
            }
        }
    }
    out
}
