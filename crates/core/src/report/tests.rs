//! Unit tests of `report.rs`.

use super::*;

fn check(name: &str, status: ProbeStatus) -> CheckResult {
    CheckResult {
        name: name.into(),
        status,
        detail: String::new(),
        evidence: Evidence::Child,
        passes_without_sandbox: false,
        discriminates: true,
    }
}

fn probe(id: ProbeId, status: ProbeStatus) -> ProbeResult {
    ProbeResult {
        id,
        title: format!("title of {id}"),
        status,
        detail: String::new(),
        checks_expected: 1,
        checks: vec![check("c", status)],
        duration_ms: 1.0,
    }
}

fn report(statuses: &[ProbeStatus]) -> ConformanceReport {
    let probes = ProbeId::REQUIRED
        .iter()
        .zip(statuses)
        .map(|(id, s)| probe(*id, *s))
        .collect();
    ConformanceReport::new(
        "x",
        Availability::Available,
        HostFacts::default(),
        probes,
        7.0,
    )
}

#[test]
fn conforms_needs_all_seven_pass() {
    assert!(report(&[ProbeStatus::Pass; 7]).conforms());
    assert!(!report(&[ProbeStatus::Pass; 6]).conforms());
    let mut s = [ProbeStatus::Pass; 7];
    s[3] = ProbeStatus::Unreachable;
    assert!(!report(&s).conforms());
}

#[test]
fn every_declared_check_must_be_reported() {
    let mut r = report(&[ProbeStatus::Pass; 7]);
    assert!(r.conforms());
    r.probes[2].checks_expected = 2;
    let r = ConformanceReport::new(
        "x",
        Availability::Available,
        HostFacts::default(),
        r.probes,
        1.0,
    );
    assert!(
        !r.conforms(),
        "a probe that reported fewer checks than declared"
    );
    // A report from before manifests (0 declared) never conforms.
    let mut old = report(&[ProbeStatus::Pass; 7]);
    for p in &mut old.probes {
        p.checks_expected = 0;
    }
    let old = ConformanceReport::new(
        "x",
        Availability::Available,
        HostFacts::default(),
        old.probes,
        1.0,
    );
    assert!(!old.conforms());
}

#[test]
fn an_unproven_probe_conforms_only_when_accepted() {
    let mut s = [ProbeStatus::Pass; 7];
    s[6] = ProbeStatus::Unproven;
    let r = report(&s);
    assert!(!r.conforms());
    assert_eq!(r.unproven(), vec![ProbeId::P7]);
    assert!(r.summary().contains("P7 UNPROVEN"), "{}", r.summary());
    let r = r.accepting_unproven(vec![ProbeId::P7]);
    assert!(r.conforms() && r.unproven().is_empty());
    assert!(r.summary().contains("accepted by the operator"));
    // Accepting another probe does not help; the JSON keeps it.
    let json = serde_json::to_string(&r).unwrap();
    let back: ConformanceReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back.accepted_unproven, vec![ProbeId::P7]);
    assert!(!report(&s).accepting_unproven(vec![ProbeId::P6]).conforms());
}

#[test]
fn a_claimed_probe_must_pass_once_after_the_seven() {
    let with = |extra: &[(ProbeId, ProbeStatus)]| {
        let mut r = report(&[ProbeStatus::Pass; 7]);
        r.probes.extend(extra.iter().map(|(id, s)| probe(*id, *s)));
        ConformanceReport::new(
            "x",
            Availability::Available,
            HostFacts::default(),
            r.probes,
            1.0,
        )
    };
    let plain = with(&[]);
    assert!(plain.conforms() && !plain.proves_egress_allowlist());
    assert!(plain
        .summary()
        .contains("P8 (egress allowlist) did not run"));
    let proven = with(&[(ProbeId::P8, ProbeStatus::Pass)]);
    assert!(proven.conforms() && proven.proves_egress_allowlist());
    for bad in [
        vec![(ProbeId::P8, ProbeStatus::Fail)],
        vec![(ProbeId::P8, ProbeStatus::Unreachable)],
        vec![
            (ProbeId::P8, ProbeStatus::Pass),
            (ProbeId::P8, ProbeStatus::Pass),
        ],
        vec![(ProbeId::P1, ProbeStatus::Pass)],
    ] {
        let r = with(&bad);
        assert!(!r.conforms() && !r.proves_egress_allowlist(), "{bad:?}");
    }
    // P8 alone (a partial run) proves nothing.
    let alone = ConformanceReport::new(
        "x",
        Availability::Available,
        HostFacts::default(),
        vec![probe(ProbeId::P8, ProbeStatus::Pass)],
        1.0,
    );
    assert!(!alone.proves_egress_allowlist());
    assert_eq!(ProbeId::parse("p8"), Some(ProbeId::P8));
}

#[test]
fn json_round_trip_and_tamper_detection() {
    let r = report(&[ProbeStatus::Pass; 7]);
    let json = serde_json::to_string(&r).unwrap();
    let back: ConformanceReport = serde_json::from_str(&json).unwrap();
    assert_eq!(back, r);
    let tampered = json.replace("\"status\":\"pass\"", "\"status\":\"fail\"");
    assert!(serde_json::from_str::<ConformanceReport>(&tampered).is_err());
}

#[test]
fn reports_without_evidence_fields_still_read() {
    let r = report(&[ProbeStatus::Pass; 7]);
    let mut json: serde_json::Value = serde_json::to_value(&r).unwrap();
    json["probes"][0]["checks"] = serde_json::json!([
        {"name": "old", "status": "pass", "detail": ""}
    ]);
    let back: ConformanceReport = serde_json::from_value(json).unwrap();
    let c = &back.probes[0].checks[0];
    assert_eq!(c.evidence, Evidence::Child);
    assert!(!c.passes_without_sandbox);
}

#[test]
fn summary_lists_checks_that_pass_without_a_sandbox() {
    let mut r = report(&[ProbeStatus::Pass; 7]);
    r.probes[3].checks = vec![CheckResult {
        name: "icmp-socket".into(),
        status: ProbeStatus::Pass,
        detail: String::new(),
        evidence: Evidence::Child,
        passes_without_sandbox: true,
        discriminates: false,
    }];
    let text = r.summary();
    assert!(text.contains("P4 icmp-socket"), "{text}");
    assert!(
        // The fixture's other six probes report one child check each.
        text.contains("0 of 7 checks verified by the host"),
        "{text}"
    );
}

#[test]
fn summary_names_failures() {
    let mut s = [ProbeStatus::Pass; 7];
    s[0] = ProbeStatus::Fail;
    let text = report(&s).summary();
    assert!(text.contains("P1"));
    assert!(text.ends_with("NOT CONFORMING"));
}
