//! Error type of the crate.

/// Which per-call limit stopped an evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    /// Instruction budget (`EvalLimits::max_ticks`).
    Ticks,
    /// Wall-clock deadline (`EvalLimits::timeout`).
    Time,
    /// Starlark heap size (`EvalLimits::max_heap_bytes`).
    Heap,
    /// Call-stack depth (`EvalLimits::max_call_depth`).
    CallStack,
    /// Captured print output (`EvalLimits::max_output_bytes`).
    Output,
    /// Source size (`EvalLimits::max_source_bytes`).
    SourceSize,
    /// Bracket nesting or operator-chain depth in source
    /// (`EvalLimits::max_nesting_depth`, `EvalLimits::max_expression_depth`).
    Nesting,
    /// Depth or size of a value converted to JSON.
    ValueSize,
    /// The sandboxed worker's memory limit (`WorkerLimits::memory_bytes`):
    /// an allocation failed and the worker aborted, or (where the backend
    /// limits the sandbox as a whole, with a cgroup) the kernel killed it.
    Memory,
    /// The sandboxed worker's CPU-time limit (`WorkerLimits::cpu_seconds`).
    Cpu,
}

impl LimitKind {
    /// Every kind, in a stable order.
    pub const ALL: [LimitKind; 10] = [
        LimitKind::Ticks,
        LimitKind::Time,
        LimitKind::Heap,
        LimitKind::CallStack,
        LimitKind::Output,
        LimitKind::SourceSize,
        LimitKind::Nesting,
        LimitKind::ValueSize,
        LimitKind::Memory,
        LimitKind::Cpu,
    ];

    /// The wire name (`snake_case`), as used in worker error codes
    /// (`limit.<name>`).
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Ticks => "ticks",
            LimitKind::Time => "time",
            LimitKind::Heap => "heap",
            LimitKind::CallStack => "call_stack",
            LimitKind::Output => "output",
            LimitKind::SourceSize => "source_size",
            LimitKind::Nesting => "nesting",
            LimitKind::ValueSize => "value_size",
            LimitKind::Memory => "memory",
            LimitKind::Cpu => "cpu",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<LimitKind> {
        LimitKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Errors returned by the runner and package loading. Messages say what to
/// change.
#[derive(Debug, thiserror::Error)]
pub enum StarlarkHostError {
    /// Reading a package from disk failed.
    #[error("cannot read package at {path}: {source}")]
    PackageIo {
        /// Path that failed.
        path: String,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The package (manifest, layout, id) is invalid.
    #[error("invalid package: {0}")]
    InvalidPackage(String),
    /// The package exists but may not run (not active, wrong tier).
    #[error("package {id:?} cannot run: {reason}")]
    NotRunnable {
        /// Package id.
        id: String,
        /// Why.
        reason: String,
    },
    /// A grant of the package no longer covers what its manifest asks for
    /// (an upgrade added `network_access` targets, say): the package does
    /// not run until the operator grants it again.
    #[error(
        "package {package:?} cannot run: its grant of {permission} is suspended: {reason}; \
         grant it again to approve the package as it is now \
         (cordon star grant {package} {permission}), or revoke it"
    )]
    GrantSuspended {
        /// Package id.
        package: String,
        /// The suspended grant's permission.
        permission: crate::package::Permission,
        /// What the manifest asks for that the grant did not approve.
        reason: String,
    },
    /// No package with that id in the [`crate::PackageStore`].
    #[error("package {0:?} is not registered; register it in the package store first")]
    UnknownPackage(String),
    /// A store or service failed.
    #[error("store error: {0}")]
    Store(String),
    /// Parsing or compiling the script failed.
    #[error("package {package:?}: script error:\n{message}")]
    Script {
        /// Package id.
        package: String,
        /// Starlark's diagnostic (with file and line).
        message: String,
    },
    /// A limit was hit; raise the limit in [`crate::EvalLimits`] if the package is
    /// trusted and legitimately needs more.
    #[error("package {package:?}: {kind:?} limit exceeded: {message}")]
    Limit {
        /// Package id.
        package: String,
        /// Which limit.
        kind: LimitKind,
        /// Details.
        message: String,
    },
    /// The invocation was cancelled by the caller.
    #[error("package {package:?}: evaluation cancelled")]
    Cancelled {
        /// Package id.
        package: String,
    },
    /// The entry point does not exist.
    #[error("package {package:?} has no function {name:?} (defined functions: {available})")]
    NoSuchEntryPoint {
        /// Package id.
        package: String,
        /// Requested name.
        name: String,
        /// Comma separated public functions.
        available: String,
    },
    /// A value could not be converted to or from JSON.
    #[error("package {package:?}: value conversion failed: {message}")]
    Conversion {
        /// Package id.
        package: String,
        /// Details.
        message: String,
    },
    /// The evaluation thread died unexpectedly (an interpreter bug).
    #[error("internal error: {0}")]
    Internal(String),
    /// An untrusted package, on a host built without a sandbox
    /// ([`StarlarkHostBuilder::sandbox`](crate::StarlarkHostBuilder::sandbox)
    /// was not called): it runs only in a sandboxed worker, never in
    /// process.
    #[error(
        "package {package:?} is untrusted and this host has no sandbox to run it in; \
         untrusted packages never run in process (give the host a sandbox: \
         StarlarkHostBuilder::sandbox)"
    )]
    NoSandbox {
        /// Package id.
        package: String,
    },
    /// No conforming sandbox exists, so an untrusted package will not run
    /// (never falls back to in-process evaluation). The conformance report
    /// is inside.
    #[error("package {package:?} was not run: {source}")]
    SandboxUnavailable {
        /// Package id.
        package: String,
        /// Why the sandbox runner was not admitted (report included).
        #[source]
        source: Box<cordon_core::SandboxUnavailable>,
    },
    /// The sandboxed worker could not be started.
    #[error(
        "cannot start the sandboxed worker for package {package:?}: {message}; \
         check the worker program (WorkerConfig::program) and the runner's limits"
    )]
    WorkerStart {
        /// Package id.
        package: String,
        /// What failed.
        message: String,
    },
    /// The sandboxed worker crashed, was killed, or broke the protocol. The
    /// worker was killed and discarded; the next call starts a fresh one.
    #[error(
        "worker for package {package:?} {message}; it was killed and the next call starts a fresh worker"
    )]
    Worker {
        /// Package id.
        package: String,
        /// What happened (crash signal, protocol violation, ...).
        message: String,
    },
}

/// A failed load or call ([`StarlarkHost::load`](crate::StarlarkHost::load),
/// [`StarlarkHost::call`](crate::StarlarkHost::call)): what failed, and
/// what the package printed before it failed — which is when its author
/// needs the output most (the seed returns both, too).
#[derive(Debug)]
pub struct EvalError {
    /// What failed.
    pub error: StarlarkHostError,
    /// What the call printed before it failed, capped like any output
    /// ([`EvalLimits::max_output_bytes`](crate::EvalLimits::max_output_bytes)):
    /// the top level's first when it failed loading or runs per call.
    /// Empty when nothing ran (the package was refused before evaluation).
    pub output: String,
}

impl EvalError {
    /// An error with the output printed before it.
    pub fn with_output(error: StarlarkHostError, output: String) -> Self {
        EvalError { error, output }
    }
}

impl From<StarlarkHostError> for EvalError {
    fn from(error: StarlarkHostError) -> Self {
        EvalError {
            error,
            output: String::new(),
        }
    }
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for EvalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}
