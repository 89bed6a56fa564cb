//! `exec`: a process run inside a running container, held by a monitor
//! of its own (this binary again, [`EXEC_ENV`] set).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cordon_core::{ChildSpec, ExitOutcome, Runner};
use oci_spec::runtime::Process;

use crate::monitor::{
    admit, exit_as, next_signal, pipe, runtime, write_pid_file, FORWARDED, READY_FD,
};
use crate::state::{self, Record};

/// Set (to the state root) in an `exec`'s monitor's environment.
pub(crate) const EXEC_ENV: &str = "CORDON_RUNTIME_EXEC";
/// The fd an `exec`'s monitor reads the process (JSON) from.
const SPEC_FD: i32 = 4;

/// `exec`: runs `process` inside the running container `id` (its
/// namespaces joined; its own Landlock domain, seccomp filter and cgroup
/// with the container's limits: decision 0017). A monitor of its own
/// holds it (this binary again, in a session of its own, with this
/// process's stdio; its pid goes to the pid file, and it exits as the
/// process does). Detached, this returns once the process runs;
/// otherwise it waits, forwarding signals, and the returned code is the
/// process's.
pub fn exec(
    root: &Path,
    id: &str,
    process: &oci_spec::runtime::Process,
    detach: bool,
    pid_file: Option<&Path>,
) -> Result<Option<ExitCode>, String> {
    let json = serde_json::to_string(process).map_err(|e| e.to_string())?;
    // The process (its environment may hold secrets) goes to the monitor
    // on a pipe, never on its command line: the sandbox's init shares the
    // monitor's memory, so its `/proc/PID/cmdline` is readable inside.
    let (ready_r, ready_w) = pipe()?;
    let (spec_r, spec_w) = pipe()?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.env(EXEC_ENV, root).arg(id);
    let (w, r) = (ready_w.as_raw_fd(), spec_r.as_raw_fd());
    // SAFETY: only async-signal-safe calls (setsid, dup2) in the hook.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 || libc::dup2(w, READY_FD) < 0 || libc::dup2(r, SPEC_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the exec monitor: {e}"))?;
    drop((ready_w, spec_r));
    drop(cmd);
    // A monitor that died early closes its end: the write fails, and the
    // answer below says so.
    let _ = std::fs::File::from(spec_w).write_all(json.as_bytes());
    let mut answer = String::new();
    let _ = std::fs::File::from(ready_r).read_to_string(&mut answer);
    let pid = child.id() as i32;
    match answer.trim_end() {
        "ok" => {}
        "" => {
            let _ = child.wait();
            return Err("the exec monitor ended without an answer".into());
        }
        other => {
            let _ = child.wait();
            return Err(other.strip_prefix("error: ").unwrap_or(other).to_string());
        }
    }
    if let Some(p) = pid_file {
        write_pid_file(p, pid)?;
    }
    if detach {
        // As for `create`: the monitor outlives this process.
        std::mem::forget(child);
        return Ok(None);
    }
    // Attached: this process waits for the monitor (which exits as the
    // process did), forwarding the signals it gets.
    let rt = runtime()?;
    let status = rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut watches = Vec::new();
        for s in FORWARDED {
            let w = signal(SignalKind::from_raw(s))
                .map_err(|e| format!("cannot watch signals: {e}"))?;
            watches.push((s, w));
        }
        let mut waited = tokio::task::spawn_blocking(move || child.wait());
        loop {
            tokio::select! {
                r = &mut waited => {
                    return r
                        .map_err(|e| e.to_string())?
                        .map_err(|e| format!("waiting for the exec monitor: {e}"));
                }
                sig = next_signal(&mut watches) => {
                    // SAFETY: a signal to our own child, not yet reaped
                    // (its waiter has not returned).
                    unsafe { libc::kill(pid, sig) };
                }
            }
        }
    })?;
    use std::os::unix::process::ExitStatusExt;
    let outcome = match (status.code(), status.signal()) {
        (Some(code), _) => ExitOutcome::Exited(code),
        (None, Some(sig)) => ExitOutcome::Signaled(sig),
        _ => ExitOutcome::Signaled(libc::SIGKILL),
    };
    Ok(exit_as(outcome))
}

