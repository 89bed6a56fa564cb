//! What the integration tests share: the suite, and the checks the first
//! version of the Linux backend (`Layers::LEGACY`) fails.

// Each test file uses part of this module.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

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

/// The checks `Layers::LEGACY` (the first version of the Linux backend:
/// user namespace, rlimits, no capabilities, no_new_privs, Landlock, the
/// seccomp deny-list) fails: the breaches of issue #12 the probes now catch.
pub fn legacy_fails(as_root: bool) -> BTreeSet<Check> {
    use ProbeId::*;
    let mut fails = set(&[
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
    if as_root {
        fails.insert((P5, "host-setid-scratch-exec".into()));
    }
    fails
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
