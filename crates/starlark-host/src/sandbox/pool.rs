//! The pool's workers: one worker process and its state, checking workers
//! out and in, retiring, spawning, spare workers and the idle sweep.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cordon_core::{ChildSpec, ExitOutcome, RunningChild, Scratch};
use tokio::process::{ChildStdin, ChildStdout};

use super::failure::describe_failure;
use super::{kill_and_reap, reap_closed, reap_dead, Inner, SessionError, WorkerConnection};
use cordon_starlark_protocol::{wire, ModuleSet, Package};
use cordon_starlark_worker::RlimitName;

use crate::error::{EvalError, StarlarkHostError};

/// Address space an unconfined worker may reserve beyond its memory limit
/// (thread stacks and allocator arenas are reserved, not written), as the
/// Linux backend allows where no cgroup holds memory.
const UNCONFINED_ADDRESS_HEADROOM: u64 = 3 << 30;

pub(super) type PoolKey = (String, ModuleSet);

pub(super) type Pids = Arc<Mutex<std::collections::BTreeSet<u32>>>;

pub(super) struct Worker {
    /// The live-worker registry; the worker removes itself on drop.
    pub(super) pids: Pids,
    pub(super) child: RunningChild,
    pub(super) conn: WorkerConnection<ChildStdout, ChildStdin>,
    pub(super) loaded: wire::Loaded,
    pub(super) loaded_key: String,
    pub(super) loaded_modules: ModuleSet,
    pub(super) calls: u64,
    pub(super) busy: Duration,
    pub(super) idle_since: Instant,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // The RunningChild kills the process group when dropped unreaped.
        self.pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.child.pid());
    }
}

/// A started worker outside the pool (see
/// [`WorkerPool::time_cold_start`](super::WorkerPool::time_cold_start)). Dropping it kills the process.
pub struct ColdWorker(pub(super) Worker);

impl std::fmt::Debug for ColdWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdWorker")
            .field("pid", &self.0.child.pid())
            .finish()
    }
}

/// Pool counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Workers started (spawn + handshake attempted).
    pub started: u64,
    /// Calls served by an already-warm worker.
    pub reused: u64,
    /// Workers killed and reaped (failure, retirement, idle timeout).
    pub retired: u64,
    /// Workers currently idle in the pool.
    pub idle: usize,
    /// Spare workers (no package yet) ready.
    pub spares: usize,
}

pub(super) async fn sweep_idle(weak: Weak<Inner>, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = weak.upgrade() else { return };
        let expired = inner.take_expired();
        for w in expired {
            inner.retire(w).await;
        }
    }
}

impl Inner {
    pub(super) fn take_expired(&self) -> Vec<Worker> {
        let timeout = self.config.pool.idle_timeout;
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for list in idle.values_mut() {
            let (old, keep): (Vec<Worker>, Vec<Worker>) = std::mem::take(list)
                .into_iter()
                .partition(|w| w.idle_since.elapsed() >= timeout);
            *list = keep;
            out.extend(old);
        }
        idle.retain(|_, v| !v.is_empty());
        drop(idle);
        let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
        let (old, keep): (Vec<Worker>, Vec<Worker>) = std::mem::take(&mut *spares)
            .into_iter()
            .partition(|w| w.idle_since.elapsed() >= timeout);
        *spares = keep;
        out.extend(old);
        out
    }

    pub(super) async fn retire(&self, w: Worker) {
        let pid = w.child.pid();
        let _ = kill_and_reap(w).await;
        self.retired.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(pid, "retired a Starlark worker");
    }

    /// A warm worker for `(pkg, modules)`, or a fresh one.
    pub(super) async fn checkout(
        &self,
        pkg: &Package,
        modules: ModuleSet,
    ) -> Result<(Worker, bool), EvalError> {
        let key = (pkg.script_hash(), modules);
        let warm = {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let w = idle.get_mut(&key).and_then(Vec::pop);
            if idle.get(&key).is_some_and(Vec::is_empty) {
                idle.remove(&key);
            }
            w
        };
        if let Some(w) = warm {
            if w.idle_since.elapsed() < self.config.pool.idle_timeout {
                self.reused.fetch_add(1, Ordering::Relaxed);
                return Ok((w, true));
            }
            self.retire(w).await;
        }
        Ok((self.start_worker(pkg, modules, true).await?, false))
    }

