//! P6's sandbox-wide CPU check, for a backend that claims `sandbox` scope
//! for `limit_cpu`: the CPU time of every process of the sandbox together
//! stays within `Limits::cpu_seconds`, though each process has its own
//! RLIMIT_CPU that a fork starts afresh.
//!
//! A child of its own (mode `P6-cpu`), with a CPU limit of [`LIMIT_MS`]
//! (1 s, the smallest `Limits::cpu_seconds` can say, to keep the probe
//! short), starts [`CHAINS`] fork chains: each process burns [`LINK_MS`]
//! of CPU (a quarter of its RLIMIT_CPU), forks its successor and exits,
//! handing down the chain's total, which it reports every [`STEP_MS`] of
//! its own CPU time. Each chain stops by itself at its share of
//! [`CAP_MS`]; the program waits until they are gone.
//!
//! - **Fail**: the chains report more than the limit + [`SLACK_MS`] of CPU
//!   together, however the sandbox ended.
//! - **Pass**: they report at most that, and the sandbox was ended for its
//!   CPU time: the runner's `CpuTimeExceeded` (which the host observes), or
//!   the program killed by `SIGXCPU` or `SIGKILL`.
//! - Anything else (the wall-clock deadline came first, a fork failed) is
//!   inconclusive.
//!
//! The totals are the chains' own `CLOCK_PROCESS_CPUTIME_ID`: they leave
//! out the program and the backend's helpers and at most one step of each
//! running link, so they can only undercount what the sandbox used.

use std::collections::BTreeMap;
use std::time::Duration;

use cordon_core::{CheckResult, ExitOutcome, Limits};

use crate::child::{errno, Reporter};
use crate::harness::{fail, pass, unreachable, Ctx, Hold};

/// The check's name.
pub(crate) const NAME: &str = "sandbox-cpu-limit";

/// The sandbox's CPU limit for this check, in ms (`cpu_seconds` = 1).
const LIMIT_MS: u64 = 1000;
/// How many chains burn at once (the host has two cores).
const CHAINS: u64 = 2;
/// CPU time each process of a chain burns before it forks its successor.
const LINK_MS: u64 = 250;
/// How often (in a process's own CPU time) a chain reports its total.
const STEP_MS: u64 = 25;
/// What the chains may report above the limit. The runner reads the
/// sandbox's CPU time every 100 ms (`CPU_POLL`, cordon-core's child.rs):
/// two chains on two cores burn up to 200 ms between two reads; killing
/// the sandbox takes a few ms more; `/proc` counts whole ticks (10 ms per
/// process); and the reports lag by one step. 500 ms covers that with
/// room for a busy host.
const SLACK_MS: u64 = 500;
/// Where the chains stop by themselves: past limit + slack, so a sandbox
/// that is never stopped fails, without burning more than that.
const CAP_MS: u64 = LIMIT_MS + SLACK_MS + 4 * STEP_MS;

