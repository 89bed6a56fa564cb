//! The baseline: every probe also runs once with no sandbox at all (same
//! harness, same hygiene, a private backend whose `wrap` does nothing), and
//! each check that passes there too is marked `passes_without_sandbox`.
//!
//! Such a check passes on this host because the kernel, file modes or the
//! runner's hygiene refuse the action, not the backend: its passing under a
//! backend is no evidence of confinement, and the report says so.
//!
//! The baseline runs the same hostile probe code unconfined, so it must be
//! safe: every target a probe aims at is one the suite created for that
//! very run (its own sacrificial process, listeners, files, IPC objects,
//! pty), never anything else of the host.

use cordon_core::ChildCommand;
use std::collections::BTreeMap;

use cordon_core::{
    Availability, ProbeResult, ProbeStatus, SandboxBackend, SandboxPolicy, WrapError,
};

/// A backend that confines nothing. Private to the suite: it exists only
/// to run the baseline, and no runner can ever be given it.
pub(crate) struct Unconfined;

impl SandboxBackend for Unconfined {
    fn name(&self) -> &str {
        "unconfined-baseline"
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn host_facts(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    fn wrap(
        &self,
        _cmd: &mut ChildCommand,
        _policy: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        Ok(None)
    }
}

/// Marks each check of `real` that also passed in `baseline` (same probe,
/// same check name). Positive controls are never marked: passing without a
/// sandbox is what they are for.
pub(crate) fn mark(real: &mut [ProbeResult], baseline: &[ProbeResult]) {
    for probe in real {
        let Some(base) = baseline.iter().find(|b| b.id == probe.id) else {
            continue;
        };
        for c in &mut probe.checks {
            c.passes_without_sandbox = !c.name.starts_with("control-")
                && base
                    .checks
                    .iter()
                    .any(|b| b.name == c.name && b.status == ProbeStatus::Pass);
        }
    }
}
