//! The host's side: plants what the child must not reach, spawns each probe
//! child through the production spawn path ([`Spawner::confined`]), and
//! turns the child's lines plus its own host-side checks into results.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::{
    CheckResult, ChildSpec, ExitOutcome, Limits, ProbeId, ProbeResult, ProbeStatus, RunnerConfig,
    RunningChild, SandboxBackend, Spawner,
};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::child::PROBE_ARG;

/// Name of the explicitly granted variable every probe child receives.
pub(crate) const GRANTED_ENV: &str = "CORDON_PROBE_GRANTED";

/// Everything the probes share for one suite run.
pub(crate) struct Ctx {
    pub spawner: Spawner,
    /// Suite-private temp dir (0755), removed at the end.
    pub root: tempfile::TempDir,
    pub pkg_dir: PathBuf,
    /// The probe executable, copied into the package dir.
    pub exe: PathBuf,
    pub package_file: PathBuf,
    pub canary_file: PathBuf,
    pub canary_content: Vec<u8>,
    pub granted_value: String,
    pub timeout: Duration,
    pub host_uid: u32,
}

/// Lines a probe child reported, and how it ended.
pub(crate) struct ChildRun {
    pub checks: Vec<CheckResult>,
    pub info: BTreeMap<String, String>,
    pub done: bool,
    pub outcome: Option<ExitOutcome>,
    pub stderr: String,
    /// Owner uid of `uid-marker` in the child's scratch dir, if it made one.
    pub marker_owner: Option<u32>,
}

impl ChildRun {
    /// The child's checks plus an `Unreachable` entry if it did not finish
    /// its report.
    pub fn into_checks(self) -> Vec<CheckResult> {
        let mut checks = self.checks;
        if !self.done {
            let why = match self.outcome {
                Some(ExitOutcome::DeadlineExceeded) => "timed out".to_string(),
                Some(o) => format!("ended ({o:?}) before reporting DONE"),
                None => "could not be waited for".to_string(),
            };
            checks.push(unreachable(
                "child-report",
                format!("probe child {why}; stderr: {}", self.stderr.trim()),
            ));
        }
        checks
    }
}

