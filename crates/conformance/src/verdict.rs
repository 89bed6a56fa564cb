//! How checks become verdicts: the constructors of a host-made
//! [`CheckResult`]; the fold of a probe's checks into its one status (any
//! `Fail` fails it; else any `Unreachable`, or no check at all, makes it
//! `Unreachable`); and the mark each check gets from the same check of the
//! unconfined baseline ([`mark`]: it *discriminates* when it failed there,
//! and a passing probe none of whose checks discriminates is `Unproven`).
//! With `expected.rs` (the manifest a run is held to) this is where a
//! probe is judged. Portable: the harness uses it on Linux, and the suite
//! elsewhere, where every probe is `Unreachable`.

use std::time::Instant;

use cordon_core::{CheckResult, Evidence, ProbeId, ProbeResult, ProbeStatus};

/// A host-made check result.
pub(crate) fn check(name: &str, status: ProbeStatus, detail: impl Into<String>) -> CheckResult {
    CheckResult {
        name: name.to_string(),
        status,
        detail: detail.into(),
        evidence: Evidence::Host,
        passes_without_sandbox: false,
        discriminates: false,
    }
}

pub(crate) fn pass(name: &str, detail: impl Into<String>) -> CheckResult {
    check(name, ProbeStatus::Pass, detail)
}

pub(crate) fn fail(name: &str, detail: impl Into<String>) -> CheckResult {
    check(name, ProbeStatus::Fail, detail)
}

pub(crate) fn unreachable(name: &str, detail: impl Into<String>) -> CheckResult {
    check(name, ProbeStatus::Unreachable, detail)
}

/// `pass` if `ok`, else `fail`, with one detail.
pub(crate) fn verdict(name: &str, ok: bool, detail: impl Into<String>) -> CheckResult {
    check(
        name,
        if ok {
            ProbeStatus::Pass
        } else {
            ProbeStatus::Fail
        },
        detail,
    )
}

/// Folds checks into one probe result; `checks_expected` is the size of
/// the probe's manifest on this host (`expected.rs`).
pub(crate) fn fold(
    id: ProbeId,
    title: &str,
    checks: Vec<CheckResult>,
    checks_expected: usize,
    started: Instant,
) -> ProbeResult {
    let failing: Vec<&CheckResult> = checks
        .iter()
        .filter(|c| c.status == ProbeStatus::Fail)
        .collect();
    let unsure: Vec<&CheckResult> = checks
        .iter()
        .filter(|c| c.status == ProbeStatus::Unreachable)
        .collect();
    let (status, detail) = if checks.is_empty() {
        (ProbeStatus::Unreachable, "no check ran".to_string())
    } else if !failing.is_empty() {
        (ProbeStatus::Fail, describe(&failing))
    } else if !unsure.is_empty() {
        (ProbeStatus::Unreachable, describe(&unsure))
    } else {
        (ProbeStatus::Pass, String::new())
    };
    ProbeResult {
        id,
        title: title.to_string(),
        status,
        detail,
        checks_expected,
        checks,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
    }
}

fn describe(checks: &[&CheckResult]) -> String {
    checks
        .iter()
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A random token for canary names and values.
pub(crate) fn random_token() -> String {
    let mut b = [0u8; 8];
    // SAFETY: getentropy writes exactly 8 bytes into b (at most 256 are
    // allowed), or fails.
    let n = unsafe { libc::getentropy(b.as_mut_ptr().cast(), b.len()) };
    if n != 0 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0) as u64;
        b = (t ^ std::process::id() as u64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Marks each check of `real` by what the same check did in `baseline`
/// (same probe, same check name): `passes_without_sandbox` when it passed
/// there too, `discriminates` when it failed there. Positive controls are
/// never marked: passing without a sandbox is what they are for. A probe
/// that passed with no discriminating check becomes `Unproven`: nothing
/// shows the backend confining on this host.
pub(crate) fn mark(real: &mut [ProbeResult], baseline: &[ProbeResult]) {
    for probe in real {
        let base = baseline.iter().find(|b| b.id == probe.id);
        for c in &mut probe.checks {
            // A given-up check failed: it shows nothing either way.
            let control = c.name.starts_with("control-") || c.status == ProbeStatus::GivenUp;
            let there = base.and_then(|b| b.checks.iter().find(|x| x.name == c.name));
            c.passes_without_sandbox =
                !control && there.is_some_and(|b| b.status == ProbeStatus::Pass);
            c.discriminates = !control && there.is_some_and(|b| b.status == ProbeStatus::Fail);
        }
        if probe.status == ProbeStatus::Pass && !probe.checks.iter().any(|c| c.discriminates) {
            probe.status = ProbeStatus::Unproven;
            let by = crate::host_state::HostConfinement::current()
                .describe()
                .unwrap_or_else(|| "the kernel, file modes or the runner's hygiene".into());
            probe.detail = format!(
                "every check passed, but each passed with no sandbox on this host too, so \
                 none shows the backend confining: what {} tests is provided here by {by}",
                probe.id
            );
        }
    }
}
