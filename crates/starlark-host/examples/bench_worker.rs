//! Latency figures of sandboxed Starlark evaluation (issue 8): a trivial
//! call in process and through a warm sandboxed worker, the cold start of
//! a worker, and a sandboxed `/bin/true` spawn.
//!
//! `cargo run -p cordon-starlark --example bench_worker [iterations]`
//!
//! The example is its own worker and probe child, as an application would
//! be: `main` dispatches both before doing anything else.

use std::sync::Arc;

use cordon_conformance::{ProbeExecutable, StandardSuite};
use cordon_core::{RunnerConfig, SandboxRunner};
use cordon_starlark::{bench_figures, WorkerConfig, WorkerProgram};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    cordon_conformance::dispatch_probe_child();
    cordon_starlark::worker::dispatch_worker();
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(500);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let runner = SandboxRunner::new(
            Arc::new(cordon_backend_linux::LinuxBackend::new()),
            &StandardSuite::new().with_probe_executable(ProbeExecutable::CurrentExe),
            RunnerConfig::default(),
        )
        .await?;
        let config = WorkerConfig::new(WorkerProgram::current_exe()?);
        let figures = bench_figures(runner, config, iterations).await?;
        println!("{figures}");
        Ok(())
    })
}
