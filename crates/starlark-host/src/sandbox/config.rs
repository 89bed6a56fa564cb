//! How a worker is started and kept: which program, its limits, and the
//! pool's sizes and timeouts.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use cordon_starlark_protocol::frame::DEFAULT_MAX_FRAME;

use cordon_starlark_worker::WORKER_ARG;

/// The program a worker runs: by default the host's own executable with
/// [`WORKER_ARG`] (its `main` must call
/// [`dispatch_worker`](crate::dispatch_worker)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerProgram {
    /// The executable. It is copied ("staged") into a private 0755 temp
    /// dir, which becomes the worker's only package dir.
    pub path: PathBuf,
    /// Arguments before the host's `--instance <id> --max-frame <n>`.
    pub args: Vec<OsString>,
}

impl WorkerProgram {
    /// The running executable in worker mode.
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(WorkerProgram::path(std::env::current_exe()?))
    }

    /// An explicit worker binary (e.g. this crate's `cordon-star-worker`),
    /// started with [`WORKER_ARG`].
    pub fn path(path: impl Into<PathBuf>) -> Self {
        WorkerProgram {
            path: path.into(),
            args: vec![WORKER_ARG.into()],
        }
    }
}

/// Resource limits of one worker process, set by the sandbox backend.
/// Each must be within the [`SandboxRunner`](cordon_core::SandboxRunner)'s ceilings: building a host
/// whose worker limits exceed one fails and names it (never a silent
/// clamp, as everywhere in Cordon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLimits {
    /// The worker's memory ([`cordon_core::Limits::memory_bytes`]: the
    /// whole worker's pages where the backend has a cgroup, else its
    /// private writable memory per process). Must cover the binary's mappings, the evaluation
    /// thread's stack ([`EvalLimits::eval_stack_bytes`](crate::EvalLimits::eval_stack_bytes)) and the Starlark heap
    /// ([`EvalLimits::max_heap_bytes`](crate::EvalLimits::max_heap_bytes)) with room to spare. Default 512 MiB:
    /// a warm worker peaks at ~87 MiB of address space with the default
    /// 64 MiB evaluation stack (measured, see the README), and the 64 MiB
    /// Starlark heap limit is checked only periodically, so one large
    /// allocation can overshoot it before the check.
    pub memory_bytes: u64,
    /// `RLIMIT_NPROC`, which counts threads: the worker has two (the
    /// protocol reader and the evaluation thread) plus a short-lived
    /// warm-up thread at start. Default 4.
    pub max_processes: u64,
    /// `RLIMIT_NOFILE`. The worker needs 0–2 and a few of its own.
    /// Default 16.
    pub open_files: u64,
    /// `RLIMIT_CPU` over the worker's whole life. The pool retires a
    /// worker before its accumulated busy time plus one call's timeout
    /// could reach it. Default 60 s.
    pub cpu_seconds: u64,
    /// `RLIMIT_FSIZE` (the worker writes no files). Default 1 MiB.
    pub file_size_bytes: u64,
    /// Longest life of one worker (the spec's wall-clock deadline; the pool
    /// retires it earlier). Default 10 minutes.
    pub lifetime: Duration,
}

impl WorkerLimits {
    /// These limits as a worker's spawn limits, checked against the
    /// sandbox runner's `ceilings` (the scratch size is the ceiling's).
    pub(crate) fn within(
        &self,
        ceilings: &cordon_core::Limits,
    ) -> Result<cordon_core::Limits, cordon_core::LimitRaiseError> {
        ceilings.narrow(&cordon_core::Limits {
            max_processes: Some(self.max_processes),
            memory_bytes: Some(self.memory_bytes),
            open_files: Some(self.open_files),
            cpu_ms: Some(self.cpu_seconds.saturating_mul(1000)),
            file_size_bytes: Some(self.file_size_bytes),
            disk_bytes: None,
            deadline: Some(self.lifetime),
            // One worker process's limits: per process is what they mean
            // (and the sandbox holds them as a whole where it can).
            scopes: cordon_core::LimitScopes::PER_PROCESS,
        })
    }
}

impl Default for WorkerLimits {
    fn default() -> Self {
        WorkerLimits {
            memory_bytes: 512 << 20,
            max_processes: 4,
            open_files: 16,
            cpu_seconds: 60,
            file_size_bytes: 1 << 20,
            lifetime: Duration::from_secs(600),
        }
    }
}

/// Pool settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Idle warm workers kept per (package sources, module set). Default 2.
    pub max_idle_per_package: usize,
    /// Idle warm workers kept in total. Default 16.
    pub max_idle_total: usize,
    /// Workers running calls at once (further calls wait). Default 16.
    pub max_concurrent_calls: usize,
    /// An idle worker older than this is killed. Default 60 s.
    pub idle_timeout: Duration,
    /// A worker is retired after this many calls. Default 1000.
    pub max_calls_per_worker: u64,
    /// Started-and-greeted workers with no package yet, kept ready so a
    /// package without a warm worker pays only `load_package` instead of
    /// spawn + process start-up + interpreter set-up. Topped up in the
    /// background after one is used (the first cold start after creation
    /// or [`WorkerPool::shutdown`](crate::WorkerPool::shutdown) is a full one); idle spares expire
    /// like idle workers. Default 0 (off: no process runs that was not
    /// asked for); 1 cuts a new package's first call from a full cold start
    /// (~5 ms) to ~0.7 ms (see the README's figures).
    pub spare_workers: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_idle_per_package: 2,
            max_idle_total: 16,
            max_concurrent_calls: 16,
            idle_timeout: Duration::from_secs(60),
            max_calls_per_worker: 1000,
            spare_workers: 0,
        }
    }
}

/// How sandboxed workers are started and pooled.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// What to execute.
    pub program: WorkerProgram,
    /// Per-worker rlimits.
    pub limits: WorkerLimits,
    /// Pool settings.
    pub pool: PoolConfig,
    /// Largest protocol frame, both directions. Package sources must fit
    /// in one `load_package` frame, a call's return value and output in
    /// one response. Default 1 MiB ([`DEFAULT_MAX_FRAME`]).
    pub max_frame: usize,
    /// Longest wait for the worker's `Hello`. Default 5 s.
    pub handshake_timeout: Duration,
    /// How long after the deadline (or a cancel) the host waits for the
    /// worker's own answer before it kills the process group. Default 250 ms.
    pub kill_grace: Duration,
}

impl WorkerConfig {
    /// Defaults with the given worker program.
    pub fn new(program: WorkerProgram) -> Self {
        WorkerConfig {
            program,
            limits: WorkerLimits::default(),
            pool: PoolConfig::default(),
            max_frame: DEFAULT_MAX_FRAME,
            handshake_timeout: Duration::from_secs(5),
            kill_grace: Duration::from_millis(250),
        }
    }
}
