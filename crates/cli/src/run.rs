//! `cordon run`: one program, sandboxed (or, with `--trusted`, hygiene only).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use cordon_core::{
    ChildSpec, ExitOutcome, LimitScope, LimitScopes, Limits, Network, RunnerConfig, SandboxRunner,
    Scratch, StdioMode, TrustTier, TrustedProcessRunner,
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
    /// Maximum memory (K/M/G suffixes) of the sandbox as a whole. Where the
    /// host cannot hold that (no cgroup), cordon refuses to run unless
    /// --mem-scope process accepts a per-process limit.
    #[arg(long, value_name = "SIZE", value_parser = crate::parse_size)]
    mem: Option<u64>,
    /// What --mem must hold for: `sandbox` (all its processes together; the
    /// default) or `process` (each process alone, multiplied by forking).
    #[arg(long, value_name = "SCOPE", value_enum)]
    mem_scope: Option<ScopeArg>,
    /// What --cpu must hold for (`sandbox`, the default, or `process`).
    #[arg(long, value_name = "SCOPE", value_enum)]
    cpu_scope: Option<ScopeArg>,
    /// What --pids must hold for (`sandbox`, the default, or `process`).
    #[arg(long, value_name = "SCOPE", value_enum)]
    pids_scope: Option<ScopeArg>,
    /// What --disk must hold for (`sandbox`, the default: only a fresh,
    /// discarded scratch can have it; or `process`: each file alone).
    #[arg(long, value_name = "SCOPE", value_enum)]
    disk_scope: Option<ScopeArg>,
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
    /// nothing else on the network. `https://HOST` allows no plain HTTP,
    /// `http://HOST` means port 80. Names resolving to loopback or private
    /// addresses are refused unless --allow-private names a range holding
    /// them (an IP literal, or `localhost`, allows its own address).
    #[arg(long = "allow-host", value_name = "[SCHEME://]HOST[:PORT]")]
    allow_host: Vec<cordon_egress::HostPattern>,
    /// Let the --allow-host names resolve into this loopback, private or
    /// link-local range (repeatable), e.g. `--allow-host git.corp
    /// --allow-private 10.0.0.0/8`: a corporate host or a cluster service.
    #[arg(long = "allow-private", value_name = "CIDR", requires = "allow_host")]
    allow_private: Vec<cordon_egress::IpRange>,
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
    /// After the program ends, say on stderr what the sandbox refused
    /// (one line per distinct denial, counted, with the flag that would
    /// allow it) and which sources of denials this user cannot observe.
    #[arg(long)]
    explain: bool,
    /// Write the same as JSON lines to PATH (implies recording; see the
    /// README for the fields).
    #[arg(long, value_name = "PATH")]
    explain_json: Option<PathBuf>,
    /// The program to run, then its arguments.
    #[arg(required = true, last = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

/// A `--*-scope` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ScopeArg {
    /// Every process of the sandbox together.
    Sandbox,
    /// Each process alone.
    Process,
}

impl ScopeArg {
    fn scope(self) -> LimitScope {
        match self {
            ScopeArg::Sandbox => LimitScope::Sandbox,
            ScopeArg::Process => LimitScope::PerProcess,
        }
    }
}

/// The scope a limit flag asks for: what `--X-scope` says, else the
/// sandbox as a whole when the flag was given (what `--mem 64M` means),
/// else per process (the defaults are safety nets).
fn scope_of(flag_given: bool, asked: Option<ScopeArg>) -> LimitScope {
    match (asked, flag_given) {
        (Some(a), _) => a.scope(),
        (None, true) => LimitScope::Sandbox,
        (None, false) => LimitScope::PerProcess,
    }
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

/// The flag of a limit (a field of [`Limits`]) and how its value reads.
pub(crate) fn flag_of(limit: &str) -> &'static str {
    match limit {
        "memory_bytes" => "--mem",
        "cpu_ms" => "--cpu",
        "max_processes" => "--pids",
        "disk_bytes" => "--disk",
        _ => "a limit",
    }
}

/// `ms` of CPU time as the CLI's `--cpu` says it: seconds.
fn seconds(ms: u64) -> String {
    if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.3} s", ms as f64 / 1000.0)
    }
}

