//! # cordon-conformance
//!
//! The gate: a sandbox backend may run untrusted code only after it passes
//! the seven probes on the host where it runs.
//!
//! | probe | checks |
//! |---|---|
//! | P1 | no signal/ptrace/`process_vm_readv`/`/proc` access to a host process, no connect to host UNIX sockets, no controlling tty, not uid 0 |
//! | P2 | host-only env vars absent; canary files in the temp dir and `$HOME` unreadable |
//! | P3 | no fd beyond 0–2, host fds not reachable via `/proc` or `pidfd_getfd` |
//! | P4 | no TCP (127.0.0.1, ::1), UDP, raw, packet, ICMP or io_uring egress |
//! | P5 | no read/write/create/rename/link outside the grants |
//! | P6 | process, memory, fd, CPU, file-size limits; the deadline kills the whole tree |
//! | P7 | NoNewPrivs, no capabilities, no setuid(0), no user namespace, no bpf/perf/userfaultfd/keyctl/kexec/modules/mount |
//!
//! Every probe also runs positive controls (write in scratch, read the
//! package dir, fork, pipe, `socketpair`), so a backend that breaks
//! everything cannot pass; and the host verifies outcomes itself where it
//! can (listeners received nothing, canaries unchanged, the sacrificial
//! process alive). A probe is `Pass` only when every check passed.
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
//! test executable:
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
//!     fn wrap(&self, cmd: &mut std::process::Command, policy: &SandboxPolicy) -> Result<(), WrapError> {
//!         Ok(()) // confine `cmd` here
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

mod baseline;
mod child;
mod harness;
mod inspect;
mod kernel;
mod probes;
mod suite;

pub use child::PROBE_ARG;
pub use suite::{ProbeExecutable, StandardSuite};

/// Variable [`dispatch_probe_child`] plants in the host environment so P2
/// always has a host-only secret to look for.
pub const CANARY_ENV: &str = "CORDON_CONFORMANCE_CANARY";

/// If this process was started as a probe child, runs the probe and exits;
/// otherwise plants a canary variable for P2 and returns.
///
/// Call it first thing in `main`, before any thread exists (it may set an
/// environment variable, which is only sound while single-threaded).
pub fn dispatch_probe_child() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(PROBE_ARG) {
        std::process::exit(run_probe_child(&args[2..]));
    }
    if std::env::var_os(CANARY_ENV).is_none() {
        std::env::set_var(CANARY_ENV, format!("secret-{}", harness::random_token()));
    }
}

fn run_probe_child(args: &[String]) -> i32 {
    let mut r = child::Reporter::new();
    let mode = args.first().map(String::as_str).unwrap_or("");
    let kv = child::arg_map(args.get(1..).unwrap_or(&[]));
    let package_file = kv.get("package_file").cloned().unwrap_or_default();
    match mode {
        "noop" => return 0,
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
        "sacrificial" => {
            probes::p1::sacrificial(&kv);
            return 0;
        }
        "P6-tree" => {
            probes::p6::tree(&mut r);
            return 0;
        }
        _ => {}
    }
    // Positive controls first: a probe that kills its child (P6's memory
    // limit) must not take them with it.
    child::common_controls(&mut r, &package_file);
    match mode {
        "P1" => probes::p1::child(&mut r, &kv),
        "P2" => probes::p2::child(&mut r, &kv),
        "P3" => probes::p3::child(&mut r, &kv),
        "P4" => probes::p4::child(&mut r, &kv),
        "P5" => probes::p5::child(&mut r, &kv),
        "P6" => probes::p6::child(&mut r, &kv),
        "P7" => probes::p7::child(&mut r, &kv),
        other => {
            eprintln!("cordon probe child: unknown mode {other:?}");
            return 2;
        }
    }
    r.done();
    0
}
