//! Hygiene and runner selection, with real processes; policy files
//! loaded from real files (`policy_load`) and the sweep of a killed
//! host's scratch (`scratch_sweep`). One binary for the three (the
//! relay's tests, which count this process's threads and fds, keep
//! binaries of their own).

mod policy_load;
mod review_layer;
mod scratch_sweep;

use cordon_core::ChildCommand;
use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cordon_core::*;
use tokio::io::AsyncReadExt;

/// The admission error inside a `select_runner` refusal.
fn unavailable_of(r: Result<&dyn Runner, NoRunner>) -> SandboxUnavailable {
    match r {
        Err(NoRunner::Unavailable(e)) => e,
        Err(NoRunner::NoSandbox) => panic!("expected the admission error, got NoSandbox"),
        Ok(r) => panic!("expected a refusal, got runner {}", r.name()),
    }
}

fn trusted(program: &str, script: &str) -> ChildSpec {
    ChildSpec::new(program)
        .args(["-c", script])
        .trust(TrustTier::Trusted)
}

async fn run_stdout(runner: &dyn Runner, spec: ChildSpec) -> (ExitOutcome, String) {
    let mut child = runner.start(spec).await.expect("spawn");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    (child.wait().await.unwrap(), out)
}

#[tokio::test]
async fn a_program_still_open_for_writing_starts_once_it_is_closed() {
    // As a child forked while the program was written holds it open for
    // writing until its own exec: here another process holds it for
    // 300 ms, and the spawn waits that out instead of failing with
    // ETXTBSY.
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("just-written");
    std::fs::write(&exe, "#!/bin/sh\necho started\n").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut holder = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            "exec 3>>\"$0\"; echo held; sleep 0.3",
            exe.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "held\n");
    // Control: while it is held, an exec fails.
    let busy = std::process::Command::new(&exe).status().unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::ETXTBSY), "{busy}");
    let runner = TrustedProcessRunner::default();
    let spec = ChildSpec::new(&exe).trust(TrustTier::Trusted);
    let (outcome, out) = run_stdout(&runner, spec).await;
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(out, "started\n");
    holder.wait().unwrap();
}

#[tokio::test]
async fn environment_is_built_not_inherited() {
    // cargo sets CARGO_MANIFEST_DIR in the test process; it is not allowlisted.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let runner = TrustedProcessRunner::default();
    let mut spec = trusted(
        "/bin/sh",
        "echo \"canary=${CARGO_MANIFEST_DIR-absent} explicit=$EXPLICIT passed=${CARGO_PKG_NAME-absent}\"",
    )
    .env("EXPLICIT", "yes");
    spec.pass_env.push("CARGO_PKG_NAME".into());
    let (outcome, out) = run_stdout(&runner, spec).await;
    assert!(outcome.success());
    assert_eq!(
        out.trim(),
        "canary=absent explicit=yes passed=cordon-core",
        "child env: {out}"
    );
}

#[tokio::test]
async fn fds_without_cloexec_do_not_reach_the_child() {
    let file = std::fs::File::open("/dev/null").unwrap();
    let fd = file.as_raw_fd();
    // Clear CLOEXEC, as a careless host library would.
    // SAFETY: fcntl on an fd this test owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        assert_eq!(libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC), 0);
    }
    let runner = TrustedProcessRunner::default();
    // fd 1 is the positive control: the check does see open fds.
    let script = format!(
        "for n in 1 {fd}; do if [ -e /proc/$$/fd/$n ]; then echo \"$n open\"; else echo \"$n closed\"; fi; done"
    );
    let (_, out) = run_stdout(&runner, trusted("/bin/sh", &script)).await;
    assert_eq!(out, format!("1 open\n{fd} closed\n"));
    drop(file);
}