/// The refusal of a limit the host cannot hold for the sandbox as a whole,
/// in the CLI's words.
fn scope_refusal(e: &cordon_core::LimitScopeError) -> String {
    let flag = flag_of(e.limit);
    let how = match e.limit {
        "memory_bytes" | "cpu_ms" => {
            "run cordon as root, or in a cgroup v2 subtree delegated to you with the memory \
             controller (`systemd-run --user --scope -p Delegate=yes cordon run ...`)"
        }
        "disk_bytes" => "use a fresh, discarded scratch (no --scratch, no --keep-scratch)",
        _ => "use a backend that holds it for the sandbox",
    };
    let value = match e.limit {
        "memory_bytes" | "disk_bytes" => e
            .value
            .parse::<u64>()
            .map(|b| format!(" of {} MiB", b >> 20))
            .unwrap_or_default(),
        "cpu_ms" => e
            .value
            .parse::<u64>()
            .map(|ms| format!(" of {}", seconds(ms)))
            .unwrap_or_default(),
        _ => format!(" of {}", e.value),
    };
    format!(
        "{flag}{value} cannot hold for the sandbox as a whole on this host: backend `{}` holds \
         it only per process here ({}). For a sandbox-wide limit, {how}; or accept the \
         per-process limit with {flag}-scope process",
        e.backend, e.held
    )
}

/// What a limit asked for per process actually bounds on this host, one
/// line per limit the user gave whose scope the backend holds per process.
fn per_process_bounds(limits: &Limits, held: LimitScopes, asked: &[&str]) -> Vec<String> {
    let mib = |b: u64| format!("{} MiB", b >> 20);
    let mut out = Vec::new();
    let procs = limits
        .max_processes
        .map(|n| n.to_string())
        .unwrap_or_else(|| "unlimited".into());
    let accepted = |scope: LimitScope, held: LimitScope| {
        scope == LimitScope::PerProcess && held == LimitScope::PerProcess
    };
    // RLIMIT_FSIZE: `--disk` counts too where the scratch is on the host's
    // disk (no sandbox-wide disk limit here), as the Linux backend sets it.
    let per_file = limits
        .file_size_rlimit(held.disk == LimitScope::PerProcess)
        .map(mib)
        .unwrap_or_else(|| "no limit".into());
    if asked.contains(&"--mem") && accepted(limits.scopes.memory, held.memory) {
        if let Some(m) = limits.memory_bytes {
            let all = limits
                .max_processes
                .map(|n| format!(", {} in all", mib(m.saturating_mul(n))))
                .unwrap_or_default();
            out.push(format!(
                "--mem holds per process here: each process may hold {} of private memory \
                 (RLIMIT_DATA) and map 3 GiB more (RLIMIT_AS); a memfd is capped only per \
                 file ({per_file}, RLIMIT_FSIZE); with --pids {procs} that is up to {procs} × {}{all}",
                mib(m),
                mib(m)
            ));
        }
    }
    if asked.contains(&"--cpu") && accepted(limits.scopes.cpu, held.cpu) {
        if let Some(c) = limits.cpu_rlimit_seconds() {
            out.push(format!(
                "--cpu holds per process here: each process may use {c} s of CPU \
                 (RLIMIT_CPU); the sum over the sandbox's tree is also watched, best effort"
            ));
        }
    }
    if asked.contains(&"--pids") && accepted(limits.scopes.processes, held.processes) {
        if let Some(p) = limits.max_processes {
            out.push(format!(
                "--pids holds per uid here: at most {p} processes of the sandbox's uid \
                 (RLIMIT_NPROC)"
            ));
        }
    }
    if asked.contains(&"--disk") && accepted(limits.scopes.disk, held.disk) {
        out.push(format!(
            "--disk does not bound the scratch dir here: only each file, to {per_file} \
             (RLIMIT_FSIZE)"
        ));
    }
    out
}

