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
//! Each probe declares its own checks ([`Probe::checks`], in its file),
//! from nothing but the conditions that add a check on some hosts
//! ([`HostConditions`]: root, several CPUs, a sandbox-wide limit claimed,
//! the host's own addresses). When a probe gains or loses a check, its
//! declaration changes with it.

use std::collections::BTreeMap;

use cordon_core::{CheckResult, Evidence, ProbeStatus};

use crate::registry::{Manifest, Probe};
use crate::verdict::unreachable;

/// What adds a check on some hosts: a probe's
/// [`checks`](crate::Probe::checks) depend on nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostConditions {
    /// The host runs as root.
    pub as_root: bool,
    /// The host may run on more than one CPU (a change of affinity shows).
    pub several_cpus: bool,
    /// The backend claims its memory limit sandbox-wide.
    pub sandbox_memory: bool,
    /// The backend claims its CPU limit sandbox-wide.
    pub sandbox_cpu: bool,
    /// The backend claims its disk limit sandbox-wide.
    pub sandbox_disk: bool,
    /// The host's own non-loopback addresses, IPv4 and IPv6, as P8 names
    /// them (`fe80::1%2` with its interface for a link-local one).
    pub addrs: Vec<String>,
}

/// The positive controls every probe child runs first (`child.rs`): each
/// probe's manifest has them besides its own checks.
pub const POSITIVE_CONTROLS: [&str; 5] = [
    "control-scratch-rw",
    "control-package-read",
    "control-fork-wait",
    "control-pipe",
    "control-socketpair",
];

impl HostConditions {
    /// This host's, for a backend claiming `scopes`.
    pub(crate) fn of_host(scopes: &crate::scope::LimitScopes) -> HostConditions {
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
        HostConditions {
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

/// The checks `probe` must report on a host with `c`: the positive
/// controls every probe child runs first, then the probe's own.
pub(crate) fn checks(probe: &dyn Probe, c: &HostConditions) -> Manifest {
    let mut out: Manifest = POSITIVE_CONTROLS
        .iter()
        .map(|name| (name.to_string(), Evidence::Child))
        .collect();
    out.extend(probe.checks(c));
    out
}

/// Holds `checks` to the manifest `expected`: one `Unreachable` check
/// `manifest` naming every missing, repeated, undeclared or mislabelled
/// check (the probe then cannot pass).
pub(crate) fn enforce(expected: &Manifest, checks: &mut Vec<CheckResult>) {
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
