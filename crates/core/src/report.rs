//! Conformance reports and the seam to the suite that produces them.
//!
//! Core defines the report and the [`ConformanceSuite`] trait; the probes
//! themselves live in `cordon-conformance`, so core never depends on them.
//! [`SandboxRunner::new`](crate::SandboxRunner::new) consumes a suite and
//! refuses any backend whose report does not [`conform`](ConformanceReport::conforms).
//!
//! # JSON schema (`schema: "cordon.conformance/1"`)
//! ```text
//! {
//!   "schema": "cordon.conformance/1",
//!   "backend": "linux",                       // SandboxBackend::name()
//!   "availability": {"state": "available"}     // or
//!                   {"state": "unavailable", "reason": "..."},
//!   "host": {
//!     "os": "linux", "kernel_release": "6.18.0", "uid": 0,
//!     "backend_facts": {"landlock_abi": "7", ...}   // SandboxBackend::host_facts()
//!   },
//!   "probes": [                                // P1..P7, then P8 if claimed, then any
//!                                              // the suite added; empty if unavailable
//!     {"id": "P1", "title": "Process isolation",
//!      "status": "pass" | "fail" | "unreachable" | "unproven",
//!                                              // a check may also be "given_up"
//!      "detail": "...",                        // why, for anything not pass
//!      "checks_expected": 55,                  // how many checks the probe declares
//!                                              // for this host; = checks.len()
//!      "checks": [{"name": "...", "status": "pass", "detail": "...",
//!                  "evidence": "host" | "child",   // who observed the outcome
//!                  "passes_without_sandbox": false, // it passed unconfined too
//!                  "discriminates": true}],        // it failed unconfined: evidence
//!      "duration_ms": 12.5}
//!   ],
//!   "accepted_unproven": ["P7"],               // unproven probes the operator accepted
//!   "total_duration_ms": 140.2,
//!   "conforms": true                           // = ConformanceReport::conforms()
//! }
//! ```
//! `conforms` is written for convenience and recomputed on read: a report
//! whose stored `conforms` disagrees with its probes does not deserialize.
//!
//! **Proven.** A check *discriminates* on this host when the same check,
//! run by the same probe with no sandbox at all (the suite's unconfined
//! control), failed: its passing under the backend is then evidence of the
//! backend's confinement. A probe all of whose checks pass, but none of
//! which discriminates, is [`ProbeStatus::Unproven`]: something else on
//! this host (an outer seccomp filter, a container) refuses what it tries,
//! and the backend's own protection was not shown. An unproven probe does
//! not conform unless the operator accepted it by name
//! (`accepted_unproven`), which the report records.
//!
//! `evidence`, `passes_without_sandbox`, `discriminates`,
//! `checks_expected` and `accepted_unproven` were added to schema 1
//! without changing its tag: a report written before them still reads
//! (as `"child"`, `false`, `false`, 0 and none), and does not conform
//! (no probe declared its checks).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::backend::{Availability, SandboxBackend};
pub use crate::probe_id::ProbeId;

/// The schema tag written into every report.
pub const REPORT_SCHEMA: &str = "cordon.conformance/1";

/// The outcome of one probe or check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// Every forbidden action failed and every positive control succeeded.
    Pass,
    /// A breach: a forbidden action succeeded.
    Fail,
    /// The probe could not run or could not decide (no output, garbage,
    /// timeout, a positive control failed, a declared check missing).
    /// Counts as not passing.
    Unreachable,
    /// Every check passed, but none discriminates on this host (each
    /// passed with no sandbox too): nothing shows the backend confining.
    /// Counts as not passing unless the operator accepted it
    /// ([`ConformanceReport::accepted_unproven`]).
    Unproven,
    /// A check only: it failed, and what it checks is a protection the
    /// backend says it does not give on this host (its `gives_up` host
    /// fact, e.g. the Linux backend's tier landlock: no UTS namespace, so
    /// the host's hostname shows). Only the names the suite knows, each
    /// standing for a fixed set of checks, can be given up; the check
    /// still ran, its detail says what it found, and the report lists it.
    /// It neither fails nor passes its probe, and is no evidence either
    /// way.
    GivenUp,
}

/// Who observed a check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// The host saw the effect itself (the live child's `/proc` entries, a
    /// listener, a file, an IPC object, a process) and did not rely on
    /// what the probe child said.
    Host,
    /// The probe child reported it (e.g. the errno a call failed with).
    /// The default: it is the weaker claim.
    #[default]
    Child,
}

