//! The commands that act on a container, and the monitor that runs one.
//!
//! `create` starts the monitor (this binary with [`MONITOR_ENV`] set, in a
//! session of its own, the caller's stdio its own) and waits for one line
//! on a pipe: `ok` once the gate admitted the backend and the state is
//! written, or the error. The monitor then blocks opening the state dir's
//! `start` FIFO for writing; `start` opens it for reading, and the monitor
//! starts the program and answers on it (`ok`, or the error).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_core::{hostfs, ExitOutcome, Runner, RunnerConfig};

use crate::state::{self, Record};

/// Set (to the state root) in the monitor's environment.
const MONITOR_ENV: &str = "CORDON_RUNTIME_MONITOR";
/// The most a bundle's `config.json` may hold.
const CONFIG_BYTES: u64 = 4 << 20;
/// The fd the monitor reports readiness on.
pub(crate) const READY_FD: i32 = 3;
/// How long `start` waits for the monitor's answer.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The signals the monitor forwards to the program (SIGKILL and SIGSTOP
/// cannot be caught: SIGKILL ends the monitor, and the sandbox with it).
pub(crate) const FORWARDED: [i32; 9] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGALRM,
    libc::SIGCONT,
];

/// `create`: checks the bundle, starts the monitor, writes the pid file.
pub fn create(root: &Path, id: &str, bundle: &Path, pid_file: Option<&Path>) -> Result<(), String> {
    state::check_id(id)?;
    let root = state::root_dir(root)?;
    let bundle = bundle
        .canonicalize()
        .map_err(|e| format!("--bundle `{}`: {e}", bundle.display()))?;
    // Refused fields are refused before anything is made.
    crate::bundle::load(&bundle)?;
    // The bundle is the caller's (read as the caller's own file), bounded.
    let mut config = Vec::new();
    std::fs::File::open(bundle.join("config.json"))
        .and_then(|f| f.take(CONFIG_BYTES + 1).read_to_end(&mut config))
        .map_err(|e| format!("{}/config.json: {e}", bundle.display()))?;
    if config.len() as u64 > CONFIG_BYTES {
        return Err(format!(
            "{}/config.json is larger than {CONFIG_BYTES} bytes",
            bundle.display()
        ));
    }
    let dir = state::dir(&root, id);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => format!("container `{id}` exists already"),
                _ => format!("cannot make {}: {e}", dir.display()),
            })?;
    }
    let made = || -> Result<i32, String> {
        // The config as it was at `create`: what the monitor runs and what
        // every `exec` is made from, whatever the bundle becomes later.
        hostfs::OutputFile::create(&state::config_copy(&root, id))
            .and_then(|f| f.commit(&config))
            .map_err(|e| format!("cannot keep the config: {e}"))?;
        let fifo = std::ffi::CString::new(dir.join("start").into_os_string().into_encoded_bytes())
            .map_err(|_| "state path has a NUL byte".to_string())?;
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) } != 0 {
            return Err(format!("mkfifo: {}", std::io::Error::last_os_error()));
        }
        let (ready_r, ready_w) = pipe()?;
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let mut cmd = std::process::Command::new(exe);
        cmd.env(MONITOR_ENV, &root)
            .arg(id)
            .arg(&bundle)
            .stdin(std::process::Stdio::inherit());
        let w = ready_w.as_raw_fd();
        // SAFETY: only async-signal-safe calls (setsid, dup2) in the hook.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 || libc::dup2(w, READY_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the monitor: {e}"))?;
        drop(ready_w);
        drop(cmd);
        let mut answer = String::new();
        let _ = std::fs::File::from(ready_r).read_to_string(&mut answer);
        let pid = child.id() as i32;
        // The monitor outlives this process; its status goes to our
        // parent (a subreaper such as conmon) once we exit.
        std::mem::forget(child);
        match answer.trim_end() {
            "ok" => Ok(pid),
            "" => Err("the monitor ended without an answer".into()),
            other => Err(other.strip_prefix("error: ").unwrap_or(other).to_string()),
        }
    };
    match made() {
        Ok(pid) => {
            if let Some(p) = pid_file {
                write_pid_file(p, pid)?;
            }
            Ok(())
        }
        Err(e) => {
            let _ = hostfs::remove_tree(&dir);
            Err(e)
        }
    }
}

/// The caller's pid file: written whole, replacing what was there.
pub(crate) fn write_pid_file(path: &Path, pid: i32) -> Result<(), String> {
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| e.to_string())?
            .join(path)
    };
    hostfs::OutputFile::create(&path)
        .and_then(|f| f.commit(pid.to_string().as_bytes()))
        .map_err(|e| format!("--pid-file {}: {e}", path.display()))
}

pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 into a local array; the fds are ours.
    unsafe {
        if libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(format!("pipe: {}", std::io::Error::last_os_error()));
        }
        Ok((OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])))
    }
}

