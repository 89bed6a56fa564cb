//! Tests of the limits' narrowing and scopes.
use super::*;

#[test]
fn narrow_takes_lower_and_fills_unset() {
    let ceil = Limits::default_ceilings();
    let req = Limits {
        max_processes: Some(8),
        ..Limits::default()
    };
    let got = ceil.narrow(&req).unwrap();
    assert_eq!(got.max_processes, Some(8));
    assert_eq!(got.memory_bytes, ceil.memory_bytes);
}

#[test]
fn narrow_rejects_raise_naming_the_limit() {
    let ceil = Limits::default_ceilings();
    let req = Limits {
        open_files: Some(100_000),
        ..Limits::default()
    };
    let err = ceil.narrow(&req).unwrap_err();
    assert_eq!(err.limit, "open_files");
    assert!(err.to_string().contains("exceeds the runner's ceiling"));
}

#[test]
fn scopes_narrow_to_the_wider_and_a_weaker_host_refuses() {
    let mut ceil = Limits::default_ceilings();
    ceil.scopes.memory = LimitScope::Sandbox;
    let req = Limits {
        memory_bytes: Some(64 << 20),
        scopes: LimitScopes::PER_PROCESS,
        ..Limits::default()
    };
    let got = ceil.narrow(&req).unwrap();
    assert_eq!(got.memory_bytes, Some(64 << 20));
    assert_eq!(got.scopes.memory, LimitScope::Sandbox);
    // Unset in the request: the ceiling's (per process) stands.
    assert_eq!(got.scopes.cpu, LimitScope::PerProcess);
    let facts: std::collections::BTreeMap<String, String> = [
        (
            "limit_memory".to_string(),
            "per-process: RLIMIT_DATA".to_string(),
        ),
        ("limit_cpu".to_string(), "sandbox: cgroup".to_string()),
    ]
    .into();
    let held = LimitScopes::held(&facts, true);
    assert_eq!(held.memory, LimitScope::PerProcess);
    assert_eq!(held.cpu, LimitScope::Sandbox);
    let err = got.check_scopes(held, "linux", &facts).unwrap_err();
    assert_eq!(err.limit, "memory_bytes");
    assert!(err.to_string().contains("RLIMIT_DATA"), "{err}");
    let mut ok = got;
    ok.scopes.memory = LimitScope::PerProcess;
    assert_eq!(ok.check_scopes(held, "linux", &facts), Ok(()));
    // A kept scratch is on the host's disk: per file only.
    assert_eq!(
        LimitScopes::held(&facts, false).disk,
        LimitScope::PerProcess
    );
}

#[test]
fn narrow_allows_anything_under_no_ceiling() {
    let req = Limits {
        cpu_ms: Some(1_000_000),
        ..Limits::default()
    };
    assert_eq!(
        Limits::default().narrow(&req).unwrap().cpu_ms,
        Some(1_000_000)
    );
}
