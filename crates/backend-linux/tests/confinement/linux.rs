//! The Linux scenarios; see `tests/confinement.rs`.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cordon_backend_linux::{LinuxBackend, Tier};
use cordon_core::{
    Availability, ChildSpec, ConformanceReport, ConformanceSuite, ExitOutcome, HostFacts, Limits,
    Network, ProbeId, ProbeResult, ProbeStatus, RunnerConfig, SandboxBackend, SandboxRunner,
    Scratch, SpawnError, Spawner,
};
use tokio::io::AsyncReadExt;

#[path = "breaches.rs"]
mod breaches;
#[path = "../common/container_filter.rs"]
mod container_filter;
#[path = "launcher.rs"]
mod launcher;
#[path = "limits.rs"]
mod limits;
#[path = "own_network.rs"]
mod own_network;
#[path = "own_uid.rs"]
mod own_uid;
#[path = "pools.rs"]
mod pools;
#[path = "scratch.rs"]
mod scratch;

const SCENARIO_ENV: &str = "CORDON_LINUX_SCENARIO";
/// Set (to `container`) in a scenario the driver started under the
/// container profile's filter (`tests/common/container_filter.rs`): the
/// scenario then knows the backend must be in tier landlock there, and
/// checks what that tier promises instead of what namespaces give.
const HOST_ENV: &str = "CORDON_LINUX_HOST";
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
const PYTHON: &str = "/usr/bin/python3";

type Outcome = Result<(), String>;

struct Scenario {
    name: &'static str,
    run: fn() -> Outcome,
    /// Also run as uid 65534 when the harness is root.
    as_nobody: bool,
    /// Why the scenario is not run on the container-like host, where it
    /// has nothing to check (a step only tier namespaces takes, or a
    /// control the container's no_new_privs makes impossible); `None`:
    /// it runs there too, and checks what tier landlock promises.
    plain_only: Option<&'static str>,
}

fn scenarios() -> Vec<Scenario> {
    use breaches::*;
    use launcher::*;
    use limits::*;
    use own_network::*;
    use own_uid::*;
    use pools::*;
    use scratch::*;
    macro_rules! s {
        ($name:ident, $nobody:expr) => {
            Scenario {
                name: stringify!($name),
                run: $name,
                as_nobody: $nobody,
                plain_only: None,
            }
        };
        ($name:ident, $nobody:expr, plain_only: $why:expr) => {
            Scenario {
                name: stringify!($name),
                run: $name,
                as_nobody: $nobody,
                plain_only: Some($why),
            }
        };
    }
    const NAMESPACES_STEP: &str =
        "a step of tier namespaces only (tier landlock takes no such step)";
    vec![
        s!(available_with_facts, true),
        s!(sh_pipeline, true),
        s!(python_runs_in_scratch, true),
        s!(gcc_compiles_and_runs, true),
        s!(git_init, true),
        s!(make_tar_and_cp_p_work, true),
        s!(write_outside_scratch_denied, true),
        s!(read_canary_denied, true),
        s!(grants_read_only_and_read_write, true),
        s!(dev_null_and_urandom_work, true),
        s!(symlink_escape_denied, true),
        s!(hardlink_denied, true),
        s!(mknod_denied_fifo_allowed, true),
        s!(proc_of_host_denied, true),
        s!(tcp_connect_denied, true),
        s!(own_network_is_refused_without_a_joined_namespace, true),
        s!(sockets_denied_socketpair_allowed, true),
        s!(kill_host_process_denied, true),
        s!(fork_bomb_stops_at_max_processes, true),
        s!(privileges_dropped, true),
        s!(
            setuid_binary_gives_nothing,
            false,
            plain_only: "the container's filter sets no_new_privs on the scenario, so its control \
                         (the setuid bit honoured without a sandbox) cannot run there; its plain \
                         run checks tier landlock too"
        ),
        s!(namespaces_denied_setsid_allowed, true),
        s!(background_children_die, true),
        s!(parent_death_kills_child, true),
        s!(pinned_program_runs, true),
        s!(exec_outside_grants_denied, true),
        s!(program_dir_not_granted, true),
        s!(breach_setuid_planting, true),
        s!(breach_host_process_control, true),
        s!(breach_sysv_ipc, true),
        s!(breach_unix_dgram_sendto, true),
        s!(breach_metadata_outside_grants, true),
        s!(breach_outliving_the_host, true),
        s!(concurrent_launches_leave_the_host_as_it_was, true),
        s!(dumpable_flag_holds_during_launches, true),
        s!(oom_in_the_sandbox_spares_the_host, true),
        s!(host_process_of_the_sandbox_uid_cannot_reach_the_init, false),
        s!(
            tiny_memory_limit_is_refused_where_a_cgroup_holds_memory,
            true
        ),
        s!(limit_memory_memfd, true),
        s!(limit_memory_shm, true),
        s!(limit_memory_processes, true),
        s!(limit_cpu_fork_chain, true),
        s!(limit_disk_fill, true),
        s!(rename_tricks_denied, true),
        s!(scratch_deeper_than_the_fd_limit_is_removed, true),
        s!(a_reused_uid_finds_nothing_of_its_last_holder, false),
        s!(read_only_inside_writable_refused, true),
        s!(bad_grant_is_a_clear_error, true),
        s!(gate_opens_when_available, true),
        s!(fail_closed_without_landlock, true),
        s!(fail_closed_without_seccomp, true),
        s!(fail_closed_without_mount_setattr, true, plain_only: NAMESPACES_STEP),
        s!(fail_closed_without_pid_namespace, true),
        s!(fail_closed_without_landlock_or_namespaces, true),
        s!(child_fails_closed_without_restrict_self, true),
        s!(child_fails_closed_without_seccomp, true),
        s!(egress_fails_closed_without_the_listener, true),
        s!(egress_fails_closed_without_loopback, true),
        s!(child_fails_closed_without_userns, true, plain_only: NAMESPACES_STEP),
        s!(child_fails_closed_without_setresuid, false),
        s!(child_fails_closed_without_capset, true),
        s!(child_fails_closed_without_the_bounding_set_drop, false),
        s!(child_fails_closed_without_no_new_privs, true),
        s!(child_fails_closed_without_setrlimit, true),
        s!(child_fails_closed_without_mount, true, plain_only: NAMESPACES_STEP),
        s!(child_fails_closed_without_mount_setattr, true, plain_only: NAMESPACES_STEP),
        s!(child_fails_closed_without_landlock_add_rule, true, plain_only: NAMESPACES_STEP),
        s!(
            child_fails_closed_when_the_init_cannot_start_the_program,
            true
        ),
        s!(child_fails_closed_without_the_map_writer, false, plain_only: NAMESPACES_STEP),
        s!(host_nobody_cannot_reach_the_program, false),
        s!(concurrent_sandboxes_keep_their_own_quotas, true),
        s!(hostname_is_the_sandboxes_own, true),
        s!(the_sandboxes_proc_is_read_only, true),
        s!(tier_landlock_leaves_no_process_behind, true),
        s!(tier_landlock_ends_when_its_warden_dies, true),
        s!(shebang_arguments_grant_nothing, true),
        s!(a_stopped_setup_is_killed_and_fails, true),
        s!(aio_pool_stays_the_hosts, true),
        s!(filled_pools_leave_the_host_its_share, true),
        s!(a_grant_reaching_huge_pages_is_refused, false),
        s!(
            a_filesystem_without_idmapped_mounts_is_refused,
            false,
            plain_only: "idmapped mounts are a step of tier namespaces only: tier landlock on a \
                         root host refuses every host dir that outlives the sandbox before it \
                         looks at its filesystem (grants_read_only_and_read_write checks that)"
        ),
    ]
}

