//! What a sandboxed child may touch and how much it may use.
//!
//! [`SandboxPolicy`] is the one policy type of Cordon: the runners build it,
//! backends read it, the conformance suite builds a probe policy of the same
//! type. [`Limits`] are expressed once and narrowed with [`Limits::narrow`]:
//! a runner's limits are ceilings, a spec may lower them but never raise them.
//!
//! Policy files ([`from_toml`], [`PolicyFile`]) are one way to write the
//! parts of a policy a caller chooses: grants, masks ([`MaskPattern`]),
//! environment, limits, network.

use std::path::PathBuf;

mod container;
mod expand;
mod file;
mod load;
mod mask;
mod network;
mod reach;
mod reference;
mod seccomp_profile;
mod secrets;

pub use container::{ContainerMount, ContainerMountKind, ContainerRoot, RunningContainer};
pub use file::{
    from_toml, Entry, EnvValue, Expansions, LimitSettings, Origin, PolicyError, PolicyFile,
    ScratchSetting, MAX_EXTENDS_DEPTH, MAX_POLICY_BYTES,
};
pub use load::{Access, Answer};
pub use mask::{resolve as resolve_masks, MaskPattern, MAX_MASK_WALK};
pub use network::{BrokeredNetwork, Network};
pub use reference::{KeyDoc, REFERENCE};
pub use seccomp_profile::{SeccompAction, SeccompArg, SeccompOp, SeccompProfile, SeccompRule};
pub use secrets::{SecretBinding, SecretSource};

