//! [`ChildCommand`]: what a child will be started with, as the spawner
//! built it and a backend confines it.
//!
//! Core owns process creation (see `launch/`), so backends do not get a
//! `std::process::Command`: std forks the whole host as soon as a command
//! has a `pre_exec` hook, and nothing can be taken back out of one. A
//! `ChildCommand` carries the same parts — program, arguments, the whole
//! environment, working directory, stdio and pre-exec hooks — in a form
//! the launcher can start without copying the host's memory on Linux.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// A pre-exec hook: runs in the child, after stdio and the working
/// directory are set up, before `execve`. See [`ChildCommand::pre_exec`].
pub(crate) type Hook = Box<dyn FnMut(&ChildContext) -> std::io::Result<()> + Send + Sync>;

/// One of the child's standard streams.
#[derive(Debug)]
pub(crate) enum ChildStdio {
    /// A new pipe; the parent keeps the other end.
    Piped,
    /// This descriptor (the child's end of a pipe the runner made).
    Fd(OwnedFd),
}

/// The command a child is started with: built by the spawner (with the
/// baseline hygiene as its first hook), then handed to
/// [`SandboxBackend::wrap`](crate::SandboxBackend::wrap) to confine.
///
/// The environment is complete (nothing is inherited from the host) and
/// the program path is the one `execve` receives (for a pinned program,
/// `/proc/self/fd/N`).
pub struct ChildCommand {
    pub(crate) program: OsString,
    pub(crate) arg0: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) cwd: PathBuf,
    pub(crate) stdio: [ChildStdio; 3],
    pub(crate) hooks: Vec<Hook>,
    /// [`StdioMode::Terminal`](crate::StdioMode::Terminal): fd 0 is a pty
    /// slave that must become the controlling terminal of the program's
    /// session.
    pub(crate) terminal: bool,
}

impl std::fmt::Debug for ChildCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildCommand")
            .field("program", &self.program)
            .field("arg0", &self.arg0)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

impl ChildCommand {
    pub(crate) fn new(program: impl Into<OsString>, cwd: impl Into<PathBuf>) -> Self {
        let program = program.into();
        ChildCommand {
            arg0: program.clone(),
            program,
            args: Vec::new(),
            env: Vec::new(),
            cwd: cwd.into(),
            stdio: [ChildStdio::Piped, ChildStdio::Piped, ChildStdio::Piped],
            hooks: Vec::new(),
            terminal: false,
        }
    }

