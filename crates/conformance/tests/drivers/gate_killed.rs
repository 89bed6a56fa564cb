//! The gate leaves nothing behind however it ends: this binary runs the
//! suite against the Linux backend in a child of its own (the gate), under
//! CPU load, and ends it at a random point with SIGKILL, SIGABRT, a panic
//! on its main thread (the suite's future dropped while its children run)
//! or SIGSEGV; then no process of that gate may be left, nor any file in
//! its temp dir, nor its baseline cgroup.
//!
//! What belongs to one gate: it runs from a copy of this binary in a
//! private dir, with `TMPDIR` a dir below it, so every process it makes
//! (its watchdog, the keepers, the probe children and all they fork,
//! confined or not) runs a file below that dir and bears its path as
//! `argv[0]`, and every temp file it makes is below it. Nothing else on
//! the host is looked at or killed.
//!
//! `cargo test` runs 4 rounds (one per way of ending); set
//! `CORDON_GATE_KILLS=20` for the 20. A plain main: the gate is
//! this binary re-executed.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Set in the gate's environment: run the suite.
const GATE_ENV: &str = "CORDON_TEST_GATE";
/// Set with it: panic on the main thread after this many ms.
const PANIC_ENV: &str = "CORDON_TEST_GATE_PANIC_MS";
/// How many rounds to run (default 4).
const ROUNDS_ENV: &str = "CORDON_GATE_KILLS";
/// The latest point (ms after its start) a gate is ended at; a full gate
/// here takes 3 to 5 s under the test's load (one that ends first is a
/// round of a gate that ended by itself, which must leave nothing too).
const LATEST_MS: u64 = 3000;
/// How long the watchdog and the kernel get to clean up after a gate.
const SETTLE: Duration = Duration::from_secs(30);

/// The test's name, as libtest would print it.
pub const NAME: &str = "the_gate_leaves_nothing_behind_however_it_ends";

/// In the gate (a re-executed copy): runs the suite and exits.
pub fn gate_or_return() {
    if std::env::var_os(GATE_ENV).is_some() {
        gate();
        std::process::exit(0);
    }
}

/// The test: fails (panics) if any round left something.
pub fn run() {
    assert_eq!(parent(), 0, "the gate left something behind (see above)");
}

/// The gate: the whole suite against the Linux backend, on a runtime like
/// `cordon conformance`'s; with `PANIC_ENV`, a panic on this thread while
/// the suite runs.
fn gate() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let panic_at = std::env::var(PANIC_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    rt.block_on(async {
        let suite = cordon_conformance::StandardSuite::new();
        let backend = Arc::new(cordon_backend_linux::LinuxBackend::new());
        let run = cordon_core::ConformanceSuite::run(&suite, backend);
        match panic_at {
            Some(ms) => tokio::select! {
                r = run => println!("conforms: {}", r.conforms()),
                () = tokio::time::sleep(Duration::from_millis(ms)) => {
                    panic!("the test's panic, {ms} ms into the gate")
                }
            },
            None => println!("conforms: {}", run.await.conforms()),
        }
    });
}

/// How a round ends its gate: a signal, or a panic on its main thread.
#[derive(Debug, Clone, Copy)]
enum End {
    Signal(i32),
    Panic,
}

const ENDS: [End; 4] = [
    End::Signal(libc::SIGKILL),
    End::Signal(libc::SIGABRT),
    End::Panic,
    End::Signal(libc::SIGSEGV),
];

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Signal(libc::SIGKILL) => f.write_str("SIGKILL"),
            End::Signal(libc::SIGABRT) => f.write_str("SIGABRT"),
            End::Signal(libc::SIGSEGV) => f.write_str("SIGSEGV"),
            End::Signal(s) => write!(f, "signal {s}"),
            End::Panic => f.write_str("a panic"),
        }
    }
}

fn parent() -> i32 {
    let rounds: usize = std::env::var(ROUNDS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ENDS.len());
    let load = Load::start(4);
    let mut failures = Vec::new();
    for round in 0..rounds {
        let end = ENDS[round % ENDS.len()];
        let at = random() % (LATEST_MS + 1);
        let stage = Stage::new();
        let (gate_pid, how) = run_gate(&stage, end, at);
        let left = settle(&stage, gate_pid);
        let line = format!("round {round}: {end} at {at} ms: {how}");
        if left.is_empty() {
            eprintln!("{line}: nothing left");
        } else {
            eprintln!("{line}: LEFT {left:#?}");
            failures.push(format!("{line}: {left:?}"));
            stage.kill_survivors();
        }
    }
    load.stop();
    if failures.is_empty() {
        println!("gate_killed: {rounds} rounds, nothing left behind");
        0
    } else {
        eprintln!(
            "gate_killed: {} of {rounds} rounds left something:",
            failures.len()
        );
        for f in &failures {
            eprintln!("  {f}");
        }
        1
    }
}

