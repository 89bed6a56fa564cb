//! Where a package runs: [`Isolation`], [`select_isolation`] and
//! [`StarlarkHost`], the single entry that maps (trusted?, requested
//! isolation, sandbox admission) to an executor.
//!
//! * Untrusted packages run **only** in sandboxed workers
//!   ([`Isolation::Sandboxed`], the default). Asking for
//!   [`Isolation::InProcess`] is refused; if no conforming sandbox backend
//!   was admitted, the call fails with the conformance report
//!   ([`StarlarkHostError::SandboxUnavailable`]) — there is never a
//!   fallback to in-process evaluation.
//! * Trusted packages run in process by default (fastest), or sandboxed
//!   when asked.

use std::sync::Arc;

use cordon_core::{SandboxRunner, SandboxUnavailable};

use crate::broker::{CancelToken, Capabilities};
use crate::error::StarlarkHostError;
use crate::eval::CallOutcome;
use crate::limits::Limits;
use crate::package::Package;
use crate::runner::{ExecOutcome, Runner};
use crate::sandbox::{SandboxedRunner, WorkerConfig};
use crate::stores::RunContext;

/// How a package is evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Isolation {
    /// In a worker process under the admitted sandbox. The default, and
    /// the only choice for untrusted packages.
    #[default]
    Sandboxed,
    /// In the host process. Trusted packages only: the interpreter is not
    /// a safety boundary (see the crate docs).
    InProcess,
}

/// Decides the isolation of one package: untrusted packages get
/// [`Isolation::Sandboxed`] and may not ask for anything else; trusted
/// packages get what they ask for, [`Isolation::InProcess`] by default.
pub fn select_isolation(
    package: &str,
    trusted: bool,
    requested: Option<Isolation>,
) -> Result<Isolation, StarlarkHostError> {
    match (trusted, requested) {
        (false, Some(Isolation::InProcess)) => {
            tracing::warn!(
                package,
                "refused in-process evaluation of an untrusted package"
            );
            Err(StarlarkHostError::InProcessRefused {
                package: package.to_owned(),
            })
        }
        (false, _) => Ok(Isolation::Sandboxed),
        (true, None) => Ok(Isolation::InProcess),
        (true, Some(i)) => Ok(i),
    }
}

/// The executor chosen for one call.
#[derive(Debug, Clone, Copy)]
pub enum Executor<'a> {
    /// The in-process runner (trusted packages).
    InProcess(&'a Runner),
    /// The sandboxed worker pool.
    Sandboxed(&'a SandboxedRunner),
}

impl Executor<'_> {
    /// Calls an entry point on this executor.
    pub async fn call_entry_point(
        &self,
        pkg: &Package,
        name: &str,
        args: Vec<serde_json::Value>,
        kwargs: serde_json::Map<String, serde_json::Value>,
        ctx: Option<&RunContext>,
        cancel: CancelToken,
    ) -> Result<CallOutcome, StarlarkHostError> {
        match self {
            Executor::InProcess(r) => {
                r.call_entry_point_with_cancel(pkg, name, args, kwargs, ctx, cancel)
                    .await
            }
            Executor::Sandboxed(s) => {
                s.call_entry_point_with_cancel(pkg, name, args, kwargs, ctx, cancel)
                    .await
            }
        }
    }

    /// Loads the package and returns its globals and top-level output.
    pub async fn exec_package(
        &self,
        pkg: &Package,
        ctx: Option<&RunContext>,
    ) -> Result<ExecOutcome, StarlarkHostError> {
        match self {
            Executor::InProcess(r) => r.exec_package(pkg, ctx).await,
            Executor::Sandboxed(s) => s.exec_package(pkg, ctx).await,
        }
    }
}

/// Runs packages in the isolation their trust allows. Holds the in-process
/// [`Runner`] and, if the sandbox was admitted, the [`SandboxedRunner`];
/// both share the same [`Capabilities`] (so module calls get exactly the
/// same checks either way).
#[derive(Debug)]
pub struct StarlarkHost {
    in_process: Runner,
    sandboxed: Result<SandboxedRunner, Box<SandboxUnavailable>>,
}

