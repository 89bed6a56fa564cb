//! # cordon-conformance
//!
//! The gate: a sandbox backend may run untrusted code only after it passes
//! the seven probes on the host where it runs — eight for a backend that
//! claims the egress allowlist (`SandboxBackend::claims_egress_allowlist`).
//!
//! | probe | checks (host-verified ones marked ⌂) |
//! |---|---|
//! | P1 | ⌂ a host process of another uid (65534; a root host only) cannot trace the program, open its `/proc/<pid>/{mem,environ,root}`, `setns` into its user namespace, `pidfd_getfd` its fds or signal it; ⌂ a UTS namespace of its own, no host hostname; a sacrificial process that takes the program's own ids at the `ready` hold: no signal, ptrace (⌂ tracer), `process_vm_readv`, `/proc/<pid>` read, pidfd, `getpgid`, enumeration by `getpgid`/`kill(0)`/`stat /proc`; no `prlimit`, `setpriority`, `sched_setscheduler`, `sched_setaffinity`, `ioprio_set` on it (⌂ its limits, nice, policy, affinity, I/O class unchanged, ⌂ alive); no connect to host UNIX sockets (⌂ listeners); no use of the host's SysV queue, segment, semaphore or POSIX queue (⌂ unchanged) and no IPC object left behind (⌂); no opening the harness's pty, no controlling terminal (⌂ `tty_nr`, ⌂ pty modes); ⌂ not uid 0 |
//! | P2 | ⌂ no host-only variable in the program's environment; canaries in suite-made, world-readable dirs (temp dir, a stand-in home) and the host's `/proc/<pid>/environ` unreadable |
//! | P3 | ⌂ no fd beyond 0–2; host fds not fetched via `/proc` or `pidfd_getfd` (⌂ none of the program's fds is the host's file) |
//! | P4 | no TCP (127.0.0.1, ::1), UDP, raw, packet, ICMP or io_uring egress; no datagram to a host pathname or abstract UNIX socket from a datagram `socketpair` (⌂ every listener received nothing) |
//! | P5 | no read/write/create/rename/link outside the grants (⌂ nothing created, ⌂ canary intact with one link); no `chmod`/`fchmodat`/`utimensat`/`setxattr`/`chown` of a same-uid host file (⌂ metadata unchanged); ⌂ setuid/setgid bits planted in scratch not honoured (nosuid mount; as root, run as another uid) |
//! | P6 | ⌂ fd, process, CPU and file-size limits in force (the host's count and `/proc/<pid>/limits`); memory limit (`ENOMEM` where the process's own rlimit refuses the mapping, or ⌂ a kill the backend's sandbox-wide limit counted as its OOM kill; never any other `SIGKILL`, never the host's overcommit policy); ⌂ the deadline kills the whole tree; ⌂ SIGKILL of the spawned process leaves nothing behind; for each limit the backend claims `sandbox` scope for (its `limit_*` host facts): ⌂ workers holding twice the memory limit in anonymous memory, memfds and SysV shm are held to it together, ⌂ chains of auto-reaped processes (invisible to a sum over the live process tree), each under RLIMIT_CPU, are stopped at the CPU limit together, ⌂ files each under RLIMIT_FSIZE fill a discarded scratch only to `disk_bytes` |
//! | P7 | ⌂ NoNewPrivs, ⌂ seccomp filter, ⌂ no capabilities, ⌂ no uid 0 after `setuid(0)`, ⌂ no new user namespace; no bpf/perf/userfaultfd/keyctl/kexec/modules/mount |
//! | P8 | only for a backend that claims the egress allowlist, run with `Network::Allow`: ⌂ the listed target on the host's loopback gets the one request sent through the proxy; the proxy refuses an unlisted port, the target's IP literal and a listed name resolving to loopback (`127.1`); no direct connect to 127.0.0.1, ::1 or any address of any host interface, IPv4 and IPv6 (⌂ bystander listeners on `0.0.0.0` and `[::]` received nothing): only `EPERM`/`EACCES`, or `ENETUNREACH`/`EHOSTUNREACH` (a network namespace of its own with no route out), count; the proxy's port on each host address unreachable; no UDP (⌂), DNS, raw, packet or netlink socket, no TCP Fast Open send. Then run with `Network::Brokered` (the allowlist with the credential broker, which such a backend holds too): ⌂ the bound HTTPS target gets the secret's value as a header and never the placeholder, the child reaching it through the run's CA and getting the echo back as the placeholder; the placeholder sent to an unbound target is refused (⌂ it got none); a tunnel to another port of the bound host is refused, a direct connect to it has no way; ⌂ the value is in nothing the child reports (its environment, the echo) |
//!
//! Every probe also runs positive controls first (write in scratch, read
//! the package dir, fork, pipe, `socketpair`), so a backend that breaks
//! everything cannot pass. A probe is `Pass` only when every check passed,
//! every check it declares was reported, and at least one of them
//! discriminates (below).
//!
//! ## Every declared check, once
//! Each probe declares, for this host, the checks it makes and the
//! strongest evidence each may carry ([`Probe::checks`], given the
//! [`HostConditions`]: a list per probe, plus the checks some hosts add —
//! root, several CPUs, a limit claimed sandbox-wide, the host's own
//! addresses; `expected.rs` holds each run to it). The host holds every run to
//! it: a check missing, reported twice, undeclared, or reported with
//! stronger evidence than declared, or a probe child that does not exit
//! cleanly after its `DONE`, makes the probe `Unreachable`, naming what is
//! wrong. The report carries the declaration's size (`checks_expected`);
//! a report whose probe reported a different number never conforms.
//!
//! ## How the host verifies
//! Each check says who observed its outcome (`evidence`): `host` only when
//! the host itself saw what decides the verdict (a `/proc` entry, a
//! listener, a file, an IPC object, a process, the runner's own
//! accounting), `child` when the verdict rests on anything the probe child
//! reported (an errno, why it stopped, a count of its own). The host finds the program by a random token in its arguments
//! (never by the pid it spawned: a backend may put a monitor and an init in
//! between), and while the child stops at a `HOLD` it reads
//! `/proc/<program>/{status,fd,limits,environ,root,mountinfo}`; after the
//! child it checks its listeners, files, IPC objects and processes.
//!
//! Only `EPERM`/`EACCES` count as a denial, unless a check documents the
//! kernel-source reason another errno proves the protection (`ESRCH` and
//! `ENOENT` for a host pid another pid namespace cannot name, `EINVAL` and
//! `ENOENT` for IPC objects another IPC namespace cannot name, `EROFS` for
//! metadata writes on a read-only mount, `EXDEV` on one filesystem, and
//! `ENOSYS` only where the host confirms the kernel lacks the call).
//!
//! ## Limits at the scope the backend claims
//! A backend says in its host facts, per limit, whether it holds for the
//! sandbox as a whole: `limit_memory`, `limit_cpu`, `limit_disk` (and
//! `limit_processes`) with a value starting `sandbox:` or `per-process:`
//! (or `per-file:`), followed by the mechanism. P6 checks each limit at the
//! scope claimed: a backend that claims `sandbox` gets the sandbox-wide
//! checks (`sandbox-memory-limit`, `sandbox-cpu-limit`,
//! `sandbox-disk-limit`) and fails P6 if it does not hold them. One that
//! says per-process, or says nothing, gets the per-process checks only,
//! and their details say "per-process (not claimed sandbox-wide …)": no
//! sandbox-wide check passes that was not run.
//!
//! ## Proven: a check discriminates
//! Every probe also runs once with no sandbox at all (same harness and
//! hygiene, a private backend whose `wrap` does nothing), concurrently.
//! A check that passes there too is marked `passes_without_sandbox`: the
//! kernel, file modes, hygiene or the host's own confinement refuse it on
//! this host, so its passing is no evidence of confinement, and the
//! summary lists it. A check that *fails* there `discriminates`: its
//! passing under the backend shows the backend at work. A probe whose
//! checks all pass but none discriminates is `Unproven` (with the reason:
//! what on this host provides the property instead, e.g. an outer seccomp
//! filter) and does not conform unless the operator accepts it by name
//! ([`StandardSuite::accept_unproven`], `cordon --accept-unproven P7`),
//! which the report records. State checks compare with the host's own
//! state where it would otherwise be inherited: P7's `seccomp-filter`
//! passes only when the program runs under more filters than the host.
//! The report cache keys reports by the host's own confinement
//! ([`host_state::HostConfinement`]), so a report made under an outer
//! filter is not reused outside it. The baseline runs hostile code
//! unconfined, so every target is one the suite created; it runs under a
//! keeper (a subreaper that kills every process below it when the host
//! dies), and a watchdog process kills what bears the suite's tokens.
//!
//! ## Timing
//! No verdict depends on how loaded the host is. A signal the child sent
//! counts from the moment it is pending (`/proc/<pid>/status`'s `SigPnd`
//! and `ShdPnd`), not from when the scheduler acts on it; a process tree
//! counts as gone when every process of it is a zombie or has a SIGKILL
//! pending. What remains is the runner's own cadence: it reads the
//! sandbox's CPU time every 100 ms on a thread of its own and reports, when
//! it kills, how long and how much the sandbox ran since its last read at
//! or under the limit, so `sandbox-cpu-limit` allows what that span let it
//! burn (plus 40 ms) past the limit: measured, so a loaded host widens it
//! by what its delay allowed and no more (the chains burn 50 ms per link),
//! up to 300 ms, past which the check decides nothing. A stop that is not
//! the runner's own kill (a backend's `SIGKILL` or `SIGXCPU`) earns only
//! the 40 ms. The deadline check sets a 150 ms deadline, which only has to
//! fire.
//!
//! ## Using it in an application
//! The probe child is the application's own executable re-invoked in probe
//! mode. Add one line at the top of `main`, before any thread starts:
//!
//! ```no_run
//! # #[allow(clippy::needless_doctest_main)]
//! fn main() {
//!     cordon_conformance::dispatch_probe_child();
//!     // ... the application ...
//! }
//! ```
//!
//! ## Certifying your own backend
//! Third parties run the suite against their backend from their own tests,
//! with the probe binary this crate ships (`cordon-probe`) or their own
//! test executable. A backend that runs the program as another user says
//! so in [`host_facts`](cordon_core::SandboxBackend::host_facts)
//! (`sandbox_uid`, and `sandbox_gid` unless it is that user's primary
//! group): the suite's targets, such as the sacrificial process, are then
//! that user's, so that only the sandbox, not credentials, protects them.
//! A backend whose limits hold for the sandbox as a whole says so there
//! too (see *Limits at the scope the backend claims*).
//!
//! ```no_run
//! use std::sync::Arc;
//! use cordon_conformance::{ProbeExecutable, StandardSuite};
//! use cordon_core::{ConformanceSuite, SandboxBackend, SandboxPolicy, Availability, WrapError};
//!
//! struct MyBackend;
//! impl SandboxBackend for MyBackend {
//!     fn name(&self) -> &str { "mine" }
//!     fn availability(&self) -> Availability { Availability::Available }
//!     fn wrap(&self, cmd: &mut cordon_core::ChildCommand, policy: &SandboxPolicy) -> Result<cordon_core::WrapResources, WrapError> {
//!         Ok(None) // confine `cmd` here; return what you hold for it, if anything
//!     }
//! }
//!
//! # async fn certify() {
//! let suite = StandardSuite::new()
//!     .with_probe_executable(ProbeExecutable::Path("target/debug/cordon-probe".into()));
//! let report = suite.run(Arc::new(MyBackend)).await;
//! assert!(report.conforms(), "{}", report.summary());
//! # }
//! ```

