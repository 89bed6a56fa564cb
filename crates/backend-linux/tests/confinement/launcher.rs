//! The launch itself, as the host sees it. Core starts every child with
//! `clone(CLONE_VM | CLONE_VFORK)`, and the init of a PID namespace lives
//! in the host's memory, so whatever they change that belongs to the memory
//! or to the whole host process would change the host: its dumpable flag
//! (a property of the memory), the credentials of its threads (glibc's
//! `setresuid` signals every thread it knows of), its cgroup. These
//! scenarios start many sandboxes at once from a host whose settings are
//! not the defaults and check that none of them moved, and that the
//! cgroup's OOM killer, which kills every process sharing its victim's
//! memory, takes a hungry sandbox and never the host.

use super::*;

/// The credentials of every thread of this process, from `/proc`.
fn thread_credentials() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for t in std::fs::read_dir("/proc/self/task")
        .expect("tasks")
        .flatten()
    {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let creds: Vec<&str> = status
            .lines()
            .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:") || l.starts_with("Groups:"))
            .collect();
        out.insert(
            t.file_name().to_string_lossy().into_owned(),
            creds.join(" | "),
        );
    }
    out
}

fn dumpable() -> i32 {
    // SAFETY: prctl on integers.
    unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) }
}

/// Starts `n` sandboxes at once on `rt` and waits for them; each checks
/// that it is not root and exits with its own code. The launches that
/// failed, with why.
fn launch_at_once(rt: &tokio::runtime::Runtime, spawner: &Spawner, n: i32) -> Vec<String> {
    let results: Vec<Result<ExitOutcome, String>> = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..n {
            let spawner = spawner.clone();
            set.spawn(async move {
                let spec = sh(&format!("[ \"$(id -u)\" = 0 ] && exit 99; exit {}", i % 3));
                let mut child = spawner
                    .spawn(&spec)
                    .map_err(|e| format!("spawn {i}: {e}"))?;
                let outcome = child.wait().await.map_err(|e| format!("wait {i}: {e}"))?;
                let want = ExitOutcome::Exited(i % 3);
                if outcome == want {
                    Ok(outcome)
                } else {
                    Err(format!("sandbox {i}: {outcome:?}, expected {want:?}"))
                }
            });
        }
        let mut all = Vec::new();
        while let Some(r) = set.join_next().await {
            all.push(r.map_err(|e| e.to_string()).and_then(|r| r));
        }
        all
    });
    results.into_iter().filter_map(Result::err).collect()
}

fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime")
}

/// 24 sandboxes started at once on four runtime threads, from a host that
/// made itself non-dumpable: every one runs, and the host's dumpable flag,
/// its threads' credentials and its cgroup are as they were.
pub(super) fn concurrent_launches_leave_the_host_as_it_was() -> Outcome {
    // SAFETY: prctl on integers; this test process is ours.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot make the test non-dumpable: {}",
            std::io::Error::last_os_error()
        ));
    }
    let rt = multi_thread_runtime();
    // The runtime's threads exist now: their credentials are checked too.
    let creds_before = thread_credentials();
    let cgroup_before = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let failed = launch_at_once(&rt, &spawner(), 24);
    ensure(failed.is_empty(), || {
        format!("{} of 24 launches failed: {failed:?}", failed.len())
    })?;
    ensure(dumpable() == 0, || {
        format!("the host's dumpable flag is now {}", dumpable())
    })?;
    let creds_after = thread_credentials();
    for (tid, before) in &creds_before {
        if let Some(after) = creds_after.get(tid) {
            ensure(after == before, || {
                format!("thread {tid}'s credentials changed: {before} -> {after}")
            })?;
        }
    }
    let cgroup_after = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    ensure(cgroup_after == cgroup_before, || {
        format!("the host's cgroups changed:\n{cgroup_before}\n->\n{cgroup_after}")
    })
}

