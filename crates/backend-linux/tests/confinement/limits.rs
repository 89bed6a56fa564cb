//! The limits issue's attacks: memory held through a memfd, SysV shm and
//! many processes, a fork chain that resets per-process CPU time, and a
//! scratch filled past its size. Each is measured by the host while the
//! hostile program holds what it got, and each is tried twice: under the
//! rlimits alone (`sandbox_limits` off, or the base layers for the
//! scratch), where it must succeed (which shows the measurement can see
//! it), and under every layer, where it must stop at the limit the
//! backend's host facts claim for the sandbox as a whole.
//!
//! Where the backend claims only a per-process scope (uid 65534 on a host
//! whose cgroups it cannot write), the scenarios check that weaker claim
//! instead: each memfd stops at `RLIMIT_FSIZE`, SysV shm is freed with the
//! sandbox, each process's private writable memory stays within
//! `RLIMIT_DATA`.

use super::*;
use cordon_backend_linux::Layers;

/// What the page cache and the kernel's own accounting may add on top of
/// a memory limit before the measurement calls it a breach (the cgroup
/// charges page tables, kernel stacks and the interpreter's own pages,
/// which the host's measurement below does not all see either).
const MEMORY_MARGIN: u64 = 32 << 20;

/// The sandbox's memory limit in these scenarios: small, so the attacks
/// (4 times as much) stay cheap.
const MEM: u64 = 96 << 20;

/// The memory an attack tries to hold: four times the limit.
const ATTEMPT: u64 = 4 * MEM;

/// How much a scratch may hold in the disk scenario.
const DISK: u64 = 16 << 20;

/// Whether the full backend claims `key` (`limit_memory`, …) for the
/// sandbox as a whole on this host.
pub(super) fn claims_sandbox_scope(key: &str) -> Result<bool, String> {
    let facts = LinuxBackend::new().host_facts();
    let v = facts
        .get(key)
        .ok_or_else(|| format!("host_facts lacks {key}: {facts:?}"))?;
    Ok(v.starts_with("sandbox:"))
}

/// The rlimits without the sandbox-wide layer: the mechanism the attacks
/// walked around.
fn rlimits_only() -> Spawner {
    Spawner::confined(
        Arc::new(LinuxBackend::with_layers(Layers {
            sandbox_limits: false,
            ..Layers::ALL
        })),
        config(),
    )
}

/// `/proc/meminfo`'s `Shmem` in bytes: memfd, SysV shm and tmpfs pages of
/// the whole host.
fn host_shmem() -> Result<u64, String> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| e.to_string())?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("Shmem:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no Shmem line in /proc/meminfo")?;
    Ok(kib << 10)
}

/// The anonymous memory (`RssAnon`) of the live processes carrying
/// `token`, summed.
fn rss_anon_of(token: &str) -> u64 {
    host_pids_with_arg(token)
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .map(|st| {
            let kib: u64 = field(&st, "RssAnon:")
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
            kib << 10
        })
        .sum()
}

/// What the host saw of an attack that holds what it got.
enum Held {
    /// The program printed its line and was alive, holding; `measure` is
    /// what the host measured then.
    Holding { line: String, measure: u64 },
    /// The program ended before it printed (a limit killed it).
    Ended(Ran),
}

/// Spawns `spec` + `token` under `sp`; when the program prints its one
/// line (then waits for stdin to close), calls `measure` on the host while
/// it holds. `spec`'s own limits apply.
fn hold(
    sp: &Spawner,
    spec: ChildSpec,
    token: &str,
    measure: impl FnOnce(u32) -> u64,
) -> Result<Held, String> {
    rt().block_on(async {
        let mut child = sp
            .spawn(&spec.arg(token))
            .map_err(|e| format!("spawn failed: {e}"))?;
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .map_err(|_| "the program neither printed nor ended in 60 s".to_string())?
            .map_err(|e| e.to_string())?;
        let held = match line {
            Some(line) => {
                let measure = measure(child.pid());
                Held::Holding { line, measure }
            }
            None => {
                let outcome = child.wait().await.map_err(|e| e.to_string())?;
                return Ok(Held::Ended(Ran {
                    outcome,
                    stdout: String::new(),
                    stderr: String::from_utf8_lossy(&child.stderr_tail()).into_owned(),
                }));
            }
        };
        drop(child.stdin.take());
        child.wait().await.map_err(|e| e.to_string())?;
        Ok(held)
    })
}