/// Parses a size: bytes, or a number with a `K`, `M` or `G` suffix (the
/// CLI's `--mem`, a policy file's `limits.memory`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix `{c}` (use K, M or G)")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (examples: 4096, 64K, 256M, 2G)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size `{s}` is too large"))
}
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Resource limits. `None` means "no limit from this layer".
///
/// A limit's **scope** is either the *sandbox* (every process of it
/// together: what a user who writes `--mem 256M` means) or *per process*
/// (each process has its own, so forking multiplies it). Which one holds
/// depends on the backend and the host, and the backend says so in its
/// conformance report's host facts (`limit_memory`, `limit_processes`,
/// `limit_cpu`, `limit_disk`, each `sandbox: …` or `per-process: …` /
/// `per-file: …` plus the mechanism); probe P6 checks each limit at the
/// scope claimed there. On Linux: sandbox scope where the host process can
/// make a cgroup (root with cgroup v1, or a delegated cgroup v2 subtree),
/// otherwise the rlimits. The field docs below say what each backend does.
///
/// A limit also says the scope it must hold at ([`Limits::scopes`]): a
/// [`SandboxRunner`](crate::SandboxRunner) refuses a spawn
/// ([`SpawnError::LimitScope`](crate::SpawnError::LimitScope)) when its
/// admitted report says the backend holds a limit that is set only more
/// narrowly than required on this host. The default scope is
/// [`LimitScope::Sandbox`] — a limit you set means the sandbox as a whole
/// unless you say otherwise — except in [`Limits::default_ceilings`],
/// whose limits are safety nets that need only hold per process.
///
/// The runner itself enforces [`Limits::deadline`] (killing the child's
/// process group) and, with a backend that accounts for it, the
/// sandbox-wide [`Limits::cpu_ms`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Limits {
    /// Maximum number of processes (and threads) the sandbox may hold at
    /// once. Linux: sandbox scope (RLIMIT_NPROC counted in the sandbox's own
    /// user namespace); macOS: RLIMIT_NPROC, counted per uid.
    pub max_processes: Option<u64>,
    /// Maximum memory, in bytes. Linux with a cgroup: every page the
    /// sandbox's processes charge together (anonymous, memfd, SysV shm,
    /// the private scratch's tmpfs pages), give or take the kernel's page
    /// cache margin; the kernel's OOM killer ends a process at the limit
    /// and the runner reports [`ExitOutcome::MemoryExceeded`]. Without a
    /// cgroup: per process, the private writable memory (RLIMIT_DATA) and
    /// the address space with 3 GiB of headroom for the ranges runtimes
    /// reserve without touching (RLIMIT_AS); a memfd is then capped by
    /// [`Limits::file_size_bytes`] and SysV shm is freed with the
    /// sandbox's IPC namespace. Where a cgroup holds it, a limit below
    /// 16 MiB is refused (the sandbox's set-up is charged to it before the
    /// program runs, while it still shares the host's memory).
    /// macOS: RLIMIT_AS, which macOS accepts but does not enforce.
    ///
    /// [`ExitOutcome::MemoryExceeded`]: crate::ExitOutcome::MemoryExceeded
    pub memory_bytes: Option<u64>,
    /// Maximum number of open file descriptors, per process (RLIMIT_NOFILE
    /// on every backend; no OS offers a sandbox-wide count).
    pub open_files: Option<u64>,
    /// Maximum CPU time, in milliseconds. Linux with a cgroup: for the
    /// sandbox as a whole, read from the cgroup every 100 ms and enforced by
    /// the runner ([`ExitOutcome::CpuTimeExceeded`]). Linux without: per
    /// process (RLIMIT_CPU), plus a best-effort sum over the sandbox's
    /// process tree that a program can escape by letting its children be
    /// reaped automatically. Elsewhere: per process (RLIMIT_CPU; a forked
    /// child starts afresh). RLIMIT_CPU counts whole seconds: it is set to
    /// this limit rounded up (at least 1 s), so a per-process limit holds
    /// to the second only.
    ///
    /// [`ExitOutcome::CpuTimeExceeded`]: crate::ExitOutcome::CpuTimeExceeded
    pub cpu_ms: Option<u64>,
    /// Maximum size of each file the child writes (RLIMIT_FSIZE), in
    /// bytes. Per file, on every backend.
    pub file_size_bytes: Option<u64>,
    /// Maximum bytes the child may store in a fresh, discarded scratch dir
    /// ([`Scratch::Fresh`](crate::Scratch::Fresh)). Linux: the scratch is
    /// a private tmpfs of this size in the sandbox's mount namespace, and
    /// writing past it fails with `ENOSPC` inside the sandbox (its pages
    /// also count toward a cgroup's memory). A kept scratch or a caller's
    /// directory, and every scratch of the Linux backend's tier landlock,
    /// is on the host's filesystem: there this limit holds per file
    /// (`RLIMIT_FSIZE`, with [`Limits::file_size_bytes`] if that is
    /// smaller), the scope [`LimitScope::PerProcess`] names.
    pub disk_bytes: Option<u64>,
    /// Wall-clock deadline from spawn; when it passes, the runner kills the
    /// child's whole process group (with a PID namespace, the whole
    /// sandbox).
    pub deadline: Option<Duration>,
    /// The scope each of `memory_bytes`, `cpu_ms`, `max_processes`
    /// and `disk_bytes` must hold at, when set (the others are per process
    /// or per file on every backend, and the deadline is the runner's).
    #[serde(default)]
    pub scopes: LimitScopes,
}

/// How widely a limit holds.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum LimitScope {
    /// Each process (a file, for the disk) has its own: a program that
    /// forks can use the limit once per process.
    PerProcess,
    /// Every process of the sandbox together: what a user who writes
    /// `--mem 256M` means.
    #[default]
    Sandbox,
}

impl LimitScope {
    /// `"sandbox"` or `"process"` (the CLI's `--mem-scope` values).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitScope::PerProcess => "process",
            LimitScope::Sandbox => "sandbox",
        }
    }
}

