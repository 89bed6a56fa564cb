//! Every probe must be able to fail: under the no-op backend each of P1–P7
//! reports `Fail`, and P2/P3's hygiene checks fail once hygiene is off.

use std::sync::Arc;

use cordon_backend_noop::NoopBackend;
use cordon_conformance::{ProbeExecutable, StandardSuite};
use cordon_core::{ConformanceReport, ConformanceSuite, HygieneOverrides, ProbeId, ProbeStatus};

fn suite() -> StandardSuite {
    StandardSuite::new().with_probe_executable(ProbeExecutable::Path(
        env!("CARGO_BIN_EXE_cordon-probe").into(),
    ))
}

fn check_status(report: &ConformanceReport, probe: ProbeId, check: &str) -> ProbeStatus {
    let p = report
        .probes
        .iter()
        .find(|p| p.id == probe)
        .expect("probe ran");
    p.checks
        .iter()
        .find(|c| c.name == check)
        .unwrap_or_else(|| panic!("{probe} has no check {check}: {:#?}", p.checks))
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_backend_fails_all_seven_probes() {
    let report = suite().run(Arc::new(NoopBackend)).await;
    let text = report.summary();
    assert_eq!(report.probes.len(), 7, "{text}");
    for p in &report.probes {
        assert_eq!(
            p.status,
            ProbeStatus::Fail,
            "{} should fail under noop:\n{text}\n{:#?}",
            p.id,
            p.checks
        );
    }
    assert!(!report.conforms());
    // The positive controls still worked: failures are breaches, not a broken probe.
    for p in &report.probes {
        for c in p.checks.iter().filter(|c| c.name.starts_with("control-")) {
            assert_eq!(
                c.status,
                ProbeStatus::Pass,
                "{} {}: {}",
                p.id,
                c.name,
                c.detail
            );
        }
    }
    // Host-side checks saw the breaches too.
    assert_eq!(
        check_status(&report, ProbeId::P4, "host-tcp4-listener"),
        ProbeStatus::Fail
    );
    assert_eq!(
        check_status(&report, ProbeId::P5, "host-out_tmp-absent"),
        ProbeStatus::Fail
    );
    assert_eq!(
        check_status(&report, ProbeId::P6, "deadline-kills-tree"),
        ProbeStatus::Fail
    );
    // With hygiene on, the env and fd checks themselves pass under noop...
    assert_eq!(
        check_status(&report, ProbeId::P2, "env-canary"),
        ProbeStatus::Pass
    );
    assert_eq!(
        check_status(&report, ProbeId::P3, "inherited-fds"),
        ProbeStatus::Pass
    );
    // ...and the JSON round-trips.
    let json = serde_json::to_string(&report).unwrap();
    let back: ConformanceReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back.probes.len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_and_p3_fail_when_hygiene_is_off() {
    let report = suite()
        .only(vec![ProbeId::P2, ProbeId::P3])
        .without_hygiene_for_tests(HygieneOverrides {
            inherit_env: true,
            keep_inherited_fds: true,
        })
        .run(Arc::new(NoopBackend))
        .await;
    assert_eq!(
        check_status(&report, ProbeId::P2, "env-canary"),
        ProbeStatus::Fail,
        "{}",
        report.summary()
    );
    assert_eq!(
        check_status(&report, ProbeId::P3, "inherited-fds"),
        ProbeStatus::Fail,
        "{}",
        report.summary()
    );
    assert!(!report.conforms(), "a partial run never conforms");
}