fn mem_limits(file_size: u64) -> Limits {
    Limits {
        memory_bytes: Some(MEM),
        file_size_bytes: Some(file_size),
        deadline: Some(Duration::from_secs(60)),
        ..Limits::default()
    }
}

/// Runs a memory attack (`code`, which prints `held …` and waits) under
/// `sp`; `Some(bytes)` when the host measured it holding more than the
/// limit allows.
fn memory_attack(
    sp: &Spawner,
    code: &str,
    args: &[String],
    limits: Limits,
    measure: fn(&str, u64) -> u64,
) -> Result<(Option<u64>, String), String> {
    let token = sleep_token();
    let before = host_shmem()?;
    let mut spec = py(code).limits(limits);
    for a in args {
        spec = spec.arg(a);
    }
    let held = hold(sp, spec, &token, |_| measure(&token, before))?;
    Ok(match held {
        Held::Holding { line, measure } if measure > MEM + MEMORY_MARGIN => (
            Some(measure),
            format!("{line}; host measured {measure} bytes"),
        ),
        Held::Holding { line, measure } => (None, format!("{line}; host measured {measure} bytes")),
        Held::Ended(r) => {
            // Only a kill by the memory limit counts as stopping it.
            ensure(
                matches!(
                    r.outcome,
                    ExitOutcome::MemoryExceeded | ExitOutcome::Signaled(libc::SIGKILL)
                ),
                || format!("the attack ended before holding, not by the memory limit: {r}"),
            )?;
            (None, format!("killed: {:?}", r.outcome))
        }
    })
}

/// The attack must hold more than the limit under the rlimits alone and
/// not under every layer.
fn rlimits_breach_full_holds(
    code: &str,
    args: &[String],
    limits: Limits,
    measure: fn(&str, u64) -> u64,
) -> Outcome {
    let (breach, what) = memory_attack(&rlimits_only(), code, args, limits, measure)?;
    ensure(breach.is_some(), || {
        format!(
            "under the rlimits alone the attack held no more than the limit ({what}): the test \
             cannot see the breach it is about"
        )
    })?;
    let (breach, what) = memory_attack(&spawner(), code, args, limits, measure)?;
    ensure(breach.is_none(), || {
        format!("the sandbox held more than --mem {MEM}: {what}")
    })
}

fn shmem_growth(_token: &str, before: u64) -> u64 {
    host_shmem().unwrap_or(0).saturating_sub(before)
}

fn anon_of_token(token: &str, _before: u64) -> u64 {
    rss_anon_of(token)
}

const MEMFD_ATTACK: &str = "import os, sys\n\
total, chunk = int(sys.argv[1]), 1 << 20\n\
fd = os.memfd_create('hoard')\n\
buf = b'x' * chunk\n\
done, err = 0, 'none'\n\
try:\n\
\x20   while done < total:\n\
\x20       done += os.write(fd, buf)\n\
except OSError as e:\n\
\x20   err = str(e.errno)\n\
print('held', done, err, flush=True)\n\
sys.stdin.read()\n";

/// A memfd written (not mapped: no address space) to four times `--mem`.
pub(super) fn limit_memory_memfd() -> Outcome {
    let args = [ATTEMPT.to_string()];
    if claims_sandbox_scope("limit_memory")? {
        return rlimits_breach_full_holds(MEMFD_ATTACK, &args, mem_limits(1 << 30), shmem_growth);
    }
    // Per-process scope: RLIMIT_FSIZE caps each memfd.
    let fsize = 64 << 20;
    let token = sleep_token();
    let held = hold(
        &spawner(),
        py(MEMFD_ATTACK).limits(mem_limits(fsize)).arg(&args[0]),
        &token,
        |_| 0,
    )?;
    match held {
        Held::Holding { line, .. } => {
            let done: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("unexpected line {line:?}"))?;
            ensure(done <= fsize && line.ends_with(" 27"), || {
                format!("a memfd grew past RLIMIT_FSIZE {fsize} (EFBIG expected): {line}")
            })
        }
        Held::Ended(r) => Err(format!("the memfd attack ended early: {r}")),
    }
}