/// The dumpable flag is the host's memory's, which every launch shares
/// until its exec: no launch may show the host another value, not even for
/// a moment (a root host's memory dumpable while a launch runs as the
/// sandbox's uid could be traced by a process of that uid; a host that
/// keeps its uid makes it dumpable for the few syscalls that write its
/// maps, which is its own default, so it sees no change either). A thread
/// reads the flag in a tight loop while 4 rounds of 24 sandboxes start at
/// once, and every value that differs is a failure. A root host makes
/// its memory non-dumpable before its first launch (the backend's job,
/// checked here too); a host that keeps its uid (uid 65534 here) keeps
/// its default. A window of a few syscalls may slip past the reader on
/// a given run; a change that stays never does (checked after, too).
pub(super) fn dumpable_flag_holds_during_launches() -> Outcome {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let rt = multi_thread_runtime();
    let spawner = spawner();
    if root {
        let failed = launch_at_once(&rt, &spawner, 1);
        ensure(failed.is_empty(), || format!("first launch: {failed:?}"))?;
        ensure(dumpable() == 0, || {
            format!(
                "a root host is still dumpable ({}) after a launch",
                dumpable()
            )
        })?;
    }
    let host = dumpable();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (stop, reads) = (Arc::clone(&stop), Arc::clone(&reads));
        std::thread::spawn(move || {
            let mut seen = BTreeMap::<i32, u64>::new();
            while !stop.load(Ordering::Relaxed) {
                let d = dumpable();
                if d != host {
                    *seen.entry(d).or_default() += 1;
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
            seen
        })
    };
    // The reader runs before the first launch and during every round.
    while reads.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    let mut failed = Vec::new();
    let mut idle_rounds = 0;
    for _ in 0..4 {
        let before = reads.load(Ordering::Relaxed);
        failed.extend(launch_at_once(&rt, &spawner, 24));
        if reads.load(Ordering::Relaxed) == before {
            idle_rounds += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let seen = watcher.join().map_err(|_| "the reader panicked")?;
    ensure(failed.is_empty(), || {
        format!("{} of 96 launches failed: {failed:?}", failed.len())
    })?;
    ensure(idle_rounds == 0, || {
        format!("the reader did not run during {idle_rounds} of 4 rounds: they went unwatched")
    })?;
    ensure(seen.is_empty(), || {
        format!(
            "during the launches the host's dumpable flag (its own: {host}) read as \
             {seen:?} (value: times seen)"
        )
    })?;
    ensure(dumpable() == host, || {
        format!(
            "the launches changed the host's dumpable flag: {host} -> {}",
            dumpable()
        )
    })
}

/// A sandbox that allocates far past its memory limit is stopped, and the
/// host (this process, whose memory the sandbox's init shares) lives on:
/// were the init in the sandbox's cgroup, its OOM killer could pick it
/// and take the host with it. Where a cgroup holds memory, the one ending
/// accepted is the OOM kill the runner reports (`MemoryExceeded`). Only
/// where none does (uid 65534 here: `limit_memory` is per-process) is
/// there no OOM killer to see; `RLIMIT_DATA` then fails the allocation,
/// and the ending required is Python's `MemoryError` (exit 1), which the
/// scenario prints as a note.
pub(super) fn oom_in_the_sandbox_spares_the_host() -> Outcome {
    let cgroup = super::limits::claims_sandbox_scope("limit_memory")?;
    // The OOM killer takes the largest process of the cgroup, and a process
    // sharing the host's memory counts the host's: make the host the
    // largest by far.
    let ballast = vec![1u8; 256 << 20];
    let code = "b = []\nwhile True:\n    b.append(bytearray(8 << 20))\n";
    for round in 0..3 {
        let r = run(py(code).limits(Limits {
            memory_bytes: Some(64 << 20),
            deadline: Some(Duration::from_secs(60)),
            ..Limits::default()
        }))?;
        if cgroup {
            ensure(r.outcome == ExitOutcome::MemoryExceeded, || {
                format!("round {round}: a cgroup holds memory, so its OOM kill must end it: {r}")
            })?;
        } else {
            ensure(
                r.outcome == ExitOutcome::Exited(1) && r.stderr.contains("MemoryError"),
                || format!("round {round}: RLIMIT_DATA must fail the allocation: {r}"),
            )?;
        }
    }
    if !cgroup {
        println!(
            "reduced: no cgroup holds memory here: RLIMIT_DATA stopped the allocation, no OOM kill"
        );
    }
    // Still here: the host survived three OOM kills in its sandboxes.
    ensure(
        std::hint::black_box(&ballast)
            .iter()
            .step_by(4096)
            .all(|&b| b == 1),
        || "the host's memory changed".into(),
    )
}

/// The helper a test runs as uid 65534 on the host (not sandboxed): it tries
/// to trace the process given as its argument and to open its memory for
/// writing, and prints what each attempt returned. It touches nothing else
/// and detaches at once if an attach succeeds.
pub(super) const TRACER_HELPER: &str = "tracer_helper";

pub(super) fn tracer_helper() -> ! {
    let pid: libc::pid_t = std::env::var("CORDON_TRACE_TARGET")
        .ok()
        .and_then(|p| p.parse().ok())
        .expect("target pid");
    // SAFETY: ptrace and open on a pid and a path; a successful seize is
    // undone at once.
    let (seize, mem) = unsafe {
        let r = libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0);
        let seize = if r == 0 {
            libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
            "attached".to_string()
        } else {
            format!(
                "errno {}",
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
            )
        };
        let path = std::ffi::CString::new(format!("/proc/{pid}/mem")).unwrap();
        let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        let mem = if fd >= 0 {
            libc::close(fd);
            "opened".to_string()
        } else {
            format!(
                "errno {}",
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
            )
        };
        (seize, mem)
    };
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    println!("uid={uid} seize={seize} mem={mem}");
    std::process::exit(0);
}

/// Breach (root host): the init lives in the host's memory with the
/// sandbox's uid. A host process running as that uid (a daemon running as
/// `nobody`, say: not sandboxed) must not be able to trace it or open its
/// memory, which is the root host's. As a control, the same helper can
/// trace a plain process of its own uid.
pub(super) fn host_process_of_the_sandbox_uid_cannot_reach_the_init() -> Outcome {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        // A host that keeps its uid shares it with the sandbox, so any
        // process of that uid could trace the host itself anyway; what a
        // launch must not do there, change the host's dumpable flag, is
        // dumpable_flag_holds_during_launches' (run as uid 65534 too).
        return Err("this scenario needs root (only a root host has a uid of its own)".into());
    }
    let rt = rt();
    let sp = spawner();
    let mut child = rt
        .block_on(async { sp.spawn(&sh("echo ready; exec sleep 60")) })
        .map_err(|e| format!("spawn: {e}"))?;
    let mut stdout = child.stdout.take().expect("stdout");
    let mut line = [0u8; 6];
    rt.block_on(stdout.read_exact(&mut line))
        .map_err(|e| format!("ready line: {e}"))?;
    let init = child.pid();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let (dir, exe) = copy_for_nobody(&exe);
    let trace = |target: u32| -> Result<String, String> {
        let out = Command::new(&exe)
            .env(SCENARIO_ENV, TRACER_HELPER)
            .env("CORDON_TRACE_TARGET", target.to_string())
            .uid(65534)
            .gid(65534)
            .output()
            .map_err(|e| e.to_string())?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // Control: a process of uid 65534 that is not the sandbox's.
    let mut control = Command::new("/bin/sleep")
        .arg("60")
        .uid(65534)
        .gid(65534)
        .spawn()
        .map_err(|e| e.to_string())?;
    let control_result = trace(control.id());
    let _ = control.kill();
    let _ = control.wait();
    let result = trace(init);
    child.kill();
    let _ = rt.block_on(child.wait());
    let _ = std::fs::remove_dir_all(&dir);
    let control_result = control_result?;
    ensure(control_result.contains("seize=attached"), || {
        format!("control: the helper could not trace a process of its own uid: {control_result}")
    })?;
    let result = result?;
    ensure(
        result.starts_with("uid=65534")
            && !result.contains("attached")
            && !result.contains("opened"),
        || format!("a host process of uid 65534 reached the init (pid {init}): {result}"),
    )
}

/// Until its exec the program shares the host's memory, and the kernel
/// charges its set-up to the sandbox's cgroup: a memory limit too small
/// for that could have the OOM killer pick the process whose memory is the
/// host's. Where a cgroup holds memory, such a limit is refused, naming
/// the floor, and nothing runs; where none does (per-process rlimits, no
/// shared OOM victim), the floor does not apply.
pub(super) fn tiny_memory_limit_is_refused_where_a_cgroup_holds_memory() -> Outcome {
    let marker = existing_scratch();
    let flag = marker.path().join("ran");
    chown_to_sandbox(marker.path());
    let spec = sh(&format!("echo x > {}", flag.display())).limits(Limits {
        memory_bytes: Some(1 << 20),
        deadline: Some(Duration::from_secs(30)),
        ..Limits::default()
    });
    let r = run_with(&spawner_with(config()), spec);
    if super::limits::claims_sandbox_scope("limit_memory")? {
        let err = match r {
            Err(e) => e,
            Ok(ran) => return Err(format!("a 1 MiB memory limit was accepted: {ran}")),
        };
        ensure(err.contains("below the 16 MiB"), || {
            format!("unclear refusal: {err}")
        })?;
        ensure(!flag.exists(), || "the program ran".into())
    } else {
        ensure(
            !matches!(&r, Err(e) if e.contains("below the 16 MiB")),
            || format!("the floor was applied without a cgroup: {:?}", r.err()),
        )
    }
}

/// The processes of process group `pgrp` the host still has, zombies
/// included, as `pid state ppid` lines.
fn group_members(pgrp: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 1..];
            let f: Vec<&str> = rest.split_whitespace().take(3).collect();
            (f.get(2)?.parse::<u32>().ok()? == pgrp)
                .then(|| format!("{} {} ppid {}", e.file_name().to_string_lossy(), f[0], f[1]))
        })
        .collect()
}

