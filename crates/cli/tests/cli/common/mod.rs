//! Helpers shared by the CLI integration tests.
#![allow(dead_code)]

use std::io::Read as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::Duration;

pub mod http;
pub mod https;

pub const CORDON: &str = env!("CARGO_BIN_EXE_cordon");

/// A `cordon` command with a private cache dir, so tests do not share
/// cached conformance reports.
pub fn cordon(cache: &Path) -> Command {
    let mut c = Command::new(CORDON);
    c.env("XDG_CACHE_HOME", cache).env_remove("RUST_LOG");
    c
}

/// One report cache per uid for the tests that are not about the cache
/// (private to that uid, as cordon requires), under cargo's temp dir for
/// tests: the gate runs once per uid, tier, outer confinement and build
/// of cordon, not once per test. (Tests about the cache, the gate's own
/// output or what a killed gate leaves make a cache dir of their own.)
pub fn shared_cache_dir(uid: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    // Made whole before any test uses it: a dir not yet private would
    // have cordon refuse the cache (and say so on stderr).
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _made = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let top = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cordon-conformance-cache");
    std::fs::create_dir_all(&top).unwrap();
    std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = top.join(uid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
    dir
}

/// [`shared_cache_dir`] of this test process's uid.
pub fn shared_cache() -> SharedCache {
    // SAFETY: geteuid cannot fail.
    SharedCache(shared_cache_dir(unsafe { libc::geteuid() }))
}

/// A cache dir that outlives the test (see [`shared_cache_dir`]).
pub struct SharedCache(PathBuf);

impl SharedCache {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn run(cmd: &mut Command) -> Output {
    retry_busy(|| cmd.output())
}

/// Spawns `cmd` (see [`run`] for the retry).
pub fn spawn(cmd: &mut Command) -> Child {
    retry_busy(|| cmd.spawn())
}

/// Retries while exec fails with `ETXTBSY`: [`unprivileged`] runs a copy of
/// cordon this process just wrote, and a sibling test's fork may briefly
/// hold that copy's write fd (until the forked child's own exec closes it).
fn retry_busy<T>(mut start: impl FnMut() -> std::io::Result<T>) -> T {
    for _ in 0..100 {
        match start() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => return r.expect("cordon runs"),
        }
    }
    start().expect("cordon runs")
}

/// Copies the binary where an unprivileged uid can execute it (into
/// `dir`, made 0755), and returns a command that runs it as uid 65534 when
/// we are root (as ourselves otherwise, which is already unprivileged),
/// with a private HOME (shared by the commands made with the same `dir`)
/// and, as root, uid 65534's [`shared_cache_dir`].
pub fn unprivileged(dir: &Path) -> Command {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("cordon");
    std::fs::copy(CORDON, &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &home)
        .current_dir(dir);
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // The gate as uid 65534 once per binary, not per test: as
        // another user in tier landlock its probes share the uid's
        // process budget with every other run of that uid.
        cmd.env("XDG_CACHE_HOME", shared_cache_dir(65534));
        std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
        cmd.uid(65534).gid(65534);
    }
    cmd
}

/// A world-readable copy of `src` in `dir` (for a uid that cannot read `src`).
pub fn readable_copy(src: &Path, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dst = dir.join(src.file_name().unwrap());
    std::fs::copy(src, &dst).unwrap();
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o644)).unwrap();
    dst
}

/// A `sleep` duration unique to this call (seconds with a long fraction),
/// so the host can find that very process by its argv: inside the
/// sandbox's PID namespace the pid it prints means nothing on the host.
pub fn sleep_token() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "30.{}{:03}{nanos:09}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether `pid`'s argv holds `arg`.
fn has_arg(pid: i32, arg: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
        .unwrap_or(false)
}

/// Host pids of live (non-zombie) processes with `arg` in their argv.
pub fn host_pids_with_arg(arg: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| has_arg(*pid, arg))
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next());
            !matches!(state, None | Some("Z") | Some("X"))
        })
        .collect()
}

/// A pidfd for `pid`; `None` if there is no such process.
fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open on integers; it returns a fresh fd.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh fd we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Waits until the process of `pidfd` has exited (its pidfd polls
/// readable); false if it still runs after `limit`, a bound that only
/// turns a hang into a failure.
fn exits_within(pidfd: &OwnedFd, limit: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = limit.as_millis().min(i32::MAX as u128) as libc::c_int;
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return n == 1;
        }
    }
}