#![warn(missing_docs)]

// The probes, their harness and the probe child are written for Linux
// (its syscalls, `/proc`, namespaces); elsewhere the suite builds, and
// reports every probe `Unreachable` (see `suite.rs`).
#[cfg(target_os = "linux")]
mod baseline;
pub mod cache;
#[cfg(target_os = "linux")]
mod child;
#[cfg(target_os = "linux")]
mod expected;
#[cfg(target_os = "linux")]
mod gate_cgroup;
#[cfg(target_os = "linux")]
pub mod given_up;
#[cfg(target_os = "linux")]
mod harness;
pub mod host_state;
#[cfg(target_os = "linux")]
mod inspect;
#[cfg(target_os = "linux")]
mod keeper;
#[cfg(target_os = "linux")]
mod kernel;
#[cfg(target_os = "linux")]
mod probes;
#[cfg(target_os = "linux")]
mod registry;
#[cfg(target_os = "linux")]
mod scope;
mod suite;
#[cfg(target_os = "linux")]
mod watchdog;
// Outside Linux only the fold and `unreachable` are used.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
mod verdict;

#[cfg(target_os = "linux")]
pub use registry::{
    ChildRun, HostConditions, Manifest, Probe, ProbeArgs, ProbeContext, ProbeRegistry, Reporter,
    POSITIVE_CONTROLS,
};
pub use suite::{ProbeExecutable, StandardSuite};