const SHM_ATTACK: &str = "import ctypes, sys\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
libc.shmat.restype = ctypes.c_void_p\n\
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\n\
libc.shmdt.argtypes = [ctypes.c_void_p]\n\
total, seg = int(sys.argv[1]), 16 << 20\n\
done, err = 0, 'none'\n\
while done < total:\n\
\x20   id = libc.shmget(0, seg, 0o1600)\n\
\x20   if id < 0:\n\
\x20       err = 'shmget %d' % ctypes.get_errno(); break\n\
\x20   p = libc.shmat(id, None, 0)\n\
\x20   if p is None or p == ctypes.c_void_p(-1).value:\n\
\x20       err = 'shmat %d' % ctypes.get_errno(); break\n\
\x20   ctypes.memset(p, 1, seg)\n\
\x20   libc.shmdt(p)\n\
\x20   done += seg\n\
print('held', done, err, flush=True)\n\
sys.stdin.read()\n";

/// SysV segments, each touched through a short attach (so no process's
/// address space ever holds more than one), to four times `--mem`.
pub(super) fn limit_memory_shm() -> Outcome {
    let args = [ATTEMPT.to_string()];
    let attack = || {
        memory_attack(
            &spawner(),
            SHM_ATTACK,
            &args,
            mem_limits(1 << 30),
            shmem_growth,
        )
    };
    if on_container() {
        // Tier landlock refuses SysV IPC (no IPC namespace of its own):
        // the attack gets no segment, and the host's Shmem does not grow.
        let (over, what) = attack()?;
        return ensure(
            over.is_none() && what.starts_with("held 0 shmget 1;"),
            || format!("SysV shm in tier landlock: {what}"),
        );
    }
    if claims_sandbox_scope("limit_memory")? {
        return rlimits_breach_full_holds(SHM_ATTACK, &args, mem_limits(1 << 30), shmem_growth);
    }
    // Per-process scope: the segments are not bounded while the sandbox
    // lives (the report says so), but go with its IPC namespace.
    let before = host_shmem()?;
    let (_, what) = attack()?;
    let mut after = host_shmem()?;
    for _ in 0..50 {
        if after <= before + MEMORY_MARGIN {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        after = host_shmem()?;
    }
    ensure(after <= before + MEMORY_MARGIN, || {
        format!("SysV shm outlived the sandbox: Shmem {before} → {after} ({what})")
    })
}

const PROCESSES_ATTACK: &str = "import os, sys, mmap, time, select\n\
size, n = int(sys.argv[1]), int(sys.argv[2])\n\
r, w = os.pipe()\n\
for i in range(n):\n\
\x20   if os.fork() == 0:\n\
\x20       os.close(r)\n\
\x20       m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)\n\
\x20       for off in range(0, size, 4096):\n\
\x20           m[off] = 1\n\
\x20       os.write(w, b'x')\n\
\x20       time.sleep(60)\n\
\x20       os._exit(0)\n\
os.close(w)\n\
got = 0\n\
while got < n and select.select([r], [], [], 5)[0]:\n\
\x20   b = os.read(r, n)\n\
\x20   if not b:\n\
\x20       break\n\
\x20   got += len(b)\n\
print('held', got, flush=True)\n\
sys.stdin.read()\n";

/// Eight processes, each touching well under `--mem` of anonymous memory
/// (so each passes its own per-process limit), four times `--mem`
/// together.
pub(super) fn limit_memory_processes() -> Outcome {
    let each = ATTEMPT / 8;
    let args = [each.to_string(), "8".to_string()];
    if claims_sandbox_scope("limit_memory")? {
        return rlimits_breach_full_holds(
            PROCESSES_ATTACK,
            &args,
            mem_limits(1 << 30),
            anon_of_token,
        );
    }
    // Per-process scope: each process's private writable memory within
    // RLIMIT_DATA; together they are not bounded, which the report states.
    let token = sleep_token();
    let mut spec = py(PROCESSES_ATTACK).limits(mem_limits(1 << 30));
    for a in &args {
        spec = spec.arg(a);
    }
    let mut largest = 0;
    let held = hold(&spawner(), spec, &token, |_| {
        for pid in host_pids_with_arg(&token) {
            if let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                let kib: u64 = field(&st, "VmData:")
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .unwrap_or(0);
                largest = largest.max(kib << 10);
            }
        }
        0
    })?;
    ensure(matches!(held, Held::Holding { .. }), || {
        "the attack did not hold".into()
    })?;
    ensure(largest > 0 && largest <= MEM, || {
        format!("a process's private writable memory was {largest} bytes under RLIMIT_DATA {MEM}")
    })
}

