//! One-off local runs, as `cordon star run` does them: load a package from
//! disk, grant it permissions explicitly, run it in process with in-memory
//! stores.

use std::path::Path;
use std::sync::Arc;

use cordon_core::{SandboxRunner, SandboxUnavailable};

use crate::broker::{Capabilities, Services};
use crate::error::StarlarkHostError;
use crate::eval::CallOutcome;
use crate::limits::Limits;
use crate::package::{load_package_from_path, Package, Permission};
use crate::protocol::Notification;
use crate::runner::{ExecOutcome, Runner};
use crate::sandbox::{SandboxedRunner, WorkerConfig};
use crate::stores::{
    InMemoryPackageStore, InMemoryPermissionStore, InMemoryProviderResolver, InMemorySecretStore,
    ProviderConfig, RecordingNotifier, RunContext,
};

/// Options of a local run. Nothing is granted unless listed in `grant`
/// (and a grant only takes effect if the manifest also requests it).
#[derive(Debug, Clone, Default)]
pub struct LocalRun {
    /// Permissions to grant the package.
    pub grant: Vec<Permission>,
    /// Secrets `(name, value)` in the package's namespace.
    pub secrets: Vec<(String, String)>,
    /// Per-invocation context (a user is needed for `provider`).
    pub context: Option<RunContext>,
    /// Host-default provider for `provider.complete`.
    pub provider: Option<ProviderConfig>,
    /// Limits; `None` means [`Limits::default`].
    pub limits: Option<Limits>,
}

/// What a local run produced.
#[derive(Debug, Clone)]
pub struct LocalOutcome {
    /// The package that ran.
    pub package: Package,
    /// Globals and top-level output (always present).
    pub exec: ExecOutcome,
    /// The entry point's result, when one was named.
    pub call: Option<CallOutcome>,
    /// Notifications the package sent (recorded, not delivered).
    pub notifications: Vec<Notification>,
}

/// Load the package at `path` (directory with `package.toml`, or a single
/// `.star` file), execute it, and call `entry` with JSON `args` if given.
/// Must be called inside a tokio runtime.
pub async fn run_local(
    path: impl AsRef<Path>,
    entry: Option<&str>,
    args: Vec<serde_json::Value>,
    options: LocalRun,
) -> Result<LocalOutcome, StarlarkHostError> {
    let package = load_package_from_path(path)?;
    let (caps, notifier, limits) = local_capabilities(&package, &options)?;
    let runner = Runner::with_capabilities(caps, limits);
    let ctx = options.context.as_ref();
    let exec = runner.exec_package(&package, ctx).await?;
    let call = match entry {
        Some(name) => Some(
            runner
                .call_entry_point(&package, name, args, Default::default(), ctx)
                .await?,
        ),
        None => None,
    };
    Ok(LocalOutcome {
        package,
        exec,
        call,
        notifications: notifier.sent(),
    })
}

/// [`run_local`] in a sandboxed worker process (what `cordon star run`
/// does by default): `sandbox` is the caller's `SandboxRunner::new(...)`
/// result — on `Err` the package is refused with the conformance report,
/// never run in process. `worker` says which program serves as worker
/// (normally `WorkerConfig::new(WorkerProgram::current_exe()?)` in a binary
/// whose `main` calls [`crate::worker::dispatch_worker`]). The worker is
/// killed and reaped before this returns. Must be called inside a tokio
/// runtime.
pub async fn run_local_sandboxed(
    path: impl AsRef<Path>,
    entry: Option<&str>,
    args: Vec<serde_json::Value>,
    options: LocalRun,
    sandbox: Result<SandboxRunner, SandboxUnavailable>,
    worker: WorkerConfig,
) -> Result<LocalOutcome, StarlarkHostError> {
    let package = load_package_from_path(path)?;
    let runner = sandbox.map_err(|e| StarlarkHostError::SandboxUnavailable {
        package: package.id.clone(),
        source: Box::new(e),
    })?;
    let (caps, notifier, limits) = local_capabilities(&package, &options)?;
    // One package, one run: a spare worker would be started for nothing
    // (off by default, but the caller's config may turn it on).
    let mut worker = worker;
    worker.pool.spare_workers = 0;
    let sandboxed = SandboxedRunner::new(runner, caps, limits, worker)?;
    let ctx = options.context.as_ref();
    let result = async {
        let exec = sandboxed.exec_package(&package, ctx).await?;
        let call = match entry {
            Some(name) => Some(
                sandboxed
                    .call_entry_point(&package, name, args, Default::default(), ctx)
                    .await?,
            ),
            None => None,
        };
        Ok::<_, StarlarkHostError>((exec, call))
    }
    .await;
    sandboxed.shutdown().await;
    let (exec, call) = result?;
    Ok(LocalOutcome {
        package,
        exec,
        call,
        notifications: notifier.sent(),
    })
}

/// Services and capabilities for a local run: explicit grants, in-memory
/// secrets, a recording notifier, an optional host-default provider.
fn local_capabilities(
    package: &Package,
    options: &LocalRun,
) -> Result<(Arc<Capabilities>, RecordingNotifier, Limits), StarlarkHostError> {
    let perms = Arc::new(InMemoryPermissionStore::new());
    for p in &options.grant {
        perms.grant(&package.id, *p);
    }
    let secrets = Arc::new(InMemorySecretStore::new());
    for (k, v) in &options.secrets {
        secrets.set(&package.id, k, v);
    }
    let notifier = RecordingNotifier::new();
    let packages = Arc::new(InMemoryPackageStore::new());
    packages.insert(package.clone());
    let mut services = Services::new(packages, perms);
    services.secrets = Some(secrets);
    services.notifier = Some(Arc::new(notifier.clone()));
    if let Some(cfg) = options.provider.clone() {
        let resolver = InMemoryProviderResolver::new();
        resolver.set_host_default(cfg);
        services.providers = Some(Arc::new(resolver));
    }
    let caps = Capabilities::new(services)?;
    Ok((caps, notifier, options.limits.clone().unwrap_or_default()))
}
