//! `cordon run`: one program, sandboxed (or, with `--trusted`, hygiene only).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use cordon_core::{
    ChildSpec, ExitOutcome, Limits, Network, RunnerConfig, SandboxRunner, Scratch, StdioMode,
    TrustTier, TrustedProcessRunner,
};

use crate::diagnose::SandboxUser;
use crate::{backends, BackendArg, EXIT_CORDON_FAILED, EXIT_TIMEOUT};

#[derive(Args)]
pub struct RunArgs {
    /// Use DIR as the scratch dir (cwd) and keep it; default: a fresh temp dir.
    #[arg(long, value_name = "DIR", value_parser = crate::existing_path)]
    scratch: Option<PathBuf>,
    /// Grant read-only access to PATH (repeatable).
    #[arg(long = "ro", value_name = "PATH", value_parser = crate::existing_path)]
    read_only: Vec<PathBuf>,
    /// Grant read-write access to PATH (repeatable).
    #[arg(long = "rw", value_name = "PATH", value_parser = crate::existing_path)]
    read_write: Vec<PathBuf>,
    /// Pass host variable KEY, or set KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY[=VALUE]", value_parser = parse_env)]
    env: Vec<(OsString, Option<OsString>)>,
    /// Maximum number of processes of the sandbox, all together.
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// Maximum memory (K/M/G suffixes): of the sandbox as a whole where the
    /// host allows a cgroup, else address space per process (cordon warns).
    #[arg(long, value_name = "SIZE", value_parser = crate::parse_size)]
    mem: Option<u64>,
    /// Maximum open files per process.
    #[arg(long, value_name = "N")]
    fds: Option<u64>,
    /// Maximum CPU seconds of the sandbox as a whole (its processes'
    /// time summed), else per process where the backend cannot sum it.
    #[arg(long, value_name = "SECS")]
    cpu: Option<u64>,
    /// Maximum bytes in the fresh scratch dir (K/M/G suffixes; default 1G).
    /// A --scratch or --keep-scratch dir is on the host's disk, limited
    /// only per file.
    #[arg(long, value_name = "SIZE", value_parser = crate::parse_size)]
    disk: Option<u64>,
    /// Let the program reach HOST (a name, *.DOMAIN or an IP literal) on
    /// PORT (default: 443 and 80) through cordon's proxy (repeatable);
    /// nothing else on the network. Names resolving to loopback or private
    /// addresses are refused unless listed literally (or `localhost`).
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    allow_host: Vec<cordon_core::egress::HostPattern>,
    /// Kill the program and its descendants after SECS (exit status 124).
    #[arg(long, value_name = "SECS", value_parser = crate::parse_secs)]
    timeout: Option<Duration>,
    #[command(flatten)]
    backend: BackendArg,
    /// Run without an OS sandbox (hygiene only). Only for code you trust.
    #[arg(long)]
    trusted: bool,
    /// Keep the fresh scratch dir afterwards and print its path.
    #[arg(long)]
    keep_scratch: bool,
    /// Ignore the cached conformance report and run the probes again.
    #[arg(long)]
    recheck: bool,
    /// The program to run, then its arguments.
    #[arg(required = true, last = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

fn parse_env(s: &str) -> Result<(OsString, Option<OsString>), String> {
    let (k, v) = match s.split_once('=') {
        Some((k, v)) => (k, Some(OsString::from(v))),
        None => (s, None),
    };
    if k.is_empty() || k.contains('\0') {
        return Err(format!("`{s}` is not KEY or KEY=VALUE"));
    }
    Ok((OsString::from(k), v))
}

/// As root, a backend may run the child as another uid (the Linux
/// backend: a uid of its own per sandbox). A `--scratch` or `--rw` dir
/// root owns is mounted idmapped for it (root's files appear as its own,
/// and what it creates is stored as root's), but a dir another user owns
/// is handed over as it is: the sandbox must be able to write it, or the
/// program fails on its first write.
fn warn_if_sandbox_cannot_write(dir: &std::path::Path, sandbox: Option<SandboxUser>) {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let caller = unsafe { libc::geteuid() };
    let Some(user) = sandbox.filter(|u| caller == 0 && u.uid != caller) else {
        return;
    };
    if let Ok(m) = std::fs::metadata(dir) {
        if m.uid() != 0 && m.uid() != user.uid && m.mode() & 0o002 == 0 {
            eprintln!(
                "cordon: note: as root the sandbox runs as {user}, which cannot write {} \
                 (owned by uid {}); chown it to root (whose files the sandbox may write), or \
                 make it world-writable",
                dir.display(),
                m.uid()
            );
        }
    }
}

/// Which limit flags the user passed, and whether the scratch is the
/// discarded kind (the only one a sandbox-wide disk limit can hold).
struct RequestedLimits {
    mem: bool,
    cpu: bool,
    pids: bool,
    disk: bool,
    fresh_scratch: bool,
}

/// The flags the user passed whose limit the admitted backend holds only
/// per process (or per file) on this host, from its report's `limit_*`
/// host facts; a backend that states no scope is taken at its weakest.
fn per_process_limits(
    facts: &std::collections::BTreeMap<String, String>,
    asked: &RequestedLimits,
) -> Vec<&'static str> {
    let sandbox_wide = |key: &str| facts.get(key).is_some_and(|v| v.starts_with("sandbox:"));
    let mut weaker = Vec::new();
    if asked.mem && !sandbox_wide("limit_memory") {
        weaker.push("--mem");
    }
    if asked.cpu && !sandbox_wide("limit_cpu") {
        weaker.push("--cpu");
    }
    if asked.pids && !sandbox_wide("limit_processes") {
        weaker.push("--pids");
    }
    if asked.disk && !(asked.fresh_scratch && sandbox_wide("limit_disk")) {
        weaker.push("--disk");
    }
    weaker
}

