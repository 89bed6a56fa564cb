//! The one spawn path: baseline hygiene, then the backend's `wrap`, then
//! the launch (`launch/`: on Linux a `clone(CLONE_VM)` whose set-up the
//! spawning thread waits for, bounded; no fork of the host).
//!
//! Both runners and the conformance harness start children here, so what
//! the probes test is exactly what untrusted code gets.
//!
//! Hygiene applied to every child:
//! - the environment is built from an allowlist, never inherited;
//! - no fd other than 0, 1, 2 survives exec, even one the host opened
//!   without `O_CLOEXEC` (`close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`, with a
//!   per-fd fallback for kernels before 5.11);
//! - fds 0, 1, 2 are pipes the runner created, never the host's own: the
//!   embedder's ends ([`StdioMode::Piped`]) or the relay's
//!   ([`StdioMode::Relay`], see `relay.rs`), so a child cannot change a
//!   file description the host shares (flags, offset, a terminal's modes);
//! - a per-instance scratch dir (0700) is the cwd;
//! - the child starts a new session (so it leads a new process group that
//!   `kill()` reaches, and has no controlling terminal) and, on Linux, gets
//!   `PR_SET_PDEATHSIG(SIGKILL)`;
//! - a sandboxed child's `HOME` and `TMPDIR` point at its scratch dir, the
//!   only place it may write;
//! - a pinned program is hashed from an open fd and executed from that fd
//!   through `/proc/self/fd/N`, so no one can swap the path in between.
//!
//! Before exec only raw, async-signal-safe syscalls run: every value the
//! child needs is computed in the parent and moved into the hook.

use std::ffi::OsString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backend::SandboxBackend;
use crate::child::{RunningChild, ScratchGuard, StderrRing};
use crate::command::{ChildCommand, ChildStdio};
use crate::error::SpawnError;
use crate::policy::{Limits, Network, SandboxPolicy};
use crate::program;
use crate::relay::Relay;
use crate::spec::{ChildSpec, Scratch, StdioMode};

/// The environment variables every child may receive from the host.
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "USER", "LOGNAME",
];

/// How a runner spawns: ceilings, grants and hygiene settings.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Ceilings; a spec may lower each limit, never raise it.
    pub ceilings: Limits,
    /// Host variables a child may receive (if set on the host).
    pub env_allowlist: Vec<OsString>,
    /// Where fresh scratch dirs are created. Default: the host temp dir.
    pub scratch_base: PathBuf,
    /// Extra read-only grants for every sandboxed child.
    pub read_only: Vec<PathBuf>,
    /// Extra read-write grants for every sandboxed child.
    pub read_write: Vec<PathBuf>,
    /// Read + execute grants for every sandboxed child: a directory (as
    /// a read-only grant, which includes execute) or a program file alone.
    pub executable: Vec<PathBuf>,
    /// Paths and patterns hidden inside the grants
    /// ([`SandboxPolicy::masked`], resolved at each spawn).
    pub masks: Vec<crate::policy::MaskPattern>,
    /// Host files shown read-only over files the sandbox sees
    /// ([`SandboxPolicy::placed`]).
    pub placed: Vec<crate::policy::PlacedFile>,
    /// Network policy for sandboxed children.
    pub network: Network,
    /// How many bytes of stderr a child keeps (the newest ones); see
    /// [`RunningChild::stderr_tail`].
    pub stderr_ring_bytes: usize,
    /// How long a child's set-up (from the launch to the program's exec:
    /// hygiene and the backend's confinement) may take, at most; a
    /// spec's [`Limits::deadline`] shortens it. Past it every process of
    /// the launch is killed and the spawn fails ([`SpawnError::Spawn`]
    /// with an `io::ErrorKind::TimedOut` source): a process that stops or
    /// hangs in its set-up cannot keep the spawning thread waiting.
    /// Default [`DEFAULT_SETUP_TIMEOUT`].
    pub setup_timeout: std::time::Duration,
    /// Host paths no sandbox may write: a sandboxed spawn whose read-write
    /// grant or kept scratch dir is one of them, lies inside one or holds
    /// one is refused ([`SpawnError::InvalidSpec`]). The conformance
    /// crate's `cache::admit` adds its report cache's dir: a sandbox that
    /// could write there could plant a report that admits a backend that
    /// does not conform, for every later run. Compared as real paths (a
    /// path that does not exist yet by its nearest existing ancestor).
    pub protected: Vec<PathBuf>,
}