/// The first argument that switches a binary into probe-child mode.
pub const PROBE_ARG: &str = "__cordon-probe";

/// Variable [`dispatch_probe_child`] plants in the host environment so P2
/// always has a host-only secret to look for.
pub const CANARY_ENV: &str = "CORDON_CONFORMANCE_CANARY";

/// If this process was started as a probe child, runs the probe and exits;
/// otherwise plants a canary variable for P2 and returns.
///
/// Call it first thing in `main`, before any thread exists (it may set an
/// environment variable, which is only sound while single-threaded).
pub fn dispatch_probe_child() {
    #[cfg(target_os = "linux")]
    dispatch_probe_child_with(&ProbeRegistry::standard());
    #[cfg(not(target_os = "linux"))]
    dispatch(|_| {
        eprintln!("cordon probe child: the conformance probes run on Linux only");
        2
    });
}

/// [`dispatch_probe_child`] for a suite run with `registry`
/// ([`StandardSuite::with_registry`]): a probe child runs that
/// registry's probe. Call it first thing in `main`, as above.
#[cfg(target_os = "linux")]
pub fn dispatch_probe_child_with(registry: &ProbeRegistry) {
    dispatch(|args| run_probe_child(registry, args));
}

fn dispatch(run: impl FnOnce(&[String]) -> i32) {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(PROBE_ARG) {
        std::process::exit(run(&args[2..]));
    }
    if std::env::var_os(CANARY_ENV).is_none() {
        std::env::set_var(CANARY_ENV, format!("secret-{}", verdict::random_token()));
    }
}

