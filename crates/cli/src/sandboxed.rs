//! `cordon star run --isolation sandboxed`: the package runs in a worker
//! process (this same binary in worker mode) admitted through the same
//! conformance gate as `cordon run`.

use std::path::Path;

use cordon_starlark::{LocalOutcome, LocalRun, StarlarkHostError, WorkerConfig, WorkerProgram};

pub async fn run(
    backend: &str,
    package: &Path,
    entry: Option<&str>,
    args: Vec<serde_json::Value>,
    options: LocalRun,
) -> Result<Result<LocalOutcome, StarlarkHostError>, String> {
    let sandbox = crate::run::admit(backend, false, cordon_core::RunnerConfig::default()).await?;
    if let Err(e) = &sandbox {
        eprint!("{}", crate::conformance::render(&e.report));
    }
    let program = WorkerProgram::current_exe()
        .map_err(|e| format!("cannot find cordon's own executable: {e}"))?;
    Ok(cordon_starlark::run_local_sandboxed(
        package,
        entry,
        args,
        options,
        sandbox,
        WorkerConfig::new(program),
    )
    .await)
}
