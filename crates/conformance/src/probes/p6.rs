//! P6 — resource limits, with the probe limits (64 processes, 256 MiB,
//! 64 open files, 2 s CPU, 64 MiB files, 64 MiB scratch), each verified by
//! the host while the child is held:
//! - the child opens fds until refused: the host counts the program's
//!   `/proc/<pid>/fd` entries (at most the limit);
//! - the child forks until refused: the host counts the live processes that
//!   bear its token (at most the limit, plus the probe);
//! - the child tries to raise its CPU limit and writes one byte past the
//!   file-size limit: the host reads `/proc/<pid>/limits` (CPU time and
//!   file size at most the limits) and the size of the file in scratch;
//! - then, after the positive controls, a forked child touches more memory
//!   than the limit; the limit holds if `mmap` is refused with `ENOMEM`
//!   (`RLIMIT_AS` or `RLIMIT_DATA`: `may_expand_vm()`, mm/mmap.c) or the toucher is killed
//!   by `SIGKILL`, the OOM killer's signal (mm/oom_kill.c), which is how a
//!   memory cgroup's limit ends a process. Any other end is inconclusive.
//!
//! Those are the per-process checks every backend gets. Memory, CPU and
//! disk are also checked **at the scope the backend claims** in its host
//! facts (`limit_memory`, `limit_cpu`, `limit_disk`; see `scope.rs`): a
//! backend that claims `sandbox` scope gets the sandbox-wide checks and
//! fails P6 if it does not hold them; for one that says `per-process`, or
//! nothing, they are not run, and the per-process checks' details say so.
//! - `sandbox-memory-limit` (`p6/memory.rs`): workers holding twice the
//!   limit together in anonymous memory, memfds and SysV shm; the host
//!   sums what the sandbox's processes hold;
//! - `sandbox-cpu-limit` (`p6/cpu.rs`): chains of processes that each stay
//!   far below RLIMIT_CPU and are reaped by the kernel (the program
//!   ignores `SIGCHLD`, so no sum over the live process tree sees them);
//!   the runner must stop the sandbox at the limit for all together;
//! - `sandbox-disk-limit` (`p6/disk.rs`): files each below RLIMIT_FSIZE
//!   written into a discarded scratch; the host sums what the scratch
//!   holds.
//!
//! Two more checks watch the process tree from the host, finding it by the
//! token every process of the probe carries: when the wall-clock deadline
//! fires the whole tree dies, including a grandchild that tried `setsid()`;
//! and when the host SIGKILLs *only the pid it spawned* (as happens when
//! the process holding a sandbox dies), nothing of the sandbox survives.

pub(crate) mod cpu;
mod disk;
pub(crate) mod memory;

use std::collections::BTreeMap;
use std::time::Duration;

use cordon_core::{CheckResult, Evidence, ExitOutcome, Limits, ProbeId, ProbeStatus};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::child::{errno, errno_name, Reporter};
use crate::harness::{fail, kill_token_survivors, pass, unreachable, verdict, ProbeContext, Hold, Spawned};
use crate::inspect;
use crate::registry::{manifest, HostConditions, Manifest, Probe, ProbeArgs};

/// P6 in the registry (`probes/mod.rs`).
pub(crate) struct P6;

#[async_trait::async_trait]
impl Probe for P6 {
    fn id(&self) -> ProbeId {
        ProbeId::P6
    }

