//! The sandbox-wide CPU limit's watch: a thread of its own per child that
//! reads the sandbox's CPU time every [`CPU_POLL`] and kills the child's
//! process group once it passes the limit.
//!
//! It was a timer on the async runtime, which fires only when a worker is
//! free: on a loaded host (or a runtime busy with other work) it read late,
//! and a sandbox burned seconds past its limit between two reads. A thread
//! that sleeps between reads is woken by the kernel on time (as root it
//! runs at the highest `nice` priority, so a host full of CPU-bound
//! processes does not delay it), and it needs nobody to be awaiting the
//! child. Whatever delay is left is measured, not assumed: when it kills,
//! [`CpuWatchStats::final_span`] is how long the sandbox ran since the last
//! read that found it at or under the limit (the most it can have used
//! past the limit is that span times its CPUs), and
//! [`CpuWatchStats::final_burn`] what the backend counted it burn in that
//! span up to the read that found it over.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::backend::SandboxResources;

/// How often the sandbox's CPU time is read against its limit.
pub(crate) const CPU_POLL: Duration = Duration::from_millis(100);

/// What the watch saw, for a caller that judges how far past the limit a
/// sandbox may have run ([`RunningChild::cpu_watch`](crate::RunningChild::cpu_watch)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CpuWatchStats {
    /// How many times the CPU time was read.
    pub reads: u64,
    /// The longest span from the start of one read (or the spawn) to the
    /// end of the next: how late the watch ran at worst.
    pub longest_unwatched: Duration,
    /// Whether the watch killed the sandbox for its CPU time.
    pub fired: bool,
    /// When it did: from the start of the last read that found the sandbox
    /// at or under its limit (or the spawn) to the kill.
    pub final_span: Duration,
    /// When it did: the CPU time the read that found it over counted,
    /// less what that last read at or under the limit counted.
    pub final_burn: Duration,
    /// When it did: from the start of the read that found it over to the
    /// kill (in which it burned on, uncounted).
    pub read_to_kill: Duration,
    /// When it did: the CPU time counted by a read right after the kill,
    /// less what the last read at or under the limit counted: all the
    /// sandbox burned in the final span, as the backend counts it (`None`
    /// if that read failed).
    pub burn_to_kill: Option<Duration>,
    /// The start of the last read that found the sandbox at or under its
    /// limit (`None` before the first), and what that read counted: a
    /// caller that knows what the sandbox used by then can tell a backend
    /// that undercounts.
    pub last_read: Option<(Instant, Duration)>,
}

#[derive(Debug)]
struct State {
    /// Set when the leader is about to be reaped (its pid may be reused
    /// after): no kill may follow.
    stopped: bool,
    stats: CpuWatchStats,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// A running watch; stopping it (or dropping it) ends its thread.
#[derive(Debug)]
pub(crate) struct CpuWatch {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CpuWatch {
    /// Starts watching `resources` for process group `pgid` against
    /// `limit`. `None` if no thread could be started (the caller then has
    /// no watch, and says so: see `RunningChild::reap`).
    pub(crate) fn start(
        resources: Arc<dyn SandboxResources>,
        pgid: u32,
        limit: Duration,
    ) -> Option<CpuWatch> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                stopped: false,
                stats: CpuWatchStats {
                    reads: 0,
                    longest_unwatched: Duration::ZERO,
                    fired: false,
                    final_span: Duration::ZERO,
                    final_burn: Duration::ZERO,
                    read_to_kill: Duration::ZERO,
                    burn_to_kill: None,
                    last_read: None,
                },
            }),
            wake: Condvar::new(),
        });
        let inner = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("cordon-cpu-watch".into())
            .stack_size(64 * 1024)
            .spawn(move || watch(&inner, resources.as_ref(), pgid, limit))
            .ok()?;
        Some(CpuWatch {
            shared,
            thread: Some(thread),
        })
    }

    /// Stops the watch before the leader is reaped: a kill under way
    /// completes first, none follows. Joins the thread (it holds the
    /// sandbox's resources, which are released only after).
    pub(crate) fn stop(&mut self) -> CpuWatchStats {
        let stats = {
            let mut s = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            s.stopped = true;
            s.stats
        };
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        stats
    }

    /// What it saw so far.
    pub(crate) fn stats(&self) -> CpuWatchStats {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stats
    }
}

impl Drop for CpuWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The thread: read, sleep until the next read is due, repeat; kill the
/// group once the sandbox is over its limit.
fn watch(shared: &Shared, resources: &dyn SandboxResources, pgid: u32, limit: Duration) {
    raise_priority();
    // The start of the last read that found the sandbox at or under its
    // limit (a read counts the time up to some moment within it), and what
    // it counted.
    let mut watched = Instant::now();
    let mut counted = Duration::ZERO;
    let mut next = watched + CPU_POLL;
    loop {
        {
            let mut s = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if s.stopped {
                    return;
                }
                let now = Instant::now();
                if now >= next {
                    break;
                }
                s = shared
                    .wake
                    .wait_timeout(s, next - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        }
        let began = Instant::now();
        let used = resources.cpu_time();
        let ended = Instant::now();
        let mut s = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        s.stats.reads += 1;
        if s.stopped {
            return;
        }
        s.stats.longest_unwatched = s.stats.longest_unwatched.max(ended - watched);
        match used {
            Some(u) if u > limit => {
                // Under the lock: the leader cannot be reaped meanwhile, so
                // the group id still names only the sandbox's processes.
                super::kill_group(pgid);
                let killed = Instant::now();
                s.stats.fired = true;
                s.stats.final_span = killed - watched;
                s.stats.final_burn = u.saturating_sub(counted);
                s.stats.read_to_kill = killed - began;
                s.stats.burn_to_kill = resources.cpu_time().map(|a| a.saturating_sub(counted));
                s.stats.longest_unwatched = s.stats.longest_unwatched.max(killed - watched);
                return;
            }
            Some(u) => {
                counted = u;
                watched = began;
                s.stats.last_read = Some((began, u));
            }
            // Nothing read: the sandbox stays unwatched since the last read.
            None => {}
        }
        // Reads keep their cadence from the last one: a late read is not
        // followed by a burst.
        next = ended + CPU_POLL;
    }
}

/// As root, the watch thread (only it) runs at `nice -20`, so CPU-bound
/// processes of the host or the sandbox do not delay its reads; elsewhere
/// the call fails and it keeps the default.
fn raise_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: gettid and setpriority on this thread's own id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, -20);
    }
}

/// Resolves once the sandbox's CPU time passes `limit`; never without a
/// watch. The fallback of [`CpuWatch`], which polls on a thread of its own.
pub(crate) async fn watch_cpu(
    watch: Option<(&dyn crate::backend::SandboxResources, std::time::Duration)>,
) {
    let Some((resources, limit)) = watch else {
        return std::future::pending().await;
    };
    // The first reading one poll after spawn: nothing to see before that.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + CPU_POLL, CPU_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if resources.cpu_time().is_some_and(|used| used > limit) {
            return;
        }
    }
}