pub fn main() {
    if let Ok(name) = std::env::var(SCENARIO_ENV) {
        if name == ORPHAN_HELPER {
            orphan_helper();
        }
        if name == breaches::KILLED_HOST_HELPER {
            breaches::killed_host_helper();
        }
        if name == launcher::TRACER_HELPER {
            launcher::tracer_helper();
        }
        if name == own_uid::HELPER {
            own_uid::helper();
        }
        if name == pools::HELPER {
            pools::helper();
        }
        if name == scratch::HOLDER_HELPER {
            scratch::holder_helper();
        }
        let Some(s) = scenarios().into_iter().find(|s| s.name == name) else {
            eprintln!("unknown scenario {name}");
            std::process::exit(2);
        };
        match (s.run)() {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    }
    // Driver: libtest's arguments choose the scenarios.
    let all = scenarios();
    let names: Vec<&str> = all.iter().map(|s| s.name).collect();
    let selection = crate::driver::Selection::from_env();
    let chosen = selection.chosen_or_exit(&names);
    let exe = std::env::current_exe().expect("current_exe");
    // SAFETY: geteuid cannot fail.
    let is_root = unsafe { libc::geteuid() } == 0;
    let nobody_copy = if is_root {
        Some(copy_for_nobody(&exe))
    } else {
        None
    };

    let mut passed = 0;
    let mut reduced = Vec::new();
    let mut failed = Vec::new();
    // Each scenario runs on this host and on it made like a container
    // (the container profile's filter on the scenario's process, so the
    // backend has to choose tier landlock); `--host=` limits the run to
    // one of the two while iterating.
    let hosts: Vec<bool> = match selection
        .flags
        .iter()
        .find_map(|f| f.strip_prefix("--host="))
    {
        None => vec![false, true],
        Some("plain") => vec![false],
        Some("container") => vec![true],
        Some(other) => {
            eprintln!("error: --host={other}: the hosts are `plain` and `container`");
            std::process::exit(2);
        }
    };
    let mut not_run = Vec::new();
    for s in all.iter().filter(|s| chosen.contains(&s.name)) {
        let mut runs = Vec::new();
        for &container in &hosts {
            if let (true, Some(why)) = (container, s.plain_only) {
                println!("test {} [container] ... not run there: {why}", s.name);
                not_run.push(s.name);
                continue;
            }
            let host = if container { "container" } else { "host" };
            runs.push((host.to_string(), exe.clone(), false, container));
            if let (true, Some((_, copy))) = (s.as_nobody, &nobody_copy) {
                let label = if container {
                    "container uid65534"
                } else {
                    "uid65534"
                };
                runs.push((label.to_string(), copy.clone(), true, container));
            }
        }
        for (label, bin, nobody, container) in runs {
            let started = Instant::now();
            let (ok, output) = run_scenario(&bin, s.name, nobody, container);
            let ms = started.elapsed().as_millis();
            if ok && output.contains("\n  reduced: ") {
                reduced.push(format!("{} [{label}]", s.name));
                println!(
                    "test {} [{label}] ... ok, reduced ({ms} ms){output}",
                    s.name
                );
            } else if ok {
                passed += 1;
                println!("test {} [{label}] ... ok ({ms} ms){output}", s.name);
            } else {
                println!("test {} [{label}] ... FAILED ({ms} ms)\n{output}", s.name);
                failed.push(format!("{} [{label}]", s.name));
            }
        }
    }
    println!(
        "\n{passed} passed, {} reduced, {} failed ({} not run on the container-like host: {})",
        reduced.len(),
        failed.len(),
        not_run.len(),
        not_run.join(", ")
    );
    for r in &reduced {
        println!("  reduced: {r}");
    }
    for f in &failed {
        println!("  failed: {f}");
    }
    if let Some((dir, _)) = nobody_copy {
        let _ = std::fs::remove_dir_all(dir);
    }
    if !failed.is_empty() {
        std::process::exit(1);
    }
}

fn copy_for_nobody(exe: &Path) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("cordon-linux-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let copy = dir.join("confinement");
    std::fs::copy(exe, &copy).expect("copy test binary");
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (dir, copy)
}

fn run_scenario(bin: &Path, name: &str, nobody: bool, container: bool) -> (bool, String) {
    let mut cmd = Command::new(bin);
    cmd.env(SCENARIO_ENV, name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if nobody {
        cmd.env_clear()
            .env(SCENARIO_ENV, name)
            .env("PATH", PATH)
            .env("TMPDIR", "/tmp")
            .env("HOME", "/nonexistent")
            .current_dir("/tmp")
            .uid(65534)
            .gid(65534);
    }
    if container {
        container_filter::install_on(cmd.env(HOST_ENV, "container"));
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot start scenario: {e}")),
    };
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = crate::driver::wait_within(&mut child, Duration::from_secs(120));
    let so = t_out.join().unwrap_or_default();
    let se = t_err.join().unwrap_or_default();
    match status {
        // What a passing scenario says of its run (`note:` lines) and what
        // it could not check (`reduced:` lines: the driver counts such a
        // pass apart) is shown with the pass.
        Some(st) if st.success() => (
            true,
            so.lines()
                .filter(|l| l.starts_with("note: ") || l.starts_with("reduced: "))
                .map(|l| format!("\n  {l}"))
                .collect(),
        ),
        Some(st) => (
            false,
            format!("  status: {st}\n  stdout: {so}\n  stderr: {se}"),
        ),
        None => (
            false,
            format!("  timed out\n  stdout: {so}\n  stderr: {se}"),
        ),
    }
}

// ---------------------------------------------------------------- helpers

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn backend() -> Arc<LinuxBackend> {
    Arc::new(LinuxBackend::new())
}

/// Whether the driver started this scenario under the container profile's
/// filter, where the backend can only choose tier landlock.
fn on_container() -> bool {
    std::env::var(HOST_ENV).as_deref() == Ok("container")
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Tier landlock on a root host: a host directory that outlives the
/// sandbox (a caller's scratch dir, a read-write grant) is refused (no
/// idmapped mount; README "Tier landlock", P5).
fn host_dirs_refused() -> bool {
    on_container() && is_root()
}

/// Tier landlock as another user: the sandbox is the caller's uid, so the
/// metadata writes Landlock does not govern (`chmod`, …) are refused
/// everywhere, scratch included.
fn metadata_writes_refused() -> bool {
    on_container() && !is_root()
}

/// What [`host_dirs_refused`] scenarios check instead: `spec` (with a
/// host directory that outlives the sandbox) is refused by `sp` with the
/// reason and the remedy, nothing of `dir` (the host directory it names)
/// is touched, and the scenario says on its pass line what it could not
/// check there.
fn expect_host_dir_refused(sp: &Spawner, spec: ChildSpec, dir: &Path) -> Outcome {
    let before = dir_listing(dir);
    match rt().block_on(async { sp.spawn(&spec).map(|_| ()) }) {
        Err(SpawnError::Wrap(e)) => {
            let msg = e.to_string();
            ensure(
                msg.contains(
                    "tier landlock on a root host cannot give the sandbox a host directory",
                ) && msg.contains("use a fresh, discarded scratch"),
                || format!("the refusal does not say why and what to do: {msg}"),
            )?;
        }
        Err(e) => return Err(format!("refused otherwise than by the backend: {e}")),
        Ok(()) => return Err("tier landlock on a root host ran with a host directory".into()),
    }
    ensure(dir_listing(dir) == before, || {
        format!("{} changed although nothing ran", dir.display())
    })?;
    println!(
        "reduced: tier landlock on a root host refuses a host directory that outlives the \
         sandbox: the refusal is what this checked there"
    );
    Ok(())
}

/// Runs `spec` with a fresh scratch and, once the program has printed a
/// line `done`, calls `inspect` with that scratch's host path (a host dir
/// in tier landlock; a tier namespaces scratch is a private tmpfs the
/// host cannot see into) before the sandbox ends and it is removed. The
/// program must then wait for its stdin to close.
fn inspect_fresh_scratch<T>(
    sp: &Spawner,
    spec: ChildSpec,
    inspect: impl FnOnce(&Path) -> T,
) -> Result<(String, T), String> {
    use tokio::io::AsyncBufReadExt;
    rt().block_on(async {
        let mut child = sp
            .spawn(&spec.scratch(Scratch::Fresh))
            .map_err(|e| format!("spawn failed: {e}"))?;
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut said = String::new();
        let found = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(l)) = lines.next_line().await {
                if l == "done" {
                    return true;
                }
                said.push_str(&l);
                said.push('\n');
            }
            false
        })
        .await
        .unwrap_or(false);
        let seen = found.then(|| inspect(child.scratch_dir()));
        drop(child.stdin.take());
        child.kill();
        let _ = child.wait().await;
        match seen {
            Some(v) => Ok((said, v)),
            None => Err(format!(
                "the program never said done: {said:?}, stderr {:?}",
                String::from_utf8_lossy(&child.stderr_tail())
            )),
        }
    })
}

/// The names in `dir` and their modes, to tell whether anything changed.
fn dir_listing(dir: &Path) -> Vec<(std::ffi::OsString, u32)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| {
                    let mode = e.metadata().map(|m| m.permissions().mode()).unwrap_or(0);
                    (e.file_name(), mode)
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn config() -> RunnerConfig {
    RunnerConfig::default()
}

fn spawner_with(config: RunnerConfig) -> Spawner {
    Spawner::confined(backend(), config)
}

fn spawner() -> Spawner {
    spawner_with(config())
}

struct Ran {
    outcome: ExitOutcome,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "outcome {:?}, stdout {:?}, stderr {:?}",
            self.outcome, self.stdout, self.stderr
        )
    }
}

fn spec(program: &str, args: &[&str]) -> ChildSpec {
    ChildSpec::new(program)
        .args(args.iter().copied())
        .env("PATH", PATH)
        .env("LC_ALL", "C")
        .limits(Limits {
            deadline: Some(Duration::from_secs(60)),
            ..Limits::default()
        })
}

fn sh(script: &str) -> ChildSpec {
    spec("/bin/sh", &["-c", script])
}

fn py(code: &str) -> ChildSpec {
    spec(PYTHON, &["-c", code])
}

fn run_with(spawner: &Spawner, spec: ChildSpec) -> Result<Ran, String> {
    rt().block_on(async {
        let mut child = spawner
            .spawn(&spec)
            .map_err(|e| format!("spawn failed: {e}"))?;
        drop(child.stdin.take());
        let reader = child.stdout.take().map(|mut so| {
            tokio::spawn(async move {
                let mut v = Vec::new();
                let _ = so.read_to_end(&mut v).await;
                v
            })
        });
        let outcome = child.wait().await.map_err(|e| format!("wait: {e}"))?;
        let stdout = match reader {
            Some(r) => tokio::time::timeout(Duration::from_secs(5), r)
                .await
                .map_err(|_| "stdout did not close".to_string())?
                .map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        Ok(Ran {
            outcome,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&child.stderr_tail()).into_owned(),
        })
    })
}

/// The same program with hygiene only and no sandbox: the control that
/// shows a check can fail (what the sandbox must stop happens here).
fn run_unconfined(spec: ChildSpec) -> Result<Ran, String> {
    run_with(&Spawner::hygiene_only(config()), spec)
}

/// Gives `path` to the sandbox uid when the host is root, so that only the
/// sandbox, not file ownership, stands in the way.
fn chown_to_sandbox(path: &Path) {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(path, Some(65534), Some(65534)).expect("chown");
    }
}

fn run(spec: ChildSpec) -> Result<Ran, String> {
    run_with(&spawner(), spec)
}

fn expect_ok(spec: ChildSpec) -> Result<Ran, String> {
    let r = run(spec)?;
    if r.outcome != ExitOutcome::Exited(0) {
        return Err(format!("expected success: {r}"));
    }
    Ok(r)
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// A host-side temp dir readable by everyone (so a denial is Landlock's,
/// not the file mode's), holding `secret` with `content`.
fn canary(content: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("cordon-canary-")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let f = dir.path().join("secret");
    std::fs::write(&f, content).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    dir
}

fn existing_scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cordon-test-scratch-")
        .tempdir()
        .expect("tempdir")
}