/// One named check inside a probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// What was tried, e.g. `kill-sacrificial-sig0`.
    pub name: String,
    /// Its outcome.
    pub status: ProbeStatus,
    /// What happened.
    pub detail: String,
    /// Who observed the outcome.
    #[serde(default)]
    pub evidence: Evidence,
    /// The same check also passes when the probe runs with no sandbox at
    /// all on this host (the kernel, file modes or hygiene refuse it), so
    /// its passing is no evidence of confinement. Always false for the
    /// positive controls (`control-*`).
    #[serde(default)]
    pub passes_without_sandbox: bool,
    /// The same check *failed* when the probe ran with no sandbox on this
    /// host: its passing under the backend is evidence of confinement.
    /// Always false for the positive controls (`control-*`).
    #[serde(default)]
    pub discriminates: bool,
}

/// The result of one probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// Which probe.
    pub id: ProbeId,
    /// Its title.
    pub title: String,
    /// Overall status: `Fail` if any check failed, else `Unreachable` if any
    /// check could not decide, else `Pass`.
    pub status: ProbeStatus,
    /// A one-line explanation for anything that is not `Pass`.
    pub detail: String,
    /// How many checks the probe declares for this host (its manifest);
    /// a run that reported any other set is `Unreachable`.
    #[serde(default)]
    pub checks_expected: usize,
    /// The individual checks.
    #[serde(default)]
    pub checks: Vec<CheckResult>,
    /// Wall time of the probe, in milliseconds.
    pub duration_ms: f64,
}

/// Facts about the host the report was made on.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HostFacts {
    /// `std::env::consts::OS`.
    pub os: String,
    /// `uname -r`.
    pub kernel_release: String,
    /// Effective uid of the host process.
    pub uid: u32,
    /// What the backend reported ([`SandboxBackend::host_facts`]).
    #[serde(default)]
    pub backend_facts: BTreeMap<String, String>,
}

impl HostFacts {
    /// Collects OS, kernel release and uid, plus the backend's facts.
    pub fn collect(backend: &dyn SandboxBackend) -> HostFacts {
        HostFacts {
            os: std::env::consts::OS.to_string(),
            kernel_release: kernel_release(),
            // SAFETY: geteuid has no preconditions and cannot fail.
            uid: unsafe { libc::geteuid() },
            backend_facts: backend.host_facts(),
        }
    }
}

/// The kernel release (`uname -r`), or `"unknown"`.
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain old data; uname fills it or fails.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// A conformance report: whether one backend passed the probes on this
/// host (P1–P7, and P8 for what it claims).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConformanceReport {
    /// Always [`REPORT_SCHEMA`].
    pub schema: String,
    /// The backend's name.
    pub backend: String,
    /// Whether the backend is available, and why not.
    pub availability: Availability,
    /// Host facts.
    pub host: HostFacts,
    /// One result per probe that ran, in order.
    pub probes: Vec<ProbeResult>,
    /// The unproven probes the operator accepted (they then count as
    /// passing), as asked of the suite.
    pub accepted_unproven: Vec<ProbeId>,
    /// Wall time of the whole suite, in milliseconds.
    pub total_duration_ms: f64,
    /// Derived: [`ConformanceReport::conforms`].
    pub conforms: bool,
}

#[derive(Deserialize)]
struct RawReport {
    schema: String,
    backend: String,
    availability: Availability,
    host: HostFacts,
    probes: Vec<ProbeResult>,
    #[serde(default)]
    accepted_unproven: Vec<ProbeId>,
    total_duration_ms: f64,
    conforms: bool,
}

impl<'de> Deserialize<'de> for ConformanceReport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawReport::deserialize(d)?;
        if raw.schema != REPORT_SCHEMA {
            return Err(serde::de::Error::custom(format!(
                "unknown report schema `{}` (expected `{REPORT_SCHEMA}`)",
                raw.schema
            )));
        }
        let report = ConformanceReport::new(
            raw.backend,
            raw.availability,
            raw.host,
            raw.probes,
            raw.total_duration_ms,
        )
        .accepting_unproven(raw.accepted_unproven);
        if report.conforms != raw.conforms {
            return Err(serde::de::Error::custom(
                "report's `conforms` field disagrees with its probe results",
            ));
        }
        Ok(report)
    }
}

impl ConformanceReport {
    /// Builds a report and derives `conforms`.
    pub fn new(
        backend: impl Into<String>,
        availability: Availability,
        host: HostFacts,
        probes: Vec<ProbeResult>,
        total_duration_ms: f64,
    ) -> Self {
        let mut r = ConformanceReport {
            schema: REPORT_SCHEMA.to_string(),
            backend: backend.into(),
            availability,
            host,
            probes,
            accepted_unproven: Vec::new(),
            total_duration_ms,
            conforms: false,
        };
        r.conforms = r.compute_conforms();
        r
    }