    fn title(&self) -> &'static str {
        "Resource limits"
    }

    fn checks(&self, host: &HostConditions) -> Manifest {
        let mut m = manifest(CHECKS);
        for (claimed, name) in [
            (host.sandbox_memory, "sandbox-memory-limit"),
            (host.sandbox_cpu, "sandbox-cpu-limit"),
            (host.sandbox_disk, "sandbox-disk-limit"),
        ] {
            if claimed {
                m.insert(name.into(), Evidence::Host);
            }
        }
        m
    }

    async fn host(&self, ctx: &ProbeContext) -> Vec<CheckResult> {
        // Independent sandboxes: run them together. When every sandbox of
        // the uid shares one process limit, the fork loop (which fills it)
        // runs first and alone, or it would starve the others' forks.
        let first = if ctx.scopes.processes_per_uid {
            Some(held(ctx).await)
        } else {
            None
        };
        let (held_now, deadline, parent, memory, cpu) = tokio::join!(
            async {
                match first {
                    Some(_) => Vec::new(),
                    None => held(ctx).await,
                }
            },
            deadline_tree(ctx),
            parent_killed(ctx),
            memory::host(ctx),
            cpu::host(ctx),
        );
        let mut checks = first.unwrap_or(held_now);
        checks.push(deadline);
        checks.push(parent);
        checks.extend(memory);
        checks.extend(cpu);
        checks
    }

    fn child(&self, r: &mut Reporter, args: &ProbeArgs) {
        open_files(r, num(args, "fds"));
        fork_loop(r, num(args, "procs"));
        raise_cpu(r, num(args, "cpu"));
        write_past_fsize(r, num(args, "fsize"));
        r.hold("limits");
        let _ = std::fs::remove_file("big");
        disk::child(r, num(args, "disk"), num(args, "fsize"));
        // Last, after the controls the harness ran first: a backend may
        // enforce this by killing the whole sandbox.
        memory(r, num(args, "mem"));
    }

    fn helper(&self, name: &str, args: &ProbeArgs) -> Option<i32> {
        let mut r = Reporter::new();
        match name {
            "tree" => tree(&mut r),
            // The sandbox-wide checks run alone in their own sandbox,
            // without the controls: they may end it (by design).
            "memory" => {
                memory::child(&mut r, args);
                r.done();
            }
            "cpu" => {
                cpu::child(&mut r, args);
                r.done();
            }
            _ => return None,
        }
        Some(0)
    }
}

/// Every check P6 makes on any host (those of some hosts only are added
/// in [`P6::checks`]).
const CHECKS: &[(&str, Evidence)] = &[
    ("fd-limit", Evidence::Host),
    ("process-limit", Evidence::Host),
    ("cpu-limit", Evidence::Host),
    ("file-size-limit", Evidence::Host),
    ("memory-limit", Evidence::Host),
    ("deadline-kills-tree", Evidence::Host),
    ("parent-killed-leaves-nothing", Evidence::Host),
];

/// Extra processes tolerated above the limit (the probe itself).
const PROC_SLACK: usize = 2;

/// How long the tree may take to die once its end is due. A process with
/// a SIGKILL pending counts as gone (it cannot run again), so what this
/// waits for is only the kill being sent, not the scheduler: a loaded host
/// does not make a sandbox that holds fail.
const GONE_WITHIN: Duration = Duration::from_secs(1);