/// The host's side: `None` when the backend does not claim the limit
/// sandbox-wide (the check is not run at all), and in the baseline.
///
/// The baseline would always burn [`CAP_MS`] for nothing: without a
/// backend the runner has no sandbox CPU time to watch
/// (`SandboxResources::cpu_time` comes from the backend's `wrap`), and no
/// process of a chain comes near any RLIMIT_CPU (at least 1 s, and a
/// fork starts afresh), so the check cannot pass there; not running it
/// leaves it unmarked, as a failing run would.
pub(crate) async fn host(ctx: &Ctx) -> Option<CheckResult> {
    if !ctx.scopes.cpu.is_sandbox() || ctx.baseline {
        return None;
    }
    let limits = Limits {
        cpu_seconds: Some(LIMIT_MS / 1000),
        ..Limits::default()
    };
    let args: Vec<(String, String)> = [
        ("chains", CHAINS),
        ("link_ms", LINK_MS),
        ("step_ms", STEP_MS),
        ("cap_ms", CAP_MS / CHAINS),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let spawned = match ctx.spawn("P6-cpu", &args, limits) {
        Ok(s) => s,
        Err(e) => return Some(unreachable(NAME, format!("could not start: {e}"))),
    };
    let mut on_hold =
        |h: &Hold<'_>| vec![unreachable(NAME, format!("unexpected HOLD {}", h.label))];
    let started = tokio::time::Instant::now();
    let run = ctx.collect(spawned, &mut on_hold).await;
    if let Some(c) = run.checks.into_iter().next() {
        return Some(c);
    }
    Some(verdict(&run.info, run.outcome, started.elapsed()))
}

fn verdict(
    info: &BTreeMap<String, String>,
    outcome: Option<ExitOutcome>,
    wall: Duration,
) -> CheckResult {
    let (mut total, mut links) = (0u64, 0u64);
    for c in 0..CHAINS {
        if let Some((ms, link)) = info
            .get(&format!("chain{c}"))
            .and_then(|v| v.split_once(','))
        {
            total += ms.parse::<u64>().unwrap_or(0);
            links += link.parse::<u64>().unwrap_or(0);
        }
    }
    let ran = format!(
        "{CHAINS} fork chains of {links} processes, each burning {LINK_MS} ms (RLIMIT_CPU 1 s \
         each), reported {total} ms of CPU together in {:.1} s (limit {LIMIT_MS} ms + \
         {SLACK_MS} ms slack); outcome {outcome:?}",
        wall.as_secs_f64()
    );
    let stopped = matches!(
        outcome,
        Some(
            ExitOutcome::CpuTimeExceeded
                | ExitOutcome::Signaled(libc::SIGXCPU)
                | ExitOutcome::Signaled(libc::SIGKILL)
        )
    );
    if total > LIMIT_MS + SLACK_MS {
        fail(NAME, ran)
    } else if stopped {
        pass(NAME, format!("the sandbox was stopped: {ran}"))
    } else {
        let why = info
            .get("chain-error")
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        unreachable(
            NAME,
            format!("the sandbox ended before its CPU time reached the limit{why}: {ran}"),
        )
    }
}

fn num(args: &BTreeMap<String, String>, k: &str) -> u64 {
    args.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// The child's side (mode `P6-cpu`): starts the chains, waits until every
/// process of them is gone.
pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let plan = Plan {
        link_ns: num(args, "link_ms") * 1_000_000,
        step_ns: num(args, "step_ms").max(1) * 1_000_000,
        cap_ns: num(args, "cap_ms") * 1_000_000,
    };
    let chains = num(args, "chains");
    r.info("cpu-chains", chains);
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into a local array. Each process of a chain holds its
    // write end, so EOF on the read end means every chain is gone.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        r.info("chain-error", format!("pipe: errno {}", errno()));
        return;
    }
    for c in 0..chains {
        // SAFETY: fork of this single-threaded process; the chain runs
        // only raw syscalls and `_exit`s.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                libc::close(fds[0]);
                chain(c, &plan);
            }
            if pid < 0 {
                r.info("chain-error", format!("fork: errno {}", errno()));
            }
        }
    }
    // SAFETY: closing our write end; then polling and reading our read
    // end and reaping our own children (the chains' first processes).
    unsafe {
        libc::close(fds[1]);
        loop {
            let mut p = libc::pollfd {
                fd: fds[0],
                events: libc::POLLIN,
                revents: 0,
            };
            let ready = libc::poll(&mut p, 1, 20);
            while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
            if ready > 0 {
                let mut b = 0u8;
                if libc::read(fds[0], (&mut b as *mut u8).cast(), 1) == 0 {
                    break;
                }
            }
        }
        while libc::waitpid(-1, std::ptr::null_mut(), 0) > 0 {}
        libc::close(fds[0]);
    }
    r.info("cpu-chains-ended", "on their own");
}