    /// The same report with `accepted` recorded as the unproven probes the
    /// operator accepts (`conforms` recomputed). Accepting a probe that is
    /// not unproven changes nothing.
    pub fn accepting_unproven(mut self, mut accepted: Vec<ProbeId>) -> Self {
        accepted.sort();
        accepted.dedup();
        self.accepted_unproven = accepted;
        self.conforms = self.compute_conforms();
        self
    }

    /// A report for a backend that is unavailable: no probe ran.
    pub fn unavailable(backend: &dyn SandboxBackend, reason: impl Into<String>) -> Self {
        ConformanceReport::new(
            backend.name(),
            Availability::Unavailable {
                reason: reason.into(),
            },
            HostFacts::collect(backend),
            Vec::new(),
            0.0,
        )
    }

    fn compute_conforms(&self) -> bool {
        // Every required probe ran, no probe ran twice, and every probe
        // that ran passed (one a suite adds can only make it stricter).
        let mut ids: Vec<ProbeId> = self.probes.iter().map(|p| p.id).collect();
        ids.sort();
        ids.dedup();
        self.availability.is_available()
            && ids.len() == self.probes.len()
            && ProbeId::REQUIRED.iter().all(|id| ids.contains(id))
            && self.probes.iter().all(|p| self.passed(p))
    }

    /// Whether the report has every probe `backend` must pass
    /// ([`ProbeId::required_of`]), P8 for one that claims the egress
    /// allowlist: [`SandboxRunner::new`](crate::SandboxRunner::new)
    /// admits a backend only on a report that has them all and
    /// [`conforms`](Self::conforms).
    pub fn covers(&self, backend: &dyn SandboxBackend) -> bool {
        ProbeId::required_of(backend)
            .iter()
            .all(|id| self.probes.iter().any(|p| p.id == *id))
    }

    /// A probe counts as passed: `Pass` (or `Unproven` and accepted), with
    /// every check it declared reported.
    fn passed(&self, p: &ProbeResult) -> bool {
        let status = p.status == ProbeStatus::Pass
            || (p.status == ProbeStatus::Unproven && self.accepted_unproven.contains(&p.id));
        status && p.checks_expected > 0 && p.checks_expected == p.checks.len()
    }

    /// True only when the backend is available, each of P1..P7 ran, no
    /// probe ran twice, and every probe that ran passed (`Pass`, or
    /// `Unproven` and accepted, with every check it declared reported):
    /// a backend that claims more than it holds (P8 failing) is refused
    /// altogether. Whether every probe a backend claims *ran* is
    /// [`covers`](Self::covers), which
    /// [`SandboxRunner::new`](crate::SandboxRunner::new) checks too.
    pub fn conforms(&self) -> bool {
        self.compute_conforms()
    }

    /// The probes that are unproven on this host and not accepted.
    pub fn unproven(&self) -> Vec<ProbeId> {
        self.probes
            .iter()
            .filter(|p| {
                p.status == ProbeStatus::Unproven && !self.accepted_unproven.contains(&p.id)
            })
            .map(|p| p.id)
            .collect()
    }

    /// True when the report conforms and P8 ran and passed: the backend
    /// proved on this host that it enforces
    /// [`Network::Allow`](crate::Network::Allow). A
    /// [`SandboxRunner`](crate::SandboxRunner) whose configuration asks
    /// for an allowlist is built only then.
    pub fn proves_egress_allowlist(&self) -> bool {
        self.conforms() && self.probes.iter().any(|p| p.id == ProbeId::P8)
    }

    /// Whether the report also proves the credential broker
    /// (`Network::Brokered`): P8 ran its second run, with the broker, and
    /// the bound target got the value (a build without the broker runs
    /// P8 without it, and proves the allowlist only).
    pub fn proves_credential_broker(&self) -> bool {
        self.proves_egress_allowlist()
            && self.probes.iter().any(|p| {
                p.id == ProbeId::P8
                    && p.checks
                        .iter()
                        .any(|c| c.name == "host-broker-injected" && c.status == ProbeStatus::Pass)
            })
    }