/// The scope of each limit that has one. See [`Limits::scopes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct LimitScopes {
    /// Of [`Limits::memory_bytes`].
    pub memory: LimitScope,
    /// Of [`Limits::cpu_ms`].
    pub cpu: LimitScope,
    /// Of [`Limits::max_processes`].
    pub processes: LimitScope,
    /// Of [`Limits::disk_bytes`].
    pub disk: LimitScope,
}

impl LimitScopes {
    /// Every limit per process.
    pub const PER_PROCESS: LimitScopes = LimitScopes {
        memory: LimitScope::PerProcess,
        cpu: LimitScope::PerProcess,
        processes: LimitScope::PerProcess,
        disk: LimitScope::PerProcess,
    };

    /// Every limit for the sandbox as a whole.
    pub const SANDBOX: LimitScopes = LimitScopes {
        memory: LimitScope::Sandbox,
        cpu: LimitScope::Sandbox,
        processes: LimitScope::Sandbox,
        disk: LimitScope::Sandbox,
    };

    /// The scopes a backend holds on this host, from its host facts
    /// (`limit_memory`, `limit_cpu`, `limit_processes`, `limit_disk`, each
    /// `sandbox: …` when it holds for the sandbox as a whole; anything
    /// else, or no fact, is taken as per process). A sandbox-wide disk
    /// limit holds only for a scratch whose contents are discarded
    /// (`scratch_discarded`): a kept or caller's scratch is on the host's
    /// disk.
    pub fn held(
        facts: &std::collections::BTreeMap<String, String>,
        scratch_discarded: bool,
    ) -> LimitScopes {
        let of = |key: &str| {
            if facts.get(key).is_some_and(|v| v.starts_with("sandbox:")) {
                LimitScope::Sandbox
            } else {
                LimitScope::PerProcess
            }
        };
        LimitScopes {
            memory: of("limit_memory"),
            cpu: of("limit_cpu"),
            processes: of("limit_processes"),
            disk: if scratch_discarded {
                of("limit_disk")
            } else {
                LimitScope::PerProcess
            },
        }
    }
}

/// A limit must hold more widely than the backend can hold it here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "limit `{limit}` of {value} must hold {}, but backend `{backend}` holds it only per \
     process on this host ({held}): get a sandbox-wide limit (on Linux: run as root, or in a \
     cgroup v2 subtree delegated to you with the memory controller), or set its scope to \
     LimitScope::PerProcess to accept the per-process one",
    required_text(*required)
)]
pub struct LimitScopeError {
    /// Which limit (field name of [`Limits`]).
    pub limit: &'static str,
    /// Its value.
    pub value: String,
    /// The scope the limit asked for.
    pub required: LimitScope,
    /// The backend's name.
    pub backend: String,
    /// What the backend's host fact says it holds.
    pub held: String,
}

fn required_text(s: LimitScope) -> &'static str {
    match s {
        LimitScope::Sandbox => "for the sandbox as a whole",
        LimitScope::PerProcess => "per process",
    }
}

/// A spec asked for more than the runner's ceiling allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "limit `{limit}` of {requested} exceeds the runner's ceiling of {ceiling}; \
     lower the spec's limit or raise the runner's ceiling"
)]
pub struct LimitRaiseError {
    /// Which limit (field name of [`Limits`]).
    pub limit: &'static str,
    /// What the spec asked for.
    pub requested: String,
    /// The runner's ceiling.
    pub ceiling: String,
}

impl Limits {
    /// The ceilings a runner uses unless configured otherwise: 64 processes,
    /// 1 GiB of memory, 256 open files, 60 s of CPU, 1 GiB files, 1 GiB of
    /// scratch and a 10-minute wall-clock deadline. They are safety nets:
    /// their scope is [`LimitScopes::PER_PROCESS`] (each holds at least per
    /// process, and for the sandbox as a whole where the backend can).
    pub fn default_ceilings() -> Self {
        Limits {
            max_processes: Some(64),
            memory_bytes: Some(1 << 30),
            open_files: Some(256),
            cpu_ms: Some(60_000),
            file_size_bytes: Some(1 << 30),
            disk_bytes: Some(1 << 30),
            deadline: Some(Duration::from_secs(600)),
            scopes: LimitScopes::PER_PROCESS,
        }
    }