/// Runs the conformance gate (answered from the per-boot cache when it can)
/// and builds the sandbox runner. The outer error is a usage problem (an
/// unknown backend); the inner one is the gate refusing, with its report.
pub async fn admit(
    backend: &str,
    recheck: bool,
    config: RunnerConfig,
) -> Result<Result<SandboxRunner, cordon_core::SandboxUnavailable>, String> {
    let backend = backends::by_name(backend)?;
    let (admitted, outcome) = cordon_conformance::cache::admit(backend, recheck, config).await;
    if let cordon_conformance::cache::CacheOutcome::Refused(why) = outcome {
        eprintln!("cordon: warning: {why}");
    }
    Ok(admitted)
}

pub async fn main(args: RunArgs) -> ExitCode {
    match run(args).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("cordon: {message}");
            ExitCode::from(EXIT_CORDON_FAILED)
        }
    }
}

async fn run(args: RunArgs) -> Result<ExitCode, String> {
    let defaults = Limits::default_ceilings();
    // The operator's flags are the ceilings for this run.
    let ceilings = Limits {
        max_processes: args.pids.or(defaults.max_processes),
        memory_bytes: args.mem.or(defaults.memory_bytes),
        open_files: args.fds.or(defaults.open_files),
        cpu_seconds: args.cpu.or(defaults.cpu_seconds),
        file_size_bytes: defaults.file_size_bytes,
        disk_bytes: args.disk.or(defaults.disk_bytes),
        deadline: args.timeout,
    };
    if args.trusted && !args.allow_host.is_empty() {
        return Err(
            "--allow-host needs the sandbox: a --trusted program has the host's whole \
                    network; drop one of the two"
                .into(),
        );
    }
    let network = if args.allow_host.is_empty() {
        Network::Deny
    } else {
        Network::Allow(args.allow_host.clone())
    };
    let config = RunnerConfig {
        ceilings,
        read_only: args.read_only.clone(),
        read_write: args.read_write.clone(),
        network,
        ..RunnerConfig::default()
    };
    let args_limits = RequestedLimits {
        mem: args.mem.is_some(),
        cpu: args.cpu.is_some(),
        pids: args.pids.is_some(),
        disk: args.disk.is_some(),
        fresh_scratch: args.scratch.is_none() && !args.keep_scratch,
    };
    let mut command = args.command.into_iter();
    let program = command.next().ok_or("no PROGRAM given")?;
    let mut spec = ChildSpec::new(PathBuf::from(program))
        .args(command)
        // Never the caller's own fds: the program could change what the
        // caller shares (a log's O_APPEND, a terminal's modes).
        .stdio(StdioMode::Relay)
        .scratch(match (&args.scratch, args.keep_scratch) {
            (Some(dir), _) => Scratch::Existing(dir.clone()),
            (None, true) => Scratch::FreshKept,
            (None, false) => Scratch::Fresh,
        });
    spec.label = Some("cordon run".into());
    for (k, v) in args.env {
        match v {
            Some(v) => spec.env.push((k, v)),
            None => spec.pass_env.push(k),
        }
    }

    let program_named = spec.program.clone();
    let mut sandbox_uid: Option<SandboxUser> = None;
    let mut exec_dirs: Vec<PathBuf> = args.read_only.clone();
    let tier = if args.trusted {
        eprintln!("cordon: --trusted: running WITHOUT an OS sandbox (hygiene only)");
        TrustTier::Trusted
    } else {
        TrustTier::Untrusted
    };
    spec.trust = tier;
    // The gate runs only for untrusted code; select_runner decides.
    let admitted = match tier {
        TrustTier::Untrusted => {
            Some(admit(&args.backend.backend, args.recheck, config.clone()).await?)
        }
        TrustTier::Trusted => None,
    };
    let trusted_runner = TrustedProcessRunner::new(config);
    let runner = match cordon_core::select_runner(tier, &trusted_runner, admitted.as_ref()) {
        Ok(r) => r,
        Err(cordon_core::NoRunner::Unavailable(e)) => {
            eprint!("{}", crate::conformance::render(&e.report));
            return Err(format!(
                "no conforming sandbox backend `{}` on this host; refusing to run untrusted code \
                 (use --trusted only for code you trust)",
                e.report.backend
            ));
        }
        Err(e @ cordon_core::NoRunner::NoSandbox) => return Err(e.to_string()),
    };
    if let Some(Ok(r)) = &admitted {
        let facts = &r.report().host.backend_facts;
        sandbox_uid = SandboxUser::from_facts(facts);
        exec_dirs.extend(r.backend().exec_dirs());
        for dir in args.scratch.iter().chain(&args.read_write) {
            warn_if_sandbox_cannot_write(dir, sandbox_uid);
        }
        let weaker = per_process_limits(facts, &args_limits);
        if !weaker.is_empty() {
            eprintln!(
                "cordon: warning: on this host {} {} per process (or per file), not for \
                 the sandbox as a whole; `cordon conformance` shows how",
                weaker.join(", "),
                if weaker.len() == 1 { "holds" } else { "hold" }
            );
        }
    }
    // If cordon itself is told to stop, the whole sandboxed tree goes with
    // it: the parent-death signal only reaches the direct child. Watched
    // from before the start: a signal that arrives while the program
    // starts is acted on once it runs.
    use tokio::signal::unix::{signal, SignalKind};
    let mut stops = Vec::new();
    for kind in [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
    ] {
        stops.push((
            kind.as_raw_value(),
            signal(kind).map_err(|e| format!("cannot watch signals: {e}"))?,
        ));
    }
    let mut child = match runner.start(spec).await {
        Ok(child) => child,
        Err(e) => {
            let unstartable = matches!(
                e,
                cordon_core::SpawnError::Spawn { .. } | cordon_core::SpawnError::ProgramOpen { .. }
            );
            if unstartable {
                for note in crate::diagnose::unstartable(&program_named, sandbox_uid, &exec_dirs) {
                    eprintln!("cordon: note: {note}");
                }
            }
            return Err(e.to_string());
        }
    };
    if args.keep_scratch {
        eprintln!(
            "cordon: scratch dir kept at {}",
            child.scratch_dir().display()
        );
    }
    let stop = async {
        let waits = stops.iter_mut().map(|(n, s)| {
            Box::pin(async move {
                s.recv().await;
                *n
            })
        });
        futures_select_first(waits).await
    };
    let outcome = tokio::select! {
        r = child.wait() => r.map_err(|e| format!("waiting for the child failed: {e}"))?,
        sig = stop => {
            child.kill();
            let _ = child.wait().await;
            eprintln!("cordon: stopped by signal {sig}; the program and its descendants were killed");
            return Ok(ExitCode::from((128 + sig).clamp(0, 255) as u8));
        }
    };
    if !outcome.success() && !args.trusted {
        for note in crate::diagnose::denied_paths(
            &child.stderr_tail(),
            &program_named,
            sandbox_uid,
            &exec_dirs,
        ) {
            eprintln!("cordon: note: {note}");
        }
    }
    Ok(match outcome {
        ExitOutcome::Exited(code) => ExitCode::from(code.clamp(0, 255) as u8),
        ExitOutcome::Signaled(sig) => ExitCode::from((128 + sig).clamp(0, 255) as u8),
        ExitOutcome::DeadlineExceeded => {
            eprintln!("cordon: --timeout reached; the program and its descendants were killed");
            ExitCode::from(EXIT_TIMEOUT)
        }
        ExitOutcome::CpuTimeExceeded => {
            eprintln!(
                "cordon: the sandbox used up its --cpu time (all its processes together); \
                 the program and its descendants were killed"
            );
            // As RLIMIT_CPU would end a single process: SIGXCPU.
            ExitCode::from((128 + libc::SIGXCPU) as u8)
        }
        ExitOutcome::MemoryExceeded => {
            eprintln!(
                "cordon: the sandbox used up its --mem (all its processes together); \
                 the kernel killed the program"
            );
            // The kernel's OOM kill is a SIGKILL.
            ExitCode::from((128 + libc::SIGKILL) as u8)
        }
    })
}

/// The first of several futures to finish.
async fn futures_select_first<F: std::future::Future + Unpin>(
    futures: impl Iterator<Item = F>,
) -> F::Output {
    let mut all: Vec<F> = futures.collect();
    std::future::poll_fn(move |cx| {
        for f in all.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}
