//! Helpers shared by the CLI integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

pub const CORDON: &str = env!("CARGO_BIN_EXE_cordon");

/// A `cordon` command with a private cache dir, so tests do not share
/// cached conformance reports.
pub fn cordon(cache: &Path) -> Command {
    let mut c = Command::new(CORDON);
    c.env("XDG_CACHE_HOME", cache).env_remove("RUST_LOG");
    c
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
/// with a private HOME and cache (shared by the commands made with the
/// same `dir`).
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
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .current_dir(dir);
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
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

/// Host pids of live (non-zombie) processes with `arg` in their argv.
pub fn host_pids_with_arg(arg: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
                .unwrap_or(false)
        })
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

/// Waits (up to 10 s) until a process with `arg` runs on the host; panics
/// otherwise. The positive control of every "it is gone afterwards" test.
pub fn wait_for_process_with_arg(arg: &str) -> Vec<i32> {
    for _ in 0..500 {
        let pids = host_pids_with_arg(arg);
        if !pids.is_empty() {
            return pids;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("no process with argument {arg} ever ran");
}

/// Asserts that no live process with `arg` is left within a second (and
/// kills any, so a failing test leaves nothing behind).
pub fn assert_no_process_with_arg(arg: &str) {
    let mut left = host_pids_with_arg(arg);
    for _ in 0..50 {
        if left.is_empty() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        left = host_pids_with_arg(arg);
    }
    for pid in &left {
        // SAFETY: killing this test's own leftover.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    panic!("processes {left:?} with argument {arg} outlived their sandbox");
}