const CPU_CHAIN: &str = "import os, sys, time, signal\n\
n, burn, autoreap = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == 'autoreap'\n\
if autoreap:\n\
\x20   signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n\
for i in range(n):\n\
\x20   pid = os.fork()\n\
\x20   if pid == 0:\n\
\x20       end = time.process_time() + burn\n\
\x20       while time.process_time() < end:\n\
\x20           pass\n\
\x20       os._exit(0)\n\
\x20   if autoreap:\n\
\x20       while os.path.exists('/proc/%d' % pid):\n\
\x20           time.sleep(0.02)\n\
\x20   else:\n\
\x20       os.waitpid(pid, 0)\n\
\x20   print('burned', i + 1, flush=True)\n\
print('done', flush=True)\n";

/// A chain of processes, each burning 0.4 s (under its own RLIMIT_CPU of
/// 1 s), 2.4 s in all, under `--cpu 1`. With `autoreap` the parent ignores
/// `SIGCHLD`, so the kernel reaps each child without adding its time to
/// the parent's: what hides CPU time from a sum over the process tree.
fn cpu_chain(sp: &Spawner, autoreap: bool) -> Result<Ran, String> {
    run_with(
        sp,
        py(CPU_CHAIN)
            .args(["6", "0.4", if autoreap { "autoreap" } else { "wait" }])
            .limits(Limits {
                cpu_ms: Some(1000),
                deadline: Some(Duration::from_secs(60)),
                ..Limits::default()
            }),
    )
}

fn stopped_at_one_second(r: &Ran) -> Outcome {
    let burned = r.stdout.lines().filter(|l| l.starts_with("burned")).count();
    // 1 s of CPU is 2.5 links; the runner reads the sum every 100 ms.
    ensure(
        r.outcome == ExitOutcome::CpuTimeExceeded && burned <= 3,
        || format!("the chain was not stopped at --cpu 1 ({burned} links of 0.4 s): {r}"),
    )
}

pub(super) fn limit_cpu_fork_chain() -> Outcome {
    let base = Spawner::confined(Arc::new(LinuxBackend::with_layers(Layers::BASE)), config());
    for autoreap in [false, true] {
        let old = cpu_chain(&base, autoreap)?;
        ensure(old.stdout.contains("done"), || {
            format!("under the base layers the chain (autoreap {autoreap}) did not complete, so the test cannot see the breach: {old}")
        })?;
    }
    // Both chains stop where the scope is the sandbox's; where it is not
    // (no cgroup), the runner's sum over the process tree still stops the
    // plain chain, and the report must not claim more than that.
    stopped_at_one_second(&cpu_chain(&spawner(), false)?)?;
    if claims_sandbox_scope("limit_cpu")? {
        stopped_at_one_second(&cpu_chain(&spawner(), true)?)
    } else {
        // (The auto-reaped chain completes here, as under the base
        // layers.)
        let scope = LinuxBackend::new().host_facts()["limit_cpu"].clone();
        ensure(
            scope.starts_with("per-process:") && scope.contains("SIGCHLD ignored"),
            || format!("the report does not say the tree sum can be escaped: {scope:?}"),
        )
    }
}

const DISK_FILL: &str = "import os, sys\n\
total, chunk = int(sys.argv[1]), 1 << 20\n\
done, err, i = 0, 'none', 0\n\
buf = b'x' * chunk\n\
try:\n\
\x20   while done < total:\n\
\x20       with open('fill-%d' % (done // (4 << 20)), 'ab') as f:\n\
\x20           f.write(buf)\n\
\x20       done += chunk\n\
except OSError as e:\n\
\x20   err = str(e.errno)\n\
print('held', done, err, flush=True)\n\
sys.stdin.read()\n";

