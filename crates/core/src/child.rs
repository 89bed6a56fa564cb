//! A started child: its pipes or stdio relay, its stderr tail, and how it
//! ends.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::process::{ChildStdin, ChildStdout};

use crate::launch::{Launched, Leader};
use crate::relay::{Relay, GRACE};

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitOutcome {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by this signal (including by [`RunningChild::kill`] or
    /// a resource limit).
    Signaled(i32),
    /// The wall-clock deadline passed and the runner killed its process group.
    DeadlineExceeded,
    /// The CPU time of every process of the sandbox together passed
    /// [`Limits::cpu_ms`](crate::Limits::cpu_ms) and the runner
    /// killed the sandbox (only with a backend that accounts for the
    /// sandbox as a whole; see [`SandboxResources::cpu_time`]).
    ///
    /// [`SandboxResources::cpu_time`]: crate::SandboxResources::cpu_time
    CpuTimeExceeded,
    /// The sandbox's memory, every process together, reached
    /// [`Limits::memory_bytes`](crate::Limits::memory_bytes) and the
    /// kernel killed the program (only with a backend that limits the
    /// sandbox as a whole; see [`SandboxResources::memory_limit_hit`]).
    ///
    /// [`SandboxResources::memory_limit_hit`]: crate::SandboxResources::memory_limit_hit
    MemoryExceeded,
}

impl ExitOutcome {
    /// True for `Exited(0)`.
    pub fn success(&self) -> bool {
        matches!(self, ExitOutcome::Exited(0))
    }
}

/// The newest bytes a child wrote to stderr, at most `cap` of them.
pub(crate) struct StderrRing {
    buf: VecDeque<u8>,
    cap: usize,
    dropped: u64,
}

/// A [`StderrRing`] shared between its writer (a task or relay thread) and
/// the [`RunningChild`].
pub(crate) type SharedRing = Arc<Mutex<StderrRing>>;

impl StderrRing {
    /// An empty ring keeping at most `cap` bytes.
    pub(crate) fn shared(cap: usize) -> SharedRing {
        Arc::new(Mutex::new(StderrRing {
            buf: VecDeque::new(),
            cap,
            dropped: 0,
        }))
    }

    /// Appends `bytes`, dropping the oldest ones beyond the cap.
    pub(crate) fn push(ring: &SharedRing, bytes: &[u8]) {
        let mut r = ring.lock().unwrap_or_else(|p| p.into_inner());
        let keep = &bytes[bytes.len().saturating_sub(r.cap)..];
        let over = (r.buf.len() + keep.len()).saturating_sub(r.cap);
        r.buf.drain(..over);
        r.buf.extend(keep);
        r.dropped += (over + bytes.len() - keep.len()) as u64;
    }
}

/// A running child started by a [`Runner`](crate::Runner).
///
/// Dropping it kills the child's whole process group and removes its fresh
/// scratch dir.
pub struct RunningChild {
    pid: u32,
    leader: Leader,
    /// The child's stdin, when piped. Take it to write; drop it to send EOF.
    pub stdin: Option<ChildStdin>,
    /// The child's stdout, when piped.
    pub stdout: Option<ChildStdout>,
    stderr: SharedRing,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    /// The threads copying the host's stdio, in [`StdioMode::Relay`].
    ///
    /// [`StdioMode::Relay`]: crate::StdioMode::Relay
    relay: Option<Relay>,
    deadline: Option<tokio::time::Instant>,
    scratch: ScratchGuard,
    /// How the child ended, once reaped (its pid may then be reused).
    reaped: Option<ExitOutcome>,
    /// Set when [`wait`](Self::wait) has finished everything: reaped, the
    /// group gone, output relayed, scratch removed.
    outcome: Option<ExitOutcome>,
    label: Option<String>,
    /// What the backend holds for this child; dropped once every process of
    /// the sandbox is gone (shared with the CPU watch's thread until then).
    resources: Option<Arc<dyn crate::backend::SandboxResources>>,
    /// Whether the sandbox-wide memory limit killed a process, as the
    /// resources said just before they were released.
    memory_limit_hit: bool,
    /// The sandbox-wide CPU limit, enforced when `resources` accounts for
    /// CPU time.
    cpu_limit: Option<std::time::Duration>,
    /// The thread that enforces it (`cpu_watch.rs`), until the leader is
    /// reaped; then what it saw.
    cpu_watch: Option<CpuWatch>,
    cpu_stats: Option<CpuWatchStats>,
    /// With [`ChildSpec::explain`](crate::ChildSpec::explain): the record,
    /// and the limits it names; the explanation once waited for.
    explain: Option<Box<(crate::explain::DenialLog, crate::Limits)>>,
    explanation: Option<crate::explain::Explanation>,
}

impl std::fmt::Debug for RunningChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningChild")
            .field("pid", &self.pid)
            .field("label", &self.label)
            .field("scratch", &self.scratch.path())
            .field("outcome", &self.outcome)
            .finish()
    }
}