/// The default [`RunnerConfig::setup_timeout`]: 10 s (a set-up takes a
/// few milliseconds; this leaves room for a host under heavy load).
pub const DEFAULT_SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            ceilings: Limits::default_ceilings(),
            env_allowlist: DEFAULT_ENV_ALLOWLIST.iter().map(OsString::from).collect(),
            scratch_base: std::env::temp_dir(),
            read_only: Vec::new(),
            read_write: Vec::new(),
            executable: Vec::new(),
            masks: Vec::new(),
            placed: Vec::new(),
            network: Network::Deny,
            stderr_ring_bytes: 64 * 1024,
            setup_timeout: DEFAULT_SETUP_TIMEOUT,
            protected: Vec::new(),
        }
    }
}

/// Switches that turn baseline hygiene off. Only for proving that the
/// conformance probes fail without it.
#[cfg(feature = "test-hooks")]
#[derive(Debug, Clone, Copy, Default)]
pub struct HygieneOverrides {
    /// Pass the whole host environment through.
    pub inherit_env: bool,
    /// Let fds the host opened without `O_CLOEXEC` leak into the child.
    pub keep_inherited_fds: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Hygiene {
    inherit_env: bool,
    keep_inherited_fds: bool,
}

/// Starts children: hygiene for every spawn, plus `wrap` when confined.
///
/// `Spawner` does not check conformance; [`SandboxRunner`](crate::SandboxRunner)
/// does, and then spawns through its own `Spawner`. The conformance harness
/// uses a confined `Spawner` directly so probes exercise the same path.
#[derive(Clone)]
pub struct Spawner {
    backend: Option<Arc<dyn SandboxBackend>>,
    config: RunnerConfig,
    hygiene: Hygiene,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner")
            .field(
                "backend",
                &self.backend.as_ref().map(|b| b.name().to_string()),
            )
            .field("config", &self.config)
            .finish()
    }
}

impl Spawner {
    /// A spawner that applies hygiene only (no OS sandbox).
    pub fn hygiene_only(config: RunnerConfig) -> Self {
        Spawner {
            backend: None,
            config,
            hygiene: Hygiene::default(),
        }
    }

    /// A spawner that applies hygiene and then `backend.wrap`.
    pub fn confined(backend: Arc<dyn SandboxBackend>, config: RunnerConfig) -> Self {
        Spawner {
            backend: Some(backend),
            config,
            hygiene: Hygiene::default(),
        }
    }

    /// A confined spawner with parts of the baseline hygiene switched off.
    /// Exists only to show that probes P2/P3 fail without hygiene.
    #[cfg(feature = "test-hooks")]
    pub fn without_hygiene_for_tests(
        backend: Arc<dyn SandboxBackend>,
        config: RunnerConfig,
        overrides: HygieneOverrides,
    ) -> Self {
        Spawner {
            backend: Some(backend),
            config,
            hygiene: Hygiene {
                inherit_env: overrides.inherit_env,
                keep_inherited_fds: overrides.keep_inherited_fds,
            },
        }
    }

    /// The runner configuration.
    pub fn config(&self) -> &RunnerConfig {
        &self.config
    }

    /// The backend, if confined.
    pub fn backend(&self) -> Option<&Arc<dyn SandboxBackend>> {
        self.backend.as_ref()
    }

