//! P2 — no inherited secret: while the child is held, the host reads the
//! program's initial environment (`/proc/<pid>/environ`) and finds none of
//! the host's own variables outside the allowlist in it. The child cannot
//! read canary files outside the grants — one in the suite's temp dir, one
//! in a stand-in home dir, both world-readable in world-accessible dirs the
//! suite made (never the real `$HOME`, so the verdict does not depend on
//! who runs the suite or where `$HOME` points) — nor the host's
//! `/proc/<pid>/environ`. The explicitly granted variable and the package
//! file are readable (positive controls).

use cordon_core::{CheckResult, DEFAULT_ENV_ALLOWLIST, Evidence, ProbeId, ProbeStatus};

use crate::child::{self, Reporter, DENIED, PROC_PID_DENIED};
use crate::harness::{random_token, unreachable, verdict, ProbeContext, Hold, GRANTED_ENV};
use crate::inspect;
use crate::registry::{manifest, HostConditions, Manifest, Probe, ProbeArgs};

/// P2 in the registry (`probes/mod.rs`).
pub(crate) struct P2;

#[async_trait::async_trait]
impl Probe for P2 {
    fn id(&self) -> ProbeId {
        ProbeId::P2
    }

    fn title(&self) -> &'static str {
        "No inherited secret"
    }

    fn checks(&self, _: &HostConditions) -> Manifest {
        manifest(CHECKS)
    }

    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
        use std::os::unix::fs::PermissionsExt;
        let mut checks = Vec::new();
        let allowed: Vec<&str> = DEFAULT_ENV_ALLOWLIST
            .iter()
            .copied()
            .chain([GRANTED_ENV])
            .collect();
        let forbidden: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .filter(|k| !allowed.contains(&k.as_str()))
            .collect();

        let home_canary = ctx
            .home_dir
            .join(format!(".cordon-canary-{}", random_token()));
        let mut args = vec![
            ("granted".to_string(), ctx.granted_value.clone()),
            (
                "tmp_canary".to_string(),
                ctx.canary_file.display().to_string(),
            ),
            ("host_pid".to_string(), std::process::id().to_string()),
        ];
        // A new file, never through a link: the dir is world-writable.
        match crate::harness::create_new_file(&home_canary).and_then(|mut f| {
            use std::io::Write as _;
            f.write_all(b"home canary\n")?;
            f.set_permissions(std::fs::Permissions::from_mode(0o644))
        }) {
            Ok(()) => args.push(("home_canary".into(), home_canary.display().to_string())),
            Err(e) => checks.push(unreachable(
                "read-home-canary",
                format!("cannot plant {}: {e}", home_canary.display()),
            )),
        }
        let mut on_hold = |h: &Hold<'_>| vec![env_canary(h.pid, &forbidden)];
        let run = ctx.run_held("P2", &args, &mut on_hold).await;
        checks.extend(run.missed_hold("env", &["env-canary"]));
        let _ = std::fs::remove_file(&home_canary);
        checks.extend(run.into_checks());
        checks
    }

    fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
        r.hold("env");
        let granted = std::env::var(GRANTED_ENV).ok();
        r.control(
            "control-granted-env",
            if granted.as_deref() == args.get("granted").map(String::as_str) {
                Ok(())
            } else {
                Err(format!("{GRANTED_ENV} is {granted:?}"))
            },
        );
        match args.get("tmp_canary") {
            Some(p) => r.forbidden("read-tmp-canary", child::read_file(p), &DENIED),
            None => r.check(
                "read-tmp-canary",
                ProbeStatus::Unreachable,
                "no canary given",
            ),
        }
        if let Some(p) = args.get("home_canary") {
            r.forbidden("read-home-canary", child::read_file(p), &DENIED);
        }
        if let Some(pid) = args.get("host_pid") {
            r.forbidden(
                "read-host-environ",
                child::read_file(&format!("/proc/{pid}/environ")),
                &PROC_PID_DENIED,
            );
        }
    }
}

/// Every check P2 makes on any host.
const CHECKS: &[(&str, Evidence)] = &[
    ("env-canary", Evidence::Host),
    ("control-granted-env", Evidence::Child),
    ("read-tmp-canary", Evidence::Child),
    ("read-home-canary", Evidence::Child),
    ("read-host-environ", Evidence::Child),
];

/// At the hold: none of the host's variables outside the allowlist is in
/// the program's environment.
fn env_canary(pid: Option<i32>, forbidden: &[String]) -> CheckResult {
    const NAME: &str = "env-canary";
    if forbidden.is_empty() {
        return unreachable(
            NAME,
            "the host has no variable outside the allowlist to test with; call \
             dispatch_probe_child() at the top of main",
        );
    }
    let Some(pid) = pid else {
        return unreachable(NAME, "the program was not found by its token");
    };
    match inspect::environ_names(pid) {
        Ok(names) => {
            let leaked: Vec<&String> = forbidden.iter().filter(|f| names.contains(f)).collect();
            verdict(
                NAME,
                leaked.is_empty(),
                if leaked.is_empty() {
                    format!(
                        "none of {} host-only variables is in the program's environment",
                        forbidden.len()
                    )
                } else {
                    format!(
                        "host variables leaked: {}",
                        leaked
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            )
        }
        Err(e) => unreachable(NAME, format!("cannot read the program's environ: {e}")),
    }
}