    /// Returns a healthy worker to the pool, or retires it.
    pub(super) async fn check_in(&self, mut w: Worker) {
        let cfg = &self.config;
        let cpu_budget = Duration::from_secs(cfg.limits.cpu_seconds);
        let worn = w.calls >= cfg.pool.max_calls_per_worker
            || w.busy + self.limits.timeout + cfg.kill_grace >= cpu_budget;
        if !worn {
            w.idle_since = Instant::now();
            let key = (w.loaded_key.clone(), w.loaded_modules);
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            let total: usize = idle.values().map(Vec::len).sum();
            let list = idle.entry(key).or_default();
            if list.len() < cfg.pool.max_idle_per_package && total < cfg.pool.max_idle_total {
                list.push(w);
                return;
            }
        }
        self.retire(w).await;
    }

    /// Kills a failed worker and turns what happened into an error.
    pub(super) async fn fail(
        &self,
        w: Worker,
        package: &str,
        e: SessionError,
    ) -> StarlarkHostError {
        let pid = w.child.pid();
        let (outcome, tail) = match &e {
            SessionError::Closed(_) => reap_dead(w).await,
            _ => kill_and_reap(w).await,
        };
        self.retired.fetch_add(1, Ordering::Relaxed);
        if !tail.trim().is_empty() {
            tracing::warn!(package, pid, stderr = %tail.trim_end(), "failed Starlark worker's stderr");
        }
        describe_failure(
            package,
            e,
            outcome,
            &tail,
            &self.config.limits,
            self.limits.timeout,
        )
    }

    pub(super) fn instance_id(&self) -> String {
        let n = self.instance_seq.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{}-{n}-{nanos:08x}", std::process::id())
    }

    pub(super) fn spec(&self, package: &str, instance: &str) -> ChildSpec {
        let mut spec = ChildSpec::new(&self.staged.program)
            .args(self.config.program.args.iter().cloned())
            .arg("--instance")
            .arg(instance)
            .arg("--max-frame")
            .arg(self.config.max_frame.to_string())
            .limits(self.worker_limits)
            .scratch(Scratch::Fresh);
        if let super::WorkerRunner::Unconfined(_) = self.runner {
            // No backend sets these: the worker does, before anything else.
            let l = &self.config.limits;
            for (name, value) in [
                (RlimitName::Data, l.memory_bytes),
                (
                    RlimitName::As,
                    l.memory_bytes.saturating_add(UNCONFINED_ADDRESS_HEADROOM),
                ),
                (RlimitName::Cpu, l.cpu_seconds),
                (RlimitName::Fsize, l.file_size_bytes),
                (RlimitName::Nofile, l.open_files),
            ] {
                spec = spec
                    .arg("--rlimit")
                    .arg(format!("{}={value}", name.as_str()));
            }
        }
        spec.package_dir = Some(self.staged.dir.clone());
        spec.label = Some(format!("starlark:{package}"));
        spec
    }

