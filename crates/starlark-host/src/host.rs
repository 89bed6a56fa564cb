//! The one way in: [`StarlarkHost`] runs a package in the isolation its
//! [`TrustTier`] allows, behind one [`Evaluator`] seam with two
//! crate-private implementations (in process, and the worker pool).
//!
//! * **Untrusted** packages reach only the worker pool: the route for
//!   [`TrustTier::Untrusted`] is typed `&WorkerPool` ([`StarlarkHost`]'s
//!   `untrusted_route`), and no public API of this crate names in-process
//!   evaluation, so there is nothing to call that would evaluate one in
//!   process. A host
//!   built without a sandbox, or whose sandbox was not admitted, refuses
//!   them ([`StarlarkHostError::NoSandbox`],
//!   [`StarlarkHostError::SandboxUnavailable`] with the conformance
//!   report), never falling back.
//! * **Trusted** packages run, by default, in an unconfined worker process
//!   ([`Isolation::Process`]); in process (fastest) or in the sandboxed
//!   pool when the host is built with
//!   [`StarlarkHostBuilder::trusted_isolation`]`(Isolation::InProcess)` or
//!   `(Isolation::Sandboxed)`.
//!
//! Both routes run the same checks first (runnable package, granted and
//! requested modules) and serve module calls with the same
//! [`ModuleBroker`](crate::ModuleBroker) code.

use std::sync::Arc;

use cordon_core::{SandboxRunner, SandboxUnavailable, TrustTier};

use cordon_starlark_protocol::{EvalLimits, Package};

use crate::broker::{ensure_runnable, Admitted, Capabilities, Services};
use crate::error::{EvalError, StarlarkHostError};
use crate::evaluator::{Call, CallOutcome, Evaluator, ExecOutcome};
use crate::in_process::{CacheStats, InProcess};
use crate::sandbox::{WorkerConfig, WorkerPool};
use crate::stores::{PackageStore, RunContext};

/// Where a **trusted** package is evaluated. (An untrusted one has no
/// choice: always a sandboxed worker.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Isolation {
    /// In a worker process with no sandbox, under limits the worker sets
    /// on itself (memory, CPU time, files) and killed at its deadline: an
    /// accident in a package (a memory bomb, a runaway builtin, a native
    /// stack overflow) ends that worker, never the host. Needs a worker
    /// program ([`StarlarkHostBuilder::worker`]). The default.
    #[default]
    Process,
    /// In the host process: the fastest, and **no memory protection**
    /// beyond size checks. The interpreter checks its heap limit only
    /// between steps; Cordon refuses up front the one-step builders it can
    /// see (`*`, `%`, `join`, `format`, `sorted`, `reversed`: results past
    /// the heap limit), but others remain (`list(range(1 << 30))`, `*=`,
    /// `str`, `repr`, `print` or an f-string of a value that shares one
    /// large string many times; `str` of 200 000 nested structs overflows
    /// the native stack and aborts the process). An explicit choice for code you trust not to do that.
    InProcess,
    /// In a worker process under the admitted sandbox, like untrusted
    /// packages.
    Sandboxed,
}

/// Builds a [`StarlarkHost`]: services and limits, a sandbox for untrusted
/// packages, and where trusted ones run.
pub struct StarlarkHostBuilder {
    services: Services,
    limits: EvalLimits,
    sandbox: Option<(Result<SandboxRunner, SandboxUnavailable>, WorkerConfig)>,
    worker: Option<WorkerConfig>,
    trusted: Isolation,
}

impl std::fmt::Debug for StarlarkHostBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StarlarkHostBuilder")
            .field("limits", &self.limits)
            .field("sandbox", &self.sandbox.as_ref().map(|(s, _)| s.is_ok()))
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}