// -------------------------------------------------------------- scenarios

fn available_with_facts() -> Outcome {
    let b = LinuxBackend::new();
    ensure(b.name() == "linux", || "name".into())?;
    ensure(b.availability() == Availability::Available, || {
        format!("backend unavailable on this host: {:?}", b.availability())
    })?;
    let facts = b.host_facts();
    for k in [
        "landlock_abi",
        "seccomp",
        "namespaces",
        "pid1",
        "mounts",
        "layers",
        "uid",
    ] {
        ensure(facts.contains_key(k), || {
            format!("host_facts lacks {k}: {facts:?}")
        })?;
    }
    if on_container() {
        // Tier landlock, and what it gives up, said where a report shows.
        let gives_up = if is_root() {
            "hostname, host-pid-existence"
        } else {
            "hostname, host-pid-existence, capability-bounding-set"
        };
        ensure(
            facts["namespaces"] == "none (tier landlock)"
                && facts
                    .get("tier")
                    .is_some_and(|t| t.starts_with("landlock: "))
                && facts.get("gives_up").map(String::as_str) == Some(gives_up),
            || format!("{facts:?}"),
        )?;
    } else {
        ensure(facts["namespaces"] == "user, uts, pid, ipc, mount", || {
            format!("{facts:?}")
        })?;
    }
    ensure(facts["layers"] == "all", || format!("{facts:?}"))?;
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        // A uid of its own per sandbox, from the default range.
        ensure(
            facts
                .get("sandbox_uids")
                .is_some_and(|r| r.starts_with("2000000000-2000065535 "))
                && !facts.contains_key("sandbox_uid"),
            || format!("{facts:?}"),
        )?;
    } else {
        ensure(facts.get("sandbox_uid") == Some(&uid.to_string()), || {
            format!("{facts:?}")
        })?;
    }
    // Root on a host whose cgroup v1 memory controller it can write (this
    // machine) must get the sandbox-wide limits, not fall back silently.
    let v1_writable = std::fs::OpenOptions::new()
        .write(true)
        .open("/sys/fs/cgroup/memory/cgroup.procs")
        .is_ok();
    if uid == 0 && v1_writable {
        for k in ["limit_memory", "limit_processes", "limit_cpu", "limit_disk"] {
            // Tier landlock has no tmpfs for the scratch: per file.
            let scope = if k == "limit_disk" && on_container() {
                "per-file:"
            } else {
                "sandbox:"
            };
            ensure(facts[k].starts_with(scope), || {
                format!("as root with cgroup v1, {k} = {:?}", facts[k])
            })?;
        }
    }
    if on_container() {
        return Ok(());
    }
    let base = LinuxBackend::with_layers(cordon_backend_linux::Layers::BASE).host_facts();
    ensure(
        base["namespaces"] == "user" && base["layers"].starts_with("base"),
        || format!("{base:?}"),
    )?;
    Ok(())
}

fn sh_pipeline() -> Outcome {
    let r = expect_ok(sh("echo hi | tr a-z A-Z > out && cat out"))?;
    ensure(r.stdout == "HI\n", || format!("{r}"))
}

fn python_runs_in_scratch() -> Outcome {
    let scratch = existing_scratch();
    let want = scratch.path().canonicalize().unwrap();
    let program =
        py("import json,os; print(os.getcwd()); print(os.environ['HOME'], os.environ['TMPDIR'])")
            .scratch(Scratch::Existing(scratch.path().to_path_buf()));
    if host_dirs_refused() {
        expect_host_dir_refused(&spawner(), program, scratch.path())?;
        // A kept fresh scratch is refused too, and the dir made for it
        // does not stay behind (nothing ran in it).
        let base = existing_scratch();
        let mut cfg = config();
        cfg.scratch_base = base.path().to_path_buf();
        let kept = py("print(1)").scratch(Scratch::FreshKept);
        expect_host_dir_refused(&spawner_with(cfg), kept, base.path())?;
        return ensure(dir_listing(base.path()).is_empty(), || {
            format!("a refused spawn left {:?}", dir_listing(base.path()))
        });
    }
    let r = expect_ok(program)?;
    let w = want.display().to_string();
    ensure(r.stdout == format!("{w}\n{w} {w}\n"), || {
        format!("cwd/HOME/TMPDIR not the scratch dir {w}: {r}")
    })
}

fn gcc_compiles_and_runs() -> Outcome {
    let program = sh(
        "printf '#include <stdio.h>\\nint main(void){puts(\"compiled ok\");return 0;}\\n' > hello.c \
         && gcc -O1 hello.c -o hello && ./hello",
    );
    if metadata_writes_refused() {
        // The link step's chmod is refused, so the output is not
        // executable: the documented cost of that tier.
        return expect_metadata_write_refused(program, "./hello: Permission denied");
    }
    let r = expect_ok(program)?;
    ensure(r.stdout == "compiled ok\n", || format!("{r}"))
}

/// What a [`metadata_writes_refused`] sandbox makes of a tool that needs
/// `chmod` in its scratch: it fails, and `stderr` says so (`symptom`).
fn expect_metadata_write_refused(program: ChildSpec, symptom: &str) -> Outcome {
    let r = run(program)?;
    ensure(
        r.outcome != ExitOutcome::Exited(0) && r.stderr.contains(symptom),
        || format!("want a failure showing {symptom:?} (chmod refused): {r}"),
    )?;
    println!(
        "reduced: tier landlock as another user refuses chmod in scratch too: the tool's \
         documented failure is what this checked there"
    );
    Ok(())
}

/// make, tar (create + extract) and `cp -p` (mode and times kept) work in
/// scratch, with every layer on.
fn make_tar_and_cp_p_work() -> Outcome {
    for tool in ["/usr/bin/make", "/usr/bin/tar", "/usr/bin/cp"] {
        ensure(Path::new(tool).exists(), || {
            format!("{tool} is not installed: install it (the CI script does) to run this test")
        })?;
    }
    let program = sh(
        "printf 'all: out.txt\\nout.txt: in.txt\\n\\tcp in.txt out.txt\\n' > Makefile && \
         echo made > in.txt && make -s && cat out.txt && \
         mkdir d && echo one > d/f && chmod 640 d/f && touch -d @981158400 d/f && \
         tar cf a.tar d && rm -r d && tar xf a.tar && stat -c '%a %Y' d/f && \
         cp -p d/f g && stat -c '%a %Y' g",
    );
    if metadata_writes_refused() {
        return expect_metadata_write_refused(
            program,
            "chmod: changing permissions of 'd/f': Operation not permitted",
        );
    }
    let r = expect_ok(program)?;
    let want = "made\n640 981158400\n640 981158400\n";
    ensure(r.stdout == want, || format!("want {want:?}: {r}"))
}

fn git_init() -> Outcome {
    let program = sh(
        "git init -q . && test -d .git && git -c user.name=t -c user.email=t@e \
         commit -q --allow-empty -m first && git log --format=%s",
    );
    if metadata_writes_refused() {
        return expect_metadata_write_refused(program, "Operation not permitted");
    }
    let r = expect_ok(program)?;
    ensure(r.stdout == "first\n", || format!("{r}"))
}

fn write_outside_scratch_denied() -> Outcome {
    let outside = canary("x");
    let marker = outside.path().join("marker");
    let secret = outside.path().join("secret");
    let tmp_marker =
        std::env::temp_dir().join(format!("cordon-marker-{}-{}", std::process::id(), "w"));
    let script = format!(
        "echo pwned > {m}; echo pwned > {t}; mkdir {m}.d; touch {m}.t; \
         mv {s} {m}.mv; echo pwned >> {s}; true > {s}; echo SENTINEL; exit 0",
        m = marker.display(),
        t = tmp_marker.display(),
        s = secret.display(),
    );
    let r = expect_ok(sh(&script))?;
    ensure(r.stdout.contains("SENTINEL"), || {
        format!("the script did not run: {r}")
    })?;
    ensure(!marker.exists(), || format!("marker created: {r}"))?;
    ensure(!tmp_marker.exists(), || format!("/tmp marker created: {r}"))?;
    ensure(!outside.path().join("marker.d").exists(), || {
        format!("dir created: {r}")
    })?;
    ensure(!outside.path().join("marker.t").exists(), || {
        format!("touch: {r}")
    })?;
    ensure(!outside.path().join("marker.mv").exists(), || {
        format!("the secret was moved: {r}")
    })?;
    let content = std::fs::read_to_string(&secret).unwrap();
    ensure(content == "x", || {
        format!("outside file modified to {content:?}: {r}")
    })?;
    // The shell was refused: by Landlock (EACCES) or by the read-only host
    // mount (EROFS).
    ensure(
        r.stderr.contains("Permission denied") || r.stderr.contains("Read-only file system"),
        || format!("{r}"),
    )?;
    // Control: without the sandbox the same script does write there, so
    // the checks above can fail.
    let r = run_unconfined(sh(&script))?;
    let wrote = marker.exists();
    let _ = std::fs::remove_file(&tmp_marker);
    ensure(wrote, || {
        format!("the control run could not write either: {r}")
    })
}

fn read_canary_denied() -> Outcome {
    let c = canary("CANARY-7f3a");
    let secret = c.path().join("secret");
    let script = format!(
        "cat {s}; ls {d}; head -c 100 {s}; echo SENTINEL",
        s = secret.display(),
        d = c.path().display()
    );
    let r = run(sh(&script))?;
    ensure(r.stdout.ends_with("SENTINEL\n"), || {
        format!("the script did not run: {r}")
    })?;
    ensure(!r.stdout.contains("CANARY-7f3a"), || {
        format!("canary read: {r}")
    })?;
    ensure(!r.stdout.contains("secret"), || format!("dir listed: {r}"))?;
    let r = run_unconfined(sh(&script))?;
    ensure(
        r.stdout.contains("CANARY-7f3a") && r.stdout.contains("secret"),
        || format!("control: the canary is unreadable even without a sandbox: {r}"),
    )?;
    // The host's home dir and /etc are not readable either.
    let r = run(sh(
        "cat /etc/shadow; ls /root; ls /home; ls /etc; echo SENTINEL",
    ))?;
    ensure(
        !r.stdout.contains("root:") && r.stdout.trim() == "SENTINEL",
        || format!("read outside grants: {r}"),
    )
}

