//! The launch half of the backend: resource limits, then `execve` of the
//! Seatbelt launcher in place of the program.
//!
//! Everything is computed in the parent ([`ExecPlan::new`],
//! [`plan_rlimits`]). After fork, the `pre_exec` hook only calls
//! `setrlimit` and `execve` on memory prepared in advance: no allocation,
//! no lock, nothing that is not async-signal-safe.
//!
//! This module is portable Unix code: on Linux its tests run it end to end
//! with a stand-in launcher, which is how the post-fork path is verified on
//! hosts without Seatbelt.

use cordon_core::ChildCommand;
use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cordon_core::Limits;

/// The resource type `setrlimit` takes on this platform.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
type Resource = libc::__rlimit_resource_t;
/// The resource type `setrlimit` takes on this platform.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type Resource = libc::c_int;

/// The rlimits to install in the child, computed in the parent.
#[derive(Debug, Clone)]
pub(crate) struct RlimitPlan(Vec<(Resource, libc::rlimit)>);

impl RlimitPlan {
    /// `(soft, hard)` planned for `resource`, for the Linux stand-in tests.
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn get(&self, resource: Resource) -> Option<(u64, u64)> {
        self.0
            .iter()
            .find(|(r, _)| *r == resource)
            .map(|(_, l)| (l.rlim_cur, l.rlim_max))
    }
}

fn current_hard(resource: Resource) -> libc::rlim_t {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes into `rl`.
    if unsafe { libc::getrlimit(resource, &mut rl) } == 0 {
        rl.rlim_max
    } else {
        libc::RLIM_INFINITY
    }
}

/// Soft and hard limits of `soft`/`hard`, never above the current hard
/// limit (an unprivileged process cannot raise it, and a lower limit is
/// only stricter).
fn clamped(resource: Resource, soft: libc::rlim_t, hard: libc::rlim_t) -> (Resource, libc::rlimit) {
    let max = current_hard(resource);
    let hard = hard.min(max);
    let soft = soft.min(hard);
    (
        resource,
        libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        },
    )
}

/// Plans the rlimits for `limits`.
///
/// - core dumps: always off (`RLIMIT_CORE` 0);
/// - `open_files` → `RLIMIT_NOFILE`;
/// - `cpu_ms` → `RLIMIT_CPU` soft = N, its whole seconds rounded up
///   (SIGXCPU), hard = N + 1;
/// - `file_size_bytes` → `RLIMIT_FSIZE`;
/// - `memory_bytes` → `RLIMIT_AS` (best effort: macOS accepts but does not
///   enforce it);
/// - `max_processes` → `RLIMIT_NPROC` = `nproc_base + max_processes`.
///   `RLIMIT_NPROC` counts every process of the real uid, so `nproc_base`
///   is the number the uid already runs; the sandbox may then add at most
///   `max_processes` more (see the crate docs for why this is approximate).
pub(crate) fn plan_rlimits(limits: &Limits, nproc_base: u64) -> RlimitPlan {
    let mut plan = vec![clamped(libc::RLIMIT_CORE, 0, 0)];
    if let Some(n) = limits.open_files {
        plan.push(clamped(libc::RLIMIT_NOFILE, n, n));
    }
    if let Some(n) = limits.cpu_rlimit_seconds() {
        plan.push(clamped(libc::RLIMIT_CPU, n, n.saturating_add(1)));
    }
    if let Some(n) = limits.file_size_bytes {
        plan.push(clamped(libc::RLIMIT_FSIZE, n, n));
    }
    if let Some(n) = limits.memory_bytes {
        plan.push(clamped(libc::RLIMIT_AS, n, n));
    }
    if let Some(n) = limits.max_processes {
        let n = nproc_base.saturating_add(n);
        plan.push(clamped(libc::RLIMIT_NPROC, n, n));
    }
    RlimitPlan(plan)
}

/// How many processes the calling process's real uid runs right now (what
/// `RLIMIT_NPROC` is checked against on macOS).
#[cfg(target_os = "macos")]
pub(crate) fn processes_of_real_uid() -> io::Result<u64> {
    // <sys/proc_info.h>: PROC_RUID_ONLY.
    const PROC_RUID_ONLY: u32 = 5;
    const INT: usize = std::mem::size_of::<libc::c_int>();
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    // SAFETY: a null buffer asks for the size needed.
    let needed = unsafe { libc::proc_listpids(PROC_RUID_ONLY, uid, std::ptr::null_mut(), 0) };
    if needed <= 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf: Vec<libc::c_int> = vec![0; needed as usize / INT + 256];
    let size = libc::c_int::try_from(buf.len() * INT).unwrap_or(libc::c_int::MAX);
    // SAFETY: `buf` holds `size` writable bytes.
    let filled = unsafe { libc::proc_listpids(PROC_RUID_ONLY, uid, buf.as_mut_ptr().cast(), size) };
    if filled < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (filled as usize / INT).min(buf.len());
    Ok(buf[..n].iter().filter(|&&pid| pid > 0).count() as u64)
}

