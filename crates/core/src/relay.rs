//! Copies bytes between the host's own fds 0, 1, 2 and a child's pipes, so
//! the child never holds a host descriptor ([`StdioMode::Relay`]).
//!
//! Why: a descriptor is a handle on an *open file description*, and every
//! holder shares its flags, its offset and the object behind it. A child
//! given the caller's fd 1 could clear `O_APPEND` on the caller's log,
//! truncate it and write over it; given the caller's terminal it could turn
//! echo off for the shell that outlives it, or `fchmod` the tty. Here the
//! child only ever holds pipe ends the runner created; the runner copies.
//!
//! How:
//! - **One plain thread per stream, blocking I/O on the host side.** Async
//!   I/O on the host's fds would need `O_NONBLOCK`, and that flag lives in
//!   the file description the parent shell shares (a shell whose terminal
//!   turned non-blocking gets `EAGAIN` and exits). The relay never changes
//!   a host fd's flags, modes or offset: it only `read`s and `write`s it.
//!   Our own pipe ends are ours alone, so they are non-blocking: nothing the
//!   child does can make a relay block on them.
//! - **Every wait is a `poll`** that also watches two stop pipes (closing
//!   a write end wakes every poller at once): *drain* (the sandbox's last
//!   process is gone: copy what it left, then stop) and *abort* (stop now).
//!   Host writes go out in `PIPE_BUF` pieces after `POLLOUT`, which a pipe
//!   accepts without blocking, so even a relay feeding a stuck reader
//!   notices an abort.
//! - **stdin** is read only after the child has started, only while the
//!   child's side of the pipe has a reader, and never after drain/abort: a
//!   relay waiting on a quiet terminal ends with the child and eats nothing
//!   typed afterwards. Host EOF closes the pipe, so the child sees EOF. In
//!   a background job on its terminal, `SIGTTIN` (blocked in the relay
//!   threads) would otherwise stop the whole host process; the read fails
//!   with `EIO` instead and the relay looks again later, leaving the input
//!   to the foreground job.
//! - **stdout/stderr** are copied until EOF (every writer in the sandbox is
//!   gone). On drain, the bytes still buffered in the pipe are owed to the
//!   host however slowly it reads; after that, a descendant that escaped the
//!   sandbox's process group and still holds the pipe gets [`GRACE`] more,
//!   then the relay stops. A host write failing (`EPIPE`: `cordon run --
//!   yes | head -1`) stops the relay and closes the only read end, so the
//!   child gets `EPIPE`/`SIGPIPE` as in a plain pipeline. `SIGPIPE` is
//!   blocked in the relay threads: it never reaches an embedder that
//!   restored its default action.
//! - **Order:** when the host's fds 1 and 2 are the same file (a terminal,
//!   `2>&1`), the child's fds 1 and 2 share one pipe, so the two streams
//!   stay interleaved exactly as written. Only separate destinations get
//!   separate pipes (and only then is stderr kept in the stderr ring).
//!
//! Everything is created in the parent before the fork; the child only gets
//! the three pipe ends, which std `dup2`s onto 0, 1 and 2.
//!
//! [`StdioMode::Relay`]: crate::StdioMode::Relay

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::child::{SharedRing, StderrRing};

mod terminal;

pub use terminal::WINDOW_SIZE_POLL;

/// How long an output relay keeps copying, after the sandbox's last process
/// is gone, for a descendant that escaped and still holds the pipe; also how
/// long [`Relay::finish`] waits for a relay that was aborted or that waits
/// on the host's stdin.
pub(crate) const GRACE: Duration = Duration::from_millis(200);

/// How often a stdin relay in a background job looks again for its turn.
const BACKGROUND_RETRY: Duration = Duration::from_millis(100);

/// Host writes are at most this long: a pipe that polls writable takes it
/// without blocking (Linux reports `POLLOUT` with a free page).
const HOST_WRITE_CHUNK: usize = libc::PIPE_BUF;

/// The relay loops are shallow: a small stack keeps many children cheap.
const STACK_BYTES: usize = 256 * 1024;

const HOST_STDIN: RawFd = 0;
const HOST_STDOUT: RawFd = 1;
const HOST_STDERR: RawFd = 2;

/// The pipe ends the child gets as its fds 0, 1 and 2.
pub(crate) struct ChildEnds {
    pub(crate) stdin: OwnedFd,
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
}