fn grants_read_only_and_read_write() -> Outcome {
    let ro = canary("RO-CONTENT");
    let rw = canary("RW-CONTENT");
    let mut cfg = config();
    cfg.read_only = vec![ro.path().to_path_buf()];
    cfg.read_write = vec![rw.path().to_path_buf()];
    let sp = spawner_with(cfg);
    let script = format!(
        "cat {ro}/secret && cat {rw}/secret && echo new > {rw}/new && mkdir {rw}/sub && \
         echo more >> {rw}/secret && \
         if echo bad > {ro}/secret; then echo RO-WRITABLE; fi; \
         if echo bad > {ro}/new; then echo RO-CREATE; fi; exit 0",
        ro = ro.path().display(),
        rw = rw.path().display()
    );
    if host_dirs_refused() {
        return expect_host_dir_refused(&sp, sh(&script), rw.path());
    }
    let r = run_with(&sp, sh(&script))?;
    ensure(r.outcome == ExitOutcome::Exited(0), || format!("{r}"))?;
    ensure(
        r.stdout.contains("RO-CONTENT") && r.stdout.contains("RW-CONTENT"),
        || format!("granted reads failed: {r}"),
    )?;
    ensure(
        !r.stdout.contains("RO-WRITABLE") && !r.stdout.contains("RO-CREATE"),
        || format!("read-only grant writable: {r}"),
    )?;
    ensure(
        rw.path().join("new").exists() && rw.path().join("sub").is_dir(),
        || format!("read-write grant not writable: {r}"),
    )?;
    ensure(!ro.path().join("new").exists(), || "created in ro".into())?;
    let ro_content = std::fs::read_to_string(ro.path().join("secret")).unwrap();
    ensure(ro_content == "RO-CONTENT", || {
        format!("ro modified: {ro_content:?}")
    })
}

fn dev_null_and_urandom_work() -> Outcome {
    let r = expect_ok(sh(
        "echo x > /dev/null && head -c 16 /dev/urandom | wc -c && head -c 3 /dev/zero | wc -c",
    ))?;
    ensure(
        r.stdout.split_whitespace().collect::<Vec<_>>() == ["16", "3"],
        || format!("{r}"),
    )
}

fn symlink_escape_denied() -> Outcome {
    let c = canary("LINKED-SECRET");
    let secret = c.path().join("secret");
    let target_new = c.path().join("created-through-link");
    let script = format!(
        "ln -s {s} link && cat link; ln -s {d} dirlink && ls dirlink/; \
         ln -s {n} link2 && echo pwned > link2; echo SENTINEL",
        s = secret.display(),
        d = c.path().display(),
        n = target_new.display()
    );
    let r = run(sh(&script))?;
    ensure(r.stdout.ends_with("SENTINEL\n"), || {
        format!("the script did not run: {r}")
    })?;
    ensure(!r.stdout.contains("LINKED-SECRET"), || {
        format!("read via symlink: {r}")
    })?;
    ensure(!r.stdout.contains("secret"), || {
        format!("listed via symlink: {r}")
    })?;
    ensure(!target_new.exists(), || format!("created via symlink: {r}"))?;
    let r = run_unconfined(sh(&script))?;
    ensure(
        r.stdout.contains("LINKED-SECRET") && target_new.exists(),
        || format!("control: the links do not work even without a sandbox: {r}"),
    )
}

fn hardlink_denied() -> Outcome {
    // A scratch dir the sandbox can write and a canary it owns: neither
    // file modes nor protected_hardlinks stand in the way, only the sandbox.
    let c = canary("HARD");
    let secret = c.path().join("secret");
    chown_to_sandbox(&secret);
    let script = format!(
        "ln /etc/passwd x; ln {s} y; echo mine > a && ln a b && echo LINK-IN-SCRATCH",
        s = secret.display()
    );
    let attempt = |sp: &Spawner| -> Result<(Ran, bool, bool), String> {
        let scratch = existing_scratch();
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let r = run_with(
            sp,
            sh(&script).scratch(Scratch::Existing(scratch.path().to_path_buf())),
        )?;
        Ok((
            r,
            scratch.path().join("x").exists(),
            scratch.path().join("y").exists(),
        ))
    };
    if host_dirs_refused() {
        let scratch = existing_scratch();
        expect_host_dir_refused(
            &spawner(),
            sh(&script).scratch(Scratch::Existing(scratch.path().to_path_buf())),
            scratch.path(),
        )?;
        // Tier landlock's fresh scratch is a host dir on the host's
        // filesystem, where a link to the canary (0666, so
        // protected_hardlinks allows it) is only the sandbox's to stop.
        let held = format!("{script}; echo done; read x");
        let linked = |dir: &Path| (dir.join("x").exists(), dir.join("y").exists());
        let (said, (x, y)) = inspect_fresh_scratch(&spawner(), sh(&held), linked)?;
        ensure(said.contains("LINK-IN-SCRATCH"), || {
            format!("a hard link inside scratch failed: {said}")
        })?;
        ensure(!x && !y, || {
            format!("hardlinked out of a fresh scratch: x {x}, y {y}")
        })?;
        let (_, (_, y)) =
            inspect_fresh_scratch(&Spawner::hygiene_only(config()), sh(&held), linked)?;
        return ensure(y, || {
            "control: the canary cannot be linked from a fresh scratch even unconfined".into()
        });
    }
    let (r, x, y) = attempt(&spawner())?;
    ensure(r.stdout.contains("LINK-IN-SCRATCH"), || {
        format!("a hard link inside scratch failed: {r}")
    })?;
    ensure(!x, || format!("hardlinked /etc/passwd: {r}"))?;
    ensure(!y, || format!("hardlinked the canary: {r}"))?;
    let (r, _, y) = attempt(&Spawner::hygiene_only(config()))?;
    ensure(y, || {
        format!("control: the canary cannot be linked even without a sandbox: {r}")
    })
}

fn mknod_denied_fifo_allowed() -> Outcome {
    let r = run(sh(
        "mknod dev c 1 3 && echo MKNOD-OK; mkfifo f && test -p f && echo FIFO-OK",
    ))?;
    ensure(!r.stdout.contains("MKNOD-OK"), || {
        format!("mknod worked: {r}")
    })?;
    ensure(r.stdout.contains("FIFO-OK"), || {
        format!("mkfifo failed: {r}")
    })
}

fn proc_of_host_denied() -> Outcome {
    let me = std::process::id();
    let script =
        format!("cat /proc/{me}/environ; ls /proc/{me}/fd; cat /proc/self/status; echo SENTINEL");
    let r = run(sh(&script))?;
    ensure(r.stdout == "SENTINEL\n", || format!("/proc readable: {r}"))?;
    let r = run_unconfined(sh(&script))?;
    ensure(r.stdout.contains("Name:"), || {
        format!("control: /proc is unreadable even without a sandbox: {r}")
    })
}

fn tcp_connect_denied() -> Outcome {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket\n\
         try:\n    s=socket.create_connection(('127.0.0.1',{port}),timeout=3); s.sendall(b'x'); print('CONNECTED')\n\
         except OSError as e: print('DENIED', e.errno)\n"
    );
    let r = run(py(&code))?;
    ensure(r.stdout.starts_with("DENIED 1"), || {
        format!("python connect: {r}")
    })?;
    let r = run(spec(
        "/bin/bash",
        &[
            "-c",
            &format!("echo x > /dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
        ],
    ))?;
    ensure(!r.stdout.contains("CONNECTED"), || {
        format!("bash /dev/tcp: {r}")
    })?;
    // No event says "no connection will come": a connect that got
    // through reaches the accept queue when loopback delivers the
    // handshake's last ACK, asynchronously to the sender. This pause is
    // that delivery's chance to show; a denial needs no waiting for.
    std::thread::sleep(Duration::from_millis(100));
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Ok((_, peer)) => Err(format!("listener got a connection from {peer}")),
        Err(e) => Err(format!("accept: {e}")),
    }
}

