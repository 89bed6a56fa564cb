//! P6 — resource limits, with the probe limits (64 processes, 256 MiB,
//! 64 open files, 2 s CPU, 64 MiB files): a fork loop stops at the process
//! limit; touching memory beyond the limit fails or kills the child;
//! opening fds beyond the limit fails; the CPU and file-size limits are in
//! force and cannot be raised; when the wall-clock deadline fires the whole
//! tree dies, including a grandchild that called `setsid()`.

use std::collections::BTreeMap;
use std::time::Duration;

use cordon_core::{CheckResult, ExitOutcome, Limits, ProbeStatus};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::child::{errno, errno_name, Reporter};
use crate::harness::{fail, pass, unreachable, Ctx};
use crate::inspect::alive;

/// Extra processes tolerated above the limit (the probe itself).
const PROC_SLACK: u64 = 2;

pub(crate) async fn host(ctx: &Ctx) -> Vec<CheckResult> {
    let limits = Limits::probe();
    let args = vec![
        (
            "procs".to_string(),
            limits.max_processes.unwrap_or(0).to_string(),
        ),
        (
            "mem".to_string(),
            limits.memory_bytes.unwrap_or(0).to_string(),
        ),
        (
            "fds".to_string(),
            limits.open_files.unwrap_or(0).to_string(),
        ),
        (
            "cpu".to_string(),
            limits.cpu_seconds.unwrap_or(0).to_string(),
        ),
        (
            "fsize".to_string(),
            limits.file_size_bytes.unwrap_or(0).to_string(),
        ),
    ];
    let run = ctx.run("P6", &args).await;
    let killed_touching = run.info.contains_key("mem-touching")
        && !run.checks.iter().any(|c| c.name == "memory-limit")
        && matches!(run.outcome, Some(ExitOutcome::Signaled(_)));
    let mut checks = Vec::new();
    if killed_touching {
        checks.push(pass(
            "memory-limit",
            "the child was killed while touching memory beyond the limit",
        ));
        checks.extend(run.checks);
    } else {
        checks.extend(run.into_checks());
    }
    checks.push(deadline_tree(ctx).await);
    checks
}