pub(crate) fn check(name: &str, status: ProbeStatus, detail: impl Into<String>) -> CheckResult {
    CheckResult {
        name: name.to_string(),
        status,
        detail: detail.into(),
        // Filled in by the suite in the next step.
        evidence: cordon_core::Evidence::Child,
        passes_without_sandbox: false,
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

impl Ctx {
    pub(crate) async fn new(
        backend: Arc<dyn SandboxBackend>,
        probe_exe: &Path,
        timeout: Duration,
        #[cfg(feature = "test-hooks")] hygiene: Option<cordon_core::HygieneOverrides>,
    ) -> std::io::Result<Ctx> {
        use std::os::unix::fs::PermissionsExt;
        let config = RunnerConfig {
            ceilings: Limits {
                deadline: Some(timeout),
                ..Limits::probe()
            },
            ..RunnerConfig::default()
        };
        #[cfg(feature = "test-hooks")]
        let spawner = match hygiene {
            Some(o) => Spawner::without_hygiene_for_tests(backend, config, o),
            None => Spawner::confined(backend, config),
        };
        #[cfg(not(feature = "test-hooks"))]
        let spawner = Spawner::confined(backend, config);

        // World-readable dirs, so that only the sandbox — not file
        // permissions — stands between the child and the canaries.
        let root = tempfile::Builder::new()
            .prefix("cordon-conformance-")
            .tempdir()?;
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(root.path(), open.clone())?;
        let pkg_dir = root.path().join("package");
        std::fs::create_dir(&pkg_dir)?;
        std::fs::set_permissions(&pkg_dir, open.clone())?;
        let exe = pkg_dir.join("cordon-probe");
        std::fs::copy(probe_exe, &exe)?;
        std::fs::set_permissions(&exe, open.clone())?;
        let package_file = pkg_dir.join("package-data.txt");
        std::fs::write(&package_file, b"package data\n")?;
        std::fs::set_permissions(&package_file, std::fs::Permissions::from_mode(0o644))?;
        let canary_dir = root.path().join("outside");
        std::fs::create_dir(&canary_dir)?;
        std::fs::set_permissions(&canary_dir, std::fs::Permissions::from_mode(0o777))?;
        let canary_file = canary_dir.join("secret.txt");
        let canary_content = format!("cordon canary {}\n", random_token()).into_bytes();
        std::fs::write(&canary_file, &canary_content)?;
        std::fs::set_permissions(&canary_file, std::fs::Permissions::from_mode(0o666))?;
        let root = root.path().canonicalize().map(|_| root)?;
        Ok(Ctx {
            spawner,
            pkg_dir: pkg_dir.canonicalize()?,
            exe: exe.canonicalize()?,
            package_file: package_file.canonicalize()?,
            canary_file: canary_file.canonicalize()?,
            canary_content,
            granted_value: format!("granted-{}", random_token()),
            timeout,
            host_uid: unsafe { libc::geteuid() },
            root,
        })
    }

    /// Spawns the probe child for `mode` with `key=value` arguments.
    pub(crate) fn spawn(
        &self,
        mode: &str,
        args: &[(String, String)],
        limits: Limits,
    ) -> Result<RunningChild, cordon_core::SpawnError> {
        let mut spec = ChildSpec::new(&self.exe)
            .arg(PROBE_ARG)
            .arg(mode)
            .arg(format!("package_file={}", self.package_file.display()))
            .args(args.iter().map(|(k, v)| format!("{k}={v}")))
            .env(GRANTED_ENV, &self.granted_value)
            .limits(limits);
        spec.package_dir = Some(self.pkg_dir.clone());
        spec.label = Some(format!("conformance {mode}"));
        self.spawner.spawn(&spec)
    }

    /// Spawns the probe child and collects its report.
    pub(crate) async fn run(&self, mode: &str, args: &[(String, String)]) -> ChildRun {
        match self.spawn(mode, args, Limits::default()) {
            Ok(child) => self.collect(child).await,
            Err(e) => ChildRun {
                checks: vec![unreachable(
                    "spawn",
                    format!("could not start probe child: {e}"),
                )],
                info: BTreeMap::new(),
                done: true,
                outcome: None,
                stderr: String::new(),
                marker_owner: None,
            },
        }
    }

    /// Reads the child's report to EOF (bounded by the timeout), then reaps it.
    pub(crate) async fn collect(&self, mut child: RunningChild) -> ChildRun {
        let mut run = ChildRun {
            checks: Vec::new(),
            info: BTreeMap::new(),
            done: false,
            outcome: None,
            stderr: String::new(),
            marker_owner: None,
        };
        if let Some(stdout) = child.stdout.take() {
            let mut lines = BufReader::new(stdout).lines();
            let deadline = tokio::time::Instant::now() + self.timeout + Duration::from_secs(1);
            while let Ok(Ok(Some(line))) =
                tokio::time::timeout_at(deadline, lines.next_line()).await
            {
                parse_line(&line, &mut run);
            }
        }
        run.marker_owner = {
            use std::os::unix::fs::MetadataExt;
            std::fs::symlink_metadata(child.scratch_dir().join("uid-marker"))
                .ok()
                .map(|m| m.uid())
        };
        run.outcome = child.wait().await.ok();
        run.stderr = String::from_utf8_lossy(&child.stderr_tail()).into_owned();
        run
    }
}

fn parse_line(line: &str, run: &mut ChildRun) {
    let mut parts = line.splitn(4, '\t');
    match parts.next() {
        Some("CHECK") => {
            let name = parts.next().unwrap_or("?");
            let status = match parts.next() {
                Some("pass") => ProbeStatus::Pass,
                Some("fail") => ProbeStatus::Fail,
                _ => ProbeStatus::Unreachable,
            };
            run.checks
                .push(check(name, status, parts.next().unwrap_or("").to_string()));
        }
        Some("INFO") => {
            if let (Some(k), Some(v)) = (parts.next(), parts.next()) {
                run.info.insert(k.to_string(), v.to_string());
            }
        }
        Some("DONE") => run.done = true,
        _ => run.checks.push(unreachable(
            "child-output",
            format!("unexpected line from probe child: {line:?}"),
        )),
    }
}

/// Folds checks into one probe result.
pub(crate) fn fold(id: ProbeId, checks: Vec<CheckResult>, started: Instant) -> ProbeResult {
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
        title: id.title().to_string(),
        status,
        detail,
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
    // SAFETY: getrandom writes at most 8 bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0) as u64;
        b = (t ^ std::process::id() as u64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Whether `pid` is a live (non-zombie) process.
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}