fn sockets_denied_socketpair_allowed() -> Outcome {
    let code = r#"
import socket, errno
out = []
for name, fam, typ in [("unix", socket.AF_UNIX, socket.SOCK_STREAM),
                       ("udp", socket.AF_INET, socket.SOCK_DGRAM),
                       ("tcp6", socket.AF_INET6, socket.SOCK_STREAM),
                       ("raw", socket.AF_INET, socket.SOCK_RAW),
                       ("netlink", socket.AF_NETLINK, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ); out.append(name + "=OPEN")
    except OSError as e:
        out.append(name + "=" + str(e.errno))
a, b = socket.socketpair(); a.sendall(b"ping"); out.append("pair=" + b.recv(4).decode())
try:
    socket.getaddrinfo("example.com", 80); out.append("dns=RESOLVED")
except OSError as e:
    out.append("dns=fail")
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
r = libc.syscall(425, 8, params)
out.append("io_uring=%d/%d" % (r, ctypes.get_errno()))
print(" ".join(out))
"#;
    let r = expect_ok(py(code))?;
    let want = "unix=1 udp=1 tcp6=1 raw=1 netlink=1 pair=ping dns=fail io_uring=-1/1\n";
    ensure(r.stdout == want, || format!("want {want:?}: {r}"))
}

fn kill_host_process_denied() -> Outcome {
    // A host process with the sandbox's own uid, so DAC would allow the
    // signal: only Landlock's signal scoping stops it.
    let mut victim = Command::new("/bin/sleep");
    victim.arg("30");
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        victim.uid(65534).gid(65534);
    }
    let mut victim = victim.spawn().map_err(|e| format!("spawn victim: {e}"))?;
    let pid = victim.id();
    let r = run(sh(&format!(
        "kill -0 {pid} && echo SIGNALLED; kill -9 {pid} && echo KILLED; \
         sleep 5 & kill $! && echo OWN-CHILD-KILLED; wait; exit 0"
    )));
    let alive = victim.try_wait().ok().flatten().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    let r = r?;
    ensure(
        !r.stdout.lines().any(|l| l == "SIGNALLED" || l == "KILLED"),
        || format!("signalled a host process: {r}"),
    )?;
    ensure(r.stdout.contains("OWN-CHILD-KILLED"), || {
        format!("could not signal its own child: {r}")
    })?;
    ensure(alive, || "host process died".into())?;
    // ptrace of the host is refused too.
    let code = format!(
        "import ctypes\nlibc=ctypes.CDLL(None,use_errno=True)\n\
         print(libc.ptrace(16,{pid},0,0), ctypes.get_errno())\n\
         print(libc.ptrace(16,{me},0,0), ctypes.get_errno())\n",
        me = std::process::id()
    );
    let r = expect_ok(py(&code))?;
    ensure(r.stdout == "-1 1\n-1 1\n", || format!("ptrace: {r}"))
}

fn fork_bomb_stops_at_max_processes() -> Outcome {
    let code = r#"
import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError as e:
        break
    if pid == 0:
        os.close(1)
        time.sleep(20)
        os._exit(0)
    n += 1
print(n)
"#;
    let r = expect_ok(py(code).limits(Limits {
        max_processes: Some(8),
        deadline: Some(Duration::from_secs(60)),
        ..Limits::default()
    }))?;
    let n: u32 = r.stdout.trim().parse().map_err(|_| format!("{r}"))?;
    ensure((1..=7).contains(&n), || {
        format!("forked {n} children under max_processes=8: {r}")
    })?;
    // A shell fork bomb ends too (deadline would report DeadlineExceeded).
    // Whether the shell's own `sleep` finds a free slot in the full process
    // table is a race, so "Cannot fork" (exit 2) is as good as exit 0.
    let r = run(
        sh("bomb() { bomb | bomb & }; bomb; sleep 1; exit 0").limits(Limits {
            max_processes: Some(16),
            deadline: Some(Duration::from_secs(20)),
            ..Limits::default()
        }),
    )?;
    ensure(matches!(r.outcome, ExitOutcome::Exited(0 | 2)), || {
        format!("shell fork bomb: {r}")
    })
}

/// Runs `program args… token` (which must print one line and then wait for
/// stdin to close) under `sp`, and returns the host's view of it: the
/// `/proc/<pid>/status` of the process carrying `token`, found on the host.
fn status_of_held(sp: &Spawner, spec: ChildSpec, token: &str) -> Result<String, String> {
    rt().block_on(async {
        let mut child = sp
            .spawn(&spec.arg(token))
            .map_err(|e| format!("spawn failed: {e}"))?;
        let mut stdout = child.stdout.take().unwrap();
        let mut buf = [0u8; 5];
        tokio::time::timeout(Duration::from_secs(10), stdout.read_exact(&mut buf))
            .await
            .map_err(|_| "the program did not start".to_string())?
            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&child.stderr_tail())))?;
        let pids = host_pids_with_arg(token);
        let status = match pids.as_slice() {
            [pid] => {
                std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())
            }
            other => Err(format!(
                "expected one process with the token, found {other:?}"
            )),
        };
        drop(child.stdin.take());
        child.wait().await.map_err(|e| e.to_string())?;
        status
    })
}

/// The lines of a `/proc/<pid>/status` that say who a process is and what
/// it may do.
fn privileges(status: &str) -> Vec<&str> {
    status
        .lines()
        .filter(|l| {
            // Seccomp_filters: under a container's filter the control has
            // no_new_privs and mode 2 too, but one filter fewer.
            [
                "Uid:",
                "Gid:",
                "Groups:",
                "NoNewPrivs:",
                "Seccomp:",
                "Seccomp_filters:",
                "Cap",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        })
        .collect()
}

fn field<'a>(status: &'a str, key: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
        .unwrap_or("")
}

/// Host-side: the program's credentials, capability sets, no_new_privs and
/// seccomp mode, read by the host from `/proc/<pid>/status` of the live
/// program (inside the user namespace every unmapped uid reads as 65534,
/// so the program's own word could not tell a missing drop from root).
fn privileges_dropped() -> Outcome {
    let held = || spec("/bin/sh", &["-c", "echo held; read x", "sh"]);
    // SAFETY: geteuid/getegid cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let st = status_of_held(&spawner(), held(), &sleep_token())?;
    // As root: a uid of its own from the default pool, the gid the same.
    let (uid, gid) = if euid == 0 {
        let uid: u32 = field(&st, "Uid:")
            .split('\t')
            .next()
            .and_then(|u| u.parse().ok())
            .unwrap_or(0);
        ensure((2_000_000_000..=2_000_065_535).contains(&uid), || {
            format!("not a uid of the sandbox pool: {:?}", privileges(&st))
        })?;
        (uid, uid)
    } else {
        (euid, egid)
    };
    let want_ids = format!("{uid}\t{uid}\t{uid}\t{uid}");
    ensure(field(&st, "Uid:") == want_ids, || {
        format!("uid: {:?}", privileges(&st))
    })?;
    let want_gids = format!("{gid}\t{gid}\t{gid}\t{gid}");
    ensure(field(&st, "Gid:") == want_gids, || {
        format!("gid: {:?}", privileges(&st))
    })?;
    if euid == 0 {
        ensure(field(&st, "Groups:").is_empty(), || {
            format!("supplementary groups kept: {:?}", privileges(&st))
        })?;
    }
    for cap in ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"] {
        if cap == "CapBnd:" && metadata_writes_refused() {
            // Given up by tier landlock as another user (README): emptying
            // the bounding set takes CAP_SETPCAP; no_new_privs (checked
            // below) keeps it from ever giving a capability.
            println!("reduced: tier landlock as another user keeps the bounding set: not checked");
            continue;
        }
        ensure(field(&st, cap) == "0000000000000000", || {
            format!("{cap} not empty: {:?}", privileges(&st))
        })?;
    }
    ensure(field(&st, "NoNewPrivs:") == "1", || {
        format!("{:?}", privileges(&st))
    })?;
    ensure(field(&st, "Seccomp:") == "2", || {
        format!("{:?}", privileges(&st))
    })?;
    // Control: the same inspection of an unconfined run sees a difference
    // (root's uid and capabilities, or no no_new_privs and no seccomp).
    let control = status_of_held(&Spawner::hygiene_only(config()), held(), &sleep_token())?;
    ensure(privileges(&control) != privileges(&st), || {
        "control: an unconfined program looks the same to the host".into()
    })?;
    // The sandbox's own filter is on top of whatever the host had (under
    // the container's filter, no_new_privs and mode 2 are inherited, so
    // only this count shows the sandbox installed one).
    let filters = |s: &str| field(s, "Seccomp_filters:").parse::<u32>().unwrap_or(0);
    ensure(filters(&st) > filters(&control), || {
        format!(
            "the sandbox installed no filter of its own: {:?} vs unconfined {:?}",
            privileges(&st),
            privileges(&control)
        )
    })?;
    // rlimits as the host sees them.
    let r = expect_ok(py("import resource\nprint(resource.getrlimit(resource.RLIMIT_CORE), resource.getrlimit(resource.RLIMIT_NOFILE))").limits(Limits {
        open_files: Some(50),
        deadline: Some(Duration::from_secs(60)),
        ..Limits::default()
    }))?;
    ensure(r.stdout == "(0, 0) (50, 50)\n", || format!("{r}"))
}

/// As root: a setuid-root binary the sandbox may execute gives it nothing
/// (nosuid mounts, no_new_privs). The control runs the same binary on the
/// host as uid 65534, where the bit is honoured, so the check can fail.
fn setuid_binary_gives_nothing() -> Outcome {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("this scenario needs root (it plants a setuid-root binary)".into());
    }
    let dir = canary("x");
    let suid = dir.path().join("suid-sh");
    std::fs::copy("/bin/dash", &suid).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let mut cfg = config();
    cfg.read_only = vec![dir.path().to_path_buf()];
    let program = suid.to_str().unwrap().to_string();
    // dash keeps its euid (no -p dropping for a set-uid dash).
    let held = || spec(&program, &["-p", "-c", "echo held; read x", "sh"]);
    // Tier namespaces (a nosuid mount and no_new_privs) and tier landlock
    // (no_new_privs alone: the host's mounts are its own), each on this
    // host, where nothing outside the sandbox sets no_new_privs.
    let tiers = [
        spawner_with(cfg.clone()),
        Spawner::confined(Arc::new(LinuxBackend::new().with_tier(Tier::Landlock)), cfg),
    ];
    for (sp, tier) in tiers.iter().zip(["namespaces", "landlock"]) {
        let st = status_of_held(sp, held(), &sleep_token())?;
        let ids: Vec<&str> = field(&st, "Uid:").split('\t').collect();
        ensure(
            ids.len() == 4 && ids.iter().all(|u| *u == ids[0] && *u != "0"),
            || {
                format!(
                    "the setuid bit was honoured in tier {tier}: {:?}",
                    privileges(&st)
                )
            },
        )?;
    }
    // Control: on the host, as uid 65534, the same file runs as root.
    let token = sleep_token();
    let mut host = Command::new(&suid);
    host.args(["-p", "-c", "echo held; read x", "sh", &token])
        .uid(65534)
        .gid(65534)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut host = host.spawn().map_err(|e| e.to_string())?;
    let mut line = [0u8; 5];
    host.stdout
        .take()
        .unwrap()
        .read_exact(&mut line)
        .map_err(|e| e.to_string())?;
    let pids = host_pids_with_arg(&token);
    let control = pids
        .first()
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .unwrap_or_default();
    drop(host.stdin.take());
    let _ = host.wait();
    ensure(
        field(&control, "Uid:").split('\t').nth(1) == Some("0"),
        || format!("control: the setuid bit is not honoured on the host either: {control}"),
    )
}

