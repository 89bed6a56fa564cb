//! Every check must be able to fail. Under the no-op backend each
//! non-control check has the status `common::noop_passes` / `all_checks`
//! give for this host (root and other users differ), none is
//! `Unreachable`, and exactly the checks that pass are marked
//! `passes_without_sandbox` in the report: their passing under a real
//! backend is no evidence of confinement. P2/P3's hygiene checks fail once
//! hygiene is off. A monitor process between the host and the program (as
//! a backend with a PID namespace has) changes none of it: the host finds
//! the program by its token, never by the spawned pid.

use crate::common;

use std::sync::Arc;

use cordon_backend_noop::NoopBackend;
use cordon_core::{
    Availability, ConformanceReport, HygieneOverrides, ProbeId, ProbeStatus, SandboxBackend,
    SandboxPolicy, WrapError,
};

fn check_status(report: &ConformanceReport, probe: ProbeId, check: &str) -> ProbeStatus {
    let p = report
        .probes
        .iter()
        .find(|p| p.id == probe)
        .expect("probe ran");
    p.checks
        .iter()
        .find(|c| c.name == check)
        .unwrap_or_else(|| panic!("{probe} has no check {check}: {:#?}", p.checks))
        .status
}

/// The table for this host (plus `also_pass`), with every difference
/// listed.
fn assert_noop_table(report: &ConformanceReport, also_pass: &[(ProbeId, &str)]) {
    let as_root = common::is_root();
    let all = common::all_checks(as_root);
    let mut passes = common::noop_passes(as_root);
    passes.extend(also_pass.iter().map(|(p, n)| (*p, n.to_string())));
    let fails: std::collections::BTreeSet<_> = all.difference(&passes).cloned().collect();
    let diff = common::differences(report, &all, &fails);
    assert!(
        diff.is_empty(),
        "noop table (as {}) differs:\n{}\n\nreport:\n{}",
        if as_root { "root" } else { "non-root" },
        diff.join("\n"),
        common::dump(report)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noop_backend_fails_every_check_but_the_listed_ones() {
    let report = common::run(common::suite(), Arc::new(NoopBackend)).await;
    let text = report.summary();
    assert_eq!(report.probes.len(), 7, "{text}");
    for p in &report.probes {
        assert_eq!(p.status, ProbeStatus::Fail, "{} under noop:\n{text}", p.id);
    }
    assert!(!report.conforms());
    assert_noop_table(&report, &[]);
    // Noop states no scope for its limits: no sandbox-wide check is made,
    // and the per-process checks say so.
    let problems = common::scope_problems(&report);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The positive controls still worked: failures are breaches, not a
    // broken probe; and they are never marked as passing without a sandbox.
    for p in &report.probes {
        for c in p.checks.iter().filter(|c| c.name.starts_with("control-")) {
            assert_eq!(
                c.status,
                ProbeStatus::Pass,
                "{} {}: {}",
                p.id,
                c.name,
                c.detail
            );
            assert!(!c.passes_without_sandbox, "{} {}", p.id, c.name);
        }
    }
    // The report marks exactly the checks that pass as passing without a
    // sandbox (noop confines nothing, so it is its own baseline), and the
    // summary names them.
    let passes = common::noop_passes(common::is_root());
    for p in &report.probes {
        for c in p.checks.iter().filter(|c| !c.name.starts_with("control-")) {
            let listed = passes.contains(&(p.id, c.name.clone()));
            assert_eq!(
                c.passes_without_sandbox, listed,
                "{} {}: passes_without_sandbox",
                p.id, c.name
            );
            if listed {
                assert!(text.contains(&format!("{} {}", p.id, c.name)), "{text}");
            }
        }
    }
    // The JSON round-trips with the new fields.
    let json = serde_json::to_string(&report).unwrap();
    let back: ConformanceReport = serde_json::from_str(&json).unwrap();
    for (a, b) in back.probes.iter().zip(&report.probes) {
        assert_eq!(a.checks, b.checks);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_and_p3_fail_when_hygiene_is_off() {
    let report = common::run(
        common::suite()
            .only(vec![ProbeId::P2, ProbeId::P3])
            .without_hygiene_for_tests(HygieneOverrides {
                inherit_env: true,
                keep_inherited_fds: true,
            }),
        Arc::new(NoopBackend),
    )
    .await;
    assert_eq!(
        check_status(&report, ProbeId::P2, "env-canary"),
        ProbeStatus::Fail,
        "{}",
        report.summary()
    );
    assert_eq!(
        check_status(&report, ProbeId::P3, "inherited-fds"),
        ProbeStatus::Fail,
        "{}",
        report.summary()
    );
    assert!(!report.conforms(), "a partial run never conforms");
}

/// A no-op backend that puts a monitor between the host and the program:
/// the spawned process forks, never execs, waits for the program and
/// mirrors its end, like the monitor of a backend with a PID namespace.
/// Only a test double.
struct ForkingMonitor;

impl SandboxBackend for ForkingMonitor {
    fn name(&self) -> &str {
        "forking-monitor"
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn wrap(
        &self,
        cmd: &mut cordon_core::ChildCommand,
        _policy: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        // Raw `clone`s, not libc's `fork` (whose atfork handlers take the
        // host's locks in a child of a child that shares the host's
        // memory): the launched process makes the monitor a child of the
        // host (`CLONE_PARENT`) and hands the launch over to it; the
        // monitor leads a session of its own and forks the program.
        fn fork(flags: libc::c_int) -> libc::c_long {
            // SAFETY: a clone without CLONE_VM and without a new stack is a
            // fork: the child continues on its copy of this stack.
            unsafe {
                libc::syscall(
                    libc::SYS_clone,
                    (flags | libc::SIGCHLD) as libc::c_ulong,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )
            }
        }
        // SAFETY: clone, setsid, waitpid, kill and _exit are
        // async-signal-safe; the monitor branch never returns into the exec
        // path.
        unsafe {
            cmd.pre_exec(|ctx| {
                let monitor = fork(libc::CLONE_PARENT);
                if monitor < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if monitor > 0 {
                    ctx.hand_over(monitor as libc::pid_t);
                }
                libc::setsid();
                let pid = fork(0) as libc::pid_t;
                if pid < 0 {
                    libc::_exit(127);
                }
                if pid == 0 {
                    return Ok(()); // the program: go on to exec
                }
                // The monitor never execs, so it must not keep the host's
                // fds (among them the pipe through which the spawner
                // learns that exec happened: it would wait forever).
                libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                let mut st = 0;
                while libc::waitpid(pid, &mut st, 0) < 0 {}
                if libc::WIFSIGNALED(st) {
                    libc::signal(libc::WTERMSIG(st), libc::SIG_DFL);
                    libc::kill(libc::getpid(), libc::WTERMSIG(st));
                }
                libc::_exit(libc::WEXITSTATUS(st));
            });
        }
        Ok(None)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitor_before_the_program_changes_no_verdict() {
    let report = common::run(common::suite(), Arc::new(ForkingMonitor)).await;
    // The same table as plain noop: every host-side check found the program
    // by its token (none is Unreachable), and killing the spawned monitor
    // leaves the program behind, which P6 reports. One check differs, for a
    // real reason: the monitor leads the session, the program does not, and
    // only a session leader can take a controlling terminal (TIOCSCTTY).
    assert_noop_table(&report, &[(ProbeId::P1, "controlling-tty")]);
    assert_eq!(
        check_status(&report, ProbeId::P6, "parent-killed-leaves-nothing"),
        ProbeStatus::Fail
    );
}