/// `start`: releases the monitor and reports whether the program started.
pub fn start(root: &Path, id: &str) -> Result<(), String> {
    let rec = Record::load(root, id)?;
    if rec.started {
        return Err(format!("container `{id}` was started already"));
    }
    if !rec.monitor_alive() {
        return Err(format!("container `{id}` is stopped"));
    }
    let fifo = state::dir(root, id).join("start");
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(&fifo)
        .map_err(|e| format!("{}: {e}", fifo.display()))?;
    let deadline = Instant::now() + START_TIMEOUT;
    let mut answer = Vec::new();
    loop {
        let mut pfd = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        unsafe { libc::poll(&mut pfd, 1, 200) };
        let mut buf = [0u8; 4096];
        match f.read(&mut buf) {
            Ok(0) if !answer.is_empty() => break,
            Ok(0) => {}
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(format!("{}: {e}", fifo.display())),
        }
        // Only while nothing came: a monitor that answered and ended
        // has closed its end, and the read above sees the end next.
        if answer.is_empty() && (Instant::now() > deadline || !rec.monitor_alive()) {
            return Err(format!("the monitor of `{id}` did not answer"));
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    match answer.trim_end() {
        "ok" => Ok(()),
        other => Err(other.strip_prefix("error: ").unwrap_or(other).to_string()),
    }
}

/// `state`: the OCI state document.
pub fn state(root: &Path, id: &str) -> Result<serde_json::Value, String> {
    let rec = Record::load(root, id)?;
    let alive = rec.monitor_alive();
    let status = match (alive, rec.started) {
        (false, _) => "stopped",
        (true, true) => "running",
        (true, false) => "created",
    };
    let mut v = serde_json::json!({
        "ociVersion": "1.2.0",
        "id": rec.id,
        "status": status,
        "bundle": rec.bundle,
        "annotations": rec.annotations,
    });
    if alive {
        v["pid"] = rec.pid.into();
    }
    Ok(v)
}

/// `kill`: the signal to the monitor, through a pidfd checked against the
/// recorded start time (never a reused pid).
pub fn kill(root: &Path, id: &str, signal: i32) -> Result<(), String> {
    let rec = Record::load(root, id)?;
    let pidfd = open_monitor(&rec).ok_or_else(|| format!("container `{id}` is not running"))?;
    // SAFETY: a raw syscall on an fd we hold.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r != 0 {
        return Err(format!(
            "cannot signal `{id}`: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// A pidfd of the monitor, if it still is the process recorded.
fn open_monitor(rec: &Record) -> Option<OwnedFd> {
    // SAFETY: a raw syscall; the fd is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, rec.pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new fd of ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // Checked after opening: the pidfd names this process however the pid
    // is reused later.
    rec.monitor_alive().then_some(fd)
}

/// `delete`: the state removed; a container that is not stopped refused
/// unless `force`, which kills it first.
pub fn delete(root: &Path, id: &str, force: bool) -> Result<(), String> {
    let rec = match Record::load(root, id) {
        Ok(r) => r,
        Err(e) if force && e.contains("does not exist") => return Ok(()),
        Err(e) => {
            // A state dir that never got its record (a create that died).
            let dir = state::dir(root, id);
            if force && state::check_id(id).is_ok() && dir.exists() {
                return hostfs::remove_tree(&dir).map_err(|e| e.to_string());
            }
            return Err(e);
        }
    };
    if let Some(pidfd) = open_monitor(&rec) {
        // The runtime spec: deleting a container that is not stopped is an
        // error (created or running alike); --force kills it first.
        if !force {
            let status = if rec.started { "running" } else { "created" };
            return Err(format!(
                "container `{id}` is {status}, not stopped: kill it first, or delete --force"
            ));
        }
        // SAFETY: raw syscalls on an fd we hold and a local pollfd.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
            let mut pfd = libc::pollfd {
                fd: pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            libc::poll(&mut pfd, 1, 10_000);
        }
    }
    hostfs::remove_tree(&state::dir(root, id)).map_err(|e| format!("cannot remove state: {e}"))
}

/// Runs the monitor if this process is one.
pub fn dispatch() -> Option<ExitCode> {
    if let Some(root) = std::env::var_os(crate::exec::EXEC_ENV) {
        return crate::exec::exec_monitor(PathBuf::from(root));
    }
    let root = PathBuf::from(std::env::var_os(MONITOR_ENV)?);
    let mut args = std::env::args_os().skip(1);
    let (Some(id), Some(bundle)) = (args.next(), args.next()) else {
        return Some(ExitCode::from(1));
    };
    let id = id.to_string_lossy().into_owned();
    // SAFETY: READY_FD was dup2'd for us by `create`.
    let ready = unsafe { std::fs::File::from_raw_fd(READY_FD) };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(&ready, "error: cannot start the runtime: {e}");
            return Some(ExitCode::from(1));
        }
    };
    let outcome = rt.block_on(monitor(root, id, PathBuf::from(bundle), ready));
    match outcome {
        Ok(outcome) => exit_as(outcome),
        Err(_) => Some(ExitCode::from(1)),
    }
}

/// The monitor's life: admit, report, wait for `start`, run, wait.
async fn monitor(
    root: PathBuf,
    id: String,
    bundle: PathBuf,
    ready: std::fs::File,
) -> Result<ExitOutcome, ()> {
    let fail = |ready: &std::fs::File, e: String| {
        let _ = writeln!(&*ready, "error: {e}");
    };
    let container = match crate::bundle::load_config(&state::config_copy(&root, &id), &bundle) {
        Ok(c) => c,
        Err(e) => {
            fail(&ready, e);
            return Err(());
        }
    };
    let runner = match admit(&container.spec, &format!("create `{id}`")).await {
        Ok(r) => r,
        Err(e) => {
            fail(&ready, e);
            return Err(());
        }
    };
    let rec = Record {
        id: id.clone(),
        bundle,
        pid: std::process::id() as i32,
        start_time: state::start_time(std::process::id() as i32).unwrap_or(0),
        started: false,
        sandbox: None,
        annotations: container.annotations.clone(),
    };
    if let Err(e) = rec.store(&root) {
        fail(&ready, e);
        return Err(());
    }
    // Watched from now: a signal before `start` ends the monitor as it
    // would the program.
    use tokio::signal::unix::{signal, SignalKind};
    let mut watches = Vec::new();
    for s in FORWARDED {
        match signal(SignalKind::from_raw(s)) {
            Ok(w) => watches.push((s, w)),
            Err(e) => {
                fail(&ready, format!("cannot watch signals: {e}"));
                return Err(());
            }
        }
    }
    let _ = writeln!(&ready, "ok");
    drop(ready);

    let fifo = state::dir(&root, &id).join("start");
    let opened = tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&fifo)
    });
    let mut answer = tokio::select! {
        f = opened => match f {
            Ok(Ok(f)) => f,
            _ => return Err(()),
        },
        sig = next_signal(&mut watches) => return Ok(ExitOutcome::Signaled(sig)),
    };
    let mut child = match runner.start(container.spec).await {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(answer, "error: {e}");
            return Err(());
        }
    };
    let sandbox = state::start_time(child.pid() as i32).map(|start_time| {
        cordon_core::policy::RunningContainer {
            pid: child.pid(),
            start_time,
        }
    });
    let started = Record {
        started: true,
        sandbox,
        ..rec
    };
    let stored = started.store(&root);
    let _ = match stored {
        Ok(()) => writeln!(answer, "ok"),
        Err(e) => {
            child.kill();
            writeln!(answer, "error: {e}")
        }
    };
    drop(answer);
    loop {
        tokio::select! {
            r = child.wait() => return r.map_err(|_| ()),
            sig = next_signal(&mut watches) => {
                let _ = child.signal_group(sig);
            }
        }
    }
}

