//! What the `harness = false` drivers share: which scenarios a run selects,
//! read from libtest's own arguments, and a bounded wait for a scenario's
//! process.
//!
//! The arguments are libtest's: bare words are filters (a name containing
//! any of them runs), `--exact` makes filters and skips match whole names,
//! `--skip NAME` (repeatable, also `--skip=NAME`) leaves matching names
//! out, `--list` prints the selected names, `--ignored` selects the
//! ignored scenarios (there are none). libtest's other options are
//! accepted and ignored, with their values. Unlike libtest, a filter that
//! matches no scenario is an error, and so is a run left with nothing to
//! run: "0 passed" must never read as a pass.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, ExitStatus};
use std::time::Duration;

/// libtest's options whose value is the next argument: that value is no
/// filter.
const TAKES_VALUE: &[&str] = &[
    "--logfile",
    "--test-threads",
    "--color",
    "--format",
    "-Z",
    "--shuffle-seed",
];

#[derive(Debug, Default)]
pub struct Selection {
    filters: Vec<String>,
    skips: Vec<String>,
    exact: bool,
    /// `--list`: print the selected names, run nothing.
    pub list: bool,
    /// `--ignored`: only the ignored scenarios, of which there are none.
    pub ignored: bool,
    /// Every other `-`/`--` argument, for a driver's own flags
    /// (`--measure`).
    pub flags: Vec<String>,
}

impl Selection {
    /// This process's arguments.
    pub fn from_env() -> Selection {
        match Selection::parse(std::env::args().skip(1)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
    }

    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Selection, String> {
        let mut s = Selection::default();
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            if let Some(skip) = a.strip_prefix("--skip=") {
                s.skips.push(skip.to_string());
                continue;
            }
            match a.as_str() {
                "--exact" => s.exact = true,
                "--list" => s.list = true,
                "--ignored" => s.ignored = true,
                "--skip" => s
                    .skips
                    .push(args.next().ok_or("--skip needs a name after it")?),
                _ if TAKES_VALUE.contains(&a.as_str()) => {
                    args.next();
                }
                _ if a.starts_with('-') => s.flags.push(a),
                _ => s.filters.push(a),
            }
        }
        Ok(s)
    }

    fn matches(&self, pattern: &str, name: &str) -> bool {
        if self.exact {
            name == pattern
        } else {
            name.contains(pattern)
        }
    }

    /// The names of `all` this run selects, in their order. An error names
    /// each filter that matches no scenario (a typo must not pass as an
    /// empty run), or says that the skips left nothing to run. With
    /// `--ignored`, nothing is selected and that is no error.
    pub fn select<'a>(&self, all: &[&'a str]) -> Result<Vec<&'a str>, String> {
        if self.ignored {
            return Ok(Vec::new());
        }
        let unmatched: Vec<&str> = self
            .filters
            .iter()
            .filter(|f| !all.iter().any(|n| self.matches(f, n)))
            .map(String::as_str)
            .collect();
        if !unmatched.is_empty() {
            return Err(format!(
                "no scenario matches {unmatched:?}{}; the scenarios are:\n  {}",
                if self.exact { " exactly" } else { "" },
                all.join("\n  ")
            ));
        }
        let chosen: Vec<&str> = all
            .iter()
            .copied()
            .filter(|n| self.filters.is_empty() || self.filters.iter().any(|f| self.matches(f, n)))
            .filter(|n| !self.skips.iter().any(|s| self.matches(s, n)))
            .collect();
        if chosen.is_empty() && !self.list {
            return Err(format!(
                "every selected scenario is skipped ({:?}): nothing to run",
                self.skips
            ));
        }
        Ok(chosen)
    }

    /// [`select`](Self::select), or, on an error, the message and exit 2;
    /// `--list` prints the names (as libtest does) and exits 0, and
    /// `--ignored` says there is nothing to run and exits 0.
    pub fn chosen_or_exit<'a>(&self, all: &[&'a str]) -> Vec<&'a str> {
        let chosen = match self.select(all) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        };
        if self.list {
            for name in &chosen {
                println!("{name}: test");
            }
            std::process::exit(0);
        }
        if self.ignored {
            println!("no scenario is ignored: nothing to run (0 passed, 0 failed)");
            std::process::exit(0);
        }
        chosen
    }
}

/// A pidfd for `pid` (which must be a process that cannot be reaped
/// meanwhile: our own child, or an orphan this process adopted as a child
/// subreaper).
pub fn pidfd_open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open on integers; it returns a fresh fd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Waits until the process of `pidfd` has exited (its pidfd polls
/// readable); false if it still runs after `limit`, a bound that only
/// turns a hang into a failure.
pub fn exits_within(pidfd: &OwnedFd, limit: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = limit.as_millis().min(i32::MAX as u128) as libc::c_int;
    // EINTR restarts the wait (nothing here handles signals, so it does
    // not come in practice).
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return n == 1;
        }
    }
}

/// Waits for `child` to exit, or kills it once `limit` has passed without
/// that (a scenario that hangs fails, it does not stall the run): the exit
/// is the child's pidfd polling readable, no polling loop.
pub fn wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let pidfd = pidfd_open(child.id()).expect("pidfd_open of a scenario");
    if exits_within(&pidfd, limit) {
        return Some(child.wait().expect("wait"));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}
