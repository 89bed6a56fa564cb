//! The host's side: plants what the child must not reach, spawns each probe
//! child through the production spawn path ([`Spawner::confined`]), answers
//! its `HOLD`s after inspecting it from outside, and turns the child's lines
//! plus its own host-side checks into results.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cordon_core::{
    CheckResult, ChildSpec, Evidence, ExitOutcome, Limits, Network, ProbeId, ProbeStatus,
    RunnerConfig, RunningChild, Spawner,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::child::PROBE_ARG;
use crate::inspect::{self, TOKEN_ARG};
use crate::kernel::KernelFacts;
use crate::scope::LimitScopes;
pub(crate) use crate::verdict::{check, fail, pass, random_token, unreachable, verdict};

/// Name of the explicitly granted variable every probe child receives.
pub(crate) const GRANTED_ENV: &str = "CORDON_PROBE_GRANTED";

/// The uid and gid the sandboxed program runs as, as the host sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// Everything the probes share for one suite run, on one side (the
/// backend's, or the unconfined baseline's): the spawner, the suite's
/// directories and the targets planted in them, the host's facts. A
/// probe's [`host`](crate::Probe::host) side starts its child through it
/// ([`run_child`](Self::run_child)).
pub struct ProbeContext {
    pub(crate) spawner: Spawner,
    /// Suite-private temp dir (0755), removed at the end.
    pub(crate) root: tempfile::TempDir,
    pub(crate) pkg_dir: PathBuf,
    /// The probe executable, copied into the package dir.
    pub(crate) exe: PathBuf,
    pub(crate) package_file: PathBuf,
    /// A suite dir outside every grant, where the canaries and other
    /// targets sit: world-writable (0777) for the backend's run, so that
    /// only the sandbox, not file modes, stands between them and the
    /// child; 0700 for the baseline's, whose unconfined child (root, on a
    /// root host) must not work on anything another local user could have
    /// put there (a symlink swapped in for a target). Host code plants in
    /// it without following links ([`create_new_file`]).
    pub(crate) outside_dir: PathBuf,
    /// A stand-in for a home directory (under the suite dir, the same mode
    /// as `outside_dir`), so no probe depends on `$HOME`.
    pub(crate) home_dir: PathBuf,
    pub(crate) canary_file: PathBuf,
    pub(crate) canary_content: Vec<u8>,
    pub(crate) granted_value: String,
    pub(crate) timeout: Duration,
    pub(crate) host_uid: u32,
    /// Who the sandboxed program runs as (the backend's `sandbox_uid` fact,
    /// else the host's own ids).
    pub(crate) sandbox: Ids,
    /// Which probed syscalls the running kernel has.
    pub(crate) kernel: KernelFacts,
    /// The scope the backend claims for each limit (P6 checks each at it).
    pub(crate) scopes: LimitScopes,
    /// True for the unconfined baseline's context (see `baseline.rs`).
    pub(crate) baseline: bool,
    /// The watchdog that kills what bears the suite's tokens if the host
    /// dies mid-run (`watchdog.rs`): the baseline's unconfined probe
    /// processes above all. Nothing bearing a token is started before the
    /// token is registered there ([`ProbeContext::guard`]).
    pub(crate) watchdog: Option<std::sync::Arc<crate::watchdog::Watchdog>>,
    /// What adds a check on this host (`expected.rs`).
    pub(crate) conditions: crate::expected::HostConditions,
    /// What the backend gives up on this host (`given_up.rs`); nothing
    /// for the baseline.
    pub(crate) gives_up: crate::given_up::GivenUp,
}

/// A started probe child and the token that finds it in `/proc`.
pub(crate) struct Spawned {
    pub child: RunningChild,
    pub token: String,
}

/// What the host sees at one `HOLD`.
pub(crate) struct Hold<'a> {
    /// The label the child gave.
    pub label: &'a str,
    /// The program's host pid, found by its token; `None` if it cannot be
    /// found (every check of the hold is then `Unreachable`).
    pub pid: Option<i32>,
    /// The child's scratch dir, as a host path.
    pub scratch: &'a Path,
    /// The child's token.
    pub token: &'a str,
}

