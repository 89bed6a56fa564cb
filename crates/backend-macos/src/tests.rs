//! The launch path, run for real on any Unix with a stand-in launcher: a
//! shell script that reports what it received (argv, cwd, limits, session,
//! environment) and then execs the program, as `sandbox-exec` does.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_core::{
    Availability, ChildSpec, Limits, RunnerConfig, SandboxBackend, SandboxPolicy, Scratch,
    SpawnError, Spawner, StdioMode, WrapError,
};
use tokio::io::AsyncReadExt;

use super::*;

const FAKE_LAUNCHER: &str = r#"#!/bin/sh
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    -p) shift; echo "PROFILE:$(printf '%s\n' "$1" | /usr/bin/head -n 1)" ;;
    -D*) echo "PARAM:$1" ;;
    *) echo "UNEXPECTED:$1" ;;
  esac
  shift
done
shift
echo "CWD:$(pwd -P)"
echo "NOFILE:$(ulimit -n)"
echo "CORE:$(ulimit -c)"
echo "SID:$(/usr/bin/cut -d' ' -f6 /proc/$$/stat) PID:$$"
/usr/bin/env | /usr/bin/sed 's/^/ENV:/'
echo "PROGRAM:$1"
exec "$@"
"#;

/// The macOS launch path with a stand-in launcher.
struct FakeLauncherBackend {
    launcher: PathBuf,
}

impl SandboxBackend for FakeLauncherBackend {
    fn name(&self) -> &str {
        "fake-seatbelt"
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        confine(cmd, policy, &self.launcher, &FsCanonicalizer, || Ok(1000)).map(|()| None)
    }
}

/// A launcher is written while another test's spawn may fork: the child
/// holds the writer's fd until its exec, and an exec of the launcher then
/// fails with ETXTBSY. Writes and spawns take turns.
static FORKS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn write_launcher(dir: &Path) -> PathBuf {
    let _no_fork = FORKS.write().unwrap_or_else(|e| e.into_inner());
    let path = dir.join("fake-sandbox-exec");
    std::fs::write(&path, FAKE_LAUNCHER).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn spawner(launcher: PathBuf) -> Spawner {
    Spawner::confined(
        Arc::new(FakeLauncherBackend { launcher }),
        RunnerConfig::default(),
    )
}

/// `spawner.spawn(spec)`, never while a launcher is being written.
fn spawn(spawner: &Spawner, spec: &ChildSpec) -> Result<cordon_core::RunningChild, SpawnError> {
    let _no_write = FORKS.read().unwrap_or_else(|e| e.into_inner());
    spawner.spawn(spec)
}

#[tokio::test]
async fn launcher_replaces_the_program_keeping_stdio_cwd_env_and_hygiene() {
    let tools = tempfile::tempdir().unwrap();
    let launcher = write_launcher(tools.path());
    let odd_arg = "a\"b(c) ;d\ne";
    let spec = ChildSpec::new("/bin/echo")
        .args(["hello", odd_arg])
        .env("CORDON_TEST_VAR", "x y")
        .stdio(StdioMode::Piped)
        .scratch(Scratch::Fresh)
        .limits(Limits {
            open_files: Some(40),
            ..Limits::default()
        });
    let mut child = spawn(&spawner(launcher), &spec).expect("spawn");
    let scratch = child.scratch_dir().to_path_buf();
    let pid = child.pid();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    let outcome = child.wait().await.unwrap();
    assert!(outcome.success(), "{outcome:?}\n{out}");

    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"PROFILE:(version 1)"), "{out}");
    assert!(
        lines.contains(&format!("PARAM:-DSCRATCH={}", scratch.display()).as_str()),
        "{out}"
    );
    assert!(!out.contains("UNEXPECTED:"), "{out}");
    // The working directory std set up is in effect.
    assert!(
        lines.contains(&format!("CWD:{}", scratch.display()).as_str()),
        "{out}"
    );
    // rlimits from the policy, core dumps off.
    assert!(lines.contains(&"NOFILE:40"), "{out}");
    assert!(lines.contains(&"CORE:0"), "{out}");
    // Core's pre_exec hygiene ran before the launcher: new session.
    assert!(
        lines.contains(&format!("SID:{pid} PID:{pid}").as_str()),
        "{out}"
    );
    // Exactly the environment core built: the spec's variable and
    // allowlisted ones, nothing else.
    let allowed: Vec<&str> = cordon_core::DEFAULT_ENV_ALLOWLIST.to_vec();
    for line in lines.iter().filter(|l| l.starts_with("ENV:")) {
        let key = line[4..].split('=').next().unwrap();
        assert!(
            key == "CORDON_TEST_VAR" || key == "PWD" || allowed.contains(&key),
            "unexpected env var in child: {line}"
        );
    }
    assert!(lines.contains(&"ENV:CORDON_TEST_VAR=x y"), "{out}");
    assert!(lines.contains(&"PROGRAM:/usr/bin/echo") || lines.contains(&"PROGRAM:/bin/echo"));
    // The program ran with its arguments intact, on the same stdout pipe.
    assert!(out.ends_with(&format!("hello {odd_arg}\n")), "{out}");
}