/// The main child, with its holds: the per-process checks, and the
/// sandbox-wide disk check when claimed.
async fn held(ctx: &ProbeContext) -> Vec<CheckResult> {
    let limits = Limits::probe();
    let lim = |v: Option<u64>| v.unwrap_or(0);
    let (procs, fds, cpu, fsize) = (
        lim(limits.max_processes),
        lim(limits.open_files),
        lim(limits.cpu_rlimit_seconds()),
        lim(limits.file_size_bytes),
    );
    // 0: the child writes no disk fill.
    let disk = if ctx.scopes.disk.is_sandbox() {
        lim(limits.disk_bytes)
    } else {
        0
    };
    let args = vec![
        ("procs".to_string(), procs.to_string()),
        ("mem".to_string(), lim(limits.memory_bytes).to_string()),
        ("fds".to_string(), fds.to_string()),
        ("cpu".to_string(), cpu.to_string()),
        ("fsize".to_string(), fsize.to_string()),
        ("disk".to_string(), disk.to_string()),
    ];
    let per_uid = ctx.scopes.processes_per_uid;
    let mut on_hold = |h: &Hold<'_>| {
        let (label, why) = h.label.split_once(':').unwrap_or((h.label, ""));
        match label {
            "fds" => vec![fd_limit(h.pid, fds, why)],
            "procs" => vec![process_limit(h, procs, why, per_uid)],
            "disk" => vec![disk::at_hold(h, disk, why)],
            _ => limits_in_force(h, cpu, fsize),
        }
    };
    let run = ctx.run_held("P6", &args, &mut on_hold).await;
    let mut checks = Vec::new();
    let mut holds = vec![
        ("fds", &["fd-limit"][..]),
        ("procs", &["process-limit"][..]),
        ("limits", &["cpu-limit", "file-size-limit"][..]),
    ];
    if disk > 0 {
        holds.push(("disk", &[disk::NAME][..]));
    }
    for (label, names) in holds {
        if !run.held.iter().any(|h| h.split(':').next() == Some(label)) {
            checks.extend(
                names
                    .iter()
                    .map(|n| unreachable(n, format!("the child never reached hold `{label}`"))),
            );
        }
    }
    // The whole probe may be what the memory limit killed (a cgroup that
    // kills every process of the group): only SIGKILL counts, which the
    // runner reports as `MemoryExceeded` when the backend's sandbox-wide
    // limit did it.
    // A SIGKILL counts only where the host attributes it to the limit: the
    // backend's sandbox-wide memory limit saw an OOM kill (the runner
    // reports `MemoryExceeded` when the whole probe was its victim).
    let killed_touching = run.info.contains_key("mem-touching")
        && !run.checks.iter().any(|c| c.name == "memory-limit")
        && run.outcome == Some(ExitOutcome::MemoryExceeded);
    let oom = run.memory_limit_hit;
    // Or the memory limit killed the toucher, the child reported it (its
    // last check), and then the limit killed the child too before its
    // `DONE` (its toucher's memory not yet given back, under load): the
    // report is whole but for the `DONE` the limit stopped. Any check
    // missing still leaves the probe short of its manifest.
    let killed_after_report = !run.done
        && oom
        && run.outcome == Some(ExitOutcome::MemoryExceeded)
        && run
            .checks
            .iter()
            .any(|c| c.name == "memory-limit" && c.detail.starts_with(KILLED));
    let mut run = run;
    if killed_after_report {
        run.done = true;
        run.outcome = Some(ExitOutcome::Exited(0));
    }
    if killed_touching {
        checks.push(pass(
            "memory-limit",
            "the sandbox's memory limit killed the child while it touched memory beyond the \
             limit (the backend's OOM count rose)",
        ));
        checks.extend(run.checks);
    } else {
        let mut theirs = run.into_checks();
        for c in &mut theirs {
            // The toucher's SIGKILL, as the child saw it: the host decides
            // whether the limit did it.
            if c.name == "memory-limit" && c.detail.starts_with(KILLED) {
                *c = if oom {
                    pass(
                        "memory-limit",
                        "the toucher was killed, and the backend's sandbox-wide memory limit \
                         counted an OOM kill",
                    )
                } else {
                    unreachable(
                        "memory-limit",
                        "the toucher was killed by SIGKILL, which no limit of the backend's \
                         accounts for (not its OOM kill)",
                    )
                };
            }
        }
        checks.extend(theirs);
    }
    // Say at which scope each per-process check was made.
    let scopes = &ctx.scopes;
    for c in &mut checks {
        let (scope, sandbox_check) = match c.name.as_str() {
            "memory-limit" => (&scopes.memory, memory::NAME),
            "cpu-limit" => (&scopes.cpu, cpu::NAME),
            "file-size-limit" => (&scopes.disk, disk::NAME),
            _ => continue,
        };
        c.detail = format!("{}; scope: {}", c.detail, scope.describe(sandbox_check));
    }
    checks
}

/// At hold `fds`: the host reads the program's `RLIMIT_NOFILE` and counts
/// its open fds; both at most `limit`. (Why the child stopped opening
/// more — `EMFILE` — is its own word, shown in the detail only.)
fn fd_limit(pid: Option<i32>, limit: u64, why: &str) -> CheckResult {
    const NAME: &str = "fd-limit";
    let Some(pid) = pid else {
        return unreachable(NAME, "the program was not found by its token");
    };
    let rlimit = inspect::limits(pid)
        .ok()
        .and_then(|l| l.get("Max open files").cloned());
    match (inspect::fds(pid), rlimit) {
        (Ok(fds), Some(l)) => verdict(
            NAME,
            fds.len() as u64 <= limit && l.at_most(limit),
            format!(
                "the program holds {} fds under RLIMIT_NOFILE {l} (limit {limit}); the child \
                 stopped with {why}",
                fds.len()
            ),
        ),
        (Err(e), _) => unreachable(NAME, format!("cannot list the program's fds: {e}")),
        (_, None) => unreachable(NAME, "no `Max open files` row in the program's limits"),
    }
}

