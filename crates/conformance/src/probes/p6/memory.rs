//! P6's sandbox-wide memory check, for a backend that claims `sandbox`
//! scope for `limit_memory`: every process of the sandbox together holds at
//! most `Limits::memory_bytes`, whatever kind of memory it is.
//!
//! A child of its own (mode `P6-memory`, so an OOM kill of the whole
//! sandbox takes nothing else with it) forks workers that each hold a
//! quarter of the limit (and no more than RLIMIT_FSIZE, so no per-process
//! or per-file limit stops any one of them), twice the limit together,
//! cycling through three kinds of memory, each mapped and touched so that
//! it shows in the worker's `/proc/<pid>/status`:
//! - anonymous memory (`RssAnon`);
//! - a memfd, `mmap(MAP_SHARED)` (`RssShmem`);
//! - a SysV shm segment, `shmat`ed and removed with `IPC_RMID` right away
//!   (`RssShmem`; it is freed with its last attachment, so nothing is left
//!   even without an IPC namespace).
//!
//! A worker whose kind the sandbox refuses outright (`EPERM`, `EACCES`,
//! `ENOSYS`) holds its share in anonymous memory instead, so the sandbox
//! always holds twice the limit unless a limit stops it.
//!
//! When every worker has said it holds its share or died, the child holds
//! and the **host** sums `RssAnon + RssShmem` over the live processes that
//! bear the child's token. Then the child ends the survivors with
//! `SIGTERM` and reports how each worker ended.
//!
//! - **Fail**: the host measured more than the limit + [`MARGIN`].
//! - **Pass**: it measured at most that, and at least one worker was
//!   killed by `SIGKILL` (the OOM killer's signal, mm/oom_kill.c: how a
//!   memory cgroup's limit ends a process) or refused with `ENOMEM`.
//!   Also a pass: the whole sandbox was killed by `SIGKILL` (the runner
//!   reports `MemoryExceeded`) before or after the hold, the OOM killer
//!   having picked the probe program itself — but only if the host's
//!   measurement, when it made one, was within the limit.
//! - Anything else is inconclusive (e.g. every worker says it holds its
//!   share, yet the host cannot see it).

use std::collections::BTreeMap;

use cordon_core::{CheckResult, ExitOutcome, Limits};

use crate::child::{errno, Reporter};
use crate::harness::{fail, pass, unreachable, ProbeContext, Hold};
use crate::inspect;

/// The check's name.
pub(crate) const NAME: &str = "sandbox-memory-limit";

/// What the host tolerates above the limit. The sum counts a page once per
/// process that maps it: the pages every worker shares copy-on-write with
/// the probe program it was forked from (its heap and stack, a few hundred
/// KiB to 2 MiB each) are counted once per worker. 32 MiB (1/8 of the
/// probe's 256 MiB) covers that for the eight workers with room to spare;
/// a sandbox without a sandbox-wide limit holds twice the limit, far above.
const MARGIN: u64 = 32 << 20;

/// Exit code of a worker whose allocation was refused with `ENOMEM`.
const REFUSED: i32 = 3;
/// Exit code of a worker whose allocation failed with another errno.
const FAILED: i32 = 4;

/// What the host measured at the hold.
struct Measured {
    bytes: u64,
    processes: usize,
}

/// The host's side: `None` when the backend does not claim the limit
/// sandbox-wide (the check is not run at all).
pub(crate) async fn host(ctx: &ProbeContext) -> Option<CheckResult> {
    if !ctx.scopes.memory.is_sandbox() {
        return None;
    }
    let limits = Limits::probe();
    let limit = limits.memory_bytes.unwrap_or(0);
    let args = vec![
        ("mem".to_string(), limit.to_string()),
        (
            "fsize".to_string(),
            limits.file_size_bytes.unwrap_or(0).to_string(),
        ),
    ];
    let mut measured: Option<Measured> = None;
    let mut on_hold = |h: &Hold<'_>| {
        if h.label == "smem" {
            measured = Some(measure(h.token));
            Vec::new()
        } else {
            vec![unreachable(NAME, format!("unexpected HOLD {}", h.label))]
        }
    };
    let spawned = match ctx.spawn("P6-memory", &args, Limits::default()) {
        Ok(s) => s,
        Err(e) => return Some(unreachable(NAME, format!("could not start: {e}"))),
    };
    let run = ctx.collect(spawned, &mut on_hold).await;
    if let Some(c) = run.checks.into_iter().next() {
        return Some(c);
    }
    Some(verdict(
        limit,
        measured,
        &run.info,
        run.outcome,
        run.stderr.trim(),
    ))
}