/// The host's answer to a `HOLD`: checks it made while the child waited.
pub(crate) type OnHold<'a> = &'a mut (dyn FnMut(&Hold<'_>) -> Vec<CheckResult> + Send);

/// Lines a probe child reported, and how it ended.
pub struct ChildRun {
    /// The child's token (empty if it could not be started).
    pub(crate) token: String,
    pub(crate) checks: Vec<CheckResult>,
    pub(crate) info: BTreeMap<String, String>,
    /// Labels of the `HOLD`s the host answered.
    pub(crate) held: BTreeSet<String>,
    pub(crate) done: bool,
    pub(crate) outcome: Option<ExitOutcome>,
    pub(crate) stderr: String,
    /// The backend's sandbox-wide memory limit killed a process of the
    /// child's sandbox (a cgroup's OOM event, as the runner sees it).
    pub(crate) memory_limit_hit: bool,
    /// What the runner's sandbox-wide CPU watch saw, if it ran.
    pub(crate) cpu_watch: Option<cordon_core::CpuWatchStats>,
    /// Every `INFO` line with when the host read it (no earlier than the
    /// child wrote it).
    pub(crate) timeline: Vec<(std::time::Instant, String, String)>,
}

impl ChildRun {
    fn new() -> Self {
        ChildRun {
            token: String::new(),
            checks: Vec::new(),
            info: BTreeMap::new(),
            held: BTreeSet::new(),
            done: false,
            outcome: None,
            stderr: String::new(),
            memory_limit_hit: false,
            cpu_watch: None,
            timeline: Vec::new(),
        }
    }

    /// The child's checks plus an `Unreachable` entry if it did not finish
    /// its report, or did not exit cleanly after it.
    pub fn into_checks(self) -> Vec<CheckResult> {
        let mut checks = self.checks;
        if self.done && self.outcome != Some(ExitOutcome::Exited(0)) {
            checks.push(unreachable(
                "child-exit",
                format!(
                    "probe child reported DONE but then ended {:?}; stderr: {}",
                    self.outcome,
                    self.stderr.trim()
                ),
            ));
        }
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

    /// `Unreachable` results for host checks `names` if the child never
    /// reached hold `label` (so they were never made).
    pub(crate) fn missed_hold(&self, label: &str, names: &[&str]) -> Vec<CheckResult> {
        if self.held.contains(label) {
            return Vec::new();
        }
        names
            .iter()
            .map(|n| unreachable(n, format!("the child never reached hold `{label}`")))
            .collect()
    }
}

fn mkdir_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

fn write_mode(path: &Path, content: &[u8], mode: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt;
    let mut f = create_new_file(path)?;
    f.write_all(content)?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Creates `path` as a new file, never through a link: it fails if any
/// entry is there already (another local user's symlink in a
/// world-writable target dir, say), so what the host then does on the
/// returned fd (write, `fchmod`, `fchown`, xattrs, times) lands on the
/// file it made.
pub(crate) fn create_new_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(path)
}

impl ProbeContext {
    /// Prepares the suite dir: the package dir with a copy of the probe
    /// executable, the world-accessible dirs holding the targets, and the
    /// dir the children's scratch dirs are made in, which `spawner` is
    /// given. The suite dir is registered with `watchdog` before it is
    /// made, so that it cannot outlive this process, nor can the scratch
    /// dirs in it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        spawner: impl FnOnce(PathBuf) -> Spawner,
        watchdog: Option<std::sync::Arc<crate::watchdog::Watchdog>>,
        probe_exe: &Path,
        timeout: Duration,
        sandbox: Ids,
        kernel: KernelFacts,
        scopes: LimitScopes,
        baseline: bool,
    ) -> std::io::Result<ProbeContext> {
        // World-readable dirs, so that only the sandbox — not file
        // permissions — stands between the child and the canaries.
        let name = format!("cordon-conformance-{}", random_token());
        if let Some(w) = &watchdog {
            w.guard_dir(&std::env::temp_dir().join(&name))?;
        }
        let root = tempfile::Builder::new()
            .prefix(&name)
            .rand_bytes(0)
            .tempdir()?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))?;
        }
        // The children's scratch dirs: removed with the suite dir however
        // this process ends. Sticky and world-writable, as the temp dir
        // they would otherwise be made in.
        let scratch_base = root.path().join("scratch");
        mkdir_mode(&scratch_base, 0o1777)?;
        let pkg_dir = root.path().join("package");
        mkdir_mode(&pkg_dir, 0o755)?;
        let exe = pkg_dir.join("cordon-probe");
        std::fs::copy(probe_exe, &exe)?;
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
        }
        let package_file = pkg_dir.join("package-data.txt");
        write_mode(&package_file, b"package data\n", 0o644)?;
        let targets_mode = if baseline { 0o700 } else { 0o777 };
        let outside_dir = root.path().join("outside");
        mkdir_mode(&outside_dir, targets_mode)?;
        let home_dir = root.path().join("home");
        mkdir_mode(&home_dir, targets_mode)?;
        let canary_file = outside_dir.join("secret.txt");
        let canary_content = format!("cordon canary {}\n", random_token()).into_bytes();
        write_mode(&canary_file, &canary_content, 0o666)?;
        let root = root.path().canonicalize().map(|_| root)?;
        let conditions = crate::expected::HostConditions::of_host(&scopes);
        Ok(ProbeContext {
            spawner: spawner(scratch_base),
            pkg_dir: pkg_dir.canonicalize()?,
            exe: exe.canonicalize()?,
            package_file: package_file.canonicalize()?,
            outside_dir: outside_dir.canonicalize()?,
            home_dir: home_dir.canonicalize()?,
            canary_file: canary_file.canonicalize()?,
            canary_content,
            granted_value: format!("granted-{}", random_token()),
            timeout,
            // SAFETY: geteuid has no preconditions.
            host_uid: unsafe { libc::geteuid() },
            sandbox,
            kernel,
            scopes,
            baseline,
            watchdog,
            conditions,
            gives_up: Default::default(),
            root,
        })
    }

    /// Registers `token` with the suite's watchdog (if it has one) before
    /// anything bearing it starts: if this process dies, the watchdog
    /// kills every process bearing it.
    pub(crate) fn guard(&self, token: &str) -> Result<(), String> {
        match &self.watchdog {
            Some(w) => w
                .guard(token)
                .map_err(|e| format!("cannot register {token} with the suite's watchdog: {e}")),
            None => Ok(()),
        }
    }

    /// Registers a file a probe's child may make in the host's temp dir
    /// (`cordon-p5-*`) with the watchdog, so that it cannot outlive this
    /// process: the host removes it after the probe, the watchdog if the
    /// host dies first.
    pub(crate) fn guard_path(&self, path: &Path) -> Result<(), String> {
        match &self.watchdog {
            Some(w) => w.guard_path(path).map_err(|e| {
                format!(
                    "cannot register {} with the suite's watchdog: {e}",
                    path.display()
                )
            }),
            None => Ok(()),
        }
    }

    /// Tells the watchdog the ids a program runs as, so that it can remove
    /// the IPC objects of theirs under the suite's tokens should the host
    /// die.
    pub(crate) fn guard_ids(&self, ids: Ids) -> Result<(), String> {
        match &self.watchdog {
            Some(w) => w
                .guard_ids(ids)
                .map_err(|e| format!("cannot register ids with the suite's watchdog: {e}")),
            None => Ok(()),
        }
    }

    /// Spawns the probe child for `mode` with `key=value` arguments and a
    /// fresh token, under `limits` (its deadline the per-probe timeout
    /// unless `limits` has one).
    pub(crate) fn spawn(
        &self,
        mode: &str,
        args: &[(String, String)],
        limits: Limits,
    ) -> Result<Spawned, cordon_core::SpawnError> {
        self.spawn_on(&self.spawner, mode, args, limits)
    }

    /// [`ProbeContext::spawn`] with `spawner` instead of the context's own.
    fn spawn_on(
        &self,
        spawner: &Spawner,
        mode: &str,
        args: &[(String, String)],
        mut limits: Limits,
    ) -> Result<Spawned, cordon_core::SpawnError> {
        if limits.deadline.is_none() {
            limits.deadline = Some(self.timeout);
        }
        let token = random_token();
        self.guard(&token).map_err(|e| {
            cordon_core::SpawnError::Wrap(cordon_core::WrapError::new(
                "conformance-suite",
                format!("{e}; the probe child is not started"),
            ))
        })?;
        let mut spec = ChildSpec::new(&self.exe)
            .arg(PROBE_ARG)
            .arg(mode)
            .arg(format!("{TOKEN_ARG}{token}"))
            .arg(format!("package_file={}", self.package_file.display()))
            .args(args.iter().map(|(k, v)| format!("{k}={v}")))
            .env(GRANTED_ENV, &self.granted_value)
            .limits(limits);
        spec.package_dir = Some(self.pkg_dir.clone());
        spec.label = Some(format!("conformance {mode}"));
        let child = spawner.spawn(&spec)?;
        Ok(Spawned { child, token })
    }

    /// Starts `probe`'s child in the sandbox with `args` (each
    /// `key=value`, read back by [`Probe::child`](crate::Probe::child)),
    /// waits for it and collects its report. The child must not hold.
    pub async fn run_child(&self, probe: ProbeId, args: &[(String, String)]) -> ChildRun {
        self.run(&probe.to_string(), args).await
    }

    /// Spawns the probe child and collects its report; it must not hold.
    pub(crate) async fn run(&self, mode: &str, args: &[(String, String)]) -> ChildRun {
        self.run_on(&self.spawner, mode, args).await
    }

    /// Spawns the probe child under the same backend and configuration but
    /// with `network` (P8's allowlist), and collects its report.
    pub(crate) async fn run_with_network(
        &self,
        mode: &str,
        args: &[(String, String)],
        network: Network,
    ) -> ChildRun {
        let Some(backend) = self.spawner.backend() else {
            let mut run = ChildRun::new();
            run.checks
                .push(unreachable("spawn", "the suite's spawner has no backend"));
            run.done = true;
            return run;
        };
        let config = RunnerConfig {
            network,
            ..self.spawner.config().clone()
        };
        let spawner = Spawner::confined(std::sync::Arc::clone(backend), config);
        self.run_on(&spawner, mode, args).await
    }

    async fn run_on(&self, spawner: &Spawner, mode: &str, args: &[(String, String)]) -> ChildRun {
        self.run_held_on(spawner, mode, args, &mut |h: &Hold<'_>| {
            vec![unreachable(
                "hold",
                format!("unexpected HOLD {} from the probe child", h.label),
            )]
        })
        .await
    }

    /// Spawns the probe child and collects its report, calling `on_hold`
    /// for each `HOLD` while the child waits.
    pub(crate) async fn run_held(
        &self,
        mode: &str,
        args: &[(String, String)],
        on_hold: OnHold<'_>,
    ) -> ChildRun {
        self.run_held_on(&self.spawner, mode, args, on_hold).await
    }

    async fn run_held_on(
        &self,
        spawner: &Spawner,
        mode: &str,
        args: &[(String, String)],
        on_hold: OnHold<'_>,
    ) -> ChildRun {
        match self.spawn_on(spawner, mode, args, Limits::default()) {
            Ok(s) => self.collect(s, on_hold).await,
            Err(e) => {
                let mut run = ChildRun::new();
                run.checks.push(unreachable(
                    "spawn",
                    format!("could not start probe child: {e}"),
                ));
                run.done = true;
                run
            }
        }
    }

    /// Reads the child's report to EOF (bounded by the timeout), answering
    /// each `HOLD`, while waiting for it as any caller of the runner does:
    /// the runner enforces the deadline and the sandbox-wide CPU time only
    /// while someone waits.
    pub(crate) async fn collect(&self, spawned: Spawned, on_hold: OnHold<'_>) -> ChildRun {
        let Spawned { mut child, token } = spawned;
        let mut run = ChildRun::new();
        run.token = token.clone();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let scratch = child.scratch_dir().to_path_buf();
        let timeout = self.timeout;
        let read = async {
            let mut stdin = stdin;
            let Some(stdout) = stdout else { return };
            let mut lines = BufReader::new(stdout).lines();
            let deadline = tokio::time::Instant::now() + timeout + Duration::from_secs(1);
            while let Ok(Ok(Some(line))) =
                tokio::time::timeout_at(deadline, lines.next_line()).await
            {
                if let Some(label) = line.strip_prefix("HOLD\t") {
                    let hold = Hold {
                        label,
                        pid: inspect::program_pid(&token),
                        scratch: &scratch,
                        token: &token,
                    };
                    run.checks.extend(on_hold(&hold));
                    run.held.insert(label.to_string());
                    if let Some(w) = stdin.as_mut() {
                        let _ = w.write_all(b"\n").await;
                        let _ = w.flush().await;
                    }
                    continue;
                }
                parse_line(&line, &mut run);
            }
            // Dropping stdin releases a child still held (EOF).
        };
        let (_, outcome) = tokio::join!(read, child.wait());
        run.outcome = outcome.ok();
        run.memory_limit_hit = child.memory_limit_hit();
        run.cpu_watch = child.cpu_watch();
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
            let mut c = check(name, status, parts.next().unwrap_or("").to_string());
            c.evidence = Evidence::Child;
            run.checks.push(c);
        }
        Some("INFO") => {
            if let (Some(k), Some(v)) = (parts.next(), parts.next()) {
                run.info.insert(k.to_string(), v.to_string());
                run.timeline
                    .push((std::time::Instant::now(), k.to_string(), v.to_string()));
            }
        }
        Some("DONE") => run.done = true,
        _ => run.checks.push(unreachable(
            "child-output",
            format!("unexpected line from probe child: {line:?}"),
        )),
    }
}

/// SIGKILLs every live process bearing `token` (what a breach left
/// behind), re-checking the token just before each kill so a reused pid is
/// never hit. Returns how many it killed.
pub(crate) fn kill_token_survivors(token: &str) -> usize {
    let mut n = 0;
    for pid in inspect::token_pids(token) {
        if inspect::bears_token(pid, token) {
            // SAFETY: kill on a pid that bears our token right now.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            n += 1;
        }
    }
    n
}