    /// The limits the conformance probes run under: 64 processes, 256 MiB,
    /// 64 open files, 2 s of CPU, 64 MiB files, 64 MiB of scratch, 15 s
    /// deadline (per process at least: probe P6 checks each limit at the
    /// scope the backend claims). The deadline only bounds a probe that
    /// hangs (a probe ends as soon as its checks are made), so it is
    /// generous: on a loaded host (two gates at once on two cores) P6's
    /// memory check can take more than 5 s, and a check the deadline cuts
    /// short is inconclusive, which closes the gate.
    pub fn probe() -> Self {
        Limits {
            max_processes: Some(64),
            memory_bytes: Some(256 << 20),
            open_files: Some(64),
            cpu_ms: Some(2_000),
            file_size_bytes: Some(64 << 20),
            disk_bytes: Some(64 << 20),
            deadline: Some(Duration::from_secs(15)),
            scopes: LimitScopes::PER_PROCESS,
        }
    }

    /// [`Limits::cpu_ms`] as `RLIMIT_CPU` counts it: whole seconds,
    /// rounded up, at least 1.
    pub fn cpu_rlimit_seconds(&self) -> Option<u64> {
        self.cpu_ms.map(|ms| ms.div_ceil(1000).max(1))
    }

    /// The largest file the child may write (`RLIMIT_FSIZE`): at most
    /// [`Limits::file_size_bytes`], and at most [`Limits::disk_bytes`]
    /// when `disk_per_file` (the scratch is on the host's disk, where no
    /// filesystem of the sandbox's own holds the disk limit as a whole).
    pub fn file_size_rlimit(&self, disk_per_file: bool) -> Option<u64> {
        match (
            self.file_size_bytes,
            self.disk_bytes.filter(|_| disk_per_file),
        ) {
            (Some(f), Some(d)) => Some(f.min(d)),
            (f, d) => f.or(d),
        }
    }