fn namespaces_denied_setsid_allowed() -> Outcome {
    let code = r#"
import os, ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
out = []
def t(name, f):
    try:
        f(); out.append(name + "=OK")
    except OSError as e:
        out.append(name + "=" + str(e.errno))
# A new session is allowed: the PID namespace holds every process.
t("setsid", os.setsid)
def c(name, r):
    out.append(name + "=" + ("OK" if r == 0 else str(ctypes.get_errno())))
c("unshare_user", libc.unshare(0x10000000))
c("unshare_net", libc.unshare(0x40000000))
c("unshare_ns", libc.unshare(0x00020000))
r = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)
if r == 0:
    os._exit(0)
out.append("clone_newuser=" + ("OK" if r > 0 else str(ctypes.get_errno())))
r = libc.syscall(435, 0, 0)
out.append("clone3=%d/%d" % (r, ctypes.get_errno()))
c("mount", libc.mount(b"none", b".", b"tmpfs", 0, None))
# fork still works (glibc uses clone without namespace flags)
pid = os.fork()
if pid == 0:
    os._exit(7)
_, st = os.waitpid(pid, 0)
out.append("fork=%d" % os.WEXITSTATUS(st))
import threading
box = []
t = threading.Thread(target=lambda: box.append(1)); t.start(); t.join()
out.append("thread=%d" % len(box))
import subprocess
out.append("subprocess=" + subprocess.run(["/bin/echo", "sub"], capture_output=True).stdout.decode().strip())
print(" ".join(out))
"#;
    let r = expect_ok(py(code))?;
    // Tier landlock refuses setsid (EPERM): the sandbox cannot leave the
    // process group its init kills.
    let setsid = if on_container() { "1" } else { "OK" };
    let want = format!(
        "setsid={setsid} unshare_user=1 unshare_net=1 unshare_ns=1 clone_newuser=1 \
         clone3=-1/38 mount=1 fork=7 thread=1 subprocess=sub\n"
    );
    ensure(r.stdout == want, || format!("want {want:?}: {r}"))?;
    // TIOCSTI is refused by seccomp (EPERM), whatever the fd.
    let r = expect_ok(py(
        "import fcntl, termios\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('INJECTED')\n\
         except OSError as e: print(e.errno)\n",
    ))?;
    ensure(r.stdout == "1\n", || format!("TIOCSTI: {r}"))
}

/// Host pids of live processes whose argv contains `arg` (how the host
/// finds a sandboxed process: inside a PID namespace, the numbers the
/// sandbox sees mean nothing on the host).
fn host_pids_with_arg(arg: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.split(|b| *b == 0).any(|a| a == arg.as_bytes()))
                .unwrap_or(false)
        })
        .filter(|pid| proc_alive(*pid))
        .collect()
}

/// A unique `sleep` duration, so the host can find that very process.
fn sleep_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("30.{}{nanos:09}", std::process::id())
}

fn background_children_die() -> Outcome {
    let token = sleep_token();
    rt().block_on(async {
        let mut child = spawner()
            .spawn(&sh(&format!(
                "sleep {token} >/dev/null 2>&1 & echo started; read line; exit 0"
            )))
            .map_err(|e| format!("spawn failed: {e}"))?;
        let mut stdout = child.stdout.take().unwrap();
        let mut buf = [0u8; 8];
        tokio::time::timeout(Duration::from_secs(10), stdout.read_exact(&mut buf))
            .await
            .map_err(|_| "no 'started' line".to_string())?
            .map_err(|e| e.to_string())?;
        // Positive control: the background child exists while the program
        // runs (the sentinel that the check below can fail).
        let mut seen = Vec::new();
        for _ in 0..100 {
            seen = host_pids_with_arg(&token);
            if !seen.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        ensure(!seen.is_empty(), || {
            "the background child never appeared on the host".into()
        })?;
        drop(child.stdin.take());
        let outcome = child.wait().await.map_err(|e| e.to_string())?;
        ensure(outcome == ExitOutcome::Exited(0), || format!("{outcome:?}"))?;
        let left = host_pids_with_arg(&token);
        for pid in &left {
            // SAFETY: killing the test's own leftover.
            unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
        }
        ensure(left.is_empty(), || {
            format!("background child {left:?} outlived the program")
        })
    })
}

fn bad_grant_is_a_clear_error() -> Outcome {
    let dir = existing_scratch();
    let missing = dir.path().join("does-not-exist");
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    let marker = dir.path().join("ran");
    for (ro, rw, name) in [
        (vec![missing.clone()], vec![], missing.clone()),
        (vec![], vec![dangling.clone()], dangling.clone()),
    ] {
        let rw_case = !rw.is_empty();
        let mut cfg = config();
        cfg.read_only = ro;
        cfg.read_write = rw;
        let sp = spawner_with(cfg);
        let res = rt().block_on(async {
            sp.spawn(&sh(&format!("touch {}", marker.display())))
                .map(|_| ())
        });
        match res {
            Err(SpawnError::Wrap(e)) => {
                let msg = e.to_string();
                // Tier landlock on a root host refuses any read-write
                // grant before it looks at the path.
                let named = if host_dirs_refused() && rw_case {
                    "tier landlock on a root host cannot give the sandbox a host directory"
                } else {
                    name.to_str().unwrap()
                };
                ensure(msg.contains(named), || {
                    format!("error does not name {named:?}: {msg}")
                })?;
            }
            Err(e) => return Err(format!("unexpected error kind: {e}")),
            Ok(()) => return Err("spawned despite a bad grant".into()),
        }
    }
    ensure(!marker.exists(), || "child ran".into())
}

/// A suite that passes everything: only to test the availability gate.
struct AllPass;

#[async_trait::async_trait]
impl ConformanceSuite for AllPass {
    async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport {
        let probes = ProbeId::required_of(backend.as_ref())
            .into_iter()
            .map(|id| ProbeResult {
                id,
                title: "all pass".into(),
                status: ProbeStatus::Pass,
                detail: String::new(),
                checks_expected: 1,
                checks: vec![cordon_core::CheckResult {
                    name: "all-pass".into(),
                    status: ProbeStatus::Pass,
                    detail: String::new(),
                    evidence: cordon_core::Evidence::Host,
                    passes_without_sandbox: false,
                    discriminates: true,
                }],
                duration_ms: 0.0,
            })
            .collect();
        ConformanceReport::new(
            backend.name(),
            backend.availability(),
            HostFacts::collect(backend.as_ref()),
            probes,
            0.0,
        )
    }
}

fn gate_opens_when_available() -> Outcome {
    let res = rt().block_on(SandboxRunner::new(backend(), &AllPass, config()));
    ensure(res.is_ok(), || {
        format!("gate closed on a working host: {res:?}")
    })
}

/// Installs (on this whole process) filters that make the given syscalls
/// fail, simulating a kernel without the feature.
fn install_fake_kernel(rules: &[(i64, Vec<seccompiler::SeccompRule>, u32)]) {
    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
    let arch: TargetArch = std::env::consts::ARCH.try_into().expect("arch");
    for (nr, conds, errno) in rules {
        let mut map = BTreeMap::new();
        map.insert(*nr, conds.clone());
        let filter = SeccompFilter::new(
            map,
            SeccompAction::Allow,
            SeccompAction::Errno(*errno),
            arch,
        )
        .expect("filter");
        let prog: BpfProgram = filter.try_into().expect("compile");
        seccompiler::apply_filter_all_threads(&prog).expect("install fake-kernel filter");
    }
}

fn assert_fail_closed(what: &str) -> Outcome {
    assert_refused(LinuxBackend::new(), what)
}

/// A host where tier namespaces cannot run: required, it is refused for
/// `what` and nothing runs; left to choose, the backend takes tier
/// landlock and its `tier` fact says why tier namespaces was passed over.
fn assert_namespaces_refused(what: &str) -> Outcome {
    let chosen = LinuxBackend::new();
    ensure(chosen.tier() == Ok(Tier::Landlock), || {
        format!("chose {:?} without {what}", chosen.tier())
    })?;
    let fact = chosen.host_facts().get("tier").cloned().unwrap_or_default();
    ensure(
        fact.contains("tier namespaces is unavailable here") && fact.contains(what),
        || format!("the tier fact does not say why: {fact}"),
    )?;
    assert_refused(LinuxBackend::new().with_tier(Tier::Namespaces), what)
}

fn assert_refused(b: LinuxBackend, what: &str) -> Outcome {
    let reason = match b.availability() {
        Availability::Unavailable { reason } => reason,
        Availability::Available => return Err(format!("available without {what}")),
    };
    ensure(reason.contains(what), || {
        format!("reason does not mention {what}: {reason}")
    })?;
    let facts = b.host_facts();
    ensure(!facts.is_empty(), || "no host facts".into())?;
    // Spawning anyway must not run the program unconfined.
    let outside = canary("x");
    let marker = outside.path().join("marker");
    let res = run_with(
        &Spawner::confined(Arc::new(b.clone()), config()),
        sh(&format!("echo pwned > {}", marker.display())),
    );
    ensure(res.is_err(), || {
        format!("spawn succeeded without {what}: {}", res.as_ref().unwrap())
    })?;
    ensure(!marker.exists(), || {
        format!("program ran unconfined without {what}")
    })?;
    // And the runner refuses the backend even with a suite that passes all.
    let res = rt().block_on(SandboxRunner::new(Arc::new(b), &AllPass, config()));
    match res {
        Err(e) => {
            let msg = e.to_string();
            ensure(msg.contains(what), || {
                format!("SandboxUnavailable lacks the reason: {msg}")
            })
        }
        Ok(_) => Err(format!("SandboxRunner admitted the backend without {what}")),
    }
}

fn fail_closed_without_landlock() -> Outcome {
    install_fake_kernel(&[
        (
            libc::SYS_landlock_create_ruleset,
            vec![],
            libc::ENOSYS as u32,
        ),
        (libc::SYS_landlock_add_rule, vec![], libc::ENOSYS as u32),
        (
            libc::SYS_landlock_restrict_self,
            vec![],
            libc::ENOSYS as u32,
        ),
    ]);
    assert_fail_closed("Landlock")
}

fn fail_closed_without_seccomp() -> Outcome {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let prctl_set_seccomp = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::PR_SET_SECCOMP as u64,
    )
    .unwrap()])
    .unwrap();
    let prctl_get_seccomp = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::PR_GET_SECCOMP as u64,
    )
    .unwrap()])
    .unwrap();
    // prctl first: the seccomp-syscall filter must be the last installed.
    install_fake_kernel(&[
        (
            libc::SYS_prctl,
            vec![prctl_set_seccomp, prctl_get_seccomp],
            libc::EINVAL as u32,
        ),
        (libc::SYS_seccomp, vec![], libc::ENOSYS as u32),
    ]);
    assert_fail_closed("seccomp")
}

