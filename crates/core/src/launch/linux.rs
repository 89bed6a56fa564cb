//! The Linux launcher: `clone(CLONE_VM)` onto a pooled stack, the child's
//! set-up and exec (`child_main`), and reaping (see the module docs of
//! `launch`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;

use std::ffi::{CString, OsString};

use super::wait::{setup_timed_out, wait_launch, Waited};
use super::LaunchError;
use super::*;
use crate::command::Hook;
use crate::sys::raw;

fn cstring(what: &str, s: impl Into<Vec<u8>>) -> std::io::Result<CString> {
    CString::new(s).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("the child's {what} contains a NUL byte"),
        )
    })
}

/// Everything the child reads, prepared by the parent, on the heap for
/// the whole launch (leaked, never freed, if the launch's processes
/// cannot be made to end).
struct ChildState {
    path: CString,
    /// What `argv` and `envp` point into.
    _argv_c: Vec<CString>,
    _envp_c: Vec<CString>,
    cwd: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    stdio: [libc::c_int; 3],
    hooks: Vec<Hook>,
    ctx: ChildContext,
    /// [`ChildCommand::controlling_terminal`].
    terminal: bool,
}

/// The child's stack size. Hooks run here (the Linux backend's whole
/// confinement, mounts included); a guard page sits below it.
const STACK_BYTES: usize = 512 * 1024;

/// A mapped stack, reused across launches (its touched pages stay
/// mapped, so a launch takes no page faults on it).
struct Stack(*mut libc::c_void);

// SAFETY: a plain mapping, used by one launch at a time.
unsafe impl Send for Stack {}

static STACKS: Mutex<Vec<Stack>> = Mutex::new(Vec::new());

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

