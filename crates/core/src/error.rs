//! Error types, one enum per concern.

use std::path::PathBuf;

use crate::backend::WrapError;
use crate::policy::{LimitRaiseError, LimitScopeError};
use crate::report::ConformanceReport;

/// Why a child could not be started. In every case nothing was executed.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The spec asked for more than the runner allows.
    #[error(transparent)]
    LimitRaise(#[from] LimitRaiseError),
    /// A limit must hold more widely than the admitted backend holds it on
    /// this host (e.g. memory for the sandbox as a whole, where only
    /// per-process rlimits exist).
    #[error(transparent)]
    LimitScope(#[from] LimitScopeError),
    /// The spec is malformed.
    #[error("invalid child spec: {0}")]
    InvalidSpec(String),
    /// The program could not be found.
    #[error("program `{}` not found (give an absolute path or put it on the child's PATH)", program.display())]
    ProgramNotFound {
        /// What the spec named.
        program: PathBuf,
    },
    /// The program file could not be opened or read.
    #[error("cannot open program `{}`: {source}", program.display())]
    ProgramOpen {
        /// The resolved program path.
        program: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The program does not match its SHA-256 pin. Terminal: retrying with
    /// the same file will fail again.
    #[error(
        "program `{}` does not match its SHA-256 pin (expected {expected}, found {actual}); \
         refusing to run it — reinstall the artifact or update the pin",
        program.display()
    )]
    PinMismatch {
        /// The resolved program path.
        program: PathBuf,
        /// The pinned digest (hex).
        expected: String,
        /// The file's digest (hex).
        actual: String,
    },
    /// The scratch directory could not be prepared.
    #[error("cannot prepare scratch dir `{}`: {source}", path.display())]
    Scratch {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The backend refused to confine the child.
    #[error(transparent)]
    Wrap(#[from] WrapError),
    /// The backend panicked while confining the child.
    #[error("sandbox backend `{backend}` panicked while confining the child: {message}; nothing was run")]
    WrapPanicked {
        /// The backend's name.
        backend: String,
        /// The panic payload, if it was a string.
        message: String,
    },
    /// The pipes or threads that relay the host's stdio
    /// ([`StdioMode::Relay`](crate::StdioMode::Relay)) could not be created.
    #[error("cannot set up the child's stdio relay: {0}")]
    StdioRelay(std::io::Error),
    /// An untrusted spec was given to the trusted runner.
    #[error(
        "refusing to run an untrusted child under the trusted runner; \
         use SandboxRunner (or select_runner) for untrusted code"
    )]
    UntrustedOnTrustedRunner,
    /// starting the program failed (including a backend's pre-exec setup failing in the
    /// child, which then never executed the program).
    #[error(
        "cannot start `{}`: {source}{}",
        program.display(),
        step.map(|s| format!(" at {s}")).unwrap_or_default()
    )]
    Spawn {
        /// The resolved program path.
        program: PathBuf,
        /// The I/O error from the launch, the child's set-up or exec.
        source: std::io::Error,
        /// The step of the backend's confinement that failed, when it said
        /// ([`SandboxBackend::step_name`](crate::SandboxBackend::step_name)).
        step: Option<&'static str>,
    },
}

/// No conforming sandbox is available for untrusted code.
///
/// Carries the full conformance report so operators can see why.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "no conforming sandbox for untrusted code (backend `{}`); untrusted children will not run. \
     Run `cargo xtask conformance` on this host for details.\n{}",
    report.backend,
    report.summary()
)]
pub struct SandboxUnavailable {
    /// The report that failed the gate.
    pub report: Box<ConformanceReport>,
}

/// The message of a caught panic (`catch_unwind`, a joined thread): the
/// `&str` or `String` it was raised with, else a placeholder.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".into())
}
