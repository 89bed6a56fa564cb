//! Figures for `cargo xtask bench`: latency of a trivial entry-point call
//! in process and through a warm sandboxed worker, the cold start of a
//! worker, and a sandboxed `/bin/true` spawn through the same
//! [`SandboxRunner`] for comparison. Not a test: it only measures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::{ChildSpec, Runner as _, SandboxRunner};

use crate::bindings::ModuleSet;
use crate::broker::{Capabilities, Services};
use crate::error::StarlarkHostError;
use crate::limits::Limits;
use crate::package::Package;
use crate::runner::Runner;
use crate::sandbox::{SandboxedRunner, WorkerConfig};
use crate::stores::{InMemoryPackageStore, InMemoryPermissionStore};

/// Median and 90th percentile of one measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure {
    /// Median.
    pub median: Duration,
    /// 90th percentile.
    pub p90: Duration,
}

impl Figure {
    fn of(mut v: Vec<Duration>) -> Figure {
        if v.is_empty() {
            return Figure {
                median: Duration::ZERO,
                p90: Duration::ZERO,
            };
        }
        v.sort();
        Figure {
            median: v[v.len() / 2],
            p90: v[(v.len() * 9 / 10).min(v.len() - 1)],
        }
    }
}

/// What [`bench_figures`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchFigures {
    /// Calls per warm measurement.
    pub iterations: usize,
    /// Cold starts measured (fewer: each spawns a process).
    pub cold_iterations: usize,
    /// Trivial call, in process, compiled package cached.
    pub in_process_call: Figure,
    /// Trivial call through a warm sandboxed worker.
    pub warm_sandboxed_call: Figure,
    /// Spawn + handshake + `load_package` of a new worker.
    pub cold_start: Figure,
    /// First call path of a package with no warm worker when a spare is
    /// ready (`PoolConfig::spare_workers`): `load_package` only.
    pub start_from_spare: Figure,
    /// Sandboxed `/bin/true`: spawn until reaped.
    pub sandboxed_true_spawn: Figure,
}

impl BenchFigures {
    /// `cold_start.median / sandboxed_true_spawn.median` (target: ≤ 3).
    pub fn cold_start_ratio(&self) -> f64 {
        self.cold_start.median.as_secs_f64()
            / self.sandboxed_true_spawn.median.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for BenchFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let row = |f: &mut std::fmt::Formatter<'_>, name: &str, x: &Figure| {
            writeln!(
                f,
                "{name:<38} median {:>9.1} µs   p90 {:>9.1} µs",
                x.median.as_secs_f64() * 1e6,
                x.p90.as_secs_f64() * 1e6
            )
        };
        row(f, "in-process call (cached)", &self.in_process_call)?;
        row(f, "sandboxed call (warm worker)", &self.warm_sandboxed_call)?;
        row(f, "worker cold start (spawn+hello+load)", &self.cold_start)?;
        row(f, "new package, spare ready (load)", &self.start_from_spare)?;
        row(f, "sandboxed /bin/true spawn", &self.sandboxed_true_spawn)?;
        write!(
            f,
            "cold start / /bin/true = {:.2}x ({} warm calls, {} cold starts)",
            self.cold_start_ratio(),
            self.iterations,
            self.cold_iterations
        )
    }
}

/// The trivial package the figures use.
pub fn bench_package() -> Package {
    Package::from_script("bench", "def ping():\n    return 1\n")
}

/// Measures the figures with an admitted `runner` and a worker `config`
/// (its program must dispatch the worker, e.g.
/// `WorkerConfig::new(WorkerProgram::current_exe()?)` in a binary whose
/// `main` calls [`crate::worker::dispatch_worker`]). `iterations` warm calls
/// (after 20 warm-up calls), `iterations / 10` (at least 5) cold starts,
/// starts from a spare (the pool is given one spare worker for that) and
/// `/bin/true` spawns. Call inside a tokio runtime.
pub async fn bench_figures(
    runner: SandboxRunner,
    config: WorkerConfig,
    iterations: usize,
) -> Result<BenchFigures, StarlarkHostError> {
    let iterations = iterations.max(10);
    let cold_iterations = (iterations / 10).max(5);
    let caps = Capabilities::new(Services::new(
        Arc::new(InMemoryPackageStore::new()),
        Arc::new(InMemoryPermissionStore::new()),
    ))?;
    let pkg = bench_package();

    let in_process = Runner::with_capabilities(caps.clone(), Limits::default());
    let mut v = Vec::with_capacity(iterations);
    for i in 0..iterations + 20 {
        let t = Instant::now();
        in_process
            .call_entry_point(&pkg, "ping", vec![], Default::default(), None)
            .await?;
        if i >= 20 {
            v.push(t.elapsed());
        }
    }
    let in_process_call = Figure::of(v);

    // At least one spare, for the "spare ready" figure (it idles, and is
    // not used by warm calls or by the full cold starts below).
    let mut config = config;
    config.pool.spare_workers = config.pool.spare_workers.max(1);
    let sandboxed = SandboxedRunner::new(runner.clone(), caps, Limits::default(), config)?;
    let mut v = Vec::with_capacity(iterations);
    for i in 0..iterations + 20 {
        let t = Instant::now();
        sandboxed
            .call_entry_point(&pkg, "ping", vec![], Default::default(), None)
            .await?;
        if i >= 20 {
            v.push(t.elapsed());
        }
    }
    let warm_sandboxed_call = Figure::of(v);

    sandboxed.shutdown().await;
    let mut v = Vec::with_capacity(cold_iterations);
    for _ in 0..cold_iterations + 1 {
        let (elapsed, worker) = sandboxed
            .time_cold_start(&pkg, ModuleSet::NONE, false)
            .await?;
        v.push(elapsed);
        sandboxed.discard(worker).await;
    }
    v.remove(0);
    let cold_start = Figure::of(v);

    let mut v = Vec::with_capacity(cold_iterations);
    let spares = sandboxed.config().pool.spare_workers > 0;
    for _ in 0..cold_iterations + 1 {
        if spares {
            sandboxed.wait_for_spares(1, Duration::from_secs(5)).await;
            // Let the spare finish its start-up work before timing.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (elapsed, worker) = sandboxed
            .time_cold_start(&pkg, ModuleSet::NONE, true)
            .await?;
        v.push(elapsed);
        sandboxed.discard(worker).await;
    }
    v.remove(0);
    let start_from_spare = Figure::of(v);
    sandboxed.shutdown().await;

    let mut v = Vec::with_capacity(cold_iterations);
    for _ in 0..cold_iterations + 1 {
        let t = Instant::now();
        let mut child = runner
            .start(ChildSpec::new("/bin/true"))
            .await
            .map_err(|e| StarlarkHostError::Internal(format!("sandboxed /bin/true: {e}")))?;
        child
            .wait()
            .await
            .map_err(|e| StarlarkHostError::Internal(format!("sandboxed /bin/true: {e}")))?;
        v.push(t.elapsed());
    }
    v.remove(0);
    let sandboxed_true_spawn = Figure::of(v);

    Ok(BenchFigures {
        iterations,
        cold_iterations,
        in_process_call,
        warm_sandboxed_call,
        cold_start,
        start_from_spare,
        sandboxed_true_spawn,
    })
}
