//! `cordon star run`: run a Starlark package's entry point.
//!
//! Untrusted by default: the package runs in a sandboxed worker process
//! behind the conformance gate. `--isolation in-process` runs it inside
//! cordon itself and is only for packages you trust (the interpreter is no
//! safety boundary).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use cordon_starlark::{LocalOutcome, LocalRun, Permission, RunContext, StarlarkHostError};

use crate::{EXIT_CORDON_FAILED, EXIT_TIMEOUT};

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
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IsolationArg {
    /// A worker process under the OS sandbox (the default).
    Sandboxed,
    /// Inside cordon itself: trusted packages only.
    InProcess,
}

#[derive(clap::Args)]
pub struct StarRunArgs {
    /// A package directory (with package.toml) or a single .star file.
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
    let StarCommand::Run(args) = cmd;
    let options = LocalRun {
        grant: args.grants.clone(),
        secrets: args.secrets.clone(),
        context: args.user.clone().map(RunContext::for_user),
        provider: None,
        limits: args.timeout.map(|t| cordon_starlark::Limits {
            timeout: t,
            ..Default::default()
        }),
    };
    let entry = args.entry.as_deref();
    let call_args = args.args.clone().map(|a| a.0).unwrap_or_default();
    let result = match args.isolation {
        IsolationArg::InProcess => {
            eprintln!("cordon: --isolation in-process: the package is treated as TRUSTED");
            cordon_starlark::run_local(&args.package, entry, call_args, options).await
        }
        IsolationArg::Sandboxed => {
            match crate::sandboxed::run(
                &args.backend.backend,
                &args.package,
                entry,
                call_args,
                options,
            )
            .await
            {
                Ok(r) => r,
                Err(message) => {
                    eprintln!("cordon: {message}");
                    return ExitCode::from(EXIT_CORDON_FAILED);
                }
            }
        }
    };
    match result {
        Ok(outcome) => {
            print_outcome(&outcome, args.json);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cordon: {e}");
            ExitCode::from(exit_code_for(&e))
        }
    }
}

/// 1 for the script's own errors, 124 for time/step/heap limits, 125 for
/// everything the host failed at.
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

fn print_outcome(o: &LocalOutcome, json: bool) {
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