    /// Whether every limit that is set and has a scope holds at its scope
    /// with a backend holding `held` (see [`LimitScopes::held`]); `facts`
    /// and `backend` name what it holds in the error.
    pub fn check_scopes(
        &self,
        held: LimitScopes,
        backend: &str,
        facts: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), LimitScopeError> {
        let rows: [(&'static str, Option<String>, LimitScope, LimitScope, &str); 4] = [
            (
                "memory_bytes",
                self.memory_bytes.map(|v| v.to_string()),
                self.scopes.memory,
                held.memory,
                "limit_memory",
            ),
            (
                "cpu_ms",
                self.cpu_ms.map(|v| v.to_string()),
                self.scopes.cpu,
                held.cpu,
                "limit_cpu",
            ),
            (
                "max_processes",
                self.max_processes.map(|v| v.to_string()),
                self.scopes.processes,
                held.processes,
                "limit_processes",
            ),
            (
                "disk_bytes",
                self.disk_bytes.map(|v| v.to_string()),
                self.scopes.disk,
                held.disk,
                "limit_disk",
            ),
        ];
        for (limit, value, required, held, fact) in rows {
            let Some(value) = value else { continue };
            if required > held {
                return Err(LimitScopeError {
                    limit,
                    value,
                    required,
                    backend: backend.to_string(),
                    held: facts
                        .get(fact)
                        .cloned()
                        .unwrap_or_else(|| format!("its report states no {fact}")),
                });
            }
        }
        Ok(())
    }

    /// Narrows `self` (the ceilings) by `requested`: each limit the request
    /// sets must be at most the ceiling; each limit it leaves unset takes the
    /// ceiling. A request above a ceiling is an error, never a silent clamp.
    pub fn narrow(&self, requested: &Limits) -> Result<Limits, LimitRaiseError> {
        fn pick<T: PartialOrd + Copy + std::fmt::Debug>(
            limit: &'static str,
            ceiling: Option<T>,
            requested: Option<T>,
        ) -> Result<Option<T>, LimitRaiseError> {
            match (ceiling, requested) {
                (Some(c), Some(r)) if r > c => Err(LimitRaiseError {
                    limit,
                    requested: format!("{r:?}"),
                    ceiling: format!("{c:?}"),
                }),
                (_, Some(r)) => Ok(Some(r)),
                (c, None) => Ok(c),
            }
        }
        // A limit's scope is the wider of the two where both set it: the
        // ceiling's owner asked for that much, whatever the value.
        let scope = |c: LimitScope, c_set: bool, r: LimitScope, r_set: bool| match (c_set, r_set) {
            (true, true) => c.max(r),
            (false, true) => r,
            _ => c,
        };
        let scopes = LimitScopes {
            memory: scope(
                self.scopes.memory,
                self.memory_bytes.is_some(),
                requested.scopes.memory,
                requested.memory_bytes.is_some(),
            ),
            cpu: scope(
                self.scopes.cpu,
                self.cpu_ms.is_some(),
                requested.scopes.cpu,
                requested.cpu_ms.is_some(),
            ),
            processes: scope(
                self.scopes.processes,
                self.max_processes.is_some(),
                requested.scopes.processes,
                requested.max_processes.is_some(),
            ),
            disk: scope(
                self.scopes.disk,
                self.disk_bytes.is_some(),
                requested.scopes.disk,
                requested.disk_bytes.is_some(),
            ),
        };
        Ok(Limits {
            scopes,
            max_processes: pick("max_processes", self.max_processes, requested.max_processes)?,
            memory_bytes: pick("memory_bytes", self.memory_bytes, requested.memory_bytes)?,
            open_files: pick("open_files", self.open_files, requested.open_files)?,
            cpu_ms: pick("cpu_ms", self.cpu_ms, requested.cpu_ms)?,
            file_size_bytes: pick(
                "file_size_bytes",
                self.file_size_bytes,
                requested.file_size_bytes,
            )?,
            disk_bytes: pick("disk_bytes", self.disk_bytes, requested.disk_bytes)?,
            deadline: pick("deadline", self.deadline, requested.deadline)?,
        })
    }
}

/// Everything a backend needs to confine one child.
///
/// Paths are absolute. Backends grant exactly:
/// - `scratch_dir`: read, write, create, delete (the child's cwd);
/// - `program_files`: read and execute, each file alone;
/// - `package_dir`: read and execute;
/// - `read_only`: read (and execute, for directories holding programs);
/// - `read_write`: read and write;
/// - plus the backend's own minimal system set needed to start programs,
///   which each backend documents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    /// Per-instance read-write directory; the child's working directory.
    pub scratch_dir: PathBuf,
    /// True when the runner created `scratch_dir` for this child (a backend
    /// may change its owner, e.g. to the sandbox uid); false when it is the
    /// caller's own directory, which a backend must not modify.
    pub scratch_is_fresh: bool,
    /// True when the host reads the scratch dir's contents after the child
    /// ends (a caller's own dir, or a fresh one the caller asked to keep).
    /// When false the contents are discarded, so a backend may back the
    /// directory with private, size-limited memory instead of the host's
    /// disk ([`Limits::disk_bytes`]).
    pub scratch_persists: bool,
    /// The program file and what the kernel needs to load it (a `#!`
    /// script's interpreter, an ELF program's dynamic loader): each granted
    /// read + execute as a single file, not its directory.
    pub program_files: Vec<PathBuf>,
    /// The package directory, when the caller names one: read and execute.
    /// Never defaulted to the program's own directory (that would grant,
    /// say, the whole of `$HOME` to `$HOME/a.out`).
    pub package_dir: Option<PathBuf>,
    /// Extra read-only paths.
    pub read_only: Vec<PathBuf>,
    /// Extra read-write paths.
    pub read_write: Vec<PathBuf>,
    /// Network access.
    pub network: Network,
    /// Resource limits, already narrowed against the runner's ceilings.
    pub limits: Limits,
    /// Record what the sandbox refuses ([`ChildSpec::explain`](crate::ChildSpec::explain)):
    /// a backend that reports denials turns on the records it needs (and
    /// only then: off, the spawn path is unchanged). Never loosens
    /// anything: what is refused stays refused.
    #[serde(default)]
    pub explain: bool,
    /// Paths inside the grants the sandbox must not see, as they exist at
    /// spawn ([`resolve_masks`] of the runner's [`MaskPattern`]s): each is
    /// covered by an empty file or directory. A backend that cannot cover
    /// them (Linux's tier landlock, macOS) refuses a policy that has any.
    #[serde(default)]
    pub masked: Vec<PathBuf>,
    /// Host files shown, read-only, in place of files inside the grants
    /// (the credential broker's trust bundle over the system's CA bundle,
    /// for clients that read only that). A backend that cannot place
    /// them (Linux's tier landlock, macOS, no-op) refuses a policy that
    /// has any.
    #[serde(default)]
    pub placed: Vec<PlacedFile>,
    /// The sandbox's root, when it is a container's
    /// ([`ChildSpec::container`](crate::ChildSpec::container)): the program
    /// sees that directory as `/` instead of the host read-only. A backend
    /// that cannot enter one (macOS, no-op, Linux's tier landlock) refuses
    /// a policy that has one.
    #[serde(default)]
    pub container: Option<ContainerRoot>,
    /// A seccomp profile of the caller's, stacked on the backend's filter
    /// ([`ChildSpec::seccomp`](crate::ChildSpec::seccomp)): it can only
    /// take away. A backend that cannot stack one refuses a policy that
    /// has one.
    #[serde(default)]
    pub seccomp: Option<SeccompProfile>,
    /// Directories the sandbox writes through a layer the host keeps
    /// apart ([`ChildSpec::reviewed`](crate::ChildSpec::reviewed)): the
    /// program sees each directory and may write it, but its changes land
    /// in the layer's upper dir. A backend that cannot put a layer over a
    /// directory (Linux's tier landlock, macOS, no-op) refuses a policy
    /// that has one.
    pub reviewed: Vec<ReviewedDir>,
}