impl RunningChild {
    pub(crate) fn new(
        launched: Launched,
        scratch: ScratchGuard,
        limits: &crate::Limits,
        stderr: SharedRing,
        relay: Option<Relay>,
        resources: crate::backend::WrapResources,
        spec: &crate::ChildSpec,
    ) -> Self {
        let (label, explain) = (spec.label.clone(), spec.explain);
        let Launched {
            pid,
            leader,
            stdin,
            stdout,
            stderr: child_stderr,
        } = launched;
        let stderr_task = child_stderr.map(|mut pipe| {
            let ring = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    StderrRing::push(&ring, &chunk[..n]);
                }
            })
        });
        let resources: Option<Arc<dyn crate::backend::SandboxResources>> = resources.map(Arc::from);
        let cpu_limit = limits.cpu_ms.map(std::time::Duration::from_millis);
        // Where the resources account for CPU time; if no thread can be
        // started, `reap` falls back to polling on the runtime.
        let cpu_watch = match (&resources, cpu_limit) {
            (Some(r), Some(limit)) if r.cpu_time().is_some() => {
                CpuWatch::start(Arc::clone(r), pid, limit)
            }
            _ => None,
        };
        RunningChild {
            pid,
            stdin,
            stdout,
            leader,
            stderr,
            stderr_task,
            relay,
            deadline: limits.deadline.map(|d| tokio::time::Instant::now() + d),
            scratch,
            reaped: None,
            outcome: None,
            label,
            resources,
            memory_limit_hit: false,
            cpu_limit,
            cpu_watch,
            cpu_stats: None,
            explain: explain.then(|| Box::new((crate::explain::DenialLog::new(), *limits))),
            explanation: None,
        }
    }

    /// The child's pid, which is also its process-group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child's scratch dir (its cwd). When the backend gave a fresh
    /// scratch private memory of its own, this is the path inside the
    /// sandbox; the host sees only an empty mount point there.
    pub fn scratch_dir(&self) -> &Path {
        self.scratch.path()
    }

    /// The newest bytes the child wrote to stderr (bounded by the runner's
    /// `stderr_ring_bytes`). Kept in [`StdioMode::Piped`], and in
    /// [`StdioMode::Relay`] when the host's stderr is not the same file as
    /// its stdout (otherwise both streams share one pipe and stay
    /// interleaved, so stderr alone cannot be told apart).
    ///
    /// [`StdioMode::Piped`]: crate::StdioMode::Piped
    /// [`StdioMode::Relay`]: crate::StdioMode::Relay
    pub fn stderr_tail(&self) -> Vec<u8> {
        let r = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        r.buf.iter().copied().collect()
    }

    /// How many stderr bytes were dropped from the front of the ring.
    pub fn stderr_dropped(&self) -> u64 {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .dropped
    }

    /// Whether the backend's sandbox-wide memory limit has killed a
    /// process of the sandbox (a memory cgroup's OOM kill count rose), so
    /// far or, after [`wait`](Self::wait), at all. False where the backend
    /// holds no sandbox-wide memory limit: the kernel's own OOM killer or a
    /// stray SIGKILL is not attributed to any limit.
    pub fn memory_limit_hit(&self) -> bool {
        self.memory_limit_hit
            || self
                .resources
                .as_ref()
                .is_some_and(|r| r.memory_limit_hit())
    }

    /// What the sandbox-wide CPU limit's watch saw (how long the sandbox
    /// ran at most without a read of its CPU time, whether it was killed
    /// for it): its final figures once [`wait`](Self::wait) returned, its
    /// figures so far before. `None` when no limit was watched on a thread.
    pub fn cpu_watch(&self) -> Option<CpuWatchStats> {
        self.cpu_stats
            .or_else(|| self.cpu_watch.as_ref().map(CpuWatch::stats))
    }

    /// What the sandbox refused, once [`wait`](Self::wait) returned, for a
    /// child spawned with [`ChildSpec::explain`](crate::ChildSpec::explain);
    /// `None` otherwise or before.
    pub fn explanation(&self) -> Option<&crate::explain::Explanation> {
        self.explanation.as_ref()
    }

    /// Sends SIGKILL to the child's whole process group (not once the child
    /// has been reaped by [`wait`](Self::wait): its pid may be reused), and
    /// stops relaying its stdio at once: output still in the pipes is
    /// dropped.
    pub fn kill(&mut self) {
        if self.reaped.is_none() {
            kill_group(self.pid);
        }
        if let Some(relay) = &mut self.relay {
            relay.abort();
        }
    }

    /// Sends `signal` to the child's process group (not once the child has
    /// been reaped: its pid may be reused): what a terminal's `^C` or an
    /// OCI runtime's `kill ID SIGTERM` does to the program. In a PID
    /// namespace the sandbox's init ignores it (the kernel delivers only
    /// signals it handles, and it handles none); the program does not.
    pub fn signal_group(&self, signal: i32) -> std::io::Result<()> {
        if self.reaped.is_some() {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        // SAFETY: kill has no memory preconditions; the group is the
        // child's own, alive (not reaped).
        if unsafe { libc::kill(-(self.pid as libc::pid_t), signal) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits for the child to end, enforcing the deadline. Afterwards kills
    /// whatever is left of its process group (background children do not
    /// outlive it), lets the stdio relay finish, and removes the fresh
    /// scratch dir.
    ///
    /// With [`StdioMode::Relay`], it returns once everything the sandbox
    /// wrote before its last process died has reached the host's stdout and
    /// stderr, however slowly the host reads them (a descendant that escaped
    /// the process group and still holds a pipe gets at most 200 ms more);
    /// after [`kill`](Self::kill), within 200 ms. Cancel-safe: dropping the
    /// future and calling `wait` again resumes where it stopped.
    ///
    /// [`StdioMode::Relay`]: crate::StdioMode::Relay
    pub async fn wait(&mut self) -> std::io::Result<ExitOutcome> {
        if let Some(outcome) = self.outcome {
            return Ok(outcome);
        }
        let outcome = match self.reaped {
            Some(outcome) => outcome,
            None => self.reap().await?,
        };
        wait_group_gone(self.pid, self.resources.as_deref()).await;
        if let Some(relay) = &mut self.relay {
            relay.finish().await;
        }
        self.relay = None;
        if let Some(task) = self.stderr_task.take() {
            // The pipe closes once every holder is dead; don't hang on a
            // descendant that escaped the group.
            let _ = tokio::time::timeout(GRACE, task).await;
        }
        self.scratch.remove();
        // Every process of the sandbox is gone: release what the backend
        // held for it (its cgroups, say).
        self.memory_limit_hit = self.memory_limit_hit();
        if let Some(record) = self.explain.take() {
            let (log, limits) = &*record;
            let reported = self.resources.as_ref().is_some_and(|r| r.explain(log));
            let cpu = self.resources.as_ref().and_then(|r| r.cpu_time());
            let hit = self.memory_limit_hit;
            crate::explain::runner_records(log, reported, outcome, limits, hit, cpu);
            self.explanation = Some(log.finish());
        }
        drop(self.resources.take());
        self.outcome = Some(outcome);
        Ok(outcome)
    }

    /// Waits for the leader to exit (or the deadline), kills what is left
    /// of its group, and reaps it.
    async fn reap(&mut self) -> std::io::Result<ExitOutcome> {
        let deadline = self
            .deadline
            .unwrap_or_else(|| tokio::time::Instant::now() + FOREVER);
        // Without the watch's thread (none could be started), the runtime
        // polls.
        let fallback = match (&self.resources, self.cpu_limit, &self.cpu_watch) {
            (Some(r), Some(limit), None) => Some((r.as_ref(), limit)),
            _ => None,
        };
        let mut ended = tokio::select! {
            r = leader_exited(&self.leader) => { r?; Ended::Exited }
            _ = tokio::time::sleep_until(deadline) => Ended::Deadline,
            _ = watch_cpu(fallback) => Ended::CpuTime,
        };
        // Before the leader is reaped: no kill of the watch's may follow.
        if let Some(mut w) = self.cpu_watch.take() {
            let stats = w.stop();
            if stats.fired && ended == Ended::Exited {
                ended = Ended::CpuTime;
            }
            self.cpu_stats = Some(stats);
        }
        let deadline_hit = ended == Ended::Deadline;
        // The leader has exited but is not reaped yet (on Linux, where we
        // watch a pidfd): its pid cannot be reused, so the group id still
        // names only its own descendants when we kill what is left of them.
        kill_group(self.pid);
        let raw = reap_leader(&mut self.leader).await?;
        let raw = self
            .resources
            .as_ref()
            .and_then(|r| r.exit_status(raw))
            .unwrap_or(raw);
        let status =
            <std::process::ExitStatus as std::os::unix::process::ExitStatusExt>::from_raw(raw);
        let outcome = if deadline_hit {
            tracing::info!(
                pid = self.pid,
                label = self.label.as_deref().unwrap_or(""),
                "deadline exceeded; process group killed"
            );
            ExitOutcome::DeadlineExceeded
        } else if ended == Ended::CpuTime {
            tracing::info!(
                pid = self.pid,
                label = self.label.as_deref().unwrap_or(""),
                "the sandbox's CPU time passed its limit; process group killed"
            );
            ExitOutcome::CpuTimeExceeded
        } else {
            match from_status(status) {
                ExitOutcome::Signaled(libc::SIGKILL)
                    if self
                        .resources
                        .as_ref()
                        .is_some_and(|r| r.memory_limit_hit()) =>
                {
                    tracing::info!(
                        pid = self.pid,
                        label = self.label.as_deref().unwrap_or(""),
                        "the sandbox reached its memory limit; the kernel killed the program"
                    );
                    ExitOutcome::MemoryExceeded
                }
                other => other,
            }
        };
        self.reaped = Some(outcome);
        Ok(outcome)
    }
}

/// How [`RunningChild::reap`]'s wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The leader exited (on Linux observed on its pidfd, not yet reaped).
    Exited,
    Deadline,
    CpuTime,
}

/// A deadline far enough away to mean "none" without overflowing.
const FOREVER: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// Resolves once the leader has exited: on Linux without reaping it (its
/// pidfd polls readable), elsewhere by reaping it.
pub(crate) async fn leader_exited(leader: &Leader) -> std::io::Result<()> {
    match leader {
        #[cfg(target_os = "linux")]
        Leader::Pidfd(pidfd) => {
            let mut guard = pidfd.readable().await?;
            guard.retain_ready();
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        Leader::Tokio(_) => Ok(()),
    }
}

/// Reaps the leader (which has exited, or been killed) and returns its raw
/// wait status.
pub(crate) async fn reap_leader(leader: &mut Leader) -> std::io::Result<i32> {
    match leader {
        #[cfg(target_os = "linux")]
        Leader::Pidfd(pidfd) => {
            use std::os::fd::AsRawFd;
            loop {
                let mut guard = pidfd.readable().await?;
                // SAFETY: a zeroed siginfo for waitid to fill.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: waitid on our own child's pidfd.
                let r = unsafe {
                    libc::waitid(
                        libc::P_PIDFD,
                        pidfd.get_ref().as_raw_fd() as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOHANG | libc::__WALL,
                    )
                };
                if r < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() == Some(libc::EINTR) {
                        continue;
                    }
                    return Err(e);
                }
                // SAFETY: filled by waitid (zero when nothing changed).
                let (pid, status) = unsafe { (info.si_pid(), info.si_status()) };
                if pid == 0 {
                    // Killed but not gone yet: wait for the next readiness.
                    guard.clear_ready();
                    continue;
                }
                return Ok(match info.si_code {
                    libc::CLD_EXITED => (status & 0xff) << 8,
                    libc::CLD_DUMPED => (status & 0x7f) | 0x80,
                    _ => status & 0x7f,
                });
            }
        }
        #[cfg(not(target_os = "linux"))]
        Leader::Tokio(child) => {
            use std::os::unix::process::ExitStatusExt;
            Ok(child.wait().await?.into_raw())
        }
    }
}

impl Drop for RunningChild {
    fn drop(&mut self) {
        // Before the leader may be reaped (below): no kill of the watch's
        // may follow.
        if let Some(w) = &mut self.cpu_watch {
            w.stop();
        }
        if self.reaped.is_none() {
            kill_group(self.pid);
            // Elsewhere tokio reaps a dropped child.
            #[cfg(target_os = "linux")]
            crate::launch::reap_later(self.pid as libc::pid_t);
        }
        // Dropping `relay` closes its stop pipes: the relay threads end.
    }
}

fn from_status(status: std::process::ExitStatus) -> ExitOutcome {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitOutcome::Exited(code),
        (None, Some(sig)) => ExitOutcome::Signaled(sig),
        (None, None) => ExitOutcome::Exited(-1),
    }
}

#[path = "child/group.rs"]
mod group;
#[cfg(feature = "test-hooks")]
pub(crate) use group::live_group_members;
use group::{kill_group, wait_group_gone};

#[path = "child/cpu_watch.rs"]
mod cpu_watch;
pub use cpu_watch::CpuWatchStats;
use cpu_watch::{watch_cpu, CpuWatch};

#[path = "child/scratch.rs"]
mod scratch;
pub use scratch::SCRATCH_PREFIX;
pub(crate) use scratch::{sweep_dead_scratches, ScratchGuard};

#[cfg(test)]
#[path = "child/tests.rs"]
mod tests;