/// `RssAnon + RssShmem` of every live process bearing `token`.
fn measure(token: &str) -> Measured {
    let pids = inspect::token_pids(token);
    let kib = |st: &BTreeMap<String, String>, k: &str| -> u64 {
        st.get(k)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let bytes = pids
        .iter()
        .filter_map(|p| inspect::status(*p))
        .map(|st| (kib(&st, "RssAnon") + kib(&st, "RssShmem")) * 1024)
        .sum();
    Measured {
        bytes,
        processes: pids.len(),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / f64::from(1 << 20))
}

fn verdict(
    limit: u64,
    measured: Option<Measured>,
    info: &BTreeMap<String, String>,
    outcome: Option<ExitOutcome>,
    stderr: &str,
) -> CheckResult {
    let asked = info.get("smem-start").cloned().unwrap_or_default();
    let holding = info
        .get("smem-holding")
        .map(|h| format!("; holding at the hold: {h}"))
        .unwrap_or_default();
    let end = info.get("smem-end");
    // Only a kill the runner attributes to the memory limit (the backend's
    // OOM event with the SIGKILL): any other SIGKILL proves nothing.
    let oom_killed_all = outcome == Some(ExitOutcome::MemoryExceeded);
    let bound = limit + MARGIN;
    match measured {
        Some(m) if m.bytes > bound => fail(
            NAME,
            format!(
                "the host measured {} (RssAnon + RssShmem) in the sandbox's {} processes; the \
                 limit is {} (+ {} margin); asked: {asked}{holding}",
                mib(m.bytes),
                m.processes,
                mib(limit),
                mib(MARGIN)
            ),
        ),
        Some(m) => {
            let held = format!(
                "the host measured {} in the sandbox's {} processes at the hold (limit {} + {} \
                 margin); asked: {asked}{holding}",
                mib(m.bytes),
                m.processes,
                mib(limit),
                mib(MARGIN)
            );
            let count = |k: &str| -> u64 {
                end.and_then(|e| {
                    e.split(',')
                        .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                })
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
            };
            match end {
                Some(e) if count("killed") + count("refused") > 0 => {
                    // The workers' own report of being killed or refused:
                    // the host measured what they held, but not that.
                    let mut c = pass(NAME, format!("{held}; workers (as they report): {e}"));
                    c.evidence = cordon_core::Evidence::Child;
                    c
                }
                Some(e) => unreachable(
                    NAME,
                    format!(
                        "{held}; yet no worker was killed or refused ({e}): the host cannot see \
                         what they hold"
                    ),
                ),
                None if oom_killed_all => pass(
                    NAME,
                    format!("{held}; then the sandbox was killed by SIGKILL ({outcome:?})"),
                ),
                None => unreachable(
                    NAME,
                    format!(
                        "{held}; the child ended ({outcome:?}) before reporting its workers; \
                         stderr: {stderr}"
                    ),
                ),
            }
        }
        None if !asked.is_empty() && oom_killed_all => pass(
            NAME,
            format!(
                "the sandbox was killed by SIGKILL ({outcome:?}) while its workers allocated \
                 twice the limit of {} ({asked}), before the host could measure",
                mib(limit)
            ),
        ),
        None => unreachable(
            NAME,
            format!(
                "the child never reached its hold ({outcome:?}); asked: {asked}; stderr: {stderr}"
            ),
        ),
    }
}

fn num(args: &BTreeMap<String, String>, k: &str) -> u64 {
    args.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// What each worker allocates.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Anonymous,
    Memfd,
    SysvShm,
}

const KINDS: [Kind; 3] = [Kind::Anonymous, Kind::Memfd, Kind::SysvShm];

/// The child's side (mode `P6-memory`); see the module doc.
pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    let limit = num(args, "mem");
    let fsize = num(args, "fsize");
    let mut each = (limit / 4).max(1 << 20);
    if fsize > 0 {
        each = each.min(fsize);
    }
    let each = (each & !4095) as usize;
    let workers = (limit * 2).div_ceil(each as u64) as usize;
    r.info(
        "smem-start",
        format!(
            "{workers} workers of {each} bytes (anonymous, memfd, SysV shm in turn), {} together",
            workers as u64 * each as u64
        ),
    );
    // One pipe per worker: one byte when it holds its share, EOF if it
    // died first.
    let mut pids = Vec::with_capacity(workers);
    let mut reads = Vec::with_capacity(workers);
    for i in 0..workers {
        let mut fds = [0i32; 2];
        // SAFETY: pipe into a local array; fork of this single-threaded
        // process, the worker runs only raw syscalls and `_exit`s.
        unsafe {
            if libc::pipe(fds.as_mut_ptr()) != 0 {
                break;
            }
            let pid = libc::fork();
            if pid == 0 {
                libc::close(fds[0]);
                worker(KINDS[i % KINDS.len()], each, fds[1]);
            }
            libc::close(fds[1]);
            if pid < 0 {
                libc::close(fds[0]);
                break;
            }
            pids.push(pid);
            reads.push(fds[0]);
        }
    }
    let (mut holding, mut fell_back) = (0, 0);
    for fd in &reads {
        let mut b = 0u8;
        let n = loop {
            // SAFETY: one byte into a local from a pipe we own.
            let n = unsafe { libc::read(*fd, (&mut b as *mut u8).cast(), 1) };
            if n >= 0 || errno() != libc::EINTR {
                break n;
            }
        };
        if n == 1 {
            holding += 1;
            fell_back += usize::from(b == b'A');
        }
        // SAFETY: closing our own fd.
        unsafe { libc::close(*fd) };
    }
    r.info(
        "smem-holding",
        format!(
            "{holding} of {} workers ({fell_back} in anonymous memory: memfd or shm refused)",
            pids.len()
        ),
    );
    r.hold("smem");
    let (mut held, mut killed, mut refused, mut other) = (0, 0, 0, 0);
    for pid in &pids {
        // SAFETY: SIGTERM to our own worker (the OOM killer's SIGKILL is
        // what tells a killed one apart), then reaping it.
        let st = unsafe {
            libc::kill(*pid, libc::SIGTERM);
            let mut st = 0;
            while libc::waitpid(*pid, &mut st, 0) < 0 && errno() == libc::EINTR {}
            st
        };
        match (
            libc::WIFSIGNALED(st),
            libc::WTERMSIG(st),
            libc::WEXITSTATUS(st),
        ) {
            (true, libc::SIGTERM, _) => held += 1,
            (true, libc::SIGKILL, _) => killed += 1,
            (false, _, REFUSED) => refused += 1,
            _ => other += 1,
        }
    }
    r.info(
        "smem-end",
        format!("held={held},killed={killed},refused={refused},other={other}"),
    );
}

