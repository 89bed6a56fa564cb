//! `cordon`: run a program sandboxed, print the conformance report, run a
//! Starlark package. A thin front over the Cordon crates: no sandbox logic
//! lives here.
//!
//! A library only so that two binaries share it: `cordon` (`src/main.rs`)
//! and `cordon-gate` (`src/bin/cordon-gate.rs`, feature `gate`), the same
//! command under the name `cargo xtask` builds, so its builds (without the
//! `starlark` feature) never replace the user's `target/*/cordon`. Its one
//! entry point is [`main`]; nothing else here is an API.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod backends;
mod conformance;
mod diagnose;
mod explain;
mod policy;
mod review;
mod run;
mod scope_notes;
mod secrets;
#[cfg(feature = "starlark")]
mod star;

/// Exit status when cordon itself fails (bad flags, no sandbox, spawn error).
pub const EXIT_CORDON_FAILED: u8 = 125;
/// Exit status when the `--timeout` deadline killed the child.
pub const EXIT_TIMEOUT: u8 = 124;

#[derive(Parser)]
#[command(
    name = "cordon",
    // The same in `cordon-gate`: it is the same command.
    bin_name = "cordon",
    version,
    about = "Run untrusted code under an OS sandbox that has proved itself on this host",
    propagate_version = true
)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program under the sandbox (after the conformance gate).
    #[command(after_help = "Examples:\n  \
        cordon run -- /bin/sh -c 'echo ok'\n  \
        cordon run --ro /usr/share/dict --mem 512M --timeout 10 -- python3 script.py\n  \
        cordon run --env LANG --env MODE=fast --scratch ./work -- ./tool\n\n\
        Standard streams: the program's stdin, stdout and stderr are pipes that cordon\n\
        copies to and from its own, so the program never holds your terminal or your\n\
        files (it cannot change a terminal's modes or a log's append flag). It sees pipes,\n\
        not a terminal. Its output is complete when cordon exits; when cordon's stdout\n\
        is closed (| head -1), the program gets SIGPIPE as in a plain pipeline. With -t\n\
        it gets a new terminal of its own instead, relayed to yours (raw while it runs,\n\
        restored after): cordon run -t -- bash\n\n\
        What the program may touch: the program file itself (and its #! interpreter or\n\
        ELF loader), the system's program and library dirs (/usr, /bin, /lib...), the\n\
        public /etc files tools read (ld.so.cache, passwd, group, os-release, pip.conf,\n\
        hosts...; the list: crates/backend-linux/README.md) and\n\
        /dev/urandom and /dev/random, read-only; /dev/null, /dev/zero, /dev/full, /dev/tty\n\
        (its own terminal, which it has only with -t) and its scratch dir read-write.\n\
        Nothing else, not even the program's own directory: grant more with --ro PATH\n\
        (read, and execute for dirs) or --rw PATH (read-write), each repeatable.\n\n\
        Exit status: the program's own; 128+N if killed by signal N; 124 on --timeout;\n\
        125 if cordon itself failed (bad flags, no conforming sandbox, spawn error).")]
    Run(Box<run::RunArgs>),
    /// Run the conformance probes (P1-P7, and P8 for a backend that claims the egress allowlist) against a backend and print the report.
    #[command(after_help = "Examples:\n  \
        cordon conformance\n  \
        cordon conformance --backend noop\n  \
        cordon conformance --json --probe P4 --probe P5\n\n\
        Exit status: 0 if the backend conforms, 1 if not, 2 on a usage error.")]
    Conformance(conformance::ConformanceArgs),
    /// Policy files: what one allows, before anything runs under it.
    #[command(
        subcommand,
        after_help = "Examples:\n  \
        cordon policy show examples/policies/python-tool.toml\n  \
        cordon policy check tool.toml ~/.ssh/id_rsa\n  \
        cordon policy check tool.toml out/report.txt --write"
    )]
    Policy(policy::PolicyCommand),
    /// Review layers of `cordon run --rw-review`: list, show, apply, discard.
    #[command(
        subcommand,
        after_help = "Examples:\n  \
        cordon review list\n  \
        cordon review show ID\n  \
        cordon review apply ID"
    )]
    Review(review::ReviewCommand),
    /// Starlark packages.
    #[cfg(feature = "starlark")]
    #[command(subcommand)]
    Star(star::StarCommand),
}