    /// Starts `spec`. On any error nothing was executed.
    pub fn spawn(&self, spec: &ChildSpec) -> Result<RunningChild, SpawnError> {
        if self.backend.is_none() && !self.config.masks.is_empty() {
            return Err(SpawnError::InvalidSpec(
                "this runner has masks but no sandbox backend, and only a backend can hide a \
                 path: run the program confined, or drop the masks"
                    .into(),
            ));
        }
        let limits = self.config.ceilings.narrow(&spec.limits)?;
        // A container's child: its own environment only, its program a
        // path inside its root (not pinned: the container owns its root).
        if !spec.reviewed.is_empty() {
            if self.backend.is_none() {
                return Err(SpawnError::InvalidSpec(
                    "a reviewed directory (--rw-review) needs a sandbox backend to put its layer \
                     over it: run the program confined"
                        .into(),
                ));
            }
            // A directory is written either through its layer or directly,
            // never both: a direct grant around or inside it would bypass
            // the review.
            let direct: Vec<PathBuf> = self
                .config
                .read_write
                .iter()
                .map(|d| d.canonicalize().unwrap_or_else(|_| d.clone()))
                .collect();
            for r in &spec.reviewed {
                if let Some(d) = direct
                    .iter()
                    .find(|d| d.starts_with(&r.dir) || r.dir.starts_with(d))
                {
                    return Err(SpawnError::InvalidSpec(format!(
                        "`{}` is reviewed (--rw-review) and `{}` granted read-write directly; \
                         one reaches into the other, which would bypass the review: grant it \
                         one way",
                        r.dir.display(),
                        d.display()
                    )));
                }
            }
        }
        if spec.seccomp.is_some() && self.backend.is_none() {
            return Err(SpawnError::InvalidSpec(
                "a seccomp profile of the caller's needs a sandbox backend to stack it".into(),
            ));
        }
        let container = match (&spec.container, &self.backend) {
            (Some(_), None) => {
                return Err(SpawnError::InvalidSpec(
                    "a container's root needs a sandbox backend to enter it".into(),
                ))
            }
            (Some(root), Some(_)) => Some(root),
            (None, _) => None,
        };
        let env = match container {
            Some(_) => spec.env.clone(),
            None => self.build_env(spec),
        };
        let (program, program_file, exec_path) = match container {
            #[cfg(target_os = "linux")]
            Some(root) => {
                let p = program::resolve_in_container(root, &spec.program, &env)?;
                (p.clone(), None, p)
            }
            #[cfg(not(target_os = "linux"))]
            Some(_) => {
                return Err(SpawnError::InvalidSpec(
                    "a container's root is entered on Linux only".into(),
                ))
            }
            None => {
                let program = program::resolve(&spec.program, &env)?;
                let (file, exec_path) = program::open_pinned(&program, spec)?;
                (program, file, exec_path)
            }
        };
        let private = match (&spec.scratch, &self.backend) {
            (Scratch::Fresh, Some(b)) => b.private_scratch_mountpoint(&self.config.scratch_base),
            _ => None,
        };
        let sweeps = matches!(spec.scratch, Scratch::Fresh) && private.is_none();
        let mut scratch = match private {
            Some(mountpoint) => ScratchGuard::private(mountpoint),
            None => prepare_scratch(&spec.scratch, &self.config.scratch_base)?,
        };
        let package_dir = match &spec.package_dir {
            Some(dir) => Some(dir.canonicalize().map_err(|e| {
                SpawnError::InvalidSpec(format!(
                    "package dir `{}` is not usable: {e}",
                    dir.display()
                ))
            })?),
            None => None,
        };

        let mut cmd = ChildCommand::new(&exec_path, scratch.path());
        cmd.arg0(&spec.program).args(&spec.args);
        cmd.env = env.clone();
        let stderr_ring = StderrRing::shared(self.config.stderr_ring_bytes);
        let mut relay = None;
        match spec.stdio {
            StdioMode::Piped => {}
            StdioMode::Relay => {
                // Pipes and relay threads exist before the fork, so a
                // failure here means nothing ran; the child only gets the
                // pipe ends (the launcher puts them on 0, 1, 2).
                let (ends, r) =
                    Relay::start(Arc::clone(&stderr_ring)).map_err(SpawnError::StdioRelay)?;
                cmd.stdio = [
                    ChildStdio::Fd(ends.stdin),
                    ChildStdio::Fd(ends.stdout),
                    ChildStdio::Fd(ends.stderr),
                ];
                relay = Some(r);
            }
            StdioMode::Terminal => {
                let pair = match &self.backend {
                    Some(b) => b
                        .open_terminal()
                        .transpose()
                        .map_err(SpawnError::StdioRelay)?,
                    None => None,
                };
                let (ends, r) = Relay::start_terminal(Arc::clone(&stderr_ring), pair)
                    .map_err(SpawnError::StdioRelay)?;
                cmd.stdio = [
                    ChildStdio::Fd(ends.stdin),
                    ChildStdio::Fd(ends.stdout),
                    ChildStdio::Fd(ends.stderr),
                ];
                cmd.terminal = true;
                relay = Some(r);
            }
        }
        for (k, rel) in &spec.env_in_scratch {
            cmd.env(k, scratch.path().join(rel));
        }
        install_hygiene(&mut cmd, self.hygiene);

        let mut resources: crate::backend::WrapResources = None;
        if let Some(backend) = &self.backend {
            let kept = match &spec.scratch {
                Scratch::Fresh => None,
                _ => Some(("scratch dir", scratch.path())),
            };
            crate::protected::refuse(
                &self.config.protected,
                self.config
                    .read_write
                    .iter()
                    .map(|p| ("read-write grant", p.as_path()))
                    .chain(kept),
            )?;
            // Programs expect a writable home and temp dir (git, gcc, pip):
            // inside a sandbox the only writable place is scratch. A
            // container has its own.
            if container.is_none() {
                cmd.env("HOME", scratch.path())
                    .env("TMPDIR", scratch.path());
            }
            // An `executable` grant is a read-only one for a directory (which
            // includes execute) and a program file's grant for a file.
            let (exec_grant_dirs, exec_grant_files): (Vec<PathBuf>, Vec<PathBuf>) = self
                .config
                .executable
                .iter()
                .cloned()
                .partition(|p| p.is_dir());
            let mut read_only = self.config.read_only.clone();
            read_only.extend(exec_grant_dirs);
            let mut exec_dirs = backend.exec_dirs();
            exec_dirs.extend(read_only.iter().cloned());
            exec_dirs.extend(package_dir.iter().cloned());
            // A container's program is inside its root, which is granted
            // whole (the backend's rule for `SandboxPolicy::container`).
            let mut program_files = Vec::new();
            if container.is_none() {
                let load = program::load_requirements(&program, &env, &exec_dirs);
                for note in &load.notes {
                    tracing::info!(program = %program.display(), "{note}");
                }
                program_files.push(program.clone());
                program_files.extend(load.files);
            }
            program_files.extend(exec_grant_files);
            let masked = if self.config.masks.is_empty() {
                Vec::new()
            } else {
                let trees: Vec<PathBuf> = read_only
                    .iter()
                    .chain(&self.config.read_write)
                    .chain(&program_files)
                    .chain(package_dir.iter())
                    .cloned()
                    .collect();
                crate::policy::resolve_masks(&self.config.masks, &trees, scratch.path())
                    .map_err(SpawnError::InvalidSpec)?
            };
            let policy = SandboxPolicy {
                scratch_dir: scratch.path().to_path_buf(),
                scratch_is_fresh: scratch.is_fresh(),
                scratch_persists: !matches!(spec.scratch, Scratch::Fresh),
                program_files,
                package_dir,
                read_only,
                read_write: self.config.read_write.clone(),
                network: self.config.network.clone(),
                limits,
                explain: spec.explain,
                masked,
                placed: self.config.placed.clone(),
                container: container.cloned(),
                seccomp: spec.seccomp.clone(),
                reviewed: spec.reviewed.clone(),
            };
            resources = wrap_fail_closed(backend.as_ref(), &mut cmd, &policy)?;
        }

        // The launcher drops its copies of the child's pipe ends (which
        // would keep the relay from ever seeing EOF) once the child runs.
        let setup_timeout = match limits.deadline {
            Some(d) => d.min(self.config.setup_timeout),
            None => self.config.setup_timeout,
        };
        let child = crate::launch::launch(cmd, setup_timeout).map_err(|e| SpawnError::Spawn {
            program: program.clone(),
            source: e.source,
            step: e
                .step
                .and_then(|id| self.backend.as_ref().and_then(|b| b.step_name(id))),
        })?;
        // The child has exec'd (or failed, reported above): the parent's
        // copy of the verified program fd is no longer needed.
        drop(program_file);
        scratch.launched();
        // Only now: the sweep's thread is a task of the caller's uid, which
        // the Linux backend's tier landlock counts into the child's
        // RLIMIT_NPROC at wrap; started before, its exit would leave the
        // child one process more than its limit.
        if sweeps {
            crate::child::sweep_dead_scratches(
                &self.config.scratch_base,
                self.backend.as_ref().and_then(|b| b.sandbox_uids()),
            );
        }
        if let Some(relay) = &mut relay {
            relay.go();
        }
        let backend_name = self.backend.as_ref().map(|b| b.name().to_string());
        tracing::debug!(
            label = spec.label.as_deref().unwrap_or(""),
            backend = backend_name.as_deref().unwrap_or("none"),
            pid = child.pid,
            program = %program.display(),
            "spawned child"
        );
        if let Some(r) = &resources {
            r.started(child.pid);
        }
        Ok(RunningChild::new(
            child,
            scratch,
            &limits,
            stderr_ring,
            relay,
            resources,
            spec,
        ))
    }

