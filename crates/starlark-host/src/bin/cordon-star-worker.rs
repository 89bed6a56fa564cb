//! The Starlark worker as a stand-alone binary, for this crate's tests and
//! for hosts that configure an explicit worker path
//! (`WorkerProgram::path`). Applications normally call
//! [`cordon_starlark::dispatch_worker`] at the top of their own
//! `main` instead.
//!
//! With the `probe-child` feature (on for this crate's tests) the same
//! binary also serves as the conformance probe child, so a test can admit a
//! `SandboxRunner` with it.

fn main() {
    #[cfg(feature = "probe-child")]
    cordon_conformance::dispatch_probe_child();
    cordon_starlark::dispatch_worker();
    eprintln!(
        "cordon-star-worker: started by a Starlark host (argv[1] = {}), not by hand",
        cordon_starlark::internals::WORKER_ARG
    );
    std::process::exit(2);
}