/// A kernel without `mount_setattr` (Linux < 5.12): the mount namespace
/// layer cannot be built, so tier namespaces is refused and nothing runs
/// in it; the backend left to choose takes tier landlock, and says so.
fn fail_closed_without_mount_setattr() -> Outcome {
    install_fake_kernel(&[(libc::SYS_mount_setattr, vec![], libc::ENOSYS as u32)]);
    assert_namespaces_refused("mount_setattr")
}

/// A host that refuses PID namespaces (e.g. a container runtime's seccomp
/// policy): tier namespaces is refused and nothing runs in it; the backend
/// left to choose takes tier landlock, and says so.
fn fail_closed_without_pid_namespace() -> Outcome {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let newpid = libc::CLONE_NEWPID as u64;
    let rule = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(newpid),
        newpid,
    )
    .unwrap()])
    .unwrap();
    install_fake_kernel(&[(libc::SYS_unshare, vec![rule], libc::EPERM as u32)]);
    assert_namespaces_refused("pid")
}

/// A container (no user namespaces) on a kernel without Landlock: no
/// tier can run, and the refusal names what each one lacks.
fn fail_closed_without_landlock_or_namespaces() -> Outcome {
    install_fake_kernel(&[
        (libc::SYS_unshare, vec![], libc::EPERM as u32),
        (
            libc::SYS_landlock_create_ruleset,
            vec![],
            libc::ENOSYS as u32,
        ),
    ]);
    let reason = LinuxBackend::new()
        .availability()
        .reason()
        .unwrap_or_default()
        .to_string();
    ensure(
        reason.starts_with("no tier can run here: tier namespaces: ")
            && reason.contains("; tier landlock: "),
        || format!("the refusal does not name each tier: {reason}"),
    )?;
    assert_fail_closed("Landlock")
}

const ORPHAN_HELPER: &str = "orphan_helper";

/// Helper process for `parent_death_kills_child`: spawns a sandboxed
/// `sleep`, prints its pid and exits at once without any cleanup (no
/// destructor runs, so only the parent-death signal can stop the child).
fn orphan_helper() -> ! {
    let rt = rt();
    let sp = spawner();
    // The scenario owns (and removes) the scratch dir: this process never
    // cleans up.
    // Without one (tier landlock on a root host refuses a host dir), a
    // fresh scratch, which the next sandbox's sweep removes.
    let scratch = match std::env::var_os("CORDON_ORPHAN_SCRATCH") {
        Some(dir) => Scratch::Existing(PathBuf::from(dir)),
        None => Scratch::Fresh,
    };
    let child = rt
        .block_on(async { sp.spawn(&sh("exec sleep 600").scratch(scratch)) })
        .expect("spawn");
    println!("{}", child.pid());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::mem::forget(child);
    std::process::exit(0);
}

fn proc_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().and_then(|x| x.trim().chars().next()))
        .is_some_and(|st| st != 'Z' && st != 'X')
}

fn parent_death_kills_child() -> Outcome {
    // Adopt the helper's orphans (a child subreaper): the sandbox's pid
    // then stays its own until this process reaps it, and its exit is an
    // event, its pidfd.
    // SAFETY: prctl on integers; this scenario process is ours.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "PR_SET_CHILD_SUBREAPER: {}",
            std::io::Error::last_os_error()
        ));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let scratch = existing_scratch();
    let mut helper = Command::new(exe);
    helper.env(SCENARIO_ENV, ORPHAN_HELPER);
    if !host_dirs_refused() {
        helper.env("CORDON_ORPHAN_SCRATCH", scratch.path());
    }
    let out = helper
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    let pid: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|_| format!("helper printed {:?}", String::from_utf8_lossy(&out.stdout)))?;
    let pidfd =
        crate::driver::pidfd_open(pid).map_err(|e| format!("pidfd of the orphan {pid}: {e}"))?;
    // The orphan's program sleeps far longer than this bound: only the
    // parent-death signal ends it within it.
    if !crate::driver::exits_within(&pidfd, Duration::from_secs(60)) {
        // SAFETY: the orphan this process adopted and has not reaped.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        reap(&pidfd);
        return Err(format!("sandboxed child {pid} outlived its parent"));
    }
    let (code, status) = reap(&pidfd);
    ensure(code == libc::CLD_KILLED && status == libc::SIGKILL, || {
        format!("the orphan {pid} ended otherwise than by SIGKILL: si_code {code}, status {status}")
    })
}

/// Reaps the adopted orphan of `pidfd`: its `si_code` and `si_status`.
fn reap(pidfd: &std::os::fd::OwnedFd) -> (i32, i32) {
    use std::os::fd::AsRawFd;
    // SAFETY: a zeroed siginfo for waitid to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on the pidfd of this process's own (adopted) child.
    let r = unsafe {
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::__WALL,
        )
    };
    if r != 0 {
        return (-1, -1);
    }
    // SAFETY: waitid filled a child's exit into `info`.
    (info.si_code, unsafe { info.si_status() })
}

fn pinned_program_runs() -> Outcome {
    use sha2::{Digest, Sha256};
    let program = Path::new("/bin/echo").canonicalize().unwrap();
    let digest: [u8; 32] = Sha256::digest(std::fs::read(&program).unwrap()).into();
    let mut s = spec(program.to_str().unwrap(), &["pinned", "ok"]);
    s.program_sha256 = Some(cordon_core::Sha256Pin(digest));
    let r = expect_ok(s)?;
    ensure(r.stdout == "pinned ok\n", || format!("{r}"))
}