/// Runs the probe child mode `args[0]`: one of the harness's own (`noop`,
/// the watchdog, the keeper, …), a probe's id (its positive controls,
/// then its [`Probe::child`]), or `<id>-<name>` (the probe's
/// [`Probe::helper`] `name`).
#[cfg(target_os = "linux")]
fn run_probe_child(registry: &ProbeRegistry, args: &[String]) -> i32 {
    let mode = args.first().map(String::as_str).unwrap_or("");
    let kv = child::arg_map(args.get(1..).unwrap_or(&[]));
    match mode {
        "noop" => return 0,
        watchdog::MODE => return watchdog::run(&kv),
        keeper::MODE => return keeper::run(),
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(60));
            return 0;
        }
        "kernel" => {
            kernel::child();
            return 0;
        }
        "ids" => {
            // SAFETY: the get*id calls cannot fail.
            let ids = unsafe { (libc::geteuid(), libc::getegid()) };
            println!("IDS\t{}\t{}", ids.0, ids.1);
            return 0;
        }
        _ => {}
    }
    let (id, helper) = match mode.split_once('-') {
        Some((id, name)) => (id, Some(name)),
        None => (mode, None),
    };
    let Some(probe) = cordon_core::ProbeId::parse(id).and_then(|id| registry.get(id)) else {
        eprintln!("cordon probe child: unknown mode {mode:?}");
        return 2;
    };
    if let Some(name) = helper {
        return probe.helper(name, &kv).unwrap_or_else(|| {
            eprintln!("cordon probe child: {} has no helper {name:?}", probe.id());
            2
        });
    }
    // Positive controls first: a probe that kills its child (P6's memory
    // limit) must not take them with it.
    let mut r = child::Reporter::new();
    let package_file = kv.get("package_file").cloned().unwrap_or_default();
    child::common_controls(&mut r, &package_file);
    probe.child(&mut r, &kv);
    r.done();
    0
}
