//! What `cordon run` says about limits whose scope the host cannot hold:
//! the refusal, and what a per-process limit accepted instead bounds.

use cordon_core::{LimitScope, LimitScopes, Limits};

use crate::run::flag_of;

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
pub(crate) fn scope_refusal(e: &cordon_core::LimitScopeError) -> String {
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
pub(crate) fn per_process_bounds(
    limits: &Limits,
    held: LimitScopes,
    asked: &[&str],
) -> Vec<String> {
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
