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
//! - **Fail**: the chains report more than the limit + the slack of CPU
//!   together, however the sandbox ended; or the watch's last read at or
//!   under the limit counted less than the chains had reported by then
//!   (less [`MARGIN_MS`]): the backend undercounts, and the slack it earns
//!   by reading high later would be unearned.
//! - **Pass**: they report at most that, and the sandbox was ended for its
//!   CPU time: the runner's `CpuTimeExceeded` (which the host observes)
//!   once they reported at least half the limit, or the program killed by
//!   `SIGXCPU` or `SIGKILL` within [`MARGIN_MS`] of the limit.
//! - Anything else is inconclusive: the wall-clock deadline came first, a
//!   fork failed, a chain reported nothing or could not read its clock, a
//!   stop before the chains came near the limit (a wall-clock kill), a
//!   watch so late that the slack passes [`MAX_SLACK_MS`], or an overshoot
//!   under the runner's fallback watch, which measures no lateness.
//!
//! Only the runner's own kill earns slack beyond [`MARGIN_MS`]: a sandbox
//! ended by `SIGKILL` or `SIGXCPU` from anywhere else (a backend's own
//! enforcement, or one that only kills on wall-clock time) has no measured
//! lateness to excuse an overshoot, so it must stop the chains within the
//! margin.
//!
//! The slack is measured, not assumed. The runner's watch reads the
//! sandbox's CPU time on a thread of its own; when it kills, it reports
//! the span since its last read at or under the limit
//! (`CpuWatchStats::final_span`) and what the backend counted the sandbox
//! burn in it, by a read right after the kill (`burn_to_kill`; failing
//! that, up to the read that found it over, `final_burn`, plus the time
//! from that read to the kill, `read_to_kill`, times the CPUs). Past the
//! limit the sandbox can have used at most the span times
//! `min(chains, CPUs)`, and at most that burn as the backend counts it;
//! the slack is the smaller, plus [`MARGIN_MS`]. A busy host that
//! delays the watch widens it by what the delay let the sandbox burn, and
//! by no more. A backend that does not count the sandbox whole (a sum that
//! misses auto-reaped processes) counts a smaller burn than the chains
//! report and reaches the limit late or never: it fails whatever the
//! host's load.
//!
//! The totals are the chains' own `CLOCK_PROCESS_CPUTIME_ID`: they leave
//! out the program and the backend's helpers and at most one step of each
//! running link, so they can only undercount what the sandbox used.

use std::collections::BTreeMap;
use std::time::Duration;

use cordon_core::{CheckResult, ExitOutcome, Limits};


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
/// What the chains may report above the limit besides what the watch's
/// unwatched span allows: the kernel adds a running task's time to its
/// cgroup's count at the next tick or switch (up to 10 ms per CPU behind
/// the read), and the kill reaches a running link a moment after the read.
const MARGIN_MS: u64 = 40;
/// The most slack the watch's figures may earn: a watch later than this
/// lets the check decide nothing.
const MAX_SLACK_MS: u64 = 2 * 150;
/// Where the chains stop by themselves, for all chains together: the limit
/// plus room for the most slack. A sandbox that is never stopped fails,
/// without burning more than that.
const CAP_MS: u64 = LIMIT_MS + MAX_SLACK_MS + MARGIN_MS;

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
    let last_read = run.cpu_watch.and_then(|w| w.last_read);
    let figures = run.cpu_watch.filter(|w| w.fired).map(|w| Figures {
        span: w.final_span,
        burn: w.final_burn,
        read_to_kill: w.read_to_kill,
        burn_to_kill: w.burn_to_kill,
    });
    if let Some(c) = run.checks.into_iter().next() {
        return Some(c);
    }
    let mut reports = Reports::from_info(&run.info);
    // What the chains had reported when the watch last read the sandbox
    // at or under the limit (lines the host had read by then, so no more
    // than they had burned), against what that read counted.
    reports.by_last_read = last_read.map(|(at, counted)| {
        let mut last = [0u64; CHAINS as usize];
        for (seen, k, v) in &run.timeline {
            let chain = k.strip_prefix("chain").and_then(|c| c.parse::<usize>().ok());
            if let (true, Some(c)) = (*seen <= at, chain.filter(|c| *c < last.len())) {
                last[c] = ms_of(v);
            }
        }
        (last.iter().sum(), counted.as_millis() as u64)
    });
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    Some(verdict(&reports, run.outcome, started.elapsed(), figures, cpus))
}

