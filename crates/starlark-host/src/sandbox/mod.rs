//! The host side of sandboxed evaluation: [`WorkerPool`] runs each
//! package in a pool of worker processes started through an admitted
//! [`cordon_core::SandboxRunner`], and serves their module calls with the
//! same [`ModuleBroker`] code as in-process runs.
//!
//! * [`WorkerConnection`] speaks the protocol (`docs/protocol.md`) over any
//!   async byte streams: handshake, `load_package`, `call`, and brokering
//!   `module` requests. Anything unexpected is terminal.
//! * [`WorkerPool`] owns the pool: per (source hash, module set) a few
//!   warm workers with the package loaded and frozen, reused across calls,
//!   retired after a failure, after [`PoolConfig::max_calls_per_worker`]
//!   calls, when their CPU budget runs low, or when idle for
//!   [`PoolConfig::idle_timeout`].
//!
//! The wall-clock deadline is enforced twice: the worker's interpreter
//! stops at [`EvalLimits::timeout`] by itself, and the host kills the worker's
//! process group [`WorkerConfig::kill_grace`] later if it has not answered.

mod config;
mod connection;
mod failure;
mod pool;
mod staging;

pub use config::{PoolConfig, WorkerConfig, WorkerLimits, WorkerProgram};
pub use connection::{SessionError, WorkerConnection};
use failure::memory_message;
use pool::{sweep_idle, Pids, PoolKey, Worker};
pub use pool::{ColdWorker, PoolStats};
use staging::{stage, Staged};

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cordon_core::{ExitOutcome, Runner, RunningChild, SandboxRunner, TrustedProcessRunner};

use cordon_starlark_protocol::{wire, EvalLimits, LimitKind, ModuleSet, Package};

use crate::broker::{Admitted, Capabilities};
use crate::error::{EvalError, StarlarkHostError};
use crate::evaluator::{with_denials, Call, CallOutcome, Evaluator, ExecOutcome};

/// What starts a pool's workers.
enum WorkerRunner {
    /// The admitted sandbox: every untrusted package's workers.
    Sandboxed(SandboxRunner),
    /// No sandbox, only the limits the worker sets on itself: trusted
    /// packages under [`Isolation::Process`](crate::Isolation::Process),
    /// for crash-proofing, not confinement.
    Unconfined(TrustedProcessRunner),
}

impl std::fmt::Debug for WorkerRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerRunner::Sandboxed(r) => r.fmt(f),
            WorkerRunner::Unconfined(_) => f.write_str("unconfined (rlimits only)"),
        }
    }
}

impl WorkerRunner {
    async fn start(&self, spec: cordon_core::ChildSpec) -> Result<RunningChild, String> {
        let r = match self {
            WorkerRunner::Sandboxed(r) => {
                r.start(spec.trust(cordon_core::TrustTier::Untrusted)).await
            }
            WorkerRunner::Unconfined(r) => {
                r.start(spec.trust(cordon_core::TrustTier::Trusted)).await
            }
        };
        r.map_err(|e| e.to_string())
    }
}

struct Inner {
    runner: WorkerRunner,
    caps: Arc<Capabilities>,
    limits: EvalLimits,
    config: WorkerConfig,
    /// `config.limits` as spawn limits, checked against the runner's
    /// ceilings when the pool was made.
    worker_limits: cordon_core::Limits,
    staged: Staged,
    idle: Mutex<HashMap<PoolKey, Vec<Worker>>>,
    permits: tokio::sync::Semaphore,
    started: AtomicU64,
    reused: AtomicU64,
    retired: AtomicU64,
    instance_seq: AtomicU64,
    pids: Pids,
    spares: Mutex<Vec<Worker>>,
    replenishing: std::sync::atomic::AtomicBool,
    paused: std::sync::atomic::AtomicBool,
    me: Weak<Inner>,
}

