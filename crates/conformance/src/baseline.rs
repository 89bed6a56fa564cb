//! The baseline: every probe also runs once with no sandbox at all (same
//! harness, same hygiene, a private backend whose `wrap` does nothing), and
//! each check that passes there too is marked `passes_without_sandbox`
//! (`verdict::mark`).
//!
//! Such a check passes on this host because the kernel, file modes or the
//! runner's hygiene refuse the action, not the backend: its passing under a
//! backend is no evidence of confinement, and the report says so.
//!
//! The baseline runs the same hostile probe code unconfined, so it must be
//! safe: every target a probe aims at is one the suite created for that
//! very run (its own sacrificial process, listeners, files, IPC objects,
//! pty), never anything else of the host — nor anything another local user
//! could swap in for one: the baseline's target dirs are the host uid's
//! alone (0700, `ProbeContext::new`). And it must die with the host:
//! the backend's one hook executes the probe binary as the control's
//! keeper (`keeper.rs`), a subreaper that starts the probe child and kills
//! every process below it when the child ends or the host dies. Before
//! that exec the hook moves the process into the gate's cgroup
//! (`gate_cgroup.rs`) where there is one, which the suite, its watchdog or
//! the next gate kill whole, whatever became of the keeper.

use cordon_core::ChildCommand;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::gate_cgroup::GateCgroup;

use cordon_core::{Availability, SandboxBackend, SandboxPolicy, WrapError};

/// A backend that confines nothing. Private to the suite: it exists only
/// to run the baseline, and no runner can ever be given it. Its processes
/// join the gate's cgroup, if the suite has one.
pub(crate) struct Unconfined(pub Option<Arc<GateCgroup>>);

impl SandboxBackend for Unconfined {
    fn name(&self) -> &str {
        "unconfined-baseline"
    }

    fn availability(&self) -> Availability {
        Availability::Available
    }

    fn host_facts(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        _policy: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        keep(cmd, self.0.clone()).map_err(|e| WrapError::new(self.name(), e))?;
        Ok(None)
    }
}

/// Makes `cmd` execute the keeper instead of the probe child: the same
/// program in `keeper` mode, the child's argv in its environment; in
/// `cgroup` first, if any.
fn keep(cmd: &mut ChildCommand, cgroup: Option<Arc<GateCgroup>>) -> Result<(), String> {
    use std::ffi::{CString, OsString};
    use std::os::unix::ffi::OsStrExt;
    let c = |b: &[u8]| CString::new(b).map_err(|_| "a NUL byte in the command".to_string());
    let path = c(cmd.get_program().as_bytes())?;
    let mut argv: Vec<OsString> = vec![cmd.get_arg0().to_os_string()];
    argv.extend(cmd.get_args().map(|a| a.to_os_string()));
    let keeper_args = [
        c(cmd.get_arg0().as_bytes())?,
        c(crate::PROBE_ARG.as_bytes())?,
        c(crate::keeper::MODE.as_bytes())?,
    ];
    let mut envp: Vec<CString> = Vec::new();
    for (k, v) in cmd.get_envs() {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        envp.push(c(&kv)?);
    }
    let mut kv = crate::keeper::ARGV_ENV.as_bytes().to_vec();
    kv.push(b'=');
    kv.extend_from_slice(crate::keeper::encode(&argv).as_bytes());
    envp.push(c(&kv)?);
    let mut argp: Vec<*const libc::c_char> = keeper_args.iter().map(|a| a.as_ptr()).collect();
    argp.push(std::ptr::null());
    let mut envpp: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envpp.push(std::ptr::null());
    struct Exec {
        path: CString,
        _args: [CString; 3],
        _env: Vec<CString>,
        argp: Vec<*const libc::c_char>,
        envpp: Vec<*const libc::c_char>,
        cgroup: Option<Arc<GateCgroup>>,
    }
    // SAFETY: the pointers point into the CStrings the struct owns, which
    // move with it unchanged (heap data).
    unsafe impl Send for Exec {}
    // SAFETY: as above; the hook only reads it.
    unsafe impl Sync for Exec {}
    impl Exec {
        /// Joins the cgroup and executes the keeper; returns only its
        /// failure (nothing runs unconfined outside the gate's cgroup).
        fn run(&self) -> std::io::Error {
            if let Some(cg) = &self.cgroup {
                if let Err(e) = crate::gate_cgroup::join(cg.join_fd()) {
                    return e;
                }
            }
            // SAFETY: NUL-terminated strings and NULL-terminated arrays
            // owned by `self`.
            unsafe { libc::execve(self.path.as_ptr(), self.argp.as_ptr(), self.envpp.as_ptr()) };
            std::io::Error::last_os_error()
        }
    }
    let exec = Exec {
        path,
        _args: keeper_args,
        _env: envp,
        argp,
        envpp,
        cgroup,
    };
    // SAFETY: the hook only writes to an fd and calls execve on data
    // prepared here (it returns only when that fails): async-signal-safe.
    unsafe {
        cmd.pre_exec(move |_| Err(exec.run()));
    }
    Ok(())
}