/// Tier landlock has no PID namespace to end: the init kills the group
/// when the program ends. Nothing of the sandbox may be left for the
/// host's pid 1 to reap — in a container, pid 1 may never reap, and each
/// zombie holds a pid (and, on a root host, keeps a pool uid busy). Before
/// the fix the warden, killed with the group, was left a zombie of pid 1
/// after every spawn (seen on this machine, whose pid 1 reaps late; where
/// pid 1 reaps at once the zombie can be gone before the host looks).
pub(super) fn tier_landlock_leaves_no_process_behind() -> Outcome {
    let sp = Spawner::confined(
        Arc::new(LinuxBackend::new().with_tier(Tier::Landlock)),
        config(),
    );
    for _ in 0..10 {
        let left = rt().block_on(async {
            let mut child = sp
                .spawn(&spec("/bin/true", &[]))
                .map_err(|e| format!("spawn failed: {e}"))?;
            let group = child.pid();
            let outcome = child.wait().await.map_err(|e| format!("wait: {e}"))?;
            ensure(outcome.success(), || format!("/bin/true: {outcome:?}"))?;
            Ok::<_, String>(group_members(group))
        })?;
        ensure(left.is_empty(), || {
            format!("the sandbox's process group outlived it: {left:?}")
        })?;
    }
    Ok(())
}

