//! In-process evaluation, for trusted packages only (reached through
//! [`StarlarkHost`](crate::StarlarkHost)): permission gating, a cache of
//! compiled packages, and evaluation on warm large-stack threads.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cordon_starlark_protocol::{EvalLimits, ModuleSet, Package};
use cordon_starlark_worker::{compile_package, CancelToken, CompiledPackage};

use crate::broker::{Admitted, Capabilities};
use crate::error::{EvalError, StarlarkHostError};
use crate::eval_threads::{name_panicked, run_on_eval_thread};
use cordon_core::explain::DenialLog;

use crate::evaluator::{with_denials, Call, CallOutcome, Evaluator, ExecOutcome};

/// Cache counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheStats {
    /// Lookups served from the cache.
    pub hits: u64,
    /// Lookups that compiled.
    pub misses: u64,
    /// Compiled packages currently cached.
    pub entries: usize,
}

type CacheKey = (String, ModuleSet);

#[derive(Default)]
struct Cache {
    map: HashMap<CacheKey, Arc<CompiledPackage>>,
    order: VecDeque<CacheKey>,
}

/// Runs Starlark packages in process: the evaluator for trusted packages.
pub(crate) struct InProcess {
    caps: Arc<Capabilities>,
    limits: EvalLimits,
    max_cache_entries: usize,
    cache: Mutex<Cache>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess")
            .field("limits", &self.limits)
            .field("cache", &self.cache_stats())
            .finish()
    }
}

/// Cancels the token if dropped while armed, so dropping a call's future
/// stops its evaluation thread at the next check.
struct CancelOnDrop(Option<CancelToken>);
impl CancelOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}
impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.cancel();
        }
    }
}

impl InProcess {
    /// An evaluator over `caps` with the given limits.
    pub(crate) fn new(caps: Arc<Capabilities>, limits: EvalLimits) -> Self {
        InProcess {
            caps,
            limits,
            max_cache_entries: 256,
            cache: Mutex::new(Cache::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The limits in force.
    pub(crate) fn limits(&self) -> &EvalLimits {
        &self.limits
    }

    /// Cache counters.
    pub(crate) fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self
                .cache
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .map
                .len(),
        }
    }

    fn cache_get(&self, key: &CacheKey) -> Option<Arc<CompiledPackage>> {
        let c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let r = c.map.get(key).cloned();
        if r.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn cache_put(&self, key: CacheKey, v: Arc<CompiledPackage>) {
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if c.map.insert(key.clone(), v).is_none() {
            c.order.push_back(key);
        }
        while c.map.len() > self.max_cache_entries {
            match c.order.pop_front() {
                Some(old) => {
                    c.map.remove(&old);
                }
                None => break,
            }
        }
    }

    async fn compiled(
        &self,
        pkg: &Package,
        modules: ModuleSet,
        cancel: &CancelToken,
    ) -> Result<(Arc<CompiledPackage>, bool), EvalError> {
        let key = (pkg.script_hash(), modules);
        if let Some(c) = self.cache_get(&key) {
            return Ok((c, true));
        }
        let p = pkg.clone();
        let limits = self.limits.clone();
        let cancel2 = cancel.clone();
        let guard = CancelOnDrop(Some(cancel.clone()));
        let compiled = run_on_eval_thread(self.limits.eval_stack_bytes, move || {
            compile_package(&p, modules, &limits, &cancel2)
        })
        .await;
        guard.disarm();
        let compiled = compiled
            .map_err(|e| name_panicked(e, &pkg.id))?
            .map_err(|(e, output)| EvalError::with_output(e.into(), output))?;
        let compiled = Arc::new(compiled);
        self.cache_put(key, compiled.clone());
        Ok((compiled, false))
    }
}

#[async_trait::async_trait]
impl Evaluator for InProcess {
    async fn load(&self, pkg: &Package, modules: ModuleSet) -> Result<ExecOutcome, EvalError> {
        let (compiled, cached) = self.compiled(pkg, modules, &CancelToken::new()).await?;
        tracing::info!(package = %pkg.id, cached, modules = ?modules.names(), "package executed");
        Ok(ExecOutcome {
            globals: compiled.globals().clone(),
            functions: compiled.functions().to_vec(),
            output: compiled.load_output().to_owned(),
            modules: modules.names().into_iter().map(str::to_owned).collect(),
            cached,
        })
    }

    /// The package is compiled once and cached by (source hash, module
    /// set); the call runs on a fresh heap. Dropping the future cancels it.
    async fn call(
        &self,
        pkg: &Package,
        admitted: Admitted,
        call: Call,
    ) -> Result<CallOutcome, EvalError> {
        let start = Instant::now();
        let modules = admitted.modules;
        let (compiled, cached) = match self.compiled(pkg, modules, &call.cancel).await {
            Ok(c) => c,
            Err(e) => {
                let mut failed = Err(e);
                with_denials(&mut failed, &DenialLog::new(), modules, &self.limits);
                return failed;
            }
        };
        let (broker, deadline) = call.broker(&self.caps, pkg, admitted, &self.limits)?;
        let broker = Arc::new(broker);
        let refusals = Arc::clone(&broker);
        let Call {
            entry: name,
            args,
            kwargs,
            cancel,
            ..
        } = call;
        let guard = CancelOnDrop(Some(cancel.clone()));
        let limits = self.limits.clone();
        let entry = name.to_owned();
        let c2 = compiled.clone();
        let result = run_on_eval_thread(self.limits.eval_stack_bytes, move || {
            c2.call(&entry, &args, &kwargs, broker, &limits, deadline, &cancel)
        })
        .await;
        guard.disarm();
        let result = result.map_err(|e| name_panicked(e, &pkg.id))?;
        let elapsed_us = start.elapsed().as_micros() as u64;
        let mut outcome = match result {
            Ok((value, output)) => {
                tracing::debug!(package = %pkg.id, entry = name, cached, elapsed_us, "entry point returned");
                Ok(CallOutcome {
                    value,
                    output,
                    cached,
                    denials: Default::default(),
                })
            }
            Err((e, output)) => {
                let e = StarlarkHostError::from(e);
                tracing::warn!(package = %pkg.id, entry = name, cached, elapsed_us, output_bytes = output.len(), error = %e, "entry point failed");
                Err(EvalError::with_output(e, output))
            }
        };
        with_denials(&mut outcome, refusals.refusals(), modules, &self.limits);
        outcome
    }
}