/// The running relay threads of one child and the signals that end them.
///
/// Dropping it aborts every relay (its stop pipes close) without waiting.
pub(crate) struct Relay {
    /// Sent once the child runs: only then may stdin be read.
    go: Option<mpsc::Sender<()>>,
    /// Closed when the sandbox's last process is gone.
    drain: Option<OwnedFd>,
    /// Closed to stop every relay now.
    abort: Option<OwnedFd>,
    workers: Vec<Worker>,
    /// [`StdioMode::Terminal`](crate::StdioMode::Terminal): the host
    /// terminal in raw mode, restored once the output is relayed (or on
    /// drop).
    raw: Option<terminal::RawMode>,
}

struct Worker {
    name: &'static str,
    /// The stdin relay: its host-side read may block if another process
    /// takes the input that `poll` announced, so waiting for it is bounded.
    reads_host: bool,
    /// Completes (the sender is dropped) when the thread's work has ended.
    done: oneshot::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

/// The read ends of the two stop pipes, shared by the relay threads (which
/// may outlive the [`Relay`] when it is dropped, hence `Arc`).
#[derive(Clone)]
struct Stops {
    drain: Arc<OwnedFd>,
    abort: Arc<OwnedFd>,
}

impl Relay {
    /// Creates the pipes and starts the relay threads. The stdin relay waits
    /// for [`go`](Self::go). On error everything created is closed again.
    pub(crate) fn start(ring: SharedRing) -> io::Result<(ChildEnds, Relay)> {
        let (child_stdin, stdin_w) = pipe()?;
        let (stdout_r, child_stdout) = pipe()?;
        let separate_stderr = if same_file(HOST_STDOUT, HOST_STDERR) {
            None
        } else {
            Some(pipe()?)
        };
        for ours in [&stdin_w, &stdout_r] {
            set_nonblocking(ours)?;
        }
        let (drain_r, drain_w) = pipe()?;
        let (abort_r, abort_w) = pipe()?;
        let stops = Stops {
            drain: Arc::new(drain_r),
            abort: Arc::new(abort_r),
        };
        let (go_tx, go_rx) = mpsc::channel();
        let mut relay = Relay {
            go: Some(go_tx),
            drain: Some(drain_w),
            abort: Some(abort_w),
            workers: Vec::with_capacity(3),
            raw: None,
        };
        // From here, an early return drops `relay`: its stop pipes close and
        // the threads already started end on their own.
        let s = stops.clone();
        relay.spawn("cordon-stdin", true, move || {
            copy_in(stdin_w, go_rx, s, false)
        })?;
        let s = stops.clone();
        relay.spawn("cordon-stdout", false, move || {
            copy_out(stdout_r, HOST_STDOUT, None, s)
        })?;
        let child_stderr = match separate_stderr {
            Some((stderr_r, child_stderr)) => {
                set_nonblocking(&stderr_r)?;
                relay.spawn("cordon-stderr", false, move || {
                    copy_out(stderr_r, HOST_STDERR, Some(ring), stops)
                })?;
                child_stderr
            }
            None => child_stdout.try_clone()?,
        };
        Ok((
            ChildEnds {
                stdin: child_stdin,
                stdout: child_stdout,
                stderr: child_stderr,
            },
            relay,
        ))
    }

    /// [`StdioMode::Terminal`](crate::StdioMode::Terminal): opens a new pty
    /// and starts the two relays between its master and the host's fds 0
    /// and 1; the child gets the slave three times. Puts the host's terminal
    /// in raw mode (when fd 0 is one) only after everything else was made,
    /// so an error leaves its modes untouched.
    pub(crate) fn start_terminal(
        ring: SharedRing,
        pair: Option<(OwnedFd, OwnedFd)>,
    ) -> io::Result<(ChildEnds, Relay)> {
        let pty = terminal::Pty::open(pair)?;
        let to_master = pty.master.try_clone()?;
        let from_master = pty.master;
        set_nonblocking(&from_master)?;
        let (drain_r, drain_w) = pipe()?;
        let (abort_r, abort_w) = pipe()?;
        let stops = Stops {
            drain: Arc::new(drain_r),
            abort: Arc::new(abort_r),
        };
        let (go_tx, go_rx) = mpsc::channel();
        let mut relay = Relay {
            go: Some(go_tx),
            drain: Some(drain_w),
            abort: Some(abort_w),
            workers: Vec::with_capacity(2),
            raw: None,
        };
        let s = stops.clone();
        relay.spawn("cordon-tty-in", true, move || {
            copy_in(to_master, go_rx, s, true)
        })?;
        relay.spawn("cordon-tty-out", false, move || {
            copy_out(from_master, HOST_STDOUT, Some(ring), stops)
        })?;
        let ends = ChildEnds {
            stdin: pty.slave.try_clone()?,
            stdout: pty.slave.try_clone()?,
            stderr: pty.slave,
        };
        relay.raw = terminal::RawMode::enter()?;
        Ok((ends, relay))
    }

