//! The runners and the one place that picks between them.

use std::sync::Arc;

use crate::backend::SandboxBackend;
use crate::child::RunningChild;
use crate::error::{SandboxUnavailable, SpawnError};
use crate::report::{ConformanceReport, ConformanceSuite};
use crate::spawn::{RunnerConfig, Spawner};
use crate::spec::{ChildSpec, TrustTier};

/// Starts children.
#[async_trait::async_trait]
pub trait Runner: Send + Sync {
    /// `"trusted"` or `"sandbox:<backend>"`, for logs.
    fn name(&self) -> String;

    /// Starts `spec`. On error nothing was executed.
    ///
    /// Call it from an async task, not from `spawn_blocking`: the child's
    /// parent-death signal is tied to the spawning thread, and blocking-pool
    /// threads exit when idle.
    async fn start(&self, spec: ChildSpec) -> Result<RunningChild, SpawnError>;
}

impl std::fmt::Debug for dyn Runner + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runner({})", self.name())
    }
}

/// Baseline hygiene, no OS sandbox: for first-party code only.
///
/// Refuses specs whose tier is [`TrustTier::Untrusted`] (the default), so
/// untrusted code cannot end up here by accident. Enforces the wall-clock
/// deadline; rlimits are left to sandbox backends.
#[derive(Debug, Clone)]
pub struct TrustedProcessRunner {
    spawner: Spawner,
}

impl TrustedProcessRunner {
    /// A trusted runner with `config`.
    pub fn new(config: RunnerConfig) -> Self {
        TrustedProcessRunner {
            spawner: Spawner::hygiene_only(config),
        }
    }
}

impl Default for TrustedProcessRunner {
    fn default() -> Self {
        TrustedProcessRunner::new(RunnerConfig::default())
    }
}

#[async_trait::async_trait]
impl Runner for TrustedProcessRunner {
    fn name(&self) -> String {
        "trusted".into()
    }

    async fn start(&self, spec: ChildSpec) -> Result<RunningChild, SpawnError> {
        if spec.trust != TrustTier::Trusted {
            return Err(SpawnError::UntrustedOnTrustedRunner);
        }
        self.spawner.spawn(&spec)
    }
}

/// Hygiene plus an OS sandbox backend that passed the probes on this host
/// (P1–P7, and P8 if it claims the egress allowlist).
///
/// The only constructor runs the conformance suite first and refuses a
/// backend that is unavailable or does not pass every probe; the error
/// carries the report. The report is kept for introspection.
#[derive(Clone)]
pub struct SandboxRunner {
    spawner: Spawner,
    report: Arc<ConformanceReport>,
}

impl std::fmt::Debug for SandboxRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxRunner")
            .field("backend", &self.report.backend)
            .finish()
    }
}

impl SandboxRunner {
    /// Runs `suite` against `backend` and builds a runner only if the report
    /// conforms and covers the backend: the backend is available, each of
    /// P1..P7 (and P8 if the backend claims the egress allowlist,
    /// [`ProbeId::required_of`](crate::ProbeId::required_of)) ran, every
    /// probe that ran passed, and the report
    /// names this backend. A `config` with
    /// [`Network::Allow`](crate::Network::Allow) also needs P8 to have run
    /// and passed.
    pub async fn new(
        backend: Arc<dyn SandboxBackend>,
        suite: &dyn ConformanceSuite,
        config: RunnerConfig,
    ) -> Result<SandboxRunner, SandboxUnavailable> {
        if let Some(reason) = backend.availability().reason() {
            let report = ConformanceReport::unavailable(backend.as_ref(), reason);
            tracing::warn!(backend = backend.name(), %reason, "sandbox backend unavailable");
            return Err(SandboxUnavailable {
                report: Box::new(report),
            });
        }
        let report = suite.run(Arc::clone(&backend)).await;
        // Every probe the backend must pass ran (ProbeId::required_of): P8
        // for a backend that claims the egress allowlist (a report without
        // it, whatever its other probes, does not admit such a backend).
        if !report.covers(backend.as_ref()) {
            tracing::warn!(
                backend = backend.name(),
                "the report lacks a probe the backend must pass (P8 for one that claims the \
                 egress allowlist); untrusted children will not run"
            );
            return Err(SandboxUnavailable {
                report: Box::new(report),
            });
        }
        // A network namespace of the sandbox's own shares the allowlist's
        // socket filter, which P8 proves.
        let needs_egress = config.network.allowlist().is_some()
            || matches!(config.network, crate::Network::Namespace);
        if needs_egress && report.conforms() && !report.proves_egress_allowlist() {
            tracing::warn!(
                backend = backend.name(),
                "the configuration asks for an egress allowlist, which this backend did not \
                 prove (probe P8); untrusted children will not run"
            );
            return Err(SandboxUnavailable {
                report: Box::new(report),
            });
        }
        let needs_broker = matches!(config.network, crate::Network::Brokered(_));
        if needs_broker && report.conforms() && !report.proves_credential_broker() {
            tracing::warn!(
                backend = backend.name(),
                "the configuration asks for the credential broker, which this backend did not \
                 prove (probe P8's run with it; a report from a build without the broker does \
                 not count); untrusted children will not run"
            );
            return Err(SandboxUnavailable {
                report: Box::new(report),
            });
        }
        if report.backend != backend.name() || !report.conforms() {
            tracing::warn!(
                backend = backend.name(),
                report_backend = %report.backend,
                "sandbox backend does not conform; untrusted children will not run"
            );
            return Err(SandboxUnavailable {
                report: Box::new(report),
            });
        }
        tracing::info!(
            backend = backend.name(),
            suite_ms = report.total_duration_ms,
            "sandbox backend conforms"
        );
        Ok(SandboxRunner {
            spawner: Spawner::confined(backend, config),
            report: Arc::new(report),
        })
    }