/// Ends a worker whose allocation failed, by its errno.
///
/// # Safety
/// As [`worker`].
unsafe fn give_up() -> ! {
    let code = if errno() == libc::ENOMEM {
        REFUSED
    } else {
        FAILED
    };
    // SAFETY: _exit ends the forked worker without running the host's
    // exit handlers.
    unsafe { libc::_exit(code) }
}

/// One worker: allocates `size` bytes of `kind` (anonymous memory if the
/// sandbox refuses that kind outright), touches every page, says so on
/// `ready` (`R`, or `A` for the fallback), and waits for its end. Never
/// returns.
///
/// # Safety
/// Only in a forked child of a single-threaded process: raw syscalls only.
unsafe fn worker(kind: Kind, size: usize, ready: i32) -> ! {
    // SAFETY: the caller guarantees a forked child of a single-threaded
    // process; every pointer below is one this worker mapped, `size` long.
    unsafe {
        // Released with SIGTERM whatever the host process did with it.
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let anonymous = || {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                rw,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        // A backend may refuse a kind of memory outright (seccomp, a policy):
        // the worker then holds its share in anonymous memory, so the sandbox
        // still holds twice the limit together, and says so.
        let refused_kind = |e: i32| [libc::EPERM, libc::EACCES, libc::ENOSYS].contains(&e);
        let mut said = b'R';
        let p: *mut libc::c_void = match kind {
            Kind::Anonymous => anonymous(),
            Kind::Memfd => {
                let fd = libc::memfd_create(c"cordon-probe".as_ptr(), libc::MFD_CLOEXEC);
                if fd < 0 && refused_kind(errno()) {
                    said = b'A';
                    anonymous()
                } else {
                    if fd < 0 || libc::ftruncate(fd, size as libc::off_t) != 0 {
                        give_up();
                    }
                    libc::mmap(std::ptr::null_mut(), size, rw, libc::MAP_SHARED, fd, 0)
                }
            }
            Kind::SysvShm => {
                let id = libc::shmget(libc::IPC_PRIVATE, size, libc::IPC_CREAT | 0o600);
                if id < 0 && refused_kind(errno()) {
                    said = b'A';
                    anonymous()
                } else {
                    if id < 0 {
                        give_up();
                    }
                    let p = libc::shmat(id, std::ptr::null(), 0);
                    let e = errno();
                    // Removed at once: freed with its last attachment (this
                    // worker's), even in the host's IPC namespace.
                    libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
                    if p as isize == -1 {
                        libc::_exit(if e == libc::ENOMEM { REFUSED } else { FAILED });
                    }
                    p
                }
            }
        };
        if p == libc::MAP_FAILED {
            give_up();
        }
        let mut off = 0;
        while off < size {
            std::ptr::write_volatile((p as *mut u8).add(off), 1);
            off += 4096;
        }
        libc::write(ready, (&said as *const u8).cast(), 1);
        loop {
            libc::pause();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_core::ProbeStatus;

    const LIMIT: u64 = 256 << 20;

    fn info(end: Option<&str>) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert("smem-start".to_string(), "8 workers".to_string());
        if let Some(e) = end {
            m.insert("smem-end".to_string(), e.to_string());
        }
        m
    }

    fn at(mib: u64) -> Option<Measured> {
        Some(Measured {
            bytes: mib << 20,
            processes: 9,
        })
    }

    #[test]
    fn verdicts() {
        let exited = Some(ExitOutcome::Exited(0));
        let killed = "held=3,killed=5,refused=0,other=0";
        let all_held = "held=8,killed=0,refused=0,other=0";
        let v = |m, end, outcome| verdict(LIMIT, m, &info(end), outcome, "").status;
        // Twice the limit held: a breach, however it ended.
        assert_eq!(v(at(513), Some(all_held), exited), ProbeStatus::Fail);
        assert_eq!(v(at(300), Some(killed), exited), ProbeStatus::Fail);
        // Within the limit because workers were killed or refused.
        assert_eq!(v(at(193), Some(killed), exited), ProbeStatus::Pass);
        let refused = "held=4,killed=0,refused=4,other=0";
        assert_eq!(v(at(257), Some(refused), exited), ProbeStatus::Pass);
        // Within the limit, yet nobody was stopped: the host is blind.
        assert_eq!(v(at(10), Some(all_held), exited), ProbeStatus::Unreachable);
        // The OOM killer took the whole sandbox, before or after the hold.
        let oom = Some(ExitOutcome::MemoryExceeded);
        assert_eq!(v(None, None, oom), ProbeStatus::Pass);
        assert_eq!(v(at(200), None, oom), ProbeStatus::Pass);
        // A SIGKILL no limit accounts for proves nothing.
        let sigkill = Some(ExitOutcome::Signaled(libc::SIGKILL));
        assert_eq!(v(None, None, sigkill), ProbeStatus::Unreachable);
        assert_eq!(v(at(200), None, sigkill), ProbeStatus::Unreachable);
        // Any other early end decides nothing.
        assert_eq!(v(None, None, exited), ProbeStatus::Unreachable);
        let deadline = Some(ExitOutcome::DeadlineExceeded);
        assert_eq!(v(at(200), None, deadline), ProbeStatus::Unreachable);
    }
}