/// The process of `exec` (`process_json`) started inside container `id`.
async fn start_exec(
    root: &Path,
    id: &str,
    process_json: &str,
) -> Result<cordon_core::RunningChild, String> {
    let rec = Record::load(root, id)?;
    let running = match (rec.started, rec.sandbox) {
        (true, Some(s)) if rec.monitor_alive() => s,
        _ => return Err(format!("container `{id}` is not running")),
    };
    let process: oci_spec::runtime::Process =
        serde_json::from_str(process_json).map_err(|e| format!("--process: {e}"))?;
    let container = crate::bundle::load_config(&state::config_copy(root, id), &rec.bundle)?;
    let (spec, warnings) = exec_spec(container, &process, running)?;
    for w in warnings {
        eprintln!("cordon-runtime: warning: {w}");
    }
    let runner = admit(&spec, &format!("exec in `{id}`")).await?;
    runner
        .start(spec)
        .await
        .map_err(|e| format!("exec in `{id}`: {e}"))
}

/// Waits for `child`, forwarding the signals this process gets to its
/// process group.
async fn hold(mut child: cordon_core::RunningChild) -> Result<ExitOutcome, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut watches = Vec::new();
    for s in FORWARDED {
        let w =
            signal(SignalKind::from_raw(s)).map_err(|e| format!("cannot watch signals: {e}"))?;
        watches.push((s, w));
    }
    loop {
        tokio::select! {
            r = child.wait() => return r.map_err(|e| e.to_string()),
            sig = next_signal(&mut watches) => {
                let _ = child.signal_group(sig);
            }
        }
    }
}

/// A detached `exec`'s monitor: starts the process, answers on the
/// ready fd, holds it.
pub(crate) fn exec_monitor(root: PathBuf) -> Option<ExitCode> {
    let Some(id) = std::env::args_os().nth(1) else {
        return Some(ExitCode::from(1));
    };
    let id = id.to_string_lossy().into_owned();
    // SAFETY: READY_FD and SPEC_FD were dup2'd for us by `exec`.
    let ready = unsafe { std::fs::File::from_raw_fd(READY_FD) };
    let mut json = String::new();
    // SAFETY: as above.
    let spec = unsafe { std::fs::File::from_raw_fd(SPEC_FD) };
    if let Err(e) = (&spec).take(1 << 20).read_to_string(&mut json) {
        let _ = writeln!(&ready, "error: --process: {e}");
        return Some(ExitCode::from(1));
    }
    drop(spec);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(&ready, "error: {e}");
            return Some(ExitCode::from(1));
        }
    };
    let outcome = rt.block_on(async {
        let child = match start_exec(&root, &id, &json).await {
            Ok(c) => c,
            Err(e) => {
                let _ = writeln!(&ready, "error: {e}");
                return Err(());
            }
        };
        let _ = writeln!(&ready, "ok");
        drop(ready);
        hold(child).await.map_err(|_| ())
    });
    match outcome {
        Ok(outcome) => exit_as(outcome),
        Err(()) => Some(ExitCode::from(1)),
    }
}

/// `exec`'s child: the container's own (its root, mounts, seccomp
/// profile and limits) entering `running`, with the program, arguments,
/// environment and working directory of `process` (`exec --process`'s
/// object, checked as the bundle's is), the limits its rlimits give.
fn exec_spec(
    container: crate::bundle::Container,
    process: &Process,
    running: cordon_core::policy::RunningContainer,
) -> Result<(ChildSpec, Vec<String>), String> {
    let mut warnings = Vec::new();
    // The container's limits (its `resources`), with the process's own
    // rlimits: never more processes than the container may have.
    let own = crate::bundle::check_process(process, &mut warnings, "--process")?;
    let mut limits = container.spec.limits;
    limits.open_files = own.open_files;
    limits.max_processes = match (own.max_processes, limits.max_processes) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut child = crate::bundle::process_child(process, "--process")?;
    let mut root = container
        .spec
        .container
        .ok_or("the container has no root")?;
    root.cwd = process.cwd().clone();
    root.enter = Some(running);
    root.check().map_err(|e| format!("--process: {e}"))?;
    child.limits = limits;
    child.container = Some(root);
    child.seccomp = container.spec.seccomp;
    child.label = Some("cordon-runtime exec".into());
    Ok((child, warnings))
}