    /// Spawns a worker and completes the handshake; it has no package yet.
    pub(super) async fn spawn_worker(&self, package: &str) -> Result<Worker, StarlarkHostError> {
        self.started.fetch_add(1, Ordering::Relaxed);
        let instance = self.instance_id();
        let start_err = |message: String| StarlarkHostError::WorkerStart {
            package: package.to_owned(),
            message,
        };
        let t0 = Instant::now();
        let mut child = self
            .runner
            .start(self.spec(package, &instance))
            .await
            .map_err(start_err)?;
        tracing::debug!(
            package,
            pid = child.pid(),
            spawn_us = t0.elapsed().as_micros() as u64,
            "spawned a Starlark worker"
        );
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            child.kill();
            let _ = child.wait().await;
            return Err(start_err("the worker's stdio is not piped".into()));
        };
        let handshake = tokio::time::timeout(
            self.config.handshake_timeout,
            WorkerConnection::handshake(stdout, stdin, &instance, self.config.max_frame, package),
        )
        .await;
        let conn = match handshake {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                // A worker that closed its pipe is exiting: how it ended
                // by itself (its exit code, a signal) says more than the
                // closed pipe.
                let (outcome, by_itself) = reap_closed(&mut child).await;
                let ended = outcome.filter(|_| by_itself);
                self.retired.fetch_add(1, Ordering::Relaxed);
                let tail = String::from_utf8_lossy(&child.stderr_tail()).into_owned();
                if !tail.trim().is_empty() {
                    tracing::warn!(package, stderr = %tail.trim_end(), "Starlark worker failed its handshake");
                }
                let how = match ended {
                    Some(ExitOutcome::Exited(code)) => format!("; it exited with code {code}"),
                    Some(ExitOutcome::Signaled(sig)) => format!("; it was killed by signal {sig}"),
                    Some(other) => format!("; it ended: {other:?}"),
                    None => String::new(),
                };
                return Err(StarlarkHostError::Worker {
                    package: package.to_owned(),
                    message: format!("did not start: {e}{how}"),
                });
            }
            Err(_) => {
                child.kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                self.retired.fetch_add(1, Ordering::Relaxed);
                return Err(StarlarkHostError::Worker {
                    package: package.to_owned(),
                    message: format!(
                        "did not say hello within {} ms",
                        self.config.handshake_timeout.as_millis()
                    ),
                });
            }
        };
        tracing::debug!(
            package,
            pid = child.pid(),
            hello_us = t0.elapsed().as_micros() as u64,
            "Starlark worker said hello"
        );
        self.pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(child.pid());
        Ok(Worker {
            pids: self.pids.clone(),
            child,
            conn,
            loaded: wire::Loaded {
                functions: Vec::new(),
                globals: Default::default(),
                output: String::new(),
            },
            loaded_key: String::new(),
            loaded_modules: ModuleSet::NONE,
            calls: 0,
            busy: Duration::ZERO,
            idle_since: Instant::now(),
        })
    }

    /// A ready spare (spawned and greeted, no package), if one is kept.
    pub(super) fn take_spare(&self) -> Option<Worker> {
        let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(w) = spares.pop() {
            if w.idle_since.elapsed() < self.config.pool.idle_timeout {
                return Some(w);
            }
            // Expired: dropping it kills it (the sweeper normally got it).
            drop(w);
        }
        None
    }

    /// Starts a background task that tops up the spare workers.
    pub(super) fn replenish_spares(&self) {
        if self.config.pool.spare_workers == 0 || self.paused.load(Ordering::SeqCst) {
            return;
        }
        if self.replenishing.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.replenishing.store(false, Ordering::SeqCst);
            return;
        };
        let weak = self.me.clone();
        rt.spawn(async move {
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let have = inner.spares.lock().unwrap_or_else(|e| e.into_inner()).len();
                if have >= inner.config.pool.spare_workers || inner.paused.load(Ordering::SeqCst) {
                    inner.replenishing.store(false, Ordering::SeqCst);
                    return;
                }
                match inner.spawn_worker("(spare)").await {
                    Ok(w) if !inner.paused.load(Ordering::SeqCst) => {
                        inner
                            .spares
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(w);
                    }
                    Ok(w) => inner.retire(w).await,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not start a spare Starlark worker");
                        inner.replenishing.store(false, Ordering::SeqCst);
                        return;
                    }
                }
            }
        });
    }

    pub(super) async fn start_worker(
        &self,
        pkg: &Package,
        modules: ModuleSet,
        use_spare: bool,
    ) -> Result<Worker, EvalError> {
        let spare = if use_spare { self.take_spare() } else { None };
        let mut worker = match spare {
            Some(w) => w,
            None => self.spawn_worker(&pkg.id).await?,
        };

        worker.conn.package = pkg.id.clone();
        worker.loaded_key = pkg.script_hash();
        worker.loaded_modules = modules;
        let body = wire::LoadPackage {
            package: pkg.clone(),
            modules,
            limits: wire::WireLimits::from(&self.limits),
        };
        let began = Instant::now();
        let hard = tokio::time::Instant::now() + self.limits.timeout + self.config.kill_grace;
        let r = worker.conn.load(&body, hard).await;
        worker.busy += began.elapsed();
        match r {
            Ok(loaded) => {
                // Top up spares after the load, so the new spare's start-up
                // does not compete with this load for the CPU.
                if use_spare {
                    self.replenish_spares();
                }
                worker.loaded = loaded;
                tracing::debug!(package = %pkg.id, pid = worker.child.pid(), load_us = began.elapsed().as_micros() as u64, "started a Starlark worker");
                Ok(worker)
            }
            Err(SessionError::Reported {
                code,
                message,
                output,
            }) => {
                self.retire(worker).await;
                let e = StarlarkHostError::from_worker_code(&pkg.id, &code, message, &[]);
                Err(EvalError::with_output(e, output))
            }
            Err(e) => Err(self.fail(worker, &pkg.id, e).await.into()),
        }
    }
}