/// Options shared by subcommands that pick a backend.
#[derive(Args, Clone)]
pub struct BackendArg {
    /// Sandbox backend: native, linux, macos or noop.
    #[arg(long, default_value = "native", value_parser = clap::builder::PossibleValuesParser::new(backends::NAMES))]
    pub backend: String,
    /// Accept probe P (P1..P8) should it be unproven on this host: every
    /// check passed but each passes with no sandbox too (an outer seccomp
    /// filter, a container), so nothing showed the backend confining.
    /// Recorded in the report. Repeatable.
    #[arg(long = "accept-unproven", value_name = "P", value_parser = parse_probe_id)]
    pub accept_unproven: Vec<cordon_core::ProbeId>,
    /// Linux: use this tier and no other (`namespaces`: user, PID, IPC,
    /// mount and UTS namespaces; `landlock`: no namespaces, for hosts that
    /// refuse them). Where the host cannot run it, or it fails a probe,
    /// cordon refuses (exit 125) instead of using another. Default: the
    /// strongest tier this host allows.
    #[arg(long, value_name = "TIER", value_parser = clap::builder::PossibleValuesParser::new(backends::TIERS))]
    pub tier: Option<String>,
}

/// `P1`..`P8`.
pub fn parse_probe_id(s: &str) -> Result<cordon_core::ProbeId, String> {
    // Any `P<n>` parses (a third party's registry may hold more); cordon
    // runs the standard probes only: the required ones and P8.
    use cordon_core::ProbeId;
    ProbeId::parse(s)
        .filter(|id| ProbeId::REQUIRED.contains(id) || ProbeId::CLAIMED.contains(id))
        .ok_or_else(|| format!("`{s}` is not a probe; use P1 to P8"))
}

/// Logs go to stderr; for `cordon star`, through its bounded queue
/// (`star/stderr.rs`), so a stderr nobody reads never holds a package call.
fn init_tracing(verbose: u8, star: bool) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    #[cfg(feature = "starlark")]
    if star {
        let _ = fmt.with_writer(star::stderr::TracingWriter).try_init();
        return;
    }
    let _ = star;
    let _ = fmt.with_writer(std::io::stderr).try_init();
}

/// The whole command: parses `std::env::args_os()`, runs it, and returns
/// the exit status. Call it first thing in `main`, before any thread
/// starts: the probe child and the Starlark worker are this binary in
/// another mode.
pub fn main() -> ExitCode {
    // Before anything else (and before any thread): the conformance probe
    // child and the Starlark worker are this same binary in another mode.
    cordon_conformance::dispatch_probe_child();
    #[cfg(feature = "starlark")]
    cordon_starlark::dispatch_worker();

    let argv: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let _ = e.print();
            // `run` and `star` promise 125 for their own failures; the
            // conformance command (and the top level) use 2 for usage errors.
            let sub = argv.get(1).and_then(|a| a.to_str());
            return ExitCode::from(match sub {
                Some("run") | Some("star") => EXIT_CORDON_FAILED,
                _ => 2,
            });
        }
    };
    #[cfg(feature = "starlark")]
    let star = matches!(cli.command, Command::Star(_));
    #[cfg(not(feature = "starlark"))]
    let star = false;
    init_tracing(cli.verbose, star);
    // One thread for `run` (its child's wait and the gate answered from
    // the cache need no more, and each worker thread costs start-up time);
    // the conformance suite and the Starlark host use two.
    let mut builder = match cli.command {
        Command::Run(_) => tokio::runtime::Builder::new_current_thread(),
        _ => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(2);
            b
        }
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cordon: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_CORDON_FAILED);
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::main(*args).await,
            Command::Conformance(args) => conformance::main(args).await,
            Command::Policy(cmd) => policy::main(cmd),
            Command::Review(cmd) => review::main(cmd),
            #[cfg(feature = "starlark")]
            Command::Star(cmd) => star::main(cmd).await,
        }
    })
}

/// Parses sizes such as `512`, `64K`, `256M`, `2G` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    cordon_core::policy::parse_size(s)
}

/// Parses a positive number of seconds (fractions allowed).
pub fn parse_secs(s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v < 1e9) {
        return Err(format!("`{s}` must be a positive number of seconds"));
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

/// A path argument that must exist.
pub fn existing_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    p.canonicalize().map_err(|e| format!("`{s}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert!(parse_size("12X").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("99999999999999G").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_secs("1.5").unwrap().as_millis(), 1500);
        assert!(parse_secs("0").is_err());
        assert!(parse_secs("-1").is_err());
        assert!(parse_secs("nan").is_err());
    }
}