/// Starts a gate in `stage`, ends it `at` ms in as `end` says, and reaps
/// it. Returns its pid and how it ended.
fn run_gate(stage: &Stage, end: End, at: u64) -> (i32, String) {
    let mut cmd = Command::new(&stage.exe);
    cmd.env(GATE_ENV, "1")
        .env("TMPDIR", &stage.tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(stage.dir.join("gate.log")).expect("log"),
        ));
    if let End::Panic = end {
        cmd.env(PANIC_ENV, at.to_string());
    }
    // SAFETY: setrlimit on integers, between fork and exec: no core files
    // from the signals this test sends.
    unsafe {
        cmd.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start the gate");
    let pid = child.id() as i32;
    if let End::Signal(sig) = end {
        let until = Instant::now() + Duration::from_millis(at);
        while Instant::now() < until {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if child.try_wait().expect("wait").is_none() {
            // SAFETY: a signal to our own unreaped child.
            unsafe { libc::kill(pid, sig) };
            if sig == libc::SIGSEGV {
                // Rust's own SIGSEGV handler takes a sent one for a fault
                // off its guard pages: it restores the default action and
                // returns. The second one is the crash.
                std::thread::sleep(Duration::from_millis(20));
                if child.try_wait().expect("wait").is_none() {
                    // SAFETY: as above, not yet reaped.
                    unsafe { libc::kill(pid, sig) };
                }
            }
        }
    }
    let status = child.wait().expect("reap the gate");
    (pid, format!("the gate ended {status}"))
}

/// Waits (up to [`SETTLE`]) until nothing of the gate is left; returns
/// what still is.
fn settle(stage: &Stage, gate_pid: i32) -> Vec<String> {
    let until = Instant::now() + SETTLE;
    loop {
        let mut left: Vec<String> = stage
            .survivors()
            .into_iter()
            .map(|(pid, what)| format!("process {pid}: {what}"))
            .collect();
        left.extend(stage.leftovers().into_iter().map(|p| format!("file {p}")));
        left.extend(
            gate_cgroups(gate_pid)
                .into_iter()
                .map(|c| format!("cgroup {c}")),
        );
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The gate's baseline cgroups (`cordon-gate-<pid>-…`) still there, in
/// this process's cgroup of each hierarchy mounted under /sys/fs/cgroup.
fn gate_cgroups(gate_pid: i32) -> Vec<String> {
    let prefix = format!("cordon-gate-{gate_pid}-");
    let own: Vec<String> = std::fs::read_to_string("/proc/self/cgroup")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2).map(str::to_string))
        .collect();
    let mut mounts = vec![PathBuf::from("/sys/fs/cgroup")];
    if let Ok(d) = std::fs::read_dir("/sys/fs/cgroup") {
        mounts.extend(d.flatten().map(|e| e.path()));
    }
    let mut found = Vec::new();
    for m in &mounts {
        for o in &own {
            let Ok(d) = std::fs::read_dir(m.join(o.trim_start_matches('/'))) else {
                continue;
            };
            for e in d.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    found.push(e.path().display().to_string());
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// One round's private dir: the gate's binary and its `TMPDIR`.
struct Stage {
    dir: PathBuf,
    exe: PathBuf,
    tmp: PathBuf,
}

impl Stage {
    fn new() -> Stage {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cordon-gate-killed-{:016x}", random()));
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        std::fs::create_dir(&dir).expect("stage dir");
        mode(&dir, 0o755);
        let exe = dir.join("gate");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).expect("copy the binary");
        mode(&exe, 0o755);
        let tmp = dir.join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        mode(&tmp, 0o1777);
        Stage { dir, exe, tmp }
    }

    /// Live processes (not zombies) whose executable or `argv[0]` lies in
    /// this stage's dir.
    fn survivors(&self) -> Vec<(i32, String)> {
        let mut out = Vec::new();
        let me = std::process::id() as i32;
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return out;
        };
        for e in procs.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
                continue;
            };
            if pid == me || zombie(pid) {
                continue;
            }
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let argv: Vec<String> = cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let ours = exe.starts_with(&self.dir)
                || argv
                    .first()
                    .is_some_and(|a| Path::new(a).starts_with(&self.dir));
            if ours && !zombie(pid) {
                out.push((pid, argv.join(" ")));
            }
        }
        out
    }

    /// What is left in the gate's temp dir.
    fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.tmp)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path().display().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// After a failed round: SIGKILLs what is left of this stage's gate,
    /// so the next round starts clean (only processes of this stage).
    fn kill_survivors(&self) {
        for _ in 0..100 {
            let left = self.survivors();
            if left.is_empty() {
                return;
            }
            for (pid, _) in left {
                // SAFETY: a process that runs this stage's binary.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `pid` is a zombie (or gone).
fn zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_none_or(|s| s == "Z" || s == "X")
}

/// A random number from the kernel.
fn random() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("urandom");
    u64::from_le_bytes(b)
}

/// CPU load: threads that spin until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(n: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for i in 0..10_000u64 {
                            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                        }
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}
