//! The contract every OS sandbox backend implements.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::ChildCommand;
use crate::policy::SandboxPolicy;

/// Whether a backend can confine children on this host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Availability {
    /// Every mechanism the backend needs is present.
    Available,
    /// Something is missing; `reason` says what and how to get it, e.g.
    /// "Landlock is not enabled: boot with lsm=...,landlock".
    Unavailable {
        /// A human-actionable explanation.
        reason: String,
    },
}

impl Availability {
    /// True for [`Availability::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }

    /// The reason, if unavailable.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Availability::Available => None,
            Availability::Unavailable { reason } => Some(reason),
        }
    }
}

/// Why a backend refused to confine a command. The child is never spawned.
#[derive(Debug, thiserror::Error)]
#[error("sandbox backend `{backend}` could not confine the child: {message}")]
pub struct WrapError {
    /// The backend's [`SandboxBackend::name`].
    pub backend: String,
    /// What went wrong and what to do about it.
    pub message: String,
    /// The underlying error, if any.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl WrapError {
    /// A wrap error with a message and no source.
    pub fn new(backend: impl Into<String>, message: impl Into<String>) -> Self {
        WrapError {
            backend: backend.into(),
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }
}

/// What a backend holds on the host for one confined child while it runs
/// (its cgroups, say), handed back by [`SandboxBackend::wrap`].
///
/// The runner keeps it for the child's whole life and drops it once every
/// process of the sandbox is gone; dropping it releases what it holds.
pub trait SandboxResources: Send + Sync + std::fmt::Debug {
    /// CPU time used so far by every process of the sandbox together, when
    /// the backend accounts for it. The runner then enforces
    /// [`Limits::cpu_ms`](crate::Limits::cpu_ms) for the sandbox
    /// as a whole: when the sum passes it, the sandbox is killed and the
    /// outcome is [`ExitOutcome::CpuTimeExceeded`](crate::ExitOutcome::CpuTimeExceeded).
    fn cpu_time(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether the backend's sandbox-wide memory limit killed a process of
    /// the sandbox (a cgroup's OOM killer, say). The runner then reports a
    /// leader killed by `SIGKILL` as
    /// [`ExitOutcome::MemoryExceeded`](crate::ExitOutcome::MemoryExceeded).
    fn memory_limit_hit(&self) -> bool {
        false
    }

    /// Whether any process of the sandbox is still alive (zombies do not
    /// count), when the backend knows it cheaply and exactly (every process
    /// of the sandbox is in a cgroup of its own, say). After the leader
    /// ended, the runner waits for this to be `false` before it removes the
    /// scratch dir; `None` (the default): the runner looks for live
    /// processes of the leader's process group in `/proc` instead.
    fn processes_left(&self) -> Option<bool> {
        None
    }

    /// With [`SandboxPolicy::explain`]: records into `log` what this
    /// sandbox's layers refused, and notes each source of denials this
    /// caller cannot observe ([`DenialLog::unobservable`]). Called once,
    /// when every process of the sandbox is gone. Returns `false` (the
    /// default) where the backend reports no denials at all; the runner
    /// then says so in the explanation.
    ///
    /// [`DenialLog::unobservable`]: crate::explain::DenialLog::unobservable
    fn explain(&self, log: &crate::explain::DenialLog) -> bool {
        let _ = log;
        false
    }

    /// Tells the resources the host pid of the process the runner spawned
    /// (called once, right after spawn).
    fn started(&self, pid: u32) {
        let _ = pid;
    }

    /// The status to report for the sandbox, given how its leader (the
    /// process the runner waited for) ended. A backend whose leader stands
    /// in for the program — an init that handed the launch over to itself
    /// ([`ChildContext::hand_over`](crate::ChildContext::hand_over)) and
    /// cannot die of the program's signal — returns the program's own wait
    /// status here (raw, as `waitpid` gives it). `None` (the default): the
    /// leader's status is the program's.
    fn exit_status(&self, leader_status: i32) -> Option<i32> {
        let _ = leader_status;
        None
    }
}

/// What [`SandboxBackend::wrap`] returns on success: the per-child
/// resources, if the backend keeps any.
pub type WrapResources = Option<Box<dyn SandboxResources>>;

/// An OS sandbox backend: it confines a [`ChildCommand`] in place.
///
/// Implementations must be fail-closed: if anything needed for the policy
/// cannot be set up, `wrap` returns an error (and the runner never spawns);
/// if something fails in the child before exec, the child must not exec
/// (return an error from the hook). Code a backend adds with
/// [`ChildCommand::pre_exec`] runs in the child before exec — on Linux in
/// the host's own memory, the spawning thread suspended — and must be
/// async-signal-safe (no allocation, no locks, no process-wide libc calls
/// such as glibc's `setuid`): prepare everything in `wrap`, in the parent.
///
/// A backend is trusted for untrusted code only through
/// [`SandboxRunner`](crate::SandboxRunner), which first runs the conformance
/// probes against it (P1–P7, and P8 where it claims the egress allowlist).
pub trait SandboxBackend: Send + Sync {
    /// A stable, lowercase identifier such as `"linux"`, `"macos"`, `"noop"`.
    /// Conformance reports and caches are keyed by it.
    fn name(&self) -> &str;