impl StarlarkHostBuilder {
    /// The evaluation limits (default: [`EvalLimits::default`]).
    pub fn limits(mut self, limits: EvalLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The sandbox untrusted packages run in: the caller's
    /// `SandboxRunner::new(...)` result (on `Err`, untrusted packages are
    /// refused with that report) and which program serves as worker
    /// (normally `WorkerConfig::new(WorkerProgram::current_exe()?)` in a
    /// binary whose `main` calls [`dispatch_worker`](crate::dispatch_worker)).
    pub fn sandbox(
        mut self,
        sandbox: Result<SandboxRunner, SandboxUnavailable>,
        worker: WorkerConfig,
    ) -> Self {
        self.sandbox = Some((sandbox, worker));
        self
    }

    /// The worker program for trusted packages under
    /// [`Isolation::Process`] (default: the one given to
    /// [`StarlarkHostBuilder::sandbox`]). Its `limits` are what each
    /// worker sets on itself.
    pub fn worker(mut self, worker: WorkerConfig) -> Self {
        self.worker = Some(worker);
        self
    }

    /// Where trusted packages run (default [`Isolation::Process`]).
    pub fn trusted_isolation(mut self, isolation: Isolation) -> Self {
        self.trusted = isolation;
        self
    }

    /// Builds the host. With a sandbox, call it inside a tokio runtime (the
    /// pool's idle sweeper runs there); it stages the worker program.
    pub fn build(self) -> Result<StarlarkHost, StarlarkHostError> {
        let packages = self.services.packages.clone();
        let caps = Capabilities::new(self.services)?;
        let process_pool = match self.trusted {
            Isolation::Process => {
                let worker = self
                    .worker
                    .or_else(|| self.sandbox.as_ref().map(|(_, w)| w.clone()))
                    .ok_or_else(|| StarlarkHostError::WorkerStart {
                        package: String::new(),
                        message: "trusted packages run in a worker process by default \
                                  (Isolation::Process), and this host has no worker program: \
                                  give it one (StarlarkHostBuilder::worker or ::sandbox), or \
                                  choose Isolation::InProcess, which has no memory protection"
                            .into(),
                    })?;
                Some(WorkerPool::unconfined(
                    caps.clone(),
                    self.limits.clone(),
                    worker,
                )?)
            }
            Isolation::InProcess | Isolation::Sandboxed => None,
        };
        let pool = match self.sandbox {
            None => Pool::None,
            Some((Ok(runner), worker)) => Pool::Ready(WorkerPool::new(
                runner,
                caps.clone(),
                self.limits.clone(),
                worker,
            )?),
            Some((Err(e), _)) => {
                tracing::warn!(
                    backend = %e.report.backend,
                    "no conforming sandbox: untrusted Starlark packages will not run"
                );
                Pool::Refused(Box::new(e))
            }
        };
        Ok(StarlarkHost {
            packages,
            caps: caps.clone(),
            in_process: InProcess::new(caps, self.limits),
            pool,
            process_pool,
            trusted: self.trusted,
        })
    }
}

#[derive(Debug)]
enum Pool {
    /// The host was built without a sandbox.
    None,
    /// The sandbox was not admitted; its report says why.
    Refused(Box<SandboxUnavailable>),
    Ready(WorkerPool),
}

/// Runs Starlark packages in the isolation their trust tier allows: the
/// crate's one entry point: untrusted packages only ever in the worker
/// pool, trusted ones in process unless the host is built otherwise.
///
/// ```no_run
/// use cordon_core::TrustTier;
/// use cordon_starlark::{load_package_from_path, Call, StarlarkHost, Services};
/// use cordon_starlark::{InMemoryPackageStore, InMemoryPermissionStore};
/// use std::sync::Arc;
///
/// # async fn demo(sandbox: Result<cordon_core::SandboxRunner, cordon_core::SandboxUnavailable>)
/// # -> Result<(), Box<dyn std::error::Error>> {
/// let services = Services::new(
///     Arc::new(InMemoryPackageStore::new()),
///     Arc::new(InMemoryPermissionStore::new()),
/// );
/// let worker = cordon_starlark::WorkerConfig::new(cordon_starlark::WorkerProgram::current_exe()?);
/// let host = StarlarkHost::builder(services).sandbox(sandbox, worker).build()?;
/// let pkg = load_package_from_path("examples/starlark/hello")?;
/// let out = host.call(&pkg, TrustTier::Untrusted, Call::new("main")).await?;
/// println!("{}", out.value);
/// host.shutdown().await;
/// # Ok(()) }
/// ```
pub struct StarlarkHost {
    packages: Arc<dyn PackageStore>,
    caps: Arc<Capabilities>,
    in_process: InProcess,
    pool: Pool,
    /// Unconfined workers for trusted packages ([`Isolation::Process`]).
    process_pool: Option<WorkerPool>,
    trusted: Isolation,
}

impl std::fmt::Debug for StarlarkHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StarlarkHost")
            .field("in_process", &self.in_process)
            .field("pool", &self.pool)
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}

