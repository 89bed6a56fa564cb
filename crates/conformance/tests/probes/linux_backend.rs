//! The Linux backend against the suite: with only its base layers
//! (`Layers::BASE`: user namespace, rlimits, no capabilities,
//! no_new_privs, Landlock, the seccomp deny-list) exactly the checks of
//! what the optional layers close fail and every other check passes; with
//! all its layers it conforms, holding its limits sandbox-wide where it
//! claims to; and a backend that claims sandbox-wide limits with only
//! per-process ones underneath fails P6's sandbox-wide checks.

use crate::common;

use cordon_core::ChildCommand;
use std::collections::BTreeMap;
use std::sync::Arc;

use cordon_backend_linux::{Layers, LinuxBackend};
use cordon_core::{
    Availability, ProbeId, ProbeStatus, SandboxBackend, SandboxPolicy, WrapError, WrapResources,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_layers_fail_exactly_the_layered_checks() {
    let backend = LinuxBackend::with_layers(Layers::BASE);
    let why = backend.availability().reason().map(str::to_string);
    assert!(
        why.is_none(),
        "the Linux backend must be available here: {why:?}"
    );
    let report = common::run(common::suite(), Arc::new(backend)).await;
    let as_root = common::is_root();
    let diff = common::differences(
        &report,
        &common::all_checks(as_root),
        &common::base_fails(as_root),
    );
    assert!(
        diff.is_empty(),
        "BASE (as {}) differs from the table:\n{}\n\nreport:\n{}",
        if as_root { "root" } else { "non-root" },
        diff.join("\n"),
        common::dump(&report)
    );
    for p in &report.probes {
        for c in &p.checks {
            assert_ne!(c.status, ProbeStatus::Unreachable, "{} {}", p.id, c.name);
        }
    }
    assert!(!report.conforms());
    // BASE says its limits are per process: no sandbox-wide check is
    // made, and the report says why.
    let problems = common::scope_problems(&report);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// With every layer, the backend conforms on this host (the test that
/// would fail were a layer the probes need missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_backend_conforms() {
    let backend = LinuxBackend::new();
    let why = backend.availability().reason().map(str::to_string);
    assert!(
        why.is_none(),
        "the Linux backend must be available here: {why:?}"
    );
    let report = common::run(common::suite(), Arc::new(backend)).await;
    assert!(
        report.conforms(),
        "{}\n\nreport:\n{}",
        report.summary(),
        common::dump(&report)
    );
    // Every limit it claims sandbox-wide was checked sandbox-wide, by the
    // host; as root on this machine (cgroup v1 memory, pids, cpuacct) that
    // is memory, CPU and disk.
    let problems = common::scope_problems(&report);
    assert!(
        problems.is_empty(),
        "{}\n\nreport:\n{}",
        problems.join("\n"),
        common::dump(&report)
    );
    if common::is_root() {
        for (name, key, _) in common::SANDBOX_CHECKS {
            assert!(
                common::claims_sandbox(&report, key),
                "as root here the backend must claim {key} sandbox-wide (for {name}): {:?}",
                report.host.backend_facts.get(key)
            );
        }
    }
}

/// A test double for "the old mechanism with a new claim": the Linux
/// backend without its sandbox-wide limits (no cgroup, no CPU sum for the
/// runner: rlimits per process only), handed a discarded scratch as if it
/// were kept (so the host's directory is bound in, not a tmpfs of
/// `disk_bytes`), whose host facts nevertheless claim `sandbox` scope for
/// every limit.
struct ClaimsSandbox(LinuxBackend);

impl SandboxBackend for ClaimsSandbox {
    fn name(&self) -> &str {
        "claims-sandbox"
    }

    fn availability(&self) -> Availability {
        self.0.availability()
    }

    fn host_facts(&self) -> BTreeMap<String, String> {
        let mut facts = self.0.host_facts();
        for key in ["limit_memory", "limit_processes", "limit_cpu", "limit_disk"] {
            facts.insert(
                key.into(),
                "sandbox: claimed by a test double with per-process limits only".into(),
            );
        }
        facts
    }

    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<WrapResources, WrapError> {
        let mut policy = policy.clone();
        policy.scratch_persists = true;
        self.0.wrap(cmd, &policy)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_sandbox_scope_without_holding_it_fails_p6() {
    let backend = ClaimsSandbox(LinuxBackend::with_layers(Layers {
        sandbox_limits: false,
        ..Layers::ALL
    }));
    let why = backend.availability().reason().map(str::to_string);
    assert!(
        why.is_none(),
        "the Linux backend must be available: {why:?}"
    );
    let report = common::run(common::suite().only(vec![ProbeId::P6]), Arc::new(backend)).await;
    let p6 = &report.probes[0];
    assert_eq!(p6.status, ProbeStatus::Fail, "{}", common::dump(&report));
    for c in &p6.checks {
        let want = if common::SANDBOX_CHECKS.iter().any(|(n, _, _)| *n == c.name) {
            ProbeStatus::Fail
        } else {
            ProbeStatus::Pass
        };
        assert_eq!(
            c.status,
            want,
            "{} {}\n\nreport:\n{}",
            c.name,
            c.detail,
            common::dump(&report)
        );
    }
    for (name, _, _) in common::SANDBOX_CHECKS {
        let c = common::p6_check(&report, name).expect("the claimed check is made");
        assert_eq!(c.evidence, cordon_core::Evidence::Host, "{name}");
    }
}

/// A test double for "a backend that enforces the CPU limit itself, late":
/// the whole Linux backend, whose resources hide the sandbox's CPU time
/// from the runner (so the runner's watch never fires) and instead kill
/// the sandbox's leader with `SIGKILL` once the backend counts twice the
/// limit. Only the runner's own kill, whose lateness it measures, may
/// excuse an overshoot: this one must fail `sandbox-cpu-limit` (it passed
/// while any `SIGKILL` earned the watch's nominal slack).
struct KillsLate(LinuxBackend);

/// The double's resources: the backend's own, behind a killer thread.
#[derive(Debug)]
struct LateKiller {
    inner: Arc<dyn cordon_core::SandboxResources>,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl cordon_core::SandboxResources for LateKiller {
    fn memory_limit_hit(&self) -> bool {
        self.inner.memory_limit_hit()
    }
    fn processes_left(&self) -> Option<bool> {
        self.inner.processes_left()
    }
    fn exit_status(&self, leader_status: i32) -> Option<i32> {
        self.inner.exit_status(leader_status)
    }
    fn started(&self, pid: u32) {
        self.inner.started(pid);
        // A pidfd names this very process, whatever later reuses its pid.
        // SAFETY: pidfd_open on the pid the runner just spawned.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as i32;
        assert!(fd >= 0, "pidfd_open of the sandbox's leader");
        let (inner, done) = (Arc::clone(&self.inner), Arc::clone(&self.done));
        std::thread::spawn(move || {
            let twice = std::time::Duration::from_millis(2 * 200);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if inner.cpu_time().is_some_and(|t| t > twice) {
                    // SAFETY: a signal through our own pidfd.
                    unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd, libc::SIGKILL, 0, 0) };
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            // SAFETY: closing our own fd.
            unsafe { libc::close(fd) };
        });
    }
}

impl Drop for LateKiller {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl SandboxBackend for KillsLate {
    fn name(&self) -> &str {
        "kills-late"
    }

    fn availability(&self) -> Availability {
        self.0.availability()
    }

    fn host_facts(&self) -> BTreeMap<String, String> {
        self.0.host_facts()
    }

    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<WrapResources, WrapError> {
        Ok(self.0.wrap(cmd, policy)?.map(|inner| {
            Box::new(LateKiller {
                inner: Arc::from(inner),
                done: Arc::default(),
            }) as Box<dyn cordon_core::SandboxResources>
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_limit_the_backend_enforces_late_itself_fails_p6() {
    if !common::is_root() {
        // Without a cgroup the backend counts no sandbox-wide CPU time
        // for the double to kill on (and claims no sandbox scope).
        eprintln!("not run: needs root, for the backend's cgroup");
        return;
    }
    let backend = KillsLate(LinuxBackend::new());
    let report = common::run(common::suite().only(vec![ProbeId::P6]), Arc::new(backend)).await;
    let c = common::p6_check(&report, "sandbox-cpu-limit").expect("the check is made");
    assert_eq!(c.status, ProbeStatus::Fail, "{}", common::dump(&report));
}