/// Runs the conformance gate (answered from the per-boot cache when it can)
/// and builds the sandbox runner. The outer error is a usage problem (an
/// unknown backend); the inner one is the gate refusing, with its report.
pub async fn admit(
    backend: &BackendArg,
    recheck: bool,
    config: RunnerConfig,
) -> Result<Result<SandboxRunner, cordon_core::SandboxUnavailable>, String> {
    let accept = &backend.accept_unproven;
    let backend = backends::by_name(&backend.backend, backend.tier.as_deref())?;
    let (admitted, outcome) =
        cordon_conformance::cache::admit(backend, recheck, accept, config).await;
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
    // The operator's flags are the ceilings for this run; a limit given
    // must hold for the sandbox as a whole unless its --X-scope says not.
    let ceilings = Limits {
        max_processes: args.pids.or(defaults.max_processes),
        memory_bytes: args.mem.or(defaults.memory_bytes),
        open_files: args.fds.or(defaults.open_files),
        cpu_ms: args.cpu.map(|s| s.saturating_mul(1000)).or(defaults.cpu_ms),
        file_size_bytes: defaults.file_size_bytes,
        disk_bytes: args.disk.or(defaults.disk_bytes),
        deadline: args.timeout,
        scopes: LimitScopes {
            memory: scope_of(args.mem.is_some(), args.mem_scope),
            cpu: scope_of(args.cpu.is_some(), args.cpu_scope),
            processes: scope_of(args.pids.is_some(), args.pids_scope),
            disk: scope_of(args.disk.is_some(), args.disk_scope),
        },
    };
    let asked: Vec<&str> = [
        (args.mem.is_some(), "--mem"),
        (args.cpu.is_some(), "--cpu"),
        (args.pids.is_some(), "--pids"),
        (args.disk.is_some(), "--disk"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| given.then_some(flag))
    .collect();
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
        let ranges = args.allow_private.iter().copied();
        let ranges = ranges.map(cordon_egress::HostPattern::private_range);
        Network::Allow(args.allow_host.iter().cloned().chain(ranges).collect())
    };
    let config = RunnerConfig {
        ceilings,
        read_only: args.read_only.clone(),
        read_write: args.read_write.clone(),
        network,
        ..RunnerConfig::default()
    };
    let fresh_scratch = args.scratch.is_none() && !args.keep_scratch;
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
    spec.explain = args.explain || args.explain_json.is_some();
    // Opened now, before the program runs, and never through a symlink:
    // the path may be in a dir the sandbox can write (--rw), where the
    // program could put a link to a file of the caller's in its place.
    let explain_json = match &args.explain_json {
        Some(path) => Some(
            crate::explain::open_json(path)
                .map_err(|e| format!("cannot open --explain-json {}: {e}", path.display()))?,
        ),
        None => None,
    };
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
        TrustTier::Untrusted => Some(admit(&args.backend, args.recheck, config.clone()).await?),
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
        // The tier the gate certified (a Linux backend's), in one line —
        // when it is not the strongest, which is what a caller must know
        // (the program's own stderr stays its own otherwise; `-v` logs it).
        if let Some(tier) = facts.get("tier") {
            if tier.starts_with("namespaces") {
                tracing::info!(%tier, "sandbox tier");
            } else {
                eprintln!("cordon: sandbox tier {tier}");
            }
        }
        sandbox_uid = SandboxUser::from_facts(facts);
        exec_dirs.extend(r.backend().exec_dirs());
        for dir in args.scratch.iter().chain(&args.read_write) {
            warn_if_sandbox_cannot_write(dir, sandbox_uid);
        }
        // Limits the user accepted per process: say what they bound.
        for line in per_process_bounds(
            &r.config().ceilings,
            LimitScopes::held(facts, fresh_scratch),
            &asked,
        ) {
            eprintln!("cordon: {line}");
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
        Err(cordon_core::SpawnError::LimitScope(e)) => return Err(scope_refusal(&e)),
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
    if let Some(e) = child.explanation() {
        if args.explain {
            for line in crate::explain::lines(e) {
                eprintln!("{line}");
            }
        }
        if let (Some(path), Some(file)) = (&args.explain_json, explain_json) {
            if let Err(err) = crate::explain::write_json_file(e, file) {
                eprintln!(
                    "cordon: cannot write --explain-json {}: {err}",
                    path.display()
                );
            }
        }
    }
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