impl StarlarkHost {
    /// Starts building a host over `services` (stores, notifier, provider
    /// resolver, HTTP client settings).
    pub fn builder(services: Services) -> StarlarkHostBuilder {
        StarlarkHostBuilder {
            services,
            limits: EvalLimits::default(),
            sandbox: None,
            worker: None,
            trusted: Isolation::default(),
        }
    }

    /// Loads `pkg` in the isolation `tier` allows and returns its globals
    /// and the output of its top level.
    pub async fn load(
        &self,
        pkg: &Package,
        tier: TrustTier,
        ctx: Option<&RunContext>,
    ) -> Result<ExecOutcome, EvalError> {
        let evaluator = self.route(pkg, tier)?;
        let admitted = self.admit(pkg, ctx).await?;
        evaluator.load(pkg, admitted.modules).await
    }

    /// Calls an entry point of `pkg` in the isolation `tier` allows. The
    /// package is loaded once and kept (in process: compiled and cached by
    /// source hash and module set; in the pool: a warm worker); the call
    /// runs on a fresh heap, and its `output` holds only what it printed.
    pub async fn call(
        &self,
        pkg: &Package,
        tier: TrustTier,
        call: Call,
    ) -> Result<CallOutcome, EvalError> {
        let evaluator = self.route(pkg, tier)?;
        let admitted = self.admit(pkg, call.context.as_ref()).await?;
        evaluator.call(pkg, admitted, call).await
    }

    /// Looks `package_id` up in the [`PackageStore`](crate::PackageStore)
    /// of the host's [`Services`] and calls it like [`StarlarkHost::call`].
    pub async fn call_by_id(
        &self,
        package_id: &str,
        tier: TrustTier,
        call: Call,
    ) -> Result<CallOutcome, EvalError> {
        let pkg = self
            .packages
            .get(package_id)
            .await
            .map_err(StarlarkHostError::Store)?
            .ok_or_else(|| StarlarkHostError::UnknownPackage(package_id.to_owned()))?;
        self.call(&pkg, tier, call).await
    }

    /// The worker pool (for its counters, or a benchmark's cold starts),
    /// or why untrusted packages are refused.
    pub fn worker_pool(&self) -> Result<&WorkerPool, StarlarkHostError> {
        self.untrusted_route("")
    }

    /// Counters of the in-process compiled-package cache.
    pub fn cache_stats(&self) -> CacheStats {
        self.in_process.cache_stats()
    }

    /// The evaluation limits.
    pub fn limits(&self) -> &EvalLimits {
        self.in_process.limits()
    }

    /// Kills and reaps every idle and spare worker (in-flight calls are
    /// unaffected; later calls start new workers).
    pub async fn shutdown(&self) {
        if let Pool::Ready(pool) = &self.pool {
            pool.shutdown().await;
        }
        if let Some(pool) = &self.process_pool {
            pool.shutdown().await;
        }
    }

    /// The checks every evaluation starts with, made once here: the package
    /// is runnable, and the modules its grants, its manifest and the
    /// context allow.
    async fn admit(
        &self,
        pkg: &Package,
        ctx: Option<&RunContext>,
    ) -> Result<Admitted, StarlarkHostError> {
        ensure_runnable(pkg)?;
        self.caps.admit(pkg, ctx).await
    }

