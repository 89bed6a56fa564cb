//! # cordon-backend-macos
//!
//! Cordon's macOS [`SandboxBackend`]: each child runs under a Seatbelt
//! profile generated from its [`SandboxPolicy`], launched through
//! `/usr/bin/sandbox-exec`, with resource limits set by `setrlimit`.
//!
//! On every other OS the crate builds, [`MacosBackend::availability`]
//! reports `Unavailable` ("Seatbelt exists only on macOS ...") and
//! [`SandboxBackend::wrap`] refuses to run anything (fail closed).
//!
//! ## How a child is confined
//! The profile is `(deny default)` plus exactly the grants of the policy
//! (see [`build_profile`] and the crate README for the full list). Every
//! policy path is canonicalised first (Seatbelt matches resolved paths:
//! `/tmp` is `/private/tmp`) and passed to `sandbox-exec` as a
//! `-DKEY=VALUE` parameter, never spliced into the profile text. The
//! command line is the documented equivalent of
//!
//! ```text
//! /usr/bin/sandbox-exec -p '<profile>' -DSCRATCH=/private/tmp/... [-D...] -- <program> <args...>
//! ```
//!
//! ## Why an `execve` in a pre-exec hook
//! `wrap` receives core's [`ChildCommand`], whose program it does not
//! change: the stdio redirections (pipes to the runner) and core's
//! hygiene hook (new session, close-on-exec of inherited fds) stay as core
//! set them up. Calling `sandbox_init_with_parameters` in the child instead
//! would run the profile compiler (which allocates) after fork, and it is a
//! private API.
//!
//! So `wrap` appends one last pre-exec hook. Hooks run after stdio and the
//! working directory are set up, in the order they were added; core's
//! hygiene hook therefore runs first. The macOS hook then calls
//! `setrlimit` for each limit and `execve`s `/usr/bin/sandbox-exec` with an
//! argv and envp built entirely in the parent: program, arguments and the
//! environment read back with `ChildCommand::get_program`, `get_args` and
//! `get_envs`. `sandbox-exec`, now
//! a fresh single-threaded process, compiles the profile, applies it and
//! `execvp`s the program. If the launcher cannot be executed the hook
//! returns the error and the spawn fails: the program never runs
//! unconfined. The only thing lost is a custom `argv[0]`; the child sees
//! its program path instead.
//!
//! Programs pinned by SHA-256 (executed through `/proc/self/fd/N`) are
//! refused: the launcher's own `exec` would close that descriptor.
//!
//! ## Example
//! ```
//! use std::path::{Path, PathBuf};
//! use cordon_backend_macos::{build_profile, MacosBackend};
//! use cordon_core::{Limits, SandboxBackend, SandboxPolicy};
//!
//! let backend = MacosBackend::default();
//! assert_eq!(backend.name(), "macos");
//! if !cfg!(target_os = "macos") {
//!     let why = backend.availability();
//!     assert!(why.reason().unwrap().contains("Seatbelt exists only on macOS"));
//! }
//!
//! // The profile is a pure function of the policy and a canonicaliser.
//! let macos_like = |p: &Path| -> std::io::Result<PathBuf> {
//!     Ok(match p.strip_prefix("/tmp") {
//!         Ok(rest) => Path::new("/private/tmp").join(rest),
//!         Err(_) => p.to_path_buf(),
//!     })
//! };
//! let policy = SandboxPolicy::new("/tmp/scratch", Limits::probe());
//! let profile = build_profile(&policy, &macos_like)?;
//! assert!(profile.text.contains("(allow file-read* file-write* (subpath (param \"SCRATCH\")))"));
//! assert_eq!(profile.params[0], ("SCRATCH".to_string(), "/private/tmp/scratch".to_string()));
//! # Ok::<(), cordon_backend_macos::ProfileError>(())
//! ```
//!
//! ## What it cannot enforce
//! Seatbelt confines file, process, network and IPC operations, not
//! identity or resources: the child keeps the host's uid, memory limits
//! are not enforced by macOS, `RLIMIT_NPROC` counts every process of the
//! uid, and a grandchild that calls `setsid()` leaves the process group
//! the deadline kills. The crate README has the per-probe (P1–P7) table;
//! the conformance report shows each gap as a failing or unreachable
//! check, and the backend never claims otherwise.

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::process::Command;

use cordon_core::ChildCommand;
use std::sync::Arc;

use cordon_core::{Availability, SandboxBackend, SandboxPolicy, WrapError};

#[cfg(unix)]
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
mod exec;
mod profile;

