//! `cordon star`: run a Starlark package's entry point (this file), and
//! manage installed packages, grants, secrets and providers in the store
//! database (`manage.rs`).
//!
//! Untrusted by default: the package runs in a sandboxed worker process
//! behind the conformance gate. `--isolation process` runs it as trusted in
//! an unconfined worker with limits; `--isolation in-process` inside
//! cordon itself (trusted, and no memory protection).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use std::sync::Arc;

use cordon_starlark::{
    load_package_from_path, Call, CallOutcome, EvalError, EvalLimits, ExecOutcome,
    InMemoryPackageStore, InMemoryPermissionStore, InMemorySecretStore, Isolation, Notification,
    Package, Permission, RecordingNotifier, RunContext, Services, StarlarkHost, StarlarkHostError,
    TrustTier, WorkerConfig, WorkerProgram,
};

use crate::{EXIT_CORDON_FAILED, EXIT_TIMEOUT};

mod manage;
use manage::{open_store, StoreArgs};

#[derive(Subcommand)]
pub enum StarCommand {
    /// Run a Starlark package's entry point and print its result.
    #[command(after_help = "Examples:\n  \
        cordon star run examples/starlark/single.star --entry main\n  \
        cordon star run examples/starlark/hello --entry main --grant api.http --grant secrets.read \\\n      \
        --secret greeting_token=abc --args '[\"world\"]' --json\n\n\
        Exit status: 0 on success; 1 on a script error; 124 on a timeout or a step/heap limit;\n\
        125 on a host error (bad flags, no conforming sandbox, worker failure).")]
    Run(StarRunArgs),
    /// Install (or with --upgrade, replace) a package in the store.
    Install(manage::InstallArgs),
    /// List the installed packages.
    List(StoreArgs),
    /// Show one installed package: version, hash, grants, secret names.
    Show(manage::ShowArgs),
    /// Grant permissions to an installed package.
    Grant(manage::GrantArgs),
    /// Revoke permissions of an installed package.
    Revoke(manage::GrantArgs),
    /// Set or remove an installed package's secrets (values from stdin).
    #[command(subcommand)]
    Secret(manage::SecretCommand),
    /// Set the provider (OpenAI-compatible) of a user, channel, package or
    /// the host (key from stdin).
    #[command(subcommand)]
    Provider(manage::ProviderCommand),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IsolationArg {
    /// A worker process under the OS sandbox (the default).
    Sandboxed,
    /// A worker process without a sandbox, under memory, CPU and file
    /// limits it sets on itself: trusted packages; a runaway package ends
    /// its worker, not cordon.
    Process,
    /// Inside cordon itself: trusted packages only, and no memory
    /// protection (a package can exhaust cordon's memory or abort it).
    InProcess,
}

#[derive(clap::Args)]
pub struct StarRunArgs {
    /// A package directory (with package.toml), a single .star file, or
    /// the id of a package installed in the store (`cordon star install`):
    /// a path that exists wins.
    package: PathBuf,
    /// Entry point to call after loading (a function defined by the script).
    #[arg(long)]
    entry: Option<String>,
    /// Positional arguments for the entry point, as a JSON array.
    #[arg(long, value_name = "JSON", value_parser = parse_args)]
    args: Option<JsonArgs>,
    /// Grant a permission (repeatable): secrets.read, notifications.send, api.http, provider.complete.
    #[arg(long = "grant", value_name = "PERM", value_parser = parse_perm)]
    grants: Vec<Permission>,
    /// A secret in the package's namespace (repeatable).
    #[arg(long = "secret", value_name = "KEY=VALUE", value_parser = parse_secret)]
    secrets: Vec<(String, String)>,
    /// The acting user (needed by the provider module).
    #[arg(long)]
    user: Option<String>,
    /// The channel the call comes from (for a channel's provider key).
    #[arg(long)]
    channel: Option<String>,
    /// Deliver the package's notifications as JSON lines appended to this
    /// file (instead of the default: recorded and printed for a path, JSON
    /// lines on stderr for an installed package).
    #[arg(long, value_name = "PATH", conflicts_with = "notify_webhook")]
    notify_file: Option<PathBuf>,
    /// Deliver the package's notifications by POSTing their JSON to this
    /// URL (10 s per attempt, 3 attempts with backoff).
    #[arg(long, value_name = "URL")]
    notify_webhook: Option<String>,
    #[command(flatten)]
    store: manage::StoreLocation,
    /// Wall-clock limit per evaluation, in seconds.
    #[arg(long, value_name = "SECS", value_parser = crate::parse_secs)]
    timeout: Option<Duration>,
    /// Where the interpreter runs.
    #[arg(long, value_enum, default_value = "sandboxed")]
    isolation: IsolationArg,
    #[command(flatten)]
    backend: crate::BackendArg,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

/// `--args`: a JSON array (a newtype, so clap takes it as one value).
#[derive(Clone)]
pub struct JsonArgs(Vec<serde_json::Value>);

fn parse_args(s: &str) -> Result<JsonArgs, String> {
    match serde_json::from_str::<serde_json::Value>(s) {
        Ok(serde_json::Value::Array(a)) => Ok(JsonArgs(a)),
        Ok(_) => Err("--args must be a JSON array, e.g. '[1, \"two\"]'".into()),
        Err(e) => Err(format!("--args is not valid JSON: {e}")),
    }
}

fn parse_perm(s: &str) -> Result<Permission, String> {
    Permission::parse(s).ok_or_else(|| {
        format!("unknown permission `{s}`; use secrets.read, notifications.send, api.http or provider.complete")
    })
}

fn parse_secret(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

pub async fn main(cmd: StarCommand) -> ExitCode {
    let args = match cmd {
        StarCommand::Run(args) => args,
        other => return manage::main(other),
    };
    let result = match run(&args).await {
        Ok(r) => r,
        Err(message) => {
            eprintln!("cordon: {message}");
            return ExitCode::from(EXIT_CORDON_FAILED);
        }
    };
    match result {
        Ok(outcome) => {
            print_outcome(&outcome, args.json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            // What the package printed before it failed is what its author
            // needs: on stderr, before the error.
            if !e.output.is_empty() {
                eprint!("{}", e.output);
                if !e.output.ends_with('\n') {
                    eprintln!();
                }
            }
            eprintln!("cordon: {e}");
            ExitCode::from(exit_code_for(&e.error))
        }
    }
}

/// What one `star run` produced.
struct StarOutcome {
    package: Package,
    exec: ExecOutcome,
    call: Option<CallOutcome>,
    /// Notifications the package sent (recorded, not delivered).
    notifications: Vec<Notification>,
}

/// Loads the package, builds a host with only the listed grants and
/// secrets, loads it and calls the entry point. `--isolation sandboxed`
/// (the default) treats the package as untrusted: it runs in a worker (this
/// binary in worker mode) admitted through the same gate as `cordon run`,
/// or not at all. The outer error is cordon's own (no gate, no executable).
async fn run(args: &StarRunArgs) -> Result<Result<StarOutcome, EvalError>, String> {
    let notifier = RecordingNotifier::new();
    let (package, services) = if args.package.exists() {
        // A quick trial: grants and secrets from the flags, in memory.
        let package = match load_package_from_path(&args.package) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e.into())),
        };
        let perms = Arc::new(InMemoryPermissionStore::new());
        for p in &args.grants {
            perms.grant(&package.id, *p);
        }
        let secrets = Arc::new(InMemorySecretStore::new());
        for (k, v) in &args.secrets {
            secrets.set(&package.id, k, v);
        }
        let packages = Arc::new(InMemoryPackageStore::new());
        packages.insert(package.clone());
        let mut services = Services::new(packages, perms);
        services.secrets = Some(secrets);
        services.notifier = Some(Arc::new(notifier.clone()));
        (package, services)
    } else {
        // An installed package: everything from the store; notifications
        // are delivered as JSON lines on stderr.
        if !args.grants.is_empty() || !args.secrets.is_empty() {
            return Err(format!(
                "--grant and --secret are for a package path; `{}` is an installed package:                  use `cordon star grant` and `cordon star secret set`",
                args.package.display()
            ));
        }
        let id = args.package.to_string_lossy().into_owned();
        let store = Arc::new(open_store(&args.store)?);
        let package = match cordon_starlark::PackageStore::get(store.as_ref(), &id).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(format!(
                    "`{id}` is neither a path nor an installed package (cordon star list)"
                ))
            }
            Err(e) => return Err(e),
        };
        let mut services = Services::new(store.clone(), store.clone());
        services.secrets = Some(store.clone());
        services.providers = Some(store);
        services.notifier = Some(Arc::new(cordon_starlark::JsonLinesNotifier::new(
            std::io::stderr(),
        )));
        (package, services)
    };
    let mut services = services;
    if let Some(path) = &args.notify_file {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("--notify-file {}: {e}", path.display()))?;
        services.notifier = Some(Arc::new(cordon_starlark::JsonLinesNotifier::new(file)));
    }
    if let Some(url) = &args.notify_webhook {
        let hook = cordon_starlark::WebhookNotifier::new(
            url,
            Duration::from_secs(10),
            3,
            Duration::from_millis(500),
        )
        .map_err(|e| format!("--notify-webhook: {e}"))?;
        services.notifier = Some(Arc::new(hook));
    }
    let limits = EvalLimits {
        timeout: args.timeout.unwrap_or(EvalLimits::default().timeout),
        ..EvalLimits::default()
    };
    let mut builder = StarlarkHost::builder(services).limits(limits);
    let tier = match args.isolation {
        IsolationArg::InProcess => {
            eprintln!(
                "cordon: --isolation in-process: the package is treated as TRUSTED and runs \
                 inside cordon: size checks, but no memory protection"
            );
            builder = builder.trusted_isolation(Isolation::InProcess);
            TrustTier::Trusted
        }
        IsolationArg::Process => {
            eprintln!(
                "cordon: --isolation process: the package is treated as TRUSTED (a worker \
                 process with limits, no sandbox)"
            );
            let program = WorkerProgram::current_exe()
                .map_err(|e| format!("cannot find cordon's own executable: {e}"))?;
            builder = builder
                .worker(WorkerConfig::new(program))
                .trusted_isolation(Isolation::Process);
            TrustTier::Trusted
        }
        IsolationArg::Sandboxed => {
            let sandbox =
                crate::run::admit(&args.backend, false, cordon_core::RunnerConfig::default())
                    .await?;
            if let Err(e) = &sandbox {
                eprint!("{}", crate::conformance::render(&e.report));
            }
            let program = WorkerProgram::current_exe()
                .map_err(|e| format!("cannot find cordon's own executable: {e}"))?;
            builder = builder
                .sandbox(sandbox, WorkerConfig::new(program))
                .trusted_isolation(Isolation::Sandboxed);
            TrustTier::Untrusted
        }
    };
    let host = match builder.build() {
        Ok(h) => h,
        Err(e) => return Ok(Err(e.into())),
    };
    let ctx = args.user.clone().map(|u| {
        let ctx = RunContext::for_user(u);
        match &args.channel {
            Some(c) => ctx.with_channel(c.clone()),
            None => ctx,
        }
    });
    let result = async {
        let exec = host.load(&package, tier, ctx.as_ref()).await?;
        let call = match &args.entry {
            Some(entry) => {
                let mut call = Call::new(entry.as_str())
                    .args(args.args.clone().map(|a| a.0).unwrap_or_default());
                call.context = ctx.clone();
                // The top level's output comes first, as on success.
                let called = host.call(&package, tier, call).await.map_err(|mut e| {
                    e.output.insert_str(0, &exec.output);
                    e
                })?;
                Some(called)
            }
            None => None,
        };
        Ok::<_, EvalError>((exec, call))
    }
    .await;
    // The worker is killed and reaped before cordon exits.
    host.shutdown().await;
    Ok(result.map(|(exec, call)| StarOutcome {
        package,
        exec,
        call,
        notifications: notifier.sent(),
    }))
}

pub fn exit_code_for(e: &StarlarkHostError) -> u8 {
    use cordon_starlark::LimitKind;
    match e {
        StarlarkHostError::Script { .. } => 1,
        StarlarkHostError::Limit { kind, .. } => match kind {
            LimitKind::Ticks
            | LimitKind::Time
            | LimitKind::Heap
            | LimitKind::Memory
            | LimitKind::Cpu => EXIT_TIMEOUT,
            _ => 1,
        },
        _ => EXIT_CORDON_FAILED,
    }
}

fn print_outcome(o: &StarOutcome, json: bool) {
    let output = match &o.call {
        Some(c) => format!("{}{}", o.exec.output, c.output),
        None => o.exec.output.clone(),
    };
    let value = o.call.as_ref().map(|c| c.value.clone());
    if json {
        let v = serde_json::json!({
            "package": o.package.id,
            "value": value,
            "output": output,
            "globals": o.exec.globals,
            "notifications": o.notifications,
        });
        println!("{v}");
        return;
    }
    print!("{output}");
    if let Some(v) = value {
        println!("{v}");
    }
    for n in &o.notifications {
        eprintln!("notification: {} — {}", n.title, n.body);
    }
}