/// Tier landlock: whatever kills the warden (the init's other child, which
/// kills the group should the init die) makes the init end the sandbox at
/// once, so that the sandbox never lives on without one. Before the fix,
/// on x86_64, the init compared what it reaped with a word the kernel had
/// already cleared, and the program slept on.
pub(super) fn tier_landlock_ends_when_its_warden_dies() -> Outcome {
    let sp = Spawner::confined(
        Arc::new(LinuxBackend::new().with_tier(Tier::Landlock)),
        config(),
    );
    rt().block_on(async {
        let mut child = sp
            .spawn(&spec("/bin/sleep", &["60"]))
            .map_err(|e| format!("spawn failed: {e}"))?;
        let init = child.pid();
        // The init's children: the warden and, once it has exec'd, sleep.
        let mut warden = None;
        for _ in 0..200 {
            let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
                .unwrap_or_default();
            let comm =
                |p: &str| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            let kids: Vec<&str> = children.split_whitespace().collect();
            if kids.len() == 2 && kids.iter().any(|p| comm(p).trim() == "sleep") {
                warden = kids
                    .into_iter()
                    .find(|p| comm(p).trim() != "sleep")
                    .map(str::to_string);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let warden: libc::pid_t = warden
            .ok_or("the init never had a warden and a running program")?
            .parse()
            .map_err(|e| format!("{e}"))?;
        // SAFETY: the warden of the sandbox this test made.
        unsafe { libc::kill(warden, libc::SIGKILL) };
        let outcome = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .map_err(|_| "the sandbox lived on without its warden".to_string())?
            .map_err(|e| format!("wait: {e}"))?;
        ensure(!outcome.success(), || {
            format!("the program ended normally: {outcome:?}")
        })
    })
}