/// The total of a `chain<c>` report (`<ms>,<link>`).
fn ms_of(v: &str) -> u64 {
    v.split_once(',')
        .and_then(|(ms, _)| ms.parse().ok())
        .unwrap_or(0)
}

/// What the chains reported.
#[derive(Debug, Default)]
struct Reports {
    /// Their last totals, summed.
    total: u64,
    /// Links started, summed.
    links: u64,
    /// Chains that reported nothing.
    silent: u64,
    /// Why a chain stopped early, if one did.
    error: Option<String>,
    /// The chains' totals the host had read by the watch's last read at
    /// or under the limit, and what that read counted (ms).
    by_last_read: Option<(u64, u64)>,
}

impl Reports {
    fn from_info(info: &BTreeMap<String, String>) -> Reports {
        let mut r = Reports {
            error: info.get("chain-error").cloned(),
            ..Reports::default()
        };
        for c in 0..CHAINS {
            match info.get(&format!("chain{c}")).and_then(|v| v.split_once(',')) {
                Some((ms, link)) => {
                    r.total += ms.parse::<u64>().unwrap_or(0);
                    r.links += link.parse::<u64>().unwrap_or(0);
                }
                None => r.silent += 1,
            }
        }
        r
    }
}

/// What the runner's watch saw when it killed the sandbox
/// (`CpuWatchStats`).
#[derive(Debug, Clone, Copy)]
struct Figures {
    span: Duration,
    burn: Duration,
    read_to_kill: Duration,
    burn_to_kill: Option<Duration>,
}

