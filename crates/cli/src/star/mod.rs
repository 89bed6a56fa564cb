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

use cordon_egress::IpRange;
use cordon_starlark::{
    load_package_from_path, Call, CallOutcome, EvalError, EvalLimits, ExecOutcome,
    InMemoryPackageStore, InMemoryPermissionStore, InMemorySecretStore, Isolation,
    JsonLinesNotifier, Notification, Package, Permission, RecordingNotifier, RunContext, Services,
    StarlarkHost, StarlarkHostError, TrustTier, WebhookNotifier, WorkerConfig, WorkerProgram,
};

use crate::{EXIT_CORDON_FAILED, EXIT_TIMEOUT};

mod manage;
pub mod stderr;
use manage::{open_store, read_stdin, StoreArgs};
pub(crate) use manage::{read_secret, store_files};
use stderr::say;

#[derive(Subcommand)]
pub enum StarCommand {
    /// Run a Starlark package's entry point and print its result.
    #[command(after_help = "Examples:\n  \
        cordon star run examples/starlark/single.star --entry main\n  \
        printf abc | cordon star run examples/starlark/hello --entry main --grant api.http \\\n      \
        --grant secrets.read --allow-private 127.0.0.1/32 --secret greeting_token --json\n\n\
        Exit status: 0 on success; 1 on a script error; 124 on a timeout or a step/heap limit;\n\
        125 on a host error (bad flags, no conforming sandbox, worker failure).")]
    Run(Box<StarRunArgs>),
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
    /// Bring the store's schema up to date (once, however many hosts run
    /// it at the same time) and print its version; for a new PostgreSQL
    /// database, make the store key file if there is none.
    Migrate(StoreArgs),
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
    /// A secret in the package's namespace, its value read from stdin (one
    /// trailing newline dropped): never on the command line, where every
    /// user sees it. One --secret at most; the others with --secret-file.
    #[arg(long = "secret", value_name = "KEY", value_parser = parse_secret_name)]
    secrets: Vec<String>,
    /// A secret whose value is the contents of PATH (one trailing newline
    /// dropped; repeatable).
    #[arg(long = "secret-file", value_name = "KEY=PATH", value_parser = parse_secret_file)]
    secret_files: Vec<(String, PathBuf)>,
    /// With --grant api.http: let the package's http targets be in, or
    /// resolve into, this loopback, private or link-local range
    /// (repeatable), e.g. 127.0.0.1/32 for a server on this host. The
    /// manifest alone never reaches such an address.
    #[arg(long = "allow-private", value_name = "CIDR")]
    allow_private: Vec<IpRange>,
    /// A PEM file of CAs the http module trusts besides the WebPKI roots
    /// (a private API's; as `cordon run --upstream-ca`).
    #[arg(long = "upstream-ca", value_name = "FILE")]
    upstream_ca: Option<PathBuf>,
    /// The acting user (needed by the provider module).
    #[arg(long)]
    user: Option<String>,
    /// The channel the call comes from (for a channel's provider key).
    #[arg(long)]
    channel: Option<String>,
    /// Deliver the package's notifications as JSON lines appended to this
    /// file (instead of the default: recorded and printed for a path, JSON
    /// lines on stderr for an installed package). A symlink there is
    /// refused, not followed.
    #[arg(long, value_name = "PATH", conflicts_with = "notify_webhook")]
    notify_file: Option<PathBuf>,
    /// Deliver the package's notifications by POSTing their JSON to this
    /// URL (10 s per attempt, 3 attempts with backoff). A webhook URL is
    /// often a secret and the command line is readable by every local
    /// user: pass it in CORDON_NOTIFY_WEBHOOK instead.
    #[arg(
        long,
        value_name = "URL",
        env = "CORDON_NOTIFY_WEBHOOK",
        hide_env_values = true
    )]
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

