//! Starting a [`ChildCommand`]: the only place a child process is created.
//!
//! **Linux** (the launcher that the probes test): `clone(CLONE_VM)` onto a
//! stack of its own, the way `posix_spawn` works. The child runs in the
//! host's memory while the spawning thread waits for its report, until it
//! executes the program (or exits). Nothing of the host is copied: a
//! `fork` copies the host's page tables (its cost grows with the host's
//! size) and makes every page the host writes while the copy lives a
//! copy-on-write fault; std forks whenever a command has a `pre_exec` hook.
//!
//! The spawning thread waits as `vfork` would — every signal blocked, raw
//! syscalls only, since the child shares its thread-local storage
//! (`errno`) — but for a bounded time (the set-up timeout): a launch that
//! does not end in an exec or a failure by then (a process of it stopped,
//! or stuck in the kernel) is killed, every process it announced with it
//! (the [`ChildContext::announce`] records, such as a backend's init), and
//! the spawn fails. Its memory is released only once every one of them is
//! gone; should one never go, that memory is leaked rather than reused.
//!
//! In the child: every signal handler is reset (they are the host's, in
//! the host's memory) and the mask cleared, stdio is put on 0, 1, 2, the
//! working directory set, the hooks run in order (hygiene first, then the
//! backend's), and the program is executed. The child reports to the
//! spawning thread through a close-on-exec pipe: EOF with nothing on it
//! means the program runs; an error record means nothing ran. A hook may
//! also hand the launch over to another process
//! ([`ChildContext::hand_over`]), which then is the child.
//!
//! **Elsewhere**: the command becomes a `std::process::Command` with the
//! hooks as `pre_exec` closures (std forks) and is started by tokio.

use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::command::{ChildCommand, ChildContext, ChildStdio};

/// A started child: the process the runner waits for, and the parent's
/// ends of its piped stdio.
pub(crate) struct Launched {
    pub pid: u32,
    pub leader: Leader,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

/// Why a launch failed: the error, and the backend's step that reported it
/// ([`ChildContext::report_step`](crate::ChildContext::report_step)), if
/// one did. [`SandboxBackend::step_name`](crate::SandboxBackend::step_name)
/// names the step.
#[derive(Debug, thiserror::Error)]
#[error("{source}{}", step.map(|s| format!(" (at step {s})")).unwrap_or_default())]
pub struct LaunchError {
    /// The error the launch or the step reported (its errno kept).
    pub source: std::io::Error,
    /// The id of the last step the child reported before it failed.
    pub step: Option<u32>,
}

impl From<std::io::Error> for LaunchError {
    fn from(source: std::io::Error) -> Self {
        LaunchError { source, step: None }
    }
}

/// How the runner waits for the child.
pub(crate) enum Leader {
    /// Linux: a pidfd (readable once the process has exited); the process
    /// is reaped with `waitid(P_PIDFD)`.
    #[cfg(target_os = "linux")]
    Pidfd(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>),
    /// Elsewhere: tokio's child, which reaps it (also after a drop).
    #[cfg(not(target_os = "linux"))]
    Tokio(tokio::process::Child),
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn launch(
    cmd: ChildCommand,
    _setup_timeout: std::time::Duration,
) -> Result<Launched, LaunchError> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    let ChildCommand {
        program,
        arg0,
        args,
        env,
        cwd,
        stdio,
        mut hooks,
        terminal,
    } = cmd;
    let mut std_cmd = std::process::Command::new(program);
    std_cmd
        .arg0(arg0)
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(cwd);
    let [i, o, e] = stdio.map(|s| match s {
        ChildStdio::Piped => Stdio::piped(),
        ChildStdio::Fd(fd) => Stdio::from(fd),
    });
    std_cmd.stdin(i).stdout(o).stderr(e);
    let ctx = ChildContext { report_fd: -1 };
    // SAFETY: the hooks' own contract (see `ChildCommand::pre_exec`).
    unsafe {
        std_cmd.pre_exec(move || {
            for hook in hooks.iter_mut() {
                hook(&ctx)?;
            }
            if terminal {
                take_terminal_if_leader()?;
            }
            Ok(())
        });
    }
    let mut child = tokio::process::Command::from(std_cmd)
        .kill_on_drop(true)
        .spawn()?;
    Ok(Launched {
        pid: child.id().unwrap_or(0),
        stdin: child.stdin.take(),
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        leader: Leader::Tokio(child),
    })
}

/// [`ChildCommand::controlling_terminal`]: in the process about to exec,
/// makes fd 0 (the pty's slave) the session's controlling terminal when
/// this process leads its session; a backend's own session leader has
/// taken it otherwise. Async-signal-safe (raw syscalls only).
///
/// # Safety
/// Only in a child between its launch and its exec.
pub(crate) unsafe fn take_terminal_if_leader() -> std::io::Result<()> {
    // SAFETY: getsid, getpid and ioctl on integers.
    unsafe {
        if libc::getsid(0) != libc::getpid() {
            return Ok(());
        }
        if libc::ioctl(0, libc::TIOCSCTTY as _, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
pub(crate) use linux::{launch, reap_later};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod wait;