/// Runs packages in sandboxed worker processes: the evaluator for every
/// untrusted package, and for trusted ones on a host built with
/// [`Isolation::Sandboxed`](crate::Isolation::Sandboxed). Made by
/// [`StarlarkHostBuilder::build`](crate::StarlarkHostBuilder::build);
/// [`StarlarkHost::worker_pool`](crate::StarlarkHost::worker_pool) gives
/// its counters. Cheap to clone.
#[derive(Clone)]
pub struct WorkerPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("runner", &self.inner.runner)
            .field("program", &self.inner.staged.program)
            .field("stats", &self.pool_stats())
            .finish()
    }
}

/// Kills a worker and reaps it; returns how it ended and its stderr tail.
async fn kill_and_reap(mut w: Worker) -> (Option<ExitOutcome>, String) {
    w.child.kill();
    let outcome = tokio::time::timeout(Duration::from_secs(5), w.child.wait())
        .await
        .ok()
        .and_then(Result::ok);
    let tail = String::from_utf8_lossy(&w.child.stderr_tail()).into_owned();
    (outcome, tail)
}

/// Reaps a worker whose pipe closed (it is dying or dead), then kills
/// whatever is left.
async fn reap_dead(mut w: Worker) -> (Option<ExitOutcome>, String) {
    let (outcome, _) = reap_closed(&mut w.child).await;
    let tail = String::from_utf8_lossy(&w.child.stderr_tail()).into_owned();
    (outcome, tail)
}

/// Gives a child whose pipe closed a moment to end by itself, then kills
/// it. Returns how it ended and whether it ended by itself (else the
/// outcome is that of the kill).
pub(super) async fn reap_closed(child: &mut RunningChild) -> (Option<ExitOutcome>, bool) {
    match tokio::time::timeout(Duration::from_millis(500), child.wait()).await {
        Ok(r) => (r.ok(), true),
        Err(_) => {
            child.kill();
            let outcome = tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .ok()
                .and_then(Result::ok);
            (outcome, false)
        }
    }
}

impl WorkerPool {
    /// A pool over an admitted sandbox `runner`, serving module calls
    /// with `caps`, evaluating under `limits`. Stages the worker program.
    pub(crate) fn new(
        runner: SandboxRunner,
        caps: Arc<Capabilities>,
        limits: EvalLimits,
        config: WorkerConfig,
    ) -> Result<Self, StarlarkHostError> {
        let worker_limits = config
            .limits
            .within(&runner.config().ceilings)
            .map_err(|e| StarlarkHostError::WorkerStart {
                package: String::new(),
                message: format!(
                    "the worker limits (WorkerConfig::limits) do not fit the sandbox runner: {e}"
                ),
            })?;
        Self::with_runner(
            WorkerRunner::Sandboxed(runner),
            worker_limits,
            caps,
            limits,
            config,
        )
    }

    /// A pool of unconfined workers for trusted packages
    /// ([`Isolation::Process`](crate::Isolation::Process)): each worker
    /// sets `config.limits` on itself (memory, CPU, files) and the pool
    /// kills it at its deadline, so an accident in a package ends that
    /// worker, not the host. Not a sandbox: never used for untrusted
    /// packages.
    pub(crate) fn unconfined(
        caps: Arc<Capabilities>,
        limits: EvalLimits,
        config: WorkerConfig,
    ) -> Result<Self, StarlarkHostError> {
        let worker_limits = cordon_core::Limits {
            deadline: Some(config.limits.lifetime),
            ..Default::default()
        };
        let runner = TrustedProcessRunner::new(cordon_core::RunnerConfig::default());
        Self::with_runner(
            WorkerRunner::Unconfined(runner),
            worker_limits,
            caps,
            limits,
            config,
        )
    }

    /// Whether the workers run under the admitted sandbox (the only pool an
    /// untrusted package may reach).
    pub(crate) fn is_sandboxed(&self) -> bool {
        matches!(self.inner.runner, WorkerRunner::Sandboxed(_))
    }