#[tokio::test]
async fn scratch_dir_is_private_cwd_and_removed_after_reap() {
    use std::os::unix::fs::PermissionsExt;
    let runner = TrustedProcessRunner::default();
    let mut child = runner
        .start(trusted("/bin/sh", "pwd; echo data > file"))
        .await
        .unwrap();
    let scratch = child.scratch_dir().to_path_buf();
    let mode = std::fs::metadata(&scratch).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert_eq!(Path::new(out.trim()), scratch);
    assert!(child.wait().await.unwrap().success());
    assert!(!scratch.exists(), "scratch dir should be removed");

    // Kept on request.
    let mut child = runner
        .start(trusted("/bin/sh", "echo kept > file").scratch(Scratch::FreshKept))
        .await
        .unwrap();
    let kept = child.scratch_dir().to_path_buf();
    child.wait().await.unwrap();
    assert_eq!(
        std::fs::read_to_string(kept.join("file")).unwrap(),
        "kept\n"
    );
    std::fs::remove_dir_all(&kept).unwrap();

    // A caller's dir is used and never removed.
    let own = tempfile::tempdir().unwrap();
    let mut child = runner
        .start(trusted("/bin/sh", "echo mine > file").scratch(Scratch::Existing(own.path().into())))
        .await
        .unwrap();
    child.wait().await.unwrap();
    assert!(own.path().join("file").exists());
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap().split_whitespace().next();
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

async fn first_line(child: &mut RunningChild) -> String {
    let mut stdout = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while stdout.read(&mut b).await.unwrap() == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    String::from_utf8(line).unwrap()
}

#[tokio::test]
async fn kill_reaches_a_grandchild() {
    let runner = TrustedProcessRunner::default();
    let mut child = runner
        .start(trusted("/bin/sh", "sleep 30 & echo $!; wait"))
        .await
        .unwrap();
    let grandchild: i32 = first_line(&mut child).await.parse().unwrap();
    assert!(alive(grandchild));
    child.kill();
    assert_eq!(
        child.wait().await.unwrap(),
        ExitOutcome::Signaled(libc::SIGKILL)
    );
    assert!(
        !alive(grandchild),
        "grandchild {grandchild} survived kill()"
    );
}

#[tokio::test]
async fn deadline_kills_the_group_and_background_children_die_at_exit() {
    let runner = TrustedProcessRunner::default();
    let spec = trusted("/bin/sh", "sleep 30 & echo $!; wait").limits(Limits {
        deadline: Some(Duration::from_millis(300)),
        ..Limits::default()
    });
    let mut child = runner.start(spec).await.unwrap();
    let grandchild: i32 = first_line(&mut child).await.parse().unwrap();
    assert_eq!(child.wait().await.unwrap(), ExitOutcome::DeadlineExceeded);
    assert!(!alive(grandchild));
    assert_eq!(live_process_group_members(child.pid()), 0);

    // A background child of a program that exits normally dies too.
    let mut child = runner
        .start(trusted("/bin/sh", "sleep 30 & echo $!"))
        .await
        .unwrap();
    let bg: i32 = first_line(&mut child).await.parse().unwrap();
    assert!(child.wait().await.unwrap().success());
    assert!(!alive(bg), "background child {bg} outlived its parent");
}

#[tokio::test]
async fn sha256_pin_mismatch_refuses_and_match_runs() {
    use sha2::Digest;
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("prog");
    std::fs::copy("/bin/true", &prog).unwrap();
    let good: [u8; 32] = sha2::Sha256::digest(std::fs::read(&prog).unwrap()).into();
    let runner = TrustedProcessRunner::default();

    let mut spec = ChildSpec::new(&prog).trust(TrustTier::Trusted);
    spec.program_sha256 = Some(Sha256Pin([0u8; 32]));
    let err = runner.start(spec.clone()).await.unwrap_err();
    assert!(matches!(err, SpawnError::PinMismatch { .. }), "{err}");
    assert!(err.to_string().contains(&hex::encode(good)));

    spec.program_sha256 = Some(Sha256Pin(good));
    let mut child = runner.start(spec).await.unwrap();
    assert!(child.wait().await.unwrap().success());
}

struct FailingBackend {
    panic: bool,
}

impl SandboxBackend for FailingBackend {
    fn name(&self) -> &str {
        if self.panic {
            "panicking"
        } else {
            "failing"
        }
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        _: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        // Half-configure the command first: it must still never run.
        cmd.env("HALF", "done");
        if self.panic {
            panic!("backend bug");
        }
        Err(WrapError::new(self.name(), "cannot set up"))
    }
}

#[tokio::test]
async fn a_backend_whose_wrap_errors_or_panics_never_spawns() {
    // The control: the same spec, spawned without the failing backend,
    // touches its marker; how long that took (here, now) is the pause
    // given to a child that a failed wrap might have started anyway.
    let control = tempfile::tempdir().unwrap();
    let shown = control.path().join("ran");
    let started = std::time::Instant::now();
    let spec = ChildSpec::new("/bin/sh").args(["-c", &format!("touch {}", shown.display())]);
    let mut child = Spawner::hygiene_only(RunnerConfig::default())
        .spawn(&spec)
        .unwrap();
    while !shown.exists() && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(shown.exists(), "control: the spec never touched its marker");
    let pause = started.elapsed() * 2;
    let _ = child.wait().await;
    for panic in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let spawner =
            Spawner::confined(Arc::new(FailingBackend { panic }), RunnerConfig::default());
        let spec = ChildSpec::new("/bin/sh").args(["-c", &format!("touch {}", marker.display())]);
        let err = spawner.spawn(&spec).unwrap_err();
        match (panic, &err) {
            (false, SpawnError::Wrap(_)) | (true, SpawnError::WrapPanicked { .. }) => {}
            _ => panic!("unexpected error: {err}"),
        }
        // A child started despite the error would touch the marker in its
        // own time: twice what the control took is its chance to show (no
        // event says none).
        tokio::time::sleep(pause).await;
        assert!(
            !marker.exists(),
            "child ran despite wrap failure (within {pause:?})"
        );
    }
}