/// What each process of a chain does, in ns of CPU time.
struct Plan {
    link_ns: u64,
    step_ns: u64,
    cap_ns: u64,
}

/// This process's CPU time (a forked process starts at 0).
fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One fork chain; never returns. Runs in a forked child of a
/// single-threaded process: raw syscalls and stack buffers only.
fn chain(c: u64, plan: &Plan) -> ! {
    let (mut before, mut link) = (0u64, 1u64);
    loop {
        let mut next_report = plan.step_ns;
        let mut x = 0u64;
        let own = loop {
            for i in 0..20_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let own = own_cpu_ns();
            if own >= next_report {
                report(c, before + own, link);
                next_report = own + plan.step_ns;
            }
            if before + own >= plan.cap_ns {
                report(c, before + own, link);
                // SAFETY: ending this process.
                unsafe { libc::_exit(0) };
            }
            if own >= plan.link_ns {
                break own;
            }
        };
        report(c, before + own, link);
        // SAFETY: fork of this single-threaded process; the parent exits
        // at once, the successor carries on with the same raw code.
        let pid = unsafe { libc::fork() };
        if pid != 0 {
            if pid < 0 {
                let e = errno();
                line(b"chain-error", b"fork failed: errno ", e as u64, None);
            }
            // SAFETY: ending this process.
            unsafe { libc::_exit(0) };
        }
        before += own;
        link += 1;
    }
}

/// `INFO chain<c> <total ms>,<link>`.
fn report(c: u64, total_ns: u64, link: u64) {
    let mut key = *b"chain0";
    key[5] = b'0' + (c % 10) as u8;
    line(&key, b"", total_ns / 1_000_000, Some(link));
}

/// Writes `INFO <key> <prefix><a>[,<b>]` with one `write` (atomic on a
/// pipe below PIPE_BUF), without allocating.
fn line(key: &[u8], prefix: &[u8], a: u64, b: Option<u64>) {
    let mut buf = [0u8; 128];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        for &x in bytes {
            if n < buf.len() {
                buf[n] = x;
                n += 1;
            }
        }
    };
    put(b"INFO\t");
    put(key);
    put(b"\t");
    put(prefix);
    put(digits(a).as_slice());
    if let Some(b) = b {
        put(b",");
        put(digits(b).as_slice());
    }
    put(b"\n");
    // SAFETY: writing `n` initialised bytes of a local to stdout.
    unsafe { libc::write(1, buf.as_ptr().cast(), n) };
}

/// The decimal digits of `v`, on the stack.
struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

fn digits(mut v: u64) -> Digits {
    let mut d = Digits {
        buf: [0; 20],
        start: 20,
    };
    loop {
        d.start -= 1;
        d.buf[d.start] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_decimal() {
        assert_eq!(digits(0).as_slice(), b"0");
        assert_eq!(digits(1750).as_slice(), b"1750");
        assert_eq!(digits(u64::MAX).as_slice(), b"18446744073709551615");
    }

    #[test]
    fn verdicts() {
        let info = |a: &str, b: &str| -> BTreeMap<String, String> {
            [("chain0", a), ("chain1", b)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let wall = Duration::from_millis(600);
        let stopped = Some(ExitOutcome::CpuTimeExceeded);
        let ok = verdict(&info("550,3", "540,3"), stopped, wall);
        assert_eq!(ok.status, cordon_core::ProbeStatus::Pass, "{}", ok.detail);
        let late = verdict(&info("800,4", "790,4"), stopped, wall);
        assert_eq!(late.status, cordon_core::ProbeStatus::Fail);
        let never = verdict(&info("880,4", "875,4"), Some(ExitOutcome::Exited(0)), wall);
        assert_eq!(never.status, cordon_core::ProbeStatus::Fail);
        let slow = verdict(
            &info("300,2", "300,2"),
            Some(ExitOutcome::DeadlineExceeded),
            wall,
        );
        assert_eq!(slow.status, cordon_core::ProbeStatus::Unreachable);
    }
}