    fn build_env(&self, spec: &ChildSpec) -> Vec<(OsString, OsString)> {
        let mut env: Vec<(OsString, OsString)> = Vec::new();
        let mut set = |k: OsString, v: OsString| {
            env.retain(|(old, _)| *old != k);
            env.push((k, v));
        };
        if self.hygiene.inherit_env {
            for (k, v) in std::env::vars_os() {
                set(k, v);
            }
        }
        for name in self.config.env_allowlist.iter().chain(&spec.pass_env) {
            if let Some(v) = std::env::var_os(name) {
                set(name.clone(), v);
            }
        }
        for (k, v) in &spec.env {
            set(k.clone(), v.clone());
        }
        env
    }
}

/// Calls `backend.wrap`, turning a panic into an error. The command is
/// dropped (never spawned) on any failure.
fn wrap_fail_closed(
    backend: &dyn SandboxBackend,
    cmd: &mut ChildCommand,
    policy: &SandboxPolicy,
) -> Result<crate::backend::WrapResources, SpawnError> {
    match catch_unwind(AssertUnwindSafe(|| backend.wrap(cmd, policy))) {
        Ok(Ok(resources)) => Ok(resources),
        Ok(Err(e)) => Err(SpawnError::Wrap(e)),
        Err(payload) => {
            let message = crate::error::panic_message(payload.as_ref());
            tracing::error!(backend = backend.name(), %message, "backend wrap panicked");
            Err(SpawnError::WrapPanicked {
                backend: backend.name().to_string(),
                message,
            })
        }
    }
}