/// The runner for a container's sandbox, once the gate admitted the
/// backend (the per-boot cached report): the Linux backend in tier
/// namespaces, with `spec`'s limits (the bundle's) as its ceilings.
pub(crate) async fn admit(
    spec: &cordon_core::ChildSpec,
    what: &str,
) -> Result<cordon_core::SandboxRunner, String> {
    let backend: Arc<dyn cordon_core::SandboxBackend> = Arc::new(
        cordon_backend_linux::LinuxBackend::new().with_tier(cordon_backend_linux::Tier::Namespaces),
    );
    // A container in a pod's network namespace has TCP in it
    // (`Network::Namespace`); one in a namespace of its own has no socket
    // (decision 0017).
    let network = if spec.container.as_ref().is_some_and(|r| r.network.is_some()) {
        cordon_core::Network::Namespace
    } else {
        cordon_core::Network::Deny
    };
    let config = RunnerConfig {
        ceilings: spec.limits,
        network,
        ..RunnerConfig::default()
    };
    let (admitted, _) = cordon_conformance::cache::admit(backend, false, &[], config).await;
    admitted.map_err(|refused| {
        format!("no conforming sandbox backend on this host; refusing to {what}: {refused}")
    })
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// The next signal any of `watches` receives.
pub(crate) async fn next_signal(watches: &mut [(i32, tokio::signal::unix::Signal)]) -> i32 {
    let futs = watches
        .iter_mut()
        .map(|(n, w)| {
            let n = *n;
            Box::pin(async move {
                w.recv().await;
                n
            })
        })
        .collect();
    futures_first(futs).await
}

/// The first of `futs` to finish.
async fn futures_first<F: std::future::Future<Output = i32> + Unpin>(mut futs: Vec<F>) -> i32 {
    std::future::poll_fn(move |cx| {
        for f in futs.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Ends this process as the program ended: its code, or its signal
/// raised on itself with the default action (a waiter sees the same
/// status as for the program).
pub(crate) fn exit_as(outcome: ExitOutcome) -> Option<ExitCode> {
    let sig = match outcome {
        ExitOutcome::Exited(code) => return Some(ExitCode::from(code.clamp(0, 255) as u8)),
        ExitOutcome::Signaled(sig) => sig,
        // A limit killed it, as the kernel's OOM killer would.
        _ => libc::SIGKILL,
    };
    // SAFETY: resetting a disposition and signalling ourselves.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
    }
    // A signal whose default is to be ignored (SIGWINCH, SIGCONT).
    Some(ExitCode::from((128 + sig).clamp(0, 255) as u8))
}