    /// A command for tests of backends outside core: `program` with no
    /// arguments, an empty environment, `cwd`, and piped stdio. It cannot
    /// be spawned from outside core; a backend's `wrap` can be called on it
    /// (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn for_backend_tests(program: impl Into<OsString>, cwd: impl Into<PathBuf>) -> Self {
        ChildCommand::new(program, cwd)
    }

    /// The path `execve` receives.
    pub fn get_program(&self) -> &OsStr {
        &self.program
    }

    /// `argv[0]` (the program as the caller named it).
    pub fn get_arg0(&self) -> &OsStr {
        &self.arg0
    }

    /// The arguments after `argv[0]`.
    pub fn get_args(&self) -> impl Iterator<Item = &OsStr> {
        self.args.iter().map(OsString::as_os_str)
    }

    /// The child's whole environment.
    pub fn get_envs(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    /// True when the child's fds 0, 1 and 2 are a new pty's slave
    /// ([`StdioMode::Terminal`](crate::StdioMode::Terminal)) that must be
    /// the controlling terminal of the session the program runs in. Core's
    /// launcher makes it so (`TIOCSCTTY` on fd 0) just before the exec when
    /// the process about to exec leads its session (hygiene's `setsid`); a
    /// backend whose hooks put the program in a session led by another
    /// process (an init of its own) must have that process take it, after
    /// its `setsid` and before the program runs.
    pub fn controlling_terminal(&self) -> bool {
        self.terminal
    }

    /// The child's working directory.
    pub fn get_current_dir(&self) -> &Path {
        &self.cwd
    }

    pub(crate) fn arg0(&mut self, arg0: impl Into<OsString>) -> &mut Self {
        self.arg0 = arg0.into();
        self
    }

    /// Adds arguments after `argv[0]`.
    pub fn args<I, S>(&mut self, args: I) -> &mut Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// Starts the command as the spawner would (its hooks included) and
    /// waits for it, killing it after `timeout`: for tests of a backend's
    /// `wrap` outside core, such as one showing that a failing hook stops
    /// the spawn (the error is the hook's). Stdio are pipes; stdout and
    /// stderr are collected. Builds its own runtime: call it outside one
    /// (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn run_for_backend_tests(
        self,
        timeout: std::time::Duration,
    ) -> Result<std::process::Output, crate::LaunchError> {
        use tokio::io::AsyncReadExt;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let mut launched = crate::launch::launch(self, crate::spawn::DEFAULT_SETUP_TIMEOUT)?;
            drop(launched.stdin.take());
            let mut out = launched.stdout.take();
            let mut err = launched.stderr.take();
            let read = async {
                let (mut o, mut e) = (Vec::new(), Vec::new());
                if let Some(p) = &mut out {
                    p.read_to_end(&mut o).await?;
                }
                if let Some(p) = &mut err {
                    p.read_to_end(&mut e).await?;
                }
                Ok::<_, std::io::Error>((o, e))
            };
            let waited = tokio::time::timeout(timeout, async {
                let (o, e) = read.await?;
                crate::child::leader_exited(&launched.leader).await?;
                Ok::<_, std::io::Error>((o, e))
            })
            .await;
            if waited.is_err() {
                // SAFETY: a signal to our own, unreaped child.
                unsafe { libc::kill(launched.pid as libc::pid_t, libc::SIGKILL) };
            }
            let raw = crate::child::reap_leader(&mut launched.leader).await?;
            let (stdout, stderr) = match waited {
                Ok(r) => r?,
                Err(_) => (Vec::new(), b"timed out".to_vec()),
            };
            Ok(std::process::Output {
                status: std::os::unix::process::ExitStatusExt::from_raw(raw),
                stdout,
                stderr,
            })
        })
    }

    /// Sets (or replaces) one environment variable of the child.
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        let key = key.as_ref().to_os_string();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.as_ref().to_os_string()));
        self
    }

    /// Removes one environment variable of the child, if it is set.
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Self {
        let key = key.as_ref();
        self.env.retain(|(k, _)| k != key);
        self
    }

    /// Adds a hook that runs in the child before `execve`, after the ones
    /// added before it (the spawner's hygiene comes first). An error from a
    /// hook fails the spawn: the program is never executed, and the error
    /// is what [`Spawner::spawn`](crate::Spawner::spawn) returns.
    ///
    /// # Safety
    /// The hook runs in a child that, on Linux, shares the host's memory
    /// and the spawning thread's thread-local storage while that thread
    /// waits (`clone(CLONE_VM)`, as `posix_spawn` does; it is killed if its
    /// set-up outlasts [`RunnerConfig::setup_timeout`](crate::RunnerConfig::setup_timeout)),
    /// and elsewhere in a fork of a
    /// possibly multi-threaded host. It must be async-signal-safe: raw
    /// syscalls on data prepared before the spawn, no allocation, no locks,
    /// and no libc call that acts on the whole process — credentials above
    /// all: glibc's `setuid`/`setgroups` family signals every thread of the
    /// *host* on Linux, so use `libc::syscall(SYS_setresuid, ..)`.
    /// Whatever the hook leaves in memory (other than its own stack) is the
    /// host's.
    pub unsafe fn pre_exec<F>(&mut self, hook: F) -> &mut Self
    where
        F: FnMut(&ChildContext) -> std::io::Result<()> + Send + Sync + 'static,
    {
        self.hooks.push(Box::new(hook));
        self
    }
}

/// What a pre-exec hook knows about the launch it runs in.
#[derive(Debug)]
pub struct ChildContext {
    /// Where the child reports to the spawning thread (close-on-exec);
    /// `-1` where the launcher has none (a plain fork elsewhere than Linux).
    pub(crate) report_fd: libc::c_int,
}

