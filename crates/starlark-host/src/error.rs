//! Error type of the crate, and how the evaluator's failures (in process:
//! an `EvalFailure`; from a worker: its `Error` frame's code) become one.

use cordon_starlark_protocol::wire::ErrorCode;
use cordon_starlark_protocol::{LimitKind, Permission};
use cordon_starlark_worker::EvalFailure;

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
        permission: Permission,
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

impl From<EvalFailure> for StarlarkHostError {
    fn from(f: EvalFailure) -> Self {
        match f {
            EvalFailure::Script { package, message } => {
                StarlarkHostError::Script { package, message }
            }
            EvalFailure::Limit {
                package,
                kind,
                message,
            } => StarlarkHostError::Limit {
                package,
                kind,
                message,
            },
            EvalFailure::Cancelled { package } => StarlarkHostError::Cancelled { package },
            EvalFailure::NoSuchEntryPoint {
                package,
                name,
                available,
            } => StarlarkHostError::NoSuchEntryPoint {
                package,
                name,
                available,
            },
            EvalFailure::Conversion { package, message } => {
                StarlarkHostError::Conversion { package, message }
            }
        }
    }
}

impl StarlarkHostError {
    /// Rebuilds the error a worker reported for package `package` in an
    /// `Error` frame (`code`, `message`). `available` is the package's
    /// function list (for `no_such_entry_point`).
    pub(crate) fn from_worker_code(
        package: &str,
        code: &str,
        message: String,
        available: &[String],
    ) -> StarlarkHostError {
        let package = package.to_owned();
        match ErrorCode::parse(code) {
            Some(ErrorCode::Limit(kind)) => StarlarkHostError::Limit {
                package,
                kind,
                message,
            },
            Some(ErrorCode::Script | ErrorCode::Panic) => {
                StarlarkHostError::Script { package, message }
            }
            Some(ErrorCode::Cancelled) => StarlarkHostError::Cancelled { package },
            Some(ErrorCode::NoSuchEntryPoint) => StarlarkHostError::NoSuchEntryPoint {
                package,
                name: message,
                available: available.join(", "),
            },
            Some(ErrorCode::Conversion) => StarlarkHostError::Conversion { package, message },
            Some(ErrorCode::InvalidPackage) => StarlarkHostError::InvalidPackage(message),
            _ => StarlarkHostError::Internal(format!(
                "worker for package {package:?} reported {code}: {message}"
            )),
        }
    }
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
    /// What the call was refused before it failed, and the limit that
    /// ended it if one did ([`CallOutcome::denials`](crate::CallOutcome::denials));
    /// empty for a load.
    pub denials: cordon_core::explain::Explanation,
}

impl EvalError {
    /// An error with the output printed before it.
    pub fn with_output(error: StarlarkHostError, output: String) -> Self {
        EvalError {
            error,
            output,
            denials: Default::default(),
        }
    }
}

impl From<StarlarkHostError> for EvalError {
    fn from(error: StarlarkHostError) -> Self {
        EvalError {
            error,
            output: String::new(),
            denials: Default::default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a worker reports (`EvalFailure::wire_code`) comes back as the
    /// error the in-process evaluator gives for the same failure.
    #[test]
    fn worker_errors_round_trip() {
        for kind in LimitKind::ALL {
            let f = EvalFailure::Limit {
                package: "p".into(),
                kind,
                message: "m".into(),
            };
            let (c, m) = f.wire_code();
            match StarlarkHostError::from_worker_code("p", &c.as_wire(), m, &[]) {
                StarlarkHostError::Limit { kind: k, .. } => assert_eq!(k, kind),
                other => panic!("{other}"),
            }
        }
        let f = EvalFailure::NoSuchEntryPoint {
            package: "p".into(),
            name: "x".into(),
            available: "a".into(),
        };
        let (c, m) = f.wire_code();
        let e = StarlarkHostError::from_worker_code("p", &c.as_wire(), m, &["a".into()]);
        assert!(e.to_string().contains("defined functions: a"), "{e}");
        assert_eq!(
            e.to_string(),
            StarlarkHostError::from(f).to_string(),
            "the same error either way"
        );
    }
}