fn exec_outside_grants_denied() -> Outcome {
    let c = canary("x");
    let bin = c.path().join("mytrue");
    std::fs::copy("/bin/true", &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!("{} && echo EXECUTED; echo SENTINEL", bin.display());
    let r = run(sh(&script))?;
    ensure(r.stdout == "SENTINEL\n", || {
        format!("ran an ungranted binary, or the script did not run: {r}")
    })?;
    let r = run_unconfined(sh(&script))?;
    ensure(r.stdout.contains("EXECUTED"), || {
        format!("control: the binary does not run even without a sandbox: {r}")
    })?;
    // Granted read-only through a symlink to its dir: canonicalised, runs.
    let link_dir = existing_scratch();
    let link = link_dir.path().join("bin-link");
    std::os::unix::fs::symlink(c.path(), &link).unwrap();
    let mut cfg = config();
    cfg.read_only = vec![link.clone()];
    let r = run_with(
        &spawner_with(cfg),
        sh(&format!("{}/mytrue && echo EXECUTED", link.display())),
    )?;
    ensure(r.stdout == "EXECUTED\n", || {
        format!("granted binary did not run: {r}")
    })
}

fn rename_tricks_denied() -> Outcome {
    let c = canary("RENAME-SECRET");
    let d = c.path().display().to_string();
    let script = format!(
        "echo mine > f; mv f {d}/f; mv {d}/secret ./stolen; mv {d} ./stolen-dir; \
         ln -s {d} l; mv l/secret ./stolen2; \
         mkdir a && echo 1 > a/b && mv a c && echo 2 > c/b && mv c a && cat a/b; exit 0"
    );
    let r = run(sh(&script))?;
    ensure(!c.path().join("f").exists(), || {
        format!("moved out of scratch: {r}")
    })?;
    ensure(c.path().join("secret").exists(), || {
        format!("moved the secret in: {r}")
    })?;
    ensure(!r.stdout.contains("RENAME-SECRET"), || format!("{r}"))?;
    ensure(r.stdout == "2\n", || {
        format!("rename inside scratch failed: {r}")
    })
}

fn read_only_inside_writable_refused() -> Outcome {
    let rw = canary("x");
    let inner = rw.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    let mut cfg = config();
    cfg.read_write = vec![rw.path().to_path_buf()];
    cfg.read_only = vec![inner.clone()];
    let sp = spawner_with(cfg);
    if host_dirs_refused() {
        return expect_host_dir_refused(&sp, sh("touch ran"), rw.path());
    }
    let res = rt().block_on(async { sp.spawn(&sh("true")).map(|_| ()) });
    match res {
        Err(SpawnError::Wrap(e)) => {
            let msg = e.to_string();
            ensure(
                msg.contains(inner.to_str().unwrap()) && msg.contains("inherited"),
                || format!("unclear error: {msg}"),
            )
        }
        Err(e) => Err(format!("unexpected error: {e}")),
        Ok(()) => Err("a read-only grant inside a writable one was accepted".into()),
    }
}

/// `wrap` succeeds on a working host; then one step of the child's setup
/// stops working before fork (a filter on this process, inherited by the
/// child): the child's step must fail, the spawn must report that errno,
/// and the program must not run. `private_scratch` asks for a discarded
/// scratch, which the backend backs with a tmpfs.
fn child_step_fails_closed(
    nr: i64,
    conds: Vec<seccompiler::SeccompRule>,
    errno: i32,
    private_scratch: bool,
    step: &str,
) -> Outcome {
    child_step_fails_closed_with(nr, conds, errno, private_scratch, Network::Deny, step)
}

/// [`child_step_fails_closed`] for a policy with `network`.
fn child_step_fails_closed_with(
    nr: i64,
    conds: Vec<seccompiler::SeccompRule>,
    errno: i32,
    private_scratch: bool,
    network: Network,
    step: &str,
) -> Outcome {
    let scratch = existing_scratch();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = scratch.path().join("ran");
    let mut cmd = cordon_core::ChildCommand::for_backend_tests("/bin/sh", scratch.path());
    cmd.args(["-c", &format!("echo pwned > {}", marker.display())]);
    let mut policy = cordon_core::SandboxPolicy::new(scratch.path(), Limits::probe());
    // Tier landlock on a root host refuses a scratch that persists; the
    // step under test is the same with a discarded one.
    policy.scratch_persists = !private_scratch && !host_dirs_refused();
    let egress = matches!(network, Network::Allow(_));
    policy.network = network;
    // What wrap holds for the child (its cgroups, the init's memory) must
    // outlive the spawn.
    let wrapped = LinuxBackend::new().wrap(&mut cmd, &policy);
    if egress && on_container() {
        // Tier landlock refuses the allowlist outright (README, P4/P8).
        let e = wrapped
            .err()
            .ok_or("tier landlock accepted an egress allowlist")?;
        ensure(
            e.to_string()
                .contains("tier landlock cannot hold an egress allowlist"),
            || format!("the refusal does not say why: {e}"),
        )?;
        println!("reduced: tier landlock refuses Network::Allow: the refusal is what this checked");
        return ensure(!marker.exists(), || "the program ran".into());
    }
    let _resources = wrapped.map_err(|e| format!("wrap failed on a working host: {e}"))?;
    install_fake_kernel(&[(nr, conds, errno as u32)]);
    match cmd.run_for_backend_tests(std::time::Duration::from_secs(30)) {
        Ok(out) => return Err(format!("spawned anyway: {:?}", out.status)),
        Err(e) => {
            ensure(e.source.raw_os_error() == Some(errno), || {
                format!("spawn failed with {e}, expected errno {errno}")
            })?;
            let named = e.step.and_then(|id| LinuxBackend::new().step_name(id));
            ensure(named == Some(step), || {
                format!("spawn failed with {e}, named step {named:?}, expected {step}")
            })?;
        }
    }
    ensure(!marker.exists(), || "the program ran".into())
}

/// A seccomp rule matching `prctl(option, …)`.
/// A seccomp rule matching only the init's clone of the program:
/// `CLONE_VM | CLONE_VFORK | SIGCHLD` with no new stack (core's launcher
/// makes the same flags, but always with a stack of its own).
fn init_clone_of_the_program() -> Vec<seccompiler::SeccompRule> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let flags = (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64;
    vec![SeccompRule::new(vec![
        SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, flags).unwrap(),
        SeccompCondition::new(1, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, 0).unwrap(),
    ])
    .unwrap()]
}

/// The init cannot make the program: the spawn fails with that errno (the
/// init reports it on the launch's pipe), instead of looking like a
/// program that exited 1.
fn child_fails_closed_when_the_init_cannot_start_the_program() -> Outcome {
    child_step_fails_closed(
        libc::SYS_clone,
        init_clone_of_the_program(),
        libc::EAGAIN,
        true,
        "process_tree",
    )
}

/// A policy with an egress allowlist, for the scenarios below.
fn allow_example() -> Network {
    Network::Allow(vec!["example.com:443".parse().unwrap()])
}

/// The egress allowlist: the launcher cannot listen in the sandbox's
/// network (`listen`, which nothing else of the launch calls, fails):
/// the spawn fails and nothing runs.
fn egress_fails_closed_without_the_listener() -> Outcome {
    child_step_fails_closed_with(
        libc::SYS_listen,
        vec![],
        libc::EPERM,
        true,
        allow_example(),
        "egress_listener",
    )
}

/// The egress allowlist: `lo` cannot be brought up (`SIOCSIFFLAGS`
/// fails): the spawn fails and nothing runs.
fn egress_fails_closed_without_loopback() -> Outcome {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let rule = vec![SeccompRule::new(vec![SeccompCondition::new(
        1,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        libc::SIOCSIFFLAGS,
    )
    .unwrap()])
    .unwrap()];
    child_step_fails_closed_with(
        libc::SYS_ioctl,
        rule,
        libc::EPERM,
        true,
        allow_example(),
        "egress_listener",
    )
}

/// Root host: the helper that writes the maps cannot be made (a rule on
/// its exact clone flags, `CLONE_VM | CLONE_UNTRACED | SIGCHLD`, which no
/// other process of the launch uses): the spawn fails with that errno at
/// that step and nothing runs.
fn child_fails_closed_without_the_map_writer() -> Outcome {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    let flags = (libc::CLONE_VM | libc::CLONE_UNTRACED | libc::SIGCHLD) as u64;
    let rule = vec![SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::Eq,
        flags,
    )
    .unwrap()])
    .unwrap()];
    child_step_fails_closed(libc::SYS_clone, rule, libc::EAGAIN, true, "map_writer")
}

fn prctl_option(option: i32) -> Vec<seccompiler::SeccompRule> {
    use seccompiler::{SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
    vec![SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Eq,
        option as u64,
    )
    .unwrap()])
    .unwrap()]
}

fn child_fails_closed_without_restrict_self() -> Outcome {
    child_step_fails_closed(
        libc::SYS_landlock_restrict_self,
        vec![],
        libc::ENOSYS,
        false,
        "landlock_restrict_self",
    )
}

fn child_fails_closed_without_seccomp() -> Outcome {
    child_step_fails_closed(libc::SYS_seccomp, vec![], libc::ENOSYS, false, "seccomp")
}

fn child_fails_closed_without_userns() -> Outcome {
    child_step_fails_closed(libc::SYS_unshare, vec![], libc::EPERM, false, "unshare")
}

/// Root only: the drop to uid 65534 is a step of its own.
fn child_fails_closed_without_setresuid() -> Outcome {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("this scenario needs root (only a root host drops its uid)".into());
    }
    child_step_fails_closed(libc::SYS_setresuid, vec![], libc::EPERM, false, "setresuid")
}

/// Root only: emptying the capability bounding set fails. In tier
/// landlock it is a step of its own, before `setresuid` (as the sandbox's
/// uid it could not be done); in tier namespaces it is part of the
/// capability drop.
fn child_fails_closed_without_the_bounding_set_drop() -> Outcome {
    if !is_root() {
        return Err(
            "this scenario needs root (only a root host drops the bounding set first)".into(),
        );
    }
    let step = if on_container() {
        "capability_bounding_set"
    } else {
        "capabilities"
    };
    child_step_fails_closed(
        libc::SYS_prctl,
        prctl_option(libc::PR_CAPBSET_DROP),
        libc::EPERM,
        false,
        step,
    )
}

fn child_fails_closed_without_capset() -> Outcome {
    child_step_fails_closed(libc::SYS_capset, vec![], libc::EPERM, false, "capabilities")
}

fn child_fails_closed_without_no_new_privs() -> Outcome {
    child_step_fails_closed(
        libc::SYS_prctl,
        prctl_option(libc::PR_SET_NO_NEW_PRIVS),
        libc::EINVAL,
        false,
        "no_new_privs",
    )
}

fn child_fails_closed_without_setrlimit() -> Outcome {
    // glibc's setrlimit is the prlimit64 syscall.
    child_step_fails_closed(libc::SYS_prlimit64, vec![], libc::EPERM, false, "setrlimit")
}

fn child_fails_closed_without_mount() -> Outcome {
    child_step_fails_closed(libc::SYS_mount, vec![], libc::EPERM, true, "mounts")
}

fn child_fails_closed_without_mount_setattr() -> Outcome {
    child_step_fails_closed(
        libc::SYS_mount_setattr,
        vec![],
        libc::ENOSYS,
        false,
        "mounts",
    )
}

/// The rule for a private tmpfs scratch is added in the child.
fn child_fails_closed_without_landlock_add_rule() -> Outcome {
    child_step_fails_closed(
        libc::SYS_landlock_add_rule,
        vec![],
        libc::ENOSYS,
        true,
        "landlock_add_rule",
    )
}

/// Breach: the program's own directory used to be granted read + execute,
/// so `$HOME/a.out $HOME/.ssh/id_rsa` printed the key. Only the program
/// file (and its loader) is granted now.
fn program_dir_not_granted() -> Outcome {
    let c = canary("PROGRAM-DIR-SECRET");
    let cat = c.path().join("mycat");
    std::fs::copy("/bin/cat", &cat).unwrap();
    std::fs::set_permissions(&cat, std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = c.path().join("secret");
    let r = run(spec(
        cat.to_str().unwrap(),
        &[secret.to_str().unwrap(), "/dev/null"],
    ))?;
    ensure(!r.stdout.contains("PROGRAM-DIR-SECRET"), || {
        format!("the program's directory was readable: {r}")
    })?;
    // The program itself ran (the sentinel: it read /dev/null and failed
    // only on the secret).
    ensure(
        r.outcome == ExitOutcome::Exited(1) && r.stderr.contains("Permission denied"),
        || format!("the program did not run, or failed for another reason: {r}"),
    )
}