/// `--secret KEY`: a name only. A value given here would be on argv, which
/// every user reads in /proc/PID/cmdline: a usage error that says how.
fn parse_secret_name(s: &str) -> Result<String, String> {
    if let Some((name, _)) = s.split_once('=') {
        return Err(format!(
            "a secret's value on the command line is readable by every user of this machine \
             (in /proc/PID/cmdline); give its name only and pipe the value in \
             (printf %s \"$VALUE\" | cordon star run … --secret {name}), or use \
             --secret-file {name}=PATH"
        ));
    }
    if s.is_empty() {
        return Err("a secret needs a name".into());
    }
    Ok(s.to_owned())
}

fn parse_secret_file(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((k, p)) if !k.is_empty() && !p.is_empty() => Ok((k.to_owned(), PathBuf::from(p))),
        _ => Err(format!("`{s}` is not KEY=PATH")),
    }
}

/// The secrets of a path run: one from stdin, the others from files.
fn secret_values(args: &StarRunArgs) -> Result<Vec<(String, String)>, String> {
    if args.secrets.len() > 1 {
        return Err(format!(
            "only one --secret can read stdin ({} given): pass the others with --secret-file KEY=PATH",
            args.secrets.len()
        ));
    }
    let mut out = Vec::new();
    for name in &args.secrets {
        out.push((
            name.clone(),
            read_stdin(&format!("value of secret {name}"))?,
        ));
    }
    for (name, path) in &args.secret_files {
        use std::io::Read as _;
        let mut v = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(1 << 20).read_to_string(&mut v))
            .map_err(|e| format!("--secret-file {name}={}: {e}", path.display()))?;
        if v.ends_with('\n') {
            v.pop();
            if v.ends_with('\r') {
                v.pop();
            }
        }
        out.push((name.clone(), v));
    }
    Ok(out)
}

pub async fn main(cmd: StarCommand) -> ExitCode {
    let args = match cmd {
        StarCommand::Run(args) => args,
        other => return manage::main(other).await,
    };
    let code = match run(&args).await {
        Err(message) => {
            say(format!("cordon: {message}"));
            ExitCode::from(EXIT_CORDON_FAILED)
        }
        Ok(Ok(outcome)) => {
            print_outcome(&outcome, args.json);
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            // What the package printed before it failed is what its author
            // needs: on stderr, before the error.
            if !e.output.is_empty() {
                say(&e.output);
            }
            say(format!("cordon: {e}"));
            ExitCode::from(exit_code_for(&e.error))
        }
    };
    stderr::flush();
    code
}

/// Where a run's notifications go, kept to wait for their delivery.
enum Sink {
    /// Recorded, printed at the end (a package path).
    Recorded,
    /// JSON lines on cordon's stderr (an installed package).
    Stderr,
    /// JSON lines appended to a file.
    File(JsonLinesNotifier),
    /// POSTed to a webhook.
    Webhook(WebhookNotifier),
}