/// The check from the chains' reports, how the sandbox ended, the wall
/// time, the watch's figures and the host's CPU count.
fn verdict(
    r: &Reports,
    outcome: Option<ExitOutcome>,
    wall: Duration,
    figures: Option<Figures>,
    cpus: u64,
) -> CheckResult {
    let total = r.total;
    let ms = |d: Duration| d.as_millis() as u64;
    let n = CHAINS.min(cpus.max(1));
    // The watch's figures count only where the stop was its kill.
    let watch_killed = matches!(outcome, Some(ExitOutcome::CpuTimeExceeded));
    let (late, how) = match figures.filter(|_| watch_killed) {
        Some(f) => {
            let by_span = n * ms(f.span);
            let by_burn = f
                .burn_to_kill
                .map_or(ms(f.burn) + n * ms(f.read_to_kill), ms);
            (
                by_burn.min(by_span),
                format!(
                    "the runner's watch killed it {} ms after its last read at or under the \
                     limit, counting {} ms burned to its next read ({} ms before the kill) and \
                     {} to the kill",
                    ms(f.span),
                    ms(f.burn),
                    ms(f.read_to_kill),
                    f.burn_to_kill
                        .map_or("no read".to_string(), |b| format!("{} ms", ms(b))),
                ),
            )
        }
        None => (
            0,
            "no kill of the runner's watch: no lateness to allow".to_string(),
        ),
    };
    let slack = late + MARGIN_MS;
    let ran = format!(
        "{CHAINS} chains of {} auto-reaped processes, each burning {LINK_MS} ms (RLIMIT_CPU 1 s \
         each), reported {total} ms of CPU together in {:.1} s (limit {LIMIT_MS} ms + {slack} ms \
         slack on {n} CPUs: {how}; + {MARGIN_MS} ms); outcome {outcome:?}",
        r.links,
        wall.as_secs_f64(),
    );
    let stopped = matches!(
        outcome,
        Some(
            ExitOutcome::CpuTimeExceeded
                | ExitOutcome::Signaled(libc::SIGXCPU)
                | ExitOutcome::Signaled(libc::SIGKILL)
        )
    );
    // The least the chains must have reported for a stop to be for CPU
    // time: the backend counts more than they report (the program, their
    // start-up, one step per running link), but not half the limit more;
    // a stop by anyone else must come within the margin of the limit.
    let least = if watch_killed {
        LIMIT_MS / 2
    } else {
        LIMIT_MS - MARGIN_MS
    };
    if let Some(e) = &r.error {
        return unreachable(NAME, format!("a chain stopped early ({e}): {ran}"));
    }
    if r.silent > 0 {
        return unreachable(NAME, format!("{} chains reported nothing: {ran}", r.silent));
    }
    if let Some((reported, counted)) = r.by_last_read {
        if reported > counted + MARGIN_MS {
            return fail(
                NAME,
                format!(
                    "the backend counted {counted} ms at the watch's last read at or under the \
                     limit, when the chains had already reported {reported} ms: it undercounts \
                     the sandbox's CPU time; {ran}"
                ),
            );
        }
    }
    if total > LIMIT_MS + slack {
        if watch_killed && figures.is_none() {
            // The runner's fallback watch, which reports no figures: its
            // lateness is unmeasured.
            return unreachable(
                NAME,
                format!("the runner's watch reported no figures to judge the overshoot: {ran}"),
            );
        }
        fail(NAME, ran)
    } else if stopped && late >= MAX_SLACK_MS {
        // The chains stop at their cap: a slack that reaches it could not
        // tell a sandbox never stopped from one stopped in time.
        unreachable(
            NAME,
            format!("the runner's watch was too late for the check to decide: {ran}"),
        )
    } else if stopped && total >= least {
        // The stop is the host's to see; that the chains stayed within the
        // limit rests on what they reported.
        let mut c = pass(NAME, format!("the sandbox was stopped: {ran}"));
        c.evidence = cordon_core::Evidence::Child;
        c
    } else if stopped {
        unreachable(
            NAME,
            format!(
                "the sandbox was stopped before its chains reported {least} ms (not for its CPU \
                 time, or by a backend that overcounts): {ran}"
            ),
        )
    } else {
        unreachable(
            NAME,
            format!("the sandbox ended before its CPU time reached the limit: {ran}"),
        )
    }
}

mod chains;
pub(crate) use chains::child;