/// A directory written through a layer ([`SandboxPolicy::reviewed`]): an
/// overlay of `upper` (and its `work` dir, on the same filesystem) over
/// `dir`. Made with [`hostfs::review`](crate::hostfs::review).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewedDir {
    /// The directory the program sees and writes (canonical).
    pub dir: PathBuf,
    /// Where its writes land.
    pub upper: PathBuf,
    /// The overlay's work dir, beside `upper`.
    pub work: PathBuf,
}

/// A host file shown in place of another ([`SandboxPolicy::placed`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacedFile {
    /// The file the sandbox sees replaced: a regular file (not a
    /// symlink), by its real path.
    pub at: PathBuf,
    /// The host file shown there instead.
    pub from: PathBuf,
}

impl SandboxPolicy {
    /// A policy with only a scratch dir, no network and the given limits.
    pub fn new(scratch_dir: impl Into<PathBuf>, limits: Limits) -> Self {
        SandboxPolicy {
            scratch_dir: scratch_dir.into(),
            scratch_is_fresh: false,
            scratch_persists: true,
            program_files: Vec::new(),
            package_dir: None,
            read_only: Vec::new(),
            read_write: Vec::new(),
            network: Network::Deny,
            limits,
            explain: false,
            masked: Vec::new(),
            placed: Vec::new(),
            container: None,
            seccomp: None,
            reviewed: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