    /// The conformance report the runner was admitted with.
    pub fn report(&self) -> &ConformanceReport {
        &self.report
    }

    /// The runner's configuration.
    pub fn config(&self) -> &RunnerConfig {
        self.spawner.config()
    }

    /// The admitted backend.
    pub fn backend(&self) -> &Arc<dyn SandboxBackend> {
        self.spawner
            .backend()
            .expect("a sandbox runner's spawner is confined")
    }
}

#[async_trait::async_trait]
impl Runner for SandboxRunner {
    fn name(&self) -> String {
        format!("sandbox:{}", self.report.backend)
    }

    async fn start(&self, spec: ChildSpec) -> Result<RunningChild, SpawnError> {
        // Each limit must hold at its scope: what this backend proved it
        // holds on this host is in the report probe P6 checked.
        let limits = self.spawner.config().ceilings.narrow(&spec.limits)?;
        let facts = &self.report.host.backend_facts;
        let discarded = matches!(spec.scratch, crate::Scratch::Fresh);
        limits.check_scopes(
            crate::LimitScopes::held(facts, discarded),
            &self.report.backend,
            facts,
        )?;
        self.spawner.spawn(&spec)
    }
}

/// Picks the runner for a trust tier — the single place that decides.
///
/// - `Trusted` → `trusted`.
/// - `Untrusted` → the sandbox runner if it was admitted; otherwise
///   [`NoRunner::Unavailable`] with the error from its construction, report
///   included, or [`NoRunner::NoSandbox`] when the caller made none (`None`:
///   a caller that only runs trusted code need not run the gate). Never the
///   trusted runner.
pub fn select_runner<'a>(
    tier: TrustTier,
    trusted: &'a TrustedProcessRunner,
    sandbox: Option<&'a Result<SandboxRunner, SandboxUnavailable>>,
) -> Result<&'a dyn Runner, NoRunner> {
    match tier {
        TrustTier::Trusted => Ok(trusted),
        TrustTier::Untrusted => match sandbox {
            Some(Ok(runner)) if runner.report().conforms() => Ok(runner),
            Some(Ok(runner)) => Err(NoRunner::Unavailable(SandboxUnavailable {
                report: Box::new(runner.report().clone()),
            })),
            Some(Err(e)) => Err(NoRunner::Unavailable(e.clone())),
            None => Err(NoRunner::NoSandbox),
        },
    }
}

/// Why [`select_runner`] has no runner for untrusted code.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NoRunner {
    /// The sandbox runner was not admitted; the report says why.
    #[error(transparent)]
    Unavailable(#[from] SandboxUnavailable),
    /// No sandbox runner was made at all.
    #[error(
        "no sandbox runner was made, so untrusted code will not run; \
         admit one with SandboxRunner::new"
    )]
    NoSandbox,
}
