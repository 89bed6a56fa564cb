//! The spawning thread's wait for a launch (Linux): the child's report
//! read until EOF, bounded by the set-up timeout, and what is killed when
//! it passes. Raw syscalls only and no allocation while the child may run:
//! it shares this thread's memory and thread-local storage.

use crate::command::{REPORT_ERROR, REPORT_HANDED_OVER, REPORT_STARTED, REPORT_STEP};
use crate::sys::raw;

pub(super) fn setup_timed_out(timeout: std::time::Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "the child's set-up did not finish within {} s (a process of it was stopped or \
             is stuck in the kernel); every process of it was killed and nothing ran",
            timeout.as_secs_f64()
        ),
    )
}

/// How many processes a launch may announce (the launcher, a
/// backend's init and helpers).
const MAX_ANNOUNCED: usize = 4;

/// The child's report, as read so far. Fixed-size: it is read while
/// the child shares this thread's memory (no allocation then).
pub(super) struct Report {
    bytes: [u8; 8],
    len: usize,
    /// The process handed over to, if any.
    pub(super) leader: Option<libc::pid_t>,
    pub(super) error: Option<libc::c_int>,
    /// The first step a hook reported failing at.
    pub(super) step: Option<u32>,
    announced: [libc::pid_t; MAX_ANNOUNCED],
    n_announced: usize,
}

impl Report {
    fn new() -> Report {
        Report {
            bytes: [0; 8],
            len: 0,
            leader: None,
            error: None,
            step: None,
            announced: [0; MAX_ANNOUNCED],
            n_announced: 0,
        }
    }

    fn feed(&mut self, data: &[u8]) {
        for &b in data {
            self.bytes[self.len] = b;
            self.len += 1;
            if self.len == 8 {
                self.len = 0;
                let kind = u32::from_ne_bytes([
                    self.bytes[0],
                    self.bytes[1],
                    self.bytes[2],
                    self.bytes[3],
                ]);
                let value = i32::from_ne_bytes([
                    self.bytes[4],
                    self.bytes[5],
                    self.bytes[6],
                    self.bytes[7],
                ]);
                self.record(kind, value);
            }
        }
    }

    fn record(&mut self, kind: u32, value: i32) {
        match kind {
            REPORT_ERROR => {
                self.error
                    .get_or_insert(if value > 0 { value } else { libc::EIO });
            }
            REPORT_HANDED_OVER if value > 0 => {
                self.leader = Some(value);
                self.announce(value);
            }
            REPORT_STARTED if value > 0 => self.announce(value),
            REPORT_STEP => {
                self.step.get_or_insert(value as u32);
            }
            _ => {
                self.error.get_or_insert(libc::EPROTO);
            }
        }
    }

    fn announce(&mut self, pid: libc::pid_t) {
        if self.announced[..self.n_announced].contains(&pid) {
            return;
        }
        if self.n_announced == MAX_ANNOUNCED {
            self.error.get_or_insert(libc::EPROTO);
            return;
        }
        self.announced[self.n_announced] = pid;
        self.n_announced += 1;
    }

    pub(super) fn announced(&self) -> impl Iterator<Item = libc::pid_t> + '_ {
        self.announced[..self.n_announced].iter().copied()
    }

    fn finish(mut self) -> Report {
        if self.len != 0 {
            self.error.get_or_insert(libc::EPROTO);
        }
        self
    }
}

/// How a launch's wait ended.
pub(super) enum Waited {
    /// The report reached EOF: every process of the launch has
    /// executed the program or exited.
    Ended(Report),
    /// The set-up timed out; every process of the launch was killed and
    /// is gone (the report reached EOF), to be reaped.
    Killed(Report),
    /// The set-up timed out and a process of the launch did not end
    /// even after SIGKILL: its memory must never be reused.
    Stuck,
}

/// How long killed processes of a timed-out launch get to end.
const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads the report on `fd` until EOF or `deadline`; on the deadline,
/// kills the launcher `pid` and everything announced, and reads on
/// until EOF (killing what is announced late) for [`KILL_GRACE`].
/// Raw syscalls only, no allocation: the child shares this thread's
/// memory and thread-local storage.
pub(super) fn wait_launch(
    fd: libc::c_int,
    pid: libc::pid_t,
    deadline: std::time::Instant,
) -> Waited {
    let mut report = Report::new();
    if read_until(fd, &mut report, deadline, None) {
        return Waited::Ended(report.finish());
    }
    // SAFETY: SIGKILL to our own unreaped child.
    unsafe { raw(libc::SYS_kill, pid as usize, libc::SIGKILL as usize, 0, 0) };
    let grace = std::time::Instant::now() + KILL_GRACE;
    if read_until(fd, &mut report, grace, Some(pid)) {
        Waited::Killed(report.finish())
    } else {
        Waited::Stuck
    }
}

/// Feeds `report` from `fd` until EOF (`true`) or `deadline`
/// (`false`). With `kill`, every announced process is sent SIGKILL as
/// soon as it is known (and `kill` itself was already).
fn read_until(
    fd: libc::c_int,
    report: &mut Report,
    deadline: std::time::Instant,
    kill: Option<libc::pid_t>,
) -> bool {
    let mut killed = 0;
    let mut buf = [0u8; 64];
    loop {
        if kill.is_some() {
            while killed < report.n_announced {
                let p = report.announced[killed];
                // SAFETY: SIGKILL to a process of this launch, unreaped
                // (the host's child), so its pid names it.
                unsafe { raw(libc::SYS_kill, p as usize, libc::SIGKILL as usize, 0, 0) };
                killed += 1;
            }
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        let ts = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: ppoll on one pollfd and a timespec on this frame; the
        // signal mask argument is null (every signal stays blocked).
        let ready = unsafe {
            raw(
                libc::SYS_ppoll,
                &mut pfd as *mut libc::pollfd as usize,
                1,
                &ts as *const libc::timespec as usize,
                0,
            )
        };
        if ready == -(libc::EINTR as isize) || ready == 0 {
            continue;
        }
        if ready < 0 {
            // Cannot watch the pipe: treat as a set-up that cannot end.
            return false;
        }
        // SAFETY: a read into a local buffer from our fd.
        let n = unsafe {
            raw(
                libc::SYS_read,
                fd as usize,
                buf.as_mut_ptr() as usize,
                buf.len(),
                0,
            )
        };
        match n {
            0 => return true,
            n if n > 0 => report.feed(&buf[..n as usize]),
            n if n == -(libc::EINTR as isize) || n == -(libc::EAGAIN as isize) => {}
            _ => return false,
        }
    }
}