/// At hold `procs`: the host counts the live processes that bear the
/// token and reads the program's `RLIMIT_NPROC`; the count is at most the
/// limit (+ the probe), the rlimit at most the limit (+ a backend's own
/// helper). The child's reason (`EAGAIN`) is in the detail only.
///
/// `per_uid` (the backend's `limit_processes` says the limit counts every
/// task of the sandbox's uid, with the tasks the uid had when it started
/// added to it): the count is checked the same, the rlimit only for being
/// finite (it includes the uid's other tasks).
fn process_limit(h: &Hold<'_>, limit: u64, why: &str, per_uid: bool) -> CheckResult {
    const NAME: &str = "process-limit";
    let n = inspect::token_pids(h.token).len();
    let rlimit = h
        .pid
        .and_then(|pid| inspect::limits(pid).ok())
        .and_then(|l| l.get("Max processes").cloned());
    let within = n as u64 <= limit + PROC_SLACK as u64;
    match rlimit {
        // Per uid (tier landlock as another user): RLIMIT_NPROC is the
        // limit plus the uid's other tasks at the start, and the kernel
        // holds every task of the uid to it. Another task of the uid that
        // ends meanwhile (a concurrent probe's sandbox) leaves this one
        // more (README: `--pids` is exact only as root), so what holds is
        // that the rlimit is finite and its refusal (EAGAIN) is what
        // stopped the fork loop, short of the loop's own cap.
        Some(l) if per_uid => verdict(
            NAME,
            l.is_finite() && why == "EAGAIN",
            format!(
                "{n} processes alive under RLIMIT_NPROC {l} (limit {limit}; per uid, so the \
                 rlimit includes the uid's other tasks{}); the child's fork stopped with {why}",
                if within {
                    ""
                } else {
                    ", some of which ended since"
                }
            ),
        ),
        Some(l) => verdict(
            NAME,
            within && l.at_most(limit + PROC_SLACK as u64),
            format!(
                "{n} processes alive under RLIMIT_NPROC {l} (limit {limit}); the child's fork \
                 stopped with {why}"
            ),
        ),
        None => unreachable(NAME, "cannot read the program's `Max processes` limit"),
    }
}

/// At hold `limits`: RLIMIT_CPU and RLIMIT_FSIZE in force (after the
/// child tried to raise the first), and the write past the second did not
/// land.
fn limits_in_force(h: &Hold<'_>, cpu: u64, fsize: u64) -> Vec<CheckResult> {
    use std::os::unix::fs::MetadataExt;
    let Some(pid) = h.pid else {
        return ["cpu-limit", "file-size-limit"]
            .iter()
            .map(|n| unreachable(n, "the program was not found by its token"))
            .collect();
    };
    let limits = match inspect::limits(pid) {
        Ok(l) => l,
        Err(e) => {
            return ["cpu-limit", "file-size-limit"]
                .iter()
                .map(|n| unreachable(n, format!("cannot read the program's limits: {e}")))
                .collect()
        }
    };
    let row = |k: &str| limits.get(k).cloned();
    let cpu_row = row("Max cpu time");
    let cpu_check = match cpu_row {
        Some(l) => verdict(
            "cpu-limit",
            l.at_most(cpu),
            format!("RLIMIT_CPU {l} s after the child tried to raise it (limit {cpu})"),
        ),
        None => unreachable("cpu-limit", "no `Max cpu time` row"),
    };
    let big = std::fs::metadata(inspect::in_root(pid, h.scratch).join("big"))
        .or_else(|_| std::fs::metadata(format!("/proc/{pid}/cwd/big")))
        .map(|m| m.size());
    let fsize_check = match (row("Max file size"), big) {
        (Some(l), Ok(size)) => verdict(
            "file-size-limit",
            l.at_most(fsize) && size <= fsize,
            format!(
                "RLIMIT_FSIZE {l}; the file written past the limit is {size} bytes (limit {fsize})"
            ),
        ),
        (None, _) => unreachable("file-size-limit", "no `Max file size` row"),
        (_, Err(e)) => unreachable(
            "file-size-limit",
            format!("the child's file in scratch cannot be found: {e}"),
        ),
    };
    vec![cpu_check, fsize_check]
}

/// Reads a tree child's lines until it reports its grandchild; returns
/// the grandchild's `setsid()` outcome.
async fn tree_ready(spawned: &mut Spawned, ctx: &ProbeContext) -> Option<String> {
    let stdout = spawned.child.stdout.as_mut()?;
    let mut lines = BufReader::new(stdout).lines();
    let until = tokio::time::Instant::now() + ctx.timeout;
    while let Ok(Ok(Some(line))) = tokio::time::timeout_at(until, lines.next_line()).await {
        if let Some(r) = line.strip_prefix("INFO\tsetsid\t") {
            return Some(r.to_string());
        }
    }
    None
}

