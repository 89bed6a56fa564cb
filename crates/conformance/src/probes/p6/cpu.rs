//! P6's sandbox-wide CPU check, for a backend that claims `sandbox` scope
//! for `limit_cpu`: the CPU time of every process of the sandbox together
//! stays within `Limits::cpu_ms`, though each process has its own
//! RLIMIT_CPU that a fork starts afresh.
//!
//! A child of its own (mode `P6-cpu`), with a CPU limit of [`LIMIT_MS`]
//! (short, to keep the probe short; its RLIMIT_CPU is then 1 s, the
//! least whole second), runs [`CHAINS`] chains of processes: each link
//! burns [`LINK_MS`] of CPU (a twentieth of its RLIMIT_CPU) and exits, and the
//! program, which ignores `SIGCHLD` so that the kernel reaps the links
//! without adding their time to anyone's, starts the next. Each link
//! reports its chain's total every [`STEP_MS`] of its own CPU time. Each
//! chain stops by itself at its share of [`CAP_MS`].
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
use crate::harness::{fail, pass, unreachable, ProbeContext, Hold};

/// The check's name.
pub(crate) const NAME: &str = "sandbox-cpu-limit";

/// The sandbox's CPU limit for this check (`Limits::cpu_ms`).
const LIMIT_MS: u64 = 200;
/// How many chains burn at once (the host has two cores).
const CHAINS: u64 = 2;
/// CPU time each link of a chain burns before it exits: several links of
/// each chain fit under the limit, so the sandbox's sum is what stops it.
const LINK_MS: u64 = 50;
/// How often (in a process's own CPU time) a chain reports its total.
const STEP_MS: u64 = 10;
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

/// The wall time the check may take: the chains need about
/// [`CAP_MS`] of CPU, which a loaded host may give them slowly (a host
/// where 6 processes share 2 cores gave them 900 ms in 5 s). The check
/// ends as soon as the sandbox is stopped or the chains reach their cap.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// The host's side: `None` when the backend does not claim the limit
/// sandbox-wide (the check is not run at all), and in the baseline.
///
/// The baseline would always burn [`CAP_MS`] for nothing: without a
/// backend the runner has no sandbox CPU time to watch
/// (`SandboxResources::cpu_time` comes from the backend's `wrap`), and no
/// process of a chain comes near any RLIMIT_CPU (at least 1 s, and a
/// fork starts afresh), so the check cannot pass there; not running it
/// leaves it unmarked, as a failing run would.
pub(crate) async fn host(ctx: &ProbeContext) -> Option<CheckResult> {
    if !ctx.scopes.cpu.is_sandbox() || ctx.baseline {
        return None;
    }
    let limits = Limits {
        cpu_ms: Some(LIMIT_MS),
        deadline: Some(DEADLINE),
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
        "{CHAINS} chains of {links} auto-reaped processes, each burning {LINK_MS} ms (RLIMIT_CPU 1 s \
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
        // The stop is the host's to see; that the chains stayed within the
        // limit rests on what they reported.
        let mut c = pass(NAME, format!("the sandbox was stopped: {ran}"));
        c.evidence = cordon_core::Evidence::Child;
        c
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

/// The child's side (mode `P6-cpu`): runs the chains, one link at a time
/// per chain, until each reaches its cap or the sandbox is stopped.
///
/// The program ignores `SIGCHLD`, so the kernel reaps each link the moment
/// it exits and its CPU time reaches no parent's `cutime`: a backend that
/// sums the CPU time of the live process tree from `/proc` never sees more
/// than the running links, and only accounting for the sandbox as a whole
/// (a cgroup) stops the chains.
pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let plan = Plan {
        link_ns: num(args, "link_ms") * 1_000_000,
        step_ns: num(args, "step_ms").max(1) * 1_000_000,
        cap_ns: num(args, "cap_ms") * 1_000_000,
    };
    let chains = num(args, "chains").min(MAX_CHAINS as u64) as usize;
    r.info("cpu-chains", chains);
    // SAFETY: setting this single-threaded process's SIGCHLD disposition.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    // Per chain: the read end of the running link's pipe (EOF once the
    // link has exited) and the CPU time its finished links burned.
    let mut running = [-1i32; MAX_CHAINS];
    let mut before = [0u64; MAX_CHAINS];
    let mut links = [0u64; MAX_CHAINS];
    loop {
        for c in 0..chains {
            if running[c] >= 0 || before[c] >= plan.cap_ns {
                continue;
            }
            links[c] += 1;
            match start_link(c as u64, before[c], links[c], &plan) {
                Ok(fd) => running[c] = fd,
                Err(e) => {
                    r.info("chain-error", format!("fork: errno {e}"));
                    before[c] = plan.cap_ns;
                }
            }
        }
        let mut polls = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        }; MAX_CHAINS];
        for c in 0..chains {
            polls[c].fd = running[c];
        }
        if running[..chains].iter().all(|fd| *fd < 0) {
            break;
        }
        // SAFETY: polling our own pipe fds (a negative fd is ignored).
        unsafe { libc::poll(polls.as_mut_ptr(), chains as libc::nfds_t, 1000) };
        for c in 0..chains {
            if polls[c].revents == 0 {
                continue;
            }
            let mut b = 0u8;
            // SAFETY: reading one byte from our own pipe; 0 is EOF.
            if unsafe { libc::read(running[c], (&mut b as *mut u8).cast(), 1) } == 0 {
                // SAFETY: closing our own read end.
                unsafe { libc::close(running[c]) };
                running[c] = -1;
                before[c] += plan.link_ns;
            }
        }
    }
    r.info("cpu-chains-ended", "on their own");
}