/// A record on the report pipe: `kind`, then a value (native endian).
const fn record(kind: u32, value: i32) -> [u8; 8] {
    let k = kind.to_ne_bytes();
    let v = value.to_ne_bytes();
    [k[0], k[1], k[2], k[3], v[0], v[1], v[2], v[3]]
}

/// A record's kinds.
pub(crate) const REPORT_ERROR: u32 = 1;
pub(crate) const REPORT_HANDED_OVER: u32 = 2;
pub(crate) const REPORT_STARTED: u32 = 3;
pub(crate) const REPORT_STEP: u32 = 4;

impl ChildContext {
    /// Whether [`hand_over`](Self::hand_over) is available (Linux).
    pub fn can_hand_over(&self) -> bool {
        self.report_fd >= 0
    }

    /// Ends the child the host started and makes `leader` (a process whose
    /// parent is the host thread that spawned, made with `CLONE_PARENT`)
    /// the child the runner waits for, kills and reaps: its host pid, a
    /// session and process-group leader. The runner reports the leader's
    /// exit as the child's, unless the backend's resources give another
    /// status ([`SandboxResources::exit_status`]).
    ///
    /// Call it only once the program has been executed (or has failed to
    /// be, with its error reported through [`report_error`]): the launch
    /// completes when this process exits. Async-signal-safe; never returns.
    ///
    /// [`SandboxResources::exit_status`]: crate::SandboxResources::exit_status
    /// [`report_error`]: Self::report_error
    pub fn hand_over(&self, leader: libc::pid_t) -> ! {
        self.report(REPORT_HANDED_OVER, leader);
        // SAFETY: _exit has no preconditions.
        unsafe { libc::_exit(0) }
    }

    /// Reports that the launch failed with `errno`, from any process of the
    /// launch that holds the report pipe (a helper the hook made, say).
    /// Async-signal-safe.
    pub fn report_error(&self, errno: libc::c_int) {
        self.report(REPORT_ERROR, errno);
    }

    /// Names the step of the backend's confinement that is failing, before
    /// the hook returns its error: the spawn error then says "at `<step>`",
    /// with the name [`SandboxBackend::step_name`] gives `step`. The first
    /// step reported counts. Async-signal-safe.
    ///
    /// [`SandboxBackend::step_name`]: crate::SandboxBackend::step_name
    pub fn report_step(&self, step: u32) {
        self.report_record(Self::step_record(step));
    }

    /// The descriptor the launch reports on (close-on-exec), for a helper
    /// process of the launch that can only issue raw syscalls: it writes
    /// [`error_record`](Self::error_record) there in one `write`. `-1`
    /// where the launcher has none.
    pub fn report_fd(&self) -> libc::c_int {
        self.report_fd
    }

    /// The bytes that report `errno` as the launch's failure (see
    /// [`report_fd`](Self::report_fd)).
    pub const fn error_record(errno: libc::c_int) -> [u8; 8] {
        record(REPORT_ERROR, errno)
    }

    /// The bytes that name `step` as the failing one (see
    /// [`report_step`](Self::report_step) and
    /// [`report_fd`](Self::report_fd)), written before the error's.
    pub const fn step_record(step: u32) -> [u8; 8] {
        record(REPORT_STEP, step as i32)
    }

    /// The bytes that announce `pid` (its pid in the host's PID namespace)
    /// as a process of the launch: a process a hook makes with
    /// `CLONE_PARENT` (the host's child), which may share the host's
    /// memory, announces itself first thing. Should the launch not finish
    /// within the set-up timeout, the spawning thread kills the launcher
    /// and every announced process, and waits for all of them to be gone
    /// before it releases the launch's memory (see `launch/`).
    pub const fn started_record(pid: libc::pid_t) -> [u8; 8] {
        record(REPORT_STARTED, pid)
    }

    fn report(&self, kind: u32, value: i32) {
        self.report_record(record(kind, value));
    }

    fn report_record(&self, rec: [u8; 8]) {
        if self.report_fd < 0 {
            return;
        }
        // SAFETY: a write of a local buffer; 8 bytes are written atomically
        // to a pipe (less than PIPE_BUF).
        unsafe {
            libc::write(self.report_fd, rec.as_ptr().cast(), rec.len());
        }
    }
}