    /// A human summary: one line per probe, the reason for anything that is
    /// not `Pass`, how many checks the host verified itself, the checks that
    /// pass without a sandbox on this host, and a final `CONFORMS` /
    /// `NOT CONFORMING` line.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let h = &self.host;
        let _ = writeln!(s, "Cordon conformance — backend `{}`", self.backend);
        let _ = write!(s, "host: {} {} uid {}", h.os, h.kernel_release, h.uid);
        for (k, v) in &h.backend_facts {
            let _ = write!(s, ", {k} {v}");
        }
        s.push('\n');
        if let Some(reason) = self.availability.reason() {
            let _ = writeln!(s, "backend unavailable: {reason}");
        }
        if !self.probes.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<4} {:<28} {:<12} {:>9}",
                "", "probe", "status", "time"
            );
        }
        for p in &self.probes {
            let _ = writeln!(
                s,
                "{:<4} {:<28} {:<12} {:>7.1}ms",
                p.id,
                p.title,
                format!("{:?}", p.status).to_uppercase(),
                p.duration_ms
            );
            for c in p.checks.iter().filter(|c| c.status != ProbeStatus::Pass) {
                let by = match c.evidence {
                    Evidence::Host => "host",
                    Evidence::Child => "child",
                };
                let _ = writeln!(
                    s,
                    "       - {} ({:?}, {by}): {}",
                    c.name, c.status, c.detail
                );
            }
        }
        let checks = self.probes.iter().flat_map(|p| &p.checks);
        let host = checks
            .clone()
            .filter(|c| c.evidence == Evidence::Host)
            .count();
        if !self.probes.is_empty() {
            let _ = writeln!(
                s,
                "\ntotal: {:.1} ms\nevidence: {host} of {} checks verified by the host, the rest reported by the probe child",
                self.total_duration_ms,
                checks.clone().count()
            );
        }
        let given_up: Vec<String> = self
            .probes
            .iter()
            .flat_map(|p| {
                p.checks
                    .iter()
                    .filter(|c| c.status == ProbeStatus::GivenUp)
                    .map(move |c| format!("{} {}", p.id, c.name))
            })
            .collect();
        if !given_up.is_empty() {
            let _ = writeln!(
                s,
                "given up by the backend on this host (its gives_up fact: {}), so these checks \
                 failed and do not count: {}",
                h.backend_facts
                    .get("gives_up")
                    .map(String::as_str)
                    .unwrap_or("none stated"),
                given_up.join(", ")
            );
        }
        let unsandboxed: Vec<String> = self
            .probes
            .iter()
            .flat_map(|p| {
                p.checks
                    .iter()
                    .filter(|c| c.passes_without_sandbox)
                    .map(move |c| format!("{} {}", p.id, c.name))
            })
            .collect();
        if !unsandboxed.is_empty() {
            let _ = writeln!(
                s,
                "pass without a sandbox on this host too (no evidence of confinement): {}",
                unsandboxed.join(", ")
            );
        }
        for p in self
            .probes
            .iter()
            .filter(|p| p.status == ProbeStatus::Unproven)
        {
            let accepted = self.accepted_unproven.contains(&p.id);
            let _ = writeln!(
                s,
                "{} UNPROVEN{}: {}",
                p.id,
                if accepted {
                    " (accepted by the operator)"
                } else {
                    " (accept it with --accept-unproven to run anyway)"
                },
                p.detail
            );
        }
        if self.availability.is_available()
            && !self.probes.is_empty()
            && !self.probes.iter().any(|p| p.id == ProbeId::P8)
        {
            let _ = writeln!(
                s,
                "P8 (egress allowlist) did not run: the backend does not claim it, so \
                 Network::Allow (cordon run --allow-host) is refused"
            );
        }
        let missing: Vec<String> = ProbeId::REQUIRED
            .iter()
            .filter(|id| !self.probes.iter().any(|p| p.id == **id))
            .map(ProbeId::to_string)
            .collect();
        if self.availability.is_available() && !missing.is_empty() {
            let _ = writeln!(
                s,
                "{} of the {} required probes did not run ({}): a partial run never conforms",
                missing.len(),
                ProbeId::REQUIRED.len(),
                missing.join(", ")
            );
        }
        let _ = write!(
            s,
            "{}",
            if self.conforms() {
                "CONFORMS"
            } else {
                "NOT CONFORMING"
            }
        );
        s
    }
}

/// A conformance suite that can judge a backend.
///
/// `cordon-conformance` provides the standard suite (P1–P8). Core consumes this
/// trait so that it does not depend on the probes; the runner re-checks the
/// report it gets back (backend name, all seven probes, all `Pass`) rather
/// than trusting a bare boolean.
#[async_trait::async_trait]
pub trait ConformanceSuite: Send + Sync {
    /// Runs every probe against `backend` on this host.
    async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport;
}

#[cfg(test)]
#[path = "report/tests.rs"]
mod tests;