    /// Whether this host has what the backend needs. Must be cheap enough to
    /// call once per runner construction.
    fn availability(&self) -> Availability;

    /// Facts about the host relevant to this backend (e.g. `landlock_abi`),
    /// copied into the conformance report. Empty by default.
    fn host_facts(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// Confines `cmd` according to `policy`, in place. Called after the
    /// runner applied its hygiene (environment, fds, process group, scratch
    /// cwd) and before spawn. An error means the child is never spawned.
    /// On success, returns what the backend holds for this child (see
    /// [`SandboxResources`]), or `None`; the caller keeps it at least until
    /// the child has been spawned (the child may use what it holds, such as
    /// open cgroup files), and the runner keeps it for the child's life.
    /// A backend whose child needs what it holds must make a spawn after an
    /// early drop fail, never run the child with less.
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<WrapResources, WrapError>;

    /// For a scratch dir whose contents are discarded
    /// ([`Scratch::Fresh`](crate::Scratch::Fresh)): the existing directory
    /// under `base` over which this backend mounts a private, per-sandbox
    /// filesystem, if it does. The spawner then creates no directory of
    /// its own: the same mount point can serve every sandbox (each sees
    /// only its own filesystem there), nothing of the scratch ever reaches
    /// the host's disk, and nothing is left behind even when the host is
    /// SIGKILLed. `None` (the default): the spawner creates a fresh
    /// directory for each child and removes it afterwards.
    fn private_scratch_mountpoint(&self, base: &std::path::Path) -> Option<std::path::PathBuf> {
        let _ = base;
        None
    }

    /// The host uids, other than the caller's, that may own a discarded
    /// scratch dir of this backend's while its sandbox runs (a root host's
    /// sandboxes given uids of their own, which own their scratch there):
    /// the spawner's sweep of scratch dirs a killed host left behind
    /// removes those owned by the caller or by a uid in this range, and
    /// no other. `None` (the default): only the caller's.
    fn sandbox_uids(&self) -> Option<std::ops::RangeInclusive<u32>> {
        None
    }

    /// Whether this backend enforces [`Network::Allow`](crate::Network::Allow)
    /// (the egress allowlist, see the `cordon-egress` crate). A backend that says
    /// so is put through probe P8 as well, and conforms only if it passes
    /// it; a [`SandboxRunner`](crate::SandboxRunner) configured with an
    /// allowlist is built only on a report in which P8 passed. `false`
    /// (the default): its `wrap` must refuse `Network::Allow`.
    fn claims_egress_allowlist(&self) -> bool {
        false
    }

    /// The directories every sandbox of this backend may read and execute
    /// from, whatever the policy (its minimal system set, e.g. `/usr`).
    /// The spawner follows a script's `#!/usr/bin/env NAME` only to a NAME
    /// inside these or the policy's read-only grants; it never grants NAME
    /// itself (see [`resolve_program`](crate::resolve_program)). Empty by
    /// default: then only the policy's grants count.
    fn exec_dirs(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    /// The name of step `id` of this backend's confinement, as its hook
    /// reported it with [`ChildContext::report_step`](crate::ChildContext::report_step)
    /// when it failed (e.g. `landlock_restrict_self`): the spawn error
    /// names it. `None` (the default) for an id the backend does not know.
    fn step_name(&self, id: u32) -> Option<&'static str> {
        let _ = id;
        None
    }

    /// For [`StdioMode::Terminal`](crate::StdioMode::Terminal): a pty pair
    /// (master, slave) this backend makes for its sandbox, when the host's
    /// own (`/dev/ptmx`, owned by the caller) would not do: a sandbox with
    /// the caller's uid in a user namespace of its own could `chmod` such
    /// a slave open to other local users. `None` (the default): the runner
    /// opens one from the host's `/dev/ptmx`. An error fails the spawn.
    fn open_terminal(
        &self,
    ) -> Option<std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>> {
        None
    }
}

impl<T: SandboxBackend + ?Sized> SandboxBackend for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn availability(&self) -> Availability {
        (**self).availability()
    }
    fn host_facts(&self) -> BTreeMap<String, String> {
        (**self).host_facts()
    }
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<WrapResources, WrapError> {
        (**self).wrap(cmd, policy)
    }
    fn private_scratch_mountpoint(&self, base: &std::path::Path) -> Option<std::path::PathBuf> {
        (**self).private_scratch_mountpoint(base)
    }
    fn claims_egress_allowlist(&self) -> bool {
        (**self).claims_egress_allowlist()
    }
    fn sandbox_uids(&self) -> Option<std::ops::RangeInclusive<u32>> {
        (**self).sandbox_uids()
    }
    fn exec_dirs(&self) -> Vec<std::path::PathBuf> {
        (**self).exec_dirs()
    }
    fn step_name(&self, id: u32) -> Option<&'static str> {
        (**self).step_name(id)
    }
    fn open_terminal(
        &self,
    ) -> Option<std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>> {
        (**self).open_terminal()
    }
}