pub use profile::{
    build_profile, sbpl_string, Canonicalize, FsCanonicalizer, PathRole, ProfileError,
    SeatbeltProfile, SETUID_DENYLIST, SYSTEM_READ_DATA, SYSTEM_READ_EXEC, SYSTEM_READ_FILES,
    SYSTEM_READ_WRITE_FILES,
};

/// The backend's name in reports and caches.
pub const BACKEND_NAME: &str = "macos";

/// The Seatbelt launcher. Always this absolute path, never looked up on
/// `PATH`.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The reason the backend is unavailable on a host that is not macOS.
pub fn not_macos_reason() -> String {
    format!(
        "Seatbelt exists only on macOS; this host runs {}. Use the backend for this OS \
         (e.g. cordon-backend-linux) instead",
        std::env::consts::OS
    )
}

/// The macOS Seatbelt backend. See the crate docs.
///
/// Build it with [`MacosBackend::default()`] (or [`MacosBackend::new`]);
/// [`MacosBackend::with_canonicalizer`] exists for tests.
#[derive(Clone)]
pub struct MacosBackend {
    canonicalizer: Arc<dyn Canonicalize>,
}

impl Default for MacosBackend {
    fn default() -> Self {
        MacosBackend::new()
    }
}

impl std::fmt::Debug for MacosBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MacosBackend").finish_non_exhaustive()
    }
}

impl MacosBackend {
    /// The backend, resolving paths with the real file system.
    pub fn new() -> Self {
        MacosBackend {
            canonicalizer: Arc::new(FsCanonicalizer),
        }
    }

    /// The backend with an injected path canonicaliser (for tests: the
    /// profile then does not depend on the host's file system).
    pub fn with_canonicalizer(canonicalizer: impl Canonicalize + 'static) -> Self {
        MacosBackend {
            canonicalizer: Arc::new(canonicalizer),
        }
    }

    /// The profile and parameters `wrap` would use for `policy`, e.g. to
    /// show an operator what a child may touch.
    pub fn profile_for(&self, policy: &SandboxPolicy) -> Result<SeatbeltProfile, ProfileError> {
        build_profile(policy, self.canonicalizer.as_ref())
    }