/// Why a command cannot be relaunched under the launcher.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    #[error("{what} contains a NUL byte and cannot be passed to exec; remove it")]
    Nul { what: &'static str },
    #[error(
        "the program `{0}` is an inherited file descriptor (a SHA-256 pinned program); \
         it would be closed when the Seatbelt launcher executes, so pinned programs \
         cannot run under the macOS backend — unpin the program or pin its interpreter"
    )]
    FdProgram(String),
}

fn cstring(bytes: &[u8], what: &'static str) -> Result<CString, PlanError> {
    CString::new(bytes).map_err(|_| PlanError::Nul { what })
}

/// Every byte the child needs to exec the launcher, prepared in the parent.
pub(crate) struct ExecPlan {
    launcher: CString,
    /// Owns the strings `argv` and `envp` point into.
    _strings: Vec<CString>,
    /// NULL-terminated.
    argv: Vec<*const libc::c_char>,
    /// NULL-terminated.
    envp: Vec<*const libc::c_char>,
    rlimits: RlimitPlan,
}

// SAFETY: the raw pointers point into the heap buffers of `_strings`, which
// the plan owns and never mutates; moving the plan does not move them.
unsafe impl Send for ExecPlan {}
// SAFETY: as above; the plan is read-only after construction.
unsafe impl Sync for ExecPlan {}

impl ExecPlan {
    /// Plans `launcher launcher_args... <program> <args...>` with exactly
    /// the environment variables set on `cmd`.
    ///
    /// The environment is `cmd`'s, which is the whole environment: nothing
    /// is inherited from the host. The launcher runs the program by its
    /// path, so the child sees the program path as `argv[0]`.
    pub(crate) fn new(
        launcher: &Path,
        launcher_args: &[OsString],
        cmd: &ChildCommand,
        rlimits: RlimitPlan,
    ) -> Result<ExecPlan, PlanError> {
        let program = cmd.get_program();
        let program_bytes = program.as_bytes();
        if program_bytes.starts_with(b"/proc/self/fd/") || program_bytes.starts_with(b"/dev/fd/") {
            return Err(PlanError::FdProgram(program.to_string_lossy().into_owned()));
        }
        let launcher_c = cstring(launcher.as_os_str().as_bytes(), "the launcher path")?;
        let mut strings = vec![launcher_c.clone()];
        for a in launcher_args {
            strings.push(cstring(a.as_bytes(), "a launcher argument")?);
        }
        strings.push(cstring(program_bytes, "the program path")?);
        for a in cmd.get_args() {
            strings.push(cstring(a.as_bytes(), "an argument")?);
        }
        let argc = strings.len();
        for (k, v) in cmd.get_envs() {
            let mut kv = Vec::with_capacity(k.len() + v.len() + 1);
            kv.extend_from_slice(k.as_bytes());
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            strings.push(cstring(&kv, "an environment variable")?);
        }
        let mut argv: Vec<*const libc::c_char> =
            strings[..argc].iter().map(|s| s.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> =
            strings[argc..].iter().map(|s| s.as_ptr()).collect();
        envp.push(std::ptr::null());
        Ok(ExecPlan {
            launcher: launcher_c,
            _strings: strings,
            argv,
            envp,
            rlimits,
        })
    }

    /// Runs in the child after fork: async-signal-safe only. Returns only
    /// on failure, and then the child exits without running anything.
    fn exec(&self) -> io::Result<()> {
        for (resource, limit) in &self.rlimits.0 {
            // SAFETY: setrlimit reads a valid rlimit; no allocation.
            if unsafe { libc::setrlimit(*resource, limit) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: every pointer is a NUL-terminated string owned by `self`,
        // and both arrays end with NULL. On success execve does not return.
        unsafe {
            libc::execve(
                self.launcher.as_ptr(),
                self.argv.as_ptr(),
                self.envp.as_ptr(),
            );
        }
        Err(io::Error::last_os_error())
    }

    /// Installs the plan as `cmd`'s last `pre_exec` hook. Hooks run in the
    /// order they were added, after the launcher has applied stdio
    /// redirections and the working directory, so everything the caller configured before
    /// (stdio, cwd, its own hygiene hooks) is in effect when the launcher
    /// replaces the child image. std's own `exec` of the original program
    /// is never reached: either the launcher runs, or the hook returns the
    /// error and the spawn fails.
    pub(crate) fn install(self, cmd: &mut ChildCommand) {
        // SAFETY: `exec` only calls setrlimit and execve on memory the plan
        // owns (see above): it is async-signal-safe.
        unsafe {
            cmd.pre_exec(move |_| self.exec());
        }
    }
}

impl std::fmt::Debug for ExecPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecPlan")
            .field("launcher", &self.launcher)
            .field("argc", &(self.argv.len() - 1))
            .field("envc", &(self.envp.len() - 1))
            .field("rlimits", &self.rlimits)
            .finish()
    }
}