impl StarlarkHost {
    /// Builds the host. `sandbox` is the caller's
    /// `SandboxRunner::new(...)` result: on `Err`, untrusted packages will
    /// be refused with that report. Must be called inside a tokio runtime.
    pub fn new(
        caps: Arc<Capabilities>,
        limits: Limits,
        sandbox: Result<SandboxRunner, SandboxUnavailable>,
        worker: WorkerConfig,
    ) -> Result<Self, StarlarkHostError> {
        let sandboxed = match sandbox {
            Ok(runner) => Ok(SandboxedRunner::new(
                runner,
                caps.clone(),
                limits.clone(),
                worker,
            )?),
            Err(e) => {
                tracing::warn!(
                    backend = %e.report.backend,
                    "no conforming sandbox: untrusted Starlark packages will not run"
                );
                Err(Box::new(e))
            }
        };
        Ok(StarlarkHost {
            in_process: Runner::with_capabilities(caps, limits),
            sandboxed,
        })
    }

    /// The in-process runner.
    pub fn in_process(&self) -> &Runner {
        &self.in_process
    }

    /// The sandboxed runner, or why there is none.
    pub fn sandboxed(&self) -> Result<&SandboxedRunner, &SandboxUnavailable> {
        self.sandboxed.as_ref().map_err(|e| e.as_ref())
    }

    /// The executor for a package: [`select_isolation`], then the sandboxed
    /// runner (or the sandbox's refusal with its report) or the in-process
    /// runner.
    pub fn executor(
        &self,
        package: &str,
        trusted: bool,
        requested: Option<Isolation>,
    ) -> Result<Executor<'_>, StarlarkHostError> {
        match select_isolation(package, trusted, requested)? {
            Isolation::InProcess => Ok(Executor::InProcess(&self.in_process)),
            Isolation::Sandboxed => match &self.sandboxed {
                Ok(s) => Ok(Executor::Sandboxed(s)),
                Err(e) => Err(StarlarkHostError::SandboxUnavailable {
                    package: package.to_owned(),
                    source: e.clone(),
                }),
            },
        }
    }

    /// Calls an entry point of `pkg` in the isolation its trust allows.
    #[allow(clippy::too_many_arguments)]
    pub async fn call_entry_point(
        &self,
        pkg: &Package,
        trusted: bool,
        isolation: Option<Isolation>,
        name: &str,
        args: Vec<serde_json::Value>,
        kwargs: serde_json::Map<String, serde_json::Value>,
        ctx: Option<&RunContext>,
    ) -> Result<CallOutcome, StarlarkHostError> {
        self.executor(&pkg.id, trusted, isolation)?
            .call_entry_point(pkg, name, args, kwargs, ctx, CancelToken::new())
            .await
    }

    /// Loads `pkg` in the isolation its trust allows and returns its
    /// globals and top-level output.
    pub async fn exec_package(
        &self,
        pkg: &Package,
        trusted: bool,
        isolation: Option<Isolation>,
        ctx: Option<&RunContext>,
    ) -> Result<ExecOutcome, StarlarkHostError> {
        self.executor(&pkg.id, trusted, isolation)?
            .exec_package(pkg, ctx)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untrusted_never_in_process() {
        assert_eq!(
            select_isolation("p", false, None).unwrap(),
            Isolation::Sandboxed
        );
        assert_eq!(
            select_isolation("p", false, Some(Isolation::Sandboxed)).unwrap(),
            Isolation::Sandboxed
        );
        let e = select_isolation("p", false, Some(Isolation::InProcess)).unwrap_err();
        assert!(matches!(e, StarlarkHostError::InProcessRefused { .. }));
        assert!(e.to_string().contains("not trusted"), "{e}");
        assert_eq!(
            select_isolation("p", true, None).unwrap(),
            Isolation::InProcess
        );
        assert_eq!(
            select_isolation("p", true, Some(Isolation::Sandboxed)).unwrap(),
            Isolation::Sandboxed
        );
    }
}