    fn with_runner(
        runner: WorkerRunner,
        worker_limits: cordon_core::Limits,
        caps: Arc<Capabilities>,
        limits: EvalLimits,
        config: WorkerConfig,
    ) -> Result<Self, StarlarkHostError> {
        let staged = stage(&config.program.path).map_err(|e| StarlarkHostError::WorkerStart {
            package: String::new(),
            message: format!(
                "cannot stage worker program {}: {e}",
                config.program.path.display()
            ),
        })?;
        tracing::debug!(program = %staged.program.display(), "staged the Starlark worker program");
        let inner = Arc::new_cyclic(|me| Inner {
            permits: tokio::sync::Semaphore::new(config.pool.max_concurrent_calls.max(1)),
            runner,
            caps,
            limits,
            config,
            worker_limits,
            staged,
            idle: Mutex::new(HashMap::new()),
            started: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            instance_seq: AtomicU64::new(0),
            pids: Pids::default(),
            spares: Mutex::new(Vec::new()),
            replenishing: Default::default(),
            paused: Default::default(),
            me: me.clone(),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&inner);
            let period = (inner.config.pool.idle_timeout / 2).max(Duration::from_millis(100));
            rt.spawn(sweep_idle(weak, period));
        }
        Ok(WorkerPool { inner })
    }

    /// The evaluation limits.
    pub fn limits(&self) -> &EvalLimits {
        &self.inner.limits
    }

    /// The worker configuration.
    pub fn config(&self) -> &WorkerConfig {
        &self.inner.config
    }

    /// The capabilities module calls are served with.
    pub fn capabilities(&self) -> &Arc<Capabilities> {
        &self.inner.caps
    }

    /// The staged worker executable.
    pub fn staged_program(&self) -> &Path {
        &self.inner.staged.program
    }

    /// Pool counters.
    pub fn pool_stats(&self) -> PoolStats {
        let idle = self
            .inner
            .idle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(Vec::len)
            .sum();
        PoolStats {
            spares: self
                .inner
                .spares
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len(),
            started: self.inner.started.load(Ordering::Relaxed),
            reused: self.inner.reused.load(Ordering::Relaxed),
            retired: self.inner.retired.load(Ordering::Relaxed),
            idle,
        }
    }