/// Spawns a child whose grandchild calls `setsid()`, lets the deadline fire,
/// and checks from the host that the grandchild is gone.
async fn deadline_tree(ctx: &Ctx) -> CheckResult {
    const NAME: &str = "deadline-kills-tree";
    let limits = Limits {
        deadline: Some(Duration::from_millis(150)),
        ..Limits::default()
    };
    let mut child = match ctx.spawn("P6-tree", &[], limits) {
        Ok(c) => c.child,
        Err(e) => return unreachable(NAME, format!("could not start: {e}")),
    };
    let mut grandchild = None;
    let mut setsid = String::new();
    if let Some(stdout) = child.stdout.take() {
        let mut lines = BufReader::new(stdout).lines();
        let until = tokio::time::Instant::now() + ctx.timeout;
        while let Ok(Ok(Some(line))) = tokio::time::timeout_at(until, lines.next_line()).await {
            let parts: Vec<&str> = line.split('\t').collect();
            match parts.as_slice() {
                ["INFO", "grandchild", pid] => grandchild = pid.parse::<i32>().ok(),
                ["INFO", "setsid", r] => setsid = r.to_string(),
                _ => {}
            }
            if grandchild.is_some() && !setsid.is_empty() {
                break;
            }
        }
    }
    let outcome = child.wait().await;
    let Some(gpid) = grandchild else {
        return unreachable(
            NAME,
            format!("the child reported no grandchild ({outcome:?})"),
        );
    };
    if !matches!(outcome, Ok(ExitOutcome::DeadlineExceeded)) {
        return unreachable(
            NAME,
            format!("expected the deadline to fire, got {outcome:?}"),
        );
    }
    for _ in 0..50 {
        if !alive(gpid) {
            return pass(
                NAME,
                format!("grandchild gone after the deadline (its setsid(): {setsid})"),
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SAFETY: killing the orphan the breach left behind.
    unsafe { libc::kill(gpid, libc::SIGKILL) };
    fail(
        NAME,
        format!("grandchild {gpid} survived the deadline (its setsid(): {setsid})"),
    )
}

fn num(args: &BTreeMap<String, String>, k: &str) -> u64 {
    args.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

pub(crate) fn child(r: &mut Reporter, args: &BTreeMap<String, String>) {
    open_files(r, num(args, "fds"));
    cpu(r, num(args, "cpu"));
    file_size(r, num(args, "fsize"));
    fork_loop(r, num(args, "procs"));
    // Last: a backend may enforce this by killing us.
    memory(r, num(args, "mem"));
}

fn open_files(r: &mut Reporter, limit: u64) {
    let cap = limit * 2 + 16;
    let mut fds = Vec::new();
    let mut err = 0;
    while (fds.len() as u64) < cap {
        // SAFETY: dup of stdout.
        let fd = unsafe { libc::fcntl(1, libc::F_DUPFD_CLOEXEC, 3) };
        if fd < 0 {
            err = errno();
            break;
        }
        fds.push(fd);
    }
    let total = fds.len() as u64 + 3;
    for fd in fds {
        unsafe { libc::close(fd) };
    }
    if err == libc::EMFILE && total <= limit {
        r.check(
            "fd-limit",
            ProbeStatus::Pass,
            format!("stopped at {total} open fds (limit {limit})"),
        );
    } else if err == 0 || total > limit {
        r.check(
            "fd-limit",
            ProbeStatus::Fail,
            format!("opened {total} fds; limit is {limit}"),
        );
    } else {
        r.check(
            "fd-limit",
            ProbeStatus::Unreachable,
            format!("stopped by {} at {total}", errno_name(err)),
        );
    }
}

fn cpu(r: &mut Reporter, limit: u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe { libc::getrlimit(libc::RLIMIT_CPU, &mut rl) };
    if rl.rlim_cur > limit || rl.rlim_max > limit {
        r.check(
            "cpu-limit",
            ProbeStatus::Fail,
            format!(
                "RLIMIT_CPU is {}/{}; want at most {limit}",
                rl.rlim_cur, rl.rlim_max
            ),
        );
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: rl.rlim_max + 1,
        rlim_max: rl.rlim_max + 1,
    };
    if unsafe { libc::setrlimit(libc::RLIMIT_CPU, &raised) } == 0 {
        r.check(
            "cpu-limit",
            ProbeStatus::Fail,
            "the CPU limit could be raised",
        );
    } else {
        r.check(
            "cpu-limit",
            ProbeStatus::Pass,
            format!("RLIMIT_CPU {}s, cannot be raised", rl.rlim_max),
        );
    }
}

fn file_size(r: &mut Reporter, limit: u64) {
    // SAFETY: ignoring SIGXFSZ so the write fails with EFBIG instead.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let res = crate::child::open("big", libc::O_WRONLY | libc::O_CREAT).and_then(|fd| {
        // SAFETY: one byte past the limit, from a static buffer.
        let n = unsafe { libc::pwrite(fd, b"x".as_ptr().cast(), 1, limit as libc::off_t) };
        let e = errno();
        crate::child::close(fd);
        if n == 1 {
            Ok(format!("wrote at offset {limit}"))
        } else {
            Err(e)
        }
    });
    let _ = std::fs::remove_file("big");
    r.forbidden("file-size-limit", res, &[libc::EFBIG]);
}

fn fork_loop(r: &mut Reporter, limit: u64) {
    let cap = limit * 2 + 16;
    let mut pids = Vec::new();
    let mut err = 0;
    while (pids.len() as u64) < cap {
        // SAFETY: the forked child only sleeps until killed.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            err = errno();
            break;
        }
        if pid == 0 {
            loop {
                unsafe { libc::pause() };
            }
        }
        pids.push(pid);
    }
    for pid in &pids {
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    for pid in &pids {
        let mut st = 0;
        unsafe { libc::waitpid(*pid, &mut st, 0) };
    }
    let n = pids.len() as u64 + 1;
    if err == libc::EAGAIN && n <= limit + PROC_SLACK {
        r.check(
            "process-limit",
            ProbeStatus::Pass,
            format!("fork stopped at {n} processes (limit {limit})"),
        );
    } else if err == 0 || n > limit + PROC_SLACK {
        r.check(
            "process-limit",
            ProbeStatus::Fail,
            format!("reached {n} processes; limit is {limit}"),
        );
    } else {
        r.check(
            "process-limit",
            ProbeStatus::Unreachable,
            format!("fork failed with {} at {n}", errno_name(err)),
        );
    }
}

fn memory(r: &mut Reporter, limit: u64) {
    let size = (limit * 2) as usize;
    // SAFETY: anonymous private mapping, unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = errno();
        let status = if e == libc::ENOMEM {
            ProbeStatus::Pass
        } else {
            ProbeStatus::Unreachable
        };
        r.check(
            "memory-limit",
            status,
            format!("mapping {size} bytes failed ({})", errno_name(e)),
        );
        return;
    }
    r.info("mem-touching", size);
    let page = 4096;
    let mut off = 0;
    while off < size {
        // SAFETY: within the mapping.
        unsafe { *(p as *mut u8).add(off) = 1 };
        off += page;
    }
    unsafe { libc::munmap(p, size) };
    r.check(
        "memory-limit",
        ProbeStatus::Fail,
        format!("touched {size} bytes; limit is {limit}"),
    );
}

/// The child of the deadline check: forks a grandchild that tries to leave
/// the process group with `setsid()`, then both wait to be killed.
pub(crate) fn tree(r: &mut Reporter) {
    let mut fds = [0i32; 2];
    // SAFETY: pipe/fork/setsid; the grandchild writes one byte and sleeps.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            r.info("setsid", "pipe failed");
            return;
        }
        let pid = libc::fork();
        if pid == 0 {
            let rc = libc::setsid();
            let b: u8 = if rc >= 0 { b'y' } else { b'n' };
            libc::write(fds[1], (&b as *const u8).cast(), 1);
            loop {
                libc::pause();
            }
        }
        if pid < 0 {
            r.info("setsid", format!("fork failed: {}", errno_name(errno())));
            return;
        }
        let mut b = 0u8;
        libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
        r.info("setsid", if b == b'y' { "succeeded" } else { "refused" });
        r.info("grandchild", pid);
        loop {
            libc::pause();
        }
    }
}