impl Sink {
    /// Waits for queued deliveries (a file: while it makes progress; a
    /// webhook: up to 10 s), and says what was not delivered.
    fn finish(&self) {
        let stats = match self {
            Sink::Recorded | Sink::Stderr => return,
            Sink::File(f) => f.flush(Duration::from_secs(2)),
            Sink::Webhook(w) => w.flush(Duration::from_secs(10)),
        };
        if !stats.all_delivered() {
            let why = match self {
                Sink::Webhook(w) => w.last_error().map(|e| format!(": {e}")),
                _ => None,
            };
            say(format!(
                "cordon: notifications: {} delivered, {} failed, {} refused (queue full), {} \
                 not delivered before exit{}",
                stats.delivered,
                stats.failed,
                stats.refused,
                stats.pending,
                why.unwrap_or_default()
            ));
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
    let mut sink = Sink::Recorded;
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
        if !args.allow_private.is_empty() && !args.grants.contains(&Permission::ApiHttp) {
            return Err("--allow-private approves addresses for --grant api.http only".into());
        }
        for r in &args.allow_private {
            perms.allow_private(&package.id, *r);
        }
        let secrets = Arc::new(InMemorySecretStore::new());
        for (k, v) in secret_values(args)? {
            secrets.set(&package.id, &k, &v);
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
        if !args.grants.is_empty()
            || !args.secrets.is_empty()
            || !args.secret_files.is_empty()
            || !args.allow_private.is_empty()
        {
            return Err(format!(
                "--grant, --allow-private, --secret and --secret-file are for a package path; \
                 `{}` is an installed package: use `cordon star grant` and `cordon star secret set`",
                args.package.display()
            ));
        }
        let id = args.package.to_string_lossy().into_owned();
        let store = open_store(&args.store, false).await?;
        let package = match cordon_starlark::PackageStore::get(&*store, &id).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(format!(
                    "`{id}` is neither a path nor an installed package (cordon star list)"
                ))
            }
            Err(e) => return Err(e),
        };
        let mut services = store.services();
        if let Some(q) = stderr::queue() {
            services.notifier = Some(Arc::new(JsonLinesNotifier::on(q.clone())));
            sink = Sink::Stderr;
        }
        (package, services)
    };
    let mut services = services;
    if let Some(path) = &args.notify_file {
        // A log in a dir another user may share: hostfs's rules.
        let file = cordon_core::hostfs::open_append(path)
            .map_err(|e| format!("--notify-file {}: {e}", path.display()))?;
        let lines = JsonLinesNotifier::new(file)?;
        services.notifier = Some(Arc::new(lines.clone()));
        sink = Sink::File(lines);
    }
    if let Some(url) = &args.notify_webhook {
        let hook =
            WebhookNotifier::new(url, Duration::from_secs(10), 3, Duration::from_millis(500))
                .map_err(|e| format!("--notify-webhook: {e}"))?;
        services.notifier = Some(Arc::new(hook.clone()));
        sink = Sink::Webhook(hook);
    }
    if let Some(path) = &args.upstream_ca {
        let pem =
            std::fs::read(path).map_err(|e| format!("--upstream-ca {}: {e}", path.display()))?;
        services.http_roots_pem = Some(Arc::new(pem));
    }
    let limits = EvalLimits {
        timeout: args.timeout.unwrap_or(EvalLimits::default().timeout),
        ..EvalLimits::default()
    };
    let mut builder = StarlarkHost::builder(services).limits(limits);
    let tier = match args.isolation {
        IsolationArg::InProcess => {
            say(
                "cordon: --isolation in-process: the package is treated as TRUSTED and runs \
                 inside cordon: size checks, but no memory protection",
            );
            builder = builder.trusted_isolation(Isolation::InProcess);
            TrustTier::Trusted
        }
        IsolationArg::Process => {
            say(
                "cordon: --isolation process: the package is treated as TRUSTED (a worker \
                 process with limits, no sandbox)",
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
                say(crate::conformance::render(&e.report));
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
    sink.finish();
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
    use std::io::Write as _;
    let output = match &o.call {
        Some(c) => format!("{}{}", o.exec.output, c.output),
        None => o.exec.output.clone(),
    };
    let value = o.call.as_ref().map(|c| c.value.clone());
    // Writes to a closed stdout (`| head -0`) are not cordon's failure.
    let mut out = std::io::stdout().lock();
    if json {
        let v = serde_json::json!({
            "package": o.package.id,
            "value": value,
            "output": output,
            "globals": o.exec.globals,
            "notifications": o.notifications,
        });
        let _ = writeln!(out, "{v}");
        return;
    }
    let _ = write!(out, "{output}");
    if let Some(v) = value {
        let _ = writeln!(out, "{v}");
    }
    let _ = out.flush();
    for n in &o.notifications {
        say(format!("notification: {} — {}", n.title, n.body));
    }
}