/// Waits for `child` to exit (its pidfd polling readable), or kills and
/// reaps it once `limit` has passed without that: `None` then.
pub fn wait_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let pidfd = pidfd_open(child.id() as i32).expect("pidfd of our own unreaped child");
    if exits_within(&pidfd, limit) {
        return Some(child.wait().unwrap());
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// The processes [`wait_for_process_with_arg`] found, each held by a pidfd
/// (which names that very process, whatever later reuses its pid).
pub struct Running {
    arg: String,
    procs: Vec<(i32, OwnedFd)>,
}

/// Waits (up to 10 s) until a process with `arg` runs on the host; panics
/// otherwise. The positive control of every "it is gone afterwards" test.
/// A process's start has no event to wait on: this looks again every
/// 20 ms.
pub fn wait_for_process_with_arg(arg: &str) -> Running {
    for _ in 0..500 {
        // The pidfd is opened after the scan, so the argv is checked again
        // once it is held.
        let procs: Vec<(i32, OwnedFd)> = host_pids_with_arg(arg)
            .into_iter()
            .filter_map(|pid| Some((pid, pidfd_open(pid)?)))
            .filter(|(pid, _)| has_arg(*pid, arg))
            .collect();
        if !procs.is_empty() {
            return Running {
                arg: arg.to_string(),
                procs,
            };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no process with argument {arg} ever ran");
}

/// How long a process that should be dying may take before it counts as
/// left behind: only a bound on a hang, and shorter than any
/// [`sleep_token`] (30 s and a fraction), so a `sleep` that nobody killed
/// is still running when it passes.
const DYING: Duration = Duration::from_secs(20);

/// Asserts that every process `running` found exits (its pidfd polls
/// readable within [`DYING`]) and that no live process with the same
/// argument is left then; kills any, so a failing test leaves nothing
/// behind.
pub fn assert_no_process_with_arg(running: Running) {
    let mut left = Vec::new();
    for (pid, pidfd) in &running.procs {
        if !exits_within(pidfd, DYING) {
            // SAFETY: pidfd_send_signal to this test's own leftover, named
            // by its pidfd.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd.as_raw_fd(),
                    libc::SIGKILL,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            left.push(*pid);
        }
    }
    for pid in host_pids_with_arg(&running.arg) {
        if !left.contains(&pid) {
            // SAFETY: killing this test's own leftover.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            left.push(pid);
        }
    }
    assert!(
        left.is_empty(),
        "processes {left:?} with argument {} outlived their sandbox",
        running.arg
    );
}

/// What one cordon run left: its exit code (`None`: killed by a signal,
/// the hang guard's included), whether the hang guard had to kill it, its
/// peak RSS (of cordon itself) and its stderr (what fitted in the pipe,
/// read only after it exited).
pub struct Ended {
    pub code: Option<i32>,
    pub hung: bool,
    pub peak_mib: i64,
    pub stderr: String,
}

/// Runs `cmd` with its stderr on a pipe that nobody reads while it runs,
/// under a 3 GiB address-space limit (so a regression fails this test
/// instead of taking the shared host's memory), and reaps it with wait4
/// for its own peak RSS. A cordon still running after 60 s is killed
/// ([`Ended::hung`]).
pub fn run_unread(cmd: &mut Command) -> Ended {
    run_unread_limited(cmd, Some(3 << 30))
}

/// [`run_unread`] with another address-space limit, or none (a cordon
/// that starts a worker with its own, higher, limit).
pub fn run_unread_limited(cmd: &mut Command, address_space: Option<u64>) -> Ended {
    use std::os::unix::process::CommandExt;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both fds are fresh and ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    if let Some(bytes) = address_space {
        let lim = libc::rlimit {
            rlim_cur: bytes,
            rlim_max: bytes,
        };
        // SAFETY: setrlimit is async-signal-safe; the limit is a plain value.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::from(w))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // The Command holds our copy of the write end until replaced: drop it,
    // or the read below would never see the end.
    cmd.stderr(Stdio::null());
    // A cordon that never ends fails the test instead of hanging it: wait
    // for its exit (a pidfd) at most 60 s, then kill it.
    // SAFETY: pidfd_open on our own unreaped child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as i32, 0) } as i32;
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the fd is fresh and ours.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&pidfd),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: polls one pollfd we own.
    let hung = unsafe { libc::poll(&mut pfd, 1, 60_000) } == 0;
    if hung {
        // SAFETY: our own child, not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    }
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child and writes into our locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    std::mem::forget(child); // reaped above
    let mut stderr = String::new();
    let mut r = std::fs::File::from(r);
    // The write end is closed: the child exited, ours was dropped above.
    let _ = r.read_to_string(&mut stderr);
    Ended {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        hung,
        peak_mib: usage.ru_maxrss / 1024,
        stderr,
    }
}

/// Runs `check` as root, then as uid 65534 (a copy of cordon it can
/// run, a HOME of its own under `dir`); `dir` is made 0755.
pub fn as_each_uid(dir: &Path, mut check: impl FnMut(&str, &mut dyn FnMut() -> Command)) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = shared_cache();
    check("root", &mut || cordon(cache.path()));
    let sub = dir.join("65534");
    check("65534", &mut || unprivileged(&sub));
}