/// Bytes of the regular files in `dir` (not following links): for each,
/// the larger of its size and its allocated blocks.
fn bytes_in(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                // Allocated blocks count as much as written bytes.
                .map(|m| {
                    m.len()
                        .max(std::os::unix::fs::MetadataExt::blocks(&m) * 512)
                })
                .sum()
        })
        .unwrap_or(0)
}

/// [`DISK_FILL`] in one file, what a per-file limit stops; then blocks
/// allocated past a second file's size (`fallocate` with
/// `FALLOC_FL_KEEP_SIZE`, which `RLIMIT_FSIZE` does not see). Prints
/// `held <written> falloc=<ok|errno> <errno of the write>`.
const ONE_FILE_FILL: &str = "import os, sys, ctypes\n\
total, chunk = int(sys.argv[1]), 1 << 20\n\
done, err = 0, 'none'\n\
buf = b'x' * chunk\n\
try:\n\
\x20   with open('fill', 'ab') as f:\n\
\x20       while done < total:\n\
\x20           f.write(buf); f.flush()\n\
\x20           done += chunk\n\
except OSError as e:\n\
\x20   err = str(e.errno)\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]\n\
fd = os.open('falloc', os.O_CREAT | os.O_WRONLY, 0o600)\n\
falloc = 'ok' if libc.fallocate(fd, 1, 0, total) == 0 else str(ctypes.get_errno())\n\
print('held', done, 'falloc=' + falloc, err, flush=True)\n\
sys.stdin.read()\n";

/// Files of 4 MiB (each far under RLIMIT_FSIZE) written to a fresh
/// scratch until four times `--disk`; the host sums the scratch (seen
/// through the program's cwd) while the program holds.
fn disk_fill(sp: &Spawner) -> Result<(u64, String), String> {
    disk_fill_with(sp, DISK_FILL)
}

fn disk_fill_with(sp: &Spawner, code: &str) -> Result<(u64, String), String> {
    let token = sleep_token();
    let held = hold(
        sp,
        py(code)
            .arg((4 * DISK).to_string())
            .limits(Limits {
                disk_bytes: Some(DISK),
                deadline: Some(Duration::from_secs(60)),
                ..Limits::default()
            })
            .scratch(Scratch::Fresh),
        &token,
        |_| {
            let pid = host_pids_with_arg(&token).first().copied().unwrap_or(0);
            bytes_in(Path::new(&format!("/proc/{pid}/cwd")))
        },
    )?;
    match held {
        Held::Holding { line, measure } => Ok((measure, line)),
        Held::Ended(r) => Err(format!("the disk fill ended early: {r}")),
    }
}

pub(super) fn limit_disk_fill() -> Outcome {
    if on_container() {
        // Tier landlock has no tmpfs: `--disk` holds per file only, and
        // the backend says so.
        let facts = LinuxBackend::new().host_facts();
        ensure(
            facts
                .get("limit_disk")
                .is_some_and(|v| v.starts_with("per-file:")),
            || {
                format!(
                    "tier landlock claims another disk scope: {:?}",
                    facts.get("limit_disk")
                )
            },
        )?;
        let (got, line) = disk_fill_with(&spawner(), ONE_FILE_FILL)?;
        // EFBIG (27): RLIMIT_FSIZE (Python ignores SIGXFSZ); fallocate
        // past the size: EPERM (1), the filter's.
        ensure(got <= DISK && line.ends_with(" falloc=1 27"), || {
            format!("the scratch held {got} bytes under --disk {DISK} per file: {line}")
        })?;
        println!("reduced: tier landlock's --disk holds per file: only that was checked");
        return Ok(());
    }
    let base = Spawner::confined(Arc::new(LinuxBackend::with_layers(Layers::BASE)), config());
    let (old, line) = disk_fill(&base)?;
    ensure(old > 2 * DISK, || {
        format!("under the base layers the fill stopped at {old} bytes ({line}): the test cannot see the breach")
    })?;
    ensure(claims_sandbox_scope("limit_disk")?, || {
        "the backend does not claim a sandbox-wide disk limit for a fresh scratch".into()
    })?;
    let (got, line) = disk_fill(&spawner())?;
    // ENOSPC (28) inside the sandbox; a tmpfs rounds to whole pages.
    ensure(got <= DISK && line.ends_with(" 28"), || {
        format!("the scratch held {got} bytes under --disk {DISK}: {line}")
    })
}