struct FixedSuite(ProbeStatus);

/// The one check of a fixed probe: it discriminates (the suite is a
/// stand-in for a real one that showed the backend confining).
fn fixed_check(status: ProbeStatus) -> CheckResult {
    CheckResult {
        name: "fixed".into(),
        status,
        detail: String::new(),
        evidence: Evidence::Host,
        passes_without_sandbox: false,
        discriminates: true,
    }
}

/// P1–P7 at the fixed status, then P8 passing.
struct WithP8(ProbeStatus);

#[async_trait::async_trait]
impl ConformanceSuite for WithP8 {
    async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport {
        let mut r = FixedSuite(self.0).run(Arc::clone(&backend)).await;
        r.probes.push(ProbeResult {
            id: ProbeId::P8,
            title: "Egress allowlist holds".into(),
            status: ProbeStatus::Pass,
            detail: "fixed".into(),
            checks_expected: 1,
            checks: vec![fixed_check(ProbeStatus::Pass)],
            duration_ms: 0.0,
        });
        ConformanceReport::new(r.backend, r.availability, r.host, r.probes, 0.0)
    }
}

/// A runner configured with an egress allowlist is built only on a report
/// in which P8 ran and passed; without an allowlist, P1–P7 are enough.
#[tokio::test]
async fn an_allowlist_needs_a_backend_that_proved_it() {
    let allow = RunnerConfig {
        network: cordon_core::Network::Allow(vec!["example.com:443".parse().unwrap()]),
        ..RunnerConfig::default()
    };
    let backend = || Arc::new(FailingBackend { panic: false }) as Arc<dyn SandboxBackend>;
    let refused = SandboxRunner::new(backend(), &FixedSuite(ProbeStatus::Pass), allow.clone())
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("P8 (egress allowlist) did not run"),
        "{refused}"
    );
    assert!(SandboxRunner::new(
        backend(),
        &FixedSuite(ProbeStatus::Pass),
        RunnerConfig::default()
    )
    .await
    .is_ok());
    assert!(
        SandboxRunner::new(backend(), &WithP8(ProbeStatus::Pass), allow.clone())
            .await
            .is_ok()
    );
    assert!(
        SandboxRunner::new(backend(), &WithP8(ProbeStatus::Fail), allow)
            .await
            .is_err()
    );
}