/// Polls until no process bears `token` (bounded), then kills and reports
/// what is left.
async fn gone(token: &str) -> Result<(), Vec<i32>> {
    let until = tokio::time::Instant::now() + GONE_WITHIN;
    let living = || -> Vec<i32> {
        inspect::token_pids(token)
            .into_iter()
            .filter(|p| !inspect::sigkill_pending(*p))
            .collect()
    };
    while tokio::time::Instant::now() < until {
        if living().is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = living();
    kill_token_survivors(token);
    if left.is_empty() {
        Ok(())
    } else {
        Err(left)
    }
}

/// Spawns a child whose grandchild calls `setsid()`, lets the deadline
/// fire, and checks from the host that nothing of the tree is left.
async fn deadline_tree(ctx: &ProbeContext) -> CheckResult {
    const NAME: &str = "deadline-kills-tree";
    let limits = Limits {
        deadline: Some(Duration::from_millis(150)),
        ..Limits::default()
    };
    let mut spawned = match ctx.spawn("P6-tree", &[], limits) {
        Ok(c) => c,
        Err(e) => return unreachable(NAME, format!("could not start: {e}")),
    };
    let setsid = tree_ready(&mut spawned, ctx).await;
    let tree = inspect::token_pids(&spawned.token).len();
    let outcome = spawned.child.wait().await;
    let Some(setsid) = setsid else {
        kill_token_survivors(&spawned.token);
        return unreachable(
            NAME,
            format!("the child reported no grandchild ({outcome:?})"),
        );
    };
    if !matches!(outcome, Ok(ExitOutcome::DeadlineExceeded)) {
        kill_token_survivors(&spawned.token);
        return unreachable(
            NAME,
            format!("expected the deadline to fire, got {outcome:?}"),
        );
    }
    match gone(&spawned.token).await {
        Ok(()) => pass(
            NAME,
            format!("all {tree} processes gone after the deadline (the grandchild's setsid(): {setsid})"),
        ),
        Err(left) => fail(
            NAME,
            format!("{left:?} survived the deadline (the grandchild's setsid(): {setsid}); killed by the host"),
        ),
    }
}

/// Spawns the same tree, then SIGKILLs only the pid the host spawned (not
/// its group, not through the runner) and checks that nothing of the
/// sandbox is left.
async fn parent_killed(ctx: &ProbeContext) -> CheckResult {
    const NAME: &str = "parent-killed-leaves-nothing";
    let mut spawned = match ctx.spawn("P6-tree", &[], Limits::default()) {
        Ok(c) => c,
        Err(e) => return unreachable(NAME, format!("could not start: {e}")),
    };
    let setsid = tree_ready(&mut spawned, ctx).await;
    let tree = inspect::token_pids(&spawned.token);
    let spawned_pid = spawned.child.pid() as i32;
    let verdict = match setsid {
        Some(setsid) if tree.len() >= 2 => {
            // SAFETY: SIGKILL to the one process we spawned and have not
            // reaped (so its pid cannot have been reused).
            unsafe { libc::kill(spawned_pid, libc::SIGKILL) };
            match gone(&spawned.token).await {
                Ok(()) => pass(
                    NAME,
                    format!("the program and its grandchild died with the spawned process (the grandchild's setsid(): {setsid})"),
                ),
                Err(left) => fail(
                    NAME,
                    format!("{left:?} outlived the spawned process {spawned_pid} (the grandchild's setsid(): {setsid}); killed by the host"),
                ),
            }
        }
        Some(_) => unreachable(
            NAME,
            format!("the tree has {} process(es), not 2", tree.len()),
        ),
        None => unreachable(NAME, "the child reported no grandchild"),
    };
    kill_token_survivors(&spawned.token);
    let _ = spawned.child.wait().await;
    verdict
}

fn num(args: &BTreeMap<String, String>, k: &str) -> u64 {
    args.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Opens fds until refused (or twice the limit), holds while they are open.
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
    let why = if err == 0 {
        "none".to_string()
    } else {
        errno_name(err)
    };
    r.hold(&format!("fds:{why}"));
    for fd in fds {
        // SAFETY: closing fds we opened.
        unsafe { libc::close(fd) };
    }
}

/// Forks until refused (or twice the limit), holds while they live.
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
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        }
        pids.push(pid);
    }
    let why = if err == 0 {
        "none".to_string()
    } else {
        errno_name(err)
    };
    r.hold(&format!("procs:{why}"));
    // SAFETY: killing and reaping our own children.
    unsafe {
        for pid in &pids {
            libc::kill(*pid, libc::SIGKILL);
        }
        for pid in &pids {
            let mut st = 0;
            libc::waitpid(*pid, &mut st, 0);
        }
    }
}