    fn spawn(
        &mut self,
        name: &'static str,
        reads_host: bool,
        work: impl FnOnce() + Send + 'static,
    ) -> io::Result<()> {
        let (done_tx, done) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .stack_size(STACK_BYTES)
            .spawn(move || {
                let _done = done_tx;
                block_async_signals();
                work();
            })?;
        self.workers.push(Worker {
            name,
            reads_host,
            done,
            thread: Some(thread),
        });
        Ok(())
    }

    /// The child runs: the stdin relay may start reading the host's stdin.
    pub(crate) fn go(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }

    /// Stops every relay now; bytes still in the pipes are dropped.
    pub(crate) fn abort(&mut self) {
        self.abort = None;
    }

    /// Tells the relays the sandbox's last process is gone and waits until
    /// they have ended: the output relays after copying everything it left
    /// (however slowly the host reads, unless aborted) plus at most
    /// [`GRACE`] for an escaped descendant; the stdin relay at once. A relay
    /// that does not end within [`GRACE`] although it should (aborted while
    /// blocked in a host write, or the stdin relay blocked in a host read) is
    /// not waited for; it ends when its write or read returns, since the
    /// caller drops the `Relay` (closing the abort pipe) right after.
    ///
    /// Cancel-safe: calling it again resumes waiting.
    pub(crate) async fn finish(&mut self) {
        self.drain = None;
        self.go = None;
        let aborted = self.abort.is_none();
        for w in &mut self.workers {
            if w.thread.is_none() {
                continue;
            }
            let ended = if w.reads_host || aborted {
                tokio::time::timeout(GRACE, &mut w.done).await.is_ok()
            } else {
                let _ = (&mut w.done).await;
                true
            };
            let thread = w.thread.take();
            if ended {
                // Its work has returned; join only waits for the thread's
                // exit itself (microseconds), so no thread outlives the child.
                if let Some(t) = thread {
                    let _ = t.join();
                }
            } else {
                tracing::debug!(
                    relay = w.name,
                    "relay thread still busy; left to end on its own"
                );
            }
        }
        if let Some(raw) = &mut self.raw {
            raw.restore();
        }
    }
}

/// Copies the host's stdin into the child's stdin pipe (`to`, ours,
/// non-blocking) until host EOF, the child's side closing, drain or abort.
/// With `sizes` (`to` is a pty's master), also copies the host terminal's
/// window size to it whenever it changes.
fn copy_in(to: OwnedFd, go: mpsc::Receiver<()>, stops: Stops, sizes: bool) {
    if go.recv().is_err() {
        return; // the child never started
    }
    // SAFETY: isatty only inspects the fd.
    let terminal = unsafe { libc::isatty(HOST_STDIN) } == 1;
    let mut buf = vec![0u8; 16 * 1024];
    let mut size = terminal::window_size(HOST_STDIN).filter(|_| sizes);
    let poll_every = size.map(|_| WINDOW_SIZE_POLL);
    loop {
        if let Some(last) = &mut size {
            if let Some(now) = terminal::window_size(HOST_STDIN) {
                if !terminal::same_size(last, &now) {
                    terminal::set_window_size(to.as_raw_fd(), &now);
                    *last = now;
                }
            }
        }
        // Events 0 on `to`: poll still reports POLLERR once no process
        // holds the pipe's read end (the child has ended).
        let mut fds = [
            pollfd(HOST_STDIN, libc::POLLIN),
            pollfd(to.as_raw_fd(), 0),
            pollfd(stops.drain.as_raw_fd(), libc::POLLIN),
            pollfd(stops.abort.as_raw_fd(), libc::POLLIN),
        ];
        if poll(&mut fds, poll_every).is_err() || fds[1..].iter().any(ready) {
            return;
        }
        if fds[0].revents & libc::POLLNVAL != 0 {
            return; // no stdin at all: the child sees EOF
        }
        if !ready(&fds[0]) {
            continue;
        }
        let n = match read(HOST_STDIN, &mut buf) {
            Ok(0) => return, // host EOF: dropping `to` passes it on
            Ok(n) => n,
            Err(e) if retry(&e) => continue,
            Err(e) if terminal && e.raw_os_error() == Some(libc::EIO) => {
                // A background job reading its terminal (SIGTTIN blocked):
                // the input is the foreground job's. Look again later.
                match wait_for(&to, 0, &stops, Some(BACKGROUND_RETRY)) {
                    Wait::TimedOut => continue,
                    _ => return,
                }
            }
            Err(_) => return,
        };
        if write_child(&to, &buf[..n], &stops).is_err() {
            return;
        }
    }
}

/// Writes all of `data` into the child's stdin pipe (non-blocking), waiting
/// for room; fails once the child's side is gone or on drain/abort.
fn write_child(to: &OwnedFd, mut data: &[u8], stops: &Stops) -> Result<(), ()> {
    while !data.is_empty() {
        match write(to.as_raw_fd(), data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Full: wait for room. POLLERR (no reader) makes the next
                // write fail with EPIPE.
                if !matches!(wait_for(to, libc::POLLOUT, stops, None), Wait::Ready) {
                    return Err(());
                }
            }
            Err(_) => return Err(()),
        }
    }
    Ok(())
}