    /// Process ids of the live workers (idle and busy), for diagnostics.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.inner
            .pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect()
    }

    /// Starts a worker for `pkg` outside the pool and returns how long
    /// that took; for benchmarks. With `use_spare` a ready spare is used if
    /// there is one (then only `load_package` is timed); without, it is a
    /// full cold start (spawn, handshake, `load_package`). Hand the worker
    /// to [`WorkerPool::discard`].
    pub async fn time_cold_start(
        &self,
        pkg: &Package,
        modules: ModuleSet,
        use_spare: bool,
    ) -> Result<(Duration, ColdWorker), StarlarkHostError> {
        let t = Instant::now();
        let w = self
            .inner
            .start_worker(pkg, modules, use_spare)
            .await
            .map_err(|e| e.error)?;
        Ok((t.elapsed(), ColdWorker(w)))
    }

    /// Waits (up to `timeout`) until at least `n` spare workers are ready.
    pub async fn wait_for_spares(&self, n: usize, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.pool_stats().spares >= n {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Kills and reaps a worker from [`WorkerPool::time_cold_start`].
    pub async fn discard(&self, worker: ColdWorker) {
        self.inner.retire(worker.0).await;
    }

    /// Kills and reaps every idle worker (in-flight calls are unaffected).
    /// Spare workers are killed too (after any spare being started has
    /// finished starting); new spares are started again on later calls.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.paused.store(true, Ordering::SeqCst);
        for _ in 0..1000 {
            if !inner.replenishing.load(Ordering::SeqCst) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut all: Vec<Worker> = {
            let mut idle = inner.idle.lock().unwrap_or_else(|e| e.into_inner());
            idle.drain().flat_map(|(_, v)| v).collect()
        };
        all.extend(
            inner
                .spares
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..),
        );
        for w in all {
            inner.retire(w).await;
        }
        inner.paused.store(false, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Evaluator for WorkerPool {
    /// Loads the package in a worker (or reuses a warm one) and returns its
    /// globals and top-level output.
    async fn load(&self, pkg: &Package, modules: ModuleSet) -> Result<ExecOutcome, EvalError> {
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| StarlarkHostError::Internal("the worker pool is closed".into()))?;
        let (worker, cached) = self.inner.checkout(pkg, modules).await?;
        let out = ExecOutcome {
            globals: worker.loaded.globals.clone(),
            functions: worker.loaded.functions.clone(),
            output: worker.loaded.output.clone(),
            modules: modules.names().into_iter().map(str::to_owned).collect(),
            cached,
        };
        self.inner.check_in(worker).await;
        tracing::info!(package = %pkg.id, cached, modules = ?modules.names(), "package executed in a sandboxed worker");
        Ok(out)
    }

    /// Calls a function of the package in a sandboxed worker; `cached` in
    /// the outcome means a warm worker served it. Dropping the future
    /// kills the worker.
    async fn call(
        &self,
        pkg: &Package,
        admitted: Admitted,
        call: Call,
    ) -> Result<CallOutcome, EvalError> {
        let modules = admitted.modules;
        let start = Instant::now();
        let inner = &self.inner;
        let _permit = inner
            .permits
            .acquire()
            .await
            .map_err(|_| StarlarkHostError::Internal("the worker pool is closed".into()))?;
        let (mut worker, cached) = match inner.checkout(pkg, modules).await {
            Ok(w) => w,
            Err(e) => {
                let none = cordon_core::explain::DenialLog::new();
                let mut failed = Err(e);
                with_denials(&mut failed, &none, modules, &inner.limits);
                return failed;
            }
        };
        let (broker, deadline) = match call.broker(&inner.caps, pkg, admitted, &inner.limits) {
            Ok(b) => b,
            Err(e) => {
                inner.check_in(worker).await;
                return Err(e.into());
            }
        };
        let Call {
            entry: name,
            args,
            kwargs,
            cancel,
            ..
        } = call;
        // The worker's deadline is the host's (which counts the provider's
        // time when the package has `provider`).
        let timeout = deadline.saturating_duration_since(Instant::now());
        let call = wire::Call {
            entry: name.clone(),
            args,
            kwargs,
            timeout_ms: timeout.as_millis().min(u64::MAX as u128) as u64,
        };
        let hard = tokio::time::Instant::from_std(deadline) + inner.config.kill_grace;
        let began = Instant::now();
        let r = worker
            .conn
            .call(&call, &broker, hard, &cancel, inner.config.kill_grace)
            .await;
        worker.busy += began.elapsed();
        worker.calls += 1;
        let elapsed_us = start.elapsed().as_micros() as u64;
        let mut outcome = match r {
            Ok(res) => {
                inner.check_in(worker).await;
                tracing::debug!(package = %pkg.id, entry = name, cached, elapsed_us, "entry point returned in a worker");
                Ok(CallOutcome {
                    value: res.value,
                    output: res.output,
                    cached,
                    denials: Default::default(),
                })
            }
            Err(SessionError::Reported {
                code,
                message,
                output,
            }) => {
                let parsed = wire::ErrorCode::parse(&code);
                let memory = parsed == Some(wire::ErrorCode::Limit(LimitKind::Memory));
                let message = if memory {
                    memory_message(&pkg.id, &inner.config.limits, &message)
                } else {
                    message
                };
                let e = StarlarkHostError::from_worker_code(
                    &pkg.id,
                    &code,
                    message,
                    &worker.loaded.functions,
                );
                // After an internal error, a panic or an allocation
                // failure the worker's state is suspect: do not reuse it.
                if memory
                    || matches!(
                        parsed,
                        Some(
                            wire::ErrorCode::Internal
                                | wire::ErrorCode::Panic
                                | wire::ErrorCode::NotLoaded
                        )
                    )
                {
                    inner.retire(worker).await;
                } else {
                    inner.check_in(worker).await;
                }
                tracing::warn!(package = %pkg.id, entry = name, cached, elapsed_us, error = %e, "entry point failed in a worker");
                Err(EvalError::with_output(e, output))
            }
            Err(e) => {
                let err = inner.fail(worker, &pkg.id, e).await;
                tracing::warn!(package = %pkg.id, entry = name, cached, elapsed_us, error = %err, "worker failed");
                Err(err.into())
            }
        };
        with_denials(&mut outcome, broker.refusals(), modules, &inner.limits);
        outcome
    }
}