/// How many chains the child runs at most.
const MAX_CHAINS: usize = 8;

/// Forks one link of chain `c`, which holds the write end of a fresh pipe
/// until it exits; returns the read end, or the errno.
fn start_link(c: u64, before: u64, link: u64, plan: &Plan) -> Result<i32, i32> {
    let mut fds = [0i32; 2];
    // SAFETY: a pipe into a local array; fork of this single-threaded
    // process, whose child runs only raw syscalls and `_exit`s.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(errno());
        }
        let pid = libc::fork();
        if pid == 0 {
            libc::close(fds[0]);
            burn(c, before, link, plan);
        }
        let e = errno();
        libc::close(fds[1]);
        if pid < 0 {
            libc::close(fds[0]);
            return Err(e);
        }
    }
    Ok(fds[0])
}

/// What each link of a chain does, in ns of CPU time.
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

/// One link: burns `link_ns` of CPU (or up to the chain's cap), reporting
/// the chain's total every step; never returns. Runs in a forked child of
/// a single-threaded process: raw syscalls and stack buffers only.
fn burn(c: u64, before: u64, link: u64, plan: &Plan) -> ! {
    let mut next_report = plan.step_ns;
    let mut x = 0u64;
    loop {
        for i in 0..20_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let own = own_cpu_ns();
        let done = own >= plan.link_ns || before + own >= plan.cap_ns;
        if own >= next_report || done {
            report(c, before + own, link);
            next_report = own + plan.step_ns;
        }
        if done {
            // SAFETY: ending this process.
            unsafe { libc::_exit(0) };
        }
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
        // Limit 200 ms, slack 500 ms: at most 700 ms reported together.
        let ok = verdict(&info("160,3", "150,3"), stopped, wall);
        assert_eq!(ok.status, cordon_core::ProbeStatus::Pass, "{}", ok.detail);
        let late = verdict(&info("360,7", "350,7"), stopped, wall);
        assert_eq!(late.status, cordon_core::ProbeStatus::Fail);
        let never = verdict(&info("370,8", "370,8"), Some(ExitOutcome::Exited(0)), wall);
        assert_eq!(never.status, cordon_core::ProbeStatus::Fail);
        let slow = verdict(
            &info("60,2", "60,2"),
            Some(ExitOutcome::DeadlineExceeded),
            wall,
        );
        assert_eq!(slow.status, cordon_core::ProbeStatus::Unreachable);
    }
}
