//! `cordon run`: one program, sandboxed (or, with `--trusted`, hygiene only).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use cordon_core::{
    ChildSpec, ExitOutcome, LimitScope, LimitScopes, Limits, RunnerConfig, SandboxRunner, Scratch,
    StdioMode, TrustTier, TrustedProcessRunner,
};

use crate::diagnose::SandboxUser;
use crate::scope_notes::{per_process_bounds, scope_refusal};
use crate::{backends, BackendArg, EXIT_CORDON_FAILED, EXIT_TIMEOUT};

#[derive(Args)]
pub struct RunArgs {
    /// Read a policy file (repeatable): grants, masks, environment,
    /// limits, network (the format: docs/policy-format.md). Files apply
    /// in the order given, each after the files it extends; the flags
    /// below then add to the lists and override the settings. No file is
    /// ever read unless named here.
    #[arg(long, value_name = "FILE")]
    policy: Vec<PathBuf>,
    /// Use DIR as the scratch dir (cwd) and keep it; default: a fresh temp dir.
    #[arg(long, value_name = "DIR", value_parser = crate::existing_path)]
    scratch: Option<PathBuf>,
    /// Grant read-only access to PATH (repeatable).
    #[arg(long = "ro", value_name = "PATH", value_parser = crate::existing_path)]
    read_only: Vec<PathBuf>,
    /// Grant read-write access to PATH (repeatable).
    #[arg(long = "rw", value_name = "PATH", value_parser = crate::existing_path)]
    read_write: Vec<PathBuf>,
    /// Let the program write DIR, its changes landing in a layer cordon
    /// keeps apart (repeatable); after the run they are listed (added,
    /// modified, deleted, with sizes) and applied, discarded or kept as
    /// --review says. Needs tier namespaces.
    #[arg(long = "rw-review", value_name = "DIR", value_parser = crate::existing_path)]
    rw_review: Vec<PathBuf>,
    /// What to do with the --rw-review changes at exit: apply (the
    /// legitimate ones; links out of the tree, devices, setuid files, hard
    /// links and files changed meanwhile on the host are refused and
    /// listed), discard, or keep for `cordon review`. Default: ask on a
    /// terminal, else keep.
    #[arg(long, value_name = "ACTION", value_enum, requires = "rw_review")]
    review: Option<crate::review::ReviewAction>,
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
    /// Give the program a terminal of its own (a new pty the host relays
    /// to yours): for shells, REPLs and editors. Your terminal is put in
    /// raw mode while it runs and restored after; ^C and ^Z go to the
    /// program. Needs a terminal on stdin.
    #[arg(short = 't', long)]
    tty: bool,
    #[command(flatten)]
    secrets: crate::secrets::SecretArgs,
    /// The program to run, then its arguments.
    #[arg(required = true, last = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

mod flags;
#[allow(unused_imports)]
use flags::*;
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
    let mut command = args.command.iter().cloned();
    let program = command.next().ok_or("no PROGRAM given")?;
    let mut spec = ChildSpec::new(PathBuf::from(program))
        .args(command)
        // Never the caller's own fds: the program could change what the
        // caller shares (a log's O_APPEND, a terminal's modes). With -t a
        // pty of its own, relayed.
        .stdio(StdioMode::Relay);
    spec.label = Some("cordon run".into());
    // The defaults, then each --policy file in order, then the flags.
    let mut config = RunnerConfig {
        ceilings: Limits {
            deadline: None,
            ..Limits::default_ceilings()
        },
        ..RunnerConfig::default()
    };
    // Which limits the user set (a flag or a policy): said per process
    // below where that is all the host holds.
    let mut set_by_policy = [false; 4];
    let mut loaded = None;
    if !args.policy.is_empty() {
        let policy = crate::policy::load_all(&args.policy)?;
        let l = &policy.limits;
        set_by_policy = [
            l.memory_bytes.is_some(),
            l.cpu_ms.is_some(),
            l.max_processes.is_some(),
            l.disk_bytes.is_some(),
        ];
        let brokered =
            !policy.secrets.is_empty() || !policy.rules.is_empty() || policy.upstream_ca.is_some();
        if args.trusted && (!policy.masks.is_empty() || !policy.network.is_empty() || brokered) {
            return Err(
                "--trusted runs without the sandbox, which the policy's masks, network \
                 allowlist, secrets and request rules need; drop --trusted"
                    .into(),
            );
        }
        config.read_only.extend(args.read_only.iter().cloned());
        config.read_write.extend(args.read_write.iter().cloned());
        policy
            .apply(&mut config, &mut spec)
            .map_err(|e| e.to_string())?;
        for w in policy.movable_masks(&config.read_write) {
            eprintln!("cordon: warning: {w}");
        }
        loaded = Some(policy);
    } else {
        config.read_only.extend(args.read_only.iter().cloned());
        config.read_write.extend(args.read_write.iter().cloned());
    }
    let tty = args.tty
        || loaded
            .as_ref()
            .is_some_and(|p| p.tty.as_ref().is_some_and(|t| t.value));
    if tty {
        // SAFETY: isatty only inspects the fd.
        if unsafe { libc::isatty(0) } != 1 {
            return Err(
                "-t gives the program a terminal relayed to yours, but stdin is not a \
                        terminal; run it from a terminal, or drop -t to relay pipes"
                    .into(),
            );
        }
        spec.stdio = StdioMode::Terminal;
        // What the terminal is, for curses and readline: names a terminal
        // type, nothing of the caller's.
        if std::env::var_os("TERM").is_some() {
            spec.pass_env.push("TERM".into());
        }
    }
    // A limit flag given must hold for the sandbox as a whole unless its
    // --X-scope says not; a flag overrides the policy's value.
    let c = &mut config.ceilings;
    for (value, asked, to, scope) in [
        (
            args.pids,
            args.pids_scope,
            &mut c.max_processes,
            &mut c.scopes.processes,
        ),
        (
            args.mem,
            args.mem_scope,
            &mut c.memory_bytes,
            &mut c.scopes.memory,
        ),
        (
            args.cpu.map(|s| s.saturating_mul(1000)),
            args.cpu_scope,
            &mut c.cpu_ms,
            &mut c.scopes.cpu,
        ),
        (
            args.disk,
            args.disk_scope,
            &mut c.disk_bytes,
            &mut c.scopes.disk,
        ),
    ] {
        if value.is_some() {
            *to = value;
        }
        if value.is_some() || asked.is_some() {
            *scope = scope_of(value.is_some(), asked);
        }
    }
    if args.fds.is_some() {
        c.open_files = args.fds;
    }
    if args.timeout.is_some() {
        c.deadline = args.timeout;
    }
    let asked: Vec<&str> = [
        (args.mem.is_some() || set_by_policy[0], "--mem"),
        (args.cpu.is_some() || set_by_policy[1], "--cpu"),
        (args.pids.is_some() || set_by_policy[2], "--pids"),
        (args.disk.is_some() || set_by_policy[3], "--disk"),
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
    if !args.allow_host.is_empty() {
        let ranges = args.allow_private.iter().copied();
        let ranges = ranges.map(cordon_egress::HostPattern::private_range);
        config.network = config
            .network
            .with_hosts(args.allow_host.iter().cloned().chain(ranges));
    }
    match (&args.scratch, args.keep_scratch) {
        (Some(dir), _) => spec.scratch = Scratch::Existing(dir.clone()),
        (None, true) => spec.scratch = Scratch::FreshKept,
        (None, false) => {}
    }
    if let (Some(policy), Scratch::Existing(dir)) = (&loaded, &spec.scratch) {
        policy
            .check_out_of_reach(std::slice::from_ref(dir))
            .map_err(|e| e.to_string())?;
    }
    let fresh_scratch = matches!(spec.scratch, Scratch::Fresh);
    let kept_scratch = matches!(spec.scratch, Scratch::FreshKept);
    spec.explain = args.explain || args.explain_json.is_some();
    // Made now, before the program runs (and before its deadline is
    // armed, so nothing here may block): the path may be in a dir the
    // sandbox can write (--rw), shaped by an earlier run (hostfs).
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
    if args.trusted && args.secrets.any() {
        return Err(
            "--trusted runs without the sandbox and its proxy, which a secret or a request rule \
             needs; drop --trusted"
                .into(),
        );
    }
    // No read-write grant of any run may reach the review layers (a
    // later run could rewrite a kept layer's record or upper).
    if let Ok((store, _)) = crate::review::store_path() {
        config.protected.push(store);
    }
    let mut review_dirs = args.rw_review.clone();
    if let Some(p) = &loaded {
        review_dirs.extend(p.read_write_review.iter().map(|e| e.value.clone()));
    }
    let unstarted = if review_dirs.is_empty() {
        None
    } else {
        if args.trusted {
            return Err(
                "--rw-review needs the sandbox to put its layer over the directory; drop \
                 --trusted"
                    .into(),
            );
        }
        let store = crate::review::store()?;
        let (layers, reviewed) = crate::review::prepare(&store, &review_dirs)?;
        spec.reviewed = reviewed;
        Some(layers)
    };
    // Held until the program ends: the trust bundle's directory.
    let _brokering = match args.trusted {
        true => None,
        false => {
            crate::secrets::prepare(loaded.as_ref(), &args.secrets, &mut config, &mut spec).await?
        }
    };

    let program_named = spec.program.clone();
    let mut sandbox_uid: Option<SandboxUser> = None;
    let mut exec_dirs: Vec<PathBuf> = config.read_only.clone();
    exec_dirs.extend(config.executable.iter().filter(|p| p.is_dir()).cloned());
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
    let read_write = config.read_write.clone();
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
        let own_scratch = match &spec.scratch {
            Scratch::Existing(dir) => Some(dir.clone()),
            _ => None,
        };
        for dir in own_scratch.iter().chain(&read_write) {
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
    // Every signal that would end cordon unhandled, so that it ends the
    // sandbox and restores a -t caller's terminal first.
    for kind in [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
        SignalKind::quit(),
        SignalKind::user_defined1(),
        SignalKind::user_defined2(),
        SignalKind::alarm(),
        SignalKind::from_raw(libc::SIGXCPU),
        SignalKind::from_raw(libc::SIGXFSZ),
        SignalKind::from_raw(libc::SIGVTALRM),
        SignalKind::from_raw(libc::SIGPROF),
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
    if kept_scratch {
        eprintln!(
            "cordon: scratch dir kept at {}",
            child.scratch_dir().display()
        );
    }
    let layers = unstarted
        .map(crate::review::Unstarted::started)
        .unwrap_or_default();
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
            // Told to stop: nothing is asked, and nothing applied unasked.
            let action = args.review.filter(|a| *a != crate::review::ReviewAction::Apply);
            crate::review::finish(&layers, Some(action.unwrap_or(crate::review::ReviewAction::Keep)));
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
    if !layers.is_empty() {
        crate::review::finish(&layers, args.review);
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

mod select;
#[allow(unused_imports)]
use select::*;
