//! Protections a backend says it does not give on this host: its
//! `gives_up` host fact, a comma-separated list of the names below. Each
//! name stands for a fixed set of checks, chosen here, not by the backend:
//! those checks still run, and one that fails is reported
//! [`ProbeStatus::GivenUp`] instead of `Fail` — listed in the report,
//! neither failing nor passing its probe, and no evidence either way. A
//! name the suite does not know gives up nothing.
//!
//! They are what a sandbox without namespaces cannot have (the Linux
//! backend's tier landlock): what the host's hostname is, and which host
//! pids exist, stay visible (nothing but a UTS or PID namespace hides
//! them); and an unprivileged process cannot empty its capability
//! bounding set (no_new_privs, which P7 checks, keeps every exec from
//! using it). Every protection that can be had without them is not on
//! this list, and its checks count as always.

use std::collections::BTreeMap;

use cordon_core::{CheckResult, ProbeId, ProbeStatus};

/// A protection that can be given up: its name in `gives_up`, the probe
/// and checks it covers, and what is lost.
pub struct GiveUp {
    /// The name a backend's `gives_up` fact uses.
    pub name: &'static str,
    /// The probe whose checks it covers.
    pub probe: ProbeId,
    /// Those checks, by name.
    pub checks: &'static [&'static str],
    /// What the sandboxed program can then do or see.
    pub loses: &'static str,
}

/// Every protection that can be given up.
pub const KNOWN: &[GiveUp] = &[
    GiveUp {
        name: "hostname",
        probe: ProbeId::P1,
        checks: &["own-uts-namespace", "hostname-hidden"],
        loses: "the program sees the host's hostname (no UTS namespace); it still cannot \
                change it (no capability, sethostname refused)",
    },
    GiveUp {
        name: "host-pid-existence",
        probe: ProbeId::P1,
        checks: &["enumerate-host-pids"],
        loses: "the program can tell which host pids exist (`kill(pid, 0)` answers EPERM, not \
                ESRCH; `/proc/<pid>` can be stat'ed): no PID namespace; it still cannot \
                signal, trace, read or change any of them (P1's other checks)",
    },
    GiveUp {
        name: "capability-bounding-set",
        probe: ProbeId::P7,
        checks: &["bounding-set"],
        loses: "the program's capability bounding set stays full (an unprivileged host has no \
                CAP_SETPCAP to empty it); with no_new_privs no exec can raise its empty \
                permitted set, so it holds no capability either way",
    },
];

/// The give-ups a backend claims, from its host facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GivenUp {
    names: Vec<&'static str>,
}

impl GivenUp {
    /// The known names in the `gives_up` fact.
    pub(crate) fn from_facts(facts: &BTreeMap<String, String>) -> GivenUp {
        let claimed: Vec<&str> = facts
            .get("gives_up")
            .map(|v| v.split(',').map(str::trim).collect())
            .unwrap_or_default();
        GivenUp {
            names: KNOWN
                .iter()
                .filter(|g| claimed.contains(&g.name))
                .map(|g| g.name)
                .collect(),
        }
    }

    /// Marks each failed check of `probe` that a claimed give-up covers
    /// as given up, with the name and the loss in its detail.
    pub(crate) fn apply(&self, probe: ProbeId, checks: &mut [CheckResult]) {
        for g in KNOWN.iter().filter(|g| g.probe == probe) {
            if !self.names.contains(&g.name) {
                continue;
            }
            for c in checks.iter_mut() {
                if c.status == ProbeStatus::Fail && g.checks.contains(&c.name.as_str()) {
                    c.status = ProbeStatus::GivenUp;
                    c.detail = format!(
                        "given up by the backend on this host (`{}`: {}); the check found: {}",
                        g.name, g.loses, c.detail
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_core::Evidence;

    fn check(name: &str, status: ProbeStatus) -> CheckResult {
        CheckResult {
            name: name.into(),
            status,
            detail: "seen".into(),
            evidence: Evidence::Host,
            passes_without_sandbox: false,
            discriminates: false,
        }
    }

    fn facts(v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("gives_up".to_string(), v.to_string())])
    }

    #[test]
    fn only_the_failed_checks_of_a_claimed_give_up_are_given_up() {
        let g = GivenUp::from_facts(&facts("hostname, host-pid-existence"));
        let mut checks = vec![
            check("own-uts-namespace", ProbeStatus::Fail),
            check("hostname-hidden", ProbeStatus::Unreachable),
            check("enumerate-host-pids", ProbeStatus::Pass),
            check("signal-kill", ProbeStatus::Fail),
        ];
        g.apply(ProbeId::P1, &mut checks);
        let st: Vec<ProbeStatus> = checks.iter().map(|c| c.status).collect();
        assert_eq!(
            st,
            [
                ProbeStatus::GivenUp,
                ProbeStatus::Unreachable,
                ProbeStatus::Pass,
                ProbeStatus::Fail
            ]
        );
        assert!(checks[0].detail.contains("`hostname`") && checks[0].detail.ends_with("seen"));
    }

    #[test]
    fn unclaimed_unknown_and_other_probes_give_up_nothing() {
        let mut checks = vec![check("bounding-set", ProbeStatus::Fail)];
        GivenUp::from_facts(&facts("hostname, everything, P7")).apply(ProbeId::P7, &mut checks);
        GivenUp::from_facts(&BTreeMap::new()).apply(ProbeId::P7, &mut checks);
        GivenUp::from_facts(&facts("capability-bounding-set")).apply(ProbeId::P1, &mut checks);
        assert_eq!(checks[0].status, ProbeStatus::Fail);
        GivenUp::from_facts(&facts("capability-bounding-set")).apply(ProbeId::P7, &mut checks);
        assert_eq!(checks[0].status, ProbeStatus::GivenUp);
    }
}