impl Stack {
    fn take() -> std::io::Result<Stack> {
        if let Some(s) = STACKS.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(s);
        }
        let guard = page();
        // SAFETY: a fresh private anonymous mapping; the guard page at
        // its bottom is made inaccessible so an overflow faults.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                STACK_BYTES + guard,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            if libc::mprotect(base, guard, libc::PROT_NONE) != 0 {
                let e = std::io::Error::last_os_error();
                libc::munmap(base, STACK_BYTES + guard);
                return Err(e);
            }
            Ok(Stack(base))
        }
    }

    fn top(&self) -> *mut libc::c_void {
        // 16-byte aligned: the mapping is page-aligned.
        (self.0 as usize + page() + STACK_BYTES) as *mut libc::c_void
    }

    fn give_back(self) {
        STACKS.lock().unwrap_or_else(|p| p.into_inner()).push(self);
    }
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two fresh fds we own.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// `fd`, moved to a number above 2 if it is one of 0–2.
fn above_stdio(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC on an fd we own makes a new one we own.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

pub(crate) fn launch(
    cmd: ChildCommand,
    setup_timeout: std::time::Duration,
) -> Result<Launched, LaunchError> {
    let ChildCommand {
        program,
        arg0,
        args,
        env,
        cwd,
        stdio,
        hooks,
        terminal,
    } = cmd;
    let mut ends = StdioEnds::make(stdio)?;
    let (report_r, report_w) = pipe()?;
    // On a host started without fds 0–2 the report pipe could be one of
    // them, which the child's stdio then replaces: its errors would be
    // lost. Keep it above.
    let report_w = above_stdio(report_w)?;
    let mut state = Box::new(ChildState::new(
        &program,
        std::iter::once(&arg0).chain(&args),
        &env,
        &cwd,
        ends.child_fds,
        hooks,
        report_w.as_raw_fd(),
    )?);
    state.terminal = terminal;
    let stack = Stack::take()?;
    let deadline = std::time::Instant::now() + setup_timeout;
    // SAFETY: `state` and `stack` outlive the child: they are released
    // only after the report's EOF, or leaked.
    let (pid, mask) = match unsafe { clone_child(&mut state, &stack) } {
        Ok(started) => started,
        Err(e) => {
            stack.give_back();
            return Err(e.into());
        }
    };
    // Our copy of the report's write end goes now (or EOF never
    // comes); a raw close, as everything until the launch has ended.
    // SAFETY: closing our own fd, handed out of its OwnedFd.
    unsafe {
        raw(
            libc::SYS_close,
            std::os::fd::IntoRawFd::into_raw_fd(report_w) as usize,
            0,
            0,
            0,
        )
    };
    // EOF comes only once every process that could still run on the
    // stack has executed or exited (a backend's program may resume on
    // the launcher's frames, and the launcher may have been killed
    // before it): only then can another launch have the stack.
    let waited = wait_launch(report_r.as_raw_fd(), pid, deadline);
    // SAFETY: restoring this thread's signal mask.
    unsafe { set_signal_mask(&mask, None) };
    // The child's ends: it has its copies (or has ended).
    ends.child_ends.clear();
    let report = match waited {
        Waited::Ended(report) => report,
        Waited::Killed(report) => {
            stack.give_back();
            drop(state);
            for p in std::iter::once(pid).chain(report.announced()) {
                reap_now(p);
            }
            return Err(setup_timed_out(setup_timeout).into());
        }
        Waited::Stuck => {
            // A process of the launch may still run on this memory:
            // never reuse or free it (a `Stack` is not given back, so
            // its mapping stays, unused).
            let _ = stack;
            Box::leak(state);
            return Err(setup_timed_out(setup_timeout).into());
        }
    };
    stack.give_back();
    drop(state);
    let leader = leader_of(&report, pid)?;
    let pidfd = match pidfd_open(leader) {
        Ok(fd) => fd,
        Err(e) => {
            kill_and_reap(leader);
            return Err(std::io::Error::new(
                e.kind(),
                format!(
                    "cannot watch the child (pidfds and waitid(P_PIDFD) need Linux >= 5.4): {e}"
                ),
            )
            .into());
        }
    };
    let (stdin, stdout, stderr) = match ends.into_tokio() {
        Ok(s) => s,
        Err(e) => {
            // The program runs: it must not outlive a failed spawn.
            kill_and_reap(leader);
            return Err(e.into());
        }
    };
    Ok(Launched {
        pid: leader as u32,
        leader: Leader::Pidfd(pidfd),
        stdin,
        stdout,
        stderr,
    })
}

impl ChildState {
    /// Every byte the child needs, made here: it must not allocate.
    fn new<'a>(
        program: &std::ffi::OsStr,
        argv: impl Iterator<Item = &'a OsString>,
        env: &[(OsString, OsString)],
        cwd: &std::path::Path,
        stdio: [libc::c_int; 3],
        hooks: Vec<Hook>,
        report_fd: libc::c_int,
    ) -> std::io::Result<ChildState> {
        let path = cstring("program path", program.as_bytes())?;
        let argv_c = argv
            .map(|a| cstring("argument", a.as_bytes()))
            .collect::<std::io::Result<Vec<_>>>()?;
        let envp_c = env
            .iter()
            .map(|(k, v)| {
                let mut kv: OsString = k.clone();
                kv.push("=");
                kv.push(v);
                cstring("environment", kv.as_bytes())
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let cwd = cstring("working directory", cwd.as_os_str().as_bytes())?;
        let pointers = |strings: &[CString]| -> Vec<*const libc::c_char> {
            strings
                .iter()
                .map(|c| c.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        Ok(ChildState {
            path,
            argv: pointers(&argv_c),
            envp: pointers(&envp_c),
            _argv_c: argv_c,
            _envp_c: envp_c,
            cwd,
            stdio,
            hooks,
            ctx: ChildContext { report_fd },
            terminal: false,
        })
    }
}

/// The child's stdio: its ends (closed here once it has started) and
/// ours, for the pipes.
struct StdioEnds {
    child_ends: Vec<OwnedFd>,
    child_fds: [libc::c_int; 3],
    ours: [Option<OwnedFd>; 3],
}

impl StdioEnds {
    fn make(stdio: [ChildStdio; 3]) -> std::io::Result<StdioEnds> {
        let mut ends = StdioEnds {
            child_ends: Vec::with_capacity(3),
            child_fds: [-1; 3],
            ours: [None, None, None],
        };
        for (i, s) in stdio.into_iter().enumerate() {
            let end = match s {
                ChildStdio::Fd(fd) => fd,
                ChildStdio::Piped => {
                    let (r, w) = pipe()?;
                    let (theirs, mine) = if i == 0 { (r, w) } else { (w, r) };
                    ends.ours[i] = Some(mine);
                    theirs
                }
            };
            ends.child_fds[i] = end.as_raw_fd();
            ends.child_ends.push(end);
        }
        Ok(ends)
    }

    /// Our ends of the pipes, for tokio.
    #[allow(clippy::type_complexity)]
    fn into_tokio(
        self,
    ) -> std::io::Result<(Option<ChildStdin>, Option<ChildStdout>, Option<ChildStderr>)> {
        let [i, o, e] = self.ours;
        Ok((
            i.map(|fd| ChildStdin::from_std(std::process::ChildStdin::from(fd)))
                .transpose()?,
            o.map(|fd| ChildStdout::from_std(std::process::ChildStdout::from(fd)))
                .transpose()?,
            e.map(|fd| ChildStderr::from_std(std::process::ChildStderr::from(fd)))
                .transpose()?,
        ))
    }
}

/// Sets this thread's signal mask to `mask` (the old one into `old`), by
/// raw syscall: glibc's wrapper would keep its internal signals.
///
/// # Safety
/// Changes what this thread may be interrupted by.
unsafe fn set_signal_mask(mask: &u64, old: Option<&mut u64>) {
    let old = old.map_or(0, |o| o as *mut u64 as usize);
    // SAFETY: as promised by the caller; the masks are locals of ours.
    unsafe {
        raw(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as usize,
            mask as *const u64 as usize,
            old,
            8,
        )
    };
}

/// Clones the child onto `stack` to run `child_main` with `state`, with
/// every signal blocked; returns its pid and the mask to restore once the
/// launch has ended.
///
/// Every signal is blocked around the clone, so none is handled in the
/// child (by a host handler, on the host's memory) before it has reset
/// the handlers; the raw syscall blocks glibc's internal signals too.
/// They stay blocked on this thread until the launch has ended
/// (`wait_launch`), as with vfork: the child shares this thread's
/// thread-local storage, which a handler here could change under it.
///
/// # Safety
/// `state` and `stack` must outlive the child's use of them.
unsafe fn clone_child(state: &mut ChildState, stack: &Stack) -> std::io::Result<(i32, u64)> {
    let all: u64 = !0;
    let mut old: u64 = 0;
    // SAFETY: as promised by the caller.
    unsafe {
        set_signal_mask(&all, Some(&mut old));
        let pid = libc::clone(
            child_main,
            stack.top(),
            libc::CLONE_VM | libc::SIGCHLD,
            state as *mut ChildState as *mut libc::c_void,
        );
        if pid < 0 {
            let err = std::io::Error::last_os_error();
            set_signal_mask(&old, None);
            return Err(err);
        }
        Ok((pid, old))
    }
}

/// The process the runner waits for, once the launch has ended: the one
/// cloned, or the one it handed over to. On a reported error nothing ran:
/// what was started is reaped (an init handed over to ends as soon as
/// its program has) and the error, with its step, is returned.
fn leader_of(report: &super::wait::Report, pid: libc::pid_t) -> Result<libc::pid_t, LaunchError> {
    let leader = report.leader.unwrap_or(pid);
    if let Some(errno) = report.error {
        reap_now(pid);
        for p in report.announced().filter(|&p| p != pid) {
            kill_and_reap(p);
        }
        return Err(LaunchError {
            source: std::io::Error::from_raw_os_error(errno),
            step: report.step,
        });
    }
    if leader != pid {
        // The process we cloned handed over and has exited.
        reap_now(pid);
    }
    Ok(leader)
}

fn pidfd_open(pid: libc::pid_t) -> std::io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: pidfd_open of our own child, not reaped yet.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own (pidfds are close-on-exec).
    let owned = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    // SAFETY: the OwnedFd keeps the descriptor open and unchanged for as
    // long as the AsyncFd owns it.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE)
            .map_err(|e| e.into_parts().1)
    }
}

/// Blocks until `pid`, our child, has ended, and reaps it.
fn reap_now(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    while unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } < 0 {
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

fn kill_and_reap(pid: libc::pid_t) {
    // SAFETY: our own, unreaped child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    reap_now(pid);
}

/// Reaps `pid` (our child, already sent SIGKILL) on a background
/// thread, so a child dropped without `wait` leaves no zombie.
pub(crate) fn reap_later(pid: libc::pid_t) {
    use std::sync::mpsc::Sender;
    use std::sync::OnceLock;
    static REAPER: OnceLock<Option<Mutex<Sender<libc::pid_t>>>> = OnceLock::new();
    let reaper = REAPER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<libc::pid_t>();
        std::thread::Builder::new()
            .name("cordon-reaper".into())
            .spawn(move || {
                while let Ok(pid) = rx.recv() {
                    reap_now(pid);
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    if let Some(tx) = reaper {
        if tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(pid)
            .is_ok()
        {
            return;
        }
    }
    // No thread: reap here (the child was killed, so this is short).
    reap_now(pid);
}

/// The child, on its own stack in the host's memory, the spawning
/// thread waiting. Only async-signal-safe calls.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `ChildState`, alive and unused by
    // anyone else until this process has executed or exited.
    let st = unsafe { &mut *(arg as *mut ChildState) };
    let fail = |ctx: &ChildContext, errno: libc::c_int| -> ! {
        ctx.report_error(errno);
        // SAFETY: _exit has no preconditions.
        unsafe { libc::_exit(127) }
    };
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: raw syscalls on integers and on memory `st` points to.
    unsafe {
        // The host's handlers live in the host's memory: none may run
        // here. Then unblock everything (blocked by the parent).
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..=libc::SIGRTMAX() {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        let none: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &none as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        );
        // Stdio on 0, 1, 2. A source that is itself one of 0, 1, 2 (a
        // host without them) is first moved out of the way.
        for i in 0..3 {
            let fd = st.stdio[i];
            if fd < 3 && fd != i as libc::c_int {
                let moved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
                if moved < 0 {
                    fail(&st.ctx, errno());
                }
                st.stdio[i] = moved;
            }
        }
        for (i, &fd) in st.stdio.iter().enumerate() {
            let target = i as libc::c_int;
            let r = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if r < 0 {
                fail(&st.ctx, errno());
            }
        }
        if libc::chdir(st.cwd.as_ptr()) != 0 {
            fail(&st.ctx, errno());
        }
    }
    let ctx = &st.ctx;
    for hook in st.hooks.iter_mut() {
        if let Err(e) = hook(ctx) {
            fail(ctx, e.raw_os_error().unwrap_or(libc::EINVAL));
        }
    }
    if st.terminal {
        // SAFETY: in the child, before its exec.
        if let Err(e) = unsafe { super::take_terminal_if_leader() } {
            fail(ctx, e.raw_os_error().unwrap_or(libc::EIO));
        }
    }
    // A program just written (a staged copy of the probe child or a
    // Starlark worker, a tool the caller wrote) is still open for writing
    // in any child forked while it was written, until that child's own
    // exec: `ETXTBSY` for that moment. Retried for up to a second; only
    // syscalls here (execve, nanosleep).
    for _ in 0..EXEC_BUSY_RETRIES {
        // SAFETY: NUL-terminated strings and NULL-terminated arrays made
        // by the parent.
        unsafe { libc::execve(st.path.as_ptr(), st.argv.as_ptr(), st.envp.as_ptr()) };
        if errno() != libc::ETXTBSY {
            break;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        // SAFETY: a valid timespec; no remainder wanted.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
    fail(ctx, errno())
}

/// How many times the child tries `execve` while the program is busy
/// (`ETXTBSY`), 10 ms apart.
const EXEC_BUSY_RETRIES: u32 = 100;
