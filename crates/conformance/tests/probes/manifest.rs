//! The host holds every probe run to the probe's declared checks: a probe
//! child that says `DONE` before making them, or that exits non-zero after
//! a complete report, leaves the probe `Unreachable`, naming what is
//! missing or how the child ended. The child here is a forgery: a backend
//! whose hook executes a shell script in the probe child's place (with the
//! child's own arguments, token included, so the host finds it).

use crate::common;

use std::ffi::CString;
use std::sync::Arc;

use cordon_core::{
    Availability, ChildCommand, ConformanceSuite, ProbeId, ProbeStatus, SandboxBackend,
    SandboxPolicy, WrapError, WrapResources,
};

/// Runs `script` with `/bin/sh` instead of the probe child.
struct Forger(&'static str);

struct Exec {
    path: CString,
    _args: Vec<CString>,
    argp: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    _env: Vec<CString>,
}

// SAFETY: the pointers point into the CStrings the struct owns.
unsafe impl Send for Exec {}
// SAFETY: as above; the hook only reads it.
unsafe impl Sync for Exec {}

impl Exec {
    fn run(&self) -> std::io::Error {
        // SAFETY: NUL-terminated strings and NULL-terminated arrays owned
        // by `self`.
        unsafe { libc::execve(self.path.as_ptr(), self.argp.as_ptr(), self.envp.as_ptr()) };
        std::io::Error::last_os_error()
    }
}

impl SandboxBackend for Forger {
    fn name(&self) -> &str {
        "forger"
    }
    fn availability(&self) -> Availability {
        Availability::Available
    }
    fn wrap(&self, cmd: &mut ChildCommand, _: &SandboxPolicy) -> Result<WrapResources, WrapError> {
        use std::os::unix::ffi::OsStrExt;
        let c = |b: &[u8]| CString::new(b).unwrap();
        let mut args = vec![c(b"sh"), c(b"-c"), c(self.0.as_bytes()), c(b"sh")];
        args.extend(cmd.get_args().map(|a| c(a.as_bytes())));
        let env: Vec<CString> = cmd
            .get_envs()
            .map(|(k, v)| c(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect();
        let mut argp: Vec<_> = args.iter().map(|a| a.as_ptr()).collect();
        argp.push(std::ptr::null());
        let mut envp: Vec<_> = env.iter().map(|e| e.as_ptr()).collect();
        envp.push(std::ptr::null());
        let exec = Exec {
            path: c(b"/bin/sh"),
            _args: args,
            argp,
            envp,
            _env: env,
        };
        // SAFETY: the hook only calls execve on data prepared here.
        unsafe {
            cmd.pre_exec(move |_| Err(exec.run()));
        }
        Ok(None)
    }
}

async fn p2_under(script: &'static str) -> cordon_core::ProbeResult {
    let report = common::suite()
        .only(vec![ProbeId::P2])
        .run(Arc::new(Forger(script)))
        .await;
    report.probes.into_iter().next().expect("P2 ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn done_before_the_checks_is_unreachable_with_the_missing_names() {
    let p2 = p2_under("echo DONE").await;
    assert_eq!(p2.status, ProbeStatus::Unreachable, "{p2:#?}");
    let manifest = p2
        .checks
        .iter()
        .find(|c| c.name == "manifest")
        .unwrap_or_else(|| panic!("no manifest verdict: {p2:#?}"));
    for missing in ["read-tmp-canary", "read-home-canary", "control-granted-env"] {
        assert!(manifest.detail.contains(missing), "{}", manifest.detail);
    }
    assert!(manifest.detail.contains("missing:"), "{}", manifest.detail);
    assert!(p2.checks_expected > 0 && p2.checks_expected != p2.checks.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_complete_report_then_a_failing_exit_is_unreachable() {
    // Every check P2's child makes, forged as passing, then exit 3.
    const FORGED: &str = "for n in control-scratch-rw control-package-read control-fork-wait \
        control-pipe control-socketpair control-granted-env read-tmp-canary read-home-canary \
        read-host-environ; do printf 'CHECK\\t%s\\tpass\\tforged\\n' $n; done; echo DONE; exit 3";
    let p2 = p2_under(FORGED).await;
    assert_eq!(p2.status, ProbeStatus::Unreachable, "{p2:#?}");
    let exit = p2
        .checks
        .iter()
        .find(|c| c.name == "child-exit")
        .unwrap_or_else(|| panic!("no child-exit verdict: {p2:#?}"));
    assert!(exit.detail.contains("Exited(3)"), "{}", exit.detail);
    // The forged report itself was complete: only the exit gave it away.
    assert!(
        !p2.checks
            .iter()
            .any(|c| c.name == "manifest" && c.detail.contains("missing")),
        "{p2:#?}"
    );
}