/// Copies a child's output pipe (`from`, ours, non-blocking) to the host's
/// fd `to` until EOF, drain has been honoured, a host write fails, or abort.
/// Returning drops `from`, the only read end: the child's next write to it
/// gets `EPIPE`/`SIGPIPE`.
fn copy_out(from: OwnedFd, to: RawFd, ring: Option<SharedRing>, stops: Stops) {
    let mut buf = vec![0u8; 64 * 1024];
    // Set on drain: the bytes then still in the pipe, owed to the host
    // whatever the time, and the end of the grace period for later writes.
    let mut draining: Option<(usize, Instant)> = None;
    loop {
        let timeout = match draining {
            None => None,
            Some((0, until)) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return;
                }
                Some(left)
            }
            // Owed bytes are already in the pipe; if none arrive for a whole
            // grace period, someone else took them.
            Some(_) => Some(GRACE),
        };
        let drain_fd = match draining {
            None => stops.drain.as_raw_fd(),
            Some(_) => -1, // poll skips negative fds
        };
        let mut fds = [
            pollfd(from.as_raw_fd(), libc::POLLIN),
            pollfd(stops.abort.as_raw_fd(), libc::POLLIN),
            pollfd(drain_fd, libc::POLLIN),
        ];
        let Ok(n_ready) = poll(&mut fds, timeout) else {
            return;
        };
        if n_ready == 0 {
            // Timed out (only while draining): nothing more is owed; the top
            // of the loop ends the relay once the grace period is over.
            if let Some((owed, _)) = &mut draining {
                *owed = 0;
            }
            continue;
        }
        if ready(&fds[1]) {
            return;
        }
        if ready(&fds[2]) {
            draining = Some((pending_bytes(&from), Instant::now() + GRACE));
            continue;
        }
        let n = match read(from.as_raw_fd(), &mut buf) {
            Ok(0) => return, // EOF: every writer is gone
            Ok(n) => n,
            Err(e) if retry(&e) => continue,
            Err(_) => return,
        };
        if let Some((owed, _)) = &mut draining {
            *owed = owed.saturating_sub(n);
        }
        if let Some(ring) = &ring {
            StderrRing::push(ring, &buf[..n]);
        }
        if write_host(to, &buf[..n], &stops).is_err() {
            return;
        }
    }
}

/// Writes all of `data` to the host's fd `to`, which stays blocking: waits
/// for `POLLOUT` (or abort), then writes at most `PIPE_BUF` bytes.
fn write_host(to: RawFd, mut data: &[u8], stops: &Stops) -> io::Result<()> {
    while !data.is_empty() {
        let mut fds = [
            pollfd(to, libc::POLLOUT),
            pollfd(stops.abort.as_raw_fd(), libc::POLLIN),
        ];
        poll(&mut fds, None)?;
        if ready(&fds[1]) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        // POLLOUT, or POLLERR/POLLHUP/POLLNVAL: the write says which.
        match write(to, &data[..data.len().min(HOST_WRITE_CHUNK)]) {
            Ok(n) => data = &data[n..],
            Err(e) if retry(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

enum Wait {
    Ready,
    Stopped,
    TimedOut,
}

/// Waits until `fd` has `events` (or an error/hangup), a stop pipe closes,
/// or `timeout` passes.
fn wait_for(fd: &OwnedFd, events: libc::c_short, stops: &Stops, timeout: Option<Duration>) -> Wait {
    let mut fds = [
        pollfd(fd.as_raw_fd(), events),
        pollfd(stops.drain.as_raw_fd(), libc::POLLIN),
        pollfd(stops.abort.as_raw_fd(), libc::POLLIN),
    ];
    match poll(&mut fds, timeout) {
        Err(_) => Wait::Stopped,
        Ok(_) if ready(&fds[1]) || ready(&fds[2]) => Wait::Stopped,
        Ok(0) => Wait::TimedOut,
        Ok(_) => Wait::Ready,
    }
}

mod sys;
#[allow(unused_imports)]
use sys::*;