    fn route(&self, pkg: &Package, tier: TrustTier) -> Result<&dyn Evaluator, StarlarkHostError> {
        match (tier, self.trusted) {
            (TrustTier::Untrusted, _) | (TrustTier::Trusted, Isolation::Sandboxed) => {
                Ok(self.untrusted_route(&pkg.id)?)
            }
            (TrustTier::Trusted, Isolation::InProcess) => Ok(&self.in_process),
            (TrustTier::Trusted, Isolation::Process) => match &self.process_pool {
                Some(pool) => Ok(pool),
                None => Err(StarlarkHostError::Internal(
                    "the host was built without its process pool".into(),
                )),
            },
        }
    }

    /// The only evaluator an untrusted package can reach: its type is the
    /// worker pool.
    fn untrusted_route(&self, package: &str) -> Result<&WorkerPool, StarlarkHostError> {
        match &self.pool {
            // Only `WorkerPool::new` (over a SandboxRunner) makes this pool;
            // checked anyway, so a refactoring cannot route untrusted code
            // to unconfined workers.
            Pool::Ready(pool) if pool.is_sandboxed() => Ok(pool),
            Pool::Ready(_) => Err(StarlarkHostError::Internal(
                "the untrusted pool is not sandboxed; refusing".into(),
            )),
            Pool::Refused(e) => Err(StarlarkHostError::SandboxUnavailable {
                package: package.to_owned(),
                source: e.clone(),
            }),
            Pool::None => Err(StarlarkHostError::NoSandbox {
                package: package.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::{InMemoryPackageStore, InMemoryPermissionStore};
    use std::collections::BTreeMap;

    fn services() -> Services {
        Services::new(
            Arc::new(InMemoryPackageStore::new()),
            Arc::new(InMemoryPermissionStore::new()),
        )
    }

    fn pkg() -> Package {
        let m = crate::Manifest::minimal("p", "main.star");
        let mut sources = BTreeMap::new();
        sources.insert(
            "main.star".to_owned(),
            "def f():\n    return 1\n".to_owned(),
        );
        Package::new(m, sources)
    }

    #[tokio::test]
    async fn untrusted_never_runs_in_process_without_a_sandbox() {
        let host = StarlarkHost::builder(services())
            .trusted_isolation(Isolation::InProcess)
            .build()
            .unwrap();
        let err = host
            .call(&pkg(), TrustTier::Untrusted, Call::new("f"))
            .await
            .unwrap_err();
        assert!(
            matches!(err.error, StarlarkHostError::NoSandbox { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("never run in process"), "{err}");
        // The same package, trusted, runs in process.
        let out = host
            .call(&pkg(), TrustTier::Trusted, Call::new("f"))
            .await
            .unwrap();
        assert_eq!(out.value, serde_json::json!(1));
    }

    #[tokio::test]
    async fn trusted_may_be_sent_to_the_sandbox_too() {
        let host = StarlarkHost::builder(services())
            .trusted_isolation(Isolation::Sandboxed)
            .build()
            .unwrap();
        let err = host
            .call(&pkg(), TrustTier::Trusted, Call::new("f"))
            .await
            .unwrap_err();
        assert!(
            matches!(err.error, StarlarkHostError::NoSandbox { .. }),
            "{err}"
        );
    }

    /// A host with unconfined workers for trusted packages still refuses
    /// an untrusted one when it has no sandbox: the process pool is never
    /// its route.
    #[tokio::test]
    async fn untrusted_never_reaches_the_unconfined_workers() {
        let program = crate::WorkerProgram::path(std::env::current_exe().unwrap());
        let host = StarlarkHost::builder(services())
            .worker(crate::WorkerConfig::new(program))
            .build()
            .unwrap();
        assert!(host.process_pool.is_some());
        let err = host
            .call(&pkg(), TrustTier::Untrusted, Call::new("f"))
            .await
            .unwrap_err();
        assert!(
            matches!(err.error, StarlarkHostError::NoSandbox { .. }),
            "{err}"
        );
        host.shutdown().await;
    }

    #[tokio::test]
    async fn the_default_for_trusted_packages_needs_a_worker_program() {
        let err = StarlarkHost::builder(services()).build().unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("Isolation::Process") && msg.contains("no memory protection"),
            "{msg}"
        );
    }
}