#[cfg(test)]
mod tests {
    use super::*;


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
        let watch = |span, burn, read_to_kill| {
            Some(Figures {
                span: Duration::from_millis(span),
                burn: Duration::from_millis(burn),
                read_to_kill: Duration::from_millis(read_to_kill),
                burn_to_kill: None,
            })
        };
        let counted = |span, burn_to_kill| {
            Some(Figures {
                span: Duration::from_millis(span),
                burn: Duration::ZERO,
                read_to_kill: Duration::from_millis(span),
                burn_to_kill: Some(Duration::from_millis(burn_to_kill)),
            })
        };
        let status = |a, b, outcome, figures, cpus| {
            let c = verdict(&Reports::from_info(&info(a, b)), outcome, wall, figures, cpus);
            eprintln!("{}", c.detail);
            c.status
        };
        use cordon_core::ProbeStatus::{Fail, Pass, Unreachable};
        // Limit 200 ms; a watch on time (105 ms) on 2 CPUs that counted
        // 200 ms burned: the span bounds it, 2 × 105 + 40 ms slack.
        let on_time = watch(105, 200, 1);
        assert_eq!(status("220,5", "220,5", stopped, on_time, 2), Pass);
        assert_eq!(status("230,5", "230,5", stopped, on_time, 2), Fail);
        // On one CPU the chains burn half as much in the same span.
        assert_eq!(status("180,4", "180,4", stopped, on_time, 1), Fail);
        // A watch delayed to 400 ms on a loaded host where the sandbox
        // burned 60 ms in it (+ 2 × 2 ms to the kill): 104 ms slack.
        let late = watch(400, 60, 2);
        assert_eq!(status("150,3", "150,3", stopped, late, 2), Pass);
        assert_eq!(status("160,3", "160,3", stopped, late, 2), Fail);
        // The read after the kill counted 120 ms in a 320 ms span whose
        // read took 216 ms: 160 ms slack, whatever the read's delay.
        let slow_read = counted(320, 120);
        assert_eq!(status("180,4", "180,4", stopped, slow_read, 2), Pass);
        assert_eq!(status("190,4", "190,4", stopped, slow_read, 2), Fail);
        // No figures (the runner's fallback watch): the margin only, and
        // an overshoot past it is unmeasured, not proven.
        assert_eq!(status("130,5", "130,5", stopped, None, 2), Unreachable);
        assert_eq!(status("120,4", "120,4", stopped, None, 2), Pass);
        // A kill that is not the runner's watch's (a backend that only
        // kills on wall-clock time, 200 ms in, when the chains had burned
        // 400 ms) earns no slack, whatever the watch's figures say.
        let wall_killed = Some(ExitOutcome::Signaled(libc::SIGKILL));
        assert_eq!(status("200,4", "200,4", wall_killed, on_time, 2), Fail);
        assert_eq!(status("110,3", "110,3", wall_killed, on_time, 2), Pass);
        // Stopped early by anyone else (a wall-clock kill on a loaded
        // host, when the chains had burned 80 ms): not for CPU time.
        assert_eq!(status("40,1", "40,1", wall_killed, None, 2), Unreachable);
        // Even the runner's kill must come near the limit.
        assert_eq!(status("30,1", "30,1", stopped, on_time, 2), Unreachable);
        // A chain that reported nothing, or could not read its clock.
        let one = |v: &str| -> BTreeMap<String, String> {
            [("chain0".to_string(), v.to_string())].into_iter().collect()
        };
        let r = Reports::from_info(&one("200,4"));
        assert_eq!(verdict(&r, stopped, wall, on_time, 2).status, Unreachable);
        let mut broken = info("0,1", "0,1");
        broken.insert("chain-error".into(), "clock_gettime failed in link 1".into());
        let r = Reports::from_info(&broken);
        assert_eq!(verdict(&r, wall_killed, wall, None, 2).status, Unreachable);
        // The watch's last read at or under the limit counted 0 ms when
        // the chains had reported 150 (a backend that shapes its count so
        // the runner kills late, with a large burn to the kill): it
        // undercounts, whatever the slack.
        let shaped = |reported, at_read| {
            let mut r = Reports::from_info(&info("100,2", "100,2"));
            r.by_last_read = Some((reported, at_read));
            verdict(&r, stopped, wall, counted(100, 10_000), 2).status
        };
        assert_eq!(shaped(150, 0), Fail);
        // An honest count is at least what the chains reported.
        assert_eq!(shaped(90, 120), Pass);
        // A watch late by more than the most slack: undecidable.
        let too_late = watch(400, 320, 1);
        assert_eq!(status("100,2", "100,2", stopped, too_late, 2), Unreachable);
        // A backend that counts half of what the chains burn: it fires
        // when they burned 400 ms, having counted 20 ms of the last span.
        let undercounts = watch(105, 20, 1);
        assert_eq!(status("200,4", "200,4", stopped, undercounts, 2), Fail);
        // A watch so late, with so much counted, that the slack reaches
        // the cap: undecidable.
        let starved = watch(2000, 600, 1);
        assert_eq!(status("100,2", "100,2", stopped, starved, 2), Unreachable);
        // Never stopped: the chains reach their cap and fail.
        let never = Some(ExitOutcome::Exited(0));
        assert_eq!(status("370,8", "370,8", never, on_time, 2), Fail);
        let slow = Some(ExitOutcome::DeadlineExceeded);
        assert_eq!(status("60,2", "60,2", slow, None, 2), Unreachable);
    }
}