/// A backend that claims the egress allowlist (and confines nothing).
struct ClaimsAllowlist;

impl SandboxBackend for ClaimsAllowlist {
    fn name(&self) -> &str {
        "claims-allowlist"
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn claims_egress_allowlist(&self) -> bool {
        true
    }
    fn wrap(
        &self,
        _: &mut ChildCommand,
        _: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        Err(WrapError::new(self.name(), "confines nothing"))
    }
}

/// Core holds a backend to every probe it must pass: one that claims the
/// egress allowlist is refused on a report without P8 even when P1–P7
/// pass and no allowlist is asked for, and admitted with P8 passing.
#[tokio::test]
async fn a_backend_that_claims_the_allowlist_must_show_p8() {
    let backend = || Arc::new(ClaimsAllowlist) as Arc<dyn SandboxBackend>;
    assert_eq!(
        ProbeId::required_of(backend().as_ref()).last(),
        Some(&ProbeId::P8)
    );
    let without = FixedSuite(ProbeStatus::Pass).run(backend()).await;
    assert!(without.conforms() && !without.covers(backend().as_ref()));
    assert!(SandboxRunner::new(
        backend(),
        &FixedSuite(ProbeStatus::Pass),
        RunnerConfig::default()
    )
    .await
    .is_err());
    assert!(SandboxRunner::new(
        backend(),
        &WithP8(ProbeStatus::Pass),
        RunnerConfig::default()
    )
    .await
    .is_ok());
}

/// A probe a suite adds beyond the required ones counts: failing, it
/// refuses the backend; run twice, the report does not conform.
#[tokio::test]
async fn every_probe_that_ran_must_pass_once() {
    let backend = Arc::new(FailingBackend { panic: false }) as Arc<dyn SandboxBackend>;
    let base = FixedSuite(ProbeStatus::Pass)
        .run(Arc::clone(&backend))
        .await;
    let with = |extra: Vec<ProbeResult>| {
        let mut probes = base.probes.clone();
        probes.extend(extra);
        ConformanceReport::new(
            base.backend.clone(),
            base.availability.clone(),
            base.host.clone(),
            probes,
            0.0,
        )
    };
    let extra = |id: ProbeId, status: ProbeStatus| ProbeResult {
        id,
        title: "extra".into(),
        status,
        detail: String::new(),
        checks_expected: 1,
        checks: vec![fixed_check(status)],
        duration_ms: 0.0,
    };
    let p9 = ProbeId::new(9).unwrap();
    assert!(with(vec![extra(p9, ProbeStatus::Pass)]).conforms());
    assert!(!with(vec![extra(p9, ProbeStatus::Fail)]).conforms());
    assert!(!with(vec![extra(ProbeId::P3, ProbeStatus::Pass)]).conforms());
    let mut missing = base.probes.clone();
    missing.remove(2);
    let r = ConformanceReport::new(
        "failing",
        base.availability.clone(),
        base.host.clone(),
        missing,
        0.0,
    );
    assert!(!r.conforms());
    assert!(r.summary().contains("(P3)"), "{}", r.summary());
}

#[async_trait::async_trait]
impl ConformanceSuite for FixedSuite {
    async fn run(&self, backend: Arc<dyn SandboxBackend>) -> ConformanceReport {
        let probes = ProbeId::REQUIRED
            .iter()
            .map(|id| ProbeResult {
                id: *id,
                title: format!("fixed {id}"),
                status: self.0,
                detail: "fixed".into(),
                checks_expected: 1,
                checks: vec![fixed_check(self.0)],
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

struct Unavailable;
impl SandboxBackend for Unavailable {
    fn name(&self) -> &str {
        "gone"
    }
    fn availability(&self) -> Availability {
        Availability::Unavailable {
            reason: "kernel feature X missing: enable it".into(),
        }
    }
    fn host_facts(&self) -> BTreeMap<String, String> {
        BTreeMap::from([("x".into(), "0".into())])
    }
    fn wrap(
        &self,
        _: &mut ChildCommand,
        _: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        unreachable!("never wrapped: unavailable")
    }
}

#[tokio::test]
async fn untrusted_selection_fails_closed_with_the_report() {
    let trusted_runner = TrustedProcessRunner::default();
    let failing = SandboxRunner::new(
        Arc::new(FailingBackend { panic: false }),
        &FixedSuite(ProbeStatus::Fail),
        RunnerConfig::default(),
    )
    .await;
    let err = unavailable_of(select_runner(
        TrustTier::Untrusted,
        &trusted_runner,
        Some(&failing),
    ));
    assert_eq!(err.report.probes.len(), 7);
    assert!(err.to_string().contains("NOT CONFORMING"));
    assert!(select_runner(TrustTier::Trusted, &trusted_runner, Some(&failing)).is_ok());
    // Trusted code needs no sandbox runner; untrusted code gets none.
    assert!(select_runner(TrustTier::Trusted, &trusted_runner, None).is_ok());
    assert!(matches!(
        select_runner(TrustTier::Untrusted, &trusted_runner, None),
        Err(NoRunner::NoSandbox)
    ));

    let unavailable = SandboxRunner::new(
        Arc::new(Unavailable),
        &FixedSuite(ProbeStatus::Pass),
        RunnerConfig::default(),
    )
    .await;
    let err = unavailable_of(select_runner(
        TrustTier::Untrusted,
        &trusted_runner,
        Some(&unavailable),
    ));
    assert!(err.to_string().contains("kernel feature X missing"));
    assert!(err.report.probes.is_empty());

    // A report that conforms, but for another backend, is not accepted: the
    // suite ran against (or was copied from) something else. The report
    // itself is available and all-pass, so the only thing that refuses it
    // is the runner's check that it names the backend being admitted.
    struct Other;
    impl SandboxBackend for Other {
        fn name(&self) -> &str {
            "other"
        }
        fn availability(&self) -> Availability {
            Availability::Available
        }
        fn wrap(
            &self,
            _: &mut ChildCommand,
            _: &SandboxPolicy,
        ) -> Result<cordon_core::WrapResources, WrapError> {
            Ok(None)
        }
    }
    struct Liar;
    #[async_trait::async_trait]
    impl ConformanceSuite for Liar {
        async fn run(&self, _: Arc<dyn SandboxBackend>) -> ConformanceReport {
            FixedSuite(ProbeStatus::Pass).run(Arc::new(Other)).await
        }
    }
    let lie = Liar.run(Arc::new(FailingBackend { panic: false })).await;
    assert!(lie.conforms(), "the lie must be a conforming report");
    assert_eq!(lie.backend, "other");
    let err = SandboxRunner::new(
        Arc::new(FailingBackend { panic: false }),
        &Liar,
        RunnerConfig::default(),
    )
    .await
    .expect_err("a report naming another backend admitted `failing`");
    assert_eq!(err.report.backend, "other");

    // The default tier is untrusted and the trusted runner refuses it.
    let err = trusted_runner
        .start(ChildSpec::new("/bin/true"))
        .await
        .unwrap_err();
    assert!(matches!(err, SpawnError::UntrustedOnTrustedRunner));
}

#[tokio::test]
async fn conforming_suite_admits_and_sandbox_runner_wraps() {
    struct Marking;
    impl SandboxBackend for Marking {
        fn name(&self) -> &str {
            "marking"
        }
        fn availability(&self) -> Availability {
            Availability::Available
        }
        fn wrap(
            &self,
            cmd: &mut ChildCommand,
            policy: &SandboxPolicy,
        ) -> Result<cordon_core::WrapResources, WrapError> {
            cmd.env("WRAPPED_SCRATCH", &policy.scratch_dir);
            Ok(None)
        }
    }
    let sandbox = SandboxRunner::new(
        Arc::new(Marking),
        &FixedSuite(ProbeStatus::Pass),
        RunnerConfig::default(),
    )
    .await;
    let trusted_runner = TrustedProcessRunner::default();
    let runner = select_runner(TrustTier::Untrusted, &trusted_runner, Some(&sandbox)).unwrap();
    assert_eq!(runner.name(), "sandbox:marking");
    let (outcome, out) = run_stdout(
        runner,
        ChildSpec::new("/bin/sh").args(["-c", "echo \"$WRAPPED_SCRATCH\"; pwd"]),
    )
    .await;
    assert!(outcome.success());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], lines[1], "policy scratch dir is the child's cwd");
}

#[tokio::test]
async fn a_limit_raise_is_rejected_not_clamped() {
    let runner = TrustedProcessRunner::new(RunnerConfig {
        ceilings: Limits {
            max_processes: Some(10),
            ..Limits::default_ceilings()
        },
        ..RunnerConfig::default()
    });
    let err = runner
        .start(trusted("/bin/sh", "true").limits(Limits {
            max_processes: Some(11),
            ..Limits::default()
        }))
        .await
        .unwrap_err();
    assert!(
        matches!(err, SpawnError::LimitRaise(ref e) if e.limit == "max_processes"),
        "{err}"
    );
}

#[tokio::test]
async fn missing_program_is_a_clear_error() {
    let runner = TrustedProcessRunner::default();
    let err = runner
        .start(ChildSpec::new("definitely-not-a-program-xyz").trust(TrustTier::Trusted))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
}

/// What the hook of [`StopsItself`] recorded: the launcher's pid (it
/// shares this process's memory).
static STOPPED_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// A backend whose child stops itself (SIGSTOP) before it executes: a
/// launch frozen in its set-up, as a stray signal could leave one.
struct StopsItself;

impl SandboxBackend for StopsItself {
    fn name(&self) -> &str {
        "stops-itself"
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        _: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        // SAFETY: getpid, an atomic store and raise are async-signal-safe.
        unsafe {
            cmd.pre_exec(|_| {
                STOPPED_PID.store(libc::getpid(), std::sync::atomic::Ordering::SeqCst);
                libc::raise(libc::SIGSTOP);
                Ok(())
            });
        }
        Ok(None)
    }
}

#[test]
fn a_launch_stopped_in_its_set_up_is_killed_and_the_spawn_fails() {
    let config = RunnerConfig {
        setup_timeout: Duration::from_millis(500),
        ..RunnerConfig::default()
    };
    let spawner = Spawner::confined(Arc::new(StopsItself), config);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(async { spawner.spawn(&trusted("/bin/sh", "exit 0")).map(|_| ()) });
        let _ = tx.send(r);
    });
    let r = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(r) => r,
        Err(_) => {
            // Unfreeze it so the test process can end, then fail.
            let pid = STOPPED_PID.load(std::sync::atomic::Ordering::SeqCst);
            if pid > 0 {
                // SAFETY: our own stopped child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            panic!("the spawn was still waiting for a stopped launch after 30 s");
        }
    };
    let err = r.expect_err("a stopped launch was reported as started");
    match &err {
        SpawnError::Spawn { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::TimedOut, "{err}")
        }
        other => panic!("unexpected error: {other}"),
    }
    assert!(err.to_string().contains("set-up did not finish"), "{err}");
    let pid = STOPPED_PID.load(std::sync::atomic::Ordering::SeqCst);
    assert!(pid > 0, "the hook never ran");
    // Killed and reaped: the pid names nothing (not even a zombie).
    // SAFETY: kill with signal 0 only checks.
    let gone = unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    assert!(gone, "the stopped launcher {pid} is still there");
}