/// Tries to raise RLIMIT_CPU; the host reads the result.
fn raise_cpu(r: &mut Reporter, limit: u64) {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on local structs.
    unsafe {
        libc::getrlimit(libc::RLIMIT_CPU, &mut rl);
        let raised = libc::rlimit {
            rlim_cur: rl.rlim_max.saturating_add(1).max(limit + 1),
            rlim_max: rl.rlim_max.saturating_add(1).max(limit + 1),
        };
        let rc = libc::setrlimit(libc::RLIMIT_CPU, &raised);
        r.info(
            "raise-cpu",
            if rc == 0 {
                "raised".to_string()
            } else {
                errno_name(errno())
            },
        );
    }
}

/// Writes one byte at offset `limit` into `big` in scratch.
fn write_past_fsize(r: &mut Reporter, limit: u64) {
    // SAFETY: ignoring SIGXFSZ so the write fails with EFBIG instead.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let res = crate::child::open("big", libc::O_WRONLY | libc::O_CREAT).and_then(|fd| {
        // SAFETY: one byte past the limit, from a static buffer.
        let n = unsafe { libc::pwrite(fd, b"x".as_ptr().cast(), 1, limit as libc::off_t) };
        let e = errno();
        crate::child::close(fd);
        if n == 1 {
            Ok(())
        } else {
            Err(e)
        }
    });
    r.info(
        "write-past-fsize",
        match res {
            Ok(()) => "written".to_string(),
            Err(e) => errno_name(e),
        },
    );
}

/// How the child reports its toucher's SIGKILL (the host attributes it).
const KILLED: &str = "the toucher was killed by SIGKILL";

/// A forked toucher maps and touches more than `limit` bytes; see the
/// module doc for what counts.
fn memory(r: &mut Reporter, limit: u64) {
    const NAME: &str = "memory-limit";
    let size = (limit + (32 << 20)) as usize;
    // An `ENOMEM` counts only where this process's own limit refuses the
    // mapping; the host's overcommit policy can refuse it too.
    let mut data = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a local.
    unsafe { libc::getrlimit(libc::RLIMIT_DATA, &mut data) };
    let by_rlimit = data.rlim_cur != libc::RLIM_INFINITY && (data.rlim_cur as usize) < size;
    r.info("mem-touching", size);
    // SAFETY: the forked toucher maps, touches and _exits; the parent
    // waits for it.
    let status = unsafe {
        let pid = libc::fork();
        if pid < 0 {
            r.check(
                NAME,
                ProbeStatus::Unreachable,
                format!("fork: {}", errno_name(errno())),
            );
            return;
        }
        if pid == 0 {
            let p = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                libc::_exit(if errno() == libc::ENOMEM { 3 } else { 4 });
            }
            let mut off = 0;
            while off < size {
                *(p as *mut u8).add(off) = 1;
                off += 4096;
            }
            libc::_exit(0);
        }
        let mut st = 0;
        libc::waitpid(pid, &mut st, 0);
        st
    };
    let (exited, signaled) = (libc::WIFEXITED(status), libc::WIFSIGNALED(status));
    match (
        exited,
        libc::WEXITSTATUS(status),
        signaled,
        libc::WTERMSIG(status),
    ) {
        (true, 0, _, _) => r.check(
            NAME,
            ProbeStatus::Fail,
            format!("touched {size} bytes; limit is {limit}"),
        ),
        (true, 3, _, _) if by_rlimit => r.check(
            NAME,
            ProbeStatus::Pass,
            format!(
                "mapping {size} bytes refused (ENOMEM) under RLIMIT_DATA {}",
                data.rlim_cur
            ),
        ),
        (true, 3, _, _) => r.check(
            NAME,
            ProbeStatus::Unreachable,
            format!(
                "mapping {size} bytes refused (ENOMEM) though no rlimit of this process \
                 refuses it (RLIMIT_DATA {}): the host's overcommit policy, not a limit",
                data.rlim_cur
            ),
        ),
        (_, _, true, libc::SIGKILL) => r.check(NAME, ProbeStatus::Unreachable, KILLED),
        (_, _, true, sig) => r.check(
            NAME,
            ProbeStatus::Unreachable,
            format!("the toucher died of signal {sig}, not the OOM killer's SIGKILL"),
        ),
        (_, code, _, _) => r.check(
            NAME,
            ProbeStatus::Unreachable,
            format!("the toucher ended with status {code} (mmap failed with another errno)"),
        ),
    }
}

/// The child of the tree checks: forks a grandchild that tries to leave
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
        r.info("grandchild", pid);
        r.info("setsid", if b == b'y' { "succeeded" } else { "refused" });
        loop {
            libc::pause();
        }
    }
}