#[tokio::test]
async fn missing_launcher_fails_the_spawn_and_runs_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("ran");
    let spec = ChildSpec::new("/bin/sh")
        .args(["-c", "touch \"$0\"", marker.to_str().unwrap()])
        .stdio(StdioMode::Piped)
        .scratch(Scratch::Existing(scratch.path().to_path_buf()));
    let err = spawn(&spawner(PathBuf::from("/nonexistent/sandbox-exec")), &spec)
        .expect_err("must not spawn without the launcher");
    match err {
        SpawnError::Spawn { source, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT), "{source}")
        }
        other => panic!("unexpected error: {other}"),
    }
    assert!(!marker.exists(), "the program ran unconfined");
}

#[tokio::test]
async fn profile_error_fails_wrap_before_spawn() {
    let tools = tempfile::tempdir().unwrap();
    let launcher = write_launcher(tools.path());
    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("ran");
    let mut config = RunnerConfig::default();
    config.read_only.push(PathBuf::from("relative/grant"));
    let spawner = Spawner::confined(Arc::new(FakeLauncherBackend { launcher }), config);
    let spec = ChildSpec::new("/bin/sh")
        .args(["-c", "touch \"$0\"", marker.to_str().unwrap()])
        .scratch(Scratch::Existing(scratch.path().to_path_buf()));
    let err = spawn(&spawner, &spec).expect_err("relative grant must fail");
    assert!(
        matches!(&err, SpawnError::Wrap(e) if e.message.contains("not an absolute path")),
        "{err}"
    );
    assert!(!marker.exists());
}

#[test]
fn pinned_fd_programs_are_refused() {
    let cmd = ChildCommand::for_backend_tests("/proc/self/fd/7", "/");
    let err = exec::ExecPlan::new(
        Path::new("/usr/bin/sandbox-exec"),
        &[],
        &cmd,
        exec::plan_rlimits(&Limits::default(), 0),
    )
    .unwrap_err();
    assert!(err.to_string().contains("pinned"), "{err}");
}

#[tokio::test]
async fn nul_in_an_argument_fails_the_spawn_and_runs_nothing() {
    use std::os::unix::ffi::OsStrExt;
    let tools = tempfile::tempdir().unwrap();
    let launcher = write_launcher(tools.path());
    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("ran");
    let spec = ChildSpec::new("/bin/sh")
        .args(["-c", "touch \"$0\""])
        .arg(&marker)
        .arg(std::ffi::OsStr::from_bytes(b"a\0b"))
        .scratch(Scratch::Existing(scratch.path().to_path_buf()));
    let err = spawn(&spawner(launcher), &spec).expect_err("a NUL byte must stop the spawn");
    assert!(err.to_string().contains("NUL"), "{err}");
    assert!(!marker.exists());
}

#[test]
fn launcher_args_with_nul_are_an_error() {
    let cmd = ChildCommand::for_backend_tests("/bin/echo", "/");
    let err = exec::ExecPlan::new(
        Path::new("/usr/bin/sandbox-exec"),
        &["-DX=a\0b".into()],
        &cmd,
        exec::plan_rlimits(&Limits::default(), 0),
    )
    .unwrap_err();
    assert!(err.to_string().contains("NUL"), "{err}");
}

#[test]
fn rlimit_plan_maps_every_limit() {
    let plan = exec::plan_rlimits(&Limits::probe(), 100);
    assert_eq!(plan.get(libc::RLIMIT_CORE), Some((0, 0)));
    // Each is clamped to the current hard limit, which may be lower.
    let hard = |r| {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into `rl`.
        assert_eq!(unsafe { libc::getrlimit(r, &mut rl) }, 0);
        rl.rlim_max
    };
    let expect = |r, soft: u64, h: u64| {
        let h = h.min(hard(r));
        (soft.min(h), h)
    };
    assert_eq!(
        plan.get(libc::RLIMIT_NOFILE),
        Some(expect(libc::RLIMIT_NOFILE, 64, 64))
    );
    assert_eq!(
        plan.get(libc::RLIMIT_CPU),
        Some(expect(libc::RLIMIT_CPU, 2, 3))
    );
    assert_eq!(
        plan.get(libc::RLIMIT_FSIZE),
        Some(expect(libc::RLIMIT_FSIZE, 64 << 20, 64 << 20))
    );
    assert_eq!(
        plan.get(libc::RLIMIT_AS),
        Some(expect(libc::RLIMIT_AS, 256 << 20, 256 << 20))
    );
    assert_eq!(
        plan.get(libc::RLIMIT_NPROC),
        Some(expect(libc::RLIMIT_NPROC, 164, 164))
    );

    let none = exec::plan_rlimits(&Limits::default(), 100);
    assert_eq!(none.get(libc::RLIMIT_NPROC), None);
    assert_eq!(none.get(libc::RLIMIT_CORE), Some((0, 0)));
}
