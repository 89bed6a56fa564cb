//! The Linux backend against the suite: with only its first-version layers
//! (`Layers::LEGACY`: user namespace, rlimits, no capabilities,
//! no_new_privs, Landlock, the seccomp deny-list) exactly the checks added
//! for issue #12's breaches fail and every other check passes; with all
//! its layers it conforms.
#![cfg(target_os = "linux")]

mod common;

use std::sync::Arc;

use cordon_backend_linux::{Layers, LinuxBackend};
use cordon_core::{ProbeStatus, SandboxBackend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_layers_fail_exactly_the_new_checks() {
    let backend = LinuxBackend::with_layers(Layers::LEGACY);
    let why = backend.availability().reason().map(str::to_string);
    assert!(
        why.is_none(),
        "the Linux backend must be available here: {why:?}"
    );
    let report = common::run(common::suite(), Arc::new(backend)).await;
    let as_root = common::is_root();
    let diff = common::differences(
        &report,
        &common::all_checks(as_root),
        &common::legacy_fails(as_root),
    );
    assert!(
        diff.is_empty(),
        "LEGACY (as {}) differs from the table:\n{}\n\nreport:\n{}",
        if as_root { "root" } else { "non-root" },
        diff.join("\n"),
        common::dump(&report)
    );
    for p in &report.probes {
        for c in &p.checks {
            assert_ne!(c.status, ProbeStatus::Unreachable, "{} {}", p.id, c.name);
        }
    }
    assert!(!report.conforms());
}

/// Fails until the backend's PID, IPC and mount namespaces and its seccomp
/// allowlist are in (issue #12): that is the point of the probes above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_backend_conforms() {
    let backend = LinuxBackend::new();
    let why = backend.availability().reason().map(str::to_string);
    assert!(
        why.is_none(),
        "the Linux backend must be available here: {why:?}"
    );
    let report = common::run(common::suite(), Arc::new(backend)).await;
    assert!(
        report.conforms(),
        "{}\n\nreport:\n{}",
        report.summary(),
        common::dump(&report)
    );
}
