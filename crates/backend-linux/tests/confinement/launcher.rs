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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    // The runtime's threads exist now: their credentials are checked too.
    let creds_before = thread_credentials();
    let cgroup_before = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let spawner = spawner();
    let results: Vec<Result<ExitOutcome, String>> = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..24 {
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
    let failed: Vec<String> = results.into_iter().filter_map(Result::err).collect();
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

/// A sandbox that allocates far past its memory limit is stopped, and the
/// host (this process, whose memory the sandbox's init shares) lives on:
/// were the init in the sandbox's cgroup, its OOM killer could pick it
/// and take the host with it. Where no cgroup holds memory (uid 65534
/// here), `RLIMIT_DATA` stops the allocation instead.
pub(super) fn oom_in_the_sandbox_spares_the_host() -> Outcome {
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
        ensure(
            matches!(
                r.outcome,
                ExitOutcome::MemoryExceeded | ExitOutcome::Exited(1)
            ),
            || format!("round {round}: {r}"),
        )?;
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
