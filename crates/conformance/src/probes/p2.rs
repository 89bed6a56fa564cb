//! P2 — no inherited secret: host-only environment variables are absent;
//! canary files outside the grants (host temp dir and `$HOME`) and the
//! host's `/proc/<pid>/environ` cannot be read; the explicitly granted
//! variable and the package file can (positive controls).

use std::collections::BTreeMap;

use cordon_core::{CheckResult, ProbeStatus, DEFAULT_ENV_ALLOWLIST};

use crate::child::{self, Reporter};
use crate::harness::{random_token, unreachable, Ctx, GRANTED_ENV};

pub(crate) async fn host(ctx: &Ctx) -> Vec<CheckResult> {
    let mut checks = Vec::new();
    let allowed: Vec<&str> = DEFAULT_ENV_ALLOWLIST
        .iter()
        .copied()
        .chain([GRANTED_ENV])
        .collect();
    let forbidden: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| !allowed.contains(&k.as_str()) && !k.contains([',', '=']))
        .collect();

    // A canary in $HOME, readable by anyone, so only the sandbox stops it.
    let home_canary = std::env::var_os("HOME")
        .map(|h| std::path::PathBuf::from(h).join(format!(".cordon-canary-{}", random_token())));
    let home_planted = match &home_canary {
        Some(p) => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(p, b"home canary\n")
                .and_then(|_| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644)))
                .map_err(|e| format!("cannot plant {}: {e}", p.display()))
        }
        None => Err("HOME is not set".to_string()),
    };
    let mut args = vec![
        ("forbidden_env".to_string(), forbidden.join(",")),
        ("granted".to_string(), ctx.granted_value.clone()),
        (
            "tmp_canary".to_string(),
            ctx.canary_file.display().to_string(),
        ),
        ("host_pid".to_string(), std::process::id().to_string()),
    ];
    match (&home_planted, &home_canary) {
        (Ok(()), Some(p)) => args.push(("home_canary".into(), p.display().to_string())),
        (Err(e), _) => checks.push(unreachable(
            "home-canary",
            format!("{e}; set HOME to a writable directory"),
        )),
        _ => {}
    }
    let run = ctx.run("P2", &args).await;
    if let Some(p) = &home_canary {
        let _ = std::fs::remove_file(p);
    }
    checks.extend(run.into_checks());
    checks
}

pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let forbidden: Vec<&str> = args
        .get("forbidden_env")
        .map(|s| s.split(',').filter(|n| !n.is_empty()).collect())
        .unwrap_or_default();
    if forbidden.is_empty() {
        r.check(
            "env-canary",
            ProbeStatus::Unreachable,
            "the host has no variable outside the allowlist to test with; call dispatch_probe_child() at the top of main",
        );
    } else {
        let leaked: Vec<&str> = forbidden
            .iter()
            .copied()
            .filter(|n| std::env::var_os(n).is_some())
            .collect();
        if leaked.is_empty() {
            r.check(
                "env-canary",
                ProbeStatus::Pass,
                format!("none of {} host-only variables is present", forbidden.len()),
            );
        } else {
            r.check(
                "env-canary",
                ProbeStatus::Fail,
                format!("host variables leaked: {}", leaked.join(", ")),
            );
        }
    }
    let granted = std::env::var(GRANTED_ENV).ok();
    r.control(
        "control-granted-env",
        if granted.as_deref() == args.get("granted").map(String::as_str) {
            Ok(())
        } else {
            Err(format!("{GRANTED_ENV} is {granted:?}"))
        },
    );
    let denied = [libc::EACCES, libc::EPERM];
    if let Some(p) = args.get("tmp_canary") {
        r.forbidden("read-tmp-canary", child::read_file(p), &denied);
    }
    if let Some(p) = args.get("home_canary") {
        r.forbidden("read-home-canary", child::read_file(p), &denied);
    }
    if let Some(pid) = args.get("host_pid") {
        r.forbidden(
            "read-host-environ",
            child::read_file(&format!("/proc/{pid}/environ")),
            &denied,
        );
    }
}
