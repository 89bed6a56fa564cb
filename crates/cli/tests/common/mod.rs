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
/// with a private HOME and cache.
pub fn unprivileged(dir: &Path) -> Command {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("cordon");
    std::fs::copy(CORDON, &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.join("home");
    std::fs::create_dir(&home).unwrap();
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