    #[cfg(target_os = "macos")]
    fn macos_availability(&self) -> Availability {
        use std::os::unix::fs::PermissionsExt;
        let unavailable = |reason: String| Availability::Unavailable { reason };
        match std::fs::metadata(SANDBOX_EXEC) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
            _ => {
                return unavailable(format!(
                    "`{SANDBOX_EXEC}` is missing or not executable; it ships with macOS on the \
                     sealed system volume — reinstall or repair macOS to restore it"
                ))
            }
        }
        // Apply the real profile once: this catches an OS whose Seatbelt
        // rejects an operation name, and a host process that already runs
        // inside a sandbox (where sandbox_init fails).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("cordon-macos-probe-{}-{nanos}", std::process::id()));
        if let Err(e) = std::fs::create_dir(&dir) {
            return unavailable(format!(
                "cannot create a probe dir `{}` to test sandbox-exec: {e}; check TMPDIR",
                dir.display()
            ));
        }
        let policy = SandboxPolicy::new(&dir, cordon_core::Limits::default());
        let result = self.profile_for(&policy).map(|profile| {
            Command::new(SANDBOX_EXEC)
                .args(profile.sandbox_exec_args())
                .arg("/usr/bin/true")
                .env_clear()
                .current_dir(&dir)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .output()
        });
        let _ = std::fs::remove_dir(&dir);
        match result {
            Err(e) => unavailable(format!("cannot build the probe profile: {e}")),
            Ok(Err(e)) => unavailable(format!("cannot run `{SANDBOX_EXEC}`: {e}")),
            Ok(Ok(out)) if out.status.success() => Availability::Available,
            Ok(Ok(out)) => unavailable(format!(
                "`{SANDBOX_EXEC}` could not apply Cordon's profile ({}): {}. If this process \
                 already runs inside a sandbox (App Sandbox, another sandbox-exec), start \
                 Cordon outside it",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }
}

impl SandboxBackend for MacosBackend {
    fn name(&self) -> &str {
        BACKEND_NAME
    }

    fn availability(&self) -> Availability {
        #[cfg(target_os = "macos")]
        {
            self.macos_availability()
        }
        #[cfg(not(target_os = "macos"))]
        {
            Availability::Unavailable {
                reason: not_macos_reason(),
            }
        }
    }

    fn host_facts(&self) -> BTreeMap<String, String> {
        let mut facts = BTreeMap::new();
        if cfg!(target_os = "macos") {
            facts.insert("seatbelt_launcher".into(), SANDBOX_EXEC.into());
            // The scope keys every backend shares (see `Limits`).
            facts.insert(
                "limit_memory".into(),
                "per-process: not enforced: macOS accepts RLIMIT_AS but ignores it".into(),
            );
            facts.insert(
                "limit_processes".into(),
                "per-process: RLIMIT_NPROC counts all processes of the real uid; set to the \
                 uid's count at spawn plus max_processes; not enforced for root"
                    .into(),
            );
            facts.insert(
                "limit_cpu".into(),
                "per-process: RLIMIT_CPU (a forked child starts afresh)".into(),
            );
            facts.insert(
                "limit_disk".into(),
                "per-file: RLIMIT_FSIZE (scratch is on the host's disk)".into(),
            );
            facts.insert(
                "deadline_scope".into(),
                "process group only: a descendant that calls setsid() escapes it".into(),
            );
            if let Ok(out) = Command::new("/usr/bin/sw_vers")
                .arg("-productVersion")
                .output()
            {
                let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if out.status.success() && !v.is_empty() {
                    facts.insert("macos_version".into(), v);
                }
            }
        }
        facts
    }

    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        #[cfg(target_os = "macos")]
        {
            confine(
                cmd,
                policy,
                std::path::Path::new(SANDBOX_EXEC),
                self.canonicalizer.as_ref(),
                exec::processes_of_real_uid,
            )
            .map(|()| None)
        }
        #[cfg(not(target_os = "macos"))]
        {
            let _ = (cmd, policy);
            Err(WrapError::new(
                BACKEND_NAME,
                format!(
                    "{}; the child was not started (refusing to run it unconfined)",
                    not_macos_reason()
                ),
            ))
        }
    }
}

/// Rewrites `cmd` to run under `launcher` with the profile for `policy`.
/// `nproc_base` counts the processes the uid already runs (only called if
/// the policy limits processes).
#[cfg(unix)]
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
fn confine(
    cmd: &mut ChildCommand,
    policy: &SandboxPolicy,
    launcher: &std::path::Path,
    canon: &dyn Canonicalize,
    nproc_base: impl FnOnce() -> std::io::Result<u64>,
) -> Result<(), WrapError> {
    if !policy.masked.is_empty() {
        return Err(WrapError::new(
            BACKEND_NAME,
            "the macos backend does not hide paths inside a grant (masks): refused, nothing \
             was started; drop the masks or grant only the subtrees the program needs",
        ));
    }
    if policy.seccomp.is_some() {
        return Err(WrapError::new(
            BACKEND_NAME,
            "the macos backend has no seccomp: a seccomp profile is refused, nothing was started",
        ));
    }
    if policy.container.is_some() {
        return Err(WrapError::new(
            BACKEND_NAME,
            "the macos backend cannot enter a container's root (Seatbelt has no pivot_root): \
             refused, nothing was started",
        ));
    }
    if !policy.reviewed.is_empty() {
        return Err(WrapError::new(
            BACKEND_NAME,
            "the macos backend cannot put a layer over a directory (--rw-review): refused, \
             nothing was started",
        ));
    }
    if !policy.placed.is_empty() {
        return Err(WrapError::new(
            BACKEND_NAME,
            "the macos backend has no view of its own to place a file in: refused, nothing was \
             started",
        ));
    }
    let profile = build_profile(policy, canon)
        .map_err(|e| WrapError::new(BACKEND_NAME, e.to_string()).with_source(e))?;
    for path in &profile.skipped {
        tracing::warn!(
            path = %path.display(),
            "sandbox grant does not exist; it grants nothing"
        );
    }
    let base = match policy.limits.max_processes {
        Some(_) => nproc_base().map_err(|e| {
            WrapError::new(
                BACKEND_NAME,
                format!("cannot count the user's processes to set the process limit: {e}"),
            )
            .with_source(e)
        })?,
        None => 0,
    };
    let rlimits = exec::plan_rlimits(&policy.limits, base);
    let plan = exec::ExecPlan::new(launcher, &profile.sandbox_exec_args(), cmd, rlimits)
        .map_err(|e| WrapError::new(BACKEND_NAME, e.to_string()).with_source(e))?;
    tracing::debug!(
        launcher = %launcher.display(),
        params = profile.params.len(),
        plan = ?plan,
        "confining child with Seatbelt"
    );
    plan.install(cmd);
    Ok(())
}

/// The launch path with a stand-in launcher (uses `/proc`, so Linux only;
/// macOS runs the real `sandbox-exec` in `tests/profile/backend.rs`).
#[cfg(all(test, target_os = "linux"))]
mod tests;