mod hygiene;
#[allow(unused_imports)]
use hygiene::*;
fn prepare_scratch(scratch: &Scratch, base: &Path) -> Result<ScratchGuard, SpawnError> {
    match scratch {
        Scratch::Existing(dir) => {
            let dir = dir.canonicalize().map_err(|source| SpawnError::Scratch {
                path: dir.clone(),
                source,
            })?;
            if !dir.is_dir() {
                return Err(SpawnError::Scratch {
                    path: dir,
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotADirectory,
                        "not a directory",
                    ),
                });
            }
            Ok(ScratchGuard::borrowed(dir))
        }
        Scratch::Fresh | Scratch::FreshKept => {
            use std::os::unix::fs::PermissionsExt;
            // A discarded scratch carries its creator's pid, so that one a
            // killed host left can be told from a live host's and swept.
            let prefix = match scratch {
                Scratch::Fresh => {
                    format!("{}{}-", crate::child::SCRATCH_PREFIX, std::process::id())
                }
                _ => crate::child::SCRATCH_PREFIX.to_string(),
            };
            let dir = tempfile::Builder::new()
                .prefix(&prefix)
                .permissions(std::fs::Permissions::from_mode(0o700))
                .tempdir_in(base)
                .map_err(|source| SpawnError::Scratch {
                    path: base.to_path_buf(),
                    source,
                })?;
            let canonical = dir
                .path()
                .canonicalize()
                .map_err(|source| SpawnError::Scratch {
                    path: dir.path().to_path_buf(),
                    source,
                })?;
            let path = canonical.clone();
            ScratchGuard::owned(dir, canonical, matches!(scratch, Scratch::FreshKept))
                .map_err(|source| SpawnError::Scratch { path, source })
        }
    }
}
